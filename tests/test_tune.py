"""tune: the tuner's candidate launch entries are valid table entries, the tables it writes hold launch
choices only, and what it measured goes to its report (timing itself needs a GPU)."""

from __future__ import annotations

import dataclasses
import json
import math
import types

import pytest

from dyt import planner
from dyt.launch_table import (
    BackwardEntry,
    BackwardTile,
    ForwardEntry,
    ForwardTile,
    LaunchTable,
    LaunchTableError,
)
from dyt.service import tune

from helpers import SM90

pytestmark = pytest.mark.tooling


def _committed(arch: str) -> LaunchTable:
    """The table as its file holds it, read afresh (planner.load_table hands out one cached table)."""
    path = planner.TABLES / f"{arch}.json"
    return LaunchTable.from_dict(json.loads(path.read_text()), where=str(path))


def test_the_tables_load_into_frozen_records():
    """planner.load_table parses and checks a table once into frozen, hashable records read by attribute:
    one object per architecture, which no caller can change; to_dict gives back what from_dict read."""
    table = planner.load_table("sm90")
    assert isinstance(table, LaunchTable) and table is planner.load_table("sm90")
    assert set(table.fwd) == set(table.bwd) == {"16bit", "fp32"}
    assert all(type(e) is ForwardEntry for entries in table.fwd.values() for e in entries)
    assert all(type(e) is BackwardEntry for entries in table.bwd.values() for e in entries)
    wide = planner.table_entry(table, "fwd", 2, 4096)
    assert (wide.BLOCK_M, wide.BLOCK_N, wide.num_warps, wide.sign, wide.poly) == (4, 1024, 4, "bitwise", 3)
    assert wide.fp32_params == ForwardTile(BLOCK_M=2, BLOCK_N=1024, num_warps=2, min_elements=2**24)
    assert all(type(c) is BackwardTile for c in table.bwd["16bit"][-1].channels_first)
    with pytest.raises(dataclasses.FrozenInstanceError):
        wide.BLOCK_M = 8
    with pytest.raises(TypeError):
        table.fwd["16bit"] = ()
    assert hash(table) == hash(_committed("sm90")) and table == _committed("sm90")
    assert LaunchTable.from_dict(table.to_dict()) == table
    assert planner.load_table("sm100").arch == "default", "an architecture without a table takes default's"


def _edited(change) -> dict:
    """The sm90 table's dict with change(dict) applied."""
    data = planner.load_table("sm90").to_dict()
    change(data)
    return data


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(note="Written by tune"), r"the table has unknown key\(s\) 'note'"),
        (
            lambda d: d["fwd"]["16bit"][2].update(median_us=71.2),
            r"fwd 16bit entry 2 \(max_width 256\) has unknown key\(s\) 'median_us'",
        ),
        (
            lambda d: d["bwd"]["fp32"][0].update(BLOCK_N="64"),
            r"bwd fp32 entry 0 \(max_width 64\): a backward entry's BLOCK_N must be an integer, got '64'",
        ),
        (lambda d: d["fwd"]["fp32"][1].update(BLOCK_M=3), r"forward entry's BLOCK_M must be a power of two"),
        (lambda d: d["fwd"]["fp32"][1].update(sign="maybe"), r"forward entry's sign must be one of"),
        (lambda d: d["bwd"]["16bit"][1].update(poly=4), r"a backward entry's poly must be one of \(5, 3\)"),
        (lambda d: d["bwd"]["16bit"][1].update(row_order=None), r"row_order must be one of"),
        (
            lambda d: d["bwd"]["16bit"][1].pop("num_stages"),
            r"bwd 16bit entry 1 \(max_width 128\) lacks num_stages",
        ),
        (
            lambda d: d["fwd"]["16bit"][5]["fp32_params"].update(programs_per_sm=2),
            r"fwd 16bit entry 5 \(max_width 1024\)'s fp32_params has unknown key\(s\) 'programs_per_sm'",
        ),
        (lambda d: d["fwd"]["16bit"][5]["folded"].update(max_span=64), r"folded takes no max_span"),
        (
            lambda d: d["fwd"]["16bit"][-1].update(channels_first={"BLOCK_M": 8}),
            r"channels_first must be a list of tiles by max_span",
        ),
        (
            lambda d: d["bwd"]["16bit"][-1]["channels_first"].reverse(),
            r"channels_first choices need rising max_span values",
        ),
        (lambda d: d["bwd"]["fp32"].pop(), r"bwd fp32: max_width must rise, null only last"),
        (lambda d: d["fwd"].pop("fp32"), r"fwd must hold the buckets \('16bit', 'fp32'\)"),
    ],
    ids=lambda v: "" if callable(v) else v[:40],
)
def test_a_table_that_breaks_a_rule_is_refused_naming_its_file_and_entry(change, message):
    with pytest.raises(LaunchTableError, match=r"^dyt/tables/sm90\.json: .*" + message):
        LaunchTable.from_dict(_edited(change), where="dyt/tables/sm90.json")


