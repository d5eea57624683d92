"""tooling: the commands a new user runs first: the environment manifest's git SHA, `python -m dyt report`
without its extra, `python tests/mutants.py` without pytest, `python -m dyt tune --help`, and nox's CPU
installs of torch (PyTorch's CPU index where reachable, the machine's disk otherwise)."""

from __future__ import annotations

import ast
import http.server
import importlib.util
import json
import os
import pathlib
import shutil
import subprocess
import sys
import threading
import time
import types

import pytest

pytestmark = pytest.mark.tooling

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _python(code: str, *, cwd=ROOT, pythonpath=ROOT, **env) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k != "DYT_GIT_SHA"}
    full.update(env, PYTHONPATH=str(pythonpath))
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=full, capture_output=True, text=True,
                          timeout=120)  # fmt: skip


def _git(cwd, *args) -> str:
    cmd = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "init.defaultBranch=main"]
    return subprocess.run([*cmd, *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


SHA_CODE = "from dyt.service import env; print(env.git_sha(), env._git_dirty())"


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_env_sha_is_the_projects_own_commit_only(tmp_path):
    """A copy of the project inside another repository's work tree records "unknown", not that repository's
    commit; DYT_GIT_SHA wins; a checkout of the project itself records its HEAD."""
    outer = tmp_path / "outer"
    outer.mkdir()
    _git(outer, "init", "-q")
    (outer / "other.txt").write_text("another project\n")
    _git(outer, "add", "other.txt")
    _git(outer, "commit", "-qm", "other")
    project = outer / "vendored" / "dyt-kernels"
    shutil.copytree(ROOT / "dyt", project / "dyt", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", project)
    (outer / "other.txt").write_text("dirty\n")
    out = _python(SHA_CODE, cwd=tmp_path, pythonpath=project)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["unknown", "None"], out.stdout
    out = _python(SHA_CODE, cwd=tmp_path, pythonpath=project, DYT_GIT_SHA="0123abc")
    assert out.stdout.split() == ["0123abc", "None"], out.stdout
    _git(project, "init", "-q")
    _git(project, "add", ".")
    _git(project, "commit", "-qm", "own")
    head = _git(project, "rev-parse", "HEAD")
    out = _python(SHA_CODE, cwd=tmp_path, pythonpath=project)
    assert out.stdout.split() == [head, "False"], out.stdout


BLOCK = "import sys; sys.modules.update(dict.fromkeys({names!r})); "


def test_report_without_its_extra_names_the_extra(tmp_path):
    code = BLOCK.format(names=["matplotlib"]) + (
        f"from dyt.service.cli import main; sys.exit(main(['report', '--reports', {str(tmp_path)!r}]))"
    )
    out = _python(code)
    assert out.returncode == 2, out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    missing = lines[0].partition("(missing: ")[2].partition(")")[0].split(", ") if lines else []
    assert len(lines) == 1 and "report extra" in lines[0] and "matplotlib" in missing, lines
    assert "pip install 'dyt-kernels[report]'" in lines[0] and "Traceback" not in out.stderr
    assert not (tmp_path / "summary.md").exists()


def test_mutants_without_pytest_says_pytest_is_missing():
    code = BLOCK.format(names=["pytest"]) + (
        "import runpy; sys.argv = ['tests/mutants.py']; "
        "runpy.run_path('tests/mutants.py', run_name='__main__')"
    )
    started = time.monotonic()
    out = _python(code)
    assert out.returncode == 2 and "pytest is missing" in out.stderr, out.stdout + out.stderr
    assert "caught" not in out.stdout and time.monotonic() - started < 60


def test_tune_help_names_the_command_it_is():
    out = _python("from dyt.service.cli import main; main(['tune', '--help'])")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("usage: python -m dyt tune "), out.stdout[:200]


def _noxfile_docstrings() -> dict[str, str]:
    tree = ast.parse((ROOT / "noxfile.py").read_text())
    return {f.name: ast.get_docstring(f) or "" for f in tree.body if isinstance(f, ast.FunctionDef)}


def test_nox_list_lines_name_every_lint_tool():
    first_line = _noxfile_docstrings()["lint"].splitlines()[0]  # what `nox -l` shows
    for tool in ("ruff", "shellcheck", "hadolint", "actionlint", "zizmor"):
        assert tool in first_line, first_line


def _load_noxfile(monkeypatch):
    """noxfile.py with a stand-in for nox (not installed in the test environment)."""
    fake = types.ModuleType("nox")
    fake.options = types.SimpleNamespace()
    fake.session = lambda *a, **k: a[0] if a and callable(a[0]) else (lambda f: f)
    fake.Session = object
    fake.project = types.SimpleNamespace(load_toml=None)
    monkeypatch.setitem(sys.modules, "nox", fake)
    spec = importlib.util.spec_from_file_location("dyt_noxfile", ROOT / "noxfile.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Session:
    def __init__(self):
        self.installs = []

    def install(self, *args):
        self.installs.append(args)


class _Index(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/whl/cpu/torch/" else 404)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_cpu_installs_take_torchs_cpu_index_only_where_it_answers(monkeypatch):
    server = http.server.HTTPServer(("127.0.0.1", 0), _Index)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        reachable = f"http://127.0.0.1:{server.server_port}/whl/cpu"
        unreachable = f"http://127.0.0.1:{server.server_port}/nothing"  # answers 404: not an index
        cases = [
            (reachable, reachable),
            (unreachable, None),
            ("http://127.0.0.1:9/simple", None),
            ("none", None),
        ]
        for setting, expected in cases:
            monkeypatch.setenv("DYT_TORCH_INDEX", setting)
            nox_file = _load_noxfile(monkeypatch)
            session = _Session()
            started = time.monotonic()
            nox_file._install_cpu(session, "triton", "test")
            nox_file._install_cpu(session, "report")
            assert time.monotonic() - started < 5, f"{setting}: the probe must fail fast"
            from_index = [args for args in session.installs if "--index-url" in args]
            assert len(from_index) == (2 if expected else 0), (setting, session.installs)
            for args in from_index:  # torch alone from the CPU index, nothing it depends on
                assert args[-1] == "torch" and "--no-deps" in args, args
                assert args[args.index("--index-url") + 1] == expected
            for args in session.installs:
                assert "-c" in args and args[args.index("-c") + 1].endswith("constraints-cpu.txt"), args
            assert session.installs[-1][-2:] == ("-e", ".[report]")
    finally:
        server.shutdown()
    assert "DYT_TORCH_INDEX" in (ROOT / "README.md").read_text(), "the README documents the override"


def test_a_cpu_build_on_disk_asks_no_index(monkeypatch):
    """Where pip resolves the pinned torch to a CPU build on the machine's disk, no index is asked (no
    request leaves the machine); elsewhere PyTorch's CPU index is probed once."""
    monkeypatch.delenv("DYT_TORCH_INDEX", raising=False)
    for on_disk in (True, False):
        nox_file = _load_noxfile(monkeypatch)
        probed = []
        monkeypatch.setattr(nox_file, "_local_cpu_torch", lambda on_disk=on_disk: on_disk)
        monkeypatch.setattr(nox_file, "_reachable", lambda url, probed=probed: probed.append(url) or True)
        session = _Session()
        nox_file._install_cpu(session, "test")
        nox_file._install_cpu(session, "report")
        from_index = [args for args in session.installs if "--index-url" in args]
        assert len(from_index) == (0 if on_disk else 2), session.installs
        assert probed == ([] if on_disk else [nox_file.TORCH_CPU_INDEX + "/torch/"])


def test_pips_report_of_a_cpu_wheel_on_disk_is_read(monkeypatch):
    """_local_cpu_torch reads pip's dry-run report: a file URL of a +cpu wheel (as pip quotes it) is a CPU
    build on disk, a CUDA build or a failed resolution is not."""
    nox_file = _load_noxfile(monkeypatch)
    for url, returncode, expected in (
        ("file:///opt/wheels/torch-2.13.0%2Bcpu-cp311-cp311-manylinux_2_28_x86_64.whl", 0, True),
        ("file:///opt/wheels/torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl", 0, False),
        ("", 1, False),
    ):
        report = json.dumps({"install": [{"download_info": {"url": url}}]} if url else {})
        done = types.SimpleNamespace(returncode=returncode, stdout=report)
        monkeypatch.setattr(subprocess, "run", lambda *a, done=done, **k: done)
        assert nox_file._local_cpu_torch() is expected, url


def test_report_session_installs_neither_torch_nor_triton(monkeypatch):
    tomllib = pytest.importorskip("tomllib")
    nox_file = _load_noxfile(monkeypatch)
    monkeypatch.setattr(
        nox_file.nox.project, "load_toml", lambda p: tomllib.loads(pathlib.Path(p).read_text())
    )
    session = _Session()
    session.run = lambda *a, **k: None
    session.posargs = []
    nox_file.report(session)
    flat = [a for args in session.installs for a in args]
    assert not any(a.split("=")[0].split(">")[0] in ("torch", "triton") for a in flat), flat
    assert "--no-deps" in flat and "matplotlib>=3.8" in flat


def test_one_version_shown_by_the_package_the_cli_the_manifest_and_the_build():
    """dyt.__version__ is the one place the version is written: pyproject.toml reads it (dynamic), `dyt
    --version` prints it, env.json records it; ci/dist_check.py holds the built and installed wheel to it."""
    tomllib = pytest.importorskip("tomllib", reason="tomllib: Python 3.11 and newer")
    import dyt
    from dyt.service import env

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and project["project"]["dynamic"] == ["version"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "dyt.__version__"}
    out = _python("from dyt.service.cli import main; main(['--version'])")
    assert out.returncode == 0 and out.stdout.strip() == f"dyt {dyt.__version__}", out.stdout + out.stderr
    assert env.collect_env()["dyt_version"] == dyt.__version__
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")


def test_help_names_every_command():
    from dyt.service import cli

    parser = cli._parser()
    (sub,) = [a for a in parser._actions if a.dest == "command"]
    assert tuple(sub.choices) == cli.COMMANDS
    assert all(name in parser.description for name in cli.COMMANDS)


def test_the_tests_session_shows_the_eager_modules_failures_as_a_verdict_table(monkeypatch, tmp_path):
    """`nox -s tests` ends with the eager module's conformance run: silent (its failures are that module's
    verdict; nox shows the run only where it errs), then a table of its verdict beside dyt's, in which no
    line says FAILED. Both runs here as the session makes them, reports in tmp_path."""
    from dyt.service import gpu_matrix

    nox_file = _load_noxfile(monkeypatch)
    monkeypatch.setattr(nox_file, "_install_cpu", lambda *a, **k: None)
    monkeypatch.setattr(nox_file, "REPORTS", tmp_path)
    calls = []
    session = _Session()
    session.posargs, session.name, session.warn = [], "tests", lambda *a: None
    session.run = lambda *args, **kwargs: calls.append((args, kwargs))
    nox_file.tests(session)
    assert len(calls) == 3, calls  # dyt's suites, the eager verdict, its table
    (eager, options), (table, _) = calls[1:]
    assert "--impl" in eager and eager[eager.index("--impl") + 1] == "eager"
    assert options["silent"] is True and options["success_codes"] == [0, 1]
    env = {**gpu_matrix.outside_session(), **options["env"], "DYT_CPU_WORKERS": "2"}
    run = subprocess.run([sys.executable, *eager[1:]], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=600)  # fmt: skip
    assert run.returncode == 1, run.stdout[-2000:] + run.stderr[-2000:]  # the eager module fails checks
    shown = subprocess.run([sys.executable, *table[1:]], cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=120)  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert "FAILED" not in shown.stdout and "eager" in lines[0] and "not on this run" in lines[0], lines
    assert lines[1].split("|")[1:-1] == [" check ", " eager "], lines[1]
    assert sum("fail" in line for line in lines[3:]) >= 2, lines  # e.g. non-finite x, non-contiguous


def test_nox_does_not_announce_a_missing_uv(monkeypatch):
    import logging

    _load_noxfile(monkeypatch)
    logger = logging.getLogger("nox")
    record = logger.makeRecord("nox", logging.INFO, __file__, 1, "uv binary not found.", (), None)
    assert not logger.filter(record)
    other = logger.makeRecord("nox", logging.INFO, __file__, 1, "Running session tests", (), None)
    assert logger.filter(other)
