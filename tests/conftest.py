"""Suite plumbing: one GPU per xdist worker, interpreter on CPU, NaN-poisoned outputs, seeds,
JUnit properties, and the failures file with a reproduce command for every failing test.

Order matters here: GPU pinning and TRITON_INTERPRET must be settled before torch touches CUDA and
before Triton is imported, so this module sets the environment before importing either.
"""

from __future__ import annotations

import os
import pathlib
import random
import re
import shlex
import sys
import zlib

from dyt.service.gpu_matrix import (  # noqa: E402  (imports neither torch nor Triton)
    SHARED_TEST_GIB,
    gpu_share,
    interrupt_on_sigterm,
    pin_worker_gpu,
)

_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "main")
_PINNED_GPU = pin_worker_gpu(os.environ)
os.environ.setdefault("DYT_POISON_OUTPUTS", "1")
os.environ.setdefault("DYT_SEED", str(random.SystemRandom().randrange(2**31)))

import pytest  # noqa: E402
import torch  # noqa: E402

if not torch.cuda.is_available() and os.environ.get("DYT_REQUIRE_GPU") != "1":
    os.environ.setdefault("TRITON_INTERPRET", "1")

sys.path.insert(0, str(pathlib.Path(__file__).parent))

SESSION = os.environ.get("DYT_SESSION", "tests")
REPORTS = pathlib.Path(os.environ.get("DYT_REPORTS", pathlib.Path(__file__).parents[1] / "reports"))
DOCKER_LINE = 'docker run --gpus all --ipc=host -v "$PWD/reports:/workspace/reports" dyt-kernels:latest'
GPU_ONLY_REASON = (
    "GPU-only: needs a real CUDA device (launch limits, >2^31 elements, CUDA graphs, PTX-only tanh); "
    "the Triton interpreter accepts any grid and cannot prove it. Run `nox -s gpu_tests`."
)


# The conformance checks' plugin (its --dyt-impl, fixtures and per-check properties), loaded wherever this
# conftest is: child runs with addopts of their own take it too.
pytest_plugins = ("dyt.conformance",)

_CONFIG = None
IMPL = None  # the implementation under test (dyt.conformance.implementations.Implementation)


def pytest_addoption(parser):
    parser.addoption(
        "--impl", default=None, metavar="NAME",
        help="the DyT implementation the conformance checks judge (the shipped plugin's --dyt-impl, this "
        "repository's spelling): dyt (default), eager, paper, compile[:NAME], liger, liger_module, or "
        "module:attr; other than dyt, dyt's own suites are not applicable and skip",
    )  # fmt: skip


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    """Before the conformance plugin (pytest_plugins above) resolves its implementation: --impl, else dyt,
    becomes its --dyt-impl."""
    interrupt_on_sigterm()  # a time limit's SIGTERM still leaves the JUnit XML of what finished
    if os.environ.get("DYT_REQUIRE_GPU") == "1" and not torch.cuda.is_available():
        raise pytest.UsageError(
            "gpu_tests: no CUDA GPU is visible (torch.cuda.is_available() is False, "
            f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r}); refusing to pass without one"
        )
    config._dyt_failures = []
    config._dyt_gpu_only_skips = []
    global _CONFIG
    _CONFIG = config
    config.option.dyt_impl = config.option.dyt_impl or config.getoption("--impl") or "dyt"


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session):
    """The implementation the plugin resolved (pytest_configure), for this file's hooks and fixtures."""
    from dyt.conformance import plugin

    global IMPL
    IMPL = plugin.implementation(session.config)
    _write_session_files(session)


NOT_APPLICABLE = (
    "not applicable to --impl {name}: dyt's own suite (its launch plans, tiling paths, mutants and "
    "tooling); tests/test_conformance.py holds the contract checks for every implementation"
)


def pytest_collection_modifyitems(config, items):
    from dyt.conformance import plugin

    if IMPL is None or IMPL.ours:
        return
    skip = pytest.mark.skip(reason=NOT_APPLICABLE.format(name=IMPL.name))
    for item in items:
        if not plugin.is_check(item):
            item.add_marker(skip)


def _device_label() -> str:
    if torch.cuda.is_available():
        idx = torch.cuda.current_device()
        return (
            f"cuda:{idx} {torch.cuda.get_device_name(idx)} "
            f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'all')})"
        )
    return "cpu (Triton interpreter)" if os.environ.get("TRITON_INTERPRET") == "1" else "cpu (plain PyTorch)"


def _write_session_files(session):
    if hasattr(session.config, "workerinput"):
        return  # xdist worker: the controller writes the session-level files
    from dyt.conformance.plugin import junit_log

    xml = junit_log(session.config)
    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    props = {
        "session": SESSION,
        "seed": os.environ["DYT_SEED"],
        "torch": torch.__version__,
        "triton": str(triton_version),
        "interpreter": os.environ.get("TRITON_INTERPRET", "0"),
        "impl": "dyt" if IMPL is None else IMPL.name,  # the implementation under test (--impl)
    }
    if xml is not None:
        for k, v in props.items():
            xml.add_global_property(k, v)
    try:
        from dyt.service import env

        REPORTS.mkdir(parents=True, exist_ok=True)
        env.write_env(REPORTS / "env.json", seeds={"DYT_SEED": int(os.environ["DYT_SEED"])})
    except Exception as exc:  # the manifest must never stop the suites
        print(f"conftest: could not write env.json: {exc}", file=sys.stderr)


def _impl_args() -> str:
    """The --impl argument a rerun needs: empty for dyt's own run."""
    return "" if IMPL is None or IMPL.ours else f"--impl {shlex.quote(IMPL.name)} "


