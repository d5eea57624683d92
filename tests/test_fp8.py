"""FP8 output (dyt.fp8): y written in a float8 format with a scale from the parameters (tensorwise) or from
each row (rowwise), against the float64 reference rounded once at that scale, on every tiling path and
layout, with non-finite inputs, padding, the entry points that take out_dtype, and the refusals.

On the CPU under Triton's interpreter the kernels run (dyt_fp8_scale_kernel, dyt_fwd_fp8_kernel); without
it, the plain path (dyt.torch_path.forward_fp8); on a GPU, the CUDA kernels.
"""

from __future__ import annotations

import os

import hypothesis
import pytest
import torch
from hypothesis import strategies as st

import dyt
from dyt import fp8, torch_path
from dyt.conformance.tolerances import FP32_EPS, assert_fp8_close
from dyt.reference import dyt_forward_reference, evaluation_scales

from helpers import device
from paths import PATHS, path_context

pytestmark = pytest.mark.dtype_contract

FORMATS = list(fp8.FORMATS)
FORMAT_IDS = ["e4m3fn", "e5m2"]


def _inputs(shape, dtype, param_dtype=None, *, beta=True, seed=0, x_scale=3.0):
    gen = torch.Generator().manual_seed(seed)
    C = shape[-1]
    x = (torch.randn(*shape, generator=gen) * x_scale).to(dtype)
    param_dtype = param_dtype or dtype
    alpha = (torch.rand(1, generator=gen) * 0.9 + 0.3).to(param_dtype)
    gamma = (1.0 + 0.5 * torch.randn(C, generator=gen)).to(param_dtype)
    b = torch.randn(C, generator=gen).to(param_dtype) if beta else None
    dev = device()
    return [None if t is None else t.to(dev) for t in (x, alpha, gamma, b)]


def _check(out: fp8.Float8Output, x, alpha, gamma, beta, fmt, *, rowwise: bool, channels_first=False):
    """The contract: the format and shapes, the scale's rule, the values rounded once at the scale."""
    assert out.data.dtype == fmt and out.data.shape == x.shape and out.data.device == x.device
    moved = (lambda t: t.movedim(1, -1)) if channels_first else (lambda t: t)
    xr = moved(x)
    ref = dyt_forward_reference(xr, alpha, gamma, beta)
    terms = evaluation_scales(torch.zeros_like(xr), xr, alpha, gamma, beta)["y"][0]
    fmax = fp8.FORMATS[fmt]
    if rowwise:
        assert out.scale.shape == (*x.shape[:-1], 1) and out.scale.dtype == torch.float32
        amax = torch.where(ref.isnan(), 0.0, ref.abs()).amax(dim=-1, keepdim=True)
        expected = (amax / fmax).clamp_min(fp8.SMALLEST_SCALE)
        slack = 8 * FP32_EPS * (terms.nan_to_num(0.0).amax(dim=-1, keepdim=True) / fmax)  # float32 y
        got = out.scale.double().cpu()
        close = (got == expected.cpu()) | ((got - expected.cpu()).abs() <= slack.cpu() + 1e-300)
        assert bool(close.all()), f"rowwise scale {got.flatten()[:8]} != {expected.flatten()[:8]}"
    else:
        assert out.scale.shape == () and out.scale.dtype == torch.float32
        expected = torch_path.fp8_parameter_scale(gamma.cpu(), None if beta is None else beta.cpu(), fmax)
        same = torch.allclose(out.scale.cpu(), expected, rtol=0, atol=0, equal_nan=True)
        assert same, f"tensorwise scale {out.scale} != {expected}"
    assert_fp8_close("y_fp8", moved(out.data), out.scale, ref, terms=terms)


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize("rowwise", [False, True], ids=["tensorwise", "rowwise"])
@pytest.mark.parametrize("fmt", FORMATS, ids=FORMAT_IDS)
@pytest.mark.parametrize(
    "dtype,param_dtype",
    [
        (torch.float32, None),
        (torch.bfloat16, None),
        (torch.float16, torch.float32),
        (torch.bfloat16, torch.float32),
    ],
    ids=["f32", "bf16", "f16-f32params", "bf16-f32params"],
)
def test_values_against_the_reference(path, rowwise, fmt, dtype, param_dtype):
    """Every tiling path (row tiles, column blocks, int64 offsets), rows not a multiple of a tile."""
    width, _ = PATHS[path]
    x, alpha, gamma, beta = _inputs((37, width), dtype, param_dtype, seed=width)
    with path_context(path):
        out = fp8.dyt_fp8(x, alpha, gamma, beta, fp8_dtype=fmt, rowwise=rowwise)
    _check(out, x, alpha, gamma, beta, fmt, rowwise=rowwise)


