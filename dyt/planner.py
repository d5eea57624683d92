"""Launch planning: a problem's shape -> a frozen plan holding every argument and constant of its kernels.

Pure Python (no Triton, no CUDA), so that every decision is unit-testable on any machine. The tile
choice is data: a committed table per GPU architecture (dyt/tables/<arch>.json, written by
`python -m dyt tune`), loaded once into typed records (dyt.launch_table: LaunchTable, ForwardEntry,
BackwardEntry) and looked up by dtype bucket and width bucket; a forward entry may name other tiles for
float32 parameters on 16-bit x, for folded rows and for channels-first rows (FP32_PARAMS, FOLDED,
CHANNELS_FIRST) and tanh's polynomial (POLY_TERMS). Nothing here times anything, so two processes on the
same GPU always choose the same kernels and get the same bits.

One entry per direction: plan_forward and plan_backward. Each returns a plan whose KernelLaunch fields
(grid, the integer arguments after the tensors, the compile-time constants in parameter order, warps,
PDL) are exactly what dyt.launcher hands to the kernels; the launcher allocates and binds tensors and
decides nothing. What tests and tools may change (Overrides) is an argument, never a global read here.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import pathlib

from dyt import launch_table
from dyt.launch_table import BackwardEntry, BackwardTile, ForwardEntry, ForwardTile, LaunchTable

# The table's names that plans speak of (dyt.launch_table): tanh's polynomials and the variant tiles.
POLY_TERMS = launch_table.POLY_TERMS
FP32_PARAMS, FOLDED, CHANNELS_FIRST = (
    launch_table.FP32_PARAMS,
    launch_table.FOLDED,
    launch_table.CHANNELS_FIRST,
)
VARIANTS = launch_table.VARIANTS

TABLES = pathlib.Path(__file__).parent / "tables"
INT32_LIMIT = 2**31 - 1
# CUDA's limit on grid axis 0 (axes 1 and 2 hold only 65,535, which is why nothing goes there).
GRID_X_LIMIT = 2**31 - 1
# The finishing reduction: each program adds the (finish rows, BLOCK_N) partials of its columns,
# FINISH_TILE of them per step, so that few dependent steps are needed (see finish_tile).
FINISH_TILE = 16384
FINISH_MIN_BLOCK_N = 16  # 64-byte float32 row segments: two 32-byte sectors, no waste
FINISH_MAX_BLOCK_N = 256
FINISH_NUM_WARPS = 8
# A backward program takes at least this many row tiles where the problem has more than one tile per SM:
# programs of one tile measured slower on the smallest problems (docs/kernels.md, "Backward main kernel").
MIN_TILES_PER_PROGRAM = 2
# Each lane of a backward program adds one float32 term per tile. Each addition rounds by at most 2^-24 of
# the running sum, so n terms of one sign add up to at most (n + 1) / 2 * 2^-24 of the total: runs of 256
# tiles keep that at 7.7e-6, under the parameter gradients' 1e-5. A program restarts its sums every
# LANE_RUN_TILES tiles and writes a partial row per run (docs/kernels.md, "Backward main kernel").
LANE_RUN_TILES = 256
# Programs the interpreter pretends to have SMs for: small, so CPU runs stay quick.
INTERPRETER_SM_COUNT = 4

TANH_METHODS = {"poly_exp": 0, "libdevice": 1, "hw_approx": 2}  # the TANH constexpr of dyt.kernels
INTERPRETER_TANH_METHODS = {"poly_exp"}


@dataclasses.dataclass(frozen=True)
class Overrides:
    """Knobs for tests and tools: force int64 offsets on small shapes, pick the tanh method by name
    (TANH_METHODS; None: the default), swap the table (a LaunchTable), shorten the backward's runs of tiles
    (so that small shapes cross run boundaries), and fill every output and partial buffer with NaN before
    each launch (poison: an unwritten element shows). dyt.launcher holds the process's current set."""

    int64: bool = False
    tanh: str | None = None
    table: LaunchTable | None = None
    lane_run: int | None = None  # tiles per run of the backward's float32 sums (default LANE_RUN_TILES)
    poison: bool = False

    def __post_init__(self):
        if self.table is not None and not isinstance(self.table, LaunchTable):
            got = type(self.table).__name__
            raise TypeError(
                f"Overrides.table takes a LaunchTable (LaunchTable.from_dict builds one), got {got}"
            )


