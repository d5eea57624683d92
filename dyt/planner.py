"""Launch planning: shape -> grid, tile sizes, warps, int32 or int64 offsets, partial-buffer sizes.

Pure Python (no Triton, no CUDA), so that every decision is unit-testable on any machine. The tile
choice is data: a committed table per GPU architecture (dyt/tables/<arch>.json, written by dyt.tune),
looked up by dtype bucket and width bucket (a forward entry may name other tiles for float32 parameters
on 16-bit x and for folded rows, FP32_PARAMS and FOLDED, and tanh's polynomial, POLY_TERMS). Nothing here
times anything, so two processes on the same GPU always choose the same kernels and get the same bits.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import math
import os
import pathlib

TABLES = pathlib.Path(__file__).parent / "tables"
INT32_LIMIT = 2**31 - 1
# CUDA's limit on grid axis 0 (axes 1 and 2 hold only 65,535, which is why nothing goes there).
GRID_X_LIMIT = 2**31 - 1
# The finishing reduction: each program adds the (finish rows, BLOCK_N) partials of its columns,
# FINISH_TILE of them per step, so that few dependent steps are needed (see finish_tile): 16384 (1024 rows
# of 16 columns) took the H200's finish at 256-1024 columns from 3.1-5.4 to 2.8-3.8 us (NOTES.md v18).
FINISH_TILE = 16384
FINISH_MIN_BLOCK_N = 16  # 64-byte float32 row segments: two 32-byte sectors, no waste
FINISH_MAX_BLOCK_N = 256
FINISH_NUM_WARPS = 8
# Backward partial sums may cost at most this fraction of the backward's main traffic (x, dy, dx).
PARTIAL_TRAFFIC_BUDGET = 0.018
# Each lane of a backward program adds one float32 term per tile. Each addition rounds by at most 2^-24 of
# the running sum, so n terms of one sign add up to at most (n + 1) / 2 * 2^-24 of the total: runs of 256
# tiles keep that at 7.7e-6, under the parameter gradients' 1e-5 (2731 tiles per program at 2^31 elements
# did not, NOTES.md v15). A program restarts its sums every LANE_RUN_TILES tiles and writes a partial row
# per run: one run per program up to 2^27 elements at the sm90 table's tiles.
LANE_RUN_TILES = 256
# Programs the interpreter pretends to have SMs for: small, so CPU runs stay quick.
INTERPRETER_SM_COUNT = 4

TANH_METHODS = {"poly_exp": 0, "libdevice": 1, "hw_approx": 2}  # the TANH constexpr of dyt.kernels
INTERPRETER_TANH_METHODS = {"poly_exp"}


@dataclasses.dataclass(frozen=True)
class Overrides:
    """Knobs, for tests and tools: force int64 offsets on small shapes, pick the tanh method, swap the
    table, shorten the backward's runs of tiles (so that small shapes cross run boundaries). Two take their
    defaults from the environment when dyt is imported: DYT_TANH and DYT_POISON_OUTPUTS."""

    int64: bool = False
    # The tanh method's name (TANH_METHODS); DYT_TANH is read once, here, like DYT_POISON_OUTPUTS below
    # (an environment lookup per call cost 0.5 us of host time per plan lookup, NOTES.md v27).
    tanh: str | None = os.environ.get("DYT_TANH") or None
    table: dict | None = None
    lane_run: int | None = None  # tiles per run of the backward's float32 sums (default LANE_RUN_TILES)
    # Fill every output and partial buffer with NaN before each launch, so an unwritten element shows.
    poison: bool = os.environ.get("DYT_POISON_OUTPUTS", "0") == "1"


_overrides = Overrides()


@contextlib.contextmanager
def overrides(**kwargs):
    """Temporarily change launch planning, e.g. ``with overrides(int64=True): ...``."""
    global _overrides
    saved = _overrides
    _overrides = dataclasses.replace(saved, **kwargs)
    try:
        yield _overrides
    finally:
        _overrides = saved


def current_overrides() -> Overrides:
    return _overrides


@dataclasses.dataclass(frozen=True)
class TilePlan:
    """What both kernels need: the tile, the 1-D grid, warps, offsets width and tanh method."""

    M: int
    N: int
    BLOCK_M: int
    BLOCK_N: int
    num_warps: int
    n_col_blocks: int
    grid: tuple[int]
    int64: bool
    tanh: int
    gamma_period: int  # 0, or the true width when rows were folded (M, N are then the folded view's)
    ragged: bool  # folded rows of which the last ends early (its columns masked by the element count)
    # Programmatic dependent launch (see supports_pdl): the forward and the backward's finish are launched so
    # that they may start while the kernel before them on the stream ends, and wait for it before their
    # first memory access; the backward's persistent main kernel lets its finish launch early.
    pdl: bool
    # The kernels compiled for this plan, filled by dyt.direct_launch; not part of what the plan is.
    launches: dict = dataclasses.field(default_factory=dict, compare=False, repr=False, kw_only=True)

    @property
    def path(self) -> str:
        return path_name(self.n_col_blocks)

    def replaced(self, **changes):
        """This plan with some fields changed and a launch cache of its own (dataclasses.replace would
        share `launches`, so a kernel compiled for one plan's constants would run for the other's)."""
        return dataclasses.replace(self, launches={}, **changes)

    @property
    def param_width(self) -> int:
        """The width of gamma, beta and their gradients (the caller's N)."""
        return self.gamma_period or self.N


@dataclasses.dataclass(frozen=True)
class FwdPlan(TilePlan):
    """One tile per program."""

    sign_select: bool  # how tanh takes its sign (dyt.kernels._tanh): the table entry's "sign"
    poly_terms: int  # tanh's polynomial (dyt.kernels._tanh): the table entry's "poly" (POLY_TERMS)


@dataclasses.dataclass(frozen=True)
class BwdPlan(TilePlan):
    """A persistent grid over row groups; partial sums reduced by a finishing launch."""

    n_groups: int  # row groups: rows of the (n_groups, N) partial buffers
    tiles_per_program: int
    strided: bool  # row order: a group's tiles strided by n_groups, or one contiguous run
    num_stages: int  # Triton's loop pipelining: tiles whose loads are in flight (1: none)
    finish_block_g: int
    finish_block_n: int
    finish_grid: tuple[int]
    lane_run: int  # tiles per run of a program's float32 sums (LANE_RUN_TILES): one partial row per run
    # Folded rows whose column blocks hold at most this many whole copies of the true width write them as
    # partial rows for the finish to add (the table entry's "copies_as_rows", default 0). On the H200,
    # adding 2 or 4 copies up after the loop made ptxas schedule the bf16 loop itself 3-6% slower, while
    # the float32 loop was faster with it (NOTES.md v18); with more copies the finish's rows cost more.
    copies_as_rows: int

    @property
    def runs(self) -> int:
        """Runs of lane_run tiles per program, each with its own partial rows."""
        return cdiv(self.tiles_per_program, self.lane_run)

    @property
    def n_dalpha_partials(self) -> int:
        return self.grid[0] * self.runs

    @property
    def copies_in_block(self) -> int:
        """With folded rows, the copies of the true width each column block holds and adds up itself
        (0: it writes its BLOCK_N column sums as they are, for the finish to add: where the copies are not
        whole, or at most copies_as_rows of them)."""
        whole = self.gamma_period and self.BLOCK_N % self.gamma_period == 0
        copies = self.BLOCK_N // self.gamma_period if whole else 0
        return copies if copies > self.copies_as_rows else 0

    @property
    def finish_rows(self) -> int:
        """Rows of the (finish_rows, param_width) partial buffers, per run of each program: one per row
        group; with folded rows added up in registers, one per program; with folded rows written as they
        are, one per row group and copy (a row group's N-wide partial row is N // gamma_period rows of the
        true width, the same memory)."""
        if self.copies_in_block:
            return self.grid[0] * self.runs
        return self.n_groups * self.runs * (self.N // self.gamma_period if self.gamma_period else 1)

    def partial_bytes(self) -> int:
        """Bytes the partial buffers cost: written once by the main kernel, read once by the finish."""
        return 2 * (4 * 2 * self.finish_rows * self.param_width + 8 * self.n_dalpha_partials)


def path_name(n_col_blocks: int) -> str:
    """'row_tiled': whole rows per tile (several when narrow); 'column_blocked': a row split in blocks."""
    return "row_tiled" if n_col_blocks == 1 else "column_blocked"


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def next_pow2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def dtype_bucket(itemsize: int) -> str:
    return "fp32" if itemsize >= 4 else "16bit"


@functools.cache
def load_table(arch: str) -> dict:
    """The committed table for an architecture ('sm90', ...), else the default one."""
    path = TABLES / f"{arch}.json"
    if not path.exists():
        path = TABLES / "default.json"
    return json.loads(path.read_text())


def _table(arch: str) -> dict:
    return _overrides.table if _overrides.table is not None else load_table(arch)


def table_entry(table: dict, mode: str, itemsize: int, width: int) -> dict:
    """First entry of the mode's dtype bucket whose max_width holds this width (null = any width)."""
    for entry in table[mode][dtype_bucket(itemsize)]:
        if entry["max_width"] is None or width <= entry["max_width"]:
            return entry
    raise LookupError(f"launch table has no {mode} entry for width {width}")


# A forward entry's "fp32_params": the tile fields (and "min_elements") that replace the entry's own where
# 16-bit x meets float32 gamma or beta on a problem of at least min_elements. Triton loads float32
# parameters 4 to a lane and moves them to the x tile's 8-per-lane layout through shared memory (barriers
# in every program); on the H200, 2x1024 tiles on 2 warps then ran 4-10% faster than the 16-bit entry's
# from 2^24 elements on and 6-12% slower below 2^24 (NOTES.md v21).
FP32_PARAMS = "fp32_params"
# A forward entry's "folded": likewise, the tile of rows folded from a narrower width (gamma indexed modulo
# that width, see fold_factor) from min_elements on. On the H200, folded 16-bit rows ran ~2% behind rows
# of the entry's own width with its 4x1024 tile and 1-1.5% faster with 2x1024 at 2^26 elements, within
# noise of it on small problems (NOTES.md v22). fp32_params comes first where both apply.
FOLDED = "folded"
# A forward entry's (or its variant's) "poly": the terms of tanh's polynomial near 0 (dyt.kernels._tanh). 3
# saves two FFMA per element; on the H200 that made 2048 columns (2x2048x8) 3-5% and the folded 2x1024x4
# tiles ~1% faster, 4x1024x4 at 1024 columns ~0.6% slower (NOTES.md v23). A variant tile without a "poly"
# of its own runs its entry's, and an entry without one the first of these.
POLY_TERMS = (5, 3)


def forward_entry(
    table: dict, itemsize: int, width: int, param_itemsize: int, n_elements: int, folded: bool = False
) -> dict:
    """The forward's table entry, with its fp32_params or folded tile where that applies (FP32_PARAMS,
    FOLDED); width is the width the kernel sees (the folded one for folded rows)."""
    entry = table_entry(table, "fwd", itemsize, width)
    for field, applies in ((FP32_PARAMS, itemsize < 4 <= param_itemsize), (FOLDED, folded)):
        variant = entry.get(field)
        if variant and applies and n_elements >= variant["min_elements"]:
            tile = {k: v for k, v in variant.items() if k != "min_elements"}
            return {k: v for k, v in entry.items() if k not in (FP32_PARAMS, FOLDED)} | tile
    return entry


# A width that would leave more than this fraction of a tile's columns idle (768 in 1024-wide blocks)
# is split into blocks of its largest power-of-two divisor instead, when that is at least MIN_SPLIT_BLOCK_N.
MAX_IDLE_COLUMNS = 1 / 8
MIN_SPLIT_BLOCK_N = 128


def tile_shape(entry: dict, width: int) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_N, n_col_blocks): narrow rows shrink BLOCK_N to the width and stack more rows;
    a width far from a power of two is cut into equal power-of-two blocks rather than padded."""
    tile = entry["BLOCK_M"] * entry["BLOCK_N"]
    block_n = min(entry["BLOCK_N"], next_pow2(width))
    idle = cdiv(width, block_n) * block_n - width
    divisor = width & -width  # the largest power of two that divides the width
    if idle > MAX_IDLE_COLUMNS * width and MIN_SPLIT_BLOCK_N <= divisor < block_n:
        block_n = divisor
    block_m = entry["BLOCK_M"] if block_n == entry["BLOCK_N"] else max(1, tile // block_n)
    return block_m, block_n, cdiv(width, block_n)


# Contiguous rows whose width is not a multiple of FOLD_WIDTH run as rows of a multiple of it (measured
# fastest on H200: NOTES.md v12, v14); gamma's runs of consecutive indices stay at least MIN_FOLD_RUN long.
FOLD_WIDTH = 1024
MIN_FOLD_RUN = 128
# The last folded row may end early, its columns masked at n_elements - (M - 1) N: Triton specializes the
# element count on divisibility by 16, and only then keeps those masked accesses 16 bytes wide.
FOLD_ELEMENT_MULTIPLE = 16


def fold_factor(M: int, N: int, row_strides: tuple[int, ...], powers_of_two_only: bool = False) -> int:
    """How many rows to fold into one: F = FOLD_WIDTH // gcd(N, FOLD_WIDTH), so that N * F is a multiple of
    FOLD_WIDTH, where every tensor's rows are contiguous (stride N), M * N is a multiple of
    FOLD_ELEMENT_MULTIPLE, and N is either a power of two below FOLD_WIDTH (64 -> 16 rows in 1024) or, unless
    powers_of_two_only, a multiple of MIN_FOLD_RUN (768 -> 4 rows in 3072); else 1. The kernels then see
    cdiv(M, F) rows of N * F (the last one possibly in part) and index gamma and beta modulo N (their
    GAMMA_PERIOD)."""
    if N % FOLD_WIDTH == 0 or any(s != N for s in row_strides) or (M * N) % FOLD_ELEMENT_MULTIPLE:
        return 1
    run = math.gcd(N, FOLD_WIDTH)
    if run != N and (powers_of_two_only or run < MIN_FOLD_RUN):
        return 1
    return FOLD_WIDTH // run


def needs_int64(M: int, N: int, row_strides: tuple[int, ...], block_m: int) -> bool:
    """int64 offsets once any address a program may form (padded last tile included) can pass 2^31."""
    rows_padded = cdiv(max(M, 1), block_m) * block_m
    worst = max((rows_padded - 1) * abs(s) for s in row_strides) + next_pow2(N)
    return worst > INT32_LIMIT or _overrides.int64


def tanh_method(interpreter: bool) -> int:
    """The tanh choice; the interpreter has no libdevice or inline PTX, so it always takes poly_exp."""
    name = _overrides.tanh or "poly_exp"
    if name not in TANH_METHODS:
        raise ValueError(f"the tanh method (DYT_TANH) must be one of {sorted(TANH_METHODS)}, got {name!r}")
    if interpreter and name not in INTERPRETER_TANH_METHODS:
        name = "poly_exp"
    return TANH_METHODS[name]


def _folded(
    M, N, row_strides, mode, itemsize, arch, param_itemsize=0
) -> tuple[int, int, tuple[int, ...], int, bool]:
    """(M, N, row_strides, gamma_period, ragged) of the view the kernels see (see fold_factor): folded
    where the wide rows' column blocks either each hold whole copies of the true width (the backward adds
    them up in registers or writes them as rows, see BwdPlan.copies_in_block) or tile the wide row exactly
    (its partial rows are then copies to add up).
    ragged: the element count is not a multiple of the wide rows' width (87381 x 768 in rows of 3072).
    The forward folds power-of-two widths only: on the H200, 768 in rows of 3072 against 256-column blocks
    took 64.9 against 65.7 us at 87381 rows (bf16), but 40.3 against 38.5 at 50432, 5.6 against 5.2 at
    6304, and 44.9 against 38.8 with float32 parameters (NOTES.md v20); the backward gains (0.876 -> 0.909,
    v14)."""
    fold = fold_factor(M, N, row_strides, powers_of_two_only=mode == "fwd")
    if fold > 1:
        wide = N * fold
        if mode == "fwd":
            entry = forward_entry(_table(arch), itemsize, wide, param_itemsize, M * N, folded=True)
        else:
            entry = table_entry(_table(arch), mode, itemsize, wide)
        block_n = tile_shape(entry, wide)[1]
        if block_n % N == 0 or wide % block_n == 0:
            return cdiv(M * N, wide), wide, tuple(wide for _ in row_strides), N, (M * N) % wide != 0
    return M, N, row_strides, 0, False


def _tile_fields(
    entry, M, N, row_strides, arch, interpreter, tile, n_row_programs, gamma_period, ragged
) -> dict:
    """The TilePlan fields both plans share, with the grid checked against CUDA's axis-0 limit."""
    block_m, block_n, n_col_blocks = tile
    n_programs = n_row_programs * n_col_blocks
    if n_programs > GRID_X_LIMIT:
        raise ValueError(f"{M} x {N} needs {n_programs} programs, over the grid limit {GRID_X_LIMIT}")
    return dict(M=M, N=N, BLOCK_M=block_m, BLOCK_N=block_n, num_warps=entry["num_warps"],
                n_col_blocks=n_col_blocks, grid=(n_programs,), int64=needs_int64(M, N, row_strides, block_m),
                tanh=tanh_method(interpreter), gamma_period=gamma_period, ragged=ragged,
                pdl=supports_pdl(arch) and not interpreter)  # fmt: skip