@pytest.mark.parametrize("rowwise", [False, True], ids=["tensorwise", "rowwise"])
@pytest.mark.parametrize("shape", [(3, 5, 64), (1, 1), (130, 16), (4, 8192)], ids=str)
def test_shapes_and_no_beta(shape, rowwise):
    """Rank 3, one element, folded narrow rows (tensorwise) and rows of several column blocks; no beta."""
    x, alpha, gamma, _ = _inputs(shape, torch.bfloat16, beta=False, seed=len(shape))
    out = fp8.dyt_fp8(x, alpha, gamma, None, rowwise=rowwise)
    _check(out, x, alpha, gamma, None, torch.float8_e4m3fn, rowwise=rowwise)


@pytest.mark.parametrize("fmt", FORMATS, ids=FORMAT_IDS)
def test_the_bound_is_reached_without_saturating(fmt):
    """Where tanh saturates (|alpha x| large) the channel with the largest |gamma| + |beta| writes the
    format's largest value exactly: the scale is the bound, and nothing passes it."""
    x, alpha, gamma, beta = _inputs((16, 96), torch.float32, seed=3)
    x = x.sign() * 1e4
    out = fp8.dyt_fp8(x, alpha, gamma, beta, fp8_dtype=fmt)
    _check(out, x, alpha, gamma, beta, fmt, rowwise=False)
    fmax = fp8.FORMATS[fmt]
    top = int((gamma.abs() + beta.abs()).argmax())
    same_sign = (x[:, top].sign() * gamma[top].sign()) == beta[top].sign()
    assert bool(same_sign.any()), "the draw must put the bound's sign in some row"
    assert float(out.data[:, top][same_sign].float().abs().max()) == fmax


@pytest.mark.parametrize("rowwise", [False, True], ids=["tensorwise", "rowwise"])
def test_nonfinite_x_and_alpha(rowwise):
    """NaN x is NaN where the reference has it; an infinite alpha with x = 0 is NaN there only; a rowwise
    scale skips NaN (the row's other elements set it); +-inf x saturates tanh, as the reference does."""
    x, alpha, gamma, beta = _inputs((9, 100), torch.float32, seed=5)
    x[1, 3] = float("nan")
    x[2, 7] = float("inf")
    x[4, 0] = -float("inf")
    out = fp8.dyt_fp8(x, alpha, gamma, beta, rowwise=rowwise)
    _check(out, x, alpha, gamma, beta, torch.float8_e4m3fn, rowwise=rowwise)
    assert bool(out.scale.isfinite().all())
    x2 = x.nan_to_num(0.0)
    x2[5, 11] = 0.0
    inf_alpha = torch.full_like(alpha, float("inf"))
    out = fp8.dyt_fp8(x2, inf_alpha, gamma, beta, rowwise=rowwise)
    _check(out, x2, inf_alpha, gamma, beta, torch.float8_e4m3fn, rowwise=rowwise)
    assert bool(out.data[5, 11].float().isnan()) and int(out.data.float().isnan().sum()) == int(
        (x2 == 0).sum()
    )


@pytest.mark.parametrize("path", sorted(PATHS))
def test_padding_never_enters_a_rowwise_scale(path):
    """An infinite alpha turns every padded element (x = 0 there) into NaN and every real one into
    +-gamma + beta: each row's scale must be its real elements' largest |y| over the format's largest
    value, on rows that leave a tile part empty and columns that leave a block part empty."""
    width, _ = PATHS[path]
    x, _, gamma, beta = _inputs((13, width + 3), torch.float32, seed=11)
    alpha = torch.full((1,), float("inf"), device=x.device)
    with path_context(path):
        out = fp8.dyt_fp8(x, alpha, gamma, beta, rowwise=True)
    _check(out, x, alpha, gamma, beta, torch.float8_e4m3fn, rowwise=True)
    assert bool(out.scale.isfinite().all()) and not bool(out.data.float().isnan().any())


@pytest.mark.parametrize("bad", ["nan", "inf"])
def test_a_nonfinite_parameter_makes_the_tensorwise_scale_nan(bad):
    x, alpha, gamma, beta = _inputs((4, 32), torch.float32, seed=2)
    gamma[5] = float(bad)
    out = fp8.dyt_fp8(x, alpha, gamma, beta)
    assert bool(out.scale.isnan()) and bool(out.data.float().isnan().all())