def test_plans_take_a_launch_table_and_modified_tables_are_new_records():
    """Overrides.table takes a LaunchTable, not a dict; a test's modified table is a new record (replace,
    map_entries, single), checked as it is made, and the committed one stays as it was."""
    with pytest.raises(TypeError, match="takes a LaunchTable"):
        planner.Overrides(table=planner.load_table("sm90").to_dict())
    committed = planner.load_table("sm90")
    bitwise = committed.map_entries(lambda e: dataclasses.replace(e, sign="bitwise"), modes=("fwd",))
    over = planner.Overrides(table=bitwise)
    rows = (4096, 256, 2)  # padded rows of 256: the 256 entry's own, whose sign is a select
    assert not planner.plan_forward(*rows, x_stride=512, target=SM90, overrides=over).sign_select
    assert planner.plan_forward(*rows, x_stride=512, target=SM90).sign_select
    with pytest.raises(LaunchTableError, match="a forward entry's poly must be one of"):
        committed.map_entries(lambda e: dataclasses.replace(e, poly=4), modes=("fwd",))
    one = LaunchTable.single(
        ForwardEntry(max_width=64, BLOCK_M=2, BLOCK_N=64, num_warps=1),
        BackwardEntry(max_width=64, BLOCK_M=2, BLOCK_N=64, num_warps=1, programs_per_sm=1, num_stages=2),
    )
    plan = planner.plan_forward(10, 5000, 4, target=SM90, overrides=planner.Overrides(table=one))
    assert (plan.BLOCK_M, plan.BLOCK_N, plan.n_col_blocks, plan.poly_terms) == (2, 64, 79, 5)
    assert committed == _committed("sm90")


# Representative plans of the sm90 table on 132 SMs: (N seen, BLOCK_M, BLOCK_N, num_warps, programs, poly
# terms[, num_stages, strided]). Forward: rows, float32 parameters, folded 64, 768 in blocks of 256,
# channels-first, float32 x; backward: rows, 768 folded into 3072, channels-first at L = 49, float32.
REPRESENTATIVE = [
    ("fwd", (4096, 4096, 2), {}, (4096, 4, 1024, 4, 4096, 3)),
    ("fwd", (4096, 4096, 2), {"param_itemsize": 4}, (4096, 2, 1024, 2, 8192, 3)),
    ("fwd", (262144, 64, 2), {}, (1024, 2, 1024, 4, 8192, 3)),
    ("fwd", (50432, 768, 2), {}, (768, 16, 256, 4, 9456, 3)),
    ("fwd", (64, 96 * 3136, 2), {"channel_span": 3136}, (301056, 4, 256, 2, 18816, 3)),
    ("fwd", (2048, 4096, 4), {}, (4096, 1, 1024, 4, 8192, 5)),
    ("bwd", (4096, 4096, 2), {}, (4096, 4, 1024, 4, 256, 3, 3, True)),
    ("bwd", (50432, 768, 2), {}, (3072, 4, 1024, 4, 264, 3, 3, True)),
    ("bwd", (256, 768 * 49, 2), {"channel_span": 49}, (37632, 1, 256, 1, 1470, 3, 4, True)),
    ("bwd", (2048, 4096, 4), {}, (4096, 2, 512, 4, 392, 5, 3, True)),
]


