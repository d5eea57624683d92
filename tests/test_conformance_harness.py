"""tooling: the conformance harness: `--impl` names (built-ins, module:attr) and their errors before any test
runs, dyt's own suites reported not applicable to other implementations, test ids and reproduce commands
that carry the implementation, and the report's conformance table."""

from __future__ import annotations

import dataclasses
import os
import pathlib
import re
import subprocess
import sys
import textwrap

import pytest

from dyt.conformance import implementations
from dyt.service import gpu_matrix, report

pytestmark = pytest.mark.tooling
ROOT = pathlib.Path(__file__).parents[1]


def test_builtins_resolve_and_only_dyt_is_ours():
    for name in ("dyt", "eager", "paper", "compile", "compile:paper"):
        impl = implementations.resolve(name)
        assert impl.name == name and callable(impl.fn) and impl.ours == (name == "dyt")


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("nope", r"not a built-in \(dyt, eager, paper, compile, liger, liger_module\), not compile:NAME and"),
        ("no_such_module_xyz:f", r"module 'no_such_module_xyz' does not import"),
        ("math:no_such_attr", r"math has no attribute 'no_such_attr'"),
        ("math:pi", r"a float is not a function, an autograd.Function subclass or an nn.Module class"),
        ("os.path:join", None),  # a callable of (*paths): it can be called with four arguments
        ("operator:neg", r"cannot be called as \(x, alpha, gamma, beta\)"),
    ],
)
def test_bad_names_and_signatures_are_clear_errors(name, message):
    if message is None:
        assert implementations.resolve(name).fn is os.path.join
        return
    with pytest.raises(ValueError, match=message):
        implementations.resolve(name)


def test_liger_without_liger_kernel_says_so():
    try:
        import liger_kernel  # noqa: F401
    except ImportError:
        with pytest.raises(ValueError, match="liger: its library does not import here"):
            implementations.resolve("liger")
    else:
        assert implementations.resolve("liger").name == "liger"


def _inner_env(parent=None, **extra) -> dict:
    """An inner run's environment: the parent's (this process's by default) without the outer session's
    variables (its GPU guard, pinning, locks, xdist identity), in the interpreter, importing this checkout."""
    return {**gpu_matrix.outside_session(os.environ if parent is None else parent), "TRITON_INTERPRET": "1",
            "PYTHONPATH": str(ROOT), **extra}  # fmt: skip


def _pytest(*args, env_extra=None, parent=None):
    env = _inner_env(parent, **(env_extra or {}))
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)  # fmt: skip


def test_an_inner_run_under_the_gpu_sessions_environment_keeps_none_of_its_guard(tmp_path):
    """A test that starts its own pytest inside `nox -s gpu_tests` inherits the matrix's environment
    (gpu_matrix.session_env: DYT_REQUIRE_GPU=1, pinning, locks). With the GPU hidden, as the crash-and-hang
    test hides it, that guard would refuse the inner run (exit 4): the inner environment drops it."""
    session = {**os.environ, "DYT_SESSION": "gpu_tests"}  # as `nox -s gpu_tests` starts the matrix
    parent = gpu_matrix.session_env(["0"], tmp_path / "outer", str(tmp_path), session)
    assert parent["DYT_REQUIRE_GPU"] == "1" and parent["DYT_SESSION"] == "gpu_tests"
    run = _pytest("tests/test_conformance.py::test_empty_input", "--impl", "eager", parent=parent,
                  env_extra={"DYT_REPORTS": str(tmp_path), "CUDA_VISIBLE_DEVICES": ""})  # fmt: skip
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert "2 passed" in run.stdout


def test_a_bad_impl_stops_the_run_before_any_test(tmp_path):
    run = _pytest("tests/test_conformance.py", "--impl", "nope", env_extra={"DYT_REPORTS": str(tmp_path)})
    assert run.returncode == 4, run.stdout + run.stderr  # pytest's usage error: nothing ran
    assert "not a built-in" in run.stderr and " passed" not in run.stdout


