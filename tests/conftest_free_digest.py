"""Child-process side of the cross-process determinism test: same case, same digest, no pytest."""

from __future__ import annotations

import os

os.environ.setdefault("DYT_POISON_OUTPUTS", "1")

import torch  # noqa: E402

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


def main(path: str, seed: int) -> str:
    from helpers import run
    from paths import path_context
    from test_determinism import _case, digest

    with path_context(path):
        return digest(run(_case(path, seed)))
