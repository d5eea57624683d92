"""tune: the tuner's candidate launch entries are valid table entries (timing itself needs a GPU)."""

from __future__ import annotations

import copy
import json
import math
import types

import pytest

from dyt import planner
from dyt.service import tune

from helpers import SM90

pytestmark = pytest.mark.tooling


def _committed(arch: str) -> dict:
    """The table as its file holds it (planner.load_table hands out one cached dict)."""
    return json.loads((planner.TABLES / f"{arch}.json").read_text())


@pytest.mark.parametrize("mode", ["fwd", "bwd"])
@pytest.mark.parametrize("width", [w or 16384 for w in tune.WIDTH_BUCKETS])
def test_every_candidate_plans(mode, width):
    """Each candidate, put in a table alone, gives a plan that covers the bandwidth shape (and, forward,
    takes the candidate's polynomial: the tuner times both, dyt.tune.POLYS)."""
    rows = 2**26 // width
    for entry in tune.candidates(mode, width):
        table = {m: {b: [entry] for b in tune.BUCKET_DTYPES} for m in ("fwd", "bwd")}
        over = planner.Overrides(table=table)
        if mode == "fwd":
            plan = planner.plan_forward(rows, width, 2, target=SM90, overrides=over)
            assert plan.poly_terms == entry.get("poly", 5)
        else:
            plan = planner.plan_backward(rows, width, 2, target=SM90, overrides=over)
            assert plan.num_stages == entry["num_stages"]
        assert plan.n_col_blocks * plan.BLOCK_N >= width, entry


