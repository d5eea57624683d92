"""The one tolerance table of the suites, and the checks that apply it against the float64 reference.

float32 storage: relative L2 error at most 1e-6 for y and dx, 1e-5 for parameter gradients. A parameter
gradient is a sum of float32-evaluated terms, so where the sum cancels (|sum| far below its terms) its
allowance also holds the terms' own rounding, EVAL_ULPS float32 ulps of their root sum of squares (rss):
the error that even an exact accumulation of float32 terms carries. A term whose expression amplifies the
rounding of its argument counts with that amplification on top: dalpha's terms hold sech^2(alpha x), which
turns an ulp of alpha x into 2|alpha x| ulps of the term (dyt.reference.evaluation_scales derives the
weights).
bfloat16/float16 storage: every element within one ulp of the reference rounded to that dtype, plus the
float32 evaluation error of the expression: EVAL_ULPS float32 ulps of its largest term (scale), so that
results that cancel to nearly zero are judged by what float32 arithmetic can deliver.
NaN patterns, and the positions and signs of infinities, must match the reference exactly.
"""

from __future__ import annotations

import torch

REL_L2 = {"out": 1e-6, "param": 1e-5}
EVAL_ULPS = 8
FP32_EPS = 2.0**-23
MANTISSA_BITS = {
    torch.bfloat16: 7,
    torch.float16: 10,
    torch.float32: 23,
    torch.float8_e4m3fn: 3,
    torch.float8_e5m2: 2,
}
# The opt-in hardware tanh (DYT_TANH=hw_approx: PTX tanh.approx.f32, relative error below 2^-10.987) is held
# to its documented error instead of the contract, on top of one ulp of the storage dtype: y may be off by
# |gamma| HW_TANH["y"] and dx (through sech^2 = 1 - t^2) by |dy gamma alpha| HW_TANH["dx"].
HW_TANH = {"y": 2.0**-10.9, "dx": 2.0**-9.9}


