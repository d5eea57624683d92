"""Runs the suites on CUDA: several pytest-xdist workers per visible GPU, each pinned to one GPU.

`python -m dyt.service.gpu_matrix [pytest args]` is what `nox -s gpu_tests`, ci/entry.sh and the container
run.
It fails at once when no GPU is visible. Workers per GPU come from the GPU's memory and the CPU cores
(workers_per_gpu; DYT_WORKERS_PER_GPU overrides). Workers are pinned through DYT_GPUS (read by
tests/conftest.py before CUDA initializes), get their own Triton cache directories, are distributed by work
stealing, and a crashed worker is restarted with its test reported failed. The workers of one GPU share it
test by test (gpu_share): a test marked whole_gpu (memory-heavy) holds its GPU alone, every other test
shares it and may allocate at most SHARED_TEST_GIB. pytest-timeout (thread method) turns a hung kernel into
one failed test. A time limit's SIGTERM stops the run with its JUnit XML written for the tests that
finished (interrupt_on_sigterm). The JUnit XML is written whole or not at all (dyt.service.junit_atomic).

Exit status: pytest's (0 passed, 1 tests failed, 2 interrupted, e.g. by SIGTERM, with the JUnit XML of the
tests that finished, 3 internal error, 4 usage error, 5 no tests collected), or, each with one line on
stderr:
  2   the run did not start: no GPU visible (CUDA_VISIBLE_DEVICES empty, no driver), or a bad
      DYT_WORKERS_PER_GPU
  74  files.WRITE_FAILED: reports/ cannot be written (full disk, read-only, no permission), found before
      any test runs; or the JUnit XML could not be written at the end (saved in the temporary folder
      instead where it can be, an earlier file left as it was)

Invariant: every variable that session_env sets for the run is listed in SESSION_VARIABLES, so that
outside_session gives a child run (a test that starts its own pytest) an environment free of this run's
guards.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping

from dyt.service.files import WRITE_FAILED, check_writable, write_error

ROOT = pathlib.Path(__file__).resolve().parents[2]

# A test not marked whole_gpu may allocate at most this much GPU memory (tests/conftest.py fails it
# otherwise): the workers of one GPU are counted so that each can hold this at once, plus its CUDA context.
SHARED_TEST_GIB = 12
WORKER_OVERHEAD_GIB = 2
CORES_PER_WORKER = 4  # each worker compiles its own kernels (its own Triton cache): CPU-bound at the start
MAX_WORKERS_PER_GPU = 8

# What session_env sets for the run, and what xdist sets in its workers: a child run drops them all.
SESSION_VARIABLES = (
    "DYT_SESSION", "DYT_REQUIRE_GPU", "DYT_GPUS", "DYT_TRITON_CACHE_ROOT", "DYT_GPU_LOCKS",
    "PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID", "PYTEST_CURRENT_TEST",
    "PYTEST_ADDOPTS",
)  # fmt: skip


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


def gpu_memory_gib(gpus: list[str]) -> float | None:
    """The smallest total memory among the GPUs, in GiB, from nvidia-smi (no CUDA in this process); None
    where nvidia-smi does not answer."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=index,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    sizes = {}
    for line in out.stdout.splitlines():
        index, _, mib = line.partition(",")
        with contextlib.suppress(ValueError):
            sizes[index.strip()] = float(mib) / 1024
    chosen = [sizes[g] for g in gpus if g in sizes] or list(sizes.values())
    return min(chosen) if chosen else None


