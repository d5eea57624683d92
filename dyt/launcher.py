"""Runs the Triton kernels on validated row layouts: plans (through dyt.planner), allocates, binds, launches.

Inputs arrive as rows of their last dimension with unit stride (dyt.ops makes them so): an (M, N) view
whose rows may be strided, or a contiguous tensor of any rank (its M = numel / N rows, taken as they are:
a reshape per call costs host time); with channels_first, a contiguous (n, C, *spatial) tensor, which is n
rows of C * L elements (L = prod(spatial), the plans' channel_span). Outputs have the input's shape,
contiguous. The plans hold every kernel argument but the tensors; this module decides nothing about a
launch. It holds the process's launch overrides (`overrides()`, for tests and tools) and passes them to
the planner.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os

import torch

from dyt import direct_launch, kernels, planner


def interpreter_active() -> bool:
    """Triton reads TRITON_INTERPRET when kernels are decorated; so do we, once, at the same moment."""
    return _INTERPRET


_INTERPRET = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")

# DYT_TANH (the tanh method's name) and DYT_POISON_OUTPUTS (NaN-fill every output) are read once, at
# import: the defaults of the process's overrides.
_overrides = planner.Overrides(
    tanh=os.environ.get("DYT_TANH") or None, poison=os.environ.get("DYT_POISON_OUTPUTS", "0") == "1"
)


_IMPORT_OVERRIDES = _overrides


def _plain(o: planner.Overrides) -> bool:
    return dataclasses.replace(o, poison=False) == dataclasses.replace(_IMPORT_OVERRIDES, poison=False)


# Whether the current overrides plan as the import-time ones (poison aside): dyt.native's cached launches
# are planned so, and calls take the native path only then.
native_plans = True


@contextlib.contextmanager
def overrides(**changes):
    """Temporarily change launch planning, e.g. ``with overrides(int64=True): ...`` (planner.Overrides)."""
    global _overrides, native_plans
    saved = _overrides
    _overrides = dataclasses.replace(saved, **changes)
    native_plans = _plain(_overrides)
    try:
        yield _overrides
    finally:
        _overrides = saved
        native_plans = _plain(saved)


def native_overrides(poison: bool) -> dict:
    """The import-time overrides' fields with this poison: what dyt.native's fills plan with."""
    return {**{f.name: getattr(_IMPORT_OVERRIDES, f.name) for f in dataclasses.fields(_IMPORT_OVERRIDES)},
            "poison": poison}  # fmt: skip


def current_overrides() -> planner.Overrides:
    return _overrides


FORWARD = direct_launch.CompiledKernel(kernels.dyt_fwd_kernel)
BACKWARD = direct_launch.CompiledKernel(kernels.dyt_bwd_kernel)
FINISH = direct_launch.CompiledKernel(kernels.dyt_bwd_finish_kernel)
FINISH_CF = direct_launch.CompiledKernel(kernels.dyt_bwd_cf_finish_kernel)
FORWARD_FP8 = direct_launch.CompiledKernel(kernels.dyt_fwd_fp8_kernel)
FP8_SCALE = direct_launch.CompiledKernel(kernels.dyt_fp8_scale_kernel)


@functools.cache
def _device_target(index: int) -> planner.Target:
    props = torch.cuda.get_device_properties(index)
    return planner.Target(f"sm{props.major}{props.minor}", props.multi_processor_count, _INTERPRET)


def target_of(device: torch.device) -> planner.Target:
    """What the planner needs to know of the device the tensors live on (the interpreter: CPU tensors)."""
    if device.type != "cuda":
        return planner.Target(interpreter=_INTERPRET)
    index = device.index if device.index is not None else torch.cuda.current_device()
    return _device_target(index)


# Plans are pure functions of their arguments; all but those of a swapped table (a LaunchTable) are cached,
# since host time per call is what small shapes pay.
@functools.lru_cache(maxsize=1024)
def _cached_forward(M, N, itemsize, x_stride, param_itemsize, has_beta, span, device, overrides):
    return planner.plan_forward(M, N, itemsize, x_stride=x_stride, param_itemsize=param_itemsize,
                                has_beta=has_beta, channel_span=span, target=target_of(device),
                                overrides=overrides)  # fmt: skip


@functools.lru_cache(maxsize=1024)
def _cached_backward(M, N, itemsize, x_stride, dy_stride, span, device, overrides, pdl=True):
    target = target_of(device)
    if not pdl:
        target = dataclasses.replace(target, allow_pdl=False)
    return planner.plan_backward(M, N, itemsize, x_stride=x_stride, dy_stride=dy_stride, channel_span=span,
                                 target=target, overrides=overrides)  # fmt: skip


@functools.lru_cache(maxsize=1024)
def _cached_forward_fp8(M, N, itemsize, fmt, rowwise, x_stride, param_itemsize, has_beta, span, device,
                        overrides):  # fmt: skip
    return planner.plan_forward_fp8(M, N, itemsize, fmt, rowwise=rowwise, x_stride=x_stride,
                                    param_itemsize=param_itemsize, has_beta=has_beta, channel_span=span,
                                    target=target_of(device), overrides=overrides)  # fmt: skip


@functools.lru_cache(maxsize=256)
def _cached_fp8_scale(C, has_beta, fmt, device):
    return planner.plan_fp8_scale(C, has_beta, fmt, target_of(device))


def rows_of(t: torch.Tensor, channels_first: bool = False) -> tuple[int, int, int, int]:
    """(M, N, row stride, channel span) of a row layout: a 2-D view with unit column stride, or a
    contiguous tensor; with channels_first, a contiguous (n, C, *spatial) tensor: n rows of C * L, span L
    (a 2-D one is plain rows)."""
    if t.dim() == 2:
        M, N = t.shape
        return M, N, t.stride(0), 1
    if channels_first:
        M = t.shape[0]
        N = t.numel() // M if M else 0
        return M, N, N, N // t.shape[1] if N else 1
    N = t.shape[-1]
    return (t.numel() // N if N else 0), N, N, 1


def forward_plan(x: torch.Tensor, gamma=None, beta=None, over: planner.Overrides | None = None,
                 channels_first: bool = False):  # fmt: skip
    """The forward's plan for these tensors (gamma's and beta's dtypes matter where they are wider than
    x's: planner.FP32_PARAMS). Parameters no wider than x plan, and share the cached plan, as x alone."""
    o = over or _overrides
    M, N, stride, span = rows_of(x, channels_first)
    itemsize = param_itemsize = x.element_size()
    if gamma is not None:
        param_itemsize = max(itemsize, gamma.element_size(), 0 if beta is None else beta.element_size())
    args = (M, N, itemsize, stride, param_itemsize, gamma is None or beta is not None, span, x.device, o)
    return _cached_forward.__wrapped__(*args) if o.table is not None else _cached_forward(*args)


