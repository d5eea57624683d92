"""faults: the service under faults, each made on this machine and ending in one line, an exit code that
says what happened, and every result that finished before the fault kept (docs/faults.md holds the table).

Faults are made for real where the machine allows: a worker SIGKILLed, an allocation refused under
RLIMIT_AS, a full disk (a tmpfs filled to the last byte in a private mount namespace when root, else
RLIMIT_FSIZE), a read-only reports/ (a read-only bind mount when root, else chmod), SIGTERM to a running
bench, concurrent runs sharing one reports/ folder, truncated and corrupt files. The runs are stand-ins
(tiny suites and a tiny model, in child processes, as tests/test_matrix_harness.py does), so each fault
costs seconds. A hang, a crashing worker and SIGTERM to the GPU matrix are shown in
tests/test_matrix_harness.py, and the report on a truncated JUnit file in tests/test_report.py.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import pathlib
import resource
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import xml.etree.ElementTree as ET

import pytest

from dyt.service import files, gate, gpu_matrix, records

pytestmark = pytest.mark.faults
ROOT = pathlib.Path(__file__).parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "reports"
PERF = FIXTURE / "perf" / "nvidia-h200-abc1234.json"


# ---------------------------------------------------------------------------------------------- helpers


def _write_suite(folder: pathlib.Path, sources: dict[str, str]) -> pathlib.Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, body in sources.items():
        (folder / name).write_text(textwrap.dedent(body))
    return folder


# A child pytest loads only the plugins it names (an autoloaded plugin such as hypothesis's costs a second
# of every start): the GPU matrix's, pytest-timeout for its --timeout, and no cache.
CHILD_ARGS = ["-p", "no:cacheprovider", "-p", "pytest_timeout"]


def _child_env(**extra: str) -> dict[str, str]:
    """A child run's environment: free of this run's session (gpu_matrix.outside_session), this checkout
    first on the path, no bytecode written (a full disk must fail on the results, not on a .pyc), no
    plugins but those named (CHILD_ARGS)."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return {**gpu_matrix.outside_session(), "PYTHONPATH": path, "PYTHONDONTWRITEBYTECODE": "1",
            "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", **extra}  # fmt: skip


def _cases(junit: pathlib.Path) -> dict[str, ET.Element]:
    return {tc.get("name"): tc for tc in ET.parse(junit).getroot().iter("testcase")}


def _outcome(case: ET.Element) -> str:
    for tag in ("failure", "error", "skipped"):
        if case.find(tag) is not None:
            return tag
    return "passed"


def _digests(folder: pathlib.Path) -> dict[str, str]:
    """Every file under folder (hidden ones too) by relative path, as a hash of its bytes."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _last_line(text: str) -> str:
    lines = [line for line in text.replace("\r", "\n").splitlines() if line.strip()]
    return lines[-1] if lines else ""


@functools.cache
def _mount_refusal() -> str | None:
    """Why this machine cannot mount in a private mount namespace (None where it can)."""
    if os.geteuid() != 0:
        return "not root: mounts need root"
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return "unshare or mount is not installed"
    probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "true"], capture_output=True)
    return None if probe.returncode == 0 else f"unshare --mount refused: {probe.stderr.decode().strip()}"


# The fault scripts run in a private mount namespace: whatever they mount goes with them.
_FULL_DISK = """
set -e
cp -a "$R"/. "$SEED"/
mount -t tmpfs -o size=1m tmpfs "$R"
cp -a "$SEED"/. "$R"/
head -c 4M /dev/zero > "$R/.filler" 2>/dev/null || true
set +e
"$@"
rc=$?
rm -f "$R/.filler"
cp -a "$R"/. "$AFTER"/
exit $rc
"""
_READ_ONLY = """
set -e
mount --bind "$R" "$R"
mount -o remount,bind,ro "$R"
exec "$@"
"""


def _file_size_limit(limit: int):
    def limit_file_size():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return limit_file_size


def _run_faulted(fault: str, reports: pathlib.Path, cmd: list[str], env: dict, tmp_path: pathlib.Path):
    """cmd run with reports/ full (a tmpfs filled to its last byte; without root, a 1 KiB file-size
    limit) or read-only (a read-only bind mount; without root, chmod). Returns the process and the folder
    that holds reports/'s contents after the run."""
    refusal = _mount_refusal()
    run = functools.partial(subprocess.run, env=env, capture_output=True, text=True, timeout=300)
    if fault == "full" and refusal is None:
        seed, after = tmp_path / "seed", tmp_path / "after"
        seed.mkdir()
        after.mkdir()
        script = ["unshare", "--mount", "--propagation", "private", "sh", "-c", _FULL_DISK, "sh", *cmd]
        return run(script, env={**env, "R": str(reports), "SEED": str(seed), "AFTER": str(after)}), after
    if fault == "full":
        return run(cmd, preexec_fn=_file_size_limit(1024)), reports
    if refusal is None:
        script = ["unshare", "--mount", "--propagation", "private", "sh", "-c", _READ_ONLY, "sh", *cmd]
        return run(script, env={**env, "R": str(reports)}), reports
    folders = [reports, *[p for p in reports.rglob("*") if p.is_dir()]]
    for folder in folders:
        folder.chmod(0o555)
    try:
        return run(cmd), reports
    finally:
        for folder in folders:
            folder.chmod(0o755)


