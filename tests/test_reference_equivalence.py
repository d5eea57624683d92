"""reference_equivalence: the kernels agree with the float64 reference over widths, row counts,
parameters, ranks, layouts, and through every API (functional, module, torch.compile, plain CPU path)."""

from __future__ import annotations

import dataclasses
import inspect
import os
import subprocess
import sys

import pytest
import torch

import dyt
from dyt import direct_launch, kernels, launcher, ops, planner, reference, torch_path
from dyt.conformance.tolerances import EVAL_ULPS, HW_TANH, MANTISSA_BITS, REL_L2, assert_close, ulp

from helpers import (
    DTYPES,
    SM90,
    call_in_mode,
    check_against_reference,
    device,
    make_inputs,
    on_gpu,
    plan_tile,
    plans_for,
    run,
    table_with_forward_variant,
    target,
    tile_of,
    with_poly,
    with_variant_from,
)
from paths import PATHS, assert_path, path_context

pytestmark = pytest.mark.reference_equivalence

WIDTHS = [1, 2, 3, 7, 31, 64, 97, 128, 255, 256, 257, 509, 768, 1000, 1024, 1031, 2048, 2053, 4096, 4099,
          8192, 16384]  # fmt: skip


def _rows_for(width: int) -> int:
    budget = 2**20 if on_gpu() else 2**15
    return max(3, min(1000, budget // width))


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("width", WIDTHS)
def test_widths(width, dtype, seed):
    inp = make_inputs((_rows_for(width), width), DTYPES[dtype], seed=seed)
    check_against_reference(inp, run(inp))


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_row_counts_around_tile_boundaries(path, dtype, seed):
    """Row counts one below, at and one above the forward tile, the backward tile, and a backward run."""
    width = PATHS[path][0]
    dt = DTYPES[dtype]
    with path_context(path):
        fwd, bwd = plans_for((1, width), dt)
    counts = {1}
    for block in (fwd.BLOCK_M, bwd.BLOCK_M, 3 * bwd.BLOCK_M):
        counts |= {max(1, block - 1), block, block + 1}
    for i, rows in enumerate(sorted(counts)):
        assert_path(path, (rows, width), dt)
        inp = make_inputs((rows, width), dt, seed=seed + i)
        with path_context(path):
            check_against_reference(inp, run(inp), label=f"rows={rows} ")


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize("alpha", [0.5, -0.8, 1e-4, -3e-6, 25.0])
@pytest.mark.parametrize("beta", [True, False], ids=["beta", "nobeta"])
def test_alpha_and_beta(path, alpha, beta, seed):
    width = PATHS[path][0]
    assert_path(path, (33, width), torch.float32)
    inp = make_inputs((33, width), torch.float32, seed=seed, alpha=alpha, beta=beta)
    with path_context(path):
        check_against_reference(inp, run(inp))


@pytest.mark.parametrize("shape", [(96,), (3, 5, 96), (2, 3, 4, 96), (2, 1, 3, 2, 5000)], ids=str)
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_ranks(shape, dtype, seed):
    inp = make_inputs(shape, DTYPES[dtype], seed=seed)
    check_against_reference(inp, run(inp))


@pytest.mark.skipif(
    not ops._use_triton(torch.empty(1, device=device())),
    reason="the plain PyTorch path takes (rows, C) views: no kernels to hand tensors to",
)
@pytest.mark.parametrize("layout", ["contiguous", "leading_dims_permuted", "expanded_dy"])
def test_tensors_of_any_rank_reach_the_kernels_as_they_are(layout, seed, monkeypatch, python_path):
    """Contiguous x and dy of rank 3 go to the kernels without a reshape (each costs host time per call)
    and the outputs come back in x's shape; where the leading dims do not collapse into rows (permuted)
    or dy's rows repeat (expanded), the (rows, C) view or copy is taken instead. Values against the
    reference either way."""
    inp = make_inputs((6, 7, 96), torch.bfloat16, seed=seed, param_dtype=torch.float32)
    if layout == "leading_dims_permuted":
        inp.x = inp.x.detach().transpose(0, 1).contiguous().transpose(0, 1).requires_grad_()
    elif layout == "expanded_dy":
        inp.dy = inp.dy[:1].expand(inp.dy.shape)
    seen = {}
    real_forward, real_backward = launcher.forward, launcher.backward

    def forward(x, *args, **kwargs):
        seen["x"] = x
        return real_forward(x, *args, **kwargs)

    def backward(dy, x, *args, **kwargs):
        seen["dy"], seen["x_bwd"] = dy, x
        return real_backward(dy, x, *args, **kwargs)

    monkeypatch.setattr(launcher, "forward", forward)
    monkeypatch.setattr(launcher, "backward", backward)
    outs = run(inp)
    check_against_reference(inp, outs)
    assert outs[0].shape == outs[1].shape == inp.x.shape
    as_is = layout != "leading_dims_permuted"
    assert (seen["x"].dim() == 3) == as_is and (seen["x_bwd"].dim() == 3) == as_is
    assert (seen["x"].data_ptr() == inp.x.data_ptr()) == as_is
    assert seen["dy"].dim() == (2 if layout == "expanded_dy" else 3)


def _strided(kind: str, rows: int, width: int, dtype, seed: int):
    """x with a non-trivial layout; dy expanded (stride 0 rows) where the kind says so."""
    inp = make_inputs((rows, width), dtype, seed=seed)
    base = inp.x.detach()
    if kind == "row_slice":  # rows strided: a column slice of a wider tensor, no copy needed
        wide = torch.randn(rows, width + 37, dtype=torch.float32, device=base.device).to(dtype)
        wide[:, 5 : 5 + width] = base
        x = wide[:, 5 : 5 + width]
    elif kind == "every_other_row":
        tall = torch.randn(2 * rows, width, dtype=torch.float32, device=base.device).to(dtype)
        tall[::2] = base
        x = tall[::2]
    elif kind == "transposed":  # last dim not contiguous: copied once
        x = base.t().contiguous().t()
    elif kind == "expanded_dy":
        x = base
        inp.dy = torch.randn(1, width, dtype=torch.float32, device=base.device).to(dtype).expand(rows, width)
    else:
        raise ValueError(kind)
    inp.x = x.requires_grad_()
    return inp


@pytest.mark.parametrize("kind", ["row_slice", "every_other_row", "transposed", "expanded_dy"])
@pytest.mark.parametrize("path", sorted(PATHS))
def test_non_contiguous(kind, path, seed):
    width = PATHS[path][0]
    inp = _strided(kind, 41, width, torch.bfloat16, seed)
    assert not inp.x.is_contiguous() or kind == "expanded_dy"
    with path_context(path):
        check_against_reference(inp, run(inp))


def test_module_matches_functional(seed):
    inp = make_inputs((4, 7, 96), torch.bfloat16, seed=seed, param_dtype=torch.float32)
    m = dyt.DyT(96, device=device())
    with torch.no_grad():
        m.alpha.copy_(inp.alpha)
        m.weight.copy_(inp.gamma)
        m.bias.copy_(inp.beta)
    y_mod = m(inp.x)
    y_fun = dyt.dyt(inp.x, inp.alpha, inp.gamma, inp.beta)
    assert torch.equal(y_mod, y_fun)
    y_mod.backward(inp.dy)
    inp.alpha, inp.gamma, inp.beta = m.alpha, m.weight, m.bias
    outs = (y_mod.detach(), inp.x.grad, m.alpha.grad, m.weight.grad, m.bias.grad)
    check_against_reference(inp, outs)


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode", "no_input_requires_grad"])
def test_calls_autograd_need_not_see_skip_the_autograd_function(mode, seed, monkeypatch, python_path):
    """Where no gradient can flow (no_grad, inference_mode, or no input requiring grad) dyt.dyt calls the
    forward directly: the same bits as through autograd, no grad_fn, and none of the autograd.Function's
    host time; with grad enabled and an input requiring it, the Function runs."""
    inp = make_inputs((37, 96), torch.bfloat16, seed=seed, param_dtype=torch.float32)
    args = (inp.x, inp.alpha, inp.gamma, inp.beta)
    through_autograd = dyt.dyt(*args)
    assert through_autograd.grad_fn is not None

    def no_function(*_):
        raise AssertionError("the autograd.Function ran")

    monkeypatch.setattr(ops._EagerDyT, "apply", no_function)
    y = call_in_mode(mode, dyt.dyt, args)
    assert y.grad_fn is None and not y.requires_grad
    assert torch.equal(y, through_autograd.detach())
    with pytest.raises(AssertionError, match="the autograd.Function ran"):
        dyt.dyt(inp.x.detach(), inp.alpha.detach(), inp.gamma, None)  # gamma requires grad


def test_torch_compile_fullgraph(seed):
    inp = make_inputs((64, 200), torch.bfloat16, seed=seed, param_dtype=torch.float32)
    backend = "inductor" if on_gpu() else "aot_eager"
    compiled = torch.compile(dyt.dyt, fullgraph=True, backend=backend)
    check_against_reference(inp, run(inp, compiled))


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("width", [1, 100, 5000])
def test_plain_pytorch_path(width, dtype, seed):
    """The path CPU tensors take without the interpreter: same contract, called directly."""
    inp = make_inputs(
        (37, width), DTYPES[dtype], seed=seed, param_dtype=torch.float32, device=torch.device("cpu")
    )
    x2d, dy2d = inp.x.detach(), inp.dy
    a, g, b = inp.alpha.detach(), inp.gamma.detach(), inp.beta.detach()
    y = torch_path.forward(x2d, a, g, b, x2d.dtype)
    dx, da, dg, db = torch_path.backward(dy2d, x2d, a, g, x2d.dtype, a.dtype, g.dtype, b.dtype)
    check_against_reference(inp, (y, dx, da, dg, db))


@pytest.mark.parametrize("path", sorted(PATHS))
def test_custom_op_path(path, seed):
    """torch.ops.dyt.forward with its registered autograd (what torch.compile runs) gives the same bits as
    the eager autograd.Function path, and both match the reference."""
    assert ops.forward_impl  # the module that registers torch.ops.dyt is loaded
    width = PATHS[path][0]
    inp = make_inputs((29, width), torch.bfloat16, seed=seed, param_dtype=torch.float32)
    with path_context(path):
        via_op = run(inp, lambda x, a, g, b: torch.ops.dyt.forward(x, a, g, b))
        via_eager = run(inp)
    check_against_reference(inp, via_op)
    for a, b in zip(via_op, via_eager, strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
def test_the_tolerance_ulp_is_exact_at_powers_of_two(dtype):
    """The tolerance's ulp, where the check runs (the GPU in GPU runs): at a power of two it is the
    spacing of the binade above, just below it the one below, and the subnormal spacing near zero. On the
    GPU, floor(log2(2^-117)) gave -118 and failed a correct dx in test_saturated_tail (DYT_SEED=41)."""
    dt = DTYPES[dtype]
    bits = MANTISSA_BITS[dt]
    finfo = torch.finfo(dt)
    lo, hi = (
        int(torch.frexp(torch.tensor(v, dtype=torch.float64)).exponent) - 1 for v in (finfo.tiny, finfo.max)
    )
    powers = torch.arange(lo, hi + 1, dtype=torch.float64)  # every normal binade of the dtype
    at = torch.exp2(powers)
    below = at[1:] - torch.exp2(powers[1:] - 1 - bits)  # the dtype's largest value below each (normal)
    assert torch.equal(below.to(dt).double(), below)

    def spacing(values):
        return ulp(values.to(device()), dt).cpu()

    assert torch.equal(spacing(at), torch.exp2(powers - bits))
    assert torch.equal(spacing(-at), torch.exp2(powers - bits))
    assert torch.equal(spacing(below), torch.exp2(powers[1:] - 1 - bits))
    subnormal = torch.tensor([0.0, finfo.tiny / 4, finfo.tiny * (1 - 2.0**-bits)], dtype=torch.float64)
    assert torch.equal(spacing(subnormal), torch.full((3,), finfo.tiny * 2.0**-bits, dtype=torch.float64))


@pytest.mark.parametrize("path", sorted(PATHS))
def test_saturated_tail(path, seed):
    """|alpha * x| from 20 to 60 in bfloat16: tanh is +-1 to float32, but sech^2 = 4 exp(-2|z|) still
    reaches dx as bfloat16 subnormals up to |z| ~ 47, which must not be flushed to zero early.

    (float32 outputs are not held to relative L2 1e-6 in this regime: rounding alpha * x to float32 alone
    moves exp(-2|z|) by 2|z| * 2^-24 relative, ~7e-6 at |z| = 60. dalpha's float32 terms carry the same
    amplification, and its rule weighs them by it: dyt.reference.evaluation_scales.)"""
    inp = _saturated_inputs(PATHS[path][0], seed)
    with path_context(path):
        check_against_reference(inp, run(inp))


def _saturated_inputs(width: int, seed: int, dev=None):
    """17 rows of bf16 x with |x| from 20 to 60 (alpha = 1), float32 parameters."""
    inp = make_inputs(
        (17, width), torch.bfloat16, seed=seed, alpha=1.0, param_dtype=torch.float32, device=dev
    )
    gen = torch.Generator().manual_seed(seed)
    mags = 20.0 + 40.0 * torch.rand(inp.x.shape, generator=gen)
    signs = torch.where(torch.rand(inp.x.shape, generator=gen) < 0.5, -1.0, 1.0)
    inp.x = (mags * signs).to(torch.bfloat16).to(inp.x.device).requires_grad_()
    return inp


def test_saturated_tail_on_the_plain_pytorch_path(seed):
    """The plain CPU path's sech^2 past |z| = 44.4, where exp(2|z|) overflows float32: dx still reaches the
    bf16 subnormals the reference has there (torch_path._sech2's exp(-2|z|) form)."""
    inp = _saturated_inputs(1000, seed, dev=torch.device("cpu"))
    x2d, dy2d = inp.x.detach(), inp.dy
    a, g, b = inp.alpha.detach(), inp.gamma.detach(), inp.beta.detach()
    y = torch_path.forward(x2d, a, g, b, x2d.dtype)
    dx, da, dg, db = torch_path.backward(dy2d, x2d, a, g, x2d.dtype, a.dtype, g.dtype, b.dtype)
    check_against_reference(inp, (y, dx, da, dg, db))


def _saturated_draw(seed: int, alpha: float, *, aligned: bool = False) -> dict:
    """test_saturated_tail's draw on the CPU at any alpha: |alpha x| from 20 to 60 with x in bfloat16, float32
    parameters, no beta. aligned: dy's signs make every dalpha term dy gamma x sech^2(alpha x) positive."""
    drawn = reference.random_inputs((17, 100), torch.bfloat16, seed=seed, alpha=alpha, beta=False,
                                    param_dtype=torch.float32)  # fmt: skip
    gen = torch.Generator().manual_seed(seed)
    mags = 20.0 + 40.0 * torch.rand(drawn["x"].shape, generator=gen)
    signs = torch.where(torch.rand(drawn["x"].shape, generator=gen) < 0.5, -1.0, 1.0)
    drawn["x"] = (mags * signs / alpha).to(torch.bfloat16)
    if aligned:
        drawn["dy"] = (drawn["dy"].float().abs() * (drawn["gamma"] * drawn["x"].float()).sign()).bfloat16()
    return drawn


def _sech2_as_the_kernels(z: torch.Tensor) -> torch.Tensor:
    """sech^2 in float32 as dyt.kernels._sech_and_q has it: (2h / (1 + h^2))^2, h = exp2(-|z| log2 e)."""
    h = torch.exp2(z.abs() * torch.tensor(-1.4426950408889634, dtype=torch.float32))
    sech = (2.0 * (1.0 / (1.0 + h * h))) * h
    return sech * sech


def _sech2_plain(z: torch.Tensor) -> torch.Tensor:
    """sech^2 in float32 through torch.exp: 4h / (1 + h)^2 with h = exp(-2|z|)."""
    h = torch.exp(-2.0 * z.abs())
    return 4.0 * h / (1.0 + h) ** 2


def _dalpha_from_float32_terms(drawn: dict, sech2=_sech2_as_the_kernels, term_dtype=torch.float32):
    """dalpha from float32 terms dy gamma x sech^2(alpha x) (rounded to term_dtype), summed in float64."""
    x = drawn["x"].float()
    terms = (drawn["dy"].float() * drawn["gamma"]) * sech2(drawn["alpha"] * x) * x
    return terms.to(term_dtype).double().sum().reshape(1).float()


def _check_dalpha(drawn: dict, got: torch.Tensor) -> None:
    args = (drawn["dy"], drawn["x"], drawn["alpha"], drawn["gamma"])
    scale, rss = reference.evaluation_scales(*args)["dalpha"]
    ref = reference.dyt_backward_reference(*args)[1]
    assert_close("dalpha", got, ref, kind="param", storage=torch.float32, scale=scale, rss=rss)


@pytest.mark.parametrize("alpha", [1.0, 0.7])
def test_dalpha_rule_at_saturated_z(alpha, seed):
    """dalpha's float32 rule where |alpha x| is 20 to 60, without the kernels. float32 terms dy gamma x
    sech^2(z) summed in float64 pass, with sech^2 from the kernels' exp2 or from torch.exp, z = alpha x exact
    (alpha 1) or rounded (0.7). Wrong sums fail: dalpha off by 1e-4 relative where its terms do not cancel
    (beyond the rule at any draw: there rss <= |dalpha|, and the weights stay below 24, so the rule allows
    at most 1e-5 + 8 * 24 * 2^-23), and terms rounded to bfloat16, x's dtype (the few terms that dominate a
    saturated sum make that rounding cancel by chance in about 1% of draws: 15 of 20 draws must catch it)."""
    drawn = _saturated_draw(seed, alpha)
    for sech2 in (_sech2_as_the_kernels, _sech2_plain):
        _check_dalpha(drawn, _dalpha_from_float32_terms(drawn, sech2))
    aligned = _saturated_draw(seed, alpha, aligned=True)
    with pytest.raises(AssertionError, match="dalpha: relative L2 error"):
        _check_dalpha(aligned, _dalpha_from_float32_terms(aligned) * (1 + 1e-4))
    caught = 0
    for k in range(20):
        draw = _saturated_draw(seed + k, alpha)
        try:
            _check_dalpha(draw, _dalpha_from_float32_terms(draw, term_dtype=torch.bfloat16))
        except AssertionError:
            caught += 1
    assert caught >= 15, f"terms rounded to bfloat16 caught at {caught} of 20 draws"


def test_evaluation_scales_weigh_by_the_tolerance_tables_eval_ulps():
    """dyt.reference.evaluation_scales adds each dalpha term's argument rounding to the tolerance table's
    EVAL_ULPS ulps: its default eval_ulps is that constant."""
    default = inspect.signature(reference.evaluation_scales).parameters["eval_ulps"].default
    assert default == EVAL_ULPS


@pytest.mark.parametrize("method", ["libdevice", "hw_approx"])
def test_interpreter_swaps_gpu_only_tanh_methods(method):
    """libdevice tanh and PTX tanh.approx have no interpreter implementation: there the plan swaps them for
    the default method; on a GPU the plan keeps them."""
    chosen = planner.Overrides(tanh=method)
    interpreter = planner.Target(interpreter=True)
    on_interpreter = planner.plan_forward(8, 64, 2, target=interpreter, overrides=chosen)
    assert on_interpreter.tanh == planner.TANH_METHODS["poly_exp"]
    assert planner.plan_forward(8, 64, 2, overrides=chosen).tanh == planner.TANH_METHODS[method]


def test_the_tanh_method_comes_from_dyt_tanh_at_import():
    """DYT_TANH names the method for the whole process, read once when dyt is imported (no environment
    lookup per call); an unknown name fails at the first plan."""
    code = (
        "from dyt import launcher, planner; "
        "print(planner.plan_forward(8, 64, 2, overrides=launcher.current_overrides()).tanh)"
    )

    def plan_in_child(value):
        env = {**os.environ, "DYT_TANH": value}
        return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)

    for value, method in (("hw_approx", "hw_approx"), ("libdevice", "libdevice"), ("", "poly_exp")):
        child = plan_in_child(value)
        assert child.returncode == 0, child.stderr
        assert child.stdout.strip() == str(planner.TANH_METHODS[method]), value
    child = plan_in_child("fastest")
    assert child.returncode != 0 and "DYT_TANH" in child.stderr and "'fastest'" in child.stderr


@pytest.mark.gpu_only
@pytest.mark.parametrize("path", sorted(PATHS))
def test_gpu_tanh_methods(path, seed):
    """libdevice meets the whole contract. The opt-in hardware approximation is held to its documented
    error instead, element by element (tolerances.HW_TANH)."""
    width = PATHS[path][0]
    inp = make_inputs((300, width), torch.bfloat16, seed=seed, param_dtype=torch.float32)
    with path_context(path), launcher.overrides(tanh="libdevice"):
        check_against_reference(inp, run(inp))
    with path_context(path), launcher.overrides(tanh="hw_approx"):
        y, dx, *_ = run(inp)
    y_ref = reference.dyt_forward_reference(inp.x, inp.alpha, inp.gamma, inp.beta)
    dx_ref = reference.dyt_backward_reference(inp.dy, inp.x, inp.alpha, inp.gamma, inp.beta)[0]
    gamma = inp.gamma.detach().double().abs()
    scale_dx = (inp.dy.double() * gamma * inp.alpha.detach().double()).abs()
    for name, got, ref, scale in (("y", y, y_ref, gamma), ("dx", dx, dx_ref, scale_dx)):
        approx = scale * HW_TANH[name]
        allowed = ulp(ref, torch.bfloat16) + approx.expand_as(ref)
        excess = (got.double() - ref).abs() - allowed
        worst = int(excess.argmax())
        off = float((got.double() - ref).abs().view(-1)[worst])
        limit = float(allowed.view(-1)[worst])
        assert float(excess.max()) <= 0, f"hw_approx {name}: element {worst} off by {off:.3e} > {limit:.3e}"


# (rows, width, folds): 50 x 64 and 31 x 768 leave the last folded row in part; 3 x 2 elements are not a
# multiple of 16, and 100 columns have too short runs of gamma indices (4) to fold. Widths that are not
# powers of two fold in the backward only.
FOLD_CASES = [(256, 64, True), (48, 64, True), (50, 64, True), (3, 2, False), (512, 2, True), (40, 256, True),
              (8, 512, True), (31, 768, True), (6, 1536, True), (5, 640, True), (7, 100, False)]  # fmt: skip


@pytest.mark.parametrize(("rows", "width", "folds"), FOLD_CASES, ids=str)
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("alpha", [None, float("inf")], ids=["alpha", "inf_alpha"])
def test_contiguous_rows_fold(rows, width, folds, dtype, alpha, seed):
    """Contiguous rows run as rows of a multiple of 1024 columns where dyt.planner.fold_factor allows
    (64 -> 1024; in the backward also 768 -> 3072): against the reference, with an infinite alpha where the
    folded view's last tile or row is partial, and bit for bit against the same rows unfolded (every
    other row of a taller tensor), for y and dx, on one polynomial (the folded and the unfolded rows take
    different table entries, whose "poly" may differ)."""
    dt = DTYPES[dtype]
    fwd, bwd = plans_for((rows, width), dt)
    pow2 = width & (width - 1) == 0
    assert fwd.gamma_period == (width if folds and pow2 else 0), fwd
    assert bwd.gamma_period == (width if folds else 0), bwd
    for plan in (fwd, bwd):
        assert plan.ragged == (plan.gamma_period > 0 and (rows * width) % plan.N != 0), plan
    inp = make_inputs((rows, width), dt, seed=seed, alpha=alpha)
    check_against_reference(inp, run(inp))
    tall = torch.zeros(2 * rows, width, dtype=dt, device=inp.x.device)
    tall[::2] = inp.x.detach()
    unfolded = make_inputs((rows, width), dt, seed=seed, alpha=alpha)
    unfolded.x = tall[::2].requires_grad_()
    unfolded.dy = inp.dy
    with launcher.overrides(table=with_poly(planner.load_table(target().arch), 5, modes=("fwd", "bwd"))):
        outs = run(inp)
        y, dx = run(unfolded)[:2]
    bits = {2: torch.int16, 4: torch.int32}
    for name, got, want in (("y", y, outs[0]), ("dx", dx, outs[1])):
        as_bits = [t.contiguous().view(bits[t.element_size()]) for t in (got, want)]
        assert torch.equal(*as_bits), f"folding changed the bits of {name}"


@pytest.mark.parametrize("width", [64, 128, 256, 512])
def test_folded_rows_take_the_entrys_folded_tile_from_its_size_on(width):
    """16-bit rows folded into the sm90 1024 entry's rows run its folded tile from min_elements on (2x1024
    on 4 warps, docs/kernels.md, "Folded rows"); smaller problems, rows of the
    entry's own width, float32 x keep the entry's tile, and float32 parameters take fp32_params first."""
    table = planner.load_table("sm90")
    entry = planner.table_entry(table, "fwd", 2, planner.FOLD_WIDTH)
    big = entry.folded.min_elements
    assert big == 2**24
    own = tile_of(entry)
    assert tile_of(entry.folded) != own

    def tile(rows, n, itemsize=2, param_itemsize=None):
        plan = planner.plan_forward(rows, n, itemsize, param_itemsize=param_itemsize, target=SM90)
        assert plan.gamma_period == (n if n < planner.FOLD_WIDTH else 0), plan
        return plan_tile(plan)

    rows = big // width
    assert tile(rows, width) == tile_of(entry.folded)
    # the folded tile's polynomial (3 terms on sm90) comes with it, as fp32_params' does; the entry's own
    # plans keep 5, and a variant without a poly of its own runs its entry's
    poly = planner.plan_forward(rows, width, 2, target=SM90).poly_terms
    assert poly == entry.folded.poly == 3 and entry.poly == 5
    assert planner.plan_forward(rows - 1, width, 2, target=SM90).poly_terms == 5
    mixed_plan = planner.plan_forward(rows, width, 2, param_itemsize=4, target=SM90)
    assert mixed_plan.poly_terms == entry.fp32_params.poly == 3

    def without_poly(e):
        return (
            e
            if e is not entry
            else dataclasses.replace(e, fp32_params=dataclasses.replace(e.fp32_params, poly=None))
        )

    own_poly = table.map_entries(without_poly, modes=("fwd",), buckets=("16bit",))
    variant_poly_removed = planner.Overrides(table=own_poly)
    assert (
        planner.plan_forward(rows, width, 2, param_itemsize=4, overrides=variant_poly_removed).poly_terms == 5
    )
    assert tile(4 * rows, width) == tile_of(entry.folded)
    assert tile(rows - 1, width) == own
    assert tile(4 * big // planner.FOLD_WIDTH, planner.FOLD_WIDTH) == own  # not folded: the entry's own width
    mixed = entry.fp32_params
    assert tile(rows, width, 2, 4) == tile_of(mixed)
    fp32_entry = planner.table_entry(table, "fwd", 4, planner.FOLD_WIDTH)
    assert fp32_entry.folded is None
    assert tile(rows, width, 4) == tile_of(fp32_entry)


@pytest.mark.parametrize(("rows", "width"), [(48, 64), (50, 64), (40, 256), (8, 512)], ids=str)
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("alpha", [None, float("inf")], ids=["alpha", "inf_alpha"])
def test_folded_tile_gives_the_bits_of_the_entrys_own(rows, width, dtype, alpha, seed):
    """The committed table's folded tile, made to apply at any size: against the reference (50 x 64 leaves
    the last folded row in part; an infinite alpha makes NaN wherever padding were not masked), and y bit
    for bit that of the entry's own tile on the same polynomial (the tile moves elements between lanes, not
    their arithmetic)."""
    table = table_with_forward_variant(planner.FOLDED)
    own = planner.table_entry(table, "fwd", 2, planner.FOLD_WIDTH)
    own_tile = tile_of(own)

    def without_folded(entry):  # the entry's own tile, on the folded tile's polynomial
        if entry.folded is None:
            return entry
        return dataclasses.replace(entry, folded=None, poly=entry.folded.poly or entry.poly)

    without = table.map_entries(without_folded, modes=("fwd",), buckets=("16bit",))
    table = with_variant_from(table, planner.FOLDED, 1)
    inp = make_inputs((rows, width), DTYPES[dtype], seed=seed, alpha=alpha)
    ys = []
    for tab, want in ((table, tile_of(own.folded)), (without, own_tile)):
        with launcher.overrides(table=tab):
            plan = launcher.forward_plan(inp.x.detach(), inp.gamma, inp.beta)
            assert (*plan_tile(plan), plan.gamma_period) == (*want, width), plan
            outs = run(inp)
        check_against_reference(inp, outs)
        ys.append(outs[0].view(torch.int16))
    assert torch.equal(*ys), "the folded tile changed the bits of y"


@pytest.mark.gpu_only
def test_folded_tile_at_its_threshold(seed):
    """On the GPU, the committed table as it is, at its folded threshold: 262144 x 64 bf16 (2^24 elements,
    in rows of 1024) against the float64 reference."""
    inp = make_inputs((262144, 64), torch.bfloat16, seed=seed)
    plan = launcher.forward_plan(inp.x.detach(), inp.gamma, inp.beta)
    entry = planner.table_entry(planner.load_table(target().arch), "fwd", 2, plan.N)
    assert plan.gamma_period == 64
    if entry.folded is not None:
        assert plan_tile(plan) == tile_of(entry.folded), plan
    check_against_reference(inp, run(inp))


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_both_forward_sign_forms_give_the_same_bits(path, dtype, seed):
    """The launch table picks per entry how the forward's tanh takes its sign (a select, or one bitwise
    op): both forms against the reference, and y bit for bit the same, zeros of both signs included."""
    width = PATHS[path][0]
    dt = DTYPES[dtype]
    inp = make_inputs((37, width), dt, seed=seed)
    inp.x.data[0, :3] = torch.tensor([0.0, -0.0, -1e-30], dtype=dt)
    ys = []
    for sign in ("select", "bitwise"):
        table = planner.load_table(target().arch)
        table = table.map_entries(lambda e, sign=sign: dataclasses.replace(e, sign=sign), modes=("fwd",))
        with path_context(path), launcher.overrides(table=table):
            assert plans_for((37, width), dt)[0].sign_select == (sign == "select")
            outs = run(inp)
            check_against_reference(inp, outs, label=f"sign {sign}: ")
        ys.append(outs[0].contiguous().view(torch.int16 if dt != torch.float32 else torch.int32))
    assert torch.equal(*ys), "the two sign forms disagree in some bit of y"


@pytest.mark.parametrize("terms", planner.POLY_TERMS)
@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("mode", ["fwd", "bwd"])
def test_both_polynomials_meet_the_contract(mode, terms, dtype, seed):
    """The table picks per entry and direction tanh's polynomial near 0 (5 terms below |z| = 0.6, or 3 below
    0.4): each, everywhere, against the reference with |alpha x| spread over [0, 1.5], across the limit
    where the polynomial hands over to 1 - 2 / (exp(2|z|) + 1) (the backward: 1 - h sech(z)), through
    folded (64), whole (1024) and split (768) rows (channels-first rows: tests/test_channels_first.py)."""
    dt = DTYPES[dtype]
    table = with_poly(planner.load_table(target().arch), terms, modes=(mode,))
    for rows, width in ((48, 64), (9, 1024), (7, 768)):
        inp = make_inputs((rows, width), dt, seed=seed, alpha=0.75)
        gen = torch.Generator().manual_seed(seed)
        x = (torch.rand(rows, width, generator=gen) * 4 - 2).to(dt).to(inp.x.device)
        inp.x = x.requires_grad_()
        with launcher.overrides(table=table):
            assert plans_for((rows, width), dt)[mode == "bwd"].poly_terms == terms
            check_against_reference(inp, run(inp), label=f"{mode} poly {terms}: ")


@pytest.mark.parametrize(("mode", "name"), [("fwd", "forward"), ("bwd", "backward")])
def test_an_entrys_poly_must_be_known(mode, name):
    """A table entry's poly is one of POLY_TERMS: an entry naming another is refused where it is made, so no
    plan can take it."""
    table = planner.load_table("sm90")
    with pytest.raises(ValueError, match=f"a {name} entry's poly must be one of"):
        table.map_entries(lambda e: dataclasses.replace(e, poly=4), modes=(mode,))


@pytest.mark.parametrize("terms", planner.POLY_TERMS)
def test_each_forward_polynomial_stays_within_four_float32_ulps(terms):
    """y = tanh(x) in float32 (gamma 1, beta 0, alpha 1) at 2^16 points of |z| in [0, 1.2], both signs,
    element by element: the 3-term polynomial (up to 2.4 float32 ulps) and the exp branch it hands over
    to at 0.4 (up to 3.8 on the H200) stay within 4, the 5-term form within its ~2.3."""
    z = torch.linspace(0, 1.2, 2**16, dtype=torch.float32)
    x = torch.cat([z, -z]).view(-1, 1024).to(device())
    ones, zeros = torch.ones(1024, device=x.device), torch.zeros(1024, device=x.device)
    with launcher.overrides(table=with_poly(planner.load_table(target().arch), terms)):
        y = dyt.dyt(x, torch.ones(1, device=x.device), ones, zeros)
    ref = torch.tanh(x.double())
    worst = float(((y.double() - ref).abs() / ulp(ref, torch.float32)).max())
    assert worst <= 4.0, f"poly {terms}: {worst:.2f} float32 ulps"


def test_launch_call_sites_pass_their_constants_last(monkeypatch, seed, python_path):
    """A direct launch (dyt.direct_launch) hands the compiled launcher every parameter in order: each
    plan's constants must be exactly its kernel's last parameters, in order, or that kernel would quietly
    take the slower JIT path on every call."""
    calls = []
    real = direct_launch.CompiledKernel.launch

    def spy(self, spec, tensors, **options):
        calls.append((self.kernel, len(tensors) + len(spec.scalars), spec.constexprs))
        real(self, spec, tensors, **options)

    monkeypatch.setattr(direct_launch.CompiledKernel, "launch", spy)
    inp = make_inputs((40, 96), torch.bfloat16, seed=seed)
    check_against_reference(inp, run(inp))
    launched = {kernel for kernel, _, _ in calls}
    assert launched == {kernels.dyt_fwd_kernel, kernels.dyt_bwd_kernel, kernels.dyt_bwd_finish_kernel}
    for kernel, n_args, constexprs in calls:
        assert direct_launch.trailing_constexprs(kernel, n_args, constexprs) is not None, kernel.fn.__name__


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


@pytest.mark.gpu_only
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("offset", [0, 2], ids=["aligned", "two_elements_in"])
def test_direct_launches_give_the_jit_launches_bits(dtype, offset, seed):
    """From its second call a plan launches the compiled kernels directly; a launch hook (as a profiler
    sets) sends the same call through Triton's JIT path: same bits for every output, against the
    reference too, with x starting 16-byte aligned or two elements in (another compiled signature)."""
    from triton import knobs

    dt = DTYPES[dtype]
    rows, width = 300, 768
    inp = make_inputs((rows, width), dt, seed=seed)
    backing = torch.empty(rows * width + offset, dtype=dt, device=inp.x.device)
    x = backing[offset:].view(rows, width)
    x.copy_(inp.x.detach())
    inp.x = x.requires_grad_()
    run(inp)
    direct = run(inp)
    check_against_reference(inp, direct)
    fwd_plan = launcher.forward_plan(x.detach(), inp.gamma, inp.beta)
    bwd_plan = launcher.backward_plan(x.detach(), inp.dy)
    aligned = offset * x.element_size() % 16 == 0
    # Keyed by the launch, the GPU (a compiled kernel's function handle belongs to one) and the signature.
    compiled = {(spec, gpu, signature[0]) for spec, gpu, signature in launcher.FORWARD.cache}
    assert (fwd_plan.kernel, x.device.index, (dt, aligned)) in compiled, compiled
    assert any(spec == bwd_plan.main for spec, _, _ in launcher.BACKWARD.cache)
    assert any(spec == bwd_plan.finish for spec, _, _ in launcher.FINISH.cache)
    hooked = []
    chain = knobs.runtime.launch_enter_hook  # a HookChain from Triton 3.6 on; None or a function before
    if hasattr(chain, "add"):
        chain.add(hooked.append)
    else:
        knobs.runtime.launch_enter_hook = hooked.append
    try:
        jit = run(inp)
    finally:
        if hasattr(chain, "remove"):
            chain.remove(hooked.append)
        else:
            knobs.runtime.launch_enter_hook = chain
    assert len(hooked) == 3, "forward, backward and finish should each have gone through the JIT path"
    for name, a, b in zip(("y", "dx", "dalpha", "dgamma", "dbeta"), direct, jit, strict=True):
        assert torch.equal(_bits(a), _bits(b)), f"{name}: the direct launch's bits differ from the JIT's"


def _rel_l2(got: torch.Tensor, ref: torch.Tensor) -> float:
    ref = ref.detach()
    return float(torch.linalg.vector_norm(got.detach().double() - ref) / torch.linalg.vector_norm(ref))


def _penalty(fn, leaves, w):
    """First-order gradients of (fn(*leaves) * w).sum() with create_graph=True, and the gradients of
    their squared sum (a gradient penalty: second order; beta's is zero, no gradient depends on it)."""
    first = torch.autograd.grad((fn(*leaves) * w).sum(), leaves, create_graph=True)
    second = torch.autograd.grad(sum((g.float() ** 2).sum() for g in first), leaves, materialize_grads=True)
    return first, second


@pytest.mark.parametrize("beta", [True, False], ids=["beta", "nobeta"])
@pytest.mark.parametrize("channels_first", [False, True], ids=["rows", "channels_first"])
def test_gradients_of_gradients_match_the_float64_reference(channels_first, beta, seed):
    """create_graph=True gives gradients that autograd differentiates again: a backward that builds a
    graph runs torch_path.differentiable_backward (the kernels' gradients are not differentiable). First
    and second order against float64 autograd of the paper's expression, at the suites' relative L2
    tolerances: first order by dyt/conformance/tolerances.py's rule; second order at the parameter one, plus
    EVAL_ULPS times the error of the paper's expression evaluated in float32 autograd (where a gradient
    cancels, float32 arithmetic itself cannot deliver 1e-5)."""
    gen = torch.Generator().manual_seed(seed)
    shape, C = ((3, 8, 4, 5), 8) if channels_first else ((6, 5, 32), 32)
    fp32 = [
        torch.randn(shape, generator=gen) * 2,
        torch.full((1,), 0.7),
        1 + 0.3 * torch.randn(C, generator=gen),
    ]
    if beta:
        fp32.append(0.1 * torch.randn(C, generator=gen))
    w = torch.randn(shape, generator=gen)
    leaves = [t.to(device()).requires_grad_() for t in fp32]
    leaves64 = [t.to(device(), torch.float64).requires_grad_() for t in fp32]
    entry = dyt.dyt_channels_first if channels_first else dyt.dyt

    def ours(x, alpha, gamma, b=None):
        return entry(x, alpha, gamma, b)

    def paper(x, alpha, gamma, b=None):
        view = (C, 1, 1) if channels_first else (C,)
        y = torch.tanh(alpha * x) * gamma.reshape(view)
        return y if b is None else y + b.reshape(view)

    got = _penalty(ours, leaves, w.to(device()))
    ref = _penalty(paper, leaves64, w.to(device(), torch.float64))
    in_float32 = _penalty(paper, [t.to(device()).requires_grad_() for t in fp32], w.to(device()))[1]
    # the first-order parameter gradients are sums: the tolerance table's float32 rule allows
    # for their terms' rounding (their root sum of squares), which cancellation can leave large beside
    # the sum itself
    moved = [t.movedim(1, -1) if channels_first else t for t in (w, fp32[0])]
    scales = reference.evaluation_scales(moved[0], moved[1], *fp32[1:])
    names = ("dx", "dalpha", "dgamma", "dbeta")
    for order, got_grads, ref_grads in zip(("first", "second"), got, ref, strict=True):
        for name, g, r in zip(names, got_grads, ref_grads, strict=False):
            assert g.dtype == torch.float32 and g.shape == r.shape, (order, name)
            if not r.any():  # beta's second order
                assert not g.any(), (order, name)
                continue
            if order == "first" and name != "dx":
                scale, rss = (t.to(r.device) for t in scales[name])
                assert_close(f"first order {name}", g.detach(), r.detach(), kind="param",
                             storage=torch.float32, scale=scale, rss=rss)  # fmt: skip
                continue

            kind = "out" if (order, name) == ("first", "dx") else "param"
            limit = REL_L2[kind]
            if order == "second":
                limit += EVAL_ULPS * _rel_l2(in_float32[names.index(name)], r)
            err = _rel_l2(g, r)
            assert err <= limit, f"{order} order {name}: relative L2 error {err:.2e} > {limit:.2e}"


def test_random_inputs_hold_no_zero():
    """The suites' inputs hold no 0 (dyt.reference.random_inputs): with an infinite alpha an x of 0 is a
    real element whose tanh(inf * 0) is NaN, which the padding suites would take for leaked padding. This
    seed's float32 draw on the CPU holds an exact 0 at [59, 50], and float16 rounds tiny draws to 0."""
    drawn = reference.random_inputs((97, 200), torch.float32, seed=217843976, alpha=float("inf"))
    plain = torch.randn(97, 200, generator=torch.Generator().manual_seed(217843976))
    assert plain[59, 50] == 0 and drawn["x"][59, 50] == reference.NONZERO
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        drawn = reference.random_inputs((64, 4096), dtype, seed=5, x_scale=2.0**-12)
        assert all(bool((t != 0).all()) for t in drawn.values() if t is not None), dtype