DEFAULTS = Overrides()


@dataclasses.dataclass(frozen=True)
class Target:
    """The device a plan is for: its table's architecture key ('sm90', ...), its SM count, and whether the
    kernels run in Triton's interpreter (no PTX there: no PDL, no approximate MUFU instructions)."""

    arch: str = "default"
    sm_count: int = INTERPRETER_SM_COUNT
    interpreter: bool = False
    allow_pdl: bool = True  # False plans every launch without PDL (tools compare the two)

    @property
    def pdl(self) -> bool:
        """Whether plans use programmatic dependent launch (griddepcontrol): from sm_90 (Hopper) on."""
        return self.allow_pdl and supports_pdl(self.arch) and not self.interpreter


def supports_pdl(arch: str) -> bool:
    """Programmatic dependent launch exists from sm_90 (Hopper) on."""
    digits = arch[2:] if arch.startswith("sm") else ""
    return digits.isdigit() and int(digits) >= 90


@dataclasses.dataclass(frozen=True)
class KernelLaunch:
    """One kernel launch, all but its tensors: the 1-D grid, the integer arguments that follow the tensors,
    the compile-time constants as (name, value) pairs in the kernel's parameter order, warps, and whether
    it is launched by programmatic dependent launch. Hashable by value (the compiled-launch cache of
    dyt.direct_launch is keyed by it), its hash computed once."""

    grid: tuple[int]
    scalars: tuple[int, ...]
    constexprs: tuple[tuple[str, object], ...]
    num_warps: int
    pdl: bool = False
    _hash: int = dataclasses.field(init=False, compare=False, repr=False)

    def __post_init__(self):
        fields = (self.grid, self.scalars, self.constexprs, self.num_warps, self.pdl)
        object.__setattr__(self, "_hash", hash(fields))

    def __hash__(self) -> int:
        return self._hash


@dataclasses.dataclass(frozen=True)
class TilePlan:
    """What both directions share: the view the kernels see (M x N, folded or not), its tile, grid size,
    offsets width, tanh method, and whether the kernels overlap their neighbours by PDL."""

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
    gamma_span: int  # 0, or channels-first rows' spatial size L: column j takes parameter j // L
    ragged: bool  # folded rows of which the last ends early (its columns masked by the element count)
    n_elements: int  # the element count the kernels mask the last folded row by (0 where not ragged)
    pdl: bool
    poly_terms: int  # tanh's polynomial (dyt.kernels._tanh, _tanh_sech2): the table entry's poly

    @property
    def path(self) -> str:
        return path_name(self.n_col_blocks)

    @property
    def param_width(self) -> int:
        """The width of gamma, beta and their gradients (the caller's N; channels-first, its C)."""
        return (self.gamma_period or self.N) // max(self.gamma_span, 1)


@dataclasses.dataclass(frozen=True)
class FwdPlan(TilePlan):
    """One tile per program; `kernel` is the launch of dyt_fwd_kernel."""

    sign_select: bool  # how tanh takes its sign (dyt.kernels._tanh): the table entry's sign
    kernel: KernelLaunch


