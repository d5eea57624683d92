"""The operator: input validation, the dtype contract, PyTorch custom ops and their autograd.

`dyt(x, alpha, gamma, beta=None)` is the public entry point. Eager calls run the kernels through a plain
autograd.Function. Under torch.compile the forward is the custom op `torch.ops.dyt.forward`: Dynamo sees one
node (its fake implementation validates, so dyt's messages reach the user), and AOTAutograd traces it as
the plain float32 expression, which Inductor fuses into the neighbouring kernels; the backward is the
triton op `torch.ops.dyt.backward`, whose kernels Inductor launches from its own generated code (no
Python dispatch per call; docs/host-path.md, "Compiled mode"). fullgraph and CUDA graphs work. Under
torch.func's transforms (grad, vmap, jvp, jacrev, hessian, ...) and forward-mode AD, calls run the
contract's float32 expression in PyTorch ops, which every transform can trace and batch.

Dtype contract: arithmetic in float32; y and dx in x.dtype; dalpha, dgamma, dbeta in alpha's, gamma's
and beta's own dtypes, accumulated in float32 and never rounded through x.dtype.

Packed parameters: `dyt_packed(x, params)` takes alpha, gamma and beta in one tensor (dyt.PackedDyT), the
same contract with one gradient for params.

FP8: a float8 out_dtype hands the call to dyt.fp8 (y in FP8 with a scale from the parameters); a DyT that
dyt.float8_training wired calls dyt_float8_training, whose autograd gives torchao's float8 linear layers
their input already cast. The checks and row layouts every call shares live in dyt.inputs.

Layout: x is viewed as (rows, C). Row-strided views (slices, expanded dy) run without a copy; an x whose
last dimension is not contiguous (e.g. a transpose, or channels-first input moved to the end) is copied
once, because the kernels need unit stride along C for full-width loads.
"""

from __future__ import annotations

import torch
from torch._subclasses.functional_tensor import FunctionalTensorMode

from dyt import fp8, torch_path
from dyt.inputs import (  # noqa: F401  (validate, split_params, ...: dyt.ops' names for callers and tests)
    FP8_DTYPES,
    SUPPORTED_DTYPES,
    packed_size,
    split_params,
    validate,
    validate_packed,
)
from dyt.inputs import as_2d as _as_2d
from dyt.inputs import as_one as _as_one
from dyt.inputs import as_rows as _as_rows
from dyt.inputs import records_grad as _records_grad
from dyt.inputs import shaped_like as _shaped_like
from dyt.inputs import use_triton as _use_triton

try:  # Triton is optional: without it CPU tensors still take the plain PyTorch path.
    from dyt import direct_launch, launcher, native
except ImportError:  # pragma: no cover - exercised only where triton is absent
    direct_launch = launcher = native = None


def forward_impl(x, alpha, gamma, beta, *, channels_first: bool = False, out_dtype=None) -> torch.Tensor:
    """The forward on validated inputs: kernels for CUDA (or the interpreter), plain PyTorch otherwise.
    channels_first: x is a contiguous (N, C, *spatial) tensor that the kernels take (dyt_channels_first).
    y in out_dtype, x's dtype where None."""
    beta = None if beta is None else beta.contiguous()
    out_dtype = out_dtype or x.dtype
    if channels_first:
        return launcher.forward(x, _as_one(alpha), gamma.contiguous(), beta, out_dtype, channels_first=True)
    if _use_triton(x):
        y = launcher.forward(_as_rows(x), _as_one(alpha), gamma.contiguous(), beta, out_dtype)
    else:
        y = torch_path.forward(_as_2d(x), _as_one(alpha), gamma.contiguous(), beta, out_dtype)
    return _shaped_like(y, x)


