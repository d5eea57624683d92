"""tooling: the GPU matrix's harness itself, shown on CPU with stand-in tests. One worker per GPU, each
pinned to its own GPU and Triton cache; a crashed worker restarts with its test reported failed and the
run goes on; a hung test fails alone by the thread-method timeout (which ends that worker's process); a
time limit's SIGTERM to the whole run still leaves the JUnit XML of the tests that finished."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import time
import xml.etree.ElementTree as ET

import pytest

from dyt.service import gpu_matrix

pytestmark = pytest.mark.tooling
ROOT = pathlib.Path(__file__).parents[1]


def test_pin_worker_gpu_takes_the_workers_own_gpu():
    for worker, expected in [("gw0", "3"), ("gw1", "5"), ("gw2", "3")]:
        env = {"PYTEST_XDIST_WORKER": worker, "DYT_GPUS": "3,5", "DYT_TRITON_CACHE_ROOT": "/c"}
        assert gpu_matrix.pin_worker_gpu(env) == expected
        assert env["CUDA_VISIBLE_DEVICES"] == expected and env["TRITON_CACHE_DIR"] == f"/c/{worker}"
    outside = {"DYT_GPUS": "0,1"}
    assert gpu_matrix.pin_worker_gpu(outside) is None and "CUDA_VISIBLE_DEVICES" not in outside


def test_workers_per_gpu_from_memory_and_cores():
    h100, h200 = 79.6, 139.8  # GiB, as nvidia-smi reports them
    assert gpu_matrix.workers_per_gpu(h100, 16, 1) == 4  # cores: 16 / 4
    assert gpu_matrix.workers_per_gpu(h200, 32, 1) == gpu_matrix.MAX_WORKERS_PER_GPU == 8
    assert gpu_matrix.workers_per_gpu(h100, 128, 8) == 4
    assert gpu_matrix.workers_per_gpu(h100, 128, 1) == 5  # memory: 79.6 / (12 + 2)
    assert gpu_matrix.workers_per_gpu(16, 64, 1) == 1  # a small GPU: one worker
    assert gpu_matrix.workers_per_gpu(None, 64, 1) == 1  # nvidia-smi did not answer
    assert gpu_matrix.workers_per_gpu(h100, 2, 4) == 1
    assert gpu_matrix.workers_per_gpu(h100, 16, 1, override="6") == 6
    for bad in ("0", "-1", "four"):
        with pytest.raises(ValueError, match="DYT_WORKERS_PER_GPU=.*expected a positive integer"):
            gpu_matrix.workers_per_gpu(h100, 16, 1, override=bad)


def test_a_child_run_drops_every_variable_the_session_sets(tmp_path):
    env = gpu_matrix.session_env(["2", "3"], tmp_path, str(tmp_path / "locks"), environ={"HOME": "/h"})
    outside = gpu_matrix.outside_session(env)
    added = set(env) - {"HOME"} - set(outside)
    assert added == {"DYT_SESSION", "DYT_REQUIRE_GPU", "DYT_GPUS", "DYT_TRITON_CACHE_ROOT", "DYT_GPU_LOCKS"}
    assert outside == {"HOME": "/h", "DYT_REPORTS": str(tmp_path), "TRITON_INTERPRET": "0"}
    worker = {**env, "PYTEST_XDIST_WORKER": "gw3", "PYTEST_XDIST_WORKER_COUNT": "4"}
    assert gpu_matrix.outside_session(worker) == outside


_HOLDER = """
import sys, time
from dyt.service.gpu_matrix import gpu_share
lock_dir, name, whole, hold = sys.argv[1], sys.argv[2], sys.argv[3] == "whole", float(sys.argv[4])
with gpu_share(lock_dir, "0", whole):
    start = time.monotonic()
    print("in", name, flush=True)
    time.sleep(hold)
    end = time.monotonic()  # before the release: the span is the time held
print("out", name, start, end, flush=True)
"""


def test_a_whole_gpu_test_holds_its_gpu_alone_and_is_not_starved(tmp_path):
    """Two sharers overlap; a whole_gpu holder that arrives while they run waits for them to leave, and a
    sharer that arrives after it waits for it (the turnstile), so the GPU is never shared with it."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}

    def start(name, whole, hold):
        return subprocess.Popen([sys.executable, "-c", _HOLDER, str(tmp_path), name,
                                 "whole" if whole else "share", str(hold)],
                                env=env, stdout=subprocess.PIPE, text=True)  # fmt: skip

    first, second = start("s1", False, 2.0), start("s2", False, 2.0)
    for proc in (first, second):
        assert proc.stdout.readline().startswith("in")  # both inside at once
    whole = start("w", True, 1.0)
    time.sleep(0.5)  # it waits on the room
    late = start("s3", False, 0.2)
    spans = {}
    for proc in (first, second, whole, late):
        out, _ = proc.communicate(timeout=60)
        _, name, begin, end = out.strip().splitlines()[-1].split()
        spans[name] = (float(begin), float(end))
    w0, w1 = spans["w"]
    for name in ("s1", "s2", "s3"):
        begin, end = spans[name]
        assert end <= w0 or begin >= w1, (
            f"{name} {spans[name]} shared the GPU with the whole_gpu holder {spans['w']}"
        )
    assert spans["s3"][0] >= w1, "the late sharer went in ahead of the waiting whole_gpu holder"


