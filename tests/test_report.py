"""tooling: the published report, the regression gate and the bench harness, on fixture data (CPU only).

The fixture folder tests/fixtures/reports/ is what a GPU session leaves behind: JUnit XML from two sessions
(one failure carrying the conftest's reproduce property), failures-<session>.md, env.json and a perf JSON
with dyt, eager, compile and liger rows, liger failing to launch past 65,535 rows as it does on an H200.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

# The report reads JUnit through junitparser (the `report` extra); a GPU box running in place may lack it.
pytest.importorskip("junitparser", reason="the report extra is not installed: pip install -e .[report]")

from dyt.service import bench, gate, records, report, run_control  # noqa: E402

pytestmark = pytest.mark.tooling

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = Path(__file__).parent / "fixtures" / "reports"
PERF = FIXTURE / "perf" / "nvidia-h200-abc1234.json"
COMMITTED = ROOT / "reports"  # the repository's committed baselines/ and conformance/
FAILED_NODE = "tests/test_dtype_contract.py::TestMixed::test_param_grad_dtype[bfloat16-float32]"
REPRODUCE = f"DYT_SEED=977 nox -s gpu_tests -- '{FAILED_NODE}'"
LIGER_ERROR = "RuntimeError: Triton Error [CUDA]: invalid argument"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def reports(tmp_path) -> Path:
    target = tmp_path / "reports"
    shutil.copytree(FIXTURE, target)
    return target


def _perf() -> dict:
    return json.loads(PERF.read_text())


def _copy_committed(target: Path) -> list[dict]:
    """The repository's baselines/ and conformance/ copied into target; the baselines' JSON. Skips where the
    tree has none (a container, whose reports/ is the mount of a run's folder)."""
    if not (COMMITTED / "baselines").is_dir():
        pytest.skip(f"no committed baselines in {COMMITTED} (a container's reports/ is a mount)")
    for name in ("baselines", "conformance"):
        shutil.copytree(COMMITTED / name, target / name)
    return [json.loads(path.read_text()) for path in sorted((target / "baselines").glob("*.json"))]


def _cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))  # keep carried packages
    env = {**os.environ, "PYTHONPATH": path}
    return subprocess.run(
        [sys.executable, "-m", "dyt", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


# ----------------------------------------------------------------------------------------------- report


def test_report_renders_fixture(reports):
    md_path = report.render(reports)
    assert md_path == reports / "summary.md"
    md = md_path.read_text()
    html = (reports / "summary.html").read_text()

    # pass/fail per suite per session, from both JUnit files
    assert "| gpu_tests | dtype_contract | FAIL | 0 | 1 | 0 | 0 |" in md
    assert "| tests | reference_equivalence | pass | 2 | 0 | 0 | 0 |" in md
    assert "| tests | grid_limit | skip | 0 | 0 | 0 | 1 |" in md
    # the failure with the reproduce command its run recorded, and the docker line from failures-*.md
    assert f"`{FAILED_NODE}`" in md
    assert REPRODUCE in md
    assert "dgamma dtype: expected torch.float32, got torch.bfloat16" in md
    assert "dyt-kernels:latest" in md
    assert "failures-tests.md" not in md  # a session without failures adds nothing
    # environment and the perf table side by side, the failed peer's error as text
    assert "| gpu_name | NVIDIA H200 |" in md
    assert "**4225 GB/s**" in md
    assert (
        "| dyt ms | dyt GB/s | eager ms | eager GB/s | compile ms | compile GB/s | liger ms | liger GB/s |"
        in md
    )
    assert LIGER_ERROR in md
    row = next(
        line for line in md.splitlines() if line.startswith("| bandwidth | 1048576x64 | bf16 | bf16 | fwd |")
    )
    assert "error: RuntimeError" in row and "| 0.900 | 1.12x |" in row
    # the HTML is the same content rendered, tables and all
    assert html.count("<table>") >= 4
    assert FAILED_NODE in html and "invalid argument" in html
    # plots: GB/s against width per dtype x mode, small-shape latency
    plots = sorted(p.name for p in (reports / "plots").glob("*.png"))
    assert plots == ["bandwidth-bf16-bwd.png", "bandwidth-bf16-fwd.png", "small-latency-bf16.png"]
    for name in plots:
        assert (reports / "plots" / name).read_bytes()[:8] == PNG_MAGIC
        assert f"(plots/{name})" in md


def test_report_on_empty_folder(tmp_path):
    md = report.render(tmp_path).read_text()
    assert "no JUnit results" in md
    assert "no failures recorded" in md
    assert "no environment manifest" in md
    assert "no perf data" in md
    assert (tmp_path / "summary.html").read_text().startswith("<!doctype html>")
    assert not list(tmp_path.glob("plots/*.png"))


def test_report_shows_the_committed_results_without_a_run(tmp_path):
    """A fresh clone: no run of its own, the committed baselines and conformance verdicts rendered as a run's
    (kernel table, model tables, plots, conformance table), each labelled with GPU, commit and date."""
    baselines = _copy_committed(tmp_path)
    assert baselines, "the repository commits a baseline"
    md = report.render(tmp_path).read_text()
    assert "no perf data" not in md
    for data in baselines:
        env, config = data["env"], data.get("model_config") or {}
        gpu = env["gpu_name"]
        assert f"## Performance: committed baseline, {gpu}" in md
        assert f"{gpu}, git {env['git_sha'][:12]}, " in md and env["timestamp_utc"] in md
        assert "| set | shape | x | params | mode | dyt ms | dyt GB/s |" in md
        assert "| bandwidth | 1048576x64 | bf16 | bf16 | fwd |" in md
        if data.get("model_records"):
            assert f"## Model benchmark: committed baseline, {gpu}" in md
            sha, date = config.get("git_sha") or env["git_sha"], config.get("timestamp_utc") or ""
            assert f"Rows of {gpu}, git {sha[:12]}, measured {date}" in md
            assert "| model | batch | mode | norm ms |" in md
    plots = re.findall(r"!\[[^]]*\]\(([^)]+\.png)\)", md)
    assert any("models-" in p for p in plots) and any("bandwidth-" in p for p in plots)
    for rel in plots:
        assert (tmp_path / rel).read_bytes()[:8] == PNG_MAGIC
    folders = sorted(p.name for p in (tmp_path / "conformance").iterdir())
    gpus = re.findall(r"^## Conformance: committed verdict, (.+)$", md, re.M)
    assert sorted(records.gpu_slug(gpu) for gpu in gpus) == folders  # one verdict per GPU model, titled
    for folder in folders:
        link = f"[`conformance/{folder}/summary.md`](conformance/{folder}/summary.md)"
        label = next(line for line in md.splitlines() if line.startswith(f"The committed verdict {link}"))
        assert re.search(r": (NVIDIA \S+|CPU), git [0-9a-f]{7,12}, measured \d{4}-\d\d-\d\dT\S+\.$", label), (
            label
        )
    assert "| check | dyt | compile | eager | liger |" in md
    assert "| test_more_than_65535_rows (rows past grid axis 1 (65,535)) | pass |" in md


def test_report_names_the_committed_baseline_beside_a_fresh_run(reports):
    """A fresh run beside the committed results: the run's numbers, and the committed baseline of its GPU
    named with the gate's verdict against it, the committed conformance verdict named."""
    (baseline,) = [b for b in _copy_committed(reports) if b["env"]["gpu_name"] == "NVIDIA H200"]
    md = report.render(reports).read_text()
    assert f"From `{PERF.name}`" in md and "**4225 GB/s**" in md  # the fixture run, not the baseline
    assert "| gpu_tests | dtype_contract | FAIL | 0 | 1 | 0 | 0 |" in md
    assert "committed baseline, NVIDIA H200" not in md  # the baseline's tables are not rendered
    assert "## Committed baseline" in md
    assert (
        "The committed baseline of NVIDIA H200, [`baselines/nvidia-h200.json`](baselines/nvidia-h200.json)"
        in md
    )
    assert gate.gate(_perf(), baseline).lines[-1] in md  # the gate's verdict of the run against it
    assert (
        "[`conformance/nvidia-h200/summary.md`](conformance/nvidia-h200/summary.md): NVIDIA H200, git" in md
    )
    assert sorted(p.name for p in (reports / "plots").glob("**/*.png")) == [
        "bandwidth-bf16-bwd.png",
        "bandwidth-bf16-fwd.png",
        "small-latency-bf16.png",
    ]


def test_report_without_run_or_committed_results_says_so(tmp_path, monkeypatch):
    """Nothing in the folder, and no baselines/ or conformance/ under it: no results, whatever the working
    directory holds (the repository's reports/ is not the folder's)."""
    monkeypatch.chdir(ROOT)
    md = report.render(tmp_path).read_text()
    assert "no JUnit results" in md and "no perf data" in md
    assert "No JUnit results in this folder and no committed conformance verdicts" in md
    assert "No perf data in this folder and no committed baselines" in md
    assert "## Conformance" not in md and "## Model benchmark" not in md
    assert not list(tmp_path.glob("plots/**/*.png"))


def test_report_renders_what_is_there(tmp_path):
    """A crashed run: a truncated JUnit file beside a good one, perf data, no env.json."""
    (tmp_path / "junit").mkdir()
    shutil.copy(FIXTURE / "junit" / "tests.xml", tmp_path / "junit" / "tests.xml")
    (tmp_path / "junit" / "gpu_tests.xml").write_text("<testsuites><testsuite name='x'><testcase")
    (tmp_path / "perf").mkdir()
    shutil.copy(PERF, tmp_path / "perf" / PERF.name)
    (tmp_path / "perf" / "garbage.json").write_text("{not json")
    md = report.render(tmp_path).read_text()
    assert "unreadable JUnit file: gpu_tests.xml" in md
    assert "| tests | nan_masking | pass | 1 |" in md
    assert "no environment manifest" in md
    assert f"From `{PERF.name}`" in md and LIGER_ERROR in md


def test_report_takes_newest_perf_file(reports):
    older = _perf()
    older["env"]["timestamp_utc"] = "2026-01-01T00:00:00+00:00"
    older["ceiling_gbps"] = 1987.0
    (reports / "perf" / "nvidia-h200-0000000.json").write_text(json.dumps(older))
    md = report.render(reports).read_text()
    assert "**4225 GB/s**" in md and "1987" not in md
    assert "2 perf files in perf/" in md


def test_report_shows_copies_at_a_modes_traffic(reports):
    perf = _perf()
    copy = {"bytes_moved": 268435456, "ms": 0.066, "gbps": 4056.0, "graph_gbps": 4140.0}
    perf["copies_at_traffic"] = [copy]
    path = next((reports / "perf").glob("*.json"))
    path.write_text(json.dumps(perf))
    md = report.render(reports).read_text()
    assert "268 MB 0.960 (graph 0.980)" in md  # against the fixture's 4225 GB/s ceiling


def test_report_says_a_bench_run_was_stopped(reports):
    perf = _perf()
    path = next((reports / "perf").glob("*.json"))
    md = report.render(reports).read_text()
    assert "Incomplete run" not in md
    perf["incomplete"] = {"records": 229, "of": 246, "stopped_by": "SIGTERM"}
    path.write_text(json.dumps(perf))
    md = report.render(reports).read_text()
    assert "**Incomplete run**: stopped by SIGTERM after 229 of 246 rows" in md


def test_copies_at_traffic_move_each_modes_bytes():
    """One copy per byte count the bandwidth shapes move per mode and storage size (x read + y written:
    2 sizes of x forward, 3 backward), timed like the kernels; other shape sets add none."""
    cases = [bench.Case(64, 16, "bfloat16", "bfloat16", "bandwidth"), bench.Case(64, 16, "float16", "float16",
             "bandwidth"), bench.Case(8, 8, "float64", "float64", "small")]  # fmt: skip
    timer = bench.wallclock_timer(2)
    copies = bench.measure_copies_at_traffic("cpu", timer, cases, ["fwd", "bwd"], elements=1024)
    assert [c["bytes_moved"] for c in copies] == [2 * 2048, 3 * 2048]
    for c in copies:
        assert c["ms"] > 0 and c["gbps"] == pytest.approx(c["bytes_moved"] / (c["ms"] * 1e-3) / 1e9)


def test_summary_stays_under_one_mebibyte(tmp_path):
    (tmp_path / "junit").mkdir()
    cases = "".join(
        f'<testcase classname="tests.test_nan_masking" name="t[{i}]" time="0.1">'
        f'<properties><property name="reproduce" value="nox -s tests -- t[{i}]"/></properties>'
        f'<failure message="boom {i}">{"x" * 2000}</failure></testcase>'
        for i in range(3000)
    )
    (tmp_path / "junit" / "tests.xml").write_text(
        f'<testsuites><testsuite name="tests">{cases}</testsuite></testsuites>'
    )
    (tmp_path / "failures-tests.md").write_text("# Failures\n\n## `t`\n\n" + "y" * 3_000_000)
    md = report.render(tmp_path).read_text()
    assert len(md.encode()) <= report.MAX_SUMMARY_BYTES
    assert "| tests | nan_masking | FAIL | 0 | 3000 | 0 | 0 |" in md
    assert "and 2800 more failures" in md


@pytest.mark.parametrize(
    ("classname", "name", "suite", "nodeid"),
    [
        (
            "tests.test_grid_limit",
            "test_rows[70000]",
            "grid_limit",
            "tests/test_grid_limit.py::test_rows[70000]",
        ),
        ("tests.test_module.TestConvert", "test_ln", "module", "tests/test_module.py::TestConvert::test_ln"),
        ("test_determinism", "test_bits", "determinism", "test_determinism.py::test_bits"),
    ],
)
def test_suite_and_nodeid_from_junit_names(classname, name, suite, nodeid):
    assert report.suite_of(classname, name) == suite
    assert report.nodeid_of(classname, name) == nodeid


def test_report_cli_prints_summary_path(reports):
    proc = _cli("report", "--reports", str(reports))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == str(reports / "summary.md")
    assert (reports / "summary.html").is_file()


# ------------------------------------------------------------------------------------------------- gate


def _regressed(drop: float, n: int = 1024, mode: str = "fwd") -> dict:
    data = _perf()
    rec = next(r for r in data["records"] if r["provider"] == "dyt" and r["N"] == n and r["mode"] == mode)
    rec["ratio_to_ceiling"] -= drop
    return data


def test_gate_passes_identical_data():
    result = gate.gate(_perf(), _perf())
    assert result.code == gate.GATE_OK
    assert result.compared == 10  # every dyt row of the fixture
    assert result.regressions == []


def test_gate_catches_a_regression_and_names_the_row():
    result = gate.gate(_regressed(0.2), _perf(), margin=0.05)
    assert result.code == gate.GATE_REGRESSION
    assert [r["key"] for r in result.regressions] == [(65536, 1024, "bfloat16", "bfloat16", "fwd")]
    assert any("65536x1024 bfloat16 fwd" in line and "0.900 -> 0.700" in line for line in result.lines)


def test_gate_margin_is_absolute_in_ratio():
    assert gate.gate(_regressed(0.04), _perf(), margin=0.05).code == gate.GATE_OK
    assert gate.gate(_regressed(0.06), _perf(), margin=0.05).code == gate.GATE_REGRESSION
    assert gate.gate(_regressed(0.06), _perf(), margin=0.1).code == gate.GATE_OK


def test_gate_compares_graph_ratios_when_both_runs_have_them():
    """Host jitter moves the do_bench ratio; the CUDA-graph ratio is what the gate reads when it exists."""
    base, jittery, slower = _perf(), _perf(), _perf()
    for data in (base, jittery, slower):
        for rec in data["records"]:
            if rec["provider"] == "dyt" and rec["ratio_to_ceiling"] is not None:
                rec["graph_ratio_to_ceiling"] = 0.9
    key = (65536, 1024, "bfloat16", "bfloat16", "fwd")
    for rec in jittery["records"]:
        if rec["provider"] == "dyt" and records.record_key(rec) == key:
            rec["ratio_to_ceiling"] -= 0.3  # the host got slower; the kernel did not
    for rec in slower["records"]:
        if rec["provider"] == "dyt" and records.record_key(rec) == key:
            rec["graph_ratio_to_ceiling"] = 0.8  # the kernel got slower
    assert gate.gate(jittery, base).code == gate.GATE_OK
    result = gate.gate(slower, base)
    assert result.code == gate.GATE_REGRESSION
    assert any("graph_ratio_to_ceiling 0.900 -> 0.800" in line for line in result.lines)


def test_gate_judges_only_our_rows():
    data = _perf()
    for rec in data["records"]:
        if rec["provider"] != "dyt" and rec["ratio_to_ceiling"] is not None:
            rec["ratio_to_ceiling"] = 0.0
    assert gate.gate(data, _perf()).code == gate.GATE_OK


def test_gate_counts_a_row_that_now_fails():
    data = _perf()
    rec = next(
        r for r in data["records"] if r["provider"] == "dyt" and r["M"] == 50432 and r["mode"] == "bwd"
    )
    rec.update(error="OutOfMemoryError: CUDA out of memory", ratio_to_ceiling=None, median_ms=None)
    result = gate.gate(data, _perf())
    assert result.code == gate.GATE_REGRESSION
    assert "OutOfMemoryError" in "\n".join(result.lines)


def test_gate_other_gpu_model_is_not_compared():
    other = copy.deepcopy(_regressed(0.5))
    other["env"]["gpu_name"] = "NVIDIA A100-SXM4-80GB"
    lenient = gate.gate(other, _perf())
    assert lenient.code == gate.GATE_OK and lenient.compared == 0
    assert "WARNING" in lenient.lines[0] and "A100" in lenient.lines[0]
    assert gate.gate(other, _perf(), strict=True).code == gate.GATE_NOT_COMPARABLE


def test_gate_cli_exit_codes(tmp_path):
    regressed, other = tmp_path / "regressed.json", tmp_path / "other.json"
    regressed.write_text(json.dumps(_regressed(0.2)))
    data = _perf()
    data["env"]["gpu_name"] = "NVIDIA H100 80GB HBM3"
    other.write_text(json.dumps(data))

    same = _cli("gate", str(PERF), str(PERF))
    assert same.returncode == 0, same.stderr
    assert "OK: 10 dyt rows compared" in same.stdout

    bad = _cli("gate", str(regressed), str(PERF), "--margin", "0.05")
    assert bad.returncode == 1
    assert "REGRESSION dyt 65536x1024 bfloat16 fwd" in bad.stderr

    assert _cli("gate", str(regressed), str(PERF), "--margin", "0.25").returncode == 0

    mismatch = _cli("gate", str(other), str(PERF))
    assert mismatch.returncode == 0 and "GPU model differs" in mismatch.stdout
    assert _cli("gate", str(other), str(PERF), "--strict").returncode == 3

    assert _cli("gate", str(tmp_path / "missing.json"), str(PERF)).returncode == 2


def test_gate_and_report_import_neither_torch_nor_triton(reports, tmp_path):
    """The CLI modules stay light: gate runs where only the files are, report without triton.

    The package's __init__ is stubbed so this checks these modules' own imports.
    """
    code = textwrap.dedent(
        f"""
        import sys, types
        pkg = types.ModuleType("dyt"); pkg.__path__ = [{str(ROOT / "dyt")!r}]; pkg.__version__ = "0"
        sys.modules["dyt"] = pkg
        from dyt.service.cli import main
        assert main(["gate", {str(PERF)!r}, {str(PERF)!r}]) == 0
        assert "torch" not in sys.modules, "gate imported torch"
        assert main(["report", "--reports", {str(reports)!r}]) == 0
        assert "triton" not in sys.modules and "torch" not in sys.modules, "report imported triton/torch"
        print("light")
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith("light")


# ------------------------------------------------------------------------------------------------ bench


def test_shape_sets():
    cases = bench.parse_shapes("bandwidth,small,model,mixed", ["bfloat16", "float32"])
    band = [c for c in cases if c.shape_set == "bandwidth"]
    assert len(band) == 20 and {c.M * c.N for c in band if c.N != 768} == {2**26}
    assert (87381, 768) in {(c.M, c.N) for c in band}
    assert {(c.M, c.N) for c in cases if c.shape_set == "small"} == set(bench.SMALL_SHAPES)
    mixed = [c for c in cases if c.shape_set == "mixed"]
    assert len(mixed) == 7 and {(c.dtype, c.param_dtype) for c in mixed} == {("bfloat16", "float32")}
    assert all(c.param_dtype == c.dtype for c in cases if c.shape_set != "mixed")
    assert [(c.M, c.N, c.dtype) for c in bench.parse_shapes("4096x64,4096X64", ["float16"])] == [
        (4096, 64, "float16")
    ]
    with pytest.raises(ValueError, match="unknown shape 'huge'"):
        bench.parse_shapes("huge", ["float32"])
    with pytest.raises(ValueError, match="unknown dtype 'fp8'"):
        bench.parse_dtypes("bf16,fp8")


def test_perf_path_names_gpu_and_sha():
    env = {"gpu_name": "NVIDIA H200", "git_sha": "0123456789abcdef"}
    assert records.perf_path(Path("reports/perf"), env) == Path("reports/perf/nvidia-h200-0123456.json")
    assert records.gpu_slug(None) == "unknown-gpu"


def test_harness_records_on_cpu():
    """The measuring loop on CPU tensors with a wall-clock timer: record shape, errors, failing peers."""

    def broken():
        raise ImportError("No module named 'liger_kernel'")

    factories = {"eager": bench.PROVIDER_FACTORIES["eager"], "liger": broken}
    case = bench.Case(64, 48, "bfloat16", "float32", "custom")
    records = bench.run_case(
        case, ["eager", "liger"], bench.MODES, "cpu", bench.wallclock_timer(2), 100.0, 7, factories
    )
    assert [(r["provider"], r["mode"]) for r in records] == [
        (p, m) for p in ("eager", "liger") for m in bench.MODES
    ]
    eager = {r["mode"]: r for r in records if r["provider"] == "eager"}
    for mode, rec in eager.items():
        assert rec["error"] is None and rec["median_ms"] > 0
        traffic = bench.TRAFFIC[mode] * 64 * 48 * 2
        assert rec["gbps"] == pytest.approx(traffic / (rec["median_ms"] * 1e-3) / 1e9)
        assert rec["ratio_to_ceiling"] == pytest.approx(rec["gbps"] / 100.0)
        assert set(rec["err"]) == {*bench.MODE_ERRORS[mode], "max"}
        assert 0 < rec["err"]["max"] < 2e-2  # bf16 storage, float64 truth
        assert rec["speedup_vs_best_peer"] is None  # its only peer failed
        assert rec["y_dtype"] == "float32"  # plain PyTorch promotes y with float32 parameters
    assert eager["fwdbwd"]["err"]["dgamma"] < 2e-2
    for rec in (r for r in records if r["provider"] == "liger"):
        assert rec["error"] == "unavailable: ImportError: No module named 'liger_kernel'"
        assert rec["median_ms"] is None and rec["gbps"] is None


def test_a_stopped_bench_keeps_the_rows_it_finished():
    """SIGTERM (a time limit running out) in the measuring loop: run_all returns every finished row, those
    of the case it stopped in included, and names the signal; without a `stopped` list it propagates."""
    calls = []
    inner = bench.wallclock_timer(1)

    def timer(fn, grads):
        calls.append(1)
        if len(calls) == 4:  # the second case's backward: its forward row is done
            run_control.stop_on_signal(signal.SIGTERM, None)
        return inner(fn, grads)

    cases = [
        bench.Case(32, 16, "float32", "float32", "custom"),
        bench.Case(64, 16, "float32", "float32", "custom"),
    ]
    stopped = []
    records = bench.run_all(cases, ["eager"], ["fwd", "bwd"], "cpu", timer, 100.0, 0, stopped)
    assert stopped == ["SIGTERM"]
    assert [(r["M"], r["mode"]) for r in records] == [(32, "fwd"), (32, "bwd"), (64, "fwd")]
    assert all(r["error"] is None and r["median_ms"] > 0 for r in records)
    calls.clear()
    with pytest.raises(run_control.BenchStopped):
        bench.run_all(cases, ["eager"], ["fwd", "bwd"], "cpu", timer, 100.0, 0)


def test_sigterm_raises_bench_stopped_where_the_bench_installs_it():
    previous = signal.signal(signal.SIGTERM, run_control.stop_on_signal)
    try:
        with pytest.raises(run_control.BenchStopped, match="SIGTERM"):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler runs at the next bytecode; never this long
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_speedup_is_fastest_peer_over_ours():
    recs = [
        {
            "provider": p,
            "M": 8,
            "N": 8,
            "dtype": "float32",
            "param_dtype": "float32",
            "mode": "fwd",
            "median_ms": ms,
        }
        for p, ms in (("dyt", 1.0), ("eager", 4.0), ("compile", 2.0))
    ]
    recs.append({**recs[0], "provider": "liger", "median_ms": None, "error": "boom"})
    bench.fill_speedups(recs)
    assert recs[0]["speedup_vs_best_peer"] == 2.0
    assert recs[2]["speedup_vs_best_peer"] == 0.5
    assert "speedup_vs_best_peer" not in recs[3]


@pytest.mark.skipif(
    __import__("torch").cuda.is_available(), reason="checks the no-GPU path; this machine has a GPU"
)
def test_bench_without_cuda_exits_2():
    proc = _cli("bench", "--quick", "--shapes", "64x32", "--providers", "eager")
    assert proc.returncode == 2
    assert "no CUDA device" in proc.stderr


def test_a_bench_in_parts_appends_its_rows(tmp_path):
    """--append: a second run of other cases keeps the first run's rows, replaces rows of the same key, and
    lists both runs' ceilings; without it, the file holds the latest run alone."""
    perf = json.loads(PERF.read_text())
    rows = perf["records"]
    first_keys = {(r["provider"], *records.record_key(r)) for r in rows[:4]}
    later = [r for r in rows[4:] if (r["provider"], *records.record_key(r)) not in first_keys]
    assert later, "the fixture needs rows beyond the first four"
    path = tmp_path / "nvidia-h200-abc1234.json"
    copies = [{"bytes_moved": 1, "ms": 1.0}, {"bytes_moved": 2, "ms": 2.0}]
    first = {"env": perf["env"], "ceiling_gbps": 4100.0, "records": rows[:4], "copies_at_traffic": copies}
    bench.write_perf(path, first)
    replaced = {**rows[0], "median_ms": 123.0}
    part = {"env": perf["env"], "ceiling_gbps": 4200.0, "records": [replaced, *later],
            "copies_at_traffic": [{"bytes_moved": 2, "ms": 2.5}]}  # fmt: skip
    data = bench.write_perf(path, part, append=True)
    assert data["copies_at_traffic"] == [copies[0], {"bytes_moved": 2, "ms": 2.5}]
    assert json.loads(path.read_text()) == json.loads(json.dumps(data))
    assert len(data["records"]) == 4 + len(later)
    assert [r["median_ms"] for r in data["records"] if r is not None and r == replaced] == [123.0]
    assert rows[0] not in data["records"] and rows[1] in data["records"]
    assert [run["ceiling_gbps"] for run in data["runs"]] == [4100.0, 4200.0]
    assert [run["records"] for run in data["runs"]] == [4, 1 + len(later)]
    alone = bench.write_perf(path, part)
    assert alone["records"] == part["records"] and "runs" not in alone
