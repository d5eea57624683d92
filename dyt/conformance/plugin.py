"""The pytest plugin that runs the conformance checks on an implementation: `pytest -p dyt.conformance
--dyt-impl NAME --pyargs dyt.conformance.checks` (what `python -m dyt conformance` runs).

Options: --dyt-impl (the implementation: dyt.conformance.implementations.resolve's names), --dyt-params
(a module's parameter names by role), --dyt-unsupported (capabilities declared unsupported), --dyt-select
(run only the checks of these test names), --dyt-out (a folder for the verdict: dyt.conformance.verdict's
files). Fixtures: dyt_impl, dyt_seed (fresh inputs per check, reproducible from the run's seed DYT_SEED and
the check's name), dyt_device (the GPU where torch sees one, else the CPU).

Every check records the properties impl, check and reproduce (the one command that reruns it as it ran:
same seed, same implementation) in the JUnit XML. Without --dyt-impl the plugin does nothing, so a
project that loads it for other tests is not changed.
"""

from __future__ import annotations

import os
import random
import shlex
import zlib

import pytest

CHECKS_MODULE = "dyt.conformance.checks"


def pytest_addoption(parser):
    group = parser.getgroup("dyt-conformance", "DyT conformance checks (dyt.conformance)")
    group.addoption(
        "--dyt-impl",
        default=None,
        metavar="NAME",
        help="the DyT implementation the checks judge: dyt, eager, paper, liger, liger_module, "
        "compile[:NAME], or module:attr (a function, an autograd.Function or an nn.Module class)",
    )
    group.addoption(
        "--dyt-params",
        default=None,
        metavar="ROLE=NAME,...",
        help="an nn.Module's parameter names by role, e.g. alpha=alpha,gamma=weight,beta=bias",
    )
    group.addoption(
        "--dyt-unsupported",
        default="",
        metavar="CAP,...",
        help="capabilities the implementation does not support (checks that need them read "
        "'not supported'): no_beta, float32_params, cpu, channels_first, over_2_31_elements",
    )
    group.addoption(
        "--dyt-select",
        action="append",
        default=[],
        metavar="TEST",
        help="run only this check (its test name with parameters); repeatable",
    )
    group.addoption("--dyt-out", default=None, metavar="DIR",
                    help="write the verdict here: verdict.md and .html, failures.md, env.json")  # fmt: skip


def _pairs(text: str | None, option: str) -> dict[str, str]:
    pairs = {}
    for item in filter(None, (text or "").split(",")):
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise pytest.UsageError(f"{option}: expected ROLE=NAME pairs, got {item!r}")
        pairs[key.strip()] = value.strip()
    return pairs


class ConformanceRun:
    """One run's implementation, seed and results (the controller's, under pytest-xdist)."""

    def __init__(self, config, impl):
        self.config = config
        self.impl = impl
        self.seed = os.environ["DYT_SEED"]
        self.reports: list = []

    def reproduce(self, name: str) -> str:
        """The command that reruns check name as it ran."""
        parts = ["python", "-m", "dyt", "conformance", "--impl", self.impl.name, "--select", name]
        for option, flag in (("--dyt-params", "--params"), ("--dyt-unsupported", "--unsupported")):
            value = self.config.getoption(option)
            if value:
                parts += [flag, value]
        return f"DYT_SEED={self.seed} " + " ".join(shlex.quote(p) for p in parts)


_RUN = pytest.StashKey[ConformanceRun]()


def pytest_configure(config):
    name = config.getoption("--dyt-impl")
    config.addinivalue_line("markers", "conformance: DyT's contract checks (dyt.conformance.checks)")
    config.addinivalue_line("markers", "gpu_only: needs a real CUDA device")
    config.addinivalue_line("markers", "whole_gpu: holds its GPU alone (memory-heavy)")
    if name is None:
        return
    from dyt.conformance.implementations import CAPABILITIES, ImplementationError, resolve

    unsupported = [c.strip() for c in config.getoption("--dyt-unsupported").split(",") if c.strip()]
    unknown = sorted(set(unsupported) - set(CAPABILITIES))
    if unknown:
        raise pytest.UsageError(
            f"--dyt-unsupported: unknown capabilities {unknown}; known: {sorted(CAPABILITIES)}"
        )
    try:
        impl = resolve(name, parameter_names=_pairs(config.getoption("--dyt-params"), "--dyt-params"),
                       declared=dict.fromkeys(unsupported, False))  # fmt: skip
    except ImplementationError as exc:
        raise pytest.UsageError(f"--dyt-impl {exc}") from None
    os.environ.setdefault("DYT_SEED", str(random.SystemRandom().randrange(2**31)))
    config.stash[_RUN] = ConformanceRun(config, impl)