def ulp(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Spacing of dtype at the reference rounded to dtype (float64 result); subnormal spacing near 0.

    Exact by construction: frexp's exponent, and the power of two built from its bits (floor(log2(r)) puts
    some powers of two in the binade below on the GPU: half the spacing, a false failure)."""
    finfo = torch.finfo(dtype)
    r = values.to(dtype).to(torch.float64).abs().clamp_min(finfo.tiny)
    exponent = torch.frexp(r).exponent.to(torch.int64) - 1  # r = m 2^e with m in [0.5, 1)
    spacing = ((exponent - MANTISSA_BITS[dtype] + 1023) << 52).view(torch.float64)
    return spacing.clamp_min(finfo.tiny * 2.0 ** -MANTISSA_BITS[dtype])


def assert_same_nonfinite(name: str, got: torch.Tensor, ref: torch.Tensor) -> None:
    # Compared where the reference lives (the GPU for GPU runs): moving 2^29-element tensors to a
    # slow host CPU cost a minute per case.
    got64 = got.detach().to(device=ref.device, dtype=torch.float64)
    nan_got, nan_ref = torch.isnan(got64), torch.isnan(ref)
    if not torch.equal(nan_got, nan_ref):
        extra = (nan_got & ~nan_ref).nonzero()[:5].tolist()
        missing = (nan_ref & ~nan_got).nonzero()[:5].tolist()
        raise AssertionError(
            f"{name}: NaN pattern differs from the reference: {int((nan_got & ~nan_ref).sum())} extra NaN "
            f"(first at {extra}), {int((nan_ref & ~nan_got).sum())} missing (first at {missing})"
        )
    inf_ref = torch.isinf(ref)
    inf_got = torch.isinf(got64)
    if not torch.equal(inf_got, inf_ref) or not torch.equal(got64[inf_ref], ref[inf_ref]):
        raise AssertionError(f"{name}: infinities differ from the reference")


def assert_close(name: str, got: torch.Tensor, ref: torch.Tensor, *, kind: str, storage: torch.dtype,
                 scale: torch.Tensor | None = None, rss: torch.Tensor | None = None) -> None:  # fmt: skip
    """got (any dtype) against the float64 ref; kind 'out' (y, dx) or 'param' (parameter gradients).

    storage is the dtype the value is stored in (got.dtype); scale is the magnitude of the largest float32
    term of each element's expression (defaults to |ref|), used by the 16-bit rule; rss is each parameter
    gradient's root sum of squared terms, used by the float32 rule for parameter gradients (both as
    dyt.reference.evaluation_scales gives them, where a term's argument rounding is amplified).
    """
    assert got.dtype == storage, f"{name}: dtype {got.dtype}, expected {storage}"
    assert tuple(got.shape) == tuple(ref.shape), (
        f"{name}: shape {tuple(got.shape)}, expected {tuple(ref.shape)}"
    )
    assert_same_nonfinite(name, got, ref)
    got64 = got.detach().to(device=ref.device, dtype=torch.float64)
    finite = torch.isfinite(ref)
    g, r = got64[finite], ref[finite]
    if r.numel() == 0:
        return
    if storage == torch.float32:
        err = (g - r).norm()
        norm = r.norm()
        rel = float(err / norm) if norm > 0 else float(err)
        limit = REL_L2[kind]
        if kind == "param" and rss is not None and norm > 0:
            limit += float(EVAL_ULPS * FP32_EPS * rss.to(ref.device)[finite].norm() / norm)
        if not rel <= limit:
            worst = int((g - r).abs().argmax())
            raise AssertionError(
                f"{name}: relative L2 error {rel:.3e} > {limit:.2e} (worst element {worst}: got "
                f"{float(g[worst])!r}, reference {float(r[worst])!r})"
            )
        return
    s = (scale if scale is not None else ref.abs()).to(ref.device)[finite]
    allowed = ulp(r, storage) + EVAL_ULPS * FP32_EPS * s
    bad = (g - r).abs() > allowed
    if bool(bad.any()):
        i = int(bad.nonzero()[0])
        raise AssertionError(
            f"{name}: {int(bad.sum())} of {r.numel()} elements off by more than one {storage} ulp "
            f"(+ float32 evaluation error); first: got {float(g[i])!r}, reference {float(r[i])!r}, "
            f"allowed {float(allowed[i]):.3e}"
        )


def assert_fp8_close(name: str, data: torch.Tensor, scale: torch.Tensor, ref: torch.Tensor, *,
                     terms: torch.Tensor) -> None:  # fmt: skip
    """FP8 output (dyt.fp8) against the float64 reference ref: data * scale must be ref rounded once to
    data's format at that scale (r = ref / scale), within the float32 evaluation error of the expression
    (EVAL_ULPS float32 ulps of terms, |gamma tanh| + |beta| per element, over the scale): each element within
    half an ulp of the format at r plus that error, so that only where r lies that close to a rounding
    boundary may the other neighbour come. NaN exactly where the reference has NaN; no saturation: |data|
    at most the format's largest value, which a reference within range never needs to pass."""
    fmt = data.dtype
    assert fmt in (torch.float8_e4m3fn, torch.float8_e5m2), f"{name}: dtype {fmt}, expected a float8 format"
    assert scale.dtype == torch.float32, f"{name}: scale dtype {scale.dtype}, expected torch.float32"
    q = data.to(torch.float64).to(ref.device)
    s64 = scale.to(device=ref.device, dtype=torch.float64)
    r = ref / s64
    assert_same_nonfinite(name, q, r)
    finite = torch.isfinite(r)
    fmax = torch.finfo(fmt).max
    q, r = q[finite], r[finite]
    evaluation = EVAL_ULPS * FP32_EPS * (terms.to(ref.device) / s64).expand_as(ref)[finite]
    if bool((r.abs() - evaluation > fmax).any()):
        raise AssertionError(f"{name}: the reference over the scale passes {fmax}: the scale is too small")
    allowed = 0.5 * ulp(r, fmt) + evaluation
    bad = (q - r).abs() > allowed
    if bool(bad.any()):
        i = int(bad.nonzero()[0])
        raise AssertionError(
            f"{name}: {int(bad.sum())} of {r.numel()} elements not the reference rounded to {fmt} at the "
            f"scale; first: got {float(q[i])!r}, reference / scale {float(r[i])!r}, allowed "
            f"{float(allowed[i]):.3e}"
        )