def plan_forward(
    M, N, itemsize, row_strides, *, param_itemsize=None, arch="default", interpreter=False
) -> FwdPlan:
    """One program per tile. param_itemsize: the widest of gamma's and beta's element sizes (default:
    x's), which picks an entry's fp32_params tile (see FP32_PARAMS); folded rows may take its folded tile
    (FOLDED)."""
    param_itemsize = param_itemsize or itemsize
    n_elements = M * N
    M, N, row_strides, period, ragged = _folded(M, N, row_strides, "fwd", itemsize, arch, param_itemsize)
    entry = forward_entry(_table(arch), itemsize, N, param_itemsize, n_elements, folded=period > 0)
    tile = tile_shape(entry, N)
    fields = _tile_fields(entry, M, N, row_strides, arch, interpreter, tile, cdiv(M, tile[0]), period, ragged)
    poly = entry.get("poly", POLY_TERMS[0])
    if poly not in POLY_TERMS:
        raise ValueError(f"launch table: a forward entry's poly must be one of {POLY_TERMS}, got {poly!r}")
    return FwdPlan(**fields, sign_select=entry.get("sign", "select") == "select", poly_terms=poly)


def plan_backward(M, N, itemsize, row_strides, *, sm_count, arch="default", interpreter=False) -> BwdPlan:
    """A persistent grid: about programs_per_sm x SM count programs, each over a run of row tiles.

    Folded rows whose column blocks do not hold whole copies of the true width (768 in rows of 3072)
    write N // gamma_period times more partials per program; where the partial budget then allows fewer
    programs than the rows unfolded get (50432 x 768 bf16: 255 against 396, measured 4% slower, NOTES.md
    v14), they stay unfolded."""
    folded = _folded(M, N, row_strides, "bwd", itemsize, arch)
    plan = _plan_backward_view(*folded, itemsize, sm_count, arch, interpreter)
    if plan.gamma_period and plan.BLOCK_N % plan.gamma_period:
        unfolded = _plan_backward_view(M, N, row_strides, 0, False, itemsize, sm_count, arch, interpreter)
        if unfolded.grid[0] > plan.grid[0]:
            return unfolded
    return plan


