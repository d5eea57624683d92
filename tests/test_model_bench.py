"""tooling: the model benchmark's harness on CPU (dyt/service/model_bench.py), its rows in the gate and the
report.

The model is the project's narrow transformer at a tiny size; clocks are the wall clock (real steps) or a
scripted clock that returns set times per variant, so the interleaving and the ratio arithmetic are exact.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn

from dyt.service import bench, gate, model_bench, report
from dyt.service.peers import ChannelsFirst, EagerDyT
from dyt.service.run_control import BenchStopped

pytestmark = pytest.mark.tooling

ROOT = Path(__file__).resolve().parents[1]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
EAGER_VARIANTS = ["norm", "eager", "dyt", "liger"]
FAST = model_bench.Settings(rounds=3, steps=2, warmup=1)


def tiny_spec(**kw):
    args = {"tokens": 8, "width": 16, "depth": 1, "heads": 2, "batches": (2,), "compiled_batches": (2,),
            "name": "narrow_tiny"} | kw  # fmt: skip
    return model_bench.narrow_spec(**args)


def _case(**kw):
    return model_bench.Case(tiny_spec(**kw), 2, False)


class ScriptedClock:
    """Step time = TIMES[variant] (+ the round, so rounds differ); records the order of the timed calls.
    stop_after: raise BenchStopped on that call (counting every call, warm-up included)."""

    def __init__(self, times: dict[str, float], stop_after: int | None = None):
        self.times, self.stop_after, self.calls, self.order = times, stop_after, 0, []

    def time(self, fn):
        self.calls += 1
        if self.stop_after is not None and self.calls >= self.stop_after:
            raise BenchStopped("SIGTERM")
        fn()
        self.order.append((fn.mode, fn.variant))
        ms = self.times[fn.variant] * (
            1 + 0.5 * sum(1 for m, v in self.order if v == fn.variant and m == fn.mode)
        )
        return ms, ms / 10

    def peak_mb(self, fn):
        fn()
        return 1.0


# ---------------------------------------------------------------------------------------------- surgery


class LayerNorm2d(nn.LayerNorm):
    """timm's class of the same name: a LayerNorm over C of (N, C, H, W)."""

    def forward(self, x):
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class LlamaRMSNorm(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(c))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


def test_replace_norms_by_kind():
    model = nn.Sequential(nn.Conv2d(3, 8, 1), LayerNorm2d(8), nn.Sequential(nn.LayerNorm(8), LlamaRMSNorm(8)))
    replaced = model_bench.replace_norms(model, lambda c, **kw: EagerDyT(c, **kw))
    assert replaced == {"LayerNorm2d": 1, "LayerNorm": 1, "LlamaRMSNorm": 1}
    first, last, rms = model[1], model[2][0], model[2][1]
    assert (first.channels_last, first.bias is not None) == (False, True)
    assert (last.channels_last, last.bias is not None) == (True, True)
    assert (rms.channels_last, rms.bias) == (True, None)  # the LLaMA recipe: DyT without beta
    x = torch.randn(2, 8, 4, 4)
    torch.testing.assert_close(first(x), last(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2))


def test_eager_dyt_is_the_papers_module():
    m = EagerDyT(4, channels_last=False)
    assert m.alpha.tolist() == [0.5] and m.weight.tolist() == [1.0] * 4 and m.bias.tolist() == [0.0] * 4
    with torch.no_grad():
        m.weight.copy_(torch.arange(4.0))
        m.bias.fill_(0.25)
    x = torch.randn(2, 4, 3, 3)
    ref = torch.tanh(0.5 * x) * torch.arange(4.0)[:, None, None] + 0.25
    torch.testing.assert_close(m(x), ref, rtol=0, atol=0)
    wrapped = ChannelsFirst(EagerDyT(4))
    wrapped.inner.load_state_dict(m.state_dict())
    torch.testing.assert_close(wrapped(x), ref, rtol=0, atol=1e-7)


# ----------------------------------------------------------------------------------------- the harness