@dataclasses.dataclass(frozen=True)
class BwdPlan(TilePlan):
    """A persistent grid over row groups (`main`, dyt_bwd_kernel), its partial sums reduced by a finishing
    launch (`finish`: dyt_bwd_finish_kernel, or dyt_bwd_cf_finish_kernel for channels-first rows)."""

    n_groups: int  # row groups: rows of the (n_groups, N) partial buffers
    tiles_per_program: int
    strided: bool  # row order: a group's tiles strided by n_groups, or one contiguous run
    num_stages: int  # Triton's loop pipelining: tiles whose loads are in flight (1: none)
    finish_block_g: int
    finish_block_n: int
    finish_grid: tuple[int]
    lane_run: int  # tiles per run of a program's float32 sums (LANE_RUN_TILES): one partial row per run
    # Folded rows whose column blocks hold at most this many whole copies of the true width write them as
    # partial rows for the finish to add (the table entry's copies_as_rows): adding few copies
    # after the loop can slow the loop itself (docs/kernels.md, "Folded rows").
    copies_as_rows: int
    copies_in_block: int  # see fold_copies_in_block
    finish_rows: int  # rows of the (finish_rows, partial_width) float32 partial buffers
    n_dalpha_partials: int  # float64 partials of dalpha: one per run of each program
    channel_slots: int  # channels-first rows: per-channel sums each column block writes (else 0)
    main: KernelLaunch
    finish: KernelLaunch

    @property
    def runs(self) -> int:
        """Runs of lane_run tiles per program, each with its own partial rows."""
        return cdiv(self.tiles_per_program, self.lane_run)

    @property
    def partial_width(self) -> int:
        """Columns of the partial buffers: param_width, or channels-first, each column block's slots."""
        return self.n_col_blocks * self.channel_slots if self.gamma_span else self.param_width

    def partial_bytes(self) -> int:
        """Bytes the partial buffers cost: written once by the main kernel, read once by the finish."""
        return 2 * (4 * 2 * self.finish_rows * self.partial_width + 8 * self.n_dalpha_partials)


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
def load_table(arch: str) -> LaunchTable:
    """The committed table for an architecture ('sm90', ...), else the default one, as typed records
    (dyt.launch_table), checked once: one immutable table per process, shared by every plan."""
    path = TABLES / f"{arch}.json"
    if not path.exists():
        path = TABLES / "default.json"
    data = json.loads(path.read_text())
    return LaunchTable.from_dict(data, where=f"dyt/tables/{path.name}")


def table_of(target: Target, overrides: Overrides) -> LaunchTable:
    """The table plans read: the overrides' swapped one, else the target's committed one."""
    return overrides.table if overrides.table is not None else load_table(target.arch)


def table_entry(table: LaunchTable, mode: str, itemsize: int, width: int) -> ForwardEntry | BackwardEntry:
    """First entry of the mode's dtype bucket whose max_width holds this width (None = any width)."""
    return table.entry(mode, dtype_bucket(itemsize), width)


def channels_first_variant(
    entry: ForwardEntry | BackwardEntry, span: int
) -> ForwardTile | BackwardTile | None:
    """The entry's channels_first tile for rows of this spatial size (CHANNELS_FIRST), or None."""
    return entry.channels_first_choice(span)


# An entry's (or its variant's) poly, forward or backward: the terms of tanh's polynomial near 0
# (dyt.kernels._tanh, _tanh_sech2; POLY_TERMS); 3 saves two FFMA per element. A variant tile without a poly
# of its own runs its entry's, and an entry without one in its file the first of POLY_TERMS.
# tanh takes its polynomial below |z| = the limit of the polynomial with that many terms, and
# 1 - 2 / (exp(2|z|) + 1) (the backward: 1 - h sech(z), h = exp(-|z|)) from there on (dyt.torch_path
# switches its sech^2 formula at the 5-term limit).
POLY_LIMITS = {5: 0.6, 3: 0.4}


def forward_entry(
    table: LaunchTable,
    itemsize: int,
    width: int,
    param_itemsize: int,
    n_elements: int,
    folded: bool = False,
    span: int = 0,
) -> ForwardEntry:
    """The forward's table entry, running its channels_first (rows of spatial size span > 0), fp32_params or
    folded tile where that applies (CHANNELS_FIRST, FP32_PARAMS, FOLDED: the first that applies, a tile
    that names no field passing to the next); width is the width the kernel sees (the folded one for
    folded rows)."""
    entry = table_entry(table, "fwd", itemsize, width)
    choices = (
        (entry.channels_first_choice(span), True),
        (entry.fp32_params, itemsize < 4 <= param_itemsize),
        (entry.folded, folded),
    )
    for variant, applies in choices:
        if variant is not None and not variant.empty and applies and n_elements >= variant.min_elements:
            return entry.with_tile(variant)
    return entry


