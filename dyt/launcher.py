"""Runs the Triton kernels on validated 2-D views: allocates outputs and partials, plans, launches.

Inputs arrive as (M, N) views with unit column stride (dyt.ops makes them so); rows may be strided.
"""

from __future__ import annotations

import contextlib
import functools
import os

import torch

from dyt import direct_launch, kernels, planner


def interpreter_active() -> bool:
    """Triton reads TRITON_INTERPRET when kernels are decorated; so do we, once, at the same moment."""
    return _INTERPRET


_INTERPRET = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


@functools.cache
def _device_facts(index: int) -> tuple[str, int]:
    props = torch.cuda.get_device_properties(index)
    return f"sm{props.major}{props.minor}", props.multi_processor_count


def device_facts(device: torch.device) -> tuple[str, int]:
    """(architecture key for the launch table, SM count) of the device the tensors live on."""
    if device.type != "cuda":
        return "default", planner.INTERPRETER_SM_COUNT
    index = device.index if device.index is not None else torch.cuda.current_device()
    return _device_facts(index)


def _plan(mode, M, N, itemsize, row_strides, device, param_itemsize=None):
    """Plans are pure functions of these arguments and the overrides; a swapped table (the tuner, tests)
    is planned afresh, everything else is cached, since host time per call is what small shapes pay."""
    o = planner.current_overrides()
    if o.table is not None:
        return _cached_plan.__wrapped__(mode, M, N, itemsize, row_strides, device, param_itemsize, None)
    overrides_key = (o.int64, o.tanh, o.lane_run)
    return _cached_plan(mode, M, N, itemsize, row_strides, device, param_itemsize, overrides_key)


@functools.lru_cache(maxsize=1024)
def _cached_plan(mode, M, N, itemsize, row_strides, device, param_itemsize, overrides_key):
    arch, sm_count = device_facts(device)
    if mode == "fwd":
        return planner.plan_forward(M, N, itemsize, row_strides, param_itemsize=param_itemsize, arch=arch,
                                   interpreter=interpreter_active())  # fmt: skip
    return planner.plan_backward(
        M, N, itemsize, row_strides, sm_count=sm_count, arch=arch, interpreter=interpreter_active()
    )


def forward_plan(x2d: torch.Tensor, gamma=None, beta=None) -> planner.FwdPlan:
    """The forward's plan; gamma's and beta's dtypes matter where they are wider than x's (FP32_PARAMS).
    Parameters no wider than x plan (and share the cached plan, its compiled launches included) as x alone."""
    M, N = x2d.shape
    itemsize = param_itemsize = x2d.element_size()
    if gamma is not None:
        param_itemsize = max(itemsize, gamma.element_size(), 0 if beta is None else beta.element_size())
    return _plan("fwd", M, N, itemsize, (x2d.stride(0), N), x2d.device, param_itemsize)


def backward_plan(x2d: torch.Tensor, dy2d: torch.Tensor) -> planner.BwdPlan:
    M, N = x2d.shape
    itemsize = max(x2d.element_size(), dy2d.element_size())
    strides = (x2d.stride(0), dy2d.stride(0), N)
    return _plan("bwd", M, N, itemsize, strides, x2d.device)


def _staged(dtype: torch.dtype) -> torch.dtype:
    """The dtype kernels write: the interpreter's float32 -> bfloat16 cast truncates instead of rounding to
    nearest (the GPU rounds), so there bfloat16 outputs are written in float32 and rounded by torch."""
    return torch.float32 if dtype == torch.bfloat16 and interpreter_active() else dtype