def backward_impl(dy, x, alpha, gamma, beta, *, traced: bool = False, channels_first: bool = False):
    """(dx, dalpha shaped (1,), dgamma, dbeta) on validated inputs; dbeta in gamma's dtype without beta.
    dy may have another dtype than x (y's, out_dtype); dx has x's. traced: the kernels are launched through
    torch.library.wrap_triton (the triton op's body). channels_first: as forward_impl's (dy of any
    strides)."""
    if dy.shape != x.shape:
        raise ValueError(f"dyt: dy must have x's shape {tuple(x.shape)}, got {tuple(dy.shape)}")
    dtypes = (x.dtype, alpha.dtype, gamma.dtype, gamma.dtype if beta is None else beta.dtype)
    if channels_first:
        return launcher.backward(dy.contiguous(), x, _as_one(alpha), gamma.contiguous(), *dtypes,
                                 channels_first=True)  # fmt: skip
    if _use_triton(x):
        grads = launcher.backward(_as_rows(dy), _as_rows(x), _as_one(alpha), gamma.contiguous(), *dtypes,
                                  traced=traced)  # fmt: skip
    else:
        grads = torch_path.backward(_as_2d(dy), _as_2d(x), _as_one(alpha), gamma.contiguous(), *dtypes)
    dx, dalpha, dgamma, dbeta = grads
    return _shaped_like(dx, x), dalpha, dgamma, dbeta


# The ops torch.compile sees: single graph nodes to Dynamo; to AOTAutograd, the forward's plain expression
# and the backward's kernels.


@torch.library.custom_op("dyt::forward", mutates_args=())
def _forward_op(
    x: torch.Tensor, alpha: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor | None,
    out_dtype: torch.dtype | None = None,
) -> torch.Tensor:  # fmt: skip
    validate(x, alpha, gamma, beta, out_dtype=out_dtype)
    backward_op()
    return forward_impl(x, alpha, gamma, beta, out_dtype=out_dtype)


@_forward_op.register_fake
def _(x, alpha, gamma, beta, out_dtype=None):
    validate(x, alpha, gamma, beta, out_dtype=out_dtype)
    backward_op()  # registered while Dynamo traces, before AOTAutograd traces the backward
    return torch.empty(x.shape, dtype=out_dtype or x.dtype, device=x.device)


@_forward_op.register_torch_dispatch(FunctionalTensorMode)
def _forward_as_expression(mode, func, types, args, kwargs):
    """AOTAutograd (torch.compile) traces the forward as the plain float32 expression of the contract:
    Inductor fuses it with the ops around it, which no separate kernel can match. Tensor subclasses other
    than the functional and fake tensors get the op itself."""
    known = (torch.Tensor, torch._subclasses.functional_tensor.FunctionalTensor)
    if any(not issubclass(t, torch._subclasses.FakeTensor) and t not in known for t in types):
        return NotImplemented
    with mode:
        x, alpha, gamma, beta, *rest = args
        out_dtype = rest[0] if rest else kwargs.get("out_dtype")
        return torch_path.forward(x, _as_one(alpha), gamma, beta, out_dtype or x.dtype)


# The backward is a triton op where Triton compiles kernels (its body, traced by AOTAutograd, shows
# Inductor the kernels and their launches); a custom op with a fake implementation where Triton is absent
# or interprets (wrap_triton cannot trace interpreted kernels). It is registered at the first call or trace
# of torch.ops.dyt.forward, not at import: registering a triton op imports Inductor (most of a second),
# which eager calls never need.
_backward_registered = False


def _backward_impl_op(
    dy: torch.Tensor, x: torch.Tensor, alpha: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dx, dalpha shaped (1,), dgamma, dbeta); dbeta is in gamma's dtype when beta is None."""
    validate(x, alpha, gamma, beta)
    return backward_impl(dy, x, alpha, gamma, beta, traced=True)


def _backward_fake(dy, x, alpha, gamma, beta):
    dbeta_dtype = gamma.dtype if beta is None else beta.dtype
    C = x.shape[-1]
    return (
        torch.empty(x.shape, dtype=x.dtype, device=x.device),
        torch.empty((1,), dtype=alpha.dtype, device=x.device),
        torch.empty((C,), dtype=gamma.dtype, device=x.device),
        torch.empty((C,), dtype=dbeta_dtype, device=x.device),
    )


def backward_op():
    """torch.ops.dyt.backward, registered on the first call."""
    global _backward_registered
    if not _backward_registered:
        if launcher is not None and not launcher.interpreter_active():
            torch.library.triton_op("dyt::backward", _backward_impl_op, mutates_args=())
        else:
            torch.library.custom_op("dyt::backward", _backward_impl_op, mutates_args=()).register_fake(
                _backward_fake
            )
        _backward_registered = True
    return torch.ops.dyt.backward


# Both autograd paths (the custom op's and _EagerDyT) save and return through these two.