def reproduce_command(nodeid: str) -> str:
    """The session's nox line that reruns nodeid with this run's seed and implementation."""
    return f"DYT_SEED={os.environ['DYT_SEED']} nox -s {SESSION} -- {_impl_args()}{shlex.quote(nodeid)}"


def reproduce_lines(nodeid: str) -> list[str]:
    """Every way to rerun nodeid as this run ran it (same seed, same implementation): the nox line, the
    pytest line it comes to in this checkout (in the interpreter where this run was), and the docker line
    (the seed passed into the container)."""
    seed, impl, test = os.environ["DYT_SEED"], _impl_args(), shlex.quote(nodeid)
    interpreter = "TRITON_INTERPRET=1 " if os.environ.get("TRITON_INTERPRET") == "1" else ""
    docker = DOCKER_LINE.replace(" -v ", f" -e DYT_SEED={seed} -v ", 1)
    return [
        reproduce_command(nodeid),
        f"DYT_SEED={seed} {interpreter}python -m pytest {impl}{test}",
        f"{docker} {impl}{test}",
    ]


@pytest.fixture
def python_path(monkeypatch):
    """Eager CUDA calls on dyt's Python path (dyt.native off), for tests that watch dyt.launcher or the
    compiled-launch cache: on the native path a shape's second call runs in C++ and calls neither."""
    from helpers import use_python_path

    use_python_path(monkeypatch)


@pytest.fixture
def seed(request) -> int:
    """Fresh inputs every run (the session salt DYT_SEED), reproducible from the nodeid and the salt."""
    value = (zlib.crc32(request.node.nodeid.encode()) ^ int(os.environ["DYT_SEED"])) & 0x7FFFFFFF
    request.node.user_properties.append(("seed", str(value)))
    return value


@pytest.fixture(autouse=True)
def _gpu_share(request, record_property):
    """In the GPU matrix (a worker pinned to its GPU, DYT_GPU_LOCKS set): the test shares its GPU with the
    other workers of that GPU, or holds it alone where marked whole_gpu (gpu_matrix.gpu_share). A sharing
    test that allocated more than SHARED_TEST_GIB fails with a message to mark it: the workers per GPU are
    counted from that bound. Its peak allocation is recorded (property gpu_peak_gib) either way. Defined
    first, so it encloses every other autouse fixture."""
    locks = os.environ.get("DYT_GPU_LOCKS")
    if not locks or _PINNED_GPU is None or not torch.cuda.is_available():
        yield
        return
    whole = request.node.get_closest_marker("whole_gpu") is not None
    with gpu_share(locks, _PINNED_GPU, whole):
        torch.cuda.reset_peak_memory_stats()
        yield
        peak_gib = torch.cuda.max_memory_allocated() / 2**30
        torch.cuda.empty_cache()  # what this test cached goes back before the next test on this GPU
    record_property("gpu_peak_gib", f"{peak_gib:.2f}")
    if not whole and peak_gib > SHARED_TEST_GIB:
        pytest.fail(
            f"allocated {peak_gib:.1f} GiB on a GPU shared by several workers, which may hold at most "
            f"{SHARED_TEST_GIB} GiB a test: mark it @pytest.mark.whole_gpu",
            pytrace=False,
        )


@pytest.fixture(autouse=True)
def _record(request, record_property):
    record_property("device", _device_label())
    record_property("worker", _WORKER)
    record_property("reproduce", reproduce_command(request.node.nodeid))
    record_property("impl", "dyt" if IMPL is None else IMPL.name)
    if request.node.get_closest_marker("gpu_only") and not torch.cuda.is_available():
        pytest.skip(GPU_ONLY_REASON)


def pytest_runtest_logreport(report):
    config = _CONFIG
    if config is None or hasattr(config, "workerinput"):
        return
    if report.failed:
        config._dyt_failures.append((report.nodeid, report.when, report.longreprtext[-1500:]))
    not_applicable = (
        IMPL is not None and not IMPL.ours and report.nodeid.split("::")[0] != "tests/test_conformance.py"
    )
    if (
        report.skipped
        and "gpu_only" in report.keywords
        and os.environ.get("DYT_REQUIRE_GPU") == "1"
        and not not_applicable
    ):
        config._dyt_gpu_only_skips.append(report.nodeid)


def pytest_sessionfinish(session, exitstatus):
    config = session.config
    if hasattr(config, "workerinput"):
        return
    if config._dyt_gpu_only_skips:
        print(f"\nGPU-only tests were skipped on a GPU run: {config._dyt_gpu_only_skips}", file=sys.stderr)
        session.exitstatus = 1
    REPORTS.mkdir(parents=True, exist_ok=True)
    other = "" if IMPL is None or IMPL.ours else f"-{re.sub(r'[^A-Za-z0-9_.]+', '_', IMPL.name)}"
    path = REPORTS / f"failures-{SESSION}{other}.md"
    impl_note = f", --impl {IMPL.name}" if other else ""
    lines = [f"# Failures of `{SESSION}` (DYT_SEED={os.environ['DYT_SEED']}{impl_note})", ""]
    if not config._dyt_failures:
        lines.append("No failures.")
    for nodeid, when, text in config._dyt_failures:
        lines += [
            f"## `{nodeid}` ({when})",
            "",
            "Reproduce:",
            "",
            "```",
            *reproduce_lines(nodeid),
            "```",
            "",
            "```",
            text.strip(),
            "```",
            "",
        ]
    from dyt.service.files import write_atomic

    write_atomic(path, "\n".join(lines) + "\n")  # whole or not at all, as the JUnit XML