def test_rows_on_cpu_with_the_wall_clock():
    """Real steps of every variant: the record format, the norms replaced, liger a skipped row here."""
    rows = model_bench.run_model_case(_case(), EAGER_VARIANTS, ["train", "infer"], "cpu",
                                      model_bench.WallClock(), FAST, seed=3)  # fmt: skip
    assert [(r["mode"], r["variant"]) for r in rows] == [
        (m, v) for m in ("train", "infer") for v in EAGER_VARIANTS
    ]
    for row in rows:
        assert set(row) == set(model_bench._row(_case(), "dyt", "train", FAST))
        assert (row["model"], row["batch"], row["autocast"], row["norm"]) == (
            "narrow_tiny",
            2,
            "bfloat16",
            "LayerNorm",
        )
        if row["variant"] == "liger":  # its kernels take CUDA tensors alone
            assert "CUDA tensors only" in row["skipped"] and row["median_ms"] is None
            continue
        assert row["error"] is None and row["rounds"] == 3 and len(row["round_ms"]) == 3
        assert row["median_ms"] > 0 and row["host_ms"] > 0 and row["first_call_s"] > 0
        assert row["replaced"] == (0 if row["variant"] == "norm" else 3)  # 2 per block + the final norm
    dyt_train = next(r for r in rows if r["variant"] == "dyt" and r["mode"] == "train")
    assert {"norm", "eager"} <= set(dyt_train["speedup_vs"])
    for other, s in dyt_train["speedup_vs"].items():
        theirs = next(r for r in rows if r["variant"] == other and r["mode"] == "train")["round_ms"]
        assert s["rounds"] == pytest.approx(
            [t / m for t, m in zip(theirs, dyt_train["round_ms"], strict=True)]
        )
        assert s["min"] <= s["median"] <= s["max"]
    assert all(not r["speedup_vs"] for r in rows if r["variant"] != "dyt")


def test_rounds_interleave_and_ratios_are_per_round():
    clock = ScriptedClock({"norm": 2.0, "eager": 4.0, "dyt": 1.0})
    variants = ["norm", "eager", "dyt"]
    rows = model_bench.run_model_case(_case(), variants, ["train"], "cpu", clock,
                                      model_bench.Settings(rounds=3, steps=1, warmup=1))  # fmt: skip
    timed = [v for _, v in clock.order[len(variants) :]]  # after one warm-up call each
    # every round times every variant once, starting one later each round
    assert timed == ["norm", "eager", "dyt", "eager", "dyt", "norm", "dyt", "norm", "eager"]
    dyt_row = next(r for r in rows if r["variant"] == "dyt")
    # the k-th timed call of a variant takes TIMES * (1 + 0.5 k), k counted from the warm-up (k=1)
    assert dyt_row["round_ms"] == [1.0 * 2.0, 1.0 * 2.5, 1.0 * 3.0]
    assert dyt_row["speedup_vs"]["norm"]["rounds"] == pytest.approx([2.0, 2.0, 2.0])
    assert dyt_row["speedup_vs"]["eager"] == {
        "median": 4.0,
        "min": 4.0,
        "max": 4.0,
        "rounds": [4.0, 4.0, 4.0],
    }
    assert dyt_row["host_ms"] == pytest.approx(0.25) and dyt_row["peak_mem_mb"] == 1.0


def test_round_ratios_median_and_spread():
    got = model_bench.round_ratios({"dyt": [1.0, 2.0, 4.0], "eager": [2.0, 2.0, 2.0], "norm": []}, "dyt",
                                   ["eager", "norm"])  # fmt: skip
    assert got == {"eager": {"median": 1.0, "min": 0.5, "max": 2.0, "rounds": [2.0, 1.0, 0.5]}}