def _save_for_backward(ctx, x, alpha, gamma, beta) -> None:
    """Only x is kept among activation-sized tensors: y and tanh are recomputed in the backward."""
    ctx.has_beta = beta is not None
    ctx.alpha_shape = None if alpha.dim() == 1 else alpha.shape  # (1,): nothing to reshape per call
    ctx.save_for_backward(x, alpha, gamma, beta)


def _input_grads(ctx, grads):
    """(dx, dalpha, dgamma, dbeta) of the backward as autograd wants them: dalpha in alpha's shape, no
    dbeta without beta."""
    dx, dalpha, dgamma, dbeta = grads
    dalpha = dalpha if ctx.alpha_shape is None else dalpha.reshape(ctx.alpha_shape)
    return dx, dalpha, dgamma, dbeta if ctx.has_beta else None


def _setup_context(ctx, inputs, output):
    _save_for_backward(ctx, *inputs[:4])


def _backward(ctx, dy):
    return *_input_grads(ctx, backward_op()(dy, *ctx.saved_tensors)), None


torch.library.register_autograd("dyt::forward", _backward, setup_context=_setup_context)


class _EagerDyT(torch.autograd.Function):
    """Eager calls skip the custom-op dispatch layers, which cost more host time than the kernel launch
    itself (docs/host-path.md). channels_first: dyt_channels_first's contiguous input (forward_impl)."""

    @staticmethod
    def forward(ctx, x, alpha, gamma, beta, channels_first, out_dtype):
        _save_for_backward(ctx, x, alpha, gamma, beta)
        ctx.channels_first = channels_first
        return forward_impl(x, alpha, gamma, beta, channels_first=channels_first, out_dtype=out_dtype)

    @staticmethod
    def backward(ctx, dy):
        if torch.is_grad_enabled():  # create_graph=True: gradients that autograd can differentiate again
            grads = torch_path.differentiable_backward(
                dy, *ctx.saved_tensors, channels_first=ctx.channels_first
            )
        else:
            grads = backward_impl(dy, *ctx.saved_tensors, channels_first=ctx.channels_first)
        return *_input_grads(ctx, grads), None, None


