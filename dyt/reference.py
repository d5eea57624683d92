"""Float64 truth for DyT, the yardstick of every suite and of the bench's error column.

The formulas follow eager autograd's composition (dz = dy * gamma * sech^2, dx = dz * alpha,
dalpha = sum(dz * x)), so non-finite values propagate exactly as the eager reference does, but
sech^2 is computed as 1 / cosh(z)^2 instead of 1 - tanh(z)^2, which would round to zero in float64
for |z| > 19 and make the reference, not the kernel, wrong there.
"""

from __future__ import annotations

import torch


def _as64(t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None else t.detach().to(torch.float64)


def dyt_forward_reference(x, alpha, gamma, beta=None) -> torch.Tensor:
    """y = gamma * tanh(alpha * x) + beta in float64, over the last dimension of x."""
    x64, a64, g64, b64 = _as64(x), _as64(alpha).reshape(()), _as64(gamma), _as64(beta)
    y = g64 * torch.tanh(a64 * x64)
    return y if b64 is None else y + b64


def sech2_reference(z: torch.Tensor) -> torch.Tensor:
    """1 - tanh(z)^2 without cancellation: exact to float64 rounding for every finite z, 0 at +-inf."""
    return torch.cosh(z).reciprocal().square()


def dyt_backward_reference(dy, x, alpha, gamma, beta=None):
    """(dx, dalpha, dgamma, dbeta) in float64; dbeta is None when beta is None.

    Reductions run over every dimension but the last (dgamma, dbeta) or over all (dalpha).
    """
    x64, dy64 = _as64(x), _as64(dy)
    a64, g64 = _as64(alpha).reshape(()), _as64(gamma)
    z = a64 * x64
    t = torch.tanh(z)
    dz = dy64 * g64 * sech2_reference(z)
    dx = dz * a64
    lead = tuple(range(x64.dim() - 1))
    dalpha = (dz * x64).sum().reshape(alpha.shape)
    dgamma = (dy64 * t).sum(dim=lead) if lead else dy64 * t
    dbeta = None
    if beta is not None:
        dbeta = dy64.sum(dim=lead) if lead else dy64.clone()
    return dx, dalpha, dgamma, dbeta