# ------------------------------------------------------------------ a worker killed, memory running out

DYING_WORKER_STAND_INS = {
    "test_a_killed.py": """
        import os, signal
        def test_sigkilled(): os.kill(os.getpid(), signal.SIGKILL)  # the OOM killer's way
    """,
    "test_b_memory.py": """
        import resource
        def test_memory_error():
            vm = next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmSize:"))
            soft, hard = resource.getrlimit(resource.RLIMIT_AS)
            resource.setrlimit(resource.RLIMIT_AS, (vm + 2**28, hard))
            try:
                bytearray(2**31)  # refused: a real MemoryError, as when the host runs out
            finally:
                resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    """,
    "test_c_after.py": """
        def test_after_a(): pass
        def test_after_b(): pass
    """,
}


@pytest.fixture(scope="module")
def dying_worker_run(tmp_path_factory):
    """One GPU-matrix pytest (gpu_matrix.pytest_command, one xdist worker) over tests that SIGKILL their
    worker and run out of memory, then two that pass."""
    base = tmp_path_factory.mktemp("dying")
    suite = _write_suite(base / "suite", DYING_WORKER_STAND_INS)
    junit = base / "junit.xml"
    cmd = gpu_matrix.pytest_command(1, str(junit), "faults", "60", [*CHILD_ARGS, str(suite)])
    proc = subprocess.run(cmd, cwd=suite, env=_child_env(), capture_output=True, text=True, timeout=300)
    return proc, _cases(junit)


def test_a_sigkilled_worker_fails_its_test_and_the_run_goes_on(dying_worker_run):
    proc, cases = dying_worker_run
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]  # pytest's: tests failed
    assert _outcome(cases["test_sigkilled"]) in ("failure", "error")
    assert "crashed while running 'test_a_killed.py::test_sigkilled'" in ET.tostring(
        cases["test_sigkilled"], encoding="unicode"
    )
    assert "replacing crashed worker gw0" in proc.stdout + proc.stderr
    assert {_outcome(cases[n]) for n in ("test_after_a", "test_after_b")} == {"passed"}


def test_a_memory_error_fails_its_test_and_the_run_goes_on(dying_worker_run):
    proc, cases = dying_worker_run
    failure = cases["test_memory_error"].find("failure")
    assert failure is not None and failure.get("message", "").startswith("MemoryError"), proc.stdout[-3000:]
    assert {_outcome(cases[n]) for n in ("test_after_a", "test_after_b")} == {"passed"}


CUDA_OOM_STAND_INS = {
    "test_a_oom.py": """
        import torch
        def test_beyond_the_gpu():
            free, total = torch.cuda.mem_get_info()
            torch.empty(2 * total, dtype=torch.uint8, device="cuda")
    """,
    "test_b_after.py": """
        import torch
        def test_the_gpu_still_works():
            assert torch.ones(1 << 20, device="cuda").sum().item() == 1 << 20
    """,
}


