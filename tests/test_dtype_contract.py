"""dtype_contract: y and dx in x.dtype; dalpha, dgamma, dbeta in their parameters' own dtypes, accumulated
in float32 and never rounded through x.dtype; bad dtypes and shapes rejected with clear errors."""

from __future__ import annotations

import itertools

import pytest
import torch

import dyt
from dyt import launcher, planner
from dyt.conformance.tolerances import assert_close
from dyt.launch_table import BackwardEntry, ForwardEntry, ForwardTile, LaunchTable

from helpers import (
    DTYPES,
    SM90,
    Inputs,
    check_against_reference,
    device,
    make_inputs,
    plan_tile,
    run,
    table_with_forward_variant,
    target,
    tile_of,
    with_variant_from,
)
from paths import PATHS, assert_path, path_context

pytestmark = pytest.mark.dtype_contract


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize(("x_dtype", "p_dtype"), list(itertools.product(DTYPES, DTYPES)))
def test_dtype_combinations(x_dtype, p_dtype, path, seed):
    width = PATHS[path][0]
    xd, pd = DTYPES[x_dtype], DTYPES[p_dtype]
    assert_path(path, (37, width), xd)
    inp = make_inputs((37, width), xd, seed=seed, param_dtype=pd)
    with path_context(path):
        outs = run(inp)
    y, dx, da, dg, db = outs
    assert (y.dtype, dx.dtype) == (xd, xd)
    assert (da.dtype, dg.dtype, db.dtype) == (pd, pd, pd)
    assert da.shape == inp.alpha.shape and dg.shape == db.shape == (width,)
    check_against_reference(inp, outs)


def test_each_parameter_keeps_its_own_dtype(seed):
    inp = make_inputs((19, 300), torch.bfloat16, seed=seed, param_dtype=torch.float32)
    inp.gamma = inp.gamma.detach().to(torch.float16).requires_grad_()
    inp.beta = inp.beta.detach().to(torch.bfloat16).requires_grad_()
    outs = run(inp)
    assert [t.dtype for t in outs[2:]] == [torch.float32, torch.float16, torch.bfloat16]
    check_against_reference(inp, outs)


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize("x_dtype", ["bf16", "fp16"])
def test_float32_parameter_grads_as_accurate_as_float32(path, x_dtype, seed):
    """Mixed precision: with 16-bit x, float32 parameter gradients still meet the float32 tolerance.

    Rounding them through x.dtype would give errors near 2^-9 (bf16) or 2^-12 (fp16), far above 1e-5.
    """
    width = PATHS[path][0]
    inp = make_inputs((64, width), DTYPES[x_dtype], seed=seed, param_dtype=torch.float32)
    with path_context(path):
        outs = run(inp)
    check_against_reference(inp, outs)  # float32 grads are held to relative L2 <= 1e-5 there


@pytest.mark.parametrize("width", [64, 1024, 2048, 16384], ids=["folded", "1024", "2048", "16384"])
def test_float32_parameters_take_the_entrys_fp32_params_tile_from_its_size_on(width):
    """16-bit x with float32 gamma/beta runs the sm90 entry's fp32_params tile from min_elements on (2x1024
    on 2 warps, docs/kernels.md, "Float32-parameter tiles"); 16-bit parameters,
    float32 x and smaller problems keep the entry's own tile (folded rows with 16-bit parameters take the
    entry's folded tile, dyt.planner.FOLDED). Folded widths (64 in rows of 1024) take the variant of the
    entry their folded rows use."""
    table = planner.load_table("sm90")
    entry = planner.table_entry(table, "fwd", 2, max(width, planner.FOLD_WIDTH))
    big = entry.fp32_params.min_elements
    assert big == 2**24
    own = tile_of(entry)
    assert tile_of(entry.fp32_params) != own

    def tile(rows, itemsize, param_itemsize):
        plan = planner.plan_forward(rows, width, itemsize, param_itemsize=param_itemsize, target=SM90)
        assert plan.gamma_period == (width if width < planner.FOLD_WIDTH else 0)
        assert plan.BLOCK_M * plan.N // plan.param_width * plan.grid[0] // plan.n_col_blocks >= rows
        return plan.BLOCK_M, min(plan.BLOCK_N, entry.BLOCK_N), plan.num_warps

    rows = big // width
    assert tile(rows, 2, 4) == tile_of(entry.fp32_params)
    assert tile(4 * rows, 2, 4) == tile_of(entry.fp32_params)
    # 16-bit parameters: the entry's own tile, or on folded rows its folded tile (same threshold on sm90)
    folded = entry.folded if width < planner.FOLD_WIDTH else None
    unmixed = tile_of(folded) if folded else own
    assert tile(rows, 2, 2) == unmixed
    assert tile(rows, 2, None) == unmixed
    assert tile(rows - 1, 2, 4) == own
    fp32_entry = planner.table_entry(table, "fwd", 4, max(width, planner.FOLD_WIDTH))
    assert fp32_entry.fp32_params is None
    assert tile(rows, 4, 4) == tile_of(fp32_entry)