# A width that would leave more than this fraction of a tile's columns idle (768 in 1024-wide blocks)
# is split into blocks of its largest power-of-two divisor instead, when that is at least MIN_SPLIT_BLOCK_N.
MAX_IDLE_COLUMNS = 1 / 8
MIN_SPLIT_BLOCK_N = 128


def tile_shape(entry: ForwardEntry | BackwardEntry, width: int) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_N, n_col_blocks): narrow rows shrink BLOCK_N to the width and stack more rows;
    a width far from a power of two is cut into equal power-of-two blocks rather than padded."""
    tile = entry.BLOCK_M * entry.BLOCK_N
    block_n = min(entry.BLOCK_N, next_pow2(width))
    idle = cdiv(width, block_n) * block_n - width
    divisor = width & -width  # the largest power of two that divides the width
    if idle > MAX_IDLE_COLUMNS * width and MIN_SPLIT_BLOCK_N <= divisor < block_n:
        block_n = divisor
    block_m = entry.BLOCK_M if block_n == entry.BLOCK_N else max(1, tile // block_n)
    return block_m, block_n, cdiv(width, block_n)


# Contiguous rows whose width is not a multiple of FOLD_WIDTH run as rows of a multiple of it (faster on the
# H200: docs/kernels.md, "Folded rows"); gamma's runs of consecutive indices stay at least MIN_FOLD_RUN.
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


def needs_int64(M: int, N: int, row_strides: tuple[int, ...], block_m: int, force: bool = False) -> bool:
    """int64 offsets once any address a program may form (padded last tile included) can pass 2^31."""
    rows_padded = cdiv(max(M, 1), block_m) * block_m
    worst = max((rows_padded - 1) * abs(s) for s in row_strides) + next_pow2(N)
    return worst > INT32_LIMIT or force


def tanh_method(overrides: Overrides, interpreter: bool) -> int:
    """The tanh choice; the interpreter has no libdevice or inline PTX, so it always takes poly_exp."""
    name = overrides.tanh or "poly_exp"
    if name not in TANH_METHODS:
        raise ValueError(f"the tanh method (DYT_TANH) must be one of {sorted(TANH_METHODS)}, got {name!r}")
    if interpreter and name not in INTERPRETER_TANH_METHODS:
        name = "poly_exp"
    return TANH_METHODS[name]


@dataclasses.dataclass(frozen=True)
class _View:
    """The (M, N) view the kernels see and each tensor's row stride in it; folded rows have
    gamma_period = the true width, and ragged when their last row ends early."""

    M: int
    N: int
    row_strides: tuple[int, ...]
    gamma_period: int = 0
    ragged: bool = False
    n_elements: int = 0  # with ragged rows, the true element count (it bounds the last row); else 0
    gamma_span: int = 0  # channels-first rows: their spatial size (TilePlan.gamma_span)


def _folded_view(M: int, N: int, row_strides: tuple[int, ...], fold: int, gamma_span: int = 0) -> _View:
    """fold rows of N as one row of N * fold (see fold_factor): every stride is the wide row's width."""
    wide = N * fold
    ragged = (M * N) % wide != 0
    strides = tuple(wide for _ in row_strides)
    return _View(cdiv(M * N, wide), wide, strides, N, ragged, M * N if ragged else 0, gamma_span)


