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
    """Fresh random x, dy, gamma, beta (never zeros), alpha ~ U(0.3, 1.2) unless given."""
    dev = dev or device()
    param_dtype = param_dtype or dtype
    gen = torch.Generator().manual_seed(seed)
    C = shape[-1]

    def randn(*s, dt):
        return torch.randn(*s, generator=gen, dtype=torch.float32).to(dt).to(dev)

    x = (randn(*shape, dt=torch.float32) * x_scale).to(dtype)
    a = torch.rand(1, generator=gen) * 0.9 + 0.3 if alpha is None else torch.tensor([float(alpha)])
    return Inputs(
        x=x.requires_grad_(),
        alpha=a.to(param_dtype).to(dev).requires_grad_(),
        gamma=(1.0 + 0.5 * randn(C, dt=torch.float32)).to(param_dtype).requires_grad_(),
        beta=randn(C, dt=param_dtype).requires_grad_() if beta else None,
        dy=randn(*shape, dt=dtype),
    )


def run(inp: Inputs, fn=None):
    """Forward and backward through fn (default dyt.dyt); returns (y, dx, dalpha, dgamma, dbeta)."""
    fn = fn or dyt.dyt
    for t in inp.leaves():
        t.grad = None
    y = fn(inp.x, inp.alpha, inp.gamma, inp.beta)
    y.backward(inp.dy)
    return (y.detach(), inp.x.grad, inp.alpha.grad, inp.gamma.grad,
            None if inp.beta is None else inp.beta.grad)  # fmt: skip


def check_against_reference(inp: Inputs, outs, label: str = "") -> None:
    """Every output and gradient against float64, with each value's 16-bit evaluation scale."""
    y, dx, dalpha, dgamma, dbeta = outs
    x64 = inp.x.detach().double()
    a64 = inp.alpha.detach().double().reshape(())
    g64 = inp.gamma.detach().double()
    b64 = None if inp.beta is None else inp.beta.detach().double()
    dy64 = inp.dy.double()
    y_ref = reference.dyt_forward_reference(inp.x, inp.alpha, inp.gamma, inp.beta)
    dx_ref, da_ref, dg_ref, db_ref = reference.dyt_backward_reference(
        inp.dy, inp.x, inp.alpha, inp.gamma, inp.beta
    )
    t = torch.tanh(a64 * x64)
    lead = tuple(range(x64.dim() - 1))
    y_scale = (g64 * t).abs() + (b64.abs() if b64 is not None else 0.0)
    dz = dy64 * g64 * reference.sech2_reference(a64 * x64)

    def sums(terms, dims):
        """(sum of |terms|, root sum of squares) over the reduced dimensions."""
        if terms.dim() == 0 or not dims:
            return terms.abs(), terms.abs()
        return terms.abs().sum(dim=dims), terms.square().sum(dim=dims).sqrt()

    all_dims = tuple(range(x64.dim()))
    da_abs, da_rss = sums(dz * x64, all_dims)
    dg_abs, dg_rss = sums(dy64 * t, lead)
    db_abs, db_rss = sums(dy64, lead)
    checks = [
        ("y", y, y_ref, "out", y_scale, None),
        ("dx", dx, dx_ref, "out", None, None),
        ("dalpha", dalpha, da_ref, "param", da_abs.reshape(da_ref.shape), da_rss.reshape(da_ref.shape)),
        ("dgamma", dgamma, dg_ref, "param", dg_abs, dg_rss),
    ]
    if inp.beta is not None:
        checks.append(("dbeta", dbeta, db_ref, "param", db_abs, db_rss))
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