def test_other_implementations_skip_dyts_own_suites_and_carry_their_name(tmp_path):
    """With --impl eager: a dyt-internal test is skipped as not applicable, a conformance test runs with
    eager in its id, and its reproduce command names --impl eager."""
    junit = tmp_path / "junit" / "t.xml"
    tests = ("tests/test_conformance.py::test_empty_input", "tests/test_tree_rules.py")
    env = {"DYT_REPORTS": str(tmp_path)}
    run = _pytest(*tests, "--impl", "eager", f"--junitxml={junit}", "-rs", env_extra=env)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "not applicable to --impl eager: dyt's own suite" in run.stdout
    text = junit.read_text()
    assert 'name="test_empty_input[eager-(0, 64)]"' in text
    assert "--impl eager 'tests/test_conformance.py::test_empty_input[eager-(0, 64)]'" in text
    data = report.load_junit(junit.parent)
    assert data.conformance[("eager", "test_empty_input")].passed == 2
    assert data.own_suites["eager"].skipped >= 1 and not data.own_suites["eager"].passed


def _case(name, impl, outcome):
    body = {"pass": "", "skip": '<skipped message="GPU-only"/>',
            "fail": '<failure message="AssertionError: y dtype">trace</failure>'}[outcome]  # fmt: skip
    props = (f'<properties><property name="impl" value="{impl}"/><property name="reproduce" '
             f'value="nox -s tests -- --impl {impl} \'{name}\'"/></properties>')  # fmt: skip
    return f'<testcase classname="tests.test_conformance" name="{name}" time="0.1">{props}{body}</testcase>'


def test_the_report_tabulates_implementations_by_check(tmp_path):
    cases = [
        _case("test_more_than_65535_rows[dyt]", "dyt", "pass"),
        _case("test_more_than_65535_rows[liger]", "liger", "fail"),
        _case("test_values_against_the_reference[liger-(64, 96)-fp32]", "liger", "pass"),
        _case("test_values_against_the_reference[liger-(64, 96)-bf16]", "liger", "fail"),
        _case("test_more_than_2_31_elements[dyt]", "dyt", "skip"),
        '<testcase classname="tests.test_grid_limit" name="test_plan" time="0.1"/>',
    ]
    (tmp_path / "junit").mkdir()
    (tmp_path / "junit" / "gpu_tests.xml").write_text(
        textwrap.dedent(f"""<?xml version="1.0" encoding="utf-8"?>
        <testsuites><testsuite name="gpu_tests" tests="6">{"".join(cases)}</testsuite></testsuites>""")
    )
    data = report.load_junit(tmp_path / "junit")
    text = "\n".join(report.conformance_section(data))
    assert "| check | dyt | liger |" in text
    assert "| test_more_than_65535_rows (rows past grid axis 1 (65,535)) | pass | fail 1/1 |" in text
    assert "| test_values_against_the_reference | - | fail 1/2 |" in text
    assert "| test_more_than_2_31_elements | skipped | - |" in text
    assert (
        "| dyt's own suites (plans, tiling paths, mutants, tooling) | 1 passed, 0 failed, 0 skipped |" in text
    )
    assert "- **liger** `test_more_than_65535_rows`: AssertionError: y dtype" in text
    assert "`nox -s tests -- --impl liger 'test_more_than_65535_rows[liger]'`" in text
    # Another implementation's failures are its verdict, in the table; the failures section is dyt's.
    assert "no failures recorded" in "\n".join(report.failures_section(data, []))
    ours = dataclasses.replace(data.failures[0], impl="dyt", nodeid="tests/test_x.py::t", reproduce="rerun t")
    data.failures.append(ours)
    failures = "\n".join(report.failures_section(data, []))
    assert "tests/test_x.py::t" in failures and "[liger]" not in failures


BROKEN_IMPL = """
import os, time
import torch

def dyt(x, alpha, gamma, beta=None):
    if x.shape[0] == 0:
        os._exit(3)  # a crash of the implementation: its worker process dies
    if x.shape[0] == 70000:
        time.sleep(600)  # a hang
    y = torch.tanh(alpha * x) * gamma
    return y if beta is None else y + beta
"""