@pytest.mark.gpu_only
def test_cuda_out_of_memory_fails_its_test_and_the_run_goes_on(tmp_path):
    """A test that asks for twice the GPU's memory fails with torch's OutOfMemoryError; the next test on
    the same worker and GPU passes."""
    suite = _write_suite(tmp_path / "suite", CUDA_OOM_STAND_INS)
    junit = tmp_path / "junit.xml"
    cmd = gpu_matrix.pytest_command(1, str(junit), "faults", "120", [*CHILD_ARGS, str(suite)])
    proc = subprocess.run(cmd, cwd=tmp_path, env=_child_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    cases = _cases(junit)
    failure = cases["test_beyond_the_gpu"].find("failure")
    assert failure is not None and "OutOfMemoryError" in failure.get("message", ""), proc.stdout[-3000:]
    assert _outcome(cases["test_the_gpu_still_works"]) == "passed"


# --------------------------------------------------------------------------- a full or read-only reports/

# The model benchmark's CLI on the CPU with a tiny model at BATCHES batch sizes; each case touches
# $MARKS/case-<batch> as it starts. The GPU name is fixed so the perf file's name is known.
STAND_IN_BENCH = """
import os, pathlib, sys
from dyt.service import cli, env, model_bench

real_env = env.collect_env
env.collect_env = lambda seeds=None: {**real_env(seeds), "gpu_name": "stand-in GPU"}
marks = os.environ.get("MARKS")
tiny = model_bench.narrow_spec(tokens=8, width=16, depth=1, heads=2, name="tiny",
                               batches=tuple(range(1, int(os.environ.get("BATCHES", "2")) + 1)))

def batch(n, gen):
    if marks:
        pathlib.Path(marks, f"case-{n}").touch()
    return model_bench.narrow_spec(tokens=8, width=16, depth=1, heads=2).batch(n, gen)

model_bench.model_specs = lambda: {"tiny": model_bench.ModelSpec(**{**tiny.__dict__, "batch": batch})}
args = ["bench", "--suite", "models", "--device", "cpu", "--variants", "norm,eager", *sys.argv[1:]]
sys.exit(cli.main(args))
"""
SHA = "fault01"
BENCH_FILE = f"perf/stand-in-gpu-{SHA}.json"


def _bench_cmd(tmp_path: pathlib.Path, *args: str) -> list[str]:
    script = tmp_path / "stand_in_bench.py"
    script.write_text(STAND_IN_BENCH)
    return [sys.executable, str(script), *args]


def _earlier_perf() -> dict:
    """A perf JSON of the same commit from an earlier run: one kernel row, one model row."""
    kernel = {"provider": "dyt", "M": 8, "N": 16, "dtype": "float32", "mode": "fwd", "median_ms": 1.0}
    model = {"model": "tiny", "batch": 9, "mode": "train", "variant": "norm", "median_ms": 2.0}
    return {
        "env": {"gpu_name": "stand-in GPU", "git_sha": SHA},
        "records": [kernel],
        "model_records": [model],
    }


def _seed_reports(tmp_path: pathlib.Path) -> pathlib.Path:
    """reports/ as an earlier session left it: the fixture's files, a perf file of this commit, and the
    summary an earlier report rendered."""
    reports = tmp_path / "reports"
    shutil.copytree(FIXTURE, reports)
    (reports / BENCH_FILE).write_text(json.dumps(_earlier_perf(), indent=1) + "\n")
    (reports / "summary.md").write_text("# DyT report\n\nan earlier summary\n")
    return reports


def _rescued(text: str) -> pathlib.Path | None:
    """The file the one line says the results went to instead, where it says so."""
    marker = " are in " if " are in " in text else " is in "
    if marker not in text:
        return None
    return pathlib.Path(text.split(marker, 1)[1].split()[0])


FAULTS = ["full", "read-only"]


def _one_line_and_code(proc, prefix: str, reports: pathlib.Path) -> str:
    line = _last_line(proc.stderr)
    assert proc.returncode == files.WRITE_FAILED, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert line.startswith(f"{prefix}: cannot write {reports}"), proc.stderr[-3000:]
    assert any(f"({name})" in line for name in ("ENOSPC", "EFBIG", "EROFS", "EACCES")), line
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return line


@pytest.mark.parametrize("fault", FAULTS)
def test_the_bench_on_a_full_or_read_only_reports_folder(fault, tmp_path):
    """The rows measured are saved in the temporary folder the one line names, the earlier perf file of the
    same commit is left whole and unchanged, and the exit code is 74."""
    reports = _seed_reports(tmp_path)
    before = (reports / BENCH_FILE).read_bytes()
    rescue_dir = tmp_path / "rescue"
    rescue_dir.mkdir()
    env = _child_env(DYT_GIT_SHA=SHA, TMPDIR=str(rescue_dir), TRITON_INTERPRET="1")
    cmd = _bench_cmd(tmp_path, "--quick", "--out", str(reports / "perf"))
    proc, after = _run_faulted(fault, reports, cmd, env, tmp_path)
    line = _one_line_and_code(proc, "bench", reports)
    assert (after / BENCH_FILE).read_bytes() == before
    assert not [p for p in (after / "perf").iterdir() if p.name.endswith(".tmp")]
    saved = _rescued(line)
    if saved is None:  # a file-size limit stops the temporary folder too
        assert fault == "full" and _mount_refusal() is not None and "are lost" in line, line
        return
    rows = records.load_perf(saved)["model_records"]
    assert [(r["batch"], r["mode"], r["variant"]) for r in rows] == [
        (b, m, v) for b in (1, 2) for m in ("train", "infer") for v in ("norm", "eager")
    ]
    assert all(r["error"] is None and r["median_ms"] > 0 for r in rows)


@pytest.mark.parametrize("fault", FAULTS)
def test_the_report_on_a_full_or_read_only_reports_folder(fault, tmp_path):
    """One line, exit 74, and the folder as it was: the earlier summary is not truncated."""
    pytest.importorskip("junitparser", reason="the report extra is not installed: pip install -e .[report]")
    reports = _seed_reports(tmp_path)
    before = _digests(reports)
    proc, after = _run_faulted(fault, reports, [sys.executable, "-m", "dyt", "report", "--reports",
                               str(reports)], _child_env(), tmp_path)  # fmt: skip
    _one_line_and_code(proc, "report", reports)
    left = {name: digest for name, digest in _digests(after).items() if not name.startswith("plots/")}
    assert left == before, "a file of the earlier session changed"


@pytest.mark.parametrize("fault", FAULTS)
def test_the_gpu_matrix_refuses_to_start_on_a_full_or_read_only_reports_folder(fault, tmp_path):
    """Found before any test runs, not after hours of them: one line, exit 74, nothing started."""
    reports = _seed_reports(tmp_path)
    before = _digests(reports)
    empty = _write_suite(tmp_path / "suite", {"test_never.py": "def test_never(): raise SystemExit(9)\n"})
    env = _child_env(CUDA_VISIBLE_DEVICES="0", DYT_REPORTS=str(reports))
    cmd = [sys.executable, "-m", "dyt.service.gpu_matrix", "-p", "no:cacheprovider", str(empty)]
    proc, after = _run_faulted(fault, reports, cmd, env, tmp_path)
    line = _one_line_and_code(proc, "gpu_tests", reports)
    assert line.endswith("; no test was run") and "test_never" not in proc.stdout
    assert _digests(after) == before


@pytest.mark.parametrize("fault", FAULTS)
def test_the_junit_xml_on_a_full_or_read_only_reports_folder(fault, tmp_path):
    """pytest with dyt.service.junit_atomic (as the GPU matrix runs it) cannot write its JUnit XML at the
    end: the earlier file is left whole, this run's XML goes to the temporary folder, one line, exit 74."""
    reports = _seed_reports(tmp_path)
    junit = reports / "junit" / "tests.xml"
    before = junit.read_bytes()
    suite = _write_suite(tmp_path / "suite", {"test_two.py": "def test_one(): pass\ndef test_two(): pass\n"})
    rescue_dir = tmp_path / "rescue"
    rescue_dir.mkdir()
    plugin = ["-p", "dyt.service.junit_atomic", f"--junitxml={junit}"]
    cmd = [sys.executable, "-m", "pytest", *CHILD_ARGS, *plugin, str(suite)]
    proc, after = _run_faulted(fault, reports, cmd, _child_env(TMPDIR=str(rescue_dir)), tmp_path)
    line = _one_line_and_code(proc, "junit", reports)
    assert "2 passed" in proc.stdout
    assert (after / "junit" / "tests.xml").read_bytes() == before
    assert not [p for p in (after / "junit").iterdir() if p.name.endswith(".tmp")]
    saved = _rescued(line)
    if saved is None:
        assert fault == "full" and _mount_refusal() is not None and "is lost" in line, line
        return
    assert {n: _outcome(c) for n, c in _cases(saved).items()} == {"test_one": "passed", "test_two": "passed"}


# ------------------------------------------------------------------------ truncated and corrupt inputs

CORRUPTIONS = {
    "truncated": lambda text: text[: len(text) // 2],
    "empty": lambda text: "",
    "not JSON": lambda text: "\x00\x17garbage",
    "not a perf report": lambda text: "[1, 2, 3]",
    "a row without its fields": lambda text: json.dumps(
        {**json.loads(text), "records": [{"provider": "dyt"}]}
    ),
}


@pytest.mark.parametrize("role", ["baseline", "current"])
@pytest.mark.parametrize("corruption", list(CORRUPTIONS))
def test_the_gate_refuses_a_corrupt_file_in_one_line(role, corruption, tmp_path, capsys):
    """Exit 2 and one line naming which file and what is wrong; never a pass on a baseline it could not
    read, never a traceback."""
    bad = tmp_path / f"{role}.json"
    bad.write_text(CORRUPTIONS[corruption](PERF.read_text()))
    args = (bad, PERF) if role == "current" else (PERF, bad)
    assert gate.gate_files(*args) == gate.GATE_USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"gate: {role} {bad}: "), err


def test_the_gate_cli_refuses_a_truncated_baseline(tmp_path):
    baseline = tmp_path / "nvidia-h200.json"
    baseline.write_text(PERF.read_text()[:300])
    proc = subprocess.run([sys.executable, "-m", "dyt", "gate", str(PERF), str(baseline)], env=_child_env(),
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 2 and proc.stdout == ""
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"gate: baseline {baseline}: truncated or corrupt JSON ("), line


def test_the_report_names_each_corrupt_file_and_renders_the_rest(tmp_path):
    """Beside the truncated JUnit file of tests/test_report.py: an empty and a binary JUnit file, a test
    case with a corrupt time, a truncated env.json, and perf files that are JSON but not whole reports.
    Each is named; every readable result is still shown."""
    report = pytest.importorskip("dyt.service.report")
    pytest.importorskip("junitparser", reason="the report extra is not installed: pip install -e .[report]")
    reports = tmp_path / "reports"
    shutil.copytree(FIXTURE, reports)
    (reports / "junit" / "empty.xml").write_text("")
    (reports / "junit" / "binary.xml").write_bytes(bytes(range(256)))
    (reports / "junit" / "odd.xml").write_text(
        '<testsuites><testsuite name="odd"><testcase classname="tests.test_odd" name="test_t" time="soon"/>'
        "</testsuite></testsuites>"
    )
    (reports / "env.json").write_text((FIXTURE / "env.json").read_text()[:100])
    newer = {"env": {"timestamp_utc": "2099-01-01T00:00:00+00:00"}, "records": [{"provider": "dyt", "M": 1}]}
    (reports / "perf" / "newer.json").write_text(json.dumps(newer))
    (reports / "perf" / "rows.json").write_text(json.dumps({"records": [1, 2]}))
    md = report.render(reports).read_text()
    assert "unreadable JUnit file: empty.xml: ParseError" in md
    assert "unreadable JUnit file: binary.xml: ParseError" in md
    assert "| odd | odd | pass | 1 | 0 | 0 | 0 |" in md  # its time unreadable, its verdict counted
    assert "| gpu_tests | dtype_contract | FAIL | 0 | 1 | 0 | 0 |" in md  # the fixture's results still there
    assert "env.json unreadable (truncated or corrupt JSON: " in md
    assert (
        "Unreadable perf file perf/newer.json: corrupt perf report (records[0] lacks N, dtype, mode)." in md
    )
    assert "Unreadable perf file perf/rows.json: corrupt perf report (records[0] lacks " in md
    assert f"From `{PERF.name}`" in md  # the newest whole one, not the newer corrupt one
    for name in ("newer.json", "rows.json", PERF.name):
        (reports / "perf" / name).unlink()
    (reports / "perf" / "only.json").write_text(PERF.read_text()[:300])
    md = report.render(reports).read_text()
    assert "no readable perf data; unreadable: perf/only.json: truncated or corrupt JSON (" in md


# ---------------------------------------------------------------------- two runs sharing one reports/

SHARED_STAND_INS = {
    "conftest.py": """
        import os, pathlib
        from dyt.service import env

        def pytest_sessionstart(session):
            if not hasattr(session.config, "workerinput"):  # the controller, as tests/conftest.py does
                manifest(0)

        def manifest(i):
            reports = pathlib.Path(os.environ["DYT_REPORTS"])
            seeds = {"run": os.environ["RUN"], "pad": "x" * (i * 397 % 3000)}
            env.write_env(reports / "env.json", seeds=seeds)
    """,
    "test_rows.py": """
        import pytest
        from conftest import manifest

        @pytest.mark.parametrize("i", range(1, 17))
        def test_row(i):
            manifest(i)  # as 16 sessions starting would: env.json rewritten, each time of another length
    """,
}


def test_two_runs_sharing_a_reports_folder_keep_every_file_whole(tmp_path):
    """Three GPU-matrix pytest runs at once in one reports/ folder (sessions one, two and two again), each
    rewriting env.json over and over: every read of env.json while they run is whole JSON, each run's JUnit
    XML is whole, and the two runs of one session keep both files (the later one beside, named)."""
    reports = tmp_path / "reports"
    suite = _write_suite(tmp_path / "suite", SHARED_STAND_INS)
    procs = []
    for i, session in enumerate(["one", "two", "two"]):
        junit = reports / "junit" / f"{session}.xml"
        # -n 0: no xdist workers (the controller writes every file that two runs can share)
        cmd = gpu_matrix.pytest_command(0, str(junit), session, "120", [*CHILD_ARGS, str(suite)])
        env = _child_env(DYT_REPORTS=str(reports), RUN=f"{session}-{i}")
        out = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT, "text": True}
        procs.append(subprocess.Popen(cmd, cwd=suite, env=env, **out))
    reads, bad = 0, []
    try:
        while any(p.poll() is None for p in procs):
            try:
                text = (reports / "env.json").read_text()
            except FileNotFoundError:
                continue
            reads += 1
            time.sleep(0.002)  # leave the runs the cores
            try:
                json.loads(text)
            except ValueError as exc:
                bad.append(f"{exc}: {text[-80:]!r}")
        outs = [p.communicate(timeout=300)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert [p.returncode for p in procs] == [0, 0, 0], outs
    assert reads > 0 and not bad, (reads, bad[:3])
    assert json.loads((reports / "env.json").read_text())["seeds"]["run"] in ("one-0", "two-1", "two-2")
    xmls = {p.name for p in (reports / "junit").glob("*.xml")}
    beside = xmls - {"one.xml", "two.xml"}
    assert {"one.xml", "two.xml"} <= xmls and len(beside) <= 1, xmls
    for name in xmls:
        cases = _cases(reports / "junit" / name)
        assert len(cases) == 16 and {_outcome(c) for c in cases.values()} == {"passed"}, name
    said = [line for out in outs for line in out.splitlines() if "was written by another run" in line]
    # the two runs of session two overlapped (they start together): the later one's file went beside
    assert len(said) == len(beside) and all(n.startswith("two-") and n in said[0] for n in beside), said


CONCURRENT_WRITER = """
import json, sys
from pathlib import Path
from dyt.service import bench, model_bench

path, who, n = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
env = {"gpu_name": "stand-in GPU", "git_sha": "fault01"}
rows = []
for i in range(n):
    if who == "kernels":  # a kernel bench in parts: one row a part
        rec = {"provider": "dyt", "M": i + 1, "N": 16, "dtype": "float32", "param_dtype": "float32",
               "mode": "fwd", "median_ms": 1.0}
        bench.write_perf(path, {"env": env, "ceiling_gbps": 1.0, "records": [rec]}, append=True)
    else:  # the model bench of the same commit, rewriting its rows so far
        rows.append({"model": "tiny", "batch": i + 1, "mode": "train", "variant": "norm", "median_ms": 1.0})
        model_bench.write_rows(path, env, rows, {"rows": len(rows)}, None)
"""


def test_two_benches_writing_one_perf_file_keep_every_row(tmp_path):
    """A kernel bench in parts and a model bench of one commit write the same perf JSON at once, each part
    reading, merging and writing back: under files.locked neither drops the other's rows (unlocked, a
    write-back of what was read before the other wrote loses rows)."""
    path = tmp_path / "perf" / "stand-in-gpu-fault01.json"
    script = tmp_path / "writer.py"
    script.write_text(CONCURRENT_WRITER)
    n = 40
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(path), who, str(n)],
            env=_child_env(),
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for who in ("kernels", "models")
    ]
    errors = [p.communicate(timeout=300)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errors
    data = records.load_perf(path)
    assert sorted(r["M"] for r in data["records"]) == list(range(1, n + 1))
    assert [r["batch"] for r in data["model_records"]] == list(range(1, n + 1))


# ------------------------------------------------------------------------------- SIGTERM during a bench


def test_sigterm_during_the_model_bench_keeps_the_rows_finished(tmp_path):
    """`timeout` running out mid-bench: exit 3 (run_control.STOPPED), one line naming the signal, the rows
    and the file, and the perf JSON whole with every row of the cases that finished."""
    marks = tmp_path / "marks"
    marks.mkdir()
    out = tmp_path / "reports" / "perf"
    env = _child_env(DYT_GIT_SHA=SHA, MARKS=str(marks), BATCHES="60", TRITON_INTERPRET="1")
    cmd = _bench_cmd(tmp_path, "--rounds", "2", "--steps", "1", "--warmup", "1", "--out", str(out))
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (marks / "case-4").exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.poll() is None, "the bench ended before it was stopped"
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    from dyt.service.run_control import STOPPED

    assert proc.returncode == STOPPED, stderr[-3000:]
    path = tmp_path / "reports" / BENCH_FILE
    line = _last_line(stderr)
    assert line.startswith("bench: stopped by SIGTERM after ")
    assert line.endswith(f"of 240 model rows; those are in {path}"), line
    data = records.load_perf(path)
    rows = data["model_records"]
    assert data["model_incomplete"] == {"rows": len(rows), "of": 60 * 4, "stopped_by": "SIGTERM"}
    done = {(r["batch"], r["mode"], r["variant"]): r for r in rows}
    assert {(b, m, v) for b in (1, 2, 3) for m in ("train", "infer") for v in ("norm", "eager")} <= set(done)
    assert all(r["error"] is None and r["rounds"] == (2 if r["batch"] <= 3 else r["rounds"]) for r in rows)
    assert all(r["rounds"] >= 1 for r in rows)  # a case stopped mid-way keeps only its complete rounds
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]