def _as(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """t in dtype: itself unless staged (a call to .to() costs host time even when it changes nothing)."""
    return t if t.dtype == dtype else t.to(dtype)


def _new(shape, dtype, device) -> torch.Tensor:
    """An output buffer; NaN-filled when launch overrides ask for poisoning (the suites always do)."""
    if planner.current_overrides().poison and dtype.is_floating_point:
        return torch.full(shape, float("nan"), dtype=dtype, device=device)
    return torch.empty(shape, dtype=dtype, device=device)


def _current(device: torch.device):
    """Makes the tensors' GPU the current one for the launches: Triton launches on the current device."""
    if device.type == "cuda" and device.index != torch.cuda.current_device():
        return torch.cuda.device(device)
    return contextlib.nullcontext()


def _layout_args(plan: planner.TilePlan, x2d: torch.Tensor, *tensors: torch.Tensor) -> tuple[int, ...]:
    """(n_elements, row stride of x2d, of each of tensors) as the kernels take them. Folded rows are the
    same contiguous memory seen as plan.M rows of plan.N, the last possibly in part (ragged: n_elements
    bounds it; 0, unused, otherwise)."""
    n_elements = x2d.numel() if plan.ragged else 0
    if plan.gamma_period:
        return (n_elements,) + (plan.N,) * (1 + len(tensors))
    return (n_elements, x2d.stride(0), *(t.stride(0) for t in tensors))


def forward(x2d, alpha, gamma, beta, out_dtype) -> torch.Tensor:
    """y (M, N) contiguous, in out_dtype."""
    M, N = x2d.shape
    y = _new((M, N), _staged(out_dtype), x2d.device)
    if M == 0:
        return _as(y, out_dtype)
    launch_forward(forward_plan(x2d, gamma, beta), x2d, y, alpha, gamma, beta)
    return _as(y, out_dtype)


def launch_forward(plan, x2d, y, alpha, gamma, beta) -> None:
    """dyt_fwd_kernel: y (fwd tools time it with plans of their own, e.g. plan.replaced(pdl=False))."""
    has_beta = beta is not None
    with _current(x2d.device):
        direct_launch.launch(
            kernels.dyt_fwd_kernel, plan.grid, plan.launches, has_beta,
            (x2d, y, alpha, gamma, beta if has_beta else gamma,
             plan.M, plan.N, *_layout_args(plan, x2d, y)),
            dict(HAS_BETA=has_beta, BLOCK_M=plan.BLOCK_M, BLOCK_N=plan.BLOCK_N,
                 N_COL_BLOCKS=plan.n_col_blocks, INT64=plan.int64, TANH=plan.tanh, PDL=plan.pdl,
                 APPROX=not interpreter_active(), GAMMA_PERIOD=plan.gamma_period, RAGGED=plan.ragged,
                 SIGN_SELECT=plan.sign_select, POLY_TERMS=plan.poly_terms),
            direct=not interpreter_active(), num_warps=plan.num_warps, launch_pdl=plan.pdl,
        )  # fmt: skip


def backward(dy2d, x2d, alpha, gamma, dx_dtype, dalpha_dtype, dgamma_dtype, dbeta_dtype):
    """(dx (M, N) contiguous, dalpha (1,), dgamma (N,), dbeta (N,)), each in its own dtype."""
    M, N = x2d.shape
    device = x2d.device
    if M == 0:
        zeros = [torch.zeros(shape, dtype=dt, device=device) for shape, dt in
                 (((1,), dalpha_dtype), ((N,), dgamma_dtype), ((N,), dbeta_dtype))]  # fmt: skip
        return (torch.empty((M, N), dtype=dx_dtype, device=device), *zeros)
    dx = _new((M, N), _staged(dx_dtype), device)
    dalpha = _new((1,), _staged(dalpha_dtype), device)
    dgamma = _new((N,), _staged(dgamma_dtype), device)
    dbeta = _new((N,), _staged(dbeta_dtype), device)
    plan = backward_plan(x2d, dy2d)
    partials = backward_partials(plan, device)
    with _current(device):
        launch_backward_main(plan, x2d, dy2d, dx, alpha, gamma, partials)
        launch_backward_finish(plan, partials, dgamma, dbeta, dalpha)
    return _as(dx, dx_dtype), _as(dalpha, dalpha_dtype), _as(dgamma, dgamma_dtype), _as(dbeta, dbeta_dtype)


def backward_partials(plan: planner.BwdPlan, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The main kernel's partial sums, per run of each program (plan.finish_rows, plan.n_dalpha_partials):
    dgamma and dbeta in float32, dalpha in float64."""
    return (
        _new((plan.finish_rows, plan.param_width), torch.float32, device),
        _new((plan.finish_rows, plan.param_width), torch.float32, device),
        _new((plan.n_dalpha_partials,), torch.float64, device),
    )


def launch_backward_main(plan, x2d, dy2d, dx, alpha, gamma, partials) -> None:
    """dyt_bwd_kernel: dx, and the partials (tools/bwd_split.py times it apart from the finish)."""
    direct_launch.launch(
        kernels.dyt_bwd_kernel, plan.grid, plan.launches, "main",
        (x2d, dy2d, dx, alpha, gamma, *partials, plan.M, plan.N, *_layout_args(plan, x2d, dy2d, dx),
         plan.n_col_blocks, plan.n_groups, plan.tiles_per_program),
        dict(BLOCK_M=plan.BLOCK_M, BLOCK_N=plan.BLOCK_N, INT64=plan.int64, TANH=plan.tanh,
             APPROX=not interpreter_active(), STRIDED=plan.strided, NUM_STAGES=plan.num_stages,
             EVEN_N=plan.N % plan.BLOCK_N == 0, GAMMA_PERIOD=plan.gamma_period, RAGGED=plan.ragged,
             PDL=plan.pdl, LANE_RUN=plan.lane_run, FOLD_COPIES=plan.copies_in_block > 0),
        direct=not interpreter_active(), num_warps=plan.num_warps,
    )  # fmt: skip


def launch_backward_finish(plan, partials, dgamma, dbeta, dalpha, tile=None, num_warps=None) -> None:
    """dyt_bwd_finish_kernel: the partials added up in a fixed order; with plan.pdl, launched while the
    main kernel ends. tile=(BLOCK_G, BLOCK_N) and num_warps override the plan's (tools/bwd_split.py compares
    finishing tiles; those launches go through the JIT, uncached)."""
    block_g, block_n = tile or (plan.finish_block_g, plan.finish_block_n)
    grid = plan.finish_grid if tile is None else planner.finish_grid(plan.param_width, block_n)
    args = (*partials, dgamma, dbeta, dalpha, plan.param_width, plan.finish_rows, plan.n_dalpha_partials)
    constexprs = dict(BLOCK_G=block_g, BLOCK_N=block_n, PDL=plan.pdl)
    direct = not interpreter_active() and tile is None and num_warps is None
    direct_launch.launch(
        kernels.dyt_bwd_finish_kernel, grid, plan.launches, "finish", args, constexprs, direct=direct,
        num_warps=num_warps or planner.FINISH_NUM_WARPS, launch_pdl=plan.pdl,
    )  # fmt: skip