def test_no_gpu_fails_loudly(monkeypatch, capsys):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert gpu_matrix.main(["-k", "nothing"]) == 2
    assert "no CUDA GPU is visible" in capsys.readouterr().err


STAND_INS = {
    "conftest.py": """
        import json, os, pathlib
        from dyt.service.gpu_matrix import pin_worker_gpu
        pin_worker_gpu(os.environ)

        def pytest_configure(config):
            worker = os.environ.get("PYTEST_XDIST_WORKER")
            if worker:
                seen = {"gpu": os.environ.get("CUDA_VISIBLE_DEVICES"),
                        "cache": os.environ.get("TRITON_CACHE_DIR")}
                (pathlib.Path(__file__).parent / f"seen-{worker}.json").write_text(json.dumps(seen))
    """,
    "test_ok.py": """
        import time
        def test_ok_a(): time.sleep(0.5)
        def test_ok_b(): time.sleep(0.5)
    """,
    "test_crash.py": """
        import os
        def test_crash(): os._exit(3)
    """,
    "test_hang.py": """
        import time
        def test_hang(): time.sleep(120)
    """,
}


def test_two_workers_survive_a_crash_and_a_hang(tmp_path):
    for name, body in STAND_INS.items():
        (tmp_path / name).write_text(textwrap.dedent(body))
    junit = tmp_path / "junit.xml"
    cmd = gpu_matrix.pytest_command(2, str(junit), "harness", "5", ["-p", "no:cacheprovider", str(tmp_path)])
    env = {**gpu_matrix.outside_session(), "DYT_GPUS": "0,1", "DYT_TRITON_CACHE_ROOT": str(tmp_path / "c"),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}  # fmt: skip
    start = time.monotonic()
    out = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    elapsed = time.monotonic() - start
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-2000:]
    cases = {tc.get("name"): tc for tc in ET.parse(junit).getroot().iter("testcase")}
    failed = {n for n, tc in cases.items() if tc.find("failure") is not None or tc.find("error") is not None}
    assert failed == {"test_crash", "test_hang"}, (failed, out.stdout[-3000:])
    assert {"test_ok_a", "test_ok_b"} <= set(cases) - failed
    # pytest-timeout's thread method ends the hung worker's process; xdist reports that test as crashed
    # and restarts the worker, so the hang costs one test, not the run.
    assert "crashed while running 'test_hang.py::test_hang'" in ET.tostring(
        cases["test_hang"], encoding="unicode"
    )
    assert elapsed < 60, f"the 120 s hang was not cut by the 5 s timeout ({elapsed:.0f} s)"
    seen = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("seen-gw*.json"))]
    assert {s["gpu"] for s in seen} == {"0", "1"}, seen
    assert all(s["cache"].startswith(str(tmp_path / "c")) for s in seen)


STOPPED_STAND_INS = {
    "conftest.py": """
        from dyt.service.gpu_matrix import interrupt_on_sigterm

        def pytest_configure(config):
            interrupt_on_sigterm()
    """,
    "test_ok.py": """
        import os, pathlib
        def test_ok_a(): pathlib.Path(os.environ["MARKS"], "a").touch()
        def test_ok_b(): pathlib.Path(os.environ["MARKS"], "b").touch()
    """,
    "test_slow.py": """
        import time
        def test_slow(): time.sleep(120)
    """,
}


def test_a_time_limits_sigterm_leaves_the_junit_of_what_finished(tmp_path):
    """`timeout` ends a run by SIGTERM to its whole process group: the pytest that writes the JUnit XML
    stops as on Ctrl-C and writes it (the finished tests passed, exit 2), its workers die with the rest."""
    suite, marks = tmp_path / "suite", tmp_path / "marks"
    suite.mkdir()
    marks.mkdir()
    for name, body in STOPPED_STAND_INS.items():
        (suite / name).write_text(textwrap.dedent(body))
    junit = tmp_path / "junit.xml"
    cmd = gpu_matrix.pytest_command(2, str(junit), "harness", "300", ["-p", "no:cacheprovider", str(suite)])
    env = {**gpu_matrix.outside_session(), "MARKS": str(marks),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not ((marks / "a").exists() and (marks / "b").exists()) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert (marks / "a").exists() and (marks / "b").exists(), "the quick tests never ran"
        time.sleep(1)  # their reports reach the controller
        start = time.monotonic()
        os.killpg(proc.pid, signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert time.monotonic() - start < 30
    assert proc.returncode == 2, out[-3000:]
    cases = {tc.get("name"): tc for tc in ET.parse(junit).getroot().iter("testcase")}
    passed = {n for n, tc in cases.items() if len(tc) == 0 or all(c.tag == "system-out" for c in tc)}
    assert {"test_ok_a", "test_ok_b"} <= passed, (sorted(cases), out[-3000:])