def test_a_failing_variant_is_a_row():
    def broken(c, **kw):
        raise RuntimeError("Triton Error [CUDA]: invalid argument")

    class Exploding(nn.Module):
        def forward(self, x):
            raise torch.OutOfMemoryError("CUDA out of memory")

    variants = dict(model_bench.VARIANTS)
    variants["broken"] = model_bench.Variant("broken", broken)
    variants["oom"] = model_bench.Variant("oom", lambda c, **kw: Exploding())
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(model_bench, "VARIANTS", variants)
        rows = model_bench.run_model_case(_case(), ["norm", "broken", "oom", "dyt"], ["train"], "cpu",
                                          model_bench.WallClock(), FAST)  # fmt: skip
    by = {r["variant"]: r for r in rows}
    assert by["broken"]["error"] == "setup: RuntimeError: Triton Error [CUDA]: invalid argument"
    assert by["oom"]["error"] == "OutOfMemoryError: CUDA out of memory"
    assert by["norm"]["error"] is None and by["dyt"]["error"] is None and by["dyt"]["rounds"] == 3
    assert set(by["dyt"]["speedup_vs"]) == {"norm"}


def test_a_model_whose_library_is_missing_is_skipped_with_the_reason():
    specs = model_bench.model_specs()
    if any(__import__("importlib").util.find_spec(m) for m in ("timm",)):
        pytest.skip("timm imports here; the skip path is for machines without it")
    case = model_bench.Case(specs["vit_s16"], 8, False)
    rows = model_bench.run_model_case(
        case, EAGER_VARIANTS, ["train", "infer"], "cpu", model_bench.WallClock(), FAST
    )
    assert len(rows) == 8
    assert all(r["skipped"].startswith("ViT-S/16 needs a library that does not import") for r in rows)
    assert all("timm" in r["skipped"] and r["median_ms"] is None and r["error"] is None for r in rows)


def test_a_stop_keeps_the_rows_finished():
    """A stop in the second mode: the first mode's rows stay, the second keeps its complete rounds."""
    variants = ["norm", "eager", "dyt"]
    settings = model_bench.Settings(rounds=3, steps=1, warmup=1)
    per_mode = 3 + 3 * 3  # warm-up calls + timed calls
    clock = ScriptedClock({"norm": 2.0, "eager": 4.0, "dyt": 1.0}, stop_after=per_mode + 3 + 3 + 2)
    cases = [_case(), model_bench.Case(tiny_spec(), 4, False)]
    stopped = []
    rows = model_bench.run_all(cases, variants, ["train", "infer"], "cpu", clock, settings, 0, stopped)
    assert stopped == ["SIGTERM"]
    assert [(r["mode"], r["variant"], r["rounds"]) for r in rows] == [
        *[("train", v, 3) for v in variants],
        *[("infer", v, 1) for v in variants],  # the second round was cut: one complete round each
    ]
    assert rows[-1]["speedup_vs"]["norm"]["rounds"] == pytest.approx([2.0 * 1.5 / 1.5])
    with pytest.raises(BenchStopped):
        model_bench.run_all(
            cases, variants, ["train"], "cpu", ScriptedClock(clock.times, stop_after=2), settings
        )


def test_plan_cases_puts_the_compiles_last():
    spec = tiny_spec(batches=(2, 4), compiled_batches=(4,))
    cases = model_bench.plan_cases([spec], list(model_bench.VARIANTS))
    assert [(c.batch, c.compiled) for c in cases] == [(2, False), (4, False), (4, True)]
    assert [(c.batch, c.compiled) for c in model_bench.plan_cases([spec], ["norm", "dyt"])] == [
        (2, False),
        (4, False),
    ]
    assert len(model_bench.plan_cases([spec], list(model_bench.VARIANTS), "all")) == 4
    assert len(model_bench.plan_cases([spec], list(model_bench.VARIANTS), "none")) == 2


def _torchao():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pytest.importorskip(
            "torchao.float8",
            reason="torchao is not installed: pip install 'dyt[fp8]' (nox -s tests installs it)",
        )


FP8_VARIANTS = ["fp8_eager", "fp8_dyt_cast", "fp8_dyt"]


