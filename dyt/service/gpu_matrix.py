"""Runs the suites on CUDA: one pytest-xdist worker per visible GPU, each pinned to its GPU.

`python -m dyt.service.gpu_matrix [pytest args]` is what `nox -s gpu_tests`, ci/entry.sh and the container
run.
It fails at once when no GPU is visible. Workers are pinned through DYT_GPUS (read by tests/conftest.py
before CUDA initializes), get their own Triton cache directories, are distributed by work stealing, and a
crashed worker is restarted with its test reported failed. pytest-timeout (thread method) turns a hung
kernel into one failed test. A time limit's SIGTERM stops the run with its JUnit XML written for the tests
that finished (interrupt_on_sigterm).
"""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def visible_gpus() -> list[str]:
    """GPU ids as CUDA_VISIBLE_DEVICES would name them, without initializing CUDA in this process."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [g.strip() for g in listed.split(",") if g.strip() and g.strip() != "-1"]
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        out = None
    if out is not None:
        return [line.strip() for line in out.stdout.splitlines() if line.strip()]
    probe = "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)"
    count = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True).stdout.strip()
    return [str(i) for i in range(int(count or 0))]


def pin_worker_gpu(environ=os.environ) -> str | None:
    """In an xdist worker gwN, restrict CUDA to the N-th GPU of DYT_GPUS (before CUDA initializes) and give
    the worker its own Triton cache; tests/conftest.py calls this first thing. Returns the GPU pinned."""
    worker = environ.get("PYTEST_XDIST_WORKER", "")
    cache_root = environ.get("DYT_TRITON_CACHE_ROOT")
    if cache_root:
        environ["TRITON_CACHE_DIR"] = os.path.join(cache_root, worker or "main")
    gpus = [g for g in environ.get("DYT_GPUS", "").split(",") if g]
    if not gpus or not worker.startswith("gw"):
        return None
    environ["CUDA_VISIBLE_DEVICES"] = gpus[int(worker[2:]) % len(gpus)]
    return environ["CUDA_VISIBLE_DEVICES"]


def interrupt_on_sigterm(environ=os.environ) -> bool:
    """In the pytest process that writes the JUnit XML (not an xdist worker), make SIGTERM a
    KeyboardInterrupt: pytest then stops and still writes the JUnit XML of the tests that finished (exit
    2). `timeout` sends SIGTERM to its whole process group when a time limit runs out; without this the
    run died with nothing written. tests/conftest.py calls it. Returns whether it did."""
    if environ.get("PYTEST_XDIST_WORKER"):
        return False

    def interrupt(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # one interrupt: a second would cut the XML short
        raise KeyboardInterrupt(f"{signal.Signals(signum).name}: stopping, writing the reports so far")

    signal.signal(signal.SIGTERM, interrupt)
    return True


def pytest_command(
    workers: int, junit: str | None, session: str, timeout_s: str, args: list[str]
) -> list[str]:
    """One xdist worker per GPU, work stealing, crashed workers restarted (their test reported failed),
    and a thread-method timeout so a hung kernel fails one test instead of the run."""
    return [
        sys.executable, "-m", "pytest", "-p", "xdist", "-n", str(workers), "--dist", "worksteal",
        "--max-worker-restart", str(4 * workers), "-o", f"junit_suite_name={session}",
        "--timeout", timeout_s, "--timeout-method", "thread",
        *([f"--junitxml={junit}"] if junit else []), *args,
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    gpus = visible_gpus()
    if not gpus:
        print("gpu_tests: no CUDA GPU is visible (nvidia-smi and torch see none); this session needs one.",
              file=sys.stderr)  # fmt: skip
        return 2
    reports = pathlib.Path(os.environ.get("DYT_REPORTS", ROOT / "reports"))
    session = os.environ.setdefault("DYT_SESSION", "gpu_tests")
    cache = pathlib.Path(os.environ.get("TRITON_CACHE_DIR", "~/.triton/cache")).expanduser() / "dyt-workers"
    env = dict(os.environ)
    env.setdefault("DYT_TRITON_CACHE_ROOT", str(cache))
    env.update({"DYT_GPUS": ",".join(gpus), "DYT_REQUIRE_GPU": "1", "DYT_REPORTS": str(reports),
                "TRITON_INTERPRET": "0"})  # fmt: skip
    junit = None if any(a.startswith("--junitxml") for a in args) else f"{reports}/junit/{session}.xml"
    (reports / "junit").mkdir(parents=True, exist_ok=True)
    cmd = pytest_command(len(gpus), junit, session, env.get("DYT_TEST_TIMEOUT", "900"), args)
    print(f"gpu_tests: {len(gpus)} GPU(s) {gpus}, one xdist worker each:\n  {' '.join(cmd)}", flush=True)
    # A SIGTERM to the process group reaches pytest too, which stops and writes its reports: wait for that
    # (a Python handler, unlike SIG_IGN, is not inherited by the child).
    signal.signal(signal.SIGTERM, lambda signum, frame: None)
    return subprocess.call(cmd, cwd=ROOT, env=env)


if __name__ == "__main__":
    sys.exit(main())