# ------------------------------------------------------------------------ the GPU gone between sessions


def test_a_gpu_gone_between_sessions_leaves_the_last_sessions_results_readable(tmp_path, monkeypatch, capsys):
    """The session before ran on an H200 (the fixture's env.json, JUnit and perf JSON); now no GPU is
    visible. The GPU matrix refuses in one line with exit 2 (tests/test_matrix_harness.py's
    test_no_gpu_fails_loudly) and leaves that session's files as they were; the report and the gate still
    read them without a GPU."""
    reports = tmp_path / "reports"
    shutil.copytree(FIXTURE, reports)
    before = _digests(reports)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.setenv("DYT_REPORTS", str(reports))
    assert gpu_matrix.main([str(tmp_path / "no-suite")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no CUDA GPU is visible" in err[0]
    assert _digests(reports) == before
    assert gate.gate_files(reports / "perf" / PERF.name, PERF) == gate.GATE_OK
    report = pytest.importorskip("dyt.service.report")
    pytest.importorskip("junitparser", reason="the report extra is not installed: pip install -e .[report]")
    md = report.render(reports).read_text()
    assert "| gpu_name | NVIDIA H200 |" in md and "**4225 GB/s**" in md
    assert "| gpu_tests | dtype_contract | FAIL | 0 | 1 | 0 | 0 |" in md