@pytest.mark.parametrize("mode", ["fwd", "bwd"])
@pytest.mark.parametrize("width", [w or 16384 for w in tune.WIDTH_BUCKETS])
def test_candidates_are_timed_on_unfolded_rows_of_their_width(mode, width):
    """Contiguous rows of 64-512 columns (and of 768 in the backward) fold into wider rows, which take the
    wider rows' entry: a bucket's own entry runs unfolded rows of its width, so the tuner times its
    candidates on those, padded apart where contiguous rows would fold."""
    rows, n, stride = tune.timing_rows(mode, width, tune.BANDWIDTH_ELEMENTS)
    assert (rows, n) == (tune.BANDWIDTH_ELEMENTS // width, width)
    pow2 = width & (width - 1) == 0
    assert (stride != width) == (width < 1024 and (pow2 or mode == "bwd")), stride
    for entry in tune.candidates(mode, width)[:4]:
        table = {m: {b: [entry] for b in tune.BUCKET_DTYPES} for m in ("fwd", "bwd")}
        over = planner.Overrides(table=table)
        for itemsize in (2, 4):
            if mode == "fwd":
                plan = planner.plan_forward(
                    rows, width, itemsize, x_stride=stride, target=SM90, overrides=over
                )
            else:
                plan = planner.plan_backward(
                    rows, width, itemsize, x_stride=stride, target=SM90, overrides=over
                )
            assert (plan.M, plan.N, plan.gamma_period) == (rows, width, 0), plan


def test_the_backward_tries_column_blocks_from_2048():
    """One 2048-wide block ran far below 1024-wide blocks in the backward (docs/kernels.md, "Backward main
    kernel"): the backward's candidates split rows from 2048 on."""
    block_ns = {c["BLOCK_N"] for c in tune.candidates("bwd", 2048)}
    assert {512, 1024} <= block_ns
    assert {c["BLOCK_N"] for c in tune.candidates("bwd", 1024)} == {1024}


def test_a_retune_keeps_the_hand_set_fields_of_the_entry_it_replaces():
    """copies_as_rows matters only where a bucket's entry serves folded narrower widths, which timing the
    bucket's own width cannot see: the sm90 16-bit backward's 1024 entry keeps it, other buckets get none.
    Likewise fp32_params, which only float32 parameters on 16-bit x use, and the forward's folded tile."""
    table = planner.load_table("sm90")
    best = tune.candidates("bwd", 1024)[0]
    current = planner.table_entry(table, "bwd", 2, 1024)
    assert current["copies_as_rows"] == 4 and current["poly"] == 3
    entry = tune.tuned_entry(best, current, 1024, 0.1, "bwd")
    assert entry == {**best, "copies_as_rows": 4, "poly": 3, "max_width": 1024, "median_us": 100.0}
    # the backward's poly is `tune --poly`'s (its candidates leave it out); the forward's candidates try both
    assert "poly" not in tune.tuned_entry(best, current, 1024, 0.1, "fwd")
    wider = tune.tuned_entry(best, planner.table_entry(table, "bwd", 2, 2048), 2048, 0.1)
    assert "copies_as_rows" not in wider
    # fp32_params (the forward's tile for float32 parameters on 16-bit x) is timed by no retune either
    fwd_current = planner.table_entry(table, "fwd", 2, 4096)
    fwd_entry = tune.tuned_entry(tune.candidates("fwd", 4096)[0], fwd_current, 4096, 0.1)
    assert fwd_entry[planner.FP32_PARAMS] == fwd_current[planner.FP32_PARAMS]
    fp32_entry = tune.tuned_entry(
        tune.candidates("fwd", 4096)[0], planner.table_entry(table, "fwd", 4, 4096), 4096, 0.1
    )
    assert planner.FP32_PARAMS not in fp32_entry
    # folded (the forward's tile for rows folded from narrower widths) likewise, in the 1024 entry only
    fwd_1024 = planner.table_entry(table, "fwd", 2, 1024)
    kept = tune.tuned_entry(tune.candidates("fwd", 1024)[0], fwd_1024, 1024, 0.1)
    assert kept[planner.FOLDED] == fwd_1024[planner.FOLDED]
    assert planner.FOLDED not in fwd_entry


def test_every_committed_entry_is_one_the_tuner_tries():
    """The sm90 table is data the tuner can write again: each entry (hand-set fields and the backward's
    poly aside) is among its width bucket's candidates, so a retune can keep it (a hand-made choice widens
    the search first). The default table is hand-written for GPUs nobody tuned, in fewer fields."""
    arch = "sm90"
    table = planner.load_table(arch)
    for mode in ("fwd", "bwd"):
        for bucket, entries in table[mode].items():
            for entry in entries:
                not_knobs = (
                    "max_width",
                    "median_us",
                    *tune.HAND_SET,
                    *(tune.BWD_KEPT if mode == "bwd" else ()),
                )
                knobs = {k: v for k, v in entry.items() if k not in not_knobs}
                tried = [{k: v for k, v in c.items() if k not in not_knobs}
                         for c in tune.candidates(mode, entry["max_width"] or 16384)]  # fmt: skip
                assert knobs in tried, f"{arch} {mode} {bucket} width<={entry['max_width']}: {knobs}"


@pytest.mark.parametrize("mode", ["fwd", "bwd"])
@pytest.mark.parametrize("width", [w or 16384 for w in tune.WIDTH_BUCKETS])
def test_no_candidate_is_timed_twice(mode, width):
    """A block wider than the row shrinks to the row's width, so it would repeat a narrower candidate."""
    knobs = ("sign", "poly", "programs_per_sm", "row_order", "num_stages", "num_warps")
    shapes = [
        (planner.tile_shape(c, width), *(c.get(k) for k in knobs)) for c in tune.candidates(mode, width)
    ]
    assert len(shapes) == len(set(shapes))


def _cf_plans(mode: str, table: dict, shape):
    N, C, H, W = shape
    over = planner.Overrides(table=table)
    plan = planner.plan_forward if mode == "fwd" else planner.plan_backward
    return plan(N, C * H * W, 2, channel_span=H * W, target=SM90, overrides=over)


@pytest.mark.parametrize("mode", ["fwd", "bwd"])
def test_every_channels_first_candidate_plans_at_its_shapes(mode):
    """Each channels_first candidate, as the widest 16-bit entry's field, plans every shape the tuner
    times it at with its own tile (the backward's BLOCK_N cut by the slot rule, the tile's size kept)."""
    table = planner.load_table("sm90")
    entry = table[mode]["16bit"][-1]
    for fields in tune.CF_CANDIDATES[mode]:
        swapped = tune.with_channels_first(table, mode, fields)
        for shape in (s for shapes in tune.CF_SHAPES.values() for s in shapes):
            plan = _cf_plans(mode, swapped, shape)
            want = (fields.get("BLOCK_M", entry["BLOCK_M"]), fields.get("BLOCK_N", entry["BLOCK_N"]))
            assert plan.BLOCK_M * plan.BLOCK_N == want[0] * want[1] and plan.BLOCK_N <= want[1], (
                fields,
                shape,
            )
            assert plan.num_warps == fields.get("num_warps", entry["num_warps"])
            if mode == "bwd":
                assert plan.num_stages == fields.get("num_stages", entry["num_stages"])
            assert plan.poly_terms == fields.get("poly", entry.get("poly", 5))
            assert plan.n_col_blocks * plan.BLOCK_N >= plan.N and plan.gamma_span == shape[2] * shape[3]


def test_channels_first_candidates_have_names_of_their_own():
    """benchmarks/channels_first_bench.py --sweep keys its variants by these names: none may hide another."""
    for mode in ("fwd", "bwd"):
        names = [tune.candidate_name(c) for c in tune.CF_CANDIDATES[mode]]
        assert len(names) == len(set(names)) and "entry" in names and "committed" not in names


def test_the_committed_channels_first_fields_are_candidates_the_tuner_tries():
    """The sm90 table's channels_first choices, per class of spatial size, are among the candidates:
    `python -m dyt tune --channels-first` can write them again."""
    table = planner.load_table("sm90")
    for mode in ("fwd", "bwd"):
        entry = table[mode]["16bit"][-1]
        for max_span in tune.CF_SHAPES:
            span = tune.CF_SHAPES[max_span][0][2] * tune.CF_SHAPES[max_span][0][3]
            assert planner.channels_first_variant(entry, span) in tune.CF_CANDIDATES[mode], (mode, max_span)


def test_neighbouring_span_classes_with_one_choice_merge():
    a, b = tune.CF_CANDIDATES["bwd"][1], tune.CF_CANDIDATES["bwd"][2]
    assert tune.channels_first_field([(64, a), (256, a), (None, b)]) == [
        {"max_span": 256, **a},
        {"max_span": None, **b},
    ]
    assert tune.channels_first_field([(64, a), (256, b), (None, a)]) == [
        {"max_span": 64, **a},
        {"max_span": 256, **b},
        {"max_span": None, **a},
    ]
    assert tune.channels_first_field([(64, b), (256, b), (None, b)]) == b


def test_the_channels_first_tune_takes_each_candidates_median_over_rounds():
    """A candidate slow once (its first call at each shape) and fastest otherwise wins on the median of three
    interleaved rounds; timed once, the one slow call would hand every class to another candidate."""
    table = planner.load_table("sm90")
    steady = tune.CF_CANDIDATES["bwd"][1]
    calls = {}

    def time_ms(mode, fields, shape):
        if fields is not steady:
            return 1.5
        calls[shape] = calls.get(shape, 0) + 1
        return 5.0 if calls[shape] == 1 else 1.0

    tuned = tune.tune_channels_first(table, time_ms, modes=["bwd"])
    assert tuned["bwd"]["16bit"][-1][planner.CHANNELS_FIRST] == steady
    calls.clear()
    once = tune.tune_channels_first(table, time_ms, modes=["bwd"], rounds=1)["bwd"]["16bit"][-1]
    assert once[planner.CHANNELS_FIRST] != steady


def test_the_channels_first_tune_writes_the_fastest_candidate_per_class():
    """With a stand-in timer (the real one needs a GPU): each class takes the candidate with the least time
    summed over its shapes, in the widest 16-bit entries only; plans then follow the new fields."""
    table = planner.load_table("sm90")
    fwd_pick = tune.CF_CANDIDATES["fwd"][2]
    small = {"BLOCK_M": 1, "BLOCK_N": 256, "programs_per_sm": 24, "num_warps": 2, "num_stages": 4, "poly": 3}
    small = next(c for c in tune.CF_CANDIDATES["bwd"] if c == small)
    large = tune.CF_CANDIDATES["bwd"][3]

    def time_ms(mode, fields, shape):
        L = shape[2] * shape[3]
        if mode == "fwd":
            return 1.0 if fields == fwd_pick else 2.0
        # small wins at L <= 64; large wins the None class only summed over its shapes
        if L <= 64:
            return 1.0 if fields == small else 2.0
        if L == 3136:
            return {id(large): 3.0 if shape[0] == 64 else 1.0, id(small): 2.0}.get(id(fields), 9.0)
        return {id(large): 1.0, id(small): 2.5}.get(id(fields), 9.0)

    new = tune.tune_channels_first(table, time_ms)
    assert new["fwd"]["16bit"][-1][planner.CHANNELS_FIRST] == fwd_pick
    assert new["bwd"]["16bit"][-1][planner.CHANNELS_FIRST] == [
        {"max_span": 64, **small},
        {"max_span": None, **large},
    ]
    for mode in ("fwd", "bwd"):
        assert (
            new[mode]["16bit"][:-1] == table[mode]["16bit"][:-1] and new[mode]["fp32"] == table[mode]["fp32"]
        )
    plan = _cf_plans("bwd", new, (256, 768, 7, 7))
    assert (plan.BLOCK_N, plan.num_warps, plan.poly_terms) == (small["BLOCK_N"], small["num_warps"], 3)
    only_bwd = tune.tune_channels_first(table, time_ms, modes=["bwd"])
    assert only_bwd["fwd"] == table["fwd"] and only_bwd["bwd"] == new["bwd"]
    assert table == _committed("sm90"), "the committed table (and load_table's cached copy) is left as it was"


def test_the_tuner_refuses_unknown_modes_before_looking_for_a_gpu(capsys):
    with pytest.raises(SystemExit) as exit_info:
        tune.main(["--channels-first", "--modes", "fwd,backward"])
    assert (
        exit_info.value.code == 2 and "--modes takes fwd and/or bwd, got backward" in capsys.readouterr().err
    )


def test_the_polynomial_is_chosen_where_the_geometric_mean_of_its_ratios_wins_by_the_margin():
    """Each timer's two polynomials in interleaved rounds; 3 terms where the geometric mean over the
    timers of (time with 3) / (time with 5) is below 1 - POLY_MARGIN (0.99)."""
    for ratios, want in (((0.95,), 3), ((0.995,), 5), ((1.0,), 5), ((1.1,), 5), ((1.0, 0.97), 3),
                         ((1.01, 0.98), 5)):  # fmt: skip
        calls = []

        def make(r, i, calls=calls):
            def timer(n_terms):
                calls.append((i, n_terms))
                return r if n_terms == 3 else 1.0

            return timer

        chosen, measured = tune.poly_choice([make(r, i) for i, r in enumerate(ratios)])
        assert (chosen, measured) == (want, list(ratios)), ratios
        rounds = [
            (i, t) for i in range(len(ratios)) for _ in range(tune.POLY_ROUNDS) for t in planner.POLY_TERMS
        ]
        assert calls == rounds, "each timer's two polynomials alternate, round after round"


def _other_fields(entry: dict) -> dict:
    return {k: v for k, v in entry.items() if k not in ("poly", planner.CHANNELS_FIRST)}


def _poly_plans(table, shape=None, width=None, **kw):
    """(forward, backward) poly_terms: channels-first (N, C, H, W), or bandwidth rows of this width
    (strided, so that narrow rows are not folded into a wider entry's)."""
    over = planner.Overrides(table=table)
    if shape:
        N, C, H, W = shape
        args = (N, C * H * W, 2)
        kw = {**kw, "channel_span": H * W}
    else:
        args = (2**26 // width, width, 2)
        kw = {**kw, "x_stride": 2 * width}
    fwd = planner.plan_forward(*args, target=SM90, overrides=over, **kw)
    return fwd.poly_terms, planner.plan_backward(*args, target=SM90, overrides=over, **kw).poly_terms


def test_the_poly_tune_writes_each_entrys_and_channels_first_choice():
    """With stand-in timers (the real ones need a GPU): 3 terms win the backward at widths up to 256 and
    the channels-first backward at L <= 64, 5 everywhere else. The plans then run what was chosen; the
    forward's fp32_params and folded tiles keep the polynomial they ran; the committed table is left as
    it was."""
    table = planner.load_table("sm90")

    sizes = set()

    def time_entry(mode, bucket, entry, elements):
        sizes.add(elements)
        # 3 terms win the small size only; they win overall where that beats the margin
        wins = mode == "bwd" and (entry["max_width"] or 10**9) <= 256 and elements == tune.POLY_L2_ELEMENTS
        return 0.9 if wins and entry["poly"] == 3 else 1.0

    def time_cf(mode, fields, shape):
        wins = mode == "bwd" and shape[2] * shape[3] <= 64
        return 0.9 if wins and fields["poly"] == 3 else 1.0

    new = tune.tune_poly(table, time_entry, time_cf)
    assert sizes == {2**26, tune.POLY_L2_ELEMENTS}, "rows are timed at the bandwidth shape and the L2 size"
    assert table == _committed("sm90"), "the committed table (and load_table's cached copy) is left as it was"
    for bucket in ("16bit", "fp32"):
        for old, entry in zip(table["bwd"][bucket], new["bwd"][bucket], strict=True):
            assert entry.get("poly", 5) == (3 if (entry["max_width"] or 10**9) <= 256 else 5), entry
            assert _other_fields(entry) == _other_fields(old)
        for old, entry in zip(table["fwd"][bucket], new["fwd"][bucket], strict=True):
            assert "poly" not in entry, entry
            for field in (planner.FP32_PARAMS, planner.FOLDED):
                if field in old:
                    assert entry[field].get("poly", 5) == old[field].get("poly", old.get("poly", 5)), field
    assert _poly_plans(new, width=128) == (5, 3) and _poly_plans(new, width=768) == (5, 5)
    assert _poly_plans(new, shape=(256, 768, 7, 7)) == (5, 3)
    assert _poly_plans(new, shape=(64, 384, 14, 14)) == (5, 5) == _poly_plans(new, shape=(64, 96, 56, 56))
    # the tiles themselves stay: the channels-first backward's tiles per spatial size are the committed ones
    for shape in (s for shapes in tune.CF_SHAPES.values() for s in shapes):
        before, after = _cf_plans("bwd", table, shape), _cf_plans("bwd", new, shape)
        assert (before.BLOCK_M, before.BLOCK_N, before.num_warps, before.grid) == (
            after.BLOCK_M,
            after.BLOCK_N,
            after.num_warps,
            after.grid,
        )
    # an fp32_params tile that inherited its entry's polynomial keeps it when the entry's changes
    inherited = copy.deepcopy(planner.load_table("sm90"))  # the cached table stays as committed
    wide = planner.table_entry(inherited, "fwd", 2, planner.FOLD_WIDTH)
    wide["poly"] = 3
    del wide[planner.FP32_PARAMS]["poly"]
    kept = tune.tune_poly(inherited, lambda m, b, e, n: 1.0, lambda m, f, s: 1.0, modes=["fwd"])
    entry = planner.table_entry(kept, "fwd", 2, planner.FOLD_WIDTH)
    assert "poly" not in entry and entry[planner.FP32_PARAMS]["poly"] == 3


def test_the_tuner_takes_poly_or_channels_first_not_both(capsys):
    with pytest.raises(SystemExit) as exit_info:
        tune.main(["--poly", "--channels-first"])
    assert exit_info.value.code == 2 and "give one of the two" in capsys.readouterr().err


def test_the_poly_note_replaces_the_clause_an_earlier_run_wrote():
    first = tune.poly_note("Written by tune at abc1234", "bwd", "GPU at def5678")
    again = tune.poly_note(first, "fwd,bwd", "GPU at 0123456")
    assert (
        again == "Written by tune at abc1234; poly (fwd,bwd) by `python -m dyt tune --poly` on GPU at 0123456"
    )
    committed = _committed("sm90")["note"]
    assert (
        committed.count(tune.POLY_NOTE) == 1
        and tune.poly_note(committed, "fwd,bwd", "x").count("poly (") == 1
    )


def _compiled(registers, warps, shared):
    """A stand-in for Triton's CompiledKernel: what tune.overfull reads of it."""
    meta = types.SimpleNamespace(num_warps=warps, shared=shared)
    return types.SimpleNamespace(n_regs=registers, metadata=meta)


def test_programs_that_fit_an_sm_follow_registers_threads_programs_and_shared_memory():
    """sm_90's limits, with the registers Triton 3.6 gives the committed tiles on an H200 (docs/kernels.md,
    "Channels-first"): the 16-bit 4x1024 backward tile 2 (255 registers), 2 x 256 on one warp 12 (168), 1 x
    1024 on 4 warps 6 (80); Triton 3.9's 192 and 93 for the last two 10 and 5."""
    fit = tune.programs_that_fit
    assert (fit(255, 4, 32768), fit(168, 1, 6144), fit(80, 4, 12288)) == (2, 12, 6)
    assert (fit(192, 1, 6144), fit(93, 4, 12288)) == (10, 5)
    assert fit(32, 1, 0) == 32, "at most 32 programs an SM, however few registers"
    assert fit(32, 8, 0) == 8, "at most 2048 threads an SM"
    assert fit(32, 1, 100 * 1024) == 2, "shared memory: 228 KiB an SM, 1 KiB of it kept per program"
    assert fit(255, 4, 0, tune.SmLimits(registers=32768)) == 1


def test_a_backward_candidate_whose_programs_do_not_fit_is_named_with_its_registers():
    limits = tune.SmLimits()
    assert tune.overfull(12, [_compiled(168, 1, 6144)], limits) is None
    why = tune.overfull(12, [_compiled(168, 1, 6144), _compiled(192, 1, 6144)], limits)
    assert why == "12 programs per SM, 10 fit (192 registers, 1 warps, 6144 B shared)"


@pytest.mark.gpu_only
def test_the_tuner_does_not_time_backward_candidates_whose_programs_do_not_fit_an_sm():
    """On the GPU: the committed 16-bit 512 entry and channels-first tile are timed; the same at more
    programs per SM than an SM holds at once (threads, programs) are skipped, not timed."""
    table = planner.load_table("sm90")
    entry = {**planner.table_entry(table, "bwd", 2, 512), "max_width": None}
    inputs = tune._rows_inputs("bwd", "16bit", 512, 2**20)
    assert math.isfinite(tune._time("bwd", entry, "16bit", *inputs))
    assert tune._time("bwd", {**entry, "programs_per_sm": 32}, "16bit", *inputs) == math.inf
    tile = {"BLOCK_M": 2, "BLOCK_N": 256, "programs_per_sm": 12, "num_stages": 4, "num_warps": 1, "poly": 3}
    shape = (8, 384, 14, 14)
    assert math.isfinite(tune._time_channels_first(table, "bwd", tile, shape))
    assert tune._time_channels_first(table, "bwd", {**tile, "programs_per_sm": 40}, shape) == math.inf
