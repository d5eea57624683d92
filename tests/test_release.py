"""tooling: what a stranger meets first: the README's two commands (on a distribution's Python marked
externally managed, PEP 668, as on Debian 12 and Ubuntu 24.04), .ci/run running the same test command, and
ci/dist_check.py's checks of the release artifacts (nox -s dist and installed_tests run it on the real
ones; here it must catch broken ones)."""

from __future__ import annotations

import io
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile

import pytest

pytestmark = pytest.mark.tooling

ROOT = pathlib.Path(__file__).resolve().parents[1]
SETUP = re.compile(
    r"^python3 -m venv (\S+) && \1/bin/python -m pip install (nox==\S+) && \1/bin/nox -s (.+)$"
)


def readme_commands() -> list[str]:
    """The indented command lines of the README's "The two commands" section, in order."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## The two commands", 1)[1].split("\n## ", 1)[0]
    return [line.strip() for line in section.splitlines() if line.startswith("    ") and line.strip()]


def test_the_readme_gives_two_commands_that_set_up_nox_in_a_virtualenv_of_its_own():
    commands = readme_commands()
    assert len(commands) == 2, commands
    sessions = [SETUP.match(c) for c in commands]
    assert all(sessions), (
        f"not of the form `python3 -m venv D && D/bin/python -m pip install nox==V && ...`: {commands}"
    )
    assert [m.group(3) for m in sessions] == ["lint tests", "gpu_tests"]
    assert len({m.group(2) for m in sessions}) == 1  # one nox


def test_ci_run_runs_the_readmes_test_command():
    script = (ROOT / ".ci" / "run").read_text().splitlines()
    assert readme_commands()[0] in script


def _externally_managed_python() -> str | None:
    """A Python outside any virtualenv whose standard library holds the EXTERNALLY-MANAGED marker, with pip
    and venv (ensurepip): Debian's /usr/bin/python3 on Debian and Ubuntu machines with python3-pip and
    python3-venv."""
    marker = "os.path.join(sysconfig.get_path('stdlib'), 'EXTERNALLY-MANAGED')"
    probe = "import ensurepip, os, pip, sys, sysconfig; assert sys.prefix == sys.base_prefix; "
    probe += f"print(os.path.exists({marker}))"
    for python in ("/usr/bin/python3", shutil.which("python3")):
        if not python or not os.path.exists(python):
            continue
        out = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=60)
        if out.returncode == 0 and out.stdout.strip() == "True":
            return python
    return None


def test_the_readme_commands_set_up_under_an_externally_managed_python(tmp_path):
    """Under a PEP 668 Python (first on PATH as python3), `python3 -m pip install nox` is refused, and the
    README's commands set up nox and reach the project's sessions: their setup runs as written, the nox
    call lists the sessions (-l) instead of running them (the suites themselves are .ci/run's)."""
    python = _externally_managed_python()
    if python is None:
        pytest.skip("no Python marked externally managed (PEP 668) with pip and venv here (Debian's python3)")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(python)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PIP_USER")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    work = tmp_path / "clone"
    work.mkdir()

    def shell(command: str) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", "-c", command], cwd=work, env=env, capture_output=True, text=True,
                              timeout=600)  # fmt: skip

    pinned = SETUP.match(readme_commands()[0]).group(2)
    refused = shell(f"python3 -m pip install {pinned}")
    assert refused.returncode != 0 and "externally-managed-environment" in refused.stdout + refused.stderr
    listed = set()
    for command in readme_commands():
        setup, _, sessions = command.rpartition(" -s ")
        run = shell(f"{setup} -f {ROOT / 'noxfile.py'} -l")
        assert run.returncode == 0, f"{command}\n{run.stdout[-2000:]}{run.stderr[-2000:]}"
        listed |= set(re.findall(r"^[*-] (\w+)", run.stdout, re.M))
        assert set(sessions.split()) <= listed, (sessions, run.stdout)


# ---------------------------------------------------------------------------------------- dist_check


def _load_dist_check():
    import importlib.util

    if str(ROOT / "ci") not in sys.path:
        sys.path.insert(0, str(ROOT / "ci"))  # as when run as a script: its sibling release_notes imports
    spec = importlib.util.spec_from_file_location("dist_check", ROOT / "ci" / "dist_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _fake_dist(dist: pathlib.Path, version: str, *, drop: tuple[str, ...] = (), extra: tuple[str, ...] = (),
               license_expression: str = "MIT") -> None:  # fmt: skip
    """A wheel and an sdist shaped like setuptools' for version, with the checkout's package files less
    drop and plus extra."""
    check = _load_dist_check()
    files = sorted((check.package_files(ROOT) - set(drop)) | set(extra))
    info = f"dyt_kernels-{version}.dist-info"
    dist.mkdir(parents=True)
    with zipfile.ZipFile(dist / f"dyt_kernels-{version}-py3-none-any.whl", "w") as zf:
        for name in files:
            zf.writestr(name, "")
        zf.writestr(f"{info}/METADATA", f"Metadata-Version: 2.4\nName: dyt-kernels\nVersion: {version}\n"
                                        f"License-Expression: {license_expression}\n\n")  # fmt: skip
        zf.writestr(f"{info}/licenses/LICENSE", "MIT License\n")
    with tarfile.open(dist / f"dyt_kernels-{version}.tar.gz", "w:gz") as tf:
        for name in [*files, "pyproject.toml", "README.md", "LICENSE"]:
            member = tarfile.TarInfo(f"dyt_kernels-{version}/{name}")
            tf.addfile(member, io.BytesIO(b""))


def test_dist_check_passes_artifacts_shaped_as_the_release_and_names_each_defect(tmp_path):
    check = _load_dist_check()
    version = check.source_version(ROOT)
    _fake_dist(tmp_path / "good", version)
    assert check.check_dist(tmp_path / "good", ROOT) == []
    _fake_dist(tmp_path / "bad", version, drop=("dyt/tables/sm90.json", "dyt/csrc/dyt_native.cpp"),
               extra=("tests/conftest.py",), license_expression="")  # fmt: skip
    problems = "\n".join(check.check_dist(tmp_path / "bad", ROOT))
    for expected in ("dyt/tables/sm90.json is missing", "dyt/csrc/dyt_native.cpp is missing",
                     "tests/conftest.py does not belong in the wheel", "License-Expression"):  # fmt: skip
        assert expected in problems, problems
    _fake_dist(tmp_path / "old", "0.0.1")
    problems = "\n".join(check.check_dist(tmp_path / "old", ROOT))
    assert f"not version {version} of dyt/__init__.py" in problems, problems


def test_dist_check_refuses_a_package_imported_from_the_checkout(tmp_path):
    """--installed run where `import dyt` finds the checkout (PYTHONPATH): the check says so."""
    version = _load_dist_check().source_version(ROOT)
    wheel = tmp_path / f"dyt_kernels-{version}-py3-none-any.whl"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, str(ROOT / "ci" / "dist_check.py"), "--installed", str(wheel), str(ROOT)]
    out = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and "came from the checkout" in out.stderr, out.stdout + out.stderr