def test_the_entries_that_take_out_dtype():
    """dyt, dyt_channels_first and dyt_packed with a float8 out_dtype: dyt_fp8's tensorwise output, the same
    bits; channels-first x in either memory layout equals its rows moved to the end."""
    x, alpha, gamma, beta = _inputs((6, 48), torch.bfloat16, seed=7)
    want = fp8.dyt_fp8(x, alpha, gamma, beta)
    got = dyt.dyt(x, alpha, gamma, beta, out_dtype=torch.float8_e4m3fn)
    assert isinstance(got, fp8.Float8Output)
    assert torch.equal(got.data.view(torch.uint8), want.data.view(torch.uint8)) and torch.equal(
        got.scale, want.scale
    )
    params = torch.cat([gamma, beta, alpha])
    packed = dyt.dyt_packed(x, params, out_dtype=torch.float8_e4m3fn)
    assert torch.equal(packed.data.view(torch.uint8), want.data.view(torch.uint8))

    xc = _inputs((2, 3, 4, 48), torch.bfloat16, seed=8)[0].permute(0, 3, 1, 2)  # (N, C, H, W), channels_last
    for layout in (xc, xc.contiguous()):
        cf = dyt.dyt_channels_first(layout, alpha, gamma, beta, out_dtype=torch.float8_e5m2)
        rows5 = fp8.dyt_fp8(layout.movedim(1, -1), alpha, gamma, beta, fp8_dtype=torch.float8_e5m2)
        assert torch.equal(cf.data.movedim(1, -1).float(), rows5.data.float()) and torch.equal(
            cf.scale, rows5.scale
        )
        _check(cf, layout, alpha, gamma, beta, torch.float8_e5m2, rowwise=False, channels_first=True)


def test_empty_input():
    x, alpha, gamma, beta = _inputs((0, 40), torch.float16)
    for rowwise in (False, True):
        out = fp8.dyt_fp8(x, alpha, gamma, beta, rowwise=rowwise)
        assert out.data.shape == (0, 40) and out.data.dtype == torch.float8_e4m3fn
    assert out.scale.shape == (0, 1)


def test_refusals():
    x, alpha, gamma, beta = _inputs((4, 8), torch.float32)
    with pytest.raises(TypeError, match="FP8 format must be one of"):
        fp8.dyt_fp8(x, alpha, gamma, beta, fp8_dtype=torch.float16)
    with pytest.raises(TypeError, match="rowwise must be a bool"):
        fp8.dyt_fp8(x, alpha, gamma, beta, rowwise=1)
    with pytest.raises(ValueError, match="rowwise FP8 scales are per row"):
        fp8.dyt_fp8(x.reshape(1, 4, 8), alpha, gamma[:4], beta[:4], rowwise=True, channels_first=True)
    with pytest.raises(ValueError, match="gamma must have shape"):
        fp8.dyt_fp8(x, alpha, gamma[:3], beta)
    with pytest.raises(RuntimeError, match="FP8 output carries no gradient"):
        dyt.dyt(x.requires_grad_(), alpha, gamma, beta, out_dtype=torch.float8_e4m3fn)
    with pytest.raises(TypeError, match="a float8 format"):
        dyt.dyt(x.detach(), alpha, gamma, beta, out_dtype=torch.int8)


def test_scaled_mm_takes_the_output():
    """torch._scaled_mm takes (data, scale) as its first operand: the product equals y @ w to FP8's
    precision (the same product from the dequantized output, in float32)."""
    x, alpha, gamma, beta = _inputs((32, 64), torch.bfloat16, seed=9)
    out = fp8.dyt_fp8(x, alpha, gamma, beta)
    w = torch.randn(48, 64, device=x.device)
    w_scale = w.abs().amax() / 448.0
    w8 = (w / w_scale).to(torch.float8_e4m3fn)
    try:
        got = torch._scaled_mm(out.data, w8.t(), out.scale, w_scale.float(), out_dtype=torch.float32)
    except RuntimeError as err:  # a device without FP8 matmuls
        pytest.skip(f"torch._scaled_mm is not available here: {err}")
    want = out.dequantize() @ (w8.float() * w_scale).t()
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-3)


def test_compiled_takes_the_plain_expression():
    """Under torch.compile dyt_fp8 is the plain expression (Inductor fuses it with its neighbours): with the
    aot_eager backend, the same bits as the plain path."""
    x, alpha, gamma, beta = _inputs((8, 40), torch.float32, seed=4)
    compiled = torch.compile(lambda *a: fp8.dyt_fp8(*a, rowwise=False), backend="aot_eager", fullgraph=True)
    got = compiled(x, alpha, gamma, beta)
    data, scale = torch_path.forward_fp8(x, alpha, gamma, beta, torch.float8_e4m3fn, 448.0)
    assert torch.equal(got.data.float(), data.float()) and torch.equal(got.scale, scale)


# ---- drawn calls (hypothesis): the same contract over shapes, layouts, dtypes and values ----------------

