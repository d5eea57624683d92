"""Deliberately broken variants of the real kernels and planner, one per bug class of the seed pull request.

A suite that cannot catch its own bug class proves nothing, so each mutant is built FROM THE REAL SOURCE by
an exact textual patch (no copies of the kernels): the patch must match the current code exactly the
expected number of times, or building the mutant fails loudly instead of silently testing the real code.

Three ways to use it:
  * ``python tests/mutants.py``: runs every mutant against its suite and prints mutant -> suite -> caught.
  * ``DYT_MUTANT=<name> PYTHONPATH=tests python -m pytest -p mutants ...``: as a pytest plugin, swaps the
    mutant in at configure time (before the suites import anything from dyt).
  * tests/test_mutations.py (marker ``mutation``) runs each mutant's child pytest and asserts it fails.
"""

from __future__ import annotations
import __future__ as _future

import atexit
import dataclasses
import importlib
import importlib.util
import inspect
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
import xml.etree.ElementTree as ET

TESTS = pathlib.Path(__file__).resolve().parent
ROOT = TESTS.parent
ENV_VAR = "DYT_MUTANT"
NARROW_WIDTH = 256  # table entries up to this width are "narrow" (test_narrow_rows_... checks up to 256)


@dataclasses.dataclass(frozen=True)
class Mutant:
    """One bug class: where it is patched in, and the suite tests that must fail on it, with what."""

    name: str
    bug: str
    module: str  # "dyt.kernels" (Triton, patched in the module text) or "dyt.planner" (plain Python)
    # (function, ((exact old text, new text, occurrences expected), ...)), per function patched
    targets: tuple[tuple[str, tuple[tuple[str, str, int], ...]], ...]
    suite: str
    tests: tuple[str, ...]  # node ids, relative to the repository root; every one must fail
    expect: str  # fragment of each failure message: the assertion that names the bug class


_NAN = "tests/test_nan_masking.py::test_nonfinite_alpha_with_padding"
_F32 = "tests/test_dtype_contract.py::test_float32_parameter_grads_as_accurate_as_float32"
_COMBO = "tests/test_dtype_contract.py::test_dtype_combinations"
_PATHS = ("row_tiled", "column_blocked", "int64")