def _run(config) -> ConformanceRun | None:
    return config.stash.get(_RUN, None)


def implementation(config):
    """The implementation this run judges (an implementations.Implementation), None without --dyt-impl."""
    run = _run(config)
    return None if run is None else run.impl


def is_check(item) -> bool:
    """Whether a collected test is one of the shipped checks (wherever it was imported to be collected)."""
    return _is_check(item)


def _is_check(item) -> bool:
    function = getattr(item, "function", None)
    return getattr(function, "__module__", None) == CHECKS_MODULE


def pytest_generate_tests(metafunc):
    run = _run(metafunc.config)
    if run is not None and "dyt_impl" in metafunc.fixturenames:
        metafunc.parametrize("dyt_impl", [run.impl], ids=[run.impl.name], scope="module")


def pytest_collection_modifyitems(config, items):
    run = _run(config)
    chosen = set(config.getoption("--dyt-select"))
    if run is None or not chosen:
        return
    keep = [item for item in items if not _is_check(item) or item.name in chosen]
    dropped = [item for item in items if item not in keep]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


@pytest.fixture
def dyt_seed(request) -> int:
    """This check's seed: the run's DYT_SEED mixed with the check's name (with its parameters), so a rerun
    with the same DYT_SEED draws the same inputs wherever the checks are installed."""
    value = (zlib.crc32(request.node.name.encode()) ^ int(os.environ["DYT_SEED"])) & 0x7FFFFFFF
    request.node.user_properties.append(("seed", str(value)))
    return value


@pytest.fixture
def dyt_device():
    import torch

    from dyt.conformance.contract import default_device

    return default_device() if torch.cuda.is_available() else torch.device("cpu")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    run = _run(item.config)
    if run is None or not _is_check(item):
        return
    item.user_properties += [("impl", run.impl.name), ("check", item.originalname),
                             ("reproduce", run.reproduce(item.name))]  # fmt: skip


def junit_log(config):
    """pytest's JUnit writer of this run (--junitxml), None without one: where global properties go."""
    from _pytest.junitxml import xml_key  # the key junitxml stashes its writer under (pytest >= 7)

    return config.stash.get(xml_key, None)


class _Collector:
    """Gathers check results in the process that writes the verdict (the controller under xdist)."""

    def __init__(self, run: ConformanceRun):
        self.run = run

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report):
        props = dict(report.user_properties)
        if "check" not in props:
            return
        if report.when == "call" or report.outcome != "passed":
            self.run.reports.append(report)


def pytest_sessionstart(session):
    """In the process that writes the JUnit XML: the collector of results, and the run's provenance as the
    XML's global properties (impl, seed, gpu_name, git_sha, dyt_version)."""
    run = _run(session.config)
    if run is None or hasattr(session.config, "workerinput"):
        return
    session.config.pluginmanager.register(_Collector(run), "dyt-conformance-collector")
    xml = junit_log(session.config)
    if xml is not None:
        from dyt.service.env import collect_env

        env = collect_env()
        props = {"impl": run.impl.name, "seed": run.seed, "gpu_name": env.get("gpu_name") or "CPU",
                 "git_sha": env.get("git_sha"), "dyt_version": env.get("dyt_version")}  # fmt: skip
        for name, value in props.items():
            xml.add_global_property(name, str(value))


def pytest_sessionfinish(session, exitstatus):
    run = _run(session.config)
    out = session.config.getoption("--dyt-out")
    if run is None or out is None or hasattr(session.config, "workerinput"):
        return
    from dyt.conformance import verdict

    verdict.write(out, run.impl, run.seed, verdict.from_reports(run.reports, run.impl.name))