@pytest.mark.parametrize(("mode", "shape", "kw", "want"), REPRESENTATIVE, ids=str)
def test_representative_plans_keep_their_tiles(mode, shape, kw, want):
    """The plans these shapes got when the table was untyped JSON read by key: typed records plan the same."""
    plan = (planner.plan_forward if mode == "fwd" else planner.plan_backward)(*shape, target=SM90, **kw)
    got = (plan.N, plan.BLOCK_M, plan.BLOCK_N, plan.num_warps, plan.grid[0], plan.poly_terms)
    if mode == "bwd":
        got += (plan.num_stages, plan.strided)
    assert got == want


@pytest.mark.parametrize("arch", ["sm90", "default"])
def test_the_committed_tables_are_what_the_tuner_writes(arch):
    """Each committed table is the text tune.write_table gives its records: launch choices only, every
    entry's own fields spelled out, so that a retune's diff shows choices that changed and nothing else."""
    text = (planner.TABLES / f"{arch}.json").read_text()
    assert tune.table_text(planner.load_table(arch)) == text
    for mode in ("fwd", "bwd"):
        for entries in json.loads(text)[mode].values():
            assert all("median_us" not in e and "note" not in e for e in entries)


def test_the_tuner_writes_its_measurements_to_a_report_not_the_table(tmp_path, monkeypatch):
    """The report holds the command, the table written, where it ran and one record per choice with its
    times; the table holds the choices."""
    monkeypatch.setenv("DYT_REPORTS", str(tmp_path))
    assert tune.report_path("sm90", "poly") == tmp_path / "tune" / "sm90-poly.json"
    measured = [{"mode": "fwd", "bucket": "16bit", "max_width": 64, "median_us": 69.87}]
    out = tmp_path / "sm90.json"
    tune.write_table(out, planner.load_table("sm90"))
    path = tune.report_path("sm90", "rows")
    tune.write_report(path, "rows", ["--widths", "64"], out, measured)
    report = json.loads(path.read_text())
    assert report["command"] == "python -m dyt tune --widths 64" and report["table"] == str(out)
    assert report["measured"] == measured and report["commit"] and "gpu_name" in report["env"]
    assert LaunchTable.from_dict(json.loads(out.read_text())) == planner.load_table("sm90")


@pytest.mark.parametrize("mode", ["fwd", "bwd"])
@pytest.mark.parametrize("width", [w or 16384 for w in tune.WIDTH_BUCKETS])
def test_every_candidate_plans(mode, width):
    """Each candidate, put in a table alone, gives a plan that covers the bandwidth shape (and, forward,
    takes the candidate's polynomial: the tuner times both, dyt.tune.POLYS)."""
    rows = 2**26 // width
    for entry in tune.candidates(mode, width):
        over = planner.Overrides(table=tune.table_of_one(mode, entry))
        if mode == "fwd":
            plan = planner.plan_forward(rows, width, 2, target=SM90, overrides=over)
            assert plan.poly_terms == entry.poly
        else:
            plan = planner.plan_backward(rows, width, 2, target=SM90, overrides=over)
            assert plan.num_stages == entry.num_stages
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
        over = planner.Overrides(table=tune.table_of_one(mode, entry))
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
    block_ns = {c.BLOCK_N for c in tune.candidates("bwd", 2048)}
    assert {512, 1024} <= block_ns
    assert {c.BLOCK_N for c in tune.candidates("bwd", 1024)} == {1024}