MUTANTS: dict[str, Mutant] = {
    m.name: m
    for m in [
        Mutant(
            name="unmasked_padding",
            bug="bwd kernel computes z = alpha * x and dz = dy * gamma * sech2 in padding lanes unmasked",
            module="dyt.kernels",
            targets=(
                (
                    "_bwd_tile",
                    (
                        ("z = tl.where(mask, alpha * x, 0.0)", "z = alpha * x", 1),
                        (
                            "dz = tl.where(mask, (dy * gamma[None, :]) * sech2, 0.0)",
                            "dz = (dy * gamma[None, :]) * sech2",
                            1,
                        ),
                    ),
                ),
            ),
            suite="tests/test_nan_masking.py",
            tests=tuple(
                f"{_NAN}[{dt}-{a}-{p}]" for dt in ("fp32", "bf16") for a in ("+inf", "-inf") for p in _PATHS
            ),
            expect="got NaN from padding lanes",
        ),
        Mutant(
            name="param_grads_rounded_16bit",
            bug="the finishing kernels round float32 parameter-gradient sums through bfloat16 before storing",
            module="dyt.kernels",
            targets=(
                (
                    "_store_param_grads",
                    tuple(
                        (
                            f"tl.sum({acc}, axis=0).to({P}.dtype.element_ty)",
                            f"tl.sum({acc}, axis=0).to(tl.float32).to(tl.bfloat16)"
                            f".to(tl.float32).to({P}.dtype.element_ty)",
                            1,
                        )
                        for acc, P in (("acc_dgamma", "DGAMMA"), ("acc_dbeta", "DBETA"))
                    ),
                ),
                (
                    "_finish_dalpha",
                    (
                        (
                            "tl.sum(acc_dalpha, axis=0).to(DALPHA.dtype.element_ty)",
                            "tl.sum(acc_dalpha, axis=0).to(tl.float32).to(tl.bfloat16)"  # the sum is float64
                            ".to(tl.float32).to(DALPHA.dtype.element_ty)",
                            1,
                        ),
                    ),
                ),
            ),
            suite="tests/test_dtype_contract.py",
            tests=tuple(f"{_F32}[{x}-{p}]" for x in ("bf16", "fp16") for p in _PATHS)
            + tuple(f"{_COMBO}[{x}-fp32-{p}]" for x in ("bf16", "fp16") for p in _PATHS)
            + tuple(f"tests/test_channels_first.py::test_dtype_contract[fp32-{x}]" for x in ("bf16", "fp16")),
            expect="relative L2 error",
        ),
        Mutant(
            name="channels_first_channel_edges",
            bug="the channels-first finish drops the column block each channel's columns end in",
            module="dyt.kernels",
            targets=(
                (
                    "dyt_bwd_cf_finish_kernel",
                    (
                        (
                            "ok = channel_ok & (block <= last_block)",
                            "ok = channel_ok & (block < last_block)",
                            1,
                        ),
                    ),
                ),
            ),
            suite="tests/test_channels_first.py",
            tests=tuple(
                f"tests/test_channels_first.py::test_values_against_the_reference[{s}-{dt}]"
                for s in ("(1, 40, 40, 40)", "(4, 12, 3, 70)")
                for dt in ("fp32", "bf16")
            ),
            expect="relative L2 error",
        ),
        Mutant(
            name="long_lane_runs",
            bug="a backward program's tiles summed in one run: each lane one chain of float32 additions",
            module="dyt.planner",
            targets=(
                (
                    "_plan_backward_view",
                    (("lane_run = overrides.lane_run or LANE_RUN_TILES\n", "lane_run = 1 << 30\n", 1),),
                ),
            ),
            suite="tests/test_dtype_contract.py",
            tests=("tests/test_dtype_contract.py::test_float32_parameter_grads_over_long_runs_of_one_term",),
            expect="dbeta: relative L2 error",
        ),
        Mutant(
            name="rows_on_grid_axis_1",
            bug="plans put row tiles on grid axis 1: grid=(n_col_blocks, n_row_tiles)",
            module="dyt.planner",
            targets=(
                # Both plans build their grid in _tile_fields.
                ("_tile_fields", (("grid=(n_programs,),", "grid=(n_col_blocks, n_row_programs),", 1),)),
            ),
            suite="tests/test_grid_limit.py",
            tests=tuple(
                f"tests/test_grid_limit.py::test_every_plan_is_one_dimensional_and_within_limits[{i}]"
                for i in (2, 4)
            ),
            expect="is not 1-D",
        ),
        Mutant(
            name="one_row_per_program",
            bug=f"launch table whose narrow entries (max_width <= {NARROW_WIDTH}) have BLOCK_M=1",
            module="dyt.planner",
            targets=(
                (
                    "load_table",
                    (
                        (
                            "    data = json.loads(path.read_text())\n",
                            "    data = json.loads(path.read_text())\n"
                            '    for mode in ("fwd", "bwd"):\n'
                            "        for entries in data[mode].values():\n"
                            "            for entry in entries:\n"
                            f'                if (entry["max_width"] or 1 << 62) <= {NARROW_WIDTH}:\n'
                            '                    entry["BLOCK_M"] = 1\n',
                            1,
                        ),
                    ),
                ),
            ),
            suite="tests/test_grid_limit.py",
            tests=tuple(
                f"tests/test_grid_limit.py::test_narrow_rows_are_tiled_several_per_program[padded_rows-{w}-{i}]"
                for w in (1, 2, 16, 64, 100, 128, 256)
                for i in (2, 4)
            ),
            expect="tile of",  # "width W: tile of B rows"
        ),
    ]
}


def _patched(source: str, patches, where: str) -> str:
    for old, new, count in patches:
        found = source.count(old)
        assert found == count, (
            f"mutant patch for {where} expected {count} occurrence(s) of {old!r}, found {found}: the real "
            "code changed, so update tests/mutants.py (the mutant would otherwise test nothing)"
        )
        source = source.replace(old, new)
    return source


def _real_source(module, function: str) -> str:
    obj = getattr(module, function)
    return inspect.getsource(getattr(obj, "fn", obj))  # a Triton JITFunction keeps the Python one in .fn


