"""The inputs of every call: the checks that refuse what the contract does not take, the row layouts the
kernels read, the packed parameter's layout, and which path (the Triton kernels or plain PyTorch) a tensor
takes. dyt.ops and dyt.fp8 both build on these; nothing here launches or computes.

Invariant: validate refuses exactly what dyt_native.cpp's check_inputs refuses (the native op falls back
to it for the message), and its checks are plain comparisons: every call pays for them.
"""

from __future__ import annotations

import torch

SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)  # out_dtype's float8 formats: dyt.fp8

try:  # Triton is optional: without it CPU tensors still take the plain PyTorch path.
    from dyt import launcher
except ImportError as _err:  # pragma: no cover - exercised only where triton is absent
    launcher = None
    _TRITON_IMPORT_ERROR = _err


_NAMES = ("x", "alpha", "gamma", "beta")


def validate(x, alpha, gamma, beta, *, channels_first: bool = False, out_dtype=None) -> None:
    """Clear ValueError/TypeError naming what was expected and what came. Every call pays for these checks,
    so they are plain comparisons and the messages are built only on failure. Under torch.compile the op's
    fake implementation runs them while tracing (see dyt()). channels_first: x is (N, C, *spatial);
    out_dtype: y's dtype, None for x's."""
    if out_dtype is not None and out_dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"dyt: out_dtype must be torch.float32, torch.bfloat16, torch.float16, a float8 "
                        f"format (torch.float8_e4m3fn, torch.float8_e5m2: dyt.fp8) or None (x's dtype), "
                        f"got {out_dtype!r}")  # fmt: skip
    tensors = (x, alpha, gamma) if beta is None else (x, alpha, gamma, beta)
    for t in tensors:
        if not isinstance(t, torch.Tensor) or t.dtype not in SUPPORTED_DTYPES:
            name = next(n for n, u in zip(_NAMES, tensors, strict=False) if u is t)
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"dyt: {name} must be a torch.Tensor, got {type(t).__name__}")
            raise TypeError(
                f"dyt: {name} must be a floating tensor of dtype float32, bfloat16 or float16, got {t.dtype}"
            )
    shape = x.shape
    if channels_first:
        if len(shape) < 2:
            raise ValueError("dyt: channels-first x must have at least two dimensions (N, C, ...), got "
                             f"shape {tuple(shape)}")  # fmt: skip
        C, where, named = shape[1], "x's channels (dim 1)", "x's channel dimension (dim 1)"
    else:
        if not shape:
            raise ValueError(f"dyt: x must have at least one dimension (..., C), got shape {tuple(shape)}")
        C, where, named = shape[-1], "x's last dimension", "x's last dimension (channels)"
    if C < 1:
        raise ValueError(f"dyt: {named} must be at least 1, got shape {tuple(shape)}")
    if alpha.numel() != 1:
        raise ValueError(f"dyt: alpha must have exactly one element, got shape {tuple(alpha.shape)}")
    if gamma.shape != (C,):
        raise ValueError(f"dyt: gamma must have shape ({C},) to match {where}, got {tuple(gamma.shape)}")
    if beta is not None and beta.shape != (C,):
        raise ValueError(f"dyt: beta must have shape ({C},) to match {where}, got {tuple(beta.shape)}")
    device = x.device
    if alpha.device != device or gamma.device != device or (beta is not None and beta.device != device):
        listing = ", ".join(f"{n} on {t.device}" for n, t in zip(_NAMES, tensors, strict=False))
        raise ValueError(f"dyt: all tensors must be on one device, got {listing}")


def as_2d(t: torch.Tensor) -> torch.Tensor:
    """(rows, C) view; copies only when the last dimension is not contiguous. A 2-D tensor is its own
    view: a reshape costs host time per call even when it changes nothing (docs/host-path.md)."""
    C = t.shape[-1]
    t2d = t if t.dim() == 2 else t.reshape(-1, C)
    if C > 1 and t2d.stride(1) != 1:
        t2d = t2d.contiguous()
    return t2d


