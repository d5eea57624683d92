"""Plain PyTorch DyT with the kernels' contract, for CPU tensors when Triton's interpreter is off.

Same float32 arithmetic, same output dtypes, same sech^2 formulation (no 1 - tanh^2 cancellation), so a
model built on DyT still runs, and agrees with the kernels to float32 rounding, on a machine with no GPU.
differentiable_backward is the backward for passes that build a graph (create_graph=True), on every
device: the kernels' gradients are not differentiable again.
"""

from __future__ import annotations

import torch

from dyt.planner import POLY_LIMITS

_POLY_LIMIT = POLY_LIMITS[5]  # the kernels' switch point between the two sech^2 formulas


def _tanh_sech2(z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    t = torch.tanh(z)
    q = 2.0 / (torch.exp(2.0 * z.abs()) + 1.0)
    sech2 = torch.where(z.abs() < _POLY_LIMIT, 1.0 - t * t, q * (2.0 - q))
    return t, sech2


def forward(x2d, alpha, gamma, beta, out_dtype) -> torch.Tensor:
    t = torch.tanh(alpha.float().reshape(()) * x2d.float())
    y = gamma.float() * t
    if beta is not None:
        y = y + beta.float()
    return y.to(out_dtype)


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


def differentiable_backward(dy, x, alpha, gamma, beta, *, channels_first: bool = False):
    """(dx, dalpha shaped (1,), dgamma, dbeta) as PyTorch ops that autograd records, so that gradients of
    the gradients exist (double backward, gradient penalties); the contract's float32 arithmetic and
    dtypes, dbeta in gamma's dtype without beta. channels_first: x is (N, C, *spatial).

    sech^2 = 4h / (1 + h)^2 with h = exp(-2|z|): accurate at every z (no 1 - tanh^2 cancellation) and, unlike
    2 / (exp(2|z|) + 1), finite in its own derivatives where exp(2|z|) overflows."""
    a = alpha.float().reshape(())
    xf, dyf = x.float(), dy.float()
    if channels_first and x.dim() > 2:
        g = gamma.float().reshape(gamma.shape[0], *([1] * (x.dim() - 2)))
        dims = [0, *range(2, x.dim())]
    else:
        g = gamma.float()
        dims = list(range(x.dim() - 1))
    z = a * xf
    h = torch.exp(-2.0 * z.abs())
    sech2 = 4.0 * h / (1.0 + h) ** 2
    dz = dyf * g * sech2
    dbeta_dtype = gamma.dtype if beta is None else beta.dtype
    return (
        (dz * a).to(x.dtype),
        (dz * xf).double().sum().reshape(1).to(alpha.dtype),
        (dyf * torch.tanh(z)).sum(dims).to(gamma.dtype),
        dyf.sum(dims).to(dbeta_dtype),
    )