def backward_plan(x: torch.Tensor, dy: torch.Tensor, over: planner.Overrides | None = None, *,
                  pdl: bool = True, channels_first: bool = False):  # fmt: skip
    """The backward's plan for these tensors; pdl=False plans its launches without PDL."""
    o = over or _overrides
    # int(): under torch.compile with dynamic shapes the sizes are SymInts, which the plan cache cannot
    # hash; int() specializes the compiled graph on them (a guard), as a plan is made per shape.
    M, N, x_stride, span = (int(v) for v in rows_of(x, channels_first))
    itemsize = max(x.element_size(), dy.element_size())
    args = (M, N, itemsize, x_stride, int(rows_of(dy, channels_first)[2]), span, x.device, o, pdl)
    return _cached_backward.__wrapped__(*args) if o.table is not None else _cached_backward(*args)


_INTERPRETER_STAGED = (torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2)


def _staged(dtype: torch.dtype) -> torch.dtype:
    """The dtype kernels write: the interpreter's float32 -> bfloat16 cast truncates instead of rounding to
    nearest, and its float32 -> float8_e4m3fn cast flushes subnormals and misreads NaN (the GPU rounds to
    nearest even, saturating), so there such outputs are written in float32 and rounded by torch."""
    return torch.float32 if _INTERPRET and dtype in _INTERPRETER_STAGED else dtype


