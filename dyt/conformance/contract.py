"""The contract's inputs, its one call, and its judgement: what dyt's own suites and the conformance checks
share (the suites import these from here; nothing is copied).

make_inputs draws fresh random inputs (dyt.reference.random_inputs: never zeros, reproducible from a seed);
forward_backward runs an implementation forward and backward once; check_against_reference holds every
output and gradient to the float64 reference under the one tolerance table (dyt.conformance.tolerances).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import torch

from dyt import reference
from dyt.conformance.tolerances import assert_close

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
OUTPUTS = ("y", "dx", "dalpha", "dgamma", "dbeta")


def default_device() -> torch.device:
    """The GPU where torch sees one, else the CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


@dataclasses.dataclass
class Inputs:
    """One call's tensors: x, alpha, gamma, beta (None: no beta) as autograd leaves, and the gradient dy."""

    x: torch.Tensor
    alpha: torch.Tensor
    gamma: torch.Tensor
    beta: torch.Tensor | None
    dy: torch.Tensor

    def leaves(self) -> list[torch.Tensor]:
        return [t for t in (self.x, self.alpha, self.gamma, self.beta) if t is not None]

    def channels_first(self) -> Inputs:
        """The same values with C moved from the last dimension to dim 1 ((N, *spatial, C) -> (N, C,
        *spatial)), x a new leaf; the parameters shared."""
        x = self.x.detach().movedim(-1, 1).contiguous().requires_grad_()
        return Inputs(x, self.alpha, self.gamma, self.beta, self.dy.movedim(-1, 1).contiguous())


def make_inputs(shape, dtype, *, seed: int, param_dtype=None, beta=True, alpha=None, x_scale=1.0,
                device=None) -> Inputs:  # fmt: skip
    """dyt.reference.random_inputs on device (default_device() by default), the leaves requiring grad."""
    drawn = reference.random_inputs(shape, dtype, seed=seed, param_dtype=param_dtype, beta=beta, alpha=alpha,
                                    x_scale=x_scale, device=device or default_device())  # fmt: skip
    leaves = {
        k: None if drawn[k] is None else drawn[k].requires_grad_() for k in ("x", "alpha", "gamma", "beta")
    }
    return Inputs(**leaves, dy=drawn["dy"])


def forward_backward(fn: Callable, inp: Inputs, *, channels_first: bool = False) -> tuple:
    """fn(x, alpha, gamma, beta) forward and backward with dy, the leaves' gradients cleared first; returns
    (y, dx, dalpha, dgamma, dbeta), dbeta None without beta. channels_first: fn's channels-first call (an
    Implementation's channels_first_fn)."""
    call = fn.channels_first_fn if channels_first else fn
    for t in inp.leaves():
        t.grad = None
    y = call(inp.x, inp.alpha, inp.gamma, inp.beta)
    y.backward(inp.dy)
    return (y.detach(), inp.x.grad, inp.alpha.grad, inp.gamma.grad,
            None if inp.beta is None else inp.beta.grad)  # fmt: skip


def check_against_reference(inp: Inputs, outs, label: str = "", only: Sequence[str] = OUTPUTS) -> None:
    """Every output and gradient of outs (as forward_backward returns them) against float64, each with its
    evaluation scale (dyt.conformance.tolerances); only: the names judged (default all; dbeta where there is
    a beta)."""
    y, dx, dalpha, dgamma, dbeta = outs
    y_ref = reference.dyt_forward_reference(inp.x, inp.alpha, inp.gamma, inp.beta)
    dx_ref, da_ref, dg_ref, db_ref = reference.dyt_backward_reference(
        inp.dy, inp.x, inp.alpha, inp.gamma, inp.beta
    )
    scales = reference.evaluation_scales(inp.dy, inp.x, inp.alpha, inp.gamma, inp.beta)
    checks = [
        ("y", y, y_ref, "out", *scales["y"]),
        ("dx", dx, dx_ref, "out", None, None),
        ("dalpha", dalpha, da_ref, "param", *scales["dalpha"]),
        ("dgamma", dgamma, dg_ref, "param", *scales["dgamma"]),
    ]
    if inp.beta is not None:
        checks.append(("dbeta", dbeta, db_ref, "param", *scales["dbeta"]))
    for name, got, ref, kind, scale, rss in checks:
        if name not in only:
            continue
        assert got is not None, f"{label}{name}: no gradient produced"
        assert_close(f"{label}{name}", got, ref, kind=kind, storage=got.dtype, scale=scale, rss=rss)