def test_fp8_variants_take_a_training_step():
    """torchao's float8 linear layers (emulated on the CPU) behind each norm: the paper's module and dyt's
    conversion casting through torchao, and dyt's norms wired to write FP8; fp8_dyt's ratios are over those
    two only, dyt's over the 16-bit variants only."""
    _torchao()
    variants = ["norm", "dyt", *FP8_VARIANTS]
    rows = model_bench.run_model_case(_case(), variants, ["train"], "cpu", model_bench.WallClock(),
                                      model_bench.Settings(rounds=1, steps=1, warmup=1))  # fmt: skip
    by = {r["variant"]: r for r in rows}
    assert list(by) == variants
    for name in FP8_VARIANTS:
        row = by[name]
        assert row["error"] is None and row["skipped"] is None and row["median_ms"] > 0, row
        assert row["replaced"] == 3 and row["float8_linears"] == 5  # qkv, proj, fc1, fc2, head
    assert [by[n]["wired"] for n in FP8_VARIANTS] == [0, 0, 3]  # norm1, norm2 and the final norm
    assert by["fp8_dyt"]["float8_kept"] == {} and by["fp8_eager"]["float8_kept"] == {}
    assert set(by["fp8_dyt"]["speedup_vs"]) == {"fp8_eager", "fp8_dyt_cast"}
    assert set(by["dyt"]["speedup_vs"]) == {"norm"} and by["dyt"]["wired"] is None
    assert not by["fp8_dyt_cast"]["speedup_vs"]  # torchao casts its norms' output: a peer, not ours


def test_compiled_fp8_variants_take_a_step():
    """The compiled FP8 variants built as the compile_* ones are (torch.compile of the whole model) and run;
    one inference step each keeps the compile time of the test short."""
    _torchao()
    variants = [f"compile_{n}" for n in FP8_VARIANTS]
    rows = model_bench.run_model_case(model_bench.Case(tiny_spec(), 2, True), variants, ["infer"], "cpu",
                                      model_bench.WallClock(),
                                      model_bench.Settings(rounds=1, steps=1, warmup=1))  # fmt: skip
    by = {r["variant"]: r for r in rows}
    assert list(by) == variants
    for name in variants:
        assert by[name]["error"] is None and by[name]["median_ms"] > 0 and by[name]["compiled"], by[name]
        assert by[name]["float8_linears"] == 5
    assert [by[n]["wired"] for n in variants] == [0, 0, 3]
    assert set(by["compile_fp8_dyt"]["speedup_vs"]) == {"compile_fp8_eager", "compile_fp8_dyt_cast"}


def test_fp8_variants_run_only_when_named():
    from dyt.service import cli

    args = cli._parser().parse_args(["bench", "--suite", "models"])
    assert model_bench._split(args.variants) == list(model_bench.DEFAULT_VARIANTS)
    assert not [v for v in model_bench.DEFAULT_VARIANTS if "fp8" in v]
    fp8 = [*FP8_VARIANTS, *(f"compile_{n}" for n in FP8_VARIANTS)]
    assert [v for v in model_bench.VARIANTS if v not in model_bench.DEFAULT_VARIANTS] == fp8
    spec = tiny_spec(batches=(2, 4), compiled_batches=(4,))
    assert [(c.batch, c.compiled) for c in model_bench.plan_cases([spec], fp8)] == [
        (2, False),
        (4, False),
        (4, True),
    ]


# ------------------------------------------------------------------------------------------ the records


@functools.cache
def _measured_rows() -> tuple:
    clock = ScriptedClock({"norm": 2.0, "eager": 3.0, "dyt": 1.5})
    return tuple(
        model_bench.run_model_case(_case(), ["norm", "eager", "dyt"], ["train", "infer"], "cpu", clock, FAST)
    )


def _model_rows() -> list[dict]:
    return copy.deepcopy(list(_measured_rows()))


