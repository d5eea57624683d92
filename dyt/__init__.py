"""Fused DyT (Dynamic Tanh) kernels: y = gamma * tanh(alpha * x) + beta, forward and backward in Triton.

The public names load lazily, so `python -m dyt report` and `python -m dyt gate` run where neither torch
nor Triton is installed (a CI step that only publishes reports).
"""

from __future__ import annotations

import importlib

__all__ = [
    "Converted",
    "DyT",
    "PackedDyT",
    "alpha_parameters",
    "convert_layernorm",
    "convert_norms",
    "dyt",
    "dyt_channels_first",
    "dyt_packed",
]
__version__ = "0.2.0"  # the package's one version: pyproject.toml reads it, `dyt --version` prints it

_HOMES = {"dyt": "dyt.ops", "dyt_channels_first": "dyt.ops", "dyt_packed": "dyt.ops", "DyT": "dyt.module",
          "PackedDyT": "dyt.module", "Converted": "dyt.module", "convert_layernorm": "dyt.module",
          "convert_norms": "dyt.module",
          "alpha_parameters": "dyt.module"}  # fmt: skip


# Submodules a user reaches as attributes after `import dyt` (dyt.fp8.dyt_fp8, docs/fp8.md).
_SUBMODULES = ("fp8", "float8_training")


def __getattr__(name: str):
    if name in _HOMES:
        value = getattr(importlib.import_module(_HOMES[name]), name)
        globals()[name] = value
        return value
    if name in _SUBMODULES:
        return importlib.import_module(f"dyt.{name}")
    raise AttributeError(f"module 'dyt' has no attribute {name!r}")
