"""Inputs and runs shared by the suites: fresh random data, one call through the public API, and the
comparison of every output and gradient with the float64 reference under the tolerance table."""

from __future__ import annotations

import copy
import dataclasses
import math

import torch

import dyt
from dyt import launcher, planner, reference

from tolerances import assert_close

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def on_gpu() -> bool:
    return device().type == "cuda"


@dataclasses.dataclass
class Inputs:
    x: torch.Tensor
    alpha: torch.Tensor
    gamma: torch.Tensor
    beta: torch.Tensor | None
    dy: torch.Tensor

    def leaves(self):
        return [t for t in (self.x, self.alpha, self.gamma, self.beta) if t is not None]


def make_inputs(shape, dtype, *, seed: int, param_dtype=None, beta=True, alpha=None, x_scale=1.0,
                dev=None) -> Inputs:  # fmt: skip
    """dyt.reference.random_inputs on this machine's device (or dev), the leaves requiring grad."""
    drawn = reference.random_inputs(shape, dtype, seed=seed, param_dtype=param_dtype, beta=beta, alpha=alpha,
                                    x_scale=x_scale, device=dev or device())  # fmt: skip
    leaves = {
        k: None if drawn[k] is None else drawn[k].requires_grad_() for k in ("x", "alpha", "gamma", "beta")
    }
    return Inputs(**leaves, dy=drawn["dy"])


def run(inp: Inputs, fn=None):
    """Forward and backward through fn (default dyt.dyt); returns (y, dx, dalpha, dgamma, dbeta)."""
    fn = fn or dyt.dyt
    for t in inp.leaves():
        t.grad = None
    y = fn(inp.x, inp.alpha, inp.gamma, inp.beta)
    y.backward(inp.dy)
    return (y.detach(), inp.x.grad, inp.alpha.grad, inp.gamma.grad,
            None if inp.beta is None else inp.beta.grad)  # fmt: skip


def call_in_mode(mode: str, fn, args):
    """fn(*args) where no gradient can flow: under torch.no_grad() or torch.inference_mode() (mode names
    either), or with every input detached (mode "no_input_requires_grad")."""
    if mode == "no_input_requires_grad":
        return fn(*(None if t is None else t.detach() for t in args))
    with getattr(torch, mode)():
        return fn(*args)


def use_python_path(monkeypatch) -> None:
    """Eager CUDA calls on dyt's Python path from here on in the test (dyt.native's op not called)."""
    from dyt import ops

    monkeypatch.setattr(ops, "_native_op", lambda x: None)


def check_against_reference(inp: Inputs, outs, label: str = "") -> None:
    """Every output and gradient against float64, with each value's evaluation scale (tolerances.py)."""
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
        assert got is not None, f"{label}{name}: no gradient produced"
        assert_close(f"{label}{name}", got, ref, kind=kind, storage=got.dtype, scale=scale, rss=rss)


# An H200 (sm_90, 132 SMs) for planning tests that hold on any machine.
SM90 = planner.Target("sm90", 132)


def target() -> planner.Target:
    """The planner's target for this machine's device (the interpreter's on CPU)."""
    return launcher.target_of(device())


def plans_for(shape, dtype):
    """(forward plan, backward plan) the launcher uses for contiguous x of this shape on this device,
    under the launcher's current overrides."""
    C = shape[-1]
    M = math.prod(shape[:-1])
    item = torch.empty(0, dtype=dtype).element_size()
    where = {"target": target(), "overrides": launcher.current_overrides()}
    return planner.plan_forward(M, C, item, **where), planner.plan_backward(M, C, item, **where)


def tile_of(entry: dict) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_N, num_warps) of a launch-table entry or of a variant tile in one."""
    return entry["BLOCK_M"], entry["BLOCK_N"], entry["num_warps"]


def plan_tile(plan) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_N, num_warps) a plan launches with."""
    return plan.BLOCK_M, plan.BLOCK_N, plan.num_warps


def table_with_forward_variant(field: str) -> dict:
    """A copy of this device's committed table, or of sm90's where this device's 16-bit 1024 forward entry
    has no `field` variant (planner.FP32_PARAMS, planner.FOLDED: the interpreter's default table has none),
    for tests that make the variant apply at any size."""
    table = planner.load_table(target().arch)
    if field not in planner.table_entry(table, "fwd", 2, planner.FOLD_WIDTH):
        table = planner.load_table("sm90")
    return copy.deepcopy(table)


def with_poly(table: dict, terms: int, modes=("fwd",)) -> dict:
    """The table with every entry of these modes, and every variant tile in it (channels_first's list
    too), on `terms` polynomial terms."""
    table = copy.deepcopy(table)
    for mode in modes:
        for entries in table[mode].values():
            for entry in entries:
                entry["poly"] = terms
                for field in planner.VARIANTS:
                    variant = entry.get(field)
                    for tile in [variant] if isinstance(variant, dict) else variant or []:
                        tile["poly"] = terms
    return table