FUZZ_EXAMPLES = {"ci": 150, "gpu": 5000}
_ALPHAS = (0.5, 1.0, -1.0, 0.0, -0.0, 7.5, 1e-30, 1e4, float("inf"), -float("inf"), float("nan"))


def _fuzz_budget() -> int:
    forced = os.environ.get("DYT_FUZZ_EXAMPLES")
    return int(forced) if forced else FUZZ_EXAMPLES[os.environ.get("DYT_FUZZ_PROFILE", "ci")]


@st.composite
def _fp8_calls(draw):
    rank = draw(st.integers(1, 3))
    width = draw(st.one_of(st.integers(1, 300), st.sampled_from((1024, 2047, 4096, 4099, 5000))))
    rows = draw(st.integers(0, max(0, min(9, 6000 // width))))
    lead = (rows,) if rank == 2 else ((1,) if rank == 1 else (draw(st.integers(1, 3)), rows))
    shape = (*lead, width)[-rank:] if rank > 1 else (width,)
    names = ("float32", "bfloat16", "float16")
    return {
        "shape": shape,
        "x_dtype": draw(st.sampled_from(names)),
        "param_dtype": draw(st.sampled_from(names)),
        "beta": draw(st.booleans()),
        "fmt": draw(st.sampled_from(FORMAT_IDS)),
        "rowwise": draw(st.booleans()),
        "alpha": draw(st.sampled_from(_ALPHAS)),
        "x_exp": draw(st.integers(-30, 30)),
        "param_exp": draw(st.integers(-20, 20)),
        "x_specials": draw(
            st.lists(st.sampled_from((float("nan"), float("inf"), -float("inf"), 0.0)), max_size=3)
        ),
        "layout": draw(st.sampled_from(("contiguous", "window", "transposed"))),
        "seed": draw(st.integers(0, 2**31 - 1)),
    }


@pytest.mark.fuzz
@hypothesis.settings(deadline=None, database=None, max_examples=_fuzz_budget(), print_blob=True,
                     suppress_health_check=[hypothesis.HealthCheck.too_slow])  # fmt: skip
@hypothesis.seed(int(os.environ.get("DYT_SEED", "0")))
@hypothesis.given(call=_fp8_calls())
def test_drawn_calls_hold_the_contract(call):
    """Shapes from one element to column blocks, empty rows, x of any dtype and scale with NaN, +-inf and 0
    put in, parameters of another dtype and scale, alpha 0, negative, huge, tiny, infinite or NaN, strided
    and transposed x, both formats and both scalings: each call holds _check's contract. The seed is
    DYT_SEED, as every suite's (conftest.py prints it in each reproduce line)."""
    gen = torch.Generator().manual_seed(call["seed"])
    x_dtype, p_dtype = getattr(torch, call["x_dtype"]), getattr(torch, call["param_dtype"])
    shape, width = call["shape"], call["shape"][-1]
    base = torch.randn(*shape[:-1], width + 3, generator=gen) * 2.0 ** call["x_exp"]
    flat = base.reshape(-1)
    for i, v in enumerate(call["x_specials"]):
        if flat.numel():
            flat[(i * 7919) % flat.numel()] = v
    x = base[..., 1 : width + 1].to(x_dtype)  # a window: strided rows, a storage offset
    if call["layout"] == "contiguous":
        x = x.contiguous()
    elif call["layout"] == "transposed" and x.dim() >= 2:  # the last dimension strided: copied once
        x = x.transpose(-1, -2).contiguous().transpose(-1, -2)
    scale = 2.0 ** call["param_exp"]
    gamma = ((1.0 + 0.5 * torch.randn(width, generator=gen)) * scale).to(p_dtype)
    beta = (torch.randn(width, generator=gen) * scale).to(p_dtype) if call["beta"] else None
    alpha = torch.full((1,), call["alpha"]).to(p_dtype)
    fmt = FORMATS[FORMAT_IDS.index(call["fmt"])]
    dev = device()
    x, alpha, gamma = x.to(dev), alpha.to(dev), gamma.to(dev)
    beta = None if beta is None else beta.to(dev)
    out = fp8.dyt_fp8(x, alpha, gamma, beta, fp8_dtype=fmt, rowwise=call["rowwise"])
    _check(out, x, alpha, gamma, beta, fmt, rowwise=call["rowwise"])


def test_reachable_from_import_dyt():
    """docs/fp8.md writes dyt.fp8.dyt_fp8 after `import dyt` alone: the submodule loads on first use, in a
    fresh interpreter (where no test has imported it yet)."""
    import subprocess
    import sys

    code = "import dyt, sys; assert 'dyt.fp8' not in sys.modules; print(dyt.fp8.dyt_fp8.__name__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "dyt_fp8"
