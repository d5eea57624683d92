"""grid_limit: any row count the GPU can hold. Plans are 1-D and within CUDA's limits for every shape
class; narrow rows stack several rows per program; >65,535 rows and >2^31 elements run on a real GPU."""

from __future__ import annotations

import pytest
import torch

import dyt
from dyt import launcher, planner, reference
from dyt.conformance.tolerances import assert_close
from dyt.launch_table import BackwardEntry, ForwardEntry, LaunchTable

from helpers import DTYPES, SM90, check_against_reference, device, make_inputs, plans_for, run, target
from paths import PATHS, assert_path, path_context

pytestmark = pytest.mark.grid_limit

GRID_Y_LIMIT = 65_535
SHAPE_CLASSES = [
    (rows, width)
    for width in (1, 2, 64, 100, 256, 768, 4096, 5000, 16384, 65536, 2**20)
    for rows in (1, 2, 65_535, 65_536, 70_000, 2**20, 2**24, 2**31 // width + 1)
    if rows * width <= 2**36
]  # up to 128 GiB of bf16: more than a GPU holds


def _plans(rows, width, itemsize, row_stride=None):
    """Plans for contiguous rows, or for rows row_stride apart (padded rows: never folded)."""
    s = row_stride or width
    fwd = planner.plan_forward(rows, width, itemsize, x_stride=s, target=SM90)
    bwd = planner.plan_backward(rows, width, itemsize, x_stride=s, dy_stride=s, target=SM90)
    return fwd, bwd


def _caller_rows_per_tile(plan) -> int:
    """Rows of the caller's tensor in one tile: folded rows hold plan.N // plan.param_width each."""
    return plan.BLOCK_M * plan.N // plan.param_width


@pytest.mark.parametrize("itemsize", [2, 4])
def test_every_plan_is_one_dimensional_and_within_limits(itemsize):
    for rows, width in SHAPE_CLASSES:
        for plan in _plans(rows, width, itemsize):
            assert len(plan.grid) == 1, f"{rows}x{width}: grid {plan.grid} is not 1-D"
            assert 1 <= plan.grid[0] <= planner.GRID_X_LIMIT, f"{rows}x{width}: grid {plan.grid}"
            covered = plan.grid[0] // plan.n_col_blocks * _caller_rows_per_tile(plan)
            if isinstance(plan, planner.BwdPlan):
                covered *= plan.tiles_per_program
                assert len(plan.finish_grid) == 1 and plan.finish_grid[0] <= GRID_Y_LIMIT
            assert covered >= rows, f"{rows}x{width}: plan covers only {covered} rows"
            assert plan.n_col_blocks * plan.BLOCK_N >= plan.N >= width
            needs64 = (rows - 1) * width + width > 2**31 - 1
            assert plan.int64 or not needs64, f"{rows}x{width}: int32 offsets would overflow"


@pytest.mark.parametrize("itemsize", [2, 4])
@pytest.mark.parametrize("width", [1, 2, 16, 64, 100, 128, 256])
@pytest.mark.parametrize("contiguous", [False, True], ids=["padded_rows", "contiguous_rows"])
def test_narrow_rows_are_tiled_several_per_program(width, itemsize, contiguous):
    """The seed's starvation bug class: one program per row on narrow widths. Padded rows stack in the
    tile; contiguous rows of a power-of-two width are folded into 1024-wide rows (planner.fold_factor)."""
    fwd, bwd = _plans(2**20, width, itemsize, None if contiguous else 2 * width)
    for plan in (fwd, bwd):
        assert _caller_rows_per_tile(plan) >= 2 and plan.BLOCK_M * min(plan.BLOCK_N, plan.N) >= 512, (
            f"width {width}: tile of {plan.BLOCK_M} rows of {plan.N}"
        )
        assert plan.gamma_period == (width if contiguous and width & (width - 1) == 0 else 0), plan
    assert fwd.grid[0] <= 2**20 // 4, "forward launches one program per row or close to it"


@pytest.mark.parametrize(
    ("rows", "width", "folds"), [(2**26 // 768, 768, True), (50432, 768, True), (12608, 384, False)]
)
def test_copy_folds_keep_the_programs_the_rows_unfolded_get(rows, width, folds):
    """768 and 384 columns fold into rows of 3072 whose partial rows are copies to add up: the backward
    folds only where that gives at least as many programs as the rows unfolded get (12608 x 384: 237
    folded against 396 unfolded; the forward folds power-of-two widths only)."""
    fwd, bwd = _plans(rows, width, 2)
    assert fwd.gamma_period == 0
    fold = 3072 // width
    assert bwd.gamma_period == (width if folds else 0) and bwd.ragged == (folds and rows % fold != 0), bwd
    unfolded = _plans(rows, width, 2, row_stride=2 * width)[1]  # padded rows: never folded
    assert unfolded.gamma_period == 0 and bwd.grid[0] >= unfolded.grid[0], (bwd, unfolded)


BANDWIDTH_WIDTHS = (64, 128, 256, 512, 768, 1024, 2048, 4096, 8192, 16384)


@pytest.mark.parametrize("itemsize", [2, 4])
def test_backward_partials_stay_small(itemsize):
    """Partial sums cost under 2% of the backward's main traffic at every bandwidth shape and at every
    shape class from 2^26 elements up, where programs restart their sums every LANE_RUN_TILES tiles and
    write partials per run (tests/test_dtype_contract.py shows what a longer run costs)."""
    shapes = [(2**26 // width, width) for width in BANDWIDTH_WIDTHS]
    shapes += [(rows, width) for rows, width in SHAPE_CLASSES if rows * width >= 2**26]
    for rows, width in shapes:
        for stride in (width, width + 16):  # contiguous (folded where the width allows) and padded rows
            _, bwd = _plans(rows, width, itemsize, row_stride=stride)
            main_bytes = 3 * rows * width * itemsize
            assert bwd.partial_bytes() < 0.02 * main_bytes, f"{rows}x{width}, row stride {stride}: {bwd}"


@pytest.mark.parametrize("itemsize", [2, 4])
@pytest.mark.parametrize("width", BANDWIDTH_WIDTHS)
def test_the_finishing_reduction_spreads_over_the_sms(width, itemsize):
    """Its programs split the columns only: one program per 256 columns left a 1024-wide row's ~400 partial
    rows to 4 programs. Now as many programs as 16-column blocks allow, up to about one per SM, each
    adding its column block's partials in one or two steps."""
    _, bwd = _plans(2**26 // width, width, itemsize)
    assert bwd.finish_grid[0] >= min(132 // 2, -(-width // planner.FINISH_MIN_BLOCK_N)), bwd
    assert bwd.finish_block_g * bwd.finish_block_n == planner.FINISH_TILE
    steps = -(-bwd.finish_rows // bwd.finish_block_g)
    assert steps <= 2, f"{bwd.finish_rows} partial rows in steps of {bwd.finish_block_g}"


@pytest.mark.parametrize("itemsize", [2, 4])
def test_folded_copies_are_added_in_registers_only_where_many(itemsize):
    """At the bandwidth shapes, 64 and 128 columns folded into 1024-wide blocks add up their 16 and 8
    copies in the main kernel; in 16 bits 256 and 512 (4 and 2 copies) write them as partial rows, as
    many rows per program as copies (the sm90 table's copies_as_rows: adding them after the loop slowed
    the bf16 loop, not the float32 one: docs/kernels.md, "Folded rows")."""
    as_rows = itemsize == 2
    for width, copies in ((64, 16), (128, 8), (256, 0 if as_rows else 4), (512, 0 if as_rows else 2)):
        _, bwd = _plans(2**26 // width, width, itemsize)
        assert (bwd.gamma_period, bwd.BLOCK_N, bwd.copies_in_block) == (width, 1024, copies), bwd
        per_program = 1 if copies else 1024 // width
        assert bwd.finish_rows == bwd.grid[0] * bwd.runs * per_program, bwd


@pytest.mark.parametrize(("rows", "width"), [(2048, 4096), (4096, 256), (4096, 64), (6304, 768)])
def test_small_problems_still_fill_the_gpu(rows, width):
    """Programs of planner.MIN_TILES_PER_PROGRAM tiles would leave most SMs idle on small problems (32
    programs for 4096 x 64 bf16 on an H200's 132 SMs); they keep at least one program per SM where they
    have the tiles."""
    for itemsize in (2, 4):
        bwd = planner.plan_backward(rows, width, itemsize, target=SM90)
        n_tiles = -(-bwd.M // bwd.BLOCK_M) * bwd.n_col_blocks  # tiles of the view (folded rows: fewer)
        assert bwd.grid[0] >= min(128, n_tiles), f"{rows}x{width} x{itemsize} B: {bwd.grid[0]} programs"


@pytest.mark.parametrize("itemsize", [2, 4])
@pytest.mark.parametrize(
    ("rows", "width"), [(4096, 4096), (2048, 8192), (16384, 1024), (262144, 64), (12608, 320), (8191, 768)]
)
def test_mid_size_backwards_run_more_than_one_program_per_sm(rows, width, itemsize):
    """From about 2^22 elements a backward has the tiles for the table's programs per SM (2 or more) in
    programs of MIN_TILES_PER_PROGRAM tiles or more, and gets them, not the one program per SM that a cap
    on partial traffic held them to (docs/kernels.md, "Backward main kernel", Ruled out)."""
    bwd = planner.plan_backward(rows, width, itemsize, target=SM90)
    assert bwd.grid[0] >= 1.9 * SM90.sm_count, f"{rows}x{width} x{itemsize} B: {bwd.grid[0]} programs"
    assert bwd.tiles_per_program >= planner.MIN_TILES_PER_PROGRAM, bwd


@pytest.mark.parametrize(("rows", "width", "itemsize"), [(4096, 64, 4), (4096, 256, 2)])
def test_programs_run_more_than_one_tile_where_the_problem_has_them(rows, width, itemsize):
    """Where the table's programs per SM would leave each program one tile (4096 x 64 fp32: 256 programs),
    the backward runs programs of two tiles (MIN_TILES_PER_PROGRAM), still one per SM or more."""
    bwd = planner.plan_backward(rows, width, itemsize, target=SM90)
    assert bwd.tiles_per_program >= 2 and bwd.grid[0] >= 128, bwd


@pytest.mark.parametrize("path", sorted(PATHS))
def test_more_rows_than_grid_axis_one_holds_narrow(path, seed):
    """>65,535 rows everywhere; runs in the interpreter at width 2 (row-tiled) and on GPUs at every path."""
    width = 2 if path != "column_blocked" else PATHS[path][0]
    if path == "column_blocked" and not torch.cuda.is_available():
        pytest.skip("70,000 x 5000 is too slow for the CPU interpreter; runs in gpu_tests")
    rows = 70_000
    inp = make_inputs((rows, width), torch.bfloat16, seed=seed, param_dtype=torch.float32)
    with path_context(path):
        fwd, bwd = launcher.forward_plan(inp.x.detach()), launcher.backward_plan(inp.x.detach(), inp.dy)
        assert fwd.path == bwd.path == ("row_tiled" if path == "int64" else path)
        check_against_reference(inp, run(inp))


@pytest.mark.gpu_only
def test_two_to_the_twenty_rows_at_width_64(seed):
    inp = make_inputs((2**20, 64), torch.bfloat16, seed=seed)
    assert_path("row_tiled", (2**20, 64), torch.bfloat16)
    check_against_reference(inp, run(inp))


@pytest.mark.gpu_only
@pytest.mark.parametrize("path", ["row_tiled", pytest.param("column_blocked", marks=pytest.mark.whole_gpu)])
def test_more_rows_than_grid_axis_one_holds_gpu(path, seed):
    width = {"row_tiled": 1024, "column_blocked": 8192}[path]
    assert_path(path, (70_000, width), torch.bfloat16)
    inp = make_inputs((70_000, width), torch.bfloat16, seed=seed, param_dtype=torch.float32)
    check_against_reference(inp, run(inp))


def _rows_sample(M):
    return sorted({0, 1, M // 3, M // 2 + 7, M - 2, M - 1})


@pytest.mark.gpu_only
@pytest.mark.whole_gpu
def test_more_than_two_to_the_31_elements(seed):
    """131,073 x 16,384 bf16 (2^31 + 16,384 elements): int64 offsets, checked on sampled rows and in full
    for the parameter gradients (float64 reference reduced in chunks on the GPU)."""
    M, N = 131_073, 16_384
    assert M * N > 2**31
    dev = device()
    gen = torch.Generator(device=dev).manual_seed(seed)
    x = torch.randn(M, N, device=dev, dtype=torch.bfloat16, generator=gen).requires_grad_()
    dy = torch.randn(M, N, device=dev, dtype=torch.bfloat16, generator=gen)
    alpha = torch.tensor([0.7], device=dev, requires_grad=True)
    gamma = torch.randn(N, device=dev, generator=gen).requires_grad_()
    beta = torch.randn(N, device=dev, generator=gen).requires_grad_()
    fwd, bwd = launcher.forward_plan(x.detach()), launcher.backward_plan(x.detach(), dy)
    assert fwd.int64 and bwd.int64
    y = dyt.dyt(x, alpha, gamma, beta)
    y.backward(dy)
    rows = _rows_sample(M)
    sub = make_inputs((len(rows), N), torch.bfloat16, seed=seed, param_dtype=torch.float32)
    sub.x, sub.dy = x.detach()[rows].requires_grad_(), dy[rows]
    sub.alpha, sub.gamma, sub.beta = alpha, gamma, beta
    y_ref = reference.dyt_forward_reference(sub.x, alpha, gamma, beta)
    dx_ref = reference.dyt_backward_reference(sub.dy, sub.x, alpha, gamma, beta)[0]
    assert_close(
        "y[sampled rows]",
        y.detach()[rows],
        y_ref,
        kind="out",
        storage=torch.bfloat16,
        scale=(gamma.double() * torch.tanh(0.7 * sub.x.double())).abs() + beta.double().abs(),
    )
    assert_close("dx[sampled rows]", x.grad[rows], dx_ref, kind="out", storage=torch.bfloat16)
    # The float32 rule for parameter gradients allows rounding in proportion to the root sum of squared
    # terms (the tolerance table): a sum of 2^31 terms can cancel to a small value (dalpha -216.8 against
    # an rss of ~2.5e4 at one seed), so the bare relative bound alone depends on the seed.
    sums = {name: torch.zeros(shape, dtype=torch.float64, device=dev)
            for name, shape in (("dalpha", ()), ("dgamma", (N,)), ("dbeta", (N,)))}  # fmt: skip
    squares = {name: torch.zeros_like(t) for name, t in sums.items()}
    for lo in range(0, M, 8192):
        xs, dys = x.detach()[lo : lo + 8192], dy[lo : lo + 8192]
        _, da_c, dg_c, db_c = reference.dyt_backward_reference(dys, xs, alpha, gamma, beta)
        for name, part in (("dalpha", da_c.reshape(())), ("dgamma", dg_c), ("dbeta", db_c)):
            sums[name] += part
        x64, dy64 = xs.double(), dys.double()
        z = alpha.detach().double() * x64
        dz = dy64 * gamma.detach().double() * reference.sech2_reference(z)
        squares["dalpha"] += (dz * x64).square().sum()
        squares["dgamma"] += (dy64 * torch.tanh(z)).square().sum(dim=0)
        squares["dbeta"] += dy64.square().sum(dim=0)
        del x64, dy64, z, dz
    for name, grad in (("dalpha", alpha.grad), ("dgamma", gamma.grad), ("dbeta", beta.grad)):
        ref = sums[name].reshape(grad.shape)
        rss = squares[name].sqrt().reshape(grad.shape)
        assert_close(name, grad, ref, kind="param", storage=torch.float32, rss=rss)


@pytest.mark.parametrize(
    ("width", "block_n", "blocks"), [(768, 256, 3), (1536, 512, 3), (100, 128, 1), (5000, 1024, 5)]
)
def test_widths_far_from_a_power_of_two_split_into_equal_blocks(width, block_n, blocks):
    """768 columns in one 1024-wide block would leave a quarter of every tile idle: three blocks of 256
    do not. Widths without a large power-of-two divisor (100, 5000) keep their padded blocks."""
    entry = ForwardEntry(max_width=None, BLOCK_M=4, BLOCK_N=1024, num_warps=4)
    block_m, got_n, got_blocks = planner.tile_shape(entry, width)
    assert (got_n, got_blocks) == (block_n, blocks)
    assert block_m * got_n == 4 * 1024, "the tile keeps its size"


@pytest.mark.parametrize("lane_run", [None, 2], ids=["one_run", "runs_of_2"])
@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
@pytest.mark.parametrize("width", [64, 100], ids=["whole_columns", "padded_columns"])
@pytest.mark.parametrize("order", ["chunked", "strided"])
def test_both_row_orders_and_the_masked_tail(order, width, dtype, lane_run, seed):
    """Both orders of the backward's persistent loop, whatever the committed tables choose, with whole
    tiles (the unmasked, pipelined loop), a last tile that is partial, and tiles past M (the masked loop);
    at 100 columns every tile is masked. With runs of 2 tiles (dyt.planner.LANE_RUN_TILES, shortened), the
    sums restart inside both loops and each run writes its own partials."""
    bwd = BackwardEntry(max_width=None, BLOCK_M=4, BLOCK_N=128 if width > 64 else 64, num_warps=4,
                        programs_per_sm=2, row_order=order, num_stages=3)  # fmt: skip
    fwd = ForwardEntry(max_width=None, BLOCK_M=4, BLOCK_N=128, num_warps=4)
    table = LaunchTable.single(fwd, bwd)
    # S SMs: 6S + 3 tiles dealt to S groups of 7 (the last run passes M unless 7 divides 6S + 3; not for
    # S = 4, the interpreter, or 132, an H100/H200); the last tile holds one row.
    rows = 4 * (6 * target().sm_count + 2) + 1
    with launcher.overrides(table=table, lane_run=lane_run):
        _, plan = plans_for((rows, width), DTYPES[dtype])
        n_tiles = -(-rows // plan.BLOCK_M)
        assert plan.strided == (order == "strided") and rows % plan.BLOCK_M
        assert plan.grid[0] * plan.tiles_per_program > n_tiles, "no program runs past M"
        assert plan.runs == (1 if lane_run is None else -(-plan.tiles_per_program // lane_run))
        inp = make_inputs((rows, width), DTYPES[dtype], seed=seed)
        check_against_reference(inp, run(inp), label=f"{order} {width}: ")


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
@pytest.mark.parametrize(
    "width", [64, 256, 768], ids=["copies_added_in_registers", "whole_copies_as_rows", "copies_as_rows"]
)
def test_runs_of_tiles_on_folded_rows(width, dtype, seed):
    """Folded rows whose programs restart their sums every 2 tiles (dyt.planner.LANE_RUN_TILES, shortened):
    each run's partials go to rows of their own, with the copies of the true width added up in registers
    (64 columns in 1024-wide blocks) or written as rows (256 in 1024-wide blocks: a few whole copies, see
    the entry's copies_as_rows; 768 in 3072-wide rows of 1024-wide blocks); the last folded row ends
    early."""
    table = LaunchTable.single(
        ForwardEntry(max_width=None, BLOCK_M=2, BLOCK_N=1024, num_warps=4),
        BackwardEntry(max_width=None, BLOCK_M=2, BLOCK_N=1024, num_warps=4, programs_per_sm=1, num_stages=2,
                      copies_as_rows=4),
    )  # fmt: skip
    sms = target().sm_count
    fold = {64: 16, 256: 4, 768: 4}[width]
    rows = fold * (14 * sms - 1) + fold // 2  # 14 S folded rows, the last one in half
    with launcher.overrides(table=table, lane_run=2):
        _, plan = plans_for((rows, width), DTYPES[dtype])
        assert (plan.gamma_period, plan.ragged, plan.copies_in_block) == (
            width,
            True,
            16 if width == 64 else 0,
        )
        assert plan.runs >= 3, plan
        inp = make_inputs((rows, width), DTYPES[dtype], seed=seed)
        check_against_reference(inp, run(inp), label=f"{width} folded, {plan.runs} runs: ")