def test_the_launcher_plans_by_the_widest_of_gamma_and_beta():
    """launcher.forward_plan passes the wider of gamma's and beta's element sizes: one float32 parameter is
    enough for the fp32_params tile. Plans for parameters no wider than x are x's own plan (a second
    object would compile and cache its launches again: the direct-launch test looks them up by x)."""
    variant = ForwardTile(BLOCK_M=2, BLOCK_N=64, num_warps=2, min_elements=640)
    entry = ForwardEntry(max_width=None, BLOCK_M=4, BLOCK_N=64, num_warps=4, fp32_params=variant)
    table = LaunchTable.single(entry, planner.load_table("default").bwd["16bit"][-1])
    x = torch.empty(10, 64, dtype=torch.bfloat16)
    half, full = torch.empty(64, dtype=torch.bfloat16), torch.empty(64)
    with launcher.overrides(table=table):
        assert launcher.forward_plan(x, half, half).num_warps == 4
        assert launcher.forward_plan(x, half, None).num_warps == 4
        assert launcher.forward_plan(x, half, full).num_warps == 2
        assert launcher.forward_plan(x, full, None).num_warps == 2
        assert launcher.forward_plan(x[:9], full, full).num_warps == 4  # 576 elements: below min_elements
    # Parameters no wider than x share x's cached plan, and with it the kernels compiled for it.
    assert launcher.forward_plan(x, half, half) is launcher.forward_plan(x)
    assert launcher.forward_plan(x, full, half) is not launcher.forward_plan(x)


@pytest.mark.parametrize("x_dtype", ["bf16", "fp16"])
@pytest.mark.parametrize(("rows", "width"), [(48, 64), (37, 1024), (9, 5000)], ids=["folded", "1024", "5000"])
def test_fp32_params_tile_matches_the_reference(rows, width, x_dtype, seed):
    """The committed table's fp32_params tiles, made to apply at any size, on 16-bit x with float32
    parameters: folded rows, whole 1024-column rows, and 5000 columns in 1024-wide blocks (the last one
    padded)."""
    table = with_variant_from(table_with_forward_variant(planner.FP32_PARAMS), planner.FP32_PARAMS, 1)
    inp = make_inputs((rows, width), DTYPES[x_dtype], seed=seed, param_dtype=torch.float32)
    with launcher.overrides(table=table):
        plan = launcher.forward_plan(inp.x.detach(), inp.gamma, inp.beta)
        wide = planner.table_entry(table, "fwd", 2, plan.N)
        assert plan_tile(plan) == tile_of(wide.fp32_params), plan
        assert plan.gamma_period == (64 if width == 64 else 0)
        check_against_reference(inp, run(inp))


@pytest.mark.gpu_only
def test_fp32_params_tile_at_its_threshold(seed):
    """On the GPU, the committed table as it is, at its fp32_params threshold: 4096 x 4096 bf16 x with
    float32 parameters (2^24 elements) against the float64 reference."""
    inp = make_inputs((4096, 4096), torch.bfloat16, seed=seed, param_dtype=torch.float32)
    plan = launcher.forward_plan(inp.x.detach(), inp.gamma, inp.beta)
    entry = planner.table_entry(planner.load_table(target().arch), "fwd", 2, 4096)
    if entry.fp32_params is not None:
        assert plan_tile(plan) == tile_of(entry.fp32_params), plan
    check_against_reference(inp, run(inp))


# One program per SM over 1 x 16 tiles: RUN_TILES tiles per program.
RUN_TILES = 1024
ONE_PROGRAM_PER_SM = LaunchTable.single(
    ForwardEntry(max_width=None, BLOCK_M=1, BLOCK_N=16, num_warps=1),
    BackwardEntry(max_width=None, BLOCK_M=1, BLOCK_N=16, num_warps=1, programs_per_sm=1, num_stages=2),
)
# A float32 whose running sum rounds the same way at every addition once past 512 of them: 1024 additions
# are 1.53e-5 low (the contract allows 1e-5), 256 are exact (float32 sums emulated in numpy). Scaled by
# powers of two, it keeps that.
ROUNDS_DOWN = 1.99615478515625


