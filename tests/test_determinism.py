"""determinism: bitwise-identical outputs and gradients run after run and process after process, and
batch invariance of y and dx (a row's bits do not depend on what else is in the batch)."""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import subprocess
import sys

import pytest
import torch

from helpers import make_inputs, run
from paths import PATHS, assert_path, path_context

pytestmark = pytest.mark.determinism

HERE = pathlib.Path(__file__).parent


def digest(outs) -> str:
    h = hashlib.sha256()
    for t in outs:
        h.update(t.detach().contiguous().cpu().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _case(path: str, seed: int):
    width = PATHS[path][0]
    rows = 300 if torch.cuda.is_available() else 70
    assert_path(path, (rows, width), torch.bfloat16)
    return make_inputs((rows, width), torch.bfloat16, seed=seed, param_dtype=torch.float32)


@pytest.mark.parametrize("path", sorted(PATHS))
def test_bitwise_repeats(path, seed):
    inp = _case(path, seed)
    with path_context(path):
        first = digest(run(inp))
        for _ in range(3):
            assert digest(run(inp)) == first


@pytest.mark.parametrize("path", sorted(PATHS))
def test_bitwise_across_processes(path, seed):
    """Two fresh interpreters compute the same case; their digests equal each other and this process's."""
    with path_context(path):
        here = digest(run(_case(path, seed)))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(HERE.parent), env.get("PYTHONPATH", "")])
    code = f"import json, sys, conftest_free_digest as d; print(json.dumps(d.main({path!r}, {seed})))"
    # Both children at once: fresh processes either way, half the wall time.
    children = [
        subprocess.Popen(
            [sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    digests = []
    for child in children:
        stdout, stderr = child.communicate(timeout=600)
        assert child.returncode == 0, stderr[-3000:]
        digests.append(json.loads(stdout.strip().splitlines()[-1]))
    assert digests[0] == digests[1] == here


@pytest.mark.parametrize("path", sorted(PATHS))
def test_batch_invariance(path, seed):
    """Rows computed inside a batch equal the same rows computed alone or in another batch, bit for bit."""
    inp = _case(path, seed)
    with path_context(path):
        y, dx, *_ = run(inp)
        for lo, hi in [(0, 1), (5, 6), (3, 40), (17, inp.x.shape[0])]:
            part = make_inputs(
                tuple(inp.x[lo:hi].shape), torch.bfloat16, seed=seed, param_dtype=torch.float32
            )
            part.x = inp.x.detach()[lo:hi].clone().requires_grad_()
            part.dy = inp.dy[lo:hi].clone()
            part.alpha, part.gamma, part.beta = (inp.alpha.detach().clone().requires_grad_(),
                                                 inp.gamma.detach().clone().requires_grad_(),
                                                 inp.beta.detach().clone().requires_grad_())  # fmt: skip
            y_part, dx_part, *_ = run(part)
            assert torch.equal(y_part.view(torch.int16), y[lo:hi].view(torch.int16)), f"y rows {lo}:{hi}"
            assert torch.equal(dx_part.view(torch.int16), dx[lo:hi].view(torch.int16)), f"dx rows {lo}:{hi}"