def _tile_fields(entry, view: _View, tile, n_row_programs, target: Target, overrides: Overrides) -> dict:
    """The TilePlan fields both plans share, with the grid checked against CUDA's axis-0 limit."""
    block_m, block_n, n_col_blocks = tile
    n_programs = n_row_programs * n_col_blocks
    if n_programs > GRID_X_LIMIT:
        raise ValueError(
            f"{view.M} x {view.N} needs {n_programs} programs, over the grid limit {GRID_X_LIMIT}"
        )
    return dict(M=view.M, N=view.N, BLOCK_M=block_m, BLOCK_N=block_n, num_warps=entry.num_warps,
                n_col_blocks=n_col_blocks, grid=(n_programs,),
                int64=needs_int64(view.M, view.N, view.row_strides, block_m, overrides.int64),
                tanh=tanh_method(overrides, target.interpreter), gamma_period=view.gamma_period,
                gamma_span=view.gamma_span, ragged=view.ragged, n_elements=view.n_elements,
                pdl=target.pdl, poly_terms=entry.poly)  # fmt: skip


def plan_forward(
    M: int,
    N: int,
    itemsize: int,
    *,
    x_stride: int | None = None,
    param_itemsize: int | None = None,
    has_beta: bool = True,
    channel_span: int = 0,
    target: Target = Target(),
    overrides: Overrides = DEFAULTS,
    fold: bool = True,
) -> FwdPlan:
    """The forward of x (M, N) with row stride x_stride (default N: contiguous) into a contiguous y.
    channel_span L > 1: the rows are a channels-first tensor's (N = C * L), column j taking gamma[j // L].

    One program per tile. param_itemsize: the widest of gamma's and beta's element sizes (default: x's),
    which picks an entry's fp32_params tile (FP32_PARAMS); folded rows may take its folded tile (FOLDED).
    The forward folds power-of-two widths only (768 folded measured slower than unfolded in the forward,
    docs/kernels.md, "Folded rows"). fold=False keeps rows as they are (plan_forward_fp8's rowwise
    scales are per row)."""
    x_stride = N if x_stride is None else x_stride
    param_itemsize = param_itemsize or itemsize
    table = table_of(target, overrides)
    span = _span(channel_span, N)
    view = _View(M, N, (x_stride, N), gamma_span=span)
    entry = forward_entry(table, itemsize, N, param_itemsize, M * N, span=span)
    factor = fold_factor(M, N, view.row_strides, powers_of_two_only=True) if fold else 1
    if factor > 1:
        wide = _folded_view(M, N, view.row_strides, factor, span)
        wide_entry = forward_entry(table, itemsize, wide.N, param_itemsize, M * N, folded=True,
                                   span=span)  # fmt: skip
        block_n = tile_shape(wide_entry, wide.N)[1]
        if block_n % N == 0 or wide.N % block_n == 0:
            view, entry = wide, wide_entry
    tile = tile_shape(entry, view.N)
    fields = _tile_fields(entry, view, tile, cdiv(view.M, tile[0]), target, overrides)
    poly = fields["poly_terms"]
    sign_select = entry.sign == "select"
    constexprs = (
        ("HAS_BETA", has_beta), ("BLOCK_M", tile[0]), ("BLOCK_N", tile[1]), ("N_COL_BLOCKS", tile[2]),
        ("INT64", fields["int64"]), ("TANH", fields["tanh"]), ("APPROX", not target.interpreter),
        ("GAMMA_PERIOD", view.gamma_period), ("GAMMA_SPAN", view.gamma_span), ("RAGGED", view.ragged),
        ("SIGN_SELECT", sign_select), ("PDL", target.pdl), ("POLY_TERMS", poly),
    )  # fmt: skip
    kernel = KernelLaunch(
        grid=fields["grid"],
        scalars=(view.M, view.N, view.n_elements, *view.row_strides),
        constexprs=constexprs,
        num_warps=entry.num_warps,
        pdl=target.pdl,
    )
    return FwdPlan(**fields, sign_select=sign_select, kernel=kernel)