def test_float32_parameter_grads_over_long_runs_of_one_term(seed):
    """The backward's lanes add one float32 term per tile, so a program's run of tiles is a lane's chain of
    additions: thousands of tiles per program drift past the contract (planner.LANE_RUN_TILES). Here dy
    is one value that makes each addition of dbeta's sums round the same way, over RUN_TILES tiles per
    program, unless the program restarts its sums every LANE_RUN_TILES. Padded rows (never folded); x,
    gamma, alpha fresh positive."""
    sm_count = target().sm_count
    rows, width = sm_count * RUN_TILES, 16
    gen = torch.Generator().manual_seed(seed)
    value = 0.5 + torch.rand(3, generator=gen, dtype=torch.float64)
    sign = 1.0 if float(torch.rand(1, generator=gen)) < 0.5 else -1.0
    scale = sign * 2.0 ** int(torch.randint(-3, 4, (1,), generator=gen))
    inp = Inputs(
        x=torch.full((rows, 2 * width), float(value[0]), device=device())[:, :width].requires_grad_(),
        alpha=torch.full((1,), float(value[1]), device=device(), requires_grad=True),
        gamma=torch.full((width,), float(value[2]), device=device(), requires_grad=True),
        beta=torch.full((width,), 0.25, device=device(), requires_grad=True),
        dy=torch.full((rows, width), scale * ROUNDS_DOWN, device=device()),
    )
    with launcher.overrides(table=ONE_PROGRAM_PER_SM):
        plan = launcher.backward_plan(inp.x.detach(), inp.dy)
        assert plan.gamma_period == 0 and plan.BLOCK_M == 1
        outs = run(inp)
    dbeta_ref = inp.dy.double().sum(dim=0)  # the sum that rounds the same way at every addition
    assert_close(
        "dbeta", outs[4], dbeta_ref, kind="param", storage=torch.float32, rss=dbeta_ref.abs() / rows**0.5
    )
    check_against_reference(inp, outs)
    assert plan.tiles_per_program == RUN_TILES and plan.runs == RUN_TILES // planner.LANE_RUN_TILES


BAD_DTYPES = [torch.int32, torch.int64, torch.bool, torch.complex64, torch.float64, torch.uint8]


@pytest.mark.parametrize("which", ["x", "alpha", "gamma", "beta"])
@pytest.mark.parametrize("bad", BAD_DTYPES, ids=str)
def test_bad_dtypes_raise_type_error(which, bad):
    dev = device()
    args = {"x": torch.ones(4, 8, device=dev), "alpha": torch.ones(1, device=dev),
            "gamma": torch.ones(8, device=dev), "beta": torch.ones(8, device=dev)}  # fmt: skip
    args[which] = args[which].to(bad)
    with pytest.raises(TypeError, match=rf"{which} must be a floating tensor .* got {bad}"):
        dyt.dyt(**args)


@pytest.mark.parametrize("which", ["x", "alpha", "gamma", "beta"])
def test_non_tensors_raise_type_error(which):
    dev = device()
    args = {"x": torch.ones(4, 8, device=dev), "alpha": torch.ones(1, device=dev),
            "gamma": torch.ones(8, device=dev), "beta": torch.ones(8, device=dev)}  # fmt: skip
    args[which] = args[which].tolist()
    with pytest.raises(TypeError, match=rf"{which} must be a torch.Tensor, got list"):
        dyt.dyt(**args)


@pytest.mark.parametrize(
    ("which", "shape", "message"),
    [
        ("gamma", (7,), r"gamma must have shape \(8,\).*got \(7,\)"),
        ("gamma", (1, 8), r"gamma must have shape \(8,\).*got \(1, 8\)"),
        ("beta", (9,), r"beta must have shape \(8,\).*got \(9,\)"),
        ("alpha", (2,), r"alpha must have exactly one element, got shape \(2,\)"),
        ("x", (), r"x must have at least one dimension"),
        ("x", (4, 0), r"last dimension \(channels\) must be at least 1"),
    ],
)
def test_bad_shapes_raise_value_error(which, shape, message):
    dev = device()
    args = {"x": torch.ones(4, 8, device=dev), "alpha": torch.ones(1, device=dev),
            "gamma": torch.ones(8, device=dev), "beta": torch.ones(8, device=dev)}  # fmt: skip
    args[which] = torch.ones(shape, device=dev)
    with pytest.raises(ValueError, match=message):
        dyt.dyt(**args)


def test_alpha_as_scalar_tensor_keeps_its_shape(seed):
    inp = make_inputs((5, 64), torch.float32, seed=seed)
    inp.alpha = inp.alpha.detach().reshape(()).requires_grad_()
    outs = run(inp)
    assert outs[2].shape == ()
    check_against_reference(inp, outs)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device to mix devices")
def test_mixed_devices_raise_value_error():
    with pytest.raises(ValueError, match="all tensors must be on one device.*gamma on cpu"):
        dyt.dyt(torch.ones(4, 8, device="cuda"), torch.ones(1, device="cuda"), torch.ones(8), None)


def test_mixed_devices_message_on_cpu_meta():
    """The device check itself, with the meta device standing in for a second device on CPU machines."""
    with pytest.raises(ValueError, match="all tensors must be on one device.*alpha on meta"):
        dyt.dyt(torch.ones(4, 8), torch.ones(1, device="meta"), torch.ones(8), None)