def test_a_retune_keeps_the_hand_set_fields_of_the_entry_it_replaces():
    """copies_as_rows matters only where a bucket's entry serves folded narrower widths, which timing the
    bucket's own width cannot see: the sm90 16-bit backward's 1024 entry keeps it, other buckets get none.
    Likewise fp32_params, which only float32 parameters on 16-bit x use, and the forward's folded tile."""
    table = planner.load_table("sm90")
    best = tune.candidates("bwd", 1024)[0]
    current = planner.table_entry(table, "bwd", 2, 1024)
    assert current.copies_as_rows == 4 and current.poly == 3
    entry = tune.tuned_entry(best, current, 1024, "bwd")
    assert entry == dataclasses.replace(best, copies_as_rows=4, poly=3, max_width=1024)
    # the backward's poly is `tune --poly`'s (its candidates leave it out); the forward's candidates try both
    assert tune.tuned_entry(best, current, 1024, "fwd").poly == best.poly == 5
    wider = tune.tuned_entry(best, planner.table_entry(table, "bwd", 2, 2048), 2048)
    assert wider.copies_as_rows == 0
    # fp32_params (the forward's tile for float32 parameters on 16-bit x) is timed by no retune either
    fwd_current = planner.table_entry(table, "fwd", 2, 4096)
    fwd_entry = tune.tuned_entry(tune.candidates("fwd", 4096)[0], fwd_current, 4096)
    assert fwd_entry.fp32_params == fwd_current.fp32_params is not None
    fp32_entry = tune.tuned_entry(
        tune.candidates("fwd", 4096)[0], planner.table_entry(table, "fwd", 4, 4096), 4096
    )
    assert fp32_entry.fp32_params is None
    # folded (the forward's tile for rows folded from narrower widths) likewise, in the 1024 entry only
    fwd_1024 = planner.table_entry(table, "fwd", 2, 1024)
    kept = tune.tuned_entry(tune.candidates("fwd", 1024)[0], fwd_1024, 1024)
    assert kept.folded == fwd_1024.folded is not None
    assert fwd_entry.folded is None


def test_every_committed_entry_is_one_the_tuner_tries():
    """The sm90 table is data the tuner can write again: each entry (hand-set fields and the backward's
    poly aside) is among its width bucket's candidates, so a retune can keep it (a hand-made choice widens
    the search first). The default table is hand-written for GPUs nobody tuned, in fewer fields."""
    arch = "sm90"
    table = planner.load_table(arch)
    for mode in ("fwd", "bwd"):
        for bucket, entries in getattr(table, mode).items():
            for entry in entries:
                not_knobs = ("max_width", *tune.HAND_SET, *(tune.BWD_KEPT if mode == "bwd" else ()))
                knobs = {k: v for k, v in entry.to_dict().items() if k not in not_knobs}
                tried = [{k: v for k, v in c.to_dict().items() if k not in not_knobs}
                         for c in tune.candidates(mode, entry.max_width or 16384)]  # fmt: skip
                assert knobs in tried, f"{arch} {mode} {bucket} width<={entry.max_width}: {knobs}"


@pytest.mark.parametrize("mode", ["fwd", "bwd"])
@pytest.mark.parametrize("width", [w or 16384 for w in tune.WIDTH_BUCKETS])
def test_no_candidate_is_timed_twice(mode, width):
    """A block wider than the row shrinks to the row's width, so it would repeat a narrower candidate."""
    knobs = ("sign", "poly", "programs_per_sm", "row_order", "num_stages", "num_warps")
    shapes = [
        (planner.tile_shape(c, width), *(getattr(c, k, None) for k in knobs))
        for c in tune.candidates(mode, width)
    ]
    assert len(shapes) == len(set(shapes))


def _cf_plans(mode: str, table: LaunchTable, shape):
    N, C, H, W = shape
    over = planner.Overrides(table=table)
    plan = planner.plan_forward if mode == "fwd" else planner.plan_backward
    return plan(N, C * H * W, 2, channel_span=H * W, target=SM90, overrides=over)


