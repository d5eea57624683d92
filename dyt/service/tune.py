"""Timing-based tuning, opt-in and offline: measures candidate tiles per (mode, dtype, width bucket) on
the GPU at hand and writes the launch table (dyt/tables/<arch>.json) that every later run reads without
timing anything. `python -m dyt tune [--out PATH] [--report PATH] [--budget-s S] [--buckets 16bit,fp32]`.
A backward candidate whose programs per SM exceed what an SM holds at once is skipped, not timed
(overfull).

The table holds launch choices only (dyt.launch_table). What a run measured, and where (the command, GPU,
commit and environment), goes to its report: reports/tune/<arch>-<kind>.json (kind: rows, channels_first,
poly; --report elsewhere), one record per choice made with its times.

`python -m dyt tune --channels-first` times the channels_first fields instead (dyt.planner.CHANNELS_FIRST:
the tiles of contiguous (N, C, H, W) rows) at ConvNeXt's stage shapes, one choice per class of spatial
size, and writes them into the widest 16-bit entries, which those rows' widths (C x H x W) reach.

`python -m dyt tune --poly` keeps every tile and chooses each entry's "poly" (dyt.planner.POLY_TERMS: tanh's
polynomial, 5 or 3 terms) by timing the two in interleaved rounds: the entry's own tile on rows of its width
at the bandwidth shape and at an L2-resident size (POLY_L2_ELEMENTS), and the channels_first choices at
their CF_SHAPES.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import pathlib
import statistics
import sys
import time

from dyt import planner
from dyt.launch_table import (
    BUCKETS,
    CHANNELS_FIRST,
    FOLDED,
    FP32_PARAMS,
    BackwardEntry,
    BackwardTile,
    ForwardEntry,
    ForwardTile,
    LaunchTable,
)
from dyt.service.bench import BANDWIDTH_ELEMENTS
from dyt.service.env import collect_env, git_sha
from dyt.service.files import write_atomic

ROOT = pathlib.Path(__file__).resolve().parents[2]

# 768 (a common model width) has its own bucket: it runs as 3 x 256 column blocks (dyt.planner.tile_shape).
WIDTH_BUCKETS = [64, 128, 256, 512, 768, 1024, 2048, 4096, 8192, None]
BUCKET_DTYPES = {"16bit": "bfloat16", "fp32": "float32"}
# (elements per tile, num_warps). The backward keeps three float32 accumulators per element in registers
# (its loads in flight sit in shared memory, see NUM_STAGES), so it stays at 8-32 elements per thread.
TILES = {
    "fwd": [(1024, 4), (2048, 4), (4096, 4), (4096, 8), (8192, 8)],
    "bwd": [(1024, 4), (2048, 4), (4096, 4), (4096, 8)],
}
# Column blocks tried for rows wider than WIDE_FROM; the backward also tries 512 (the fp32 entries' choice).
WIDE_BLOCK_N = {"fwd": [1024, 2048, 4096], "bwd": [512, 1024, 2048]}
WIDE_FROM = {"fwd": 2048, "bwd": 2048}  # fwd from 2048: 1x1024x4 beat 2x2048x8 in fp32 (docs/kernels.md)
PROGRAMS_PER_SM = [2, 3, 4, 6, 8]  # 2: 4x1024 backward tiles (255 registers, docs/kernels.md)
NUM_STAGES = [3, 4]  # the backward loop's pipelining depth (dyt.kernels.dyt_bwd_kernel)
SIGNS = ["select", "bitwise"]  # how the forward's tanh takes its sign (dyt.kernels._tanh)
POLYS = planner.POLY_TERMS  # the forward tanh's polynomial (dyt.planner.POLY_TERMS): 5 terms or 3
ROW_ORDERS = ["chunked", "strided"]  # the backward's persistent loop: see dyt.kernels.dyt_bwd_kernel
# Fields a bucket keeps from its current entry: "copies_as_rows" and "folded" matter only where the entry
# serves folded narrower widths (dyt.planner.BwdPlan, dyt.planner.FOLDED), "fp32_params" only with float32
# parameters on 16-bit x (dyt.planner.FP32_PARAMS), "channels_first" only on channels-first rows
# (dyt.planner.CHANNELS_FIRST; benchmarks/channels_first_bench.py --sweep); timing the bucket's own width
# in one dtype sees none.
HAND_SET = ("copies_as_rows", FP32_PARAMS, FOLDED, CHANNELS_FIRST)
# The backward's candidates leave the polynomial out (`--poly` chooses it at two sizes): a backward retune
# keeps each bucket's "poly" too.
BWD_KEPT = ("poly",)


# Channels-first: the classes of spatial size L = H x W (a variant's "max_span"; None: any larger) and
# the (N, C, H, W) shapes each class is timed at: ConvNeXt-T's stages (L = 49, 196, 784, 3136) at batch 64
# (256 at L = 49) and at batch 8 (32 at L = 49), where the tiles' grids part most. One class a stage: at
# L = 3136 x and y leave the L2 cache, at 784 they stay, and the forward's best tile differs between them.
CF_SHAPES = {
    64: [(256, 768, 7, 7), (32, 768, 7, 7)],
    256: [(64, 384, 14, 14), (8, 384, 14, 14)],
    1024: [(64, 192, 28, 28), (8, 192, 28, 28)],
    None: [(64, 96, 56, 56), (8, 96, 56, 56)],
}
# The candidate tiles (one naming no field: the entry's own tile). The backward's BLOCK_N is cut further by
# the slot rule (dyt.planner.CF_SLOT_TILE); 1 x 1024 takes 80 registers on 4 warps, so 6 programs fill an SM.
_ONE_WARP = {"num_warps": 1, "poly": 3}
_F, _B = ForwardTile, BackwardTile
CF_CANDIDATES = {
    "fwd": [
        _F(),
        _F(BLOCK_M=8, BLOCK_N=512, num_warps=4),
        _F(BLOCK_M=8, BLOCK_N=256, num_warps=4),
        _F(BLOCK_M=16, BLOCK_N=512, num_warps=8),
        _F(BLOCK_M=8, BLOCK_N=1024, num_warps=8),
        _F(BLOCK_M=4, BLOCK_N=512, num_warps=4),
        _F(BLOCK_M=4, BLOCK_N=512, num_warps=2),
        _F(BLOCK_M=4, BLOCK_N=256, num_warps=2),
    ],
    "bwd": [
        _B(),
        _B(BLOCK_M=1, BLOCK_N=1024, programs_per_sm=6, num_stages=4),
        _B(BLOCK_M=1, BLOCK_N=1024, programs_per_sm=6),
        _B(BLOCK_M=1, BLOCK_N=1024, programs_per_sm=8),
        _B(BLOCK_M=1, BLOCK_N=1024, programs_per_sm=12, num_stages=4),
        _B(BLOCK_M=1, BLOCK_N=1024, programs_per_sm=16, num_stages=4),
        _B(BLOCK_M=1, BLOCK_N=1024, programs_per_sm=12, num_warps=2, num_stages=4),
        _B(BLOCK_M=1, BLOCK_N=1024, programs_per_sm=16, num_warps=2),
        _B(BLOCK_M=2, BLOCK_N=1024, programs_per_sm=8),
        _B(BLOCK_M=1, BLOCK_N=512, programs_per_sm=8, num_stages=4),
        _B(BLOCK_M=1, BLOCK_N=512, programs_per_sm=16, num_warps=2, num_stages=4),
        _B(BLOCK_M=1, BLOCK_N=256, programs_per_sm=16, num_warps=2, num_stages=4),
        _B(BLOCK_M=1, BLOCK_N=256, programs_per_sm=24, num_warps=2, num_stages=4),
        _B(BLOCK_M=2, BLOCK_N=256, programs_per_sm=24, num_warps=1, num_stages=4),
        # the 3-term polynomial (dyt.planner.POLY_TERMS) on the tiles above that the sweep chose
        _B(BLOCK_M=1, BLOCK_N=256, programs_per_sm=24, num_warps=2, num_stages=4, poly=3),
        _B(BLOCK_M=2, BLOCK_N=256, programs_per_sm=24, num_warps=1, num_stages=4, poly=3),
        _B(BLOCK_M=1, BLOCK_N=1024, programs_per_sm=12, num_warps=2, num_stages=4, poly=3),
        _B(BLOCK_M=1, BLOCK_N=1024, programs_per_sm=6, num_stages=4, poly=3),
        # one warp: 1 x 256 at L = 49 takes 113 registers in Triton 3.6, so 17 such programs fit an SM; at
        # L = 196 72, so 28 fit
        _B(BLOCK_M=1, BLOCK_N=256, programs_per_sm=16, num_stages=4, **_ONE_WARP),
        _B(BLOCK_M=1, BLOCK_N=256, programs_per_sm=12, num_stages=4, **_ONE_WARP),
        _B(BLOCK_M=1, BLOCK_N=256, programs_per_sm=20, num_stages=4, **_ONE_WARP),
        _B(BLOCK_M=1, BLOCK_N=256, programs_per_sm=24, num_stages=4, **_ONE_WARP),
        _B(BLOCK_M=1, BLOCK_N=128, programs_per_sm=24, num_stages=4, **_ONE_WARP),
        # 2 x 256 on one warp takes 161-168 registers in Triton 3.6: 12 programs fit an SM
        _B(BLOCK_M=2, BLOCK_N=256, programs_per_sm=12, num_stages=4, **_ONE_WARP),
    ],
}


def candidate_name(tile: ForwardTile | BackwardTile) -> str:
    """A channels_first candidate as BLOCK_MxBLOCK_N[wWARPS][_pPROGRAMS][_sSTAGES][_polyTERMS] ("entry": the
    tile naming no field)."""
    if tile.empty:
        return "entry"
    name = f"{tile.BLOCK_M}x{tile.BLOCK_N}"
    for key, tag in (("num_warps", "w"), ("programs_per_sm", "_p"), ("num_stages", "_s"), ("poly", "_poly")):
        value = getattr(tile, key, None)
        if value is not None:
            name += f"{tag}{value}"
    return name


def _entries(table: LaunchTable, mode: str, bucket: str) -> tuple:
    return getattr(table, mode)[bucket]


def with_channels_first(table: LaunchTable, mode: str, field) -> LaunchTable:
    """table with its widest 16-bit `mode` entry's channels_first choices replaced: field is one tile (for
    every spatial size), a tuple of tiles by max_span, or None (no choices)."""
    choices = () if field is None else (field,) if isinstance(field, (ForwardTile, BackwardTile)) else field
    entries = _entries(table, mode, "16bit")
    widest = dataclasses.replace(entries[-1], channels_first=tuple(choices))
    return table.with_entries(mode, "16bit", (*entries[:-1], widest))


def channels_first_field(choices: list[tuple[int | None, ForwardTile | BackwardTile]]) -> tuple:
    """The channels_first choices for the chosen tile of each span class (ascending max_span, None last):
    neighbouring classes with the same choice merge into the larger, each choice carrying its max_span."""
    merged: list[tuple[int | None, ForwardTile | BackwardTile]] = []
    for max_span, tile in reversed(choices):
        if not (merged and merged[0][1] == tile):
            merged.insert(0, (max_span, tile))
    return tuple(dataclasses.replace(tile, max_span=max_span) for max_span, tile in merged)


# Rounds in which `--channels-first` times every candidate of a class, one after another: each candidate's
# time at a shape is the median of its rounds, so that a drift of the GPU's clocks or of the host during
# one candidate's timing does not decide between candidates within a few percent of each other.
CF_ROUNDS = 3


def tune_channels_first(
    table: LaunchTable, time_ms, modes=("fwd", "bwd"), rounds: int = CF_ROUNDS, measured: list | None = None
) -> LaunchTable:
    """table with the widest 16-bit entries' channels_first choices retuned in these modes: for each class
    of CF_SHAPES the candidate with the least time summed over the class's shapes (the first of equals),
    each time the median of `rounds` interleaved rounds of time_ms(mode, candidate, shape). measured, where
    given, gets a record per class: the choice and its runners-up with their times."""
    for mode in modes:
        choices = []
        for max_span, shapes in CF_SHAPES.items():
            times = {}
            for _ in range(rounds):
                for i, c in enumerate(CF_CANDIDATES[mode]):
                    for shape in shapes:
                        times.setdefault((i, shape), []).append(time_ms(mode, c, shape))
            timed = [
                (sum(statistics.median(times[(i, shape)]) for shape in shapes), i)
                for i in range(len(CF_CANDIDATES[mode]))
            ]
            ranked = sorted(timed)
            (ms, best), runners_up = ranked[0], ranked[1:3]
            fields = CF_CANDIDATES[mode][best]
            named = [(candidate_name(CF_CANDIDATES[mode][i]), t) for t, i in runners_up]
            after = ", ".join(f"{name} {t * 1e3:.1f}" for name, t in named)
            print(
                f"channels_first {mode} L<={max_span}: {candidate_name(fields)} {ms * 1e3:.1f} us "
                f"(then {after}), {shapes}"
            )
            if measured is not None:
                measured.append({"mode": mode, "max_span": max_span, "shapes": shapes,
                                 "chosen": candidate_name(fields), "us": round(ms * 1e3, 2),
                                 "runners_up": {name: round(t * 1e3, 2) for name, t in named}})  # fmt: skip
            choices.append((max_span, fields))
        table = with_channels_first(table, mode, channels_first_field(choices))
    return table


def _time_channels_first(table: LaunchTable, mode: str, fields, shape, fit: bool = True) -> float:
    """Median ms of launcher.forward / launcher.backward (channels_first=True) on bf16 x with float32
    parameters of this shape, with this candidate as the widest entry's channels_first field; fit: a
    backward whose programs per SM do not fit an SM is not timed (inf)."""
    import torch

    from dyt import launcher

    x = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
    dy = torch.randn_like(x)
    f32 = torch.float32
    alpha = torch.full((1,), 0.5, device="cuda")
    gamma = torch.randn(shape[1], device="cuda")
    beta = torch.randn(shape[1], device="cuda")
    what = f"{candidate_name(fields)} at {shape}"
    with launcher.overrides(table=with_channels_first(table, mode, fields)):
        if mode == "fwd":
            fn = lambda: launcher.forward(x, alpha, gamma, beta, x.dtype, channels_first=True)  # noqa: E731
            return _timed_if_it_fits(fn, what, None, True, x, dy)
        fn = lambda: launcher.backward(dy, x, alpha, gamma, x.dtype, f32, f32, f32, channels_first=True)  # noqa: E731
        programs = fields.programs_per_sm or table.bwd["16bit"][-1].programs_per_sm
        return _timed_if_it_fits(fn, what, programs if fit else None, True, x, dy)


# `--poly`: the 3-term polynomial costs ~1.2 float32 ulps more near 0, so it is chosen only where the
# geometric mean over the timed sizes of its time ratio (medians of POLY_ROUNDS interleaved rounds) is
# below 1 - POLY_MARGIN. Rows are timed at two sizes: the bandwidth shape (DRAM-bound, where two FFMA per
# element rarely show) and POLY_L2_ELEMENTS, the size of a model's norm input (ViT-S/16 at batch 64:
# 64 x 197 x 384), which stays in the L2 cache between graph replays and is bound by issue.
POLY_ROUNDS = 5
POLY_MARGIN = 0.01
POLY_L2_ELEMENTS = 2**22


def poly_choice(timers, rounds: int = POLY_ROUNDS, margin: float = POLY_MARGIN) -> tuple[int, list[float]]:
    """(3 or 5, each timer's median time ratio 3 terms / 5 terms): each timer(terms) -> ms is timed with
    both in interleaved rounds; 3 where the geometric mean of the ratios is below 1 - margin."""
    ratios = []
    for timer in timers:
        times = {terms: [] for terms in planner.POLY_TERMS}
        for _ in range(rounds):
            for terms in planner.POLY_TERMS:
                times[terms].append(timer(terms))
        ratios.append(statistics.median(times[3]) / statistics.median(times[5]))
    return (3 if statistics.geometric_mean(ratios) < 1 - margin else 5), ratios


def with_poly_field(tile, terms: int, inherited: int):
    """A variant tile running `terms` polynomial terms: no poly of its own where that is what it inherits
    (its entry's), else its own."""
    return dataclasses.replace(tile, poly=None if terms == inherited else terms)


def _said(ratios: list[float]) -> str:
    return "(time with 3 terms / 5: " + ", ".join(f"{r:.3f}" for r in ratios) + ")"


def _entry_timers(time_entry, mode: str, bucket: str, own) -> list:
    def timer(terms, elements):
        return time_entry(mode, bucket, dataclasses.replace(own, poly=terms), elements)

    return [functools.partial(timer, elements=n) for n in (BANDWIDTH_ELEMENTS, POLY_L2_ELEMENTS)]


def _cf_timer(time_cf, mode: str, fields, shapes: list):
    def timer(terms):
        return sum(time_cf(mode, dataclasses.replace(fields, poly=terms), shape) for shape in shapes)

    return timer


def tune_poly(
    table: LaunchTable,
    time_entry,
    time_cf,
    modes=("fwd", "bwd"),
    buckets=("16bit", "fp32"),
    measured: list | None = None,
) -> LaunchTable:
    """table with the poly of each entry of these modes and buckets chosen by poly_choice, as
    time_entry(mode, bucket, entry, elements) times an entry's own tile on rows of its max_width (16384 for
    the last) at the bandwidth shape and at POLY_L2_ELEMENTS, and of the widest 16-bit entries'
    channels_first choices, as time_cf(mode, tile, shape) times them summed over their class of
    CF_SHAPES. An entry's fp32_params and folded tiles keep the polynomial they ran before. measured, where
    given, gets a record per choice: the terms chosen and the time ratios."""
    for mode in modes:
        for bucket in buckets:
            entries = []
            for entry in _entries(table, mode, bucket):
                own = entry.with_tile(ForwardTile() if mode == "fwd" else BackwardTile())
                terms, ratios = poly_choice(_entry_timers(time_entry, mode, bucket, own))
                print(f"poly {mode} {bucket} width<={entry.max_width}: {terms} terms {_said(ratios)}")
                if measured is not None:
                    measured.append({"mode": mode, "bucket": bucket, "max_width": entry.max_width,
                                     "poly": terms, "ratios_3_to_5": _rounded(ratios)})  # fmt: skip
                new = dataclasses.replace(entry, poly=terms)
                for field in (FP32_PARAMS, FOLDED):
                    variant = getattr(entry, field, None)
                    if variant is not None:
                        ran = variant.poly or entry.poly
                        new = dataclasses.replace(new, **{field: with_poly_field(variant, ran, terms)})
                entries.append(new)
            table = table.with_entries(mode, bucket, entries)
        widest = _entries(table, mode, "16bit")[-1]
        if "16bit" not in buckets or not widest.channels_first:
            continue
        choices = []
        for max_span, shapes in CF_SHAPES.items():
            fields = widest.channels_first_choice(shapes[0][2] * shapes[0][3])
            terms, ratios = poly_choice([_cf_timer(time_cf, mode, fields, shapes)])
            print(f"poly {mode} channels_first L<={max_span}: {terms} terms {_said(ratios)}")
            if measured is not None:
                measured.append({"mode": mode, "channels_first_max_span": max_span, "poly": terms,
                                 "ratios_3_to_5": _rounded(ratios)})  # fmt: skip
            choices.append((max_span, with_poly_field(fields, terms, widest.poly)))
        table = with_channels_first(table, mode, channels_first_field(choices))
    return table


def _rounded(ratios: list[float]) -> list[float]:
    return [round(r, 4) for r in ratios]


def candidates(mode: str, width: int) -> list[ForwardEntry | BackwardEntry]:
    """The entries (max_width None) timed for a bucket of this width."""
    widest = planner.next_pow2(width)  # a wider block would shrink to this one: the same candidate again
    block_ns = [widest] if width < WIDE_FROM[mode] else [b for b in WIDE_BLOCK_N[mode] if b <= widest]
    out: list = []
    for block_n in block_ns:
        for tile, warps in TILES[mode]:
            if tile < block_n:
                continue
            shape = {"max_width": None, "BLOCK_M": tile // block_n, "BLOCK_N": block_n, "num_warps": warps}
            if mode == "fwd":
                out += [ForwardEntry(**shape, sign=sign, poly=poly) for sign in SIGNS for poly in POLYS]
                continue
            for pps in PROGRAMS_PER_SM:
                for order in ROW_ORDERS:
                    for stages in NUM_STAGES:
                        knobs = {"programs_per_sm": pps, "row_order": order, "num_stages": stages}
                        out.append(BackwardEntry(**shape, **knobs))
    return out


def tuned_entry(best, current, max_width: int | None, mode: str = "fwd"):
    """The bucket's new entry: the fastest candidate, with the HAND_SET fields of the entry it replaces
    (the backward's: BWD_KEPT too) where that entry served the same bucket."""
    fields = HAND_SET + (BWD_KEPT if mode == "bwd" else ())
    same = current.max_width == max_width
    kept = {k: getattr(current, k) for k in fields if same and hasattr(current, k) and hasattr(best, k)}
    return dataclasses.replace(best, **kept, max_width=max_width)


def table_of_one(mode: str, entry, base: LaunchTable | None = None) -> LaunchTable:
    """base (default: the default table) with every bucket of `mode` holding this entry alone, for every
    width: the table a candidate is timed under."""
    base = base or planner.load_table("default")
    one = (dataclasses.replace(entry, max_width=None),)
    return dataclasses.replace(base, **{mode: {bucket: one for bucket in BUCKETS}})


@dataclasses.dataclass(frozen=True)
class SmLimits:
    """What one SM holds at once: registers, threads, programs (thread blocks) and shared memory bytes
    (sm_90's by default; sm_limits reads a GPU's)."""

    registers: int = 65536
    threads: int = 2048
    blocks: int = 32
    shared_bytes: int = 233472


REGISTER_UNIT = 256  # registers are allocated to each warp in units of 256
SHARED_RESERVED = 1024  # shared memory bytes the driver keeps per program
# Programs (thread blocks) an SM holds at once, by compute capability; torch does not report it. Others
# take BLOCKS_PER_SM_ELSE: too many only lets through a candidate that runs a second wave, which its time
# then shows, where too few would skip candidates that fit.
BLOCKS_PER_SM = {(7, 0): 32, (7, 5): 16, (8, 0): 32, (8, 6): 16, (8, 7): 16, (8, 9): 24, (9, 0): 32}
BLOCKS_PER_SM_ELSE = 32


def programs_that_fit(registers: int, num_warps: int, shared_bytes: int, limits=SmLimits()) -> int:
    """How many programs of a compiled kernel (registers per thread, warps, shared memory bytes) an SM runs
    at once."""
    per_warp = -(-registers * 32 // REGISTER_UNIT) * REGISTER_UNIT
    return min(
        limits.registers // (per_warp * num_warps),
        limits.threads // (32 * num_warps),
        limits.blocks,
        limits.shared_bytes // (shared_bytes + SHARED_RESERVED),
    )


def sm_limits(device) -> SmLimits:
    import torch

    props = torch.cuda.get_device_properties(device)
    return SmLimits(
        registers=getattr(props, "regs_per_multiprocessor", SmLimits.registers),
        threads=props.max_threads_per_multi_processor,
        blocks=BLOCKS_PER_SM.get((props.major, props.minor), BLOCKS_PER_SM_ELSE),
        shared_bytes=getattr(props, "shared_memory_per_multiprocessor", SmLimits.shared_bytes),
    )


def overfull(programs_per_sm: int, compiled: list, limits: SmLimits) -> str | None:
    """Why programs_per_sm programs of these compiled kernels (Triton's: n_regs, metadata.num_warps,
    metadata.shared) do not fit an SM at once, or None where they do. The backward's grid is persistent:
    programs that do not fit run in a second wave behind the first (docs/kernels.md, "The launch table")."""
    for kernel in compiled:
        meta = kernel.metadata
        fit = programs_that_fit(kernel.n_regs, meta.num_warps, meta.shared, limits)
        if programs_per_sm > fit:
            return (
                f"{programs_per_sm} programs per SM, {fit} fit "
                f"({kernel.n_regs} registers, {meta.num_warps} warps, {meta.shared} B shared)"
            )
    return None


def _timed_if_it_fits(fn, what, programs_per_sm: int | None, channels_first: bool, x, dy) -> float:
    """replay_median_ms of fn (a launch under the candidate's table), or inf with a line saying why where
    it does not compile or launch, or (programs_per_sm given: a backward) where that many of its main
    kernel's programs do not fit an SM."""
    from dyt import launcher
    from dyt.service.bench import replay_median_ms

    try:
        fn()
        if programs_per_sm is not None:
            plan = launcher.backward_plan(x, dy, channels_first=channels_first)
            why = overfull(programs_per_sm, launcher.BACKWARD.compiled_for(plan.main), sm_limits(x.device))
            if why:
                print(f"  skip {what}: {why}")
                return float("inf")
        # Timed as CUDA-graph replays: the host's launch cost (tens of microseconds on a slow host CPU)
        # would otherwise swamp the kernels being compared.
        return replay_median_ms(fn, reps=10, replays=5)
    except Exception as exc:  # a config that does not compile or launch is simply not chosen
        print(f"  skip {what}: {type(exc).__name__}: {exc}")
        return float("inf")


def _time(mode, entry, bucket, x, dy, alpha, gamma, beta, fit: bool = True):
    from dyt import launcher

    with launcher.overrides(table=table_of_one(mode, entry)):
        if mode == "fwd":
            fn = lambda: launcher.forward(x, alpha, gamma, beta, x.dtype)
            return _timed_if_it_fits(fn, entry, None, False, x, dy)
        fn = lambda: launcher.backward(dy, x, alpha, gamma, x.dtype, alpha.dtype, gamma.dtype, beta.dtype)
        return _timed_if_it_fits(fn, entry, entry.programs_per_sm if fit else None, False, x, dy)


# Elements between rows that would fold otherwise: 128 bytes in bf16, so that each row stays aligned.
FOLD_PAD = 64


def timing_rows(mode: str, width: int, elements: int) -> tuple[int, int, int]:
    """(rows, width, row stride) of x for timing a bucket's candidates: `elements` elements in rows of width,
    the rows FOLD_PAD elements apart where contiguous ones would fold (dyt.planner.fold_factor: 64-512 in
    both modes, 768 in the backward). A bucket's entry runs unfolded rows of its width (folded rows take the
    wider rows' entry), so that is what its candidates are timed on."""
    rows = elements // width
    folds = planner.fold_factor(rows, width, (width,) * 3, powers_of_two_only=mode == "fwd") > 1
    return rows, width, width + FOLD_PAD if folds else width


def _rows_inputs(mode: str, bucket: str, width: int, elements: int) -> tuple:
    """(x, dy, alpha, gamma, beta) on the GPU in the bucket's dtype: x as timing_rows says, dy contiguous."""
    import torch

    dtype = getattr(torch, BUCKET_DTYPES[bucket])
    rows, width, stride = timing_rows(mode, width, elements)
    x = torch.randn(rows, stride, device="cuda", dtype=dtype)[:, :width]
    params = [torch.full((1,), 0.5, device="cuda", dtype=dtype)]
    params += [torch.randn(width, device="cuda", dtype=dtype) for _ in range(2)]
    return (x, torch.randn(rows, width, device="cuda", dtype=dtype), *params)


_ROWS_INPUTS: dict = {}


def _time_rows(mode: str, bucket: str, entry, elements: int) -> float:
    """_time of this entry on `elements` elements in rows of its max_width (16384 for the last), the
    inputs of the last shape kept for the next call (poly_choice times one entry ten times a shape). No
    fit check: `--poly` times the committed tiles as they run."""
    key = (mode, bucket, entry.max_width or 16384, elements)
    if key not in _ROWS_INPUTS:
        _ROWS_INPUTS.clear()
        _ROWS_INPUTS[key] = _rows_inputs(*key)
    return _time(mode, entry, bucket, *_ROWS_INPUTS[key], fit=False)


def table_text(table: LaunchTable) -> str:
    """The table as the committed files hold it: its to_dict() in JSON, one-space indents."""
    return json.dumps(table.to_dict(), indent=1) + "\n"


def write_table(out: pathlib.Path, table: LaunchTable) -> None:
    """The table file, and a line saying where."""
    out.write_text(table_text(table))
    print(f"wrote {out}")


def report_path(arch: str, kind: str) -> pathlib.Path:
    """Where a run of this kind (rows, channels_first, poly) reports by default: reports/tune/ (under
    DYT_REPORTS where that is set)."""
    reports = pathlib.Path(os.environ.get("DYT_REPORTS") or ROOT / "reports")
    return reports / "tune" / f"{arch}-{kind}.json"


def write_report(
    path: pathlib.Path, kind: str, argv: list[str], table_out: pathlib.Path, measured: list[dict]
) -> dict:
    """The run's report: what was measured (one record per choice made, with its times), the command, the
    table it wrote, and where it ran (GPU, commit and the rest of dyt.service.env.collect_env's manifest)."""
    env = collect_env()
    report = {
        "kind": kind,
        "command": " ".join(["python -m dyt tune", *argv]),
        "table": str(table_out),
        "gpu": env.get("gpu_name"),
        "commit": git_sha()[:7],
        "env": env,
        "measured": measured,
    }
    write_atomic(path, json.dumps(report, indent=1, default=str) + "\n")
    print(f"wrote {path}")
    return report


def tune(
    out: pathlib.Path,
    budget_s: float,
    buckets: list[str],
    modes: list[str],
    widths=None,
    measured: list | None = None,
) -> LaunchTable:
    """Tunes the width buckets named in widths (max_width values; None: all) and keeps the others; measured,
    where given, gets a record per bucket timed: its median time, bandwidth and the entry chosen."""
    import torch

    from dyt import launcher

    arch = launcher.target_of(torch.device("cuda")).arch
    table = dataclasses.replace(planner.load_table(arch), arch=arch)
    start = time.time()
    for bucket in buckets:
        for mode in modes:
            entries = []
            for max_width in WIDTH_BUCKETS:
                width = max_width or 16384
                current = planner.table_entry(table, mode, 2 if bucket == "16bit" else 4, width)
                skipped = widths is not None and width not in widths
                if skipped or time.time() - start > budget_s:
                    print(f"{mode} {bucket} width<={max_width} keeps its current entry")
                    entries.append(dataclasses.replace(current, max_width=max_width))
                    continue
                inputs = _rows_inputs(mode, bucket, width, BANDWIDTH_ELEMENTS)
                x = inputs[0]
                timed = [(_time(mode, c, bucket, *inputs), c) for c in candidates(mode, width)]
                ms, best = min(timed, key=lambda t: t[0])
                moved = (2 if mode == "fwd" else 3) * x.numel() * x.element_size()
                gbps = moved / ms / 1e6
                print(f"{mode} {bucket} width<={max_width}: {ms * 1e3:.1f} us {gbps:.0f} GB/s {best}")
                entry = tuned_entry(best, current, max_width, mode)
                if measured is not None:
                    measured.append({"mode": mode, "bucket": bucket, "max_width": max_width,
                                     "median_us": round(ms * 1e3, 2), "gbps": round(gbps),
                                     "entry": entry.to_dict()})  # fmt: skip
                entries.append(entry)
                del inputs, x
            table = table.with_entries(mode, bucket, entries)
    write_table(out, table)
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dyt tune", description=__doc__)
    parser.add_argument("--out", type=pathlib.Path, default=None, help="default: dyt/tables/<arch>.json")
    parser.add_argument(
        "--report",
        type=pathlib.Path,
        default=None,
        help="default: reports/tune/<arch>-<rows|channels_first|poly>.json",
    )
    parser.add_argument("--budget-s", type=float, default=600.0)
    parser.add_argument("--buckets", default="16bit,fp32")
    parser.add_argument("--modes", default="fwd,bwd")
    parser.add_argument("--widths", help="only these width buckets, e.g. 768,2048 (16384: the last)")
    parser.add_argument(
        "--channels-first",
        action="store_true",
        help="retune the widest 16-bit entries' channels_first fields (in --modes), not the rows' tiles",
    )
    parser.add_argument(
        "--poly",
        action="store_true",
        help="keep every tile and choose the entries' tanh polynomial (in --modes and --buckets) by timing",
    )
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    unknown = set(args.modes.split(",")) - {"fwd", "bwd"}
    if unknown:
        parser.error(f"--modes takes fwd and/or bwd, got {', '.join(sorted(unknown))}")
    if args.poly and args.channels_first:
        parser.error("--poly chooses the channels_first fields' polynomial too: give one of the two")
    import torch

    if not torch.cuda.is_available():
        print("dyt tune: needs a CUDA GPU (it times kernels); none is visible")
        return 2
    from dyt import launcher

    arch = launcher.target_of(torch.device("cuda")).arch
    out = args.out or planner.TABLES / f"{arch}.json"
    measured: list[dict] = []
    committed = dataclasses.replace(planner.load_table(arch), arch=arch)
    if args.poly:
        kind = "poly"
        # `--poly` times the committed tiles as they run, whether or not their programs fit an SM.
        cf_timer = lambda *a: _time_channels_first(committed, *a, fit=False)  # noqa: E731
        modes, buckets = args.modes.split(","), args.buckets.split(",")
        write_table(out, tune_poly(committed, _time_rows, cf_timer, modes, buckets, measured))
    elif args.channels_first:
        kind = "channels_first"
        timer = lambda *a: _time_channels_first(committed, *a)  # noqa: E731
        write_table(out, tune_channels_first(committed, timer, args.modes.split(","), measured=measured))
    else:
        kind = "rows"
        widths = None if args.widths is None else {int(w) for w in args.widths.split(",")}
        tune(out, args.budget_s, args.buckets.split(","), args.modes.split(","), widths, measured)
    write_report(args.report or report_path(arch, kind), kind, argv, out, measured)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
