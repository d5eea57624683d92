"""Inputs and runs shared by the suites: the contract's inputs, call and judgement (dyt.conformance.contract,
which the conformance checks use too), one call through dyt's public API, and dyt's own plans and tables."""

from __future__ import annotations

import copy
import math

import torch

import dyt
from dyt import launcher, planner
from dyt.conformance.contract import (  # noqa: F401  (the suites import them from here)
    DTYPES,
    Inputs,
    check_against_reference,
    default_device,
    forward_backward,
    make_inputs,
)


def device() -> torch.device:
    return default_device()


def on_gpu() -> bool:
    return device().type == "cuda"


def run(inp: Inputs, fn=None):
    """Forward and backward through fn (default dyt.dyt); returns (y, dx, dalpha, dgamma, dbeta)."""
    return forward_backward(fn or dyt.dyt, inp)


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