# The largest finite value of each float8 format dyt writes (dyt.fp8.FORMATS), by torch dtype name.
FP8_MAX = {"float8_e4m3fn": 448.0, "float8_e5m2": 57344.0}
FP8_SCALE_BLOCK = 1024  # dyt_fp8_scale_kernel's columns per step: one program reads gamma and beta once


def plan_forward_fp8(M: int, N: int, itemsize: int, fp8: str, *, rowwise: bool = False, **forward) -> FwdPlan:
    """dyt_fwd_fp8_kernel's launch for y in the float8 format fp8 (a key of FP8_MAX); forward: the
    arguments of plan_forward. Tensorwise: plan_forward's tiles and grid, the kernel reading one scale.
    Rowwise: plan_forward's tile for unfolded rows, one program per row tile (it covers every column
    block), so that a program sees each of its rows whole. Either way the constants are
    dyt_fwd_kernel's, then ROWWISE and FP8_MAX."""
    plan = plan_forward(M, N, itemsize, fold=not rowwise, **forward)
    grid = (cdiv(plan.M, plan.BLOCK_M),) if rowwise else plan.kernel.grid
    constexprs = (*plan.kernel.constexprs, ("ROWWISE", rowwise), ("FP8_MAX", FP8_MAX[fp8]))
    return dataclasses.replace(
        plan, grid=grid, kernel=dataclasses.replace(plan.kernel, grid=grid, constexprs=constexprs)
    )


def plan_fp8_scale(C: int, has_beta: bool, fp8: str, target: Target = Target()) -> KernelLaunch:
    """dyt_fp8_scale_kernel's launch: one program over C parameters."""
    block = min(FP8_SCALE_BLOCK, next_pow2(C))
    constexprs = (("HAS_BETA", has_beta), ("FP8_MAX", FP8_MAX[fp8]), ("BLOCK", block),
                  ("APPROX", not target.interpreter), ("PDL", target.pdl))  # fmt: skip
    return KernelLaunch(grid=(1,), scalars=(C,), constexprs=constexprs, num_warps=4, pdl=target.pdl)


def plan_backward(
    M: int,
    N: int,
    itemsize: int,
    *,
    x_stride: int | None = None,
    dy_stride: int | None = None,
    channel_span: int = 0,
    target: Target = Target(),
    overrides: Overrides = DEFAULTS,
) -> BwdPlan:
    """The backward of x and dy (M, N), row strides x_stride and dy_stride (default N: contiguous), into a
    contiguous dx; itemsize is the wider of x's and dy's element sizes.

    A persistent grid: about programs_per_sm x SM count programs, each over a run of row tiles. Contiguous
    rows fold like the forward's, 768 into 3072 too; where the wide rows' column blocks do not hold whole
    copies of the true width (768 in rows of 3072), a program writes N // gamma_period times more partials,
    and where the rows unfolded get more programs, they stay unfolded (docs/kernels.md, "Folded rows").
    channel_span L > 1: channels-first rows, as plan_forward's; they do not fold, and their column blocks
    write per-channel sums (CHANNEL_SLOTS)."""
    row_strides = (N if x_stride is None else x_stride, N if dy_stride is None else dy_stride, N)
    table = table_of(target, overrides)
    span = _span(channel_span, N)
    view = _View(M, N, row_strides, gamma_span=span)
    fold = 1 if span else fold_factor(M, N, row_strides)
    if fold > 1:
        wide = _folded_view(M, N, row_strides, fold)
        block_n = tile_shape(table_entry(table, "bwd", itemsize, wide.N), wide.N)[1]
        if block_n % N == 0 or wide.N % block_n == 0:
            folded = _plan_backward_view(table, wide, itemsize, target, overrides)
            if folded.BLOCK_N % N == 0:
                return folded
            unfolded = _plan_backward_view(table, view, itemsize, target, overrides)
            return unfolded if unfolded.grid[0] > folded.grid[0] else folded
    return _plan_backward_view(table, view, itemsize, target, overrides)