class _ComposableDyT(torch.autograd.Function):
    """dyt under torch.func transforms and forward-mode AD: forward, backward and jvp in PyTorch ops
    (dyt.torch_path), so that vmap batches them (generate_vmap_rule), grad and jvp compose, and every
    order of derivative exists; the contract's float32 arithmetic, dtypes and sech^2. No kernel runs:
    a kernel launch cannot be batched or carry a tangent. channels_first: x is (N, C, *spatial)."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x, alpha, gamma, beta, channels_first, out_dtype):
        return torch_path.forward(x, alpha, gamma, beta, out_dtype or x.dtype, channels_first=channels_first)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, alpha, gamma, beta, channels_first, out_dtype = inputs
        ctx.save_for_backward(x, alpha, gamma, beta)
        ctx.save_for_forward(x, alpha, gamma, beta)
        ctx.channels_first = channels_first
        ctx.out_dtype = out_dtype or x.dtype
        ctx.has_beta = beta is not None
        ctx.alpha_shape = alpha.shape

    @staticmethod
    def backward(ctx, dy):
        x, alpha, gamma, beta = ctx.saved_tensors
        dx, dalpha, dgamma, dbeta = torch_path.differentiable_backward(
            dy, x, alpha, gamma, beta, channels_first=ctx.channels_first
        )
        return dx, dalpha.reshape(ctx.alpha_shape), dgamma, dbeta if ctx.has_beta else None, None, None

    @staticmethod
    def jvp(ctx, x_t, alpha_t, gamma_t, beta_t, *_):
        x, alpha, gamma, beta = ctx.saved_tensors
        return torch_path.tangent((x_t, alpha_t, gamma_t, beta_t), x, alpha, gamma, beta,
                                  channels_first=ctx.channels_first, out_dtype=ctx.out_dtype)  # fmt: skip


def _transformed() -> bool:
    """Whether a torch.func transform or a forward-mode AD dual level is active: the call takes
    _ComposableDyT. (A forward-mode tangent exists only inside a dual level.)"""
    return _functorch_active() or _forward_ad._current_level >= 0


def dyt(
    x: torch.Tensor, alpha: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor | None = None, *,
    out_dtype: torch.dtype | None = None,
) -> torch.Tensor:  # fmt: skip
    """y = gamma * tanh(alpha * x) + beta over the last dimension of x; differentiable in all four.

    x: (..., C) float32/bfloat16/float16, any strides. alpha: one element. gamma, beta: (C,); beta may be
    None (LLaMA-style DyT). Parameters may be float32 while x is 16-bit (mixed precision). Under
    torch.compile this is the custom op torch.ops.dyt.forward; eagerly, the same kernels with less dispatch.
    y has x's dtype, also under autocast (which does not recast dyt's inputs or output; nn.LayerNorm and
    the eager expression with float32 parameters return float32 there), unless out_dtype names another:
    the float32 result rounded once to it, as y.to(out_dtype) would, with no second kernel (the gradient
    then arrives in out_dtype; dx keeps x's dtype). A float8 out_dtype returns dyt.fp8.Float8Output (data,
    scale), the scale from the parameters (dyt.fp8.dyt_fp8's contract).
    """
    if out_dtype is not None and out_dtype in FP8_DTYPES:
        return fp8.dyt_fp8(x, alpha, gamma, beta, fp8_dtype=out_dtype)
    if torch.compiler.is_compiling():
        if _transformed():
            # A transform inside the compiled region (torch.compile of grad, vmap or jvp): the plain
            # expression, which every transform composes with under Dynamo (the op has no rule for them:
            # a jvp through it would trace a zero tangent; Dynamo traces no autograd.Function with a jvp of
            # its own). Its derivatives are autograd's (docs/host-path.md, "Compiled mode").
            validate(x, alpha, gamma, beta, out_dtype=out_dtype)
            return torch_path.forward(x, alpha, gamma, beta, out_dtype or x.dtype)
        # Checked by the op's fake implementation while tracing: an error raised in traced code reaches
        # the user as Dynamo's "Observed exception" with the message hidden in its debug context, whereas
        # one raised in a fake implementation is quoted in the explanation Dynamo shows.
        return torch.ops.dyt.forward(x, alpha, gamma, beta, out_dtype)
    op = _native_op(x)
    if op is None and _strided_channels(x):
        # The copy _as_2d makes on the Python path, made first so that the call takes the native one
        # (ConvNeXt's blocks normalize a permuted view: docs/host-path.md, "Native path").
        x = x.contiguous()
        op = _native_op(x)
    if op is not None:
        return _call_native(op, x, alpha, gamma, beta, False, out_dtype)
    validate(x, alpha, gamma, beta, out_dtype=out_dtype)
    if _transformed():
        return _ComposableDyT.apply(x, alpha, gamma, beta, False, out_dtype)
    if _records_grad(x, alpha, gamma, beta):
        return _EagerDyT.apply(x, alpha, gamma, beta, False, out_dtype)
    return forward_impl(x, alpha, gamma, beta, out_dtype=out_dtype)


def _native_op(x):
    """torch.ops.dyt_native.dyt where this call runs on the native path, else None (dyt.native says what
    takes the Python path; so do torch.func transforms and forward-mode AD, _transformed). Loads the
    extension on the first CUDA call. x may be anything (not yet validated)."""
    if not isinstance(x, torch.Tensor) or not x.is_cuda or native is None:
        return None
    op = native.OP or native.ensure()
    if (op is None or not launcher.native_plans or _transformed() or direct_launch.hooks_set()
            or not (x.is_contiguous() or (x.dim() == 2 and x.stride(1) == 1))):  # fmt: skip
        return None
    return op


def _strided_channels(x) -> bool:
    """Whether x is a CUDA tensor whose last dimension is strided: the kernels need it copied (_as_2d)."""
    return isinstance(x, torch.Tensor) and x.is_cuda and x.dim() > 0 and x.shape[-1] > 1 and x.stride(-1) != 1


def _call_native(op, x, alpha, gamma, beta, channels_first: bool, out_dtype) -> torch.Tensor:
    """The native op on inputs not yet validated: the op checks them itself (dyt_native.cpp's
    check_inputs refuses all that validate refuses) and, where it refuses, validate raises dyt's own
    ValueError or TypeError; errors that validate does not explain pass on as they are."""
    try:
        return op(x, alpha, gamma, beta, channels_first, launcher.current_overrides().poison, out_dtype)
    except (RuntimeError, TypeError):
        validate(x, alpha, gamma, beta, channels_first=channels_first, out_dtype=out_dtype)
        raise


_functorch_active = getattr(torch._C, "_are_functorch_transforms_active", lambda: False)
_forward_ad = torch.autograd.forward_ad  # its _current_level: the active dual level, -1 outside any


# A DyT wired by dyt.float8_training: its output in FP8 for torchao's float8 linear layers (docs/fp8.md).


def _torchao_tensor():
    """torchao.float8.float8_training_tensor (the fp8 extra), imported at the first wired call."""
    try:
        from torchao.float8 import float8_training_tensor
    except ImportError as err:  # pragma: no cover - dyt.float8_training refuses to wire without it
        raise ImportError("dyt: a float8-wired DyT needs torchao (pip install 'dyt-kernels[fp8]')") from err
    return float8_training_tensor


class _Float8TrainingDyT(torch.autograd.Function):
    """y of DyT in FP8 as a Float8TrainingTensor (torchao's scale: the multiplier 1 / dyt's scale), its
    gradient dyt's backward of the high-precision gradient the linear layers return."""

    @staticmethod
    def forward(ctx, x, alpha, gamma, beta, target):
        ctx.has_beta = beta is not None
        ctx.alpha_shape = alpha.shape
        ctx.save_for_backward(x, alpha, gamma, beta)
        data, scale = fp8.forward(x, alpha, gamma, beta, target.fp8_dtype)
        tensor = _torchao_tensor()
        return tensor.Float8TrainingTensor(data, torch.reciprocal(scale), x.dtype, target.linear_mm_config,
                                           tensor.GemmInputRole.INPUT)  # fmt: skip

    @staticmethod
    def backward(ctx, dy):
        x, alpha, gamma, beta = ctx.saved_tensors
        dx, dalpha, dgamma, dbeta = backward_op()(dy.contiguous(), x, alpha, gamma, beta)
        return dx, dalpha.reshape(ctx.alpha_shape), dgamma, dbeta if ctx.has_beta else None, None


def dyt_float8_training(x, alpha, gamma, beta, target):
    """The forward of a DyT that dyt.float8_training wired (target: its dyt.fp8.Float8Input): y in FP8 as
    torchao's Float8TrainingTensor, differentiable in all four.

    Eager: one pass (_Float8TrainingDyT), y rounded once to FP8. Under torch.compile: dyt's y in x's dtype
    cast by torchao's own differentiable constructor with the scale from the parameters (Dynamo traces that
    constructor, not a backward of dyt's behind a tensor subclass); Inductor fuses the two into one kernel,
    and y may round twice there (to x's dtype, then to FP8: off the single rounding only where y / scale
    lies within half an ulp of x's dtype of an FP8 rounding boundary)."""
    validate(x, alpha, gamma, beta)
    if torch.compiler.is_compiling():
        tensor = _torchao_tensor()
        scale = torch_path.fp8_parameter_scale(gamma, beta, fp8.FORMATS[target.fp8_dtype])
        return tensor.hp_tensor_and_scale_to_float8(dyt(x, alpha, gamma, beta), torch.reciprocal(scale),
                                                    target.fp8_dtype, target.linear_mm_config,
                                                    tensor.GemmInputRole.INPUT)  # fmt: skip
    return _Float8TrainingDyT.apply(x, alpha, gamma, beta, target)


# Channels-first input: (N, C, *spatial), scaled along dim 1 (ConvNeXt's LayerNorm2d places).


def dyt_channels_first(
    x: torch.Tensor, alpha: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor | None = None, *,
    out_dtype: torch.dtype | None = None,
) -> torch.Tensor:  # fmt: skip
    """dyt over dim 1 of a channels-first x (N, C, *spatial): y = gamma[c] * tanh(alpha * x) + beta[c].

    Contiguous x runs through the kernels as N rows of C * L elements (L = prod(spatial); column j takes
    channel j // L's gamma and beta), no copy; x in torch.channels_last memory format is channels-last in
    memory and runs through dyt's usual kernels on the moved view (no copy either); other layouts are
    copied once. y is in torch.channels_last memory format for such x, contiguous otherwise, on every
    path. Same contract as dyt() otherwise (a float8 out_dtype: dyt.fp8.dyt_fp8 with channels_first).
    """
    if out_dtype is not None and out_dtype in FP8_DTYPES:
        return fp8.dyt_fp8(x, alpha, gamma, beta, fp8_dtype=out_dtype, channels_first=True)
    if torch.compiler.is_compiling():
        return dyt(x.movedim(1, -1), alpha, gamma, beta, out_dtype=out_dtype).movedim(-1, 1)
    op = _native_op(x)
    if op is not None and x.is_contiguous():
        return _call_native(op, x, alpha, gamma, beta, True, out_dtype)
    validate(x, alpha, gamma, beta, channels_first=True, out_dtype=out_dtype)
    if _transformed():
        return _ComposableDyT.apply(x, alpha, gamma, beta, True, out_dtype)
    kernels = _use_triton(x)
    if not x.is_contiguous() or not kernels:
        moved = x.movedim(1, -1)
        if moved.is_contiguous():  # channels-last memory: the row kernels (or plain rows), as is
            return dyt(moved, alpha, gamma, beta, out_dtype=out_dtype).movedim(-1, 1)
        if not kernels:  # the plain path works in rows; y contiguous, as the kernels return it
            return dyt(moved, alpha, gamma, beta, out_dtype=out_dtype).movedim(-1, 1).contiguous()
        x = x.contiguous()
        op = _native_op(x)  # validated above: the op's own checks pass
        if op is not None:
            return op(x, alpha, gamma, beta, True, launcher.current_overrides().poison, out_dtype)
    if _records_grad(x, alpha, gamma, beta):
        return _EagerDyT.apply(x, alpha, gamma, beta, True, out_dtype)
    return forward_impl(x, alpha, gamma, beta, channels_first=True, out_dtype=out_dtype)


# Packed parameters: alpha, gamma and beta in one tensor (dyt.PackedDyT), one gradient per layer.


def dyt_packed(x: torch.Tensor, params: torch.Tensor, *, bias: bool = True, channels_first: bool = False,
               out_dtype: torch.dtype | None = None) -> torch.Tensor:  # fmt: skip
    """dyt (or dyt_channels_first) with alpha, gamma and beta packed in one 1-D tensor `params`, laid out
    as [gamma (C), beta (C) where bias, alpha (1)]: y and every gradient equal the unpacked call's, and
    params gets one gradient, in its own dtype.

    Eager CUDA calls run the native op torch.ops.dyt_native.dyt_packed, whose backward hands autograd
    params' whole gradient as one tensor (channels-first x in torch.channels_last memory format: on the
    moved view, as dyt_channels_first runs it); elsewhere (torch.compile, the CPU, the Python path's cases in
    docs/host-path.md) the call is dyt's on views of params (split_params). A float8 out_dtype:
    dyt.fp8.dyt_packed_fp8.
    """
    if out_dtype is not None and out_dtype in FP8_DTYPES:
        return fp8.dyt_packed_fp8(x, params, bias=bias, channels_first=channels_first, fp8_dtype=out_dtype)
    if not torch.compiler.is_compiling():
        op = _native_op(x)
        if op is None and not channels_first and _strided_channels(x):
            x = x.contiguous()  # as dyt() does: the call then takes the native path
            op = _native_op(x)
        if op is not None and (not channels_first or x.is_contiguous()):
            poison = launcher.current_overrides().poison
            try:
                return native.PACKED_OP(x, params, bias, channels_first, poison, out_dtype)
            except (RuntimeError, TypeError):
                validate_packed(x, params, bias=bias, channels_first=channels_first, out_dtype=out_dtype)
                raise
        if channels_first and op is None and isinstance(x, torch.Tensor) and x.is_cuda and x.dim() > 2:
            moved = x.movedim(1, -1)
            if moved.is_contiguous() and _native_op(moved) is not None:  # torch.channels_last memory
                validate_packed(x, params, bias=bias, channels_first=True, out_dtype=out_dtype)
                return dyt_packed(moved, params, bias=bias, out_dtype=out_dtype).movedim(-1, 1)
    validate_packed(x, params, bias=bias, channels_first=channels_first, out_dtype=out_dtype)
    entry = dyt_channels_first if channels_first else dyt
    return entry(x, *split_params(params, bias), out_dtype=out_dtype)