def test_rows_go_beside_the_kernel_rows(tmp_path):
    kernel = json.loads((ROOT / "tests/fixtures/reports/perf/nvidia-h200-abc1234.json").read_text())
    path = tmp_path / "nvidia-h200-abc1234.json"
    path.write_text(json.dumps(kernel))
    rows = _model_rows()
    model_bench.write_rows(path, {"gpu_name": "other"}, rows, {"rounds": 3}, None)
    data = json.loads(path.read_text())
    assert data["env"] == kernel["env"] and data["records"] == kernel["records"]  # the kernel run's env block
    assert data["model_records"] == json.loads(json.dumps(rows)) and "model_incomplete" not in data
    model_bench.write_rows(path, {}, rows[:2], {}, {"rows": 2, "of": 6, "stopped_by": "time limit"})
    assert json.loads(path.read_text())["model_incomplete"]["stopped_by"] == "time limit"
    # and a kernel bench run of the same commit keeps them
    kernel_run = {"env": kernel["env"], "ceiling_gbps": 4000.0, "records": kernel["records"][:1]}
    written = bench.write_perf(path, kernel_run)
    assert {"model_records", "model_config", "model_incomplete"} <= set(written)
    assert json.loads(path.read_text())["records"] == kernel["records"][:1]
    fresh = tmp_path / "new.json"
    model_bench.write_rows(fresh, {"gpu_name": "NVIDIA H200"}, rows, {}, None)
    assert json.loads(fresh.read_text())["records"] == []


# ---------------------------------------------------------------------------------------------- the gate


def _perf_with_models() -> dict:
    return {"env": {"gpu_name": "NVIDIA H200"}, "records": [], "model_records": _model_rows()}


def _set_speedup(data, mode, other, value, low=None):
    row = next(r for r in data["model_records"] if r["variant"] == "dyt" and r["mode"] == mode)
    row["speedup_vs"][other].update(median=value, min=value if low is None else low)


def test_gate_compares_model_ratios():
    base = _perf_with_models()
    _set_speedup(base, "train", "eager", 1.10)
    same = gate.gate(copy.deepcopy(base), base)
    assert same.code == gate.GATE_OK and same.compared == 4  # dyt vs norm and eager, train and infer
    slower = copy.deepcopy(base)
    _set_speedup(slower, "train", "eager", 0.95)
    result = gate.gate(slower, base, model_margin=0.10)
    assert result.code == gate.GATE_REGRESSION
    assert [r["key"] for r in result.regressions] == [("narrow_tiny", 2, "train", "dyt", "eager")]
    assert any("narrow_tiny/2 train dyt vs eager: speedup 1.100 -> 0.950" in line for line in result.lines)
    assert gate.gate(slower, base, model_margin=0.2).code == gate.GATE_OK
    _set_speedup(slower, "train", "eager", 1.02)  # within the margin
    assert gate.gate(slower, base, model_margin=0.10).code == gate.GATE_OK
    # a baseline whose rounds spread down to 0.90: a median of 0.95 lies within its own spread
    _set_speedup(base, "train", "eager", 1.10, low=0.90)
    _set_speedup(slower, "train", "eager", 0.95)
    assert gate.gate(slower, base, model_margin=0.10).code == gate.GATE_OK
    _set_speedup(slower, "train", "eager", 0.85)
    assert gate.gate(slower, base, model_margin=0.10).code == gate.GATE_REGRESSION


def test_gate_counts_a_model_row_that_now_fails():
    base, now = _perf_with_models(), _perf_with_models()
    row = next(r for r in now["model_records"] if r["variant"] == "dyt" and r["mode"] == "infer")
    row.update(error="RuntimeError: boom", speedup_vs={}, median_ms=None)
    result = gate.gate(now, base)
    assert result.code == gate.GATE_REGRESSION and len(result.regressions) == 2


def test_gate_never_fails_on_a_baseline_without_model_rows():
    now = _perf_with_models()
    for row in now["model_records"]:
        for s in row["speedup_vs"].values():
            s["median"] = 0.01
    kernel_only = json.loads((ROOT / "tests/fixtures/reports/perf/nvidia-h200-abc1234.json").read_text())
    now["records"] = kernel_only["records"]
    result = gate.gate(now, kernel_only)
    assert result.code == gate.GATE_OK and result.compared == 10  # the kernel rows only


