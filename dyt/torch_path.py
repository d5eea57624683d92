"""Plain PyTorch DyT with the kernels' contract, for CPU tensors when Triton's interpreter is off.

Same float32 arithmetic, same output dtypes, same sech^2 formulation (no 1 - tanh^2 cancellation), so a
model built on DyT still runs, and agrees with the kernels to float32 rounding, on a machine with no GPU.
differentiable_backward is the backward for passes that build a graph (create_graph=True), on every
device: the kernels' gradients are not differentiable again. forward and tangent are also what calls
under torch.func transforms or forward-mode AD run, on every device (dyt.ops._ComposableDyT).
"""

from __future__ import annotations

import torch

from dyt.planner import POLY_LIMITS

_POLY_LIMIT = POLY_LIMITS[5]  # the kernels' switch point between the two sech^2 formulas


def _tanh_sech2(z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """tanh(z) and sech^2(z): 1 - tanh^2 near 0, _sech2's exp(-|z|) form past _POLY_LIMIT (no cancellation,
    and float32's subnormals past |z| = 44.4, where exp(2|z|) overflows)."""
    t = torch.tanh(z)
    return t, torch.where(z.abs() < _POLY_LIMIT, 1.0 - t * t, _sech2(z))


def _channel_view(p: torch.Tensor, x: torch.Tensor, channels_first: bool) -> torch.Tensor:
    """A per-channel float32 parameter shaped to broadcast against x: (C,) over the last dimension, or
    (C, 1, ..., 1) over dim 1 of a channels-first x (N, C, *spatial)."""
    p = p.float()
    return p.reshape(p.shape[0], *([1] * (x.dim() - 2))) if channels_first and x.dim() > 2 else p


def _sech2(z: torch.Tensor) -> torch.Tensor:
    """sech^2 = sech * sech with sech = 2h / (1 + h^2), h = exp(-|z|), as the kernels compute it
    (dyt.kernels._sech_and_q): accurate at every z (no 1 - tanh^2 cancellation), finite in its own
    derivatives where exp(2|z|) overflows, and one rounding from its value where it is a float32 subnormal
    (|z| from 44 to 52): h is a normal number until |z| ~ 87. Not 4h / (1 + h)^2 with h = exp(-2|z|): that h
    is subnormal from |z| ~ 44 on, and the 4 scales its rounding, dx more than a bfloat16 ulp off where
    |dy gamma alpha| passes ~2^15 (tests/fuzz_regressions.py holds such cases)."""
    h = torch.exp(-z.abs())
    sech = (2.0 / (1.0 + h * h)) * h
    return sech * sech


def forward(x, alpha, gamma, beta, out_dtype, *, channels_first: bool = False) -> torch.Tensor:
    """y of x of any rank, (rows, C) or as it is, in out_dtype. channels_first: x is (N, C, *spatial)."""
    t = torch.tanh(alpha.float().reshape(()) * x.float())
    y = _channel_view(gamma, x, channels_first) * t
    if beta is not None:
        y = y + _channel_view(beta, x, channels_first)
    return y.to(out_dtype)


SMALLEST_FP8_SCALE = 2.0**-126  # the least scale: 1 / scale stays a finite float32


def fp8_parameter_scale(gamma, beta, fp8_max: float) -> torch.Tensor:
    """The tensorwise float8 scale, shape (): max(max_c (|gamma[c]| + |beta[c]|) / fp8_max, 2^-126) in
    float32, NaN where a parameter is not finite (dyt.kernels.dyt_fp8_scale_kernel computes the same
    bits). Plain ops: no host sync, and traceable by torch.compile."""
    bound = gamma.float().abs()
    if beta is not None:
        bound = bound + beta.float().abs()
    top = bound.amax()
    scale = torch.div(top, fp8_max).clamp_min(SMALLEST_FP8_SCALE)
    return torch.where(bound.isfinite().all(), scale, torch.full_like(scale, float("nan")))


def forward_fp8(x, alpha, gamma, beta, fp8_dtype, fp8_max: float, *, rowwise: bool = False,
                channels_first: bool = False) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """(data, scale): y / scale rounded to fp8_dtype (round to nearest even, saturating), y as forward
    computes it in float32. Tensorwise: scale of shape () from the parameters (fp8_parameter_scale).
    Rowwise (rows of the last dimension): scale of shape (*x.shape[:-1], 1), max(amax / fp8_max, 2^-126)
    of each row's |y| with NaN left out, the kernels' rule."""
    y = forward(x, alpha, gamma, beta, torch.float32, channels_first=channels_first)
    if rowwise:
        amax = torch.where(y.isnan(), 0.0, y.abs()).amax(dim=-1, keepdim=True)
        scale = torch.div(amax, fp8_max).clamp_min(SMALLEST_FP8_SCALE)
    else:
        scale = fp8_parameter_scale(gamma, beta, fp8_max)
    return (y * torch.reciprocal(scale)).to(fp8_dtype), scale


def backward(dy2d, x2d, alpha, gamma, dx_dtype, dalpha_dtype, dgamma_dtype, dbeta_dtype):
    a = alpha.float().reshape(())
    xf, dyf = x2d.float(), dy2d.float()
    t, sech2 = _tanh_sech2(a * xf)
    dz = dyf * gamma.float() * sech2
    dx = (dz * a).to(dx_dtype)
    dalpha = (dz * xf).double().sum().reshape(1).to(dalpha_dtype)  # float64 sum, as the kernels do
    dgamma = (dyf * t).sum(0).to(dgamma_dtype)
    dbeta = dyf.sum(0).to(dbeta_dtype)
    return dx, dalpha, dgamma, dbeta


def tangent(tangents, x, alpha, gamma, beta, *, channels_first: bool = False, out_dtype=None) -> torch.Tensor:
    """The forward-mode derivative of y along (x, alpha, gamma, beta)'s tangents (None: no tangent), in
    float32 with _sech2, in y's dtype (out_dtype, else x.dtype) and x's shape."""
    x_t, alpha_t, gamma_t, beta_t = tangents
    a, xf = alpha.float().reshape(()), x.float()
    z = a * xf
    total = torch.zeros_like(xf)
    if x_t is not None or alpha_t is not None:
        dz = (a * x_t.float() if x_t is not None else 0.0) + (
            alpha_t.float().reshape(()) * xf if alpha_t is not None else 0.0
        )
        total = total + _channel_view(gamma, x, channels_first) * _sech2(z) * dz
    if gamma_t is not None:
        total = total + _channel_view(gamma_t, x, channels_first) * torch.tanh(z)
    if beta_t is not None:
        total = total + _channel_view(beta_t, x, channels_first)
    return total.to(out_dtype or x.dtype)


def differentiable_backward(dy, x, alpha, gamma, beta, *, channels_first: bool = False):
    """(dx, dalpha shaped (1,), dgamma, dbeta) as PyTorch ops that autograd records, so that gradients of
    the gradients exist (double backward, gradient penalties); the contract's float32 arithmetic and
    dtypes, dbeta in gamma's dtype without beta, sech^2 as _sech2 computes it. channels_first: x is (N, C,
    *spatial)."""
    a = alpha.float().reshape(())
    xf, dyf = x.float(), dy.float()
    g = _channel_view(gamma, x, channels_first)
    dims = [0, *range(2, x.dim())] if channels_first and x.dim() > 2 else list(range(x.dim() - 1))
    z = a * xf
    dz = dyf * g * _sech2(z)
    dbeta_dtype = gamma.dtype if beta is None else beta.dtype

    def per_channel(t):  # a 1-D x is one row: nothing to sum (sum([]) would sum over every dimension)
        return t.sum(dims) if dims else t

    return (
        (dz * a).to(x.dtype),
        (dz * xf).double().sum().reshape(1).to(alpha.dtype),
        per_channel(dyf * torch.tanh(z)).to(gamma.dtype),
        per_channel(dyf).to(dbeta_dtype),
    )