def as_rows(t: torch.Tensor) -> torch.Tensor:
    """What the kernels take (dyt.launcher's row layouts): a contiguous tensor as it is, whatever its
    rank; otherwise the (rows, C) view of as_2d."""
    return t if t.dim() != 2 and t.is_contiguous() else as_2d(t)


def as_one(alpha: torch.Tensor) -> torch.Tensor:
    """alpha as shape (1,) (one element: contiguous whatever its strides)."""
    return alpha if alpha.dim() == 1 else alpha.reshape(1)


def shaped_like(t: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """t (x's shape, or (rows, C)) in x's shape; itself where the ranks agree."""
    return t if t.dim() == x.dim() else t.reshape(x.shape)


def use_triton(x: torch.Tensor) -> bool:
    """Whether x's call runs the Triton kernels: CUDA tensors (Triton must have imported), and CPU tensors
    where Triton's interpreter is on; else the plain PyTorch path (dyt.torch_path)."""
    if x.is_cuda:
        if launcher is None:
            raise RuntimeError(
                f"dyt: CUDA tensors need Triton, which failed to import: {_TRITON_IMPORT_ERROR}"
            )
        return True
    return launcher is not None and launcher.interpreter_active() and x.device.type == "cpu"


def records_grad(x, alpha, gamma, beta) -> bool:
    """Whether autograd must see this call (outside torch.func transforms: dyt.ops._transformed). Where it
    need not (no_grad, inference_mode, or no input that requires grad), the autograd.Function would cost
    host time for a tensor without grad_fn (docs/host-path.md)."""
    if not torch.is_grad_enabled():
        return False
    needs = x.requires_grad or alpha.requires_grad or gamma.requires_grad
    return needs or (beta is not None and beta.requires_grad)


# Packed parameters: alpha, gamma and beta in one tensor (dyt.PackedDyT).


def split_params(params: torch.Tensor, bias: bool):
    """(alpha, gamma, beta) of a packed parameter laid out as [gamma (C), beta (C) where bias, alpha (1)],
    as views (autograd carries their gradients back into params); beta is None without bias."""
    C = (params.shape[0] - 1) // (2 if bias else 1)
    return params[-1:], params[:C], params[C : 2 * C] if bias else None


def packed_size(C: int, bias: bool) -> int:
    """The length of a packed parameter for C channels."""
    return C * (2 if bias else 1) + 1


def validate_packed(x, params, *, bias: bool, channels_first: bool = False, out_dtype=None) -> None:
    """validate() for a packed parameter: the same checks, and params' own shape named in its terms."""
    if not isinstance(params, torch.Tensor):
        raise TypeError(f"dyt: params must be a torch.Tensor, got {type(params).__name__}")
    if params.dtype not in SUPPORTED_DTYPES:
        raise TypeError(
            f"dyt: params must be a floating tensor of dtype float32, bfloat16 or float16, got {params.dtype}"
        )
    if isinstance(x, torch.Tensor) and x.dim() >= (2 if channels_first else 1):
        C = x.shape[1 if channels_first else -1]
        n = packed_size(C, bias)
        if C >= 1 and tuple(params.shape) != (n,):
            layout = "[weight (C), bias (C), alpha (1)]" if bias else "[weight (C), alpha (1)]"
            where = "x's channels (dim 1)" if channels_first else "x's last dimension"
            raise ValueError(
                f"dyt: params must have shape ({n},), {layout} for C = {C} ({where}), "
                f"got {tuple(params.shape)}"
            )
        if params.device != x.device:
            raise ValueError(
                f"dyt: x and params must be on one device, got x on {x.device}, params on {params.device}"
            )
        validate(x, *split_params(params, bias), channels_first=channels_first, out_dtype=out_dtype)
    else:  # x's own complaint
        validate(x, params.reshape(-1)[:1], params, None, channels_first=channels_first, out_dtype=out_dtype)