def build(name: str) -> dict:
    """{function name: mutant object}, without installing anything.

    Triton's @jit needs a real file for inspect.getsource, so a kernel mutant is the whole dyt/kernels.py
    text with the one function's source replaced by its patched source, imported from a temp file. A
    planner mutant is exec'd with the live dyt.planner globals, so it calls the planner's other functions.
    """
    m = MUTANTS[name]
    module = importlib.import_module(m.module)
    if m.module == "dyt.kernels":
        text = pathlib.Path(inspect.getsourcefile(module)).read_text()
        for function, patches in m.targets:
            real = _real_source(module, function)
            assert text.count(real) == 1, f"{function}: its source is not found once in {module.__file__}"
            text = text.replace(real, _patched(real, patches, f"{m.module}.{function}"))
        folder = pathlib.Path(tempfile.mkdtemp(prefix="dyt_mutant_"))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)  # kept while the kernels may run
        mod_name = f"dyt_mutant_kernels_{name}"
        path = folder / f"{mod_name}.py"
        path.write_text(text)
        spec = importlib.util.spec_from_file_location(mod_name, path)
        mutant_module = importlib.util.module_from_spec(spec)
        sys.modules[mod_name] = mutant_module
        spec.loader.exec_module(mutant_module)
        return {function: getattr(mutant_module, function) for function, _ in m.targets}
    built = {}
    for function, patches in m.targets:
        src = _patched(textwrap.dedent(_real_source(module, function)), patches, f"{m.module}.{function}")
        code = compile(
            src, f"<mutant {name}: {m.module}.{function}>", "exec", _future.annotations.compiler_flag
        )
        namespace: dict = {}
        exec(code, module.__dict__, namespace)  # globals stay the module's own; the def lands in namespace
        built[function] = namespace[function]
    return built


def activate(name: str) -> str:
    """Swap the mutant into dyt.kernels / dyt.planner (looked up there at call time); returns a summary."""
    if name not in MUTANTS:
        raise KeyError(f"{ENV_VAR}={name!r}: unknown mutant; known: {sorted(MUTANTS)}")
    m = MUTANTS[name]
    module = importlib.import_module(m.module)
    for function, obj in build(name).items():
        assert getattr(module, function) is not obj
        setattr(module, function, obj)
    return f"{name}: patched {', '.join(f'{m.module}.{f}' for f, _ in m.targets)} ({m.bug})"


# --- pytest plugin side (loaded with -p mutants, tests/ on PYTHONPATH) ---------------------------------


def pytest_configure(config):
    """Runs after tests/conftest.py has set TRITON_INTERPRET, before any test module imports dyt."""
    name = os.environ.get(ENV_VAR)
    if name:
        import pytest

        try:
            config._dyt_mutant = activate(name)
        except KeyError as exc:
            raise pytest.UsageError(str(exc)) from exc


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Names the active mutant in the output, so a run that was not mutated cannot pass for one that was."""
    summary = getattr(config, "_dyt_mutant", None)
    if summary:
        terminalreporter.write_line(f"DYT_MUTANT active: {summary}")


# --- running a mutant's suite in a child pytest ------------------------------------------------------


@dataclasses.dataclass
class Outcome:
    """What a child pytest did to a selection: exit code and each selected test's result."""

    mutant: str | None
    returncode: int
    tests: tuple[str, ...]
    failed: dict[str, str]  # test -> failure message
    passed: list[str]
    errors: dict[str, str]
    output: str

    def missing(self) -> list[str]:
        seen = set(self.failed) | set(self.passed) | set(self.errors)
        return [t for t in self.tests if t.split("::", 1)[1] not in seen]

    def caught(self, expect: str) -> bool:
        """Exit 1 (tests failed; not 2/3/4: a crash or bad selection proves nothing), every selected test
        failed on an assertion naming the bug class, nothing errored, and the mutant was really active."""
        return (
            self.returncode == 1
            and not self.errors
            and not self.passed
            and not self.missing()
            and all(expect in msg for msg in self.failed.values())
            and f"DYT_MUTANT active: {self.mutant}:" in self.output
        )

    def green(self) -> bool:
        return self.returncode == 0 and not self.failed and not self.errors and not self.missing()

    def describe(self) -> str:
        """Why a check did not hold: exit code, per-test results, and the end of the child's output."""
        return (
            f"mutant {self.mutant}: exit {self.returncode}; failed {sorted(self.failed)}; "
            f"passed {self.passed}; errors {self.errors}; not run {self.missing()}\n"
            + "\n".join(f"  {t}: {msg.splitlines()[0] if msg else ''}" for t, msg in self.failed.items())
            + "\n--- child output (tail) ---\n"
            + self.output[-4000:]
        )