def workers_per_gpu(memory_gib: float | None, cores: int, n_gpus: int, override: str | None = None) -> int:
    """xdist workers per GPU: override (DYT_WORKERS_PER_GPU) where given; else as many as the GPU's memory
    holds at SHARED_TEST_GIB + WORKER_OVERHEAD_GIB each and the cores keep busy at CORES_PER_WORKER each,
    at most MAX_WORKERS_PER_GPU and at least one. Unknown memory counts as one worker's worth."""
    if override:
        try:
            chosen = int(override)
        except ValueError:
            raise ValueError(f"DYT_WORKERS_PER_GPU={override!r}: expected a positive integer") from None
        if chosen < 1:
            raise ValueError(f"DYT_WORKERS_PER_GPU={override!r}: expected a positive integer")
        return chosen
    by_memory = int((memory_gib or 0) // (SHARED_TEST_GIB + WORKER_OVERHEAD_GIB))
    by_cores = cores // (CORES_PER_WORKER * max(1, n_gpus))
    return max(1, min(by_memory, by_cores, MAX_WORKERS_PER_GPU))


@contextlib.contextmanager
def gpu_share(lock_dir: str | os.PathLike, gpu: str, whole: bool) -> Iterator[None]:
    """Holds GPU gpu for one test among the processes that use lock_dir: alone where whole, else beside
    other sharing holders. A readers-writer lock over two flock files: a whole holder first takes the
    turnstile, which stops new sharers from entering, then waits for the sharers inside to leave; a sharer
    passes the turnstile on its way in. So a waiting whole_gpu test is served once the tests already
    running end, not starved by the sharers behind it. A process that dies releases what it held."""
    base = pathlib.Path(lock_dir)
    with open(base / f"gpu-{gpu}.turnstile", "a+") as turnstile, open(base / f"gpu-{gpu}.lock", "a+") as room:
        if whole:
            fcntl.flock(turnstile, fcntl.LOCK_EX)
            fcntl.flock(room, fcntl.LOCK_EX)
        else:
            fcntl.flock(turnstile, fcntl.LOCK_SH)
            fcntl.flock(room, fcntl.LOCK_SH)
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(room, fcntl.LOCK_UN)
            fcntl.flock(turnstile, fcntl.LOCK_UN)


def outside_session(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """A copy of environ without this run's session variables (SESSION_VARIABLES): the environment for a
    child pytest that a test starts, which must not inherit the outer run's GPU guard, pinning, locks or
    xdist identity."""
    return {k: v for k, v in environ.items() if k not in SESSION_VARIABLES}


def session_env(
    gpus: list[str], reports: pathlib.Path, lock_dir: str, environ: Mapping[str, str] = os.environ
) -> dict[str, str]:
    """The environment of the matrix's pytest: the GPUs to pin, the GPU guard (DYT_REQUIRE_GPU), the
    per-worker Triton caches, the GPU-sharing locks and where reports go."""
    env = dict(environ)
    env.setdefault("DYT_SESSION", "gpu_tests")
    cache = pathlib.Path(env.get("TRITON_CACHE_DIR", "~/.triton/cache")).expanduser() / "dyt-workers"
    env.setdefault("DYT_TRITON_CACHE_ROOT", str(cache))
    env.update({"DYT_GPUS": ",".join(gpus), "DYT_REQUIRE_GPU": "1", "DYT_REPORTS": str(reports),
                "DYT_GPU_LOCKS": lock_dir, "TRITON_INTERPRET": "0"})  # fmt: skip
    return env


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
    """workers xdist workers, work stealing, crashed workers restarted (their test reported failed), a
    thread-method timeout so a hung kernel fails one test instead of the run, and the JUnit XML written
    whole or not at all (dyt.service.junit_atomic)."""
    return [
        sys.executable, "-m", "pytest", "-p", "xdist", "-p", "dyt.service.junit_atomic",
        "-n", str(workers), "--dist", "worksteal",
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
    try:
        per_gpu = workers_per_gpu(gpu_memory_gib(gpus), os.cpu_count() or 1, len(gpus),
                                  os.environ.get("DYT_WORKERS_PER_GPU"))  # fmt: skip
    except ValueError as exc:
        print(f"gpu_tests: {exc}", file=sys.stderr)
        return 2
    reports = pathlib.Path(os.environ.get("DYT_REPORTS", ROOT / "reports"))
    locks = tempfile.TemporaryDirectory(prefix="dyt-gpu-locks-")
    env = session_env(gpus, reports, locks.name)
    session = env["DYT_SESSION"]
    junit = None if any(a.startswith("--junitxml") for a in args) else f"{reports}/junit/{session}.xml"
    try:  # before hours of tests, not after: a full or read-only reports/ would lose every result
        check_writable(reports / "junit")
    except OSError as exc:
        print(f"{write_error('gpu_tests', reports / 'junit', exc)}; no test was run", file=sys.stderr)
        return WRITE_FAILED
    workers = per_gpu * len(gpus)
    cmd = pytest_command(workers, junit, session, env.get("DYT_TEST_TIMEOUT", "900"), args)
    print(f"gpu_tests: {len(gpus)} GPU(s) {gpus}, {per_gpu} xdist worker(s) each (DYT_WORKERS_PER_GPU "
          f"overrides; whole_gpu tests hold their GPU alone):\n  {' '.join(cmd)}", flush=True)  # fmt: skip
    # A SIGTERM to the process group reaches pytest too, which stops and writes its reports: wait for that
    # (a Python handler, unlike SIG_IGN, is not inherited by the child).
    signal.signal(signal.SIGTERM, lambda signum, frame: None)
    with locks:
        return subprocess.call(cmd, cwd=ROOT, env=env)


if __name__ == "__main__":
    sys.exit(main())