def test_a_crash_or_a_hang_of_the_implementation_fails_its_test_not_the_run(tmp_path):
    """An implementation that kills its process on empty input and hangs on 70,000 rows: those tests fail
    (the worker restarted, the hang ended by the timeout) and every other test still runs and reports.

    The inner run sees no GPU (CUDA_VISIBLE_DEVICES empty): what it checks is the runner's restart and
    timeout, and its 10 s timeout must time the hang, not a CUDA start in the restarted worker beside a
    loaded parallel suite."""
    (tmp_path / "broken_dyt.py").write_text(BROKEN_IMPL)
    junit = tmp_path / "junit" / "t.xml"
    names = ("test_empty_input", "test_more_than_65535_rows", "test_bitwise_repeats")
    tests = [f"tests/test_conformance.py::{name}" for name in names]
    env = _inner_env(
        PYTHONPATH=f"{ROOT}{os.pathsep}{tmp_path}", DYT_REPORTS=str(tmp_path), CUDA_VISIBLE_DEVICES=""
    )
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "xdist", "-n", "1", "-rfE",
           "--max-worker-restart", "4", "--timeout", "10", "--timeout-method", "thread", *tests,
           "--impl", "broken_dyt:dyt", f"--junitxml={junit}"]  # fmt: skip
    run = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    inner = run.stdout[-3000:] + run.stderr[-3000:]  # the inner run's summary: which test failed, and why
    assert run.returncode == 1, inner
    data = report.load_junit(junit.parent)
    impl = "broken_dyt:dyt"
    empty = data.conformance[(impl, "test_empty_input")]
    assert (empty.failed, empty.passed) == (1, 1), inner  # (0, 64) killed its worker; (2, 0, 64) ran on
    hang = data.conformance[(impl, "test_more_than_65535_rows")]
    assert hang.failed == 1, inner  # the hang, stopped by the timeout
    assert data.conformance[(impl, "test_bitwise_repeats")].passed == 1, inner


SEEDED_BUG = """
import torch

def dyt(x, alpha, gamma, beta=None):
    y = torch.tanh(alpha * x) * gamma
    y = y if beta is None else y + beta
    if x.dtype == torch.float32 and x.numel() and float(x.detach().flatten()[0]) > 0:
        y = y * 1.001  # wrong where the first element drawn is positive: about every other seed
    return y
"""


def test_a_printed_reproduce_line_fails_the_same_test_the_same_way(tmp_path):
    """A failure of another implementation whose inputs decide it: the failures file's pytest line, run as
    printed, fails the same test with the same message (same seed, same implementation); the nox line
    passes pytest the same arguments, and the docker line the seed and the implementation."""
    (tmp_path / "seeded_bug.py").write_text(SEEDED_BUG)
    env_extra = {"PYTHONPATH": f"{ROOT}{os.pathsep}{tmp_path}", "DYT_REPORTS": str(tmp_path / "first")}
    tests = [f"tests/test_conformance.py::test_values_against_the_reference[seeded_bug:dyt-{shape}-fp32]"
             for shape in ("(64, 96)", "(37, 1000)", "(300, 7)")]  # fmt: skip
    for salt in range(1, 20):  # each selected test fails for about half the salts
        run = _pytest(*tests, "--impl", "seeded_bug:dyt", env_extra={**env_extra, "DYT_SEED": str(salt)})
        if run.returncode == 1:
            break
    assert run.returncode == 1, run.stdout[-2000:] + run.stderr[-2000:]
    notes = (tmp_path / "first" / "failures-tests-seeded_bug_dyt.md").read_text()
    nodeid, block = re.search(
        r"^## `([^`]+)` \(call\)\n\nReproduce:\n\n```\n(.*?)```", notes, re.M | re.S
    ).groups()
    nox_line, pytest_line, docker_line = block.strip().splitlines()
    assert nox_line.startswith(f"DYT_SEED={salt} nox -s tests -- ")
    assert nox_line.split(" -- ", 1)[1] == pytest_line.split(" -m pytest ", 1)[1]
    assert f"-e DYT_SEED={salt} " in docker_line and docker_line.endswith(nox_line.split(" -- ", 1)[1])
    first = re.search(r"AssertionError: (.*)", notes).group(1)
    env = _inner_env(**{**env_extra, "DYT_REPORTS": str(tmp_path / "again")})
    again = subprocess.run(["bash", "-c", pytest_line], cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=600)  # fmt: skip
    assert again.returncode == 1, again.stdout[-2000:] + again.stderr[-2000:]
    rerun = (tmp_path / "again" / "failures-tests-seeded_bug_dyt.md").read_text()
    assert f"## `{nodeid}` (call)" in rerun and first in rerun, (first, rerun[:2000])