def _child_env(mutant: str | None, reports: str) -> dict:
    env = dict(os.environ)
    for key in ("PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_CURRENT_TEST"):
        env.pop(key, None)
    env.pop(ENV_VAR, None)
    if mutant:
        env[ENV_VAR] = mutant
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), *filter(None, [env.get("PYTHONPATH")])])
    env["DYT_REPORTS"] = reports  # the child's failures file must not overwrite the real reports/
    env["DYT_SESSION"] = f"mutant-{mutant or 'control'}"
    if "TRITON_INTERPRET" not in env:
        import torch

        if not torch.cuda.is_available():
            env["TRITON_INTERPRET"] = "1"
    return env


def _junit_results(path: pathlib.Path):
    failed, passed, errors = {}, [], {}
    for case in ET.parse(path).getroot().iter("testcase"):
        name = case.get("name")
        failure, error = case.find("failure"), case.find("error")
        if error is not None:
            errors[name] = error.get("message", "")
        elif failure is not None:
            failed[name] = failure.get("message", "")
        elif case.find("skipped") is None:
            passed.append(name)
    return failed, passed, errors


def run_child(tests, mutant: str | None = None, timeout: float = 300) -> Outcome:
    """``python -m pytest <tests> -p mutants`` in a fresh process, with DYT_MUTANT=mutant (None: real code).

    No -x: every selected test must fail, which shows the bug class is caught on every tiling path.
    """
    with tempfile.TemporaryDirectory(prefix="dyt_mutation_") as tmp:
        junit = pathlib.Path(tmp) / "junit.xml"
        cmd = [sys.executable, "-m", "pytest", *tests, "-q", "-rfE", "-p", "mutants", "-p",
               "no:cacheprovider", "-o", "addopts=", "-o", "junit_family=xunit1", "--strict-markers",
               f"--junitxml={junit}"]  # fmt: skip
        proc = subprocess.run(
            cmd, cwd=ROOT, env=_child_env(mutant, tmp), capture_output=True, text=True, timeout=timeout
        )
        output = proc.stdout + proc.stderr
        failed, passed, errors = _junit_results(junit) if junit.exists() else ({}, [], {})
    return Outcome(mutant, proc.returncode, tuple(tests), failed, passed, errors, output)


def control_tests() -> tuple[str, ...]:
    return tuple(t for m in MUTANTS.values() for t in m.tests)


def _progress(line: str) -> None:
    print(f"mutants: {line}", file=sys.stderr, flush=True)


def main() -> int:
    """Every mutant against its suite, then the control (the same selections on the real code): a progress
    line on stderr as each starts and ends, the table on stdout at the end."""
    try:
        import pytest  # noqa: F401  (each mutant's suite runs in a child pytest of this Python)
    except ImportError:
        print(f"mutants: pytest is missing from {sys.executable}; install the test extra: "
              "pip install -e '.[test]'", file=sys.stderr)  # fmt: skip
        return 2
    rows = []
    total = len(MUTANTS) + 1
    for i, m in enumerate(MUTANTS.values(), start=1):
        _progress(f"[{i}/{total}] {m.name} ({m.bug}): {len(m.tests)} tests of {m.suite}")
        started = time.monotonic()
        out = run_child(m.tests, m.name)
        verdict = "caught" if out.caught(m.expect) else "NOT CAUGHT"
        took = time.monotonic() - started
        _progress(f"        {verdict}: {len(out.failed)}/{len(m.tests)} failed in {took:.0f} s")
        rows.append((m.name, m.suite, "yes" if out.caught(m.expect) else "NO", f"exit {out.returncode}",
                     f"{len(out.failed)}/{len(m.tests)} failed"))  # fmt: skip
        if not out.caught(m.expect):
            print(out.describe(), file=sys.stderr)
    _progress(f"[{total}/{total}] control: the same {len(control_tests())} tests on the real code")
    started = time.monotonic()
    control = run_child(control_tests())
    _progress(f"        {'green' if control.green() else 'NOT GREEN'} in {time.monotonic() - started:.0f} s")
    rows.append(("(control: no mutant)", "all selections", "green" if control.green() else "NOT GREEN",
                 f"exit {control.returncode}",
                 f"{len(control.passed)}/{len(control.tests)} passed"))  # fmt: skip
    if not control.green():
        print(control.describe(), file=sys.stderr)
    header = ("mutant", "suite", "caught", "exit", "tests")
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for r in [header, tuple("-" * w for w in widths), *rows]:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    ok = all(r[2] == "yes" for r in rows[:-1]) and rows[-1][2] == "green"
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