@pytest.mark.parametrize("mode", ["fwd", "bwd"])
def test_every_channels_first_candidate_plans_at_its_shapes(mode):
    """Each channels_first candidate, as the widest 16-bit entry's field, plans every shape the tuner
    times it at with its own tile (the backward's BLOCK_N cut by the slot rule, the tile's size kept)."""
    table = planner.load_table("sm90")
    entry = getattr(table, mode)["16bit"][-1]
    for fields in tune.CF_CANDIDATES[mode]:
        swapped = tune.with_channels_first(table, mode, fields)
        for shape in (s for shapes in tune.CF_SHAPES.values() for s in shapes):
            plan = _cf_plans(mode, swapped, shape)
            want = (fields.BLOCK_M or entry.BLOCK_M, fields.BLOCK_N or entry.BLOCK_N)
            assert plan.BLOCK_M * plan.BLOCK_N == want[0] * want[1] and plan.BLOCK_N <= want[1], (
                fields,
                shape,
            )
            assert plan.num_warps == (fields.num_warps or entry.num_warps)
            if mode == "bwd":
                assert plan.num_stages == (fields.num_stages or entry.num_stages)
            assert plan.poly_terms == (fields.poly or entry.poly)
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
        entry = getattr(table, mode)["16bit"][-1]
        for max_span in tune.CF_SHAPES:
            span = tune.CF_SHAPES[max_span][0][2] * tune.CF_SHAPES[max_span][0][3]
            assert planner.channels_first_variant(entry, span) in tune.CF_CANDIDATES[mode], (mode, max_span)


def test_neighbouring_span_classes_with_one_choice_merge():
    a, b = tune.CF_CANDIDATES["bwd"][1], tune.CF_CANDIDATES["bwd"][2]
    span = dataclasses.replace
    assert tune.channels_first_field([(64, a), (256, a), (None, b)]) == (span(a, max_span=256), b)
    assert tune.channels_first_field([(64, a), (256, b), (None, a)]) == (
        span(a, max_span=64),
        span(b, max_span=256),
        a,
    )
    assert tune.channels_first_field([(64, b), (256, b), (None, b)]) == (b,)


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
    assert tuned.bwd["16bit"][-1].channels_first == (steady,)
    calls.clear()
    once = tune.tune_channels_first(table, time_ms, modes=["bwd"], rounds=1).bwd["16bit"][-1]
    assert once.channels_first != (steady,)


def test_the_channels_first_tune_writes_the_fastest_candidate_per_class():
    """With a stand-in timer (the real one needs a GPU): each class takes the candidate with the least time
    summed over its shapes, in the widest 16-bit entries only; plans then follow the new fields."""
    table = planner.load_table("sm90")
    fwd_pick = tune.CF_CANDIDATES["fwd"][2]
    small = BackwardTile(BLOCK_M=1, BLOCK_N=256, programs_per_sm=24, num_warps=2, num_stages=4, poly=3)
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

    measured = []
    new = tune.tune_channels_first(table, time_ms, measured=measured)
    assert new.fwd["16bit"][-1].channels_first == (fwd_pick,)
    assert new.bwd["16bit"][-1].channels_first == (dataclasses.replace(small, max_span=64), large)
    for mode in ("fwd", "bwd"):
        old, now = getattr(table, mode), getattr(new, mode)
        assert now["16bit"][:-1] == old["16bit"][:-1] and now["fp32"] == old["fp32"]
    plan = _cf_plans("bwd", new, (256, 768, 7, 7))
    assert (plan.BLOCK_N, plan.num_warps, plan.poly_terms) == (small.BLOCK_N, small.num_warps, 3)
    only_bwd = tune.tune_channels_first(table, time_ms, modes=["bwd"])
    assert only_bwd.fwd == table.fwd and only_bwd.bwd == new.bwd
    assert table == _committed("sm90"), "the committed table (and load_table's cached copy) is left as it was"
    # what it measured goes to the report: one record per mode and class, the choice and its time
    assert [(m["mode"], m["max_span"]) for m in measured] == [
        (mode, span) for mode in ("fwd", "bwd") for span in tune.CF_SHAPES
    ]
    assert measured[0]["chosen"] == tune.candidate_name(fwd_pick) and measured[0]["us"] == 2000.0


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