def _span(channel_span: int, N: int) -> int:
    """The plans' gamma_span: channel_span past 1 (spatial size 1 is plain rows), which must divide N."""
    if channel_span > 1 and N % channel_span:
        raise ValueError(f"channels-first rows of {N} columns do not hold whole channels of {channel_span}")
    return channel_span if channel_span > 1 else 0


# A channels-first column block adds up its columns per channel in a (CHANNEL_SLOTS, BLOCK_N) select after
# its loop (dyt.kernels._store_run_partials): BLOCK_N is halved, and BLOCK_M doubled, until that select
# holds at most CF_SLOT_TILE elements (docs/kernels.md, "Channels-first").
CF_SLOT_TILE = 4096
CF_MIN_BLOCK_N = 16


def channel_slots(block_n: int, span: int) -> int:
    """Slots for the channels that block_n consecutive columns of span-wide channels can touch."""
    return next_pow2((block_n - 1) // span + 2)


@functools.lru_cache(maxsize=1024)
def _channels_first_entry(entry: BackwardEntry, span: int) -> BackwardEntry:
    """The backward entry running its channels_first tile (CHANNELS_FIRST), BLOCK_N cut to CF_SLOT_TILE."""
    variant = entry.channels_first_choice(span)
    if variant is not None:
        entry = entry.with_tile(variant)
    tile = entry.BLOCK_M * entry.BLOCK_N
    block_n = entry.BLOCK_N
    while block_n > CF_MIN_BLOCK_N and channel_slots(block_n, span) * block_n > CF_SLOT_TILE:
        block_n //= 2
    return dataclasses.replace(entry, BLOCK_N=block_n, BLOCK_M=max(1, tile // block_n))


def fold_copies_in_block(block_n: int, gamma_period: int, copies_as_rows: int) -> int:
    """With folded rows, the copies of the true width each column block holds and adds up itself (0: it
    writes its BLOCK_N column sums as they are, for the finish to add: where the copies are not whole, or
    at most copies_as_rows of them)."""
    whole = gamma_period and block_n % gamma_period == 0
    copies = block_n // gamma_period if whole else 0
    return copies if copies > copies_as_rows else 0


def _plan_backward_view(
    table: LaunchTable, view: _View, itemsize: int, target: Target, overrides: Overrides
) -> BwdPlan:
    M, N, period, span = view.M, view.N, view.gamma_period, view.gamma_span
    entry = table_entry(table, "bwd", itemsize, N)
    if span:
        entry = _channels_first_entry(entry, span)
    tile = tile_shape(entry, N)
    slots = channel_slots(tile[1], span) if span else 0
    n_tiles = max(1, cdiv(M, tile[0]))
    # The table's programs per SM. Plain rows take fewer where programs would run under
    # MIN_TILES_PER_PROGRAM tiles, but one per SM where the tiles allow (4096 x 64 bf16 would otherwise run
    # 32 programs on 132 SMs); channels-first grids stay the table's (tune --channels-first chose them).
    wanted = (entry.programs_per_sm * target.sm_count) // tile[2]
    if not span:
        wanted = min(wanted, max(cdiv(n_tiles, MIN_TILES_PER_PROGRAM), cdiv(target.sm_count, tile[2])))
    target_groups = max(1, min(wanted, n_tiles))
    tiles_per_program = cdiv(n_tiles, target_groups)
    n_groups = cdiv(n_tiles, tiles_per_program)
    fields = _tile_fields(entry, view, tile, n_groups, target, overrides)
    lane_run = overrides.lane_run or LANE_RUN_TILES
    runs = cdiv(tiles_per_program, lane_run)
    n_programs = fields["grid"][0]
    copies_as_rows = entry.copies_as_rows
    copies_in_block = fold_copies_in_block(tile[1], period, copies_as_rows)
    # Rows of the partial buffers, per run of each program: one per row group; with folded rows added up
    # in registers, one per program; with folded rows written as they are, one per row group and copy (a
    # row group's N-wide partial row is N // gamma_period rows of the true width, the same memory).
    if copies_in_block:
        finish_rows = n_programs * runs
    else:
        finish_rows = n_groups * runs * (N // period if period else 1)
    n_dalpha_partials = n_programs * runs
    param_width = (period or N) // max(span, 1)
    finish_g, finish_n = finish_tile(param_width, target.sm_count)
    strided = entry.row_order == "strided"
    main = KernelLaunch(
        grid=fields["grid"],
        scalars=(M, N, view.n_elements, *view.row_strides, tile[2], n_groups, tiles_per_program),
        constexprs=(
            ("BLOCK_M", tile[0]),
            ("BLOCK_N", tile[1]),
            ("INT64", fields["int64"]),
            ("TANH", fields["tanh"]),
            ("APPROX", not target.interpreter),
            ("STRIDED", strided),
            ("NUM_STAGES", entry.num_stages),
            ("EVEN_N", N % tile[1] == 0),
            ("GAMMA_PERIOD", period),
            ("RAGGED", view.ragged),
            ("PDL", target.pdl),
            ("LANE_RUN", lane_run),
            ("FOLD_COPIES", copies_in_block > 0),
            ("GAMMA_SPAN", span),
            ("CHANNEL_SLOTS", slots),
            ("POLY_TERMS", fields["poly_terms"]),
        ),  # fmt: skip
        num_warps=entry.num_warps,
        pdl=False,  # onto an idle GPU: its persistent grid relies on an even spread of programs over SMs
    )
    if span:
        finish_g = min(finish_g, next_pow2(finish_rows))
        finish = KernelLaunch(
            grid=finish_grid(param_width, finish_n),
            scalars=(param_width, finish_rows, tile[2], n_dalpha_partials),
            constexprs=(
                ("GAMMA_SPAN", span),
                ("MAIN_BLOCK_N", tile[1]),
                ("CHANNEL_SLOTS", slots),
                ("BLOCKS_PER_CHANNEL", (span - 1) // tile[1] + 2),
                ("BLOCK_G", finish_g),
                ("BLOCK_C", finish_n),
                ("DALPHA_BLOCK", min(FINISH_TILE, next_pow2(n_dalpha_partials))),
                ("PDL", target.pdl),
            ),  # fmt: skip
            num_warps=FINISH_NUM_WARPS,
            pdl=target.pdl,
        )
    else:
        finish = KernelLaunch(
            grid=finish_grid(param_width, finish_n),
            scalars=(param_width, finish_rows, n_dalpha_partials),
            constexprs=(("BLOCK_G", finish_g), ("BLOCK_N", finish_n), ("PDL", target.pdl)),
            num_warps=FINISH_NUM_WARPS,
            pdl=target.pdl,
        )
    return BwdPlan(
        **fields,
        n_groups=n_groups,
        tiles_per_program=tiles_per_program,
        strided=strided,
        num_stages=entry.num_stages,
        finish_block_g=finish_g,
        finish_block_n=finish_n,
        finish_grid=finish.grid,
        lane_run=lane_run,
        copies_as_rows=copies_as_rows,
        copies_in_block=copies_in_block,
        finish_rows=finish_rows,
        n_dalpha_partials=n_dalpha_partials,
        channel_slots=slots,
        main=main,
        finish=finish,
    )


def finish_grid(N: int, block_n: int) -> tuple[int]:
    """One program per column block of dgamma and dbeta, and one more for dalpha."""
    return (cdiv(N, block_n) + 1,)


def finish_tile(N: int, sm_count: int) -> tuple[int, int]:
    """(BLOCK_G, BLOCK_N) of the finishing reduction. Its programs split the columns only, so narrow
    blocks give it enough programs to spread the partial read over the SMs; FINISH_TILE // BLOCK_N groups
    per step keep its loop short."""
    block_n = min(max(next_pow2(cdiv(N, sm_count)), FINISH_MIN_BLOCK_N), FINISH_MAX_BLOCK_N)
    return FINISH_TILE // block_n, block_n
