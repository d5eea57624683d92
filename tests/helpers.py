"""Inputs and runs shared by the suites: the contract's inputs, call and judgement (dyt.conformance.contract,
which the conformance checks use too), one call through dyt's public API, and dyt's own plans and tables."""

from __future__ import annotations

import dataclasses
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


def tile_of(entry) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_N, num_warps) of a launch-table entry or of a variant tile in one."""
    return entry.BLOCK_M, entry.BLOCK_N, entry.num_warps


def plan_tile(plan) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_N, num_warps) a plan launches with."""
    return plan.BLOCK_M, plan.BLOCK_N, plan.num_warps


def table_with_forward_variant(field: str) -> planner.LaunchTable:
    """This device's committed table, or sm90's where this device's 16-bit 1024 forward entry has no `field`
    variant (planner.FP32_PARAMS, planner.FOLDED: the interpreter's default table has none), for tests that
    make the variant apply at any size (with_variant_from)."""
    table = planner.load_table(target().arch)
    if getattr(planner.table_entry(table, "fwd", 2, planner.FOLD_WIDTH), field) is None:
        table = planner.load_table("sm90")
    return table


def with_variant_from(table: planner.LaunchTable, field: str, min_elements: int) -> planner.LaunchTable:
    """The table with every forward `field` variant tile (fp32_params, folded) applying from min_elements."""

    def change(entry):
        tile = getattr(entry, field)
        if tile is None:
            return entry
        return dataclasses.replace(entry, **{field: dataclasses.replace(tile, min_elements=min_elements)})

    return table.map_entries(change, modes=("fwd",))


def with_poly(table: planner.LaunchTable, terms: int, modes=("fwd",)) -> planner.LaunchTable:
    """The table with every entry of these modes, and every variant tile in it (channels_first's choices
    too), on `terms` polynomial terms."""

    def change(entry):
        variants = [f for f in (planner.FP32_PARAMS, planner.FOLDED) if getattr(entry, f, None) is not None]
        tiles = {f: dataclasses.replace(getattr(entry, f), poly=terms) for f in variants}
        choices = tuple(dataclasses.replace(c, poly=terms) for c in entry.channels_first)
        return dataclasses.replace(entry, poly=terms, channels_first=choices, **tiles)

    return table.map_entries(change, modes=modes)
