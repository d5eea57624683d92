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


# How far off, in float32 ulps of z, the argument that reaches sech^2(z)'s exponential may be
# (evaluation_scales derives it).
ARGUMENT_ULPS = 1.5


def evaluation_scales(dy, x, alpha, gamma, beta=None, *, eval_ulps: float = 8) -> dict[str, tuple]:
    """What the tolerance rule (dyt.conformance.tolerances) needs beside each reference value, in float64:
    for y, the magnitude of its largest float32 term per element (|gamma tanh| + |beta|); for each parameter
    gradient, the sum of its terms' magnitudes and their root sum of squares over the reduced dimensions.
    Keys y, dalpha, dgamma and (with beta) dbeta; values (scale, rss), rss None for y.

    The rule grants each term eval_ulps float32 ulps (dyt.conformance.tolerances.EVAL_ULPS, the default) for
    the operations that evaluate it. dalpha's terms dy gamma x sech^2(z), z = alpha x, also carry the rounding
    of their argument, which sech^2 amplifies: a relative error d of z moves sech^2(z) by
    |d log sech^2(z) / d log z| d = 2|z tanh z| d. z = alpha x rounds to float32, and exp(-2|z|), evaluated
    as exp2(-2|z| log2 e) (the GPU's exponential), rounds the constant log2 e and the product: three
    roundings of half an ulp each, so the exponent is up to ARGUMENT_ULPS = 1.5 ulps of z off. Each dalpha
    term's magnitude therefore counts with weight 1 + ARGUMENT_ULPS 2|z tanh z| / eval_ulps, i.e.
    eval_ulps + 3|z tanh z| ulps of the term (8 + 60 at |z| = 20, where sech^2 ~ 4 exp(-40); 8 + 132 at
    |z| = 44, where it leaves float32's normal range); where the weight is not finite, the term is exactly
    0 or NaN and keeps its magnitude. tanh's condition number 2|z| / sinh(2|z|) is at most 1, one of
    eval_ulps' ulps, so dgamma's terms (dy tanh z) keep eval_ulps unweighted, as do dbeta's (dy)."""
    x64, dy64 = _as64(x), _as64(dy)
    a64, g64, b64 = _as64(alpha).reshape(()), _as64(gamma), _as64(beta)
    z = a64 * x64
    t = torch.tanh(z)
    dz = dy64 * g64 * sech2_reference(z)
    lead = tuple(range(x64.dim() - 1))
    amplification = (2.0 * z * t).abs().nan_to_num(nan=0.0, posinf=0.0)
    weight = 1.0 + ARGUMENT_ULPS * amplification / eval_ulps

    def sums(terms, dims):
        """(sum of |terms|, root sum of squares) over the reduced dimensions."""
        if terms.dim() == 0 or not dims:
            return terms.abs(), terms.abs()
        return terms.abs().sum(dim=dims), terms.square().sum(dim=dims).sqrt()

    da_abs, da_rss = sums(dz * x64 * weight, tuple(range(x64.dim())))
    scales = {
        "y": ((g64 * t).abs() + (b64.abs() if b64 is not None else 0.0), None),
        "dalpha": (da_abs.reshape(alpha.shape), da_rss.reshape(alpha.shape)),
        "dgamma": sums(dy64 * t, lead),
    }
    if beta is not None:
        scales["dbeta"] = sums(dy64, lead)
    return scales


NONZERO = 2.0**-14  # what random_inputs draws in place of a 0: a normal number in float16 too


def random_inputs(shape, dtype, *, seed: int, param_dtype=None, beta: bool = True, alpha: float | None = None,
                  x_scale: float = 1.0, device="cpu") -> dict[str, torch.Tensor | None]:  # fmt: skip
    """Fresh random inputs of DyT, never zeros, the same for the suites and the bench: x and dy ~ N(0, 1)
    (x times x_scale) in dtype, gamma ~ 1 + N(0, 1/4) and beta ~ N(0, 1) of shape (C,) and alpha ~
    U(0.3, 1.2) (unless given) of shape (1,) in param_dtype (default: dtype); drawn in float32 on device
    from a generator seeded with seed, then rounded. Keys x, alpha, gamma, beta (None without beta), dy.

    No element is 0: a draw that is, or rounds to, 0 becomes NONZERO (an x of 0 with an infinite alpha
    makes tanh(inf * 0) = NaN in a real element, which the padding suites would take for leaked padding)."""
    device = torch.device(device)
    param_dtype = param_dtype or dtype
    gen = torch.Generator(device=device).manual_seed(seed)
    C = shape[-1]

    def randn(*s):
        return torch.randn(*s, generator=gen, device=device, dtype=torch.float32)

    def nonzero(t: torch.Tensor, to: torch.dtype) -> torch.Tensor:
        t = t.to(to)
        return t.masked_fill_(t == 0, NONZERO)

    x = randn(*shape)
    if x_scale != 1.0:
        x *= x_scale
    a = torch.rand(1, generator=gen, device=device) * 0.9 + 0.3 if alpha is None else None
    return {
        "x": nonzero(x, dtype),
        "alpha": (a if a is not None else torch.full((1,), float(alpha), device=device)).to(param_dtype),
        "gamma": nonzero(1.0 + 0.5 * randn(C), param_dtype),
        "beta": nonzero(randn(C), param_dtype) if beta else None,
        "dy": nonzero(randn(*shape), dtype),
    }