def _other_fields(entry):
    return dataclasses.replace(entry, poly=5, channels_first=())


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
        wins = mode == "bwd" and (entry.max_width or 10**9) <= 256 and elements == tune.POLY_L2_ELEMENTS
        return 0.9 if wins and entry.poly == 3 else 1.0

    def time_cf(mode, fields, shape):
        wins = mode == "bwd" and shape[2] * shape[3] <= 64
        return 0.9 if wins and fields.poly == 3 else 1.0

    measured = []
    new = tune.tune_poly(table, time_entry, time_cf, measured=measured)
    assert sizes == {2**26, tune.POLY_L2_ELEMENTS}, "rows are timed at the bandwidth shape and the L2 size"
    assert table == _committed("sm90"), "the committed table (and load_table's cached copy) is left as it was"
    for bucket in ("16bit", "fp32"):
        for old, entry in zip(table.bwd[bucket], new.bwd[bucket], strict=True):
            assert entry.poly == (3 if (entry.max_width or 10**9) <= 256 else 5), entry
            assert _other_fields(entry) == _other_fields(old)
        for old, entry in zip(table.fwd[bucket], new.fwd[bucket], strict=True):
            assert entry.poly == 5, entry
            for field in (planner.FP32_PARAMS, planner.FOLDED):
                if getattr(old, field) is not None:
                    ran = getattr(old, field).poly or old.poly
                    assert (getattr(entry, field).poly or entry.poly) == ran, field
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
    # the report gets each choice with its ratios: every entry of both modes, then the channels-first classes
    rows = sum(len(entries) for mode in ("fwd", "bwd") for entries in getattr(table, mode).values())
    assert len(measured) == rows + 2 * len(tune.CF_SHAPES)
    assert measured[-1]["mode"] == "bwd" and measured[-1]["poly"] == 5 and measured[-1]["ratios_3_to_5"]

    # an fp32_params tile that inherited its entry's polynomial keeps it when the entry's changes
    def inherit(entry):
        if entry.fp32_params is None or entry.max_width != planner.FOLD_WIDTH:
            return entry
        return dataclasses.replace(
            entry, poly=3, fp32_params=dataclasses.replace(entry.fp32_params, poly=None)
        )

    inherited = table.map_entries(inherit, modes=("fwd",), buckets=("16bit",))
    assert planner.table_entry(inherited, "fwd", 2, planner.FOLD_WIDTH).fp32_params.poly is None
    kept = tune.tune_poly(inherited, lambda m, b, e, n: 1.0, lambda m, f, s: 1.0, modes=["fwd"])
    entry = planner.table_entry(kept, "fwd", 2, planner.FOLD_WIDTH)
    assert entry.poly == 5 and entry.fp32_params.poly == 3


def test_the_tuner_takes_poly_or_channels_first_not_both(capsys):
    with pytest.raises(SystemExit) as exit_info:
        tune.main(["--poly", "--channels-first"])
    assert exit_info.value.code == 2 and "give one of the two" in capsys.readouterr().err


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
    entry = dataclasses.replace(planner.table_entry(table, "bwd", 2, 512), max_width=None)
    inputs = tune._rows_inputs("bwd", "16bit", 512, 2**20)
    assert math.isfinite(tune._time("bwd", entry, "16bit", *inputs))
    assert tune._time("bwd", dataclasses.replace(entry, programs_per_sm=32), "16bit", *inputs) == math.inf
    tile = BackwardTile(BLOCK_M=2, BLOCK_N=256, programs_per_sm=12, num_stages=4, num_warps=1, poly=3)
    shape = (8, 384, 14, 14)
    assert math.isfinite(tune._time_channels_first(table, "bwd", tile, shape))
    assert (
        tune._time_channels_first(table, "bwd", dataclasses.replace(tile, programs_per_sm=40), shape)
        == math.inf
    )