def _plan_backward_view(M, N, row_strides, period, ragged, itemsize, sm_count, arch, interpreter) -> BwdPlan:
    entry = table_entry(_table(arch), "bwd", itemsize, N)
    tile = tile_shape(entry, N)
    n_tiles = max(1, cdiv(M, tile[0]))
    # Each row group writes and the finish kernel reads 2 x N float32 partials: cap the groups so that
    # this stays under the budget (3 * M * N * itemsize bytes of main traffic).
    budget_groups = int(PARTIAL_TRAFFIC_BUDGET * 3 * M * itemsize / 16)
    # The budget binds at bandwidth shapes; a small problem still gets one program per SM (2048 x 4096 bf16
    # would otherwise run 52 programs on 132 SMs), its partials being cheap in time if not in ratio.
    floor_groups = cdiv(sm_count, tile[2])
    wanted = (entry["programs_per_sm"] * sm_count) // tile[2]
    target_groups = max(1, min(wanted, max(budget_groups, floor_groups), n_tiles))
    tiles_per_program = cdiv(n_tiles, target_groups)
    n_groups = cdiv(n_tiles, tiles_per_program)
    finish_g, finish_n = finish_tile(period or N, sm_count)
    return BwdPlan(
        **_tile_fields(entry, M, N, row_strides, arch, interpreter, tile, n_groups, period, ragged),
        n_groups=n_groups,
        tiles_per_program=tiles_per_program,
        strided=entry.get("row_order", "chunked") == "strided",
        num_stages=entry["num_stages"],
        finish_block_g=finish_g,
        finish_block_n=finish_n,
        finish_grid=finish_grid(period or N, finish_n),
        lane_run=_overrides.lane_run or LANE_RUN_TILES,
        copies_as_rows=entry.get("copies_as_rows", 0),
    )


def supports_pdl(arch: str) -> bool:
    """Programmatic dependent launch (griddepcontrol) exists from sm_90 (Hopper) on."""
    digits = arch[2:] if arch.startswith("sm") else ""
    return digits.isdigit() and int(digits) >= 90


def finish_grid(N: int, block_n: int) -> tuple[int]:
    """One program per column block of dgamma and dbeta, and one more for dalpha."""
    return (cdiv(N, block_n) + 1,)


def finish_tile(N: int, sm_count: int) -> tuple[int, int]:
    """(BLOCK_G, BLOCK_N) of the finishing reduction. Its programs split the columns only, so narrow
    blocks give it enough programs to spread the partial read over the SMs (one 256-column program per
    1024-wide row read all 400 partial rows alone, ~40 us, before this); FINISH_TILE // BLOCK_N groups per
    step keep its loop short."""
    block_n = min(max(next_pow2(cdiv(N, sm_count)), FINISH_MIN_BLOCK_N), FINISH_MAX_BLOCK_N)
    return FINISH_TILE // block_n, block_n