def _as(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """t in dtype: itself unless staged (a call to .to() costs host time even when it changes nothing)."""
    return t if t.dtype == dtype else t.to(dtype)


def _new(shape, dtype, device, poison: bool) -> torch.Tensor:
    """An output buffer; NaN-filled with poison (the suites always ask for it)."""
    if poison and dtype.is_floating_point:
        return torch.full(shape, float("nan"), dtype=dtype, device=device)
    return torch.empty(shape, dtype=dtype, device=device)


def _current(device: torch.device):
    """Makes the tensors' GPU the current one for the launches: Triton launches on the current device."""
    if device.type == "cuda" and device.index != torch.cuda.current_device():
        return torch.cuda.device(device)
    return contextlib.nullcontext()


def forward(x, alpha, gamma, beta, out_dtype, *, channels_first: bool = False) -> torch.Tensor:
    """y in x's shape, contiguous, in out_dtype."""
    o = _overrides
    y = _new(x.shape, _staged(out_dtype), x.device, o.poison)
    if y.numel():
        launch_forward(forward_plan(x, gamma, beta, o, channels_first), x, y, alpha, gamma, beta)
    return _as(y, out_dtype)


def launch_forward(plan: planner.FwdPlan, x, y, alpha, gamma, beta) -> None:
    """dyt_fwd_kernel: y. Without beta, gamma fills BETA's slot (the kernel reads it only with HAS_BETA)."""
    tensors = (x, y, alpha, gamma, gamma if beta is None else beta)
    with _current(x.device):
        FORWARD.launch(plan.kernel, tensors, direct=not _INTERPRET)


def forward_fp8(x, alpha, gamma, beta, fp8_dtype, *, rowwise: bool = False, channels_first: bool = False):
    """(data in x's shape, contiguous, in fp8_dtype; scale in float32: shape (1,) tensorwise, (M,) rowwise,
    one per row of x's last dimension): data = y / scale rounded to nearest even, saturating. Tensorwise,
    dyt_fp8_scale_kernel writes the scale from gamma and beta first, on the device (no host sync)."""
    o = _overrides
    M, N, stride, span = rows_of(x, channels_first)
    fmt = str(fp8_dtype).removeprefix("torch.")
    itemsize = x.element_size()
    param_itemsize = max(itemsize, gamma.element_size(), 0 if beta is None else beta.element_size())
    data = _new(x.shape, _staged(fp8_dtype), x.device, o.poison)
    scale = _new((M,) if rowwise else (1,), torch.float32, x.device, o.poison)
    betas = gamma if beta is None else beta
    with _current(x.device):
        if not rowwise:
            scale_launch = _cached_fp8_scale(gamma.shape[0], beta is not None, fmt, x.device)
            FP8_SCALE.launch(scale_launch, (gamma, betas, scale), direct=not _INTERPRET)
        if data.numel():
            args = (M, N, itemsize, fmt, rowwise, stride, param_itemsize, beta is not None, span, x.device, o)
            cached = _cached_forward_fp8.__wrapped__ if o.table is not None else _cached_forward_fp8
            plan = cached(*args)
            FORWARD_FP8.launch(plan.kernel, (x, data, scale, alpha, gamma, betas), direct=not _INTERPRET)
    return _as(data, fp8_dtype), scale


def backward(dy, x, alpha, gamma, dx_dtype, dalpha_dtype, dgamma_dtype, dbeta_dtype, *, traced=False,
             channels_first=False):  # fmt: skip
    """(dx in x's shape, contiguous; dalpha (1,), dgamma (C,), dbeta (C,)), each in its own dtype. traced:
    the launches go through torch.library.wrap_triton, without PDL (the triton op's body, which Inductor
    traces and launches from its own code)."""
    device = x.device
    o = _overrides
    dtypes = (dx_dtype, dalpha_dtype, dgamma_dtype, dbeta_dtype)
    C = x.shape[1] if channels_first else x.shape[-1]
    dx, dalpha, dgamma, dbeta = grads = _gradient_buffers(x, C, dtypes, o.poison)
    if not dx.numel():
        return grads
    plan = backward_plan(x, dy, o, pdl=not traced, channels_first=channels_first)
    partials = backward_partials(plan, device, o.poison)
    if traced:
        _traced_launch(BACKWARD, plan.main, (x, dy, dx, alpha, gamma, *partials))
        _traced_launch(finish_kernel(plan), plan.finish, (*partials, dgamma, dbeta, dalpha))
    else:
        with _current(device):
            launch_backward_main(plan, x, dy, dx, alpha, gamma, partials)
            launch_backward_finish(plan, partials, dgamma, dbeta, dalpha)
    return _as(dx, dx_dtype), _as(dalpha, dalpha_dtype), _as(dgamma, dgamma_dtype), _as(dbeta, dbeta_dtype)


def _gradient_buffers(x, C: int, dtypes: tuple, poison: bool) -> tuple[torch.Tensor, ...]:
    """(dx in x's shape, dalpha (1,), dgamma (C,), dbeta (C,)) for the kernels to write, in the dtypes
    they write; where x has no elements, the finished results (dx empty, the parameter gradients zero)."""
    dx_dtype, dalpha_dtype, dgamma_dtype, dbeta_dtype = dtypes
    dx = _new(x.shape, _staged(dx_dtype), x.device, poison)
    if not dx.numel():
        zeros = [torch.zeros(shape, dtype=dt, device=x.device) for shape, dt in
                 (((1,), dalpha_dtype), ((C,), dgamma_dtype), ((C,), dbeta_dtype))]  # fmt: skip
        return (_as(dx, dx_dtype), *zeros)
    params = [_new(shape, _staged(dt), x.device, poison) for shape, dt in
              (((1,), dalpha_dtype), ((C,), dgamma_dtype), ((C,), dbeta_dtype))]  # fmt: skip
    return (dx, *params)


def backward_partials(plan: planner.BwdPlan, device, poison: bool = False) -> tuple[torch.Tensor, ...]:
    """The main kernel's partial sums, per run of each program (plan.finish_rows, plan.n_dalpha_partials):
    dgamma and dbeta in float32, dalpha in float64."""
    return (
        _new((plan.finish_rows, plan.partial_width), torch.float32, device, poison),
        _new((plan.finish_rows, plan.partial_width), torch.float32, device, poison),
        _new((plan.n_dalpha_partials,), torch.float64, device, poison),
    )


def launch_backward_main(plan: planner.BwdPlan, x, dy, dx, alpha, gamma, partials) -> None:
    """dyt_bwd_kernel: dx, and the partials; a launch of its own, apart from the finish's."""
    BACKWARD.launch(plan.main, (x, dy, dx, alpha, gamma, *partials), direct=not _INTERPRET)


def finish_kernel(plan: planner.BwdPlan) -> direct_launch.CompiledKernel:
    """The plan's finishing kernel: dyt_bwd_cf_finish_kernel for channels-first rows."""
    return FINISH_CF if plan.gamma_span else FINISH


def launch_backward_finish(plan: planner.BwdPlan, partials, dgamma, dbeta, dalpha) -> None:
    """dyt_bwd_finish_kernel (or its channels-first form): the partials added up in a fixed order; with
    PDL, launched while the main kernel ends."""
    finish_kernel(plan).launch(plan.finish, (*partials, dgamma, dbeta, dalpha), direct=not _INTERPRET)


def _traced_launch(kernel: direct_launch.CompiledKernel, spec: planner.KernelLaunch, tensors) -> None:
    """The launch as torch.compile records it: wrap_triton's kernel[grid](...) (plain Triton in eager)."""
    from torch.library import wrap_triton

    assert not spec.pdl, "launches traced for torch.compile are planned without PDL"
    constexprs = dict(spec.constexprs)
    wrap_triton(kernel.kernel)[spec.grid](*tensors, *spec.scalars, **constexprs, num_warps=spec.num_warps)
