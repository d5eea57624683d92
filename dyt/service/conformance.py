"""The implementations the conformance suite judges (tests/test_conformance.py, `--impl NAME`).

An implementation is a differentiable callable (x, alpha, gamma, beta) -> y with DyT's meaning:
y = gamma * tanh(alpha * x) + beta over x's last dimension, beta possibly None. Built-ins: `dyt` (this
project), `eager` (the paper's module's expression, plain PyTorch), `compile` (torch.compile of that
expression), `liger` (Liger-Kernel's LigerDyTFunction, where it imports); any other name is
`module:attr`, imported. `resolve` says what is wrong with a name before any test runs.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass

import torch

BUILTINS = ("dyt", "eager", "compile", "liger")


@dataclass(frozen=True)
class Impl:
    """One implementation under test: its name (as given to --impl), the callable, and whether it is this
    project's own (dyt's internal checks, launch plans and mutants, apply to it alone)."""

    name: str
    fn: Callable
    ours: bool = False


def eager_dyt(x, alpha, gamma, beta=None):
    """The paper's module's forward (`tanh(alpha * x) * weight + bias`), plain PyTorch."""
    y = torch.tanh(alpha * x) * gamma
    return y if beta is None else y + beta


def _compiled_eager():
    # Every shape of the suite compiles once; past Dynamo's default limit it would run eager silently.
    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, max(1024, getattr(torch._dynamo.config, name)))
    return torch.compile(eager_dyt)


def _liger():
    from liger_kernel.ops.dyt import LigerDyTFunction

    def liger_dyt(x, alpha, gamma, beta=None):
        return LigerDyTFunction.apply(x, alpha, gamma, beta)

    return liger_dyt


def _dyt():
    def dyt_dyt(x, alpha, gamma, beta=None):
        # Imported at the call: resolving --impl at pytest's configure must not load the kernels before a
        # suite's patches (tests/mutants.py) are in place.
        from dyt.ops import dyt

        return dyt(x, alpha, gamma, beta)

    return dyt_dyt


_FACTORIES = {"dyt": _dyt, "eager": lambda: eager_dyt, "compile": _compiled_eager, "liger": _liger}


def resolve(name: str) -> Impl:
    """The implementation called name; ValueError naming the problem (unknown name, a module or attribute
    that does not import, not callable, a signature that cannot take (x, alpha, gamma, beta))."""
    if name in _FACTORIES:
        try:
            fn = _FACTORIES[name]()
        except ImportError as exc:
            raise ValueError(f"--impl {name}: its library does not import here: {exc}") from exc
        return Impl(name, fn, ours=name == "dyt")
    if ":" not in name:
        raise ValueError(
            f"--impl {name!r}: not a built-in ({', '.join(BUILTINS)}) and not of the form module:attr"
        )
    module_name, _, attr = name.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"--impl {name}: module {module_name!r} does not import: {exc}") from exc
    fn = module
    for part in attr.split("."):
        if not hasattr(fn, part):
            raise ValueError(f"--impl {name}: {module_name} has no attribute {attr!r}")
        fn = getattr(fn, part)
    if not callable(fn):
        raise ValueError(f"--impl {name}: {attr} is a {type(fn).__name__}, not a callable")
    try:
        inspect.signature(fn).bind(object(), object(), object(), None)
    except TypeError as exc:
        raise ValueError(f"--impl {name}: {attr} cannot be called as (x, alpha, gamma, beta): {exc}") from exc
    except ValueError:
        pass  # no signature to inspect (a builtin): the tests will tell
    return Impl(name, fn)
