"""channels-first: DyT over dim 1 of (N, C, *spatial) input (ConvNeXt), the contract suites on that path.

Contiguous input runs through the row kernels as N rows of C * L elements, column j taking channel j // L's
gamma and beta (the plans' channel_span; the backward adds its columns up per channel) with no copy of x,
y, dy or dx; input in torch.channels_last memory format through the row kernels on the moved view, also
without a copy.
Values against the float64 reference (the channels-last reference on the moved tensors), NaN and inf with
padded tiles, the dtype contract, bitwise repeats and batch invariance, the launch grid.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import pytest
import torch

import dyt
from dyt import launcher, ops, planner
from dyt.launch_table import BackwardTile
from dyt.service.tune import with_channels_first

from helpers import DTYPES, SM90, check_against_reference, make_inputs, on_gpu, with_poly

pytestmark = [
    pytest.mark.reference_equivalence,
]

KERNELS = ops._use_triton(torch.empty(1, device="cuda" if on_gpu() else "cpu"))
needs_kernels = pytest.mark.skipif(
    not KERNELS, reason="CPU tensors without the interpreter take the plain path"
)


def _inputs(shape, dtype, *, seed, layout="contiguous", **kwargs):
    """make_inputs for (N, *spatial, C), moved to (N, C, *spatial) in the layout asked for; returns the
    channels-first leaves and the channels-last inputs the reference reads (same values)."""
    n, C, *spatial = shape
    cl = make_inputs((n, *spatial, C), dtype, seed=seed, **kwargs)
    x = cl.x.detach().movedim(-1, 1)
    dy = cl.dy.movedim(-1, 1)
    if layout == "contiguous":
        x, dy = x.contiguous(), dy.contiguous()
    elif layout == "channels_last":
        assert len(shape) == 4 and x.is_contiguous(memory_format=torch.channels_last)
    else:  # a strided view: every other sample of a larger batch
        big = torch.cat([x, x], dim=0)
        big[0::2] = x
        x = big[0::2]
        assert not x.is_contiguous()
    return x.requires_grad_(), dy, cl


def _run(x, dy, cl):
    """Forward and backward of dyt_channels_first; outputs moved back to channels-last for the reference."""
    for t in (x, *cl.leaves()):
        t.grad = None
    y = dyt.dyt_channels_first(x, cl.alpha, cl.gamma, cl.beta)
    y.backward(dy)
    return (
        y.detach().movedim(1, -1),
        x.grad.movedim(1, -1),
        cl.alpha.grad,
        cl.gamma.grad,
        (None if cl.beta is None else cl.beta.grad),
    )


# (64, 4, 4, 4): rows of 64 that the forward folds into 1024 (gamma indexed by (column % 64) // 16).
SHAPES = [(2, 3, 5, 7), (3, 96, 7, 7), (2, 16, 33), (5, 8), (2, 24, 1, 1), (1, 40, 40, 40), (4, 12, 3, 70),
          (64, 4, 4, 4)]  # fmt: skip


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_values_against_the_reference(shape, dtype, seed):
    x, dy, cl = _inputs(shape, DTYPES[dtype], seed=seed, param_dtype=torch.float32)
    check_against_reference(cl, _run(x, dy, cl))


# Rows wider than the sm90 table's 8192-column buckets, with a spatial size in each of its channels_first
# backward ranges (up to 64, 65-256, past 256) and its forward variant.
SM90_WIDE = [(2, 200, 7, 7), (2, 64, 14, 14), (2, 8, 40, 40)]


@needs_kernels
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("shape", SM90_WIDE, ids=str)
def test_values_with_the_sm90_channels_first_tiles(shape, dtype, seed):
    """The committed sm90 table's channels_first tiles, swapped in where the kernels run here, against the
    reference (on an H200 they are the tiles these shapes take)."""
    table = planner.load_table("sm90")
    x, dy, cl = _inputs(shape, DTYPES[dtype], seed=seed, param_dtype=torch.float32)
    L = math.prod(shape[2:])
    entry = table.bwd["16bit" if dtype == "bf16" else "fp32"][-1]
    assert x[0].numel() > 8192 and (dtype == "fp32" or planner.channels_first_variant(entry, L) is not None)
    with launcher.overrides(table=table):
        check_against_reference(cl, _run(x, dy, cl))


# Spatial sizes whose 256-column blocks touch 8 and 4 channels, and, at L = 9, 128-column blocks of 16.
SLOT_SHAPES = [(2, 200, 7, 7), (2, 64, 14, 14), (2, 1000, 3, 3)]


@needs_kernels
@pytest.mark.parametrize("shape", SLOT_SHAPES, ids=str)
def test_per_channel_sums_of_one_warp_tiles(shape, seed):
    """A one-warp channels_first backward tile adds its columns up per channel in the (CHANNEL_SLOTS x
    BLOCK_N) select at 4, 8 and 16 slots; against the reference."""
    fields = BackwardTile(BLOCK_M=1, BLOCK_N=256, num_warps=1, programs_per_sm=16)
    table = with_channels_first(planner.load_table("sm90"), "bwd", fields)
    x, dy, cl = _inputs(shape, torch.bfloat16, seed=seed, param_dtype=torch.float32)
    with launcher.overrides(table=table):
        plan = launcher.backward_plan(x.detach(), dy, channels_first=True)
        assert plan.channel_slots == (16 if shape[2] == 3 else 8 if shape[2] == 7 else 4), plan
        check_against_reference(cl, _run(x, dy, cl))


@needs_kernels
@pytest.mark.parametrize("terms", planner.POLY_TERMS)
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_both_backward_polynomials_with_the_sm90_channels_first_tiles(terms, dtype, seed):
    """The sm90 channels_first backward tiles on either polynomial (a variant's "poly"), with |alpha x|
    spread over [0, 1.5] across both limits (0.4 and 0.6), against the reference: spatial sizes in the
    ranges up to 64 and 65-256."""
    table = with_poly(planner.load_table("sm90"), terms, modes=("bwd",))
    for shape in SM90_WIDE[:2]:
        n, C, *spatial = shape
        x, dy, cl = _inputs(shape, DTYPES[dtype], seed=seed, alpha=0.75)
        gen = torch.Generator().manual_seed(seed)
        spread = (torch.rand(n, *spatial, C, generator=gen) * 4 - 2).to(x.dtype).to(x.device)
        cl.x = spread.requires_grad_()
        x = spread.detach().movedim(-1, 1).contiguous().requires_grad_()
        with launcher.overrides(table=table):
            plan = launcher.backward_plan(x.detach(), dy, channels_first=True)
            assert (plan.gamma_span, plan.poly_terms) == (math.prod(spatial), terms), plan
            check_against_reference(cl, _run(x, dy, cl))


@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "strided"])
@pytest.mark.parametrize("beta", [True, False], ids=["beta", "nobeta"])
def test_layouts_and_beta(layout, beta, seed):
    x, dy, cl = _inputs((3, 20, 6, 9), torch.bfloat16, seed=seed, layout=layout, beta=beta)
    outs = _run(x, dy, cl)
    check_against_reference(cl, outs)
    assert outs[4] is None or beta
    assert x.grad.shape == x.shape
    y = dyt.dyt_channels_first(x.detach(), cl.alpha, cl.gamma, cl.beta)
    fmt = torch.channels_last if layout == "channels_last" else torch.contiguous_format
    assert y.is_contiguous(memory_format=fmt), (layout, y.stride())


@needs_kernels
@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
def test_no_copy_of_x(layout, seed, monkeypatch, python_path):
    """Contiguous input reaches the kernels as it is, in channels-first mode; channels_last memory the
    kernels as rows, the moved view of x's own storage."""
    x, dy, cl = _inputs((2, 16, 5, 6), torch.bfloat16, seed=seed, layout=layout)
    seen = {}
    for name in ("forward", "backward"):
        real = getattr(launcher, name)

        def spy(*args, _real=real, _name=name, **kwargs):
            seen[_name] = (args[0] if _name == "forward" else args[1], kwargs.get("channels_first", False))
            return _real(*args, **kwargs)

        monkeypatch.setattr(launcher, name, spy)
    _run(x, dy, cl)
    as_channels_first = layout == "contiguous"
    assert set(seen) == {"forward", "backward"}
    for tensor, channels_first in seen.values():
        assert tensor.data_ptr() == x.data_ptr() and channels_first == as_channels_first
        assert tensor.shape == (x.shape if as_channels_first else x.movedim(1, -1).shape)


@needs_kernels
@pytest.mark.parametrize("alpha", [math.inf, -math.inf, math.nan], ids=["+inf", "-inf", "nan"])
def test_nonfinite_alpha_with_padding(alpha, seed):
    """Padding lanes (columns past the spatial size, rows past the last tile) never reach a sum: with an
    infinite alpha, tanh(inf * 0) = NaN there must not poison dgamma, dbeta or dalpha."""
    shape = (3, 5, 7, 11)  # 3 rows of 385 columns: padded columns and padded rows in every tile
    x, dy, cl = _inputs(shape, torch.float32, seed=seed, alpha=alpha)
    for plan in (launcher.forward_plan(x, cl.gamma, channels_first=True),
                 launcher.backward_plan(x, dy, channels_first=True)):  # fmt: skip
        assert plan.N % plan.BLOCK_N and plan.M % plan.BLOCK_M and plan.gamma_span == 77, plan
    outs = _run(x, dy, cl)
    if not math.isnan(alpha):
        assert all(torch.isfinite(t).all() for t in outs[2:]), "a parameter gradient got NaN from padding"
    check_against_reference(cl, outs)


@needs_kernels
def test_infinite_gamma_and_nonfinite_x(seed):
    """An infinite gamma gives dalpha exactly +inf where every term is positive; NaN and inf in x show
    where the reference has them and nowhere else."""
    x, dy, cl = _inputs((2, 6, 5, 9), torch.float32, seed=seed)
    x = (x.detach().abs() + 0.1).requires_grad_()
    dy = dy.abs() + 0.1
    gamma = cl.gamma.detach().clone()
    gamma[2] = math.inf
    cl.gamma = gamma.requires_grad_()
    cl.x, cl.dy = x.detach().movedim(1, -1), dy.movedim(1, -1)
    outs = _run(x, dy, cl)
    assert float(outs[2]) == math.inf
    check_against_reference(cl, outs)
    x2, dy2, cl2 = _inputs((2, 6, 5, 9), torch.bfloat16, seed=seed)
    bad = x2.detach().clone()
    bad[0, 1, 2, 3], bad[1, 4, 0, 0], bad[1, 5, 4, 8] = math.nan, math.inf, -math.inf
    cl2.x = bad.movedim(1, -1)
    outs2 = _run(bad.requires_grad_(), dy2, cl2)
    assert int(torch.isnan(outs2[0]).sum()) == 1
    check_against_reference(cl2, outs2)


@pytest.mark.parametrize("x_dtype", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("param_dtype", ["fp32", "bf16"])
def test_dtype_contract(x_dtype, param_dtype, seed):
    """y and dx in x's dtype; dalpha, dgamma, dbeta in the parameters' own dtypes, never through x's."""
    x, dy, cl = _inputs((2, 8, 4, 5), DTYPES[x_dtype], seed=seed, param_dtype=DTYPES[param_dtype])
    y, dx, da, dg, db = _run(x, dy, cl)
    assert y.dtype == dx.dtype == DTYPES[x_dtype]
    assert da.dtype == dg.dtype == db.dtype == DTYPES[param_dtype]
    check_against_reference(cl, (y, dx, da, dg, db))


def test_bitwise_repeats_and_batch_invariance(seed):
    """The same call gives the same bits; a sample's y and dx do not depend on the other samples."""
    x, dy, cl = _inputs((6, 10, 7, 7), torch.bfloat16, seed=seed)
    first = [t.clone() for t in _run(x, dy, cl)]
    again = _run(x, dy, cl)
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    part = x.detach()[2:3].clone().requires_grad_()
    y = dyt.dyt_channels_first(part, cl.alpha, cl.gamma, cl.beta)
    y.backward(dy[2:3])
    assert torch.equal(y.detach(), first[0].movedim(-1, 1)[2:3])
    assert torch.equal(part.grad, first[1].movedim(-1, 1)[2:3])


def test_empty_batch_and_errors():
    x = torch.empty(0, 4, 3, 3, device=_device(), requires_grad=True)
    a = torch.full((1,), 0.5, device=_device(), requires_grad=True)
    g = torch.ones(4, device=_device(), requires_grad=True)
    y = dyt.dyt_channels_first(x, a, g)
    y.sum().backward()
    assert y.shape == x.shape and float(a.grad) == 0.0 and torch.equal(g.grad, torch.zeros_like(g))
    with pytest.raises(ValueError, match=r"gamma must have shape \(4,\) to match x's channels \(dim 1\)"):
        dyt.dyt_channels_first(torch.ones(2, 4, 3, device=_device()), a, torch.ones(3, device=_device()))
    with pytest.raises(ValueError, match="at least two dimensions"):
        dyt.dyt_channels_first(torch.ones(4, device=_device()), a, g)
    with pytest.raises(TypeError, match="x must be a torch.Tensor"):
        dyt.dyt_channels_first([1.0], a, g)


def test_module_runs_channels_first_without_a_copy_and_matches_the_paper_module(seed):
    m = dyt.DyT(12, channels_last=False).to(_device())
    with torch.no_grad():
        m.weight.normal_()
        m.bias.normal_()
    x = torch.randn(2, 12, 5, 5, device=_device())
    paper = torch.tanh(m.alpha * x) * m.weight[:, None, None] + m.bias[:, None, None]
    torch.testing.assert_close(m(x), paper, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match=r"x must have shape \(N, 12, \.\.\.\)"):
        m(torch.randn(2, 5, 12, device=_device()))


def test_torch_compile_fullgraph(seed):
    """Under torch.compile the module's channels-first call traces (fullgraph) and matches eager."""
    torch.manual_seed(seed)
    torch._dynamo.reset()
    m = dyt.DyT(16, channels_last=False).to(_device())
    x = torch.randn(2, 16, 4, 6, device=_device(), requires_grad=True)
    backend = "inductor" if on_gpu() else "aot_eager"
    y_c = torch.compile(m, fullgraph=True, backend=backend)(x)
    y_c.square().sum().backward()
    grads_c = [x.grad.clone(), *(p.grad.clone() for p in m.parameters())]
    x.grad = None
    m.zero_grad()
    m(x).square().sum().backward()
    torch.testing.assert_close(y_c, m(x), rtol=1e-5, atol=1e-5)
    for got, want in zip(grads_c, [x.grad, *(p.grad for p in m.parameters())], strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("n, C, L", [(64, 96, 3136), (256, 768, 49), (8, 96, 3136), (70000, 3, 2),
                                     (5, 7, 1), (2, 3, 2**31 // 4), (3, 100, 1500)])  # fmt: skip
def test_plans_cover_the_rows_in_a_one_dimensional_grid(n, C, L):
    """Both directions see n rows of C * L on grid axis 0 only (no 65,535 limit), column j taking channel
    j // L (spatial size 1: plain rows), int64 offsets once an address passes 2^31; the backward's column
    blocks hold slots for every channel they touch, and its finish reads every block of each channel and
    dalpha's partials in one step where they fit in FINISH_TILE."""
    W = C * L
    span = L if L > 1 else 0
    fwd = planner.plan_forward(n, W, 2, channel_span=L, target=SM90)
    bwd = planner.plan_backward(n, W, 2, channel_span=L, target=SM90)
    for plan in (fwd, bwd):
        assert (plan.M, plan.N, plan.gamma_span, plan.param_width) == (n, W, span, C) or plan.gamma_period
        assert plan.n_col_blocks * plan.BLOCK_N >= plan.N and plan.int64 == (n * W > 2**31 - 1 - plan.BLOCK_N)
    assert fwd.grid == (planner.cdiv(fwd.M, fwd.BLOCK_M) * fwd.n_col_blocks,)
    assert bwd.grid == (bwd.n_groups * bwd.n_col_blocks,)
    assert bwd.tiles_per_program * bwd.n_groups * bwd.BLOCK_M >= n
    if span:
        starts = range(0, W, bwd.BLOCK_N)
        assert max(len({j // L for j in range(s, min(s + bwd.BLOCK_N, W))}) for s in starts[:64]) <= (
            bwd.channel_slots
        )
        assert bwd.channel_slots * bwd.BLOCK_N <= planner.CF_SLOT_TILE
        assert bwd.partial_width == bwd.n_col_blocks * bwd.channel_slots
        blocks_per_channel = dict(bwd.finish.constexprs)["BLOCKS_PER_CHANNEL"]
        assert max((c * L + L - 1) // bwd.BLOCK_N - (c * L) // bwd.BLOCK_N + 1 for c in range(C)) <= (
            blocks_per_channel
        )
        # dalpha's partials in one step of dependent loads, up to FINISH_TILE of them
        dalpha_block = dict(bwd.finish.constexprs)["DALPHA_BLOCK"]
        assert dalpha_block == planner.next_pow2(dalpha_block) <= planner.FINISH_TILE
        assert dalpha_block >= min(bwd.n_dalpha_partials, planner.FINISH_TILE)
    else:
        assert (
            bwd.channel_slots == 0
            and bwd.finish.constexprs == planner.plan_backward(n, C, 2, target=SM90).finish.constexprs
        )


def _device():
    return torch.device("cuda") if on_gpu() else torch.device("cpu")


@pytest.mark.gpu_only
@pytest.mark.whole_gpu
def test_more_than_2_31_elements_and_65535_rows():
    """2^31 + 2^20 elements in 65,600 rows of 32,784: int64 offsets, rows past grid axis 1's limit;
    checked on a sample of rows against the float64 reference."""
    n, C, L = 40, 1640, 32784
    x = torch.randn(n, C, L, device="cuda", dtype=torch.bfloat16)
    a = torch.full((1,), 0.8, device="cuda")
    g = torch.randn(C, device="cuda")
    b = torch.randn(C, device="cuda")
    assert x.numel() > 2**31 and n * C > 65535
    y = dyt.dyt_channels_first(x, a, g, b)
    for i, c in [(0, 0), (n - 1, C - 1), (17, 1000)]:
        ref = g[c].double() * torch.tanh(a.double() * x[i, c].double()) + b[c].double()
        torch.testing.assert_close(y[i, c].double(), ref, rtol=1e-2, atol=1e-2)


def test_channels_first_rows_take_their_table_variant():
    """A table entry's channels_first tile applies to channels-first rows only; rows of the same width keep
    the entry's own tile (the committed sm90 table has one for its widest 16-bit forward entry)."""
    table = planner.load_table("sm90")
    widest = table.fwd["16bit"][-1]
    variant = planner.channels_first_variant(widest, 3136)
    assert variant is not None, "the widest 16-bit forward entry has no channels_first tile for L = 3136"
    cf = planner.plan_forward(64, 96 * 3136, 2, channel_span=3136, target=SM90)
    rows = planner.plan_forward(64, 96 * 3136, 2, target=SM90)
    assert (cf.BLOCK_M, cf.BLOCK_N, cf.num_warps) == (variant.BLOCK_M, variant.BLOCK_N, variant.num_warps)
    assert (rows.BLOCK_M, rows.BLOCK_N) == (widest.BLOCK_M, widest.BLOCK_N)
    one = (BackwardTile(BLOCK_M=2, programs_per_sm=4),)
    swapped = table.map_entries(lambda e: dataclasses.replace(e, channels_first=one), modes=("bwd",))
    bwd = planner.plan_backward(
        64, 96 * 3136, 2, channel_span=3136, target=SM90, overrides=planner.Overrides(table=swapped)
    )
    # 294 column blocks of 1024; 4 programs per SM want one row group (528 // 294), 32 tiles of 2 rows each
    assert (bwd.BLOCK_M, bwd.BLOCK_N, bwd.n_groups, bwd.tiles_per_program) == (2, 1024, 1, 32)


def test_channels_first_variants_choose_by_spatial_size():
    """A list of channels_first fields chooses by the spatial size (max_span): each choice serves the
    spans up to its max_span and the next one those past it; the committed sm90 backward is such a list,
    its neighbours distinct (tune.channels_first_field merges equal ones), the last without a max_span."""
    entry = planner.load_table("sm90").bwd["16bit"][-1]
    choices = entry.channels_first
    assert len(choices) >= 2 and choices[-1].max_span is None
    fields = [dataclasses.replace(c, max_span=None) for c in choices]
    assert all(a != b for a, b in itertools.pairwise(fields)), "neighbouring classes with one choice merge"
    assert planner.channels_first_variant(entry, 0) is None
    for i, choice in enumerate(choices[:-1]):
        assert planner.channels_first_variant(entry, choice.max_span) == fields[i]
        assert planner.channels_first_variant(entry, choice.max_span + 1) == fields[i + 1]
    for C, L in ((768, 49), (384, 196), (192, 784), (96, 3136)):
        chosen = planner.channels_first_variant(entry, L)
        plan = planner.plan_backward(64, C * L, 2, channel_span=L, target=SM90)
        tile = (chosen.BLOCK_M or entry.BLOCK_M, chosen.BLOCK_N or entry.BLOCK_N)
        assert plan.BLOCK_M * plan.BLOCK_N == tile[0] * tile[1] and plan.BLOCK_N <= tile[1], (plan, tile)
        assert plan.num_warps == (chosen.num_warps or entry.num_warps), (plan, chosen)