def test_gate_cli_takes_a_model_margin(tmp_path):
    base = _perf_with_models()
    _set_speedup(base, "train", "norm", 1.5)
    now = copy.deepcopy(base)
    _set_speedup(now, "train", "norm", 1.3)
    (tmp_path / "base.json").write_text(json.dumps(base))
    (tmp_path / "now.json").write_text(json.dumps(now))
    args = [str(tmp_path / "now.json"), str(tmp_path / "base.json")]
    assert gate.gate_files(*args) == gate.GATE_REGRESSION
    assert gate.gate_files(*args, model_margin=0.25) == gate.GATE_OK


# -------------------------------------------------------------------------------------------- the report


def test_report_has_the_model_table_and_plots(tmp_path):
    perf = _perf_with_models()
    perf["env"] |= {"git_sha": "abc1234", "timestamp_utc": "2026-12-01T00:00:00+00:00"}
    perf["model_config"] = {"rounds": 3, "steps": 2, "autocast": "bfloat16", "timer": "wall clock"}
    skipped = {"variant": "liger", "median_ms": None, "skipped": "unavailable: no liger_kernel"}
    liger = copy.deepcopy(perf["model_records"][0]) | skipped
    perf["model_records"].append(liger)
    (tmp_path / "perf").mkdir()
    (tmp_path / "perf" / "nvidia-h200-abc1234.json").write_text(json.dumps(perf))
    md = report.render(tmp_path).read_text()
    assert "## Model benchmark" in md
    assert "| model | batch | mode | norm ms | eager ms | dyt ms | liger ms |" in md
    by = {(r["mode"], r["variant"]): r for r in perf["model_records"]}
    train = next(line for line in md.splitlines() if line.startswith("| narrow_tiny | 2 | train |"))
    assert f"{by['train', 'dyt']['median_ms']:.2f} ({by['train', 'dyt']['host_ms']:.2f})" in train
    assert "skipped: unavailable: no liger_kernel" in train
    s = by["train", "dyt"]["speedup_vs"]["eager"]
    assert (
        f"| narrow_tiny | 2 | train | dyt | {by['train', 'dyt']['speedup_vs']['norm']['median']:.2f}x" in md
    )
    assert f"{s['median']:.2f}x ({s['min']:.2f}-{s['max']:.2f})" in md
    for name in ("models-step-time.png", "models-speedup.png"):
        assert (tmp_path / "plots" / name).read_bytes()[:8] == PNG_MAGIC
        assert f"(plots/{name})" in md


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path; this machine has a GPU")
def test_models_suite_without_cuda_exits_2():
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    proc = subprocess.run([sys.executable, "-m", "dyt", "bench", "--suite", "models", "--models", "narrow"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 2 and "no CUDA device" in proc.stderr


def test_models_suite_main_on_cpu_writes_the_perf_file(tmp_path, monkeypatch, capsys):
    """The CLI path end to end (`--device cpu`, a tiny narrow net in place of the registry's models)."""
    from dyt.service import cli

    monkeypatch.setattr(model_bench, "model_specs", lambda: {"narrow": tiny_spec(name="narrow")})
    args = cli._parser().parse_args(["bench", "--suite", "models", "--device", "cpu", "--quick",
                                     "--variants", "norm,eager,dyt", "--out", str(tmp_path)])  # fmt: skip
    assert model_bench.main(args) == 0
    (path,) = tmp_path.glob("*.json")
    data = json.loads(path.read_text())
    assert data["records"] == [] and data["env"]["git_sha"] and "model_incomplete" not in data
    assert [(r["mode"], r["variant"]) for r in data["model_records"]] == [
        (m, v) for m in ("train", "infer") for v in ("norm", "eager", "dyt")
    ]
    assert data["model_config"]["rounds"] == 2 and data["model_config"]["device"] == "cpu"
    assert "narrow/2 train dyt" in capsys.readouterr().out
