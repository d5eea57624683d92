"""Checks the release artifacts beyond what twine and check-wheel-contents know about this project.

    python ci/dist_check.py DIST                     # nox -s dist: the sdist and wheel in DIST
    python ci/dist_check.py --installed WHEEL ROOT   # nox -s installed_tests: the wheel as installed

DIST: exactly one sdist and one wheel, both of the version in ROOT/dyt/__init__.py (the one place it is
written); the wheel holds every module of the checkout's dyt/, the launch tables and the native
extension's source, the license (License-Expression MIT and the LICENSE file), and nothing from tests/,
benchmarks/ or ci/; the sdist holds the same package files, pyproject.toml, README.md and LICENSE.
--installed: run from outside the checkout, `import dyt` comes from the installed wheel (not ROOT), its
tables and native source are files of the installed package, and the distribution's version, dyt.__version__
and `dyt --version` are the wheel's. Exit 1 with one line per problem; 0 and a summary line when clean.
"""

from __future__ import annotations

import email.parser
import pathlib
import shutil
import subprocess
import sys
import tarfile
import zipfile

from release_notes import source_version  # ci/, this script's folder, is the first entry of sys.path

PACKAGE = "dyt"


def package_files(root: pathlib.Path) -> set[str]:
    """The files the wheel must ship: dyt's modules, tables and native source, as paths in the wheel."""
    base = root / PACKAGE
    patterns = ("**/*.py", "tables/*.json", "csrc/*.cpp")
    found = (p for pattern in patterns for p in base.glob(pattern))
    return {str(p.relative_to(root)) for p in found if "__pycache__" not in p.parts}


def check_dist(dist: pathlib.Path, root: pathlib.Path) -> list[str]:
    problems = []
    version = source_version(root)
    wheels, sdists = sorted(dist.glob("*.whl")), sorted(dist.glob("*.tar.gz"))
    if len(wheels) != 1 or len(sdists) != 1:
        return [f"{dist}: expected one wheel and one sdist, found {[p.name for p in wheels + sdists]}"]
    wheel, sdist = wheels[0], sdists[0]
    if not wheel.name.startswith(f"dyt_kernels-{version}-"):
        problems.append(f"{wheel.name}: not version {version} of dyt/__init__.py")
    if sdist.name != f"dyt_kernels-{version}.tar.gz":
        problems.append(f"{sdist.name}: not version {version} of dyt/__init__.py")
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        meta_name = next((n for n in names if n.endswith(".dist-info/METADATA")), None)
        meta = email.parser.Parser().parsestr(zf.read(meta_name).decode()) if meta_name else {}
    for missing in sorted(package_files(root) - names):
        problems.append(f"{wheel.name}: {missing} is missing")
    for stray in sorted(n for n in names if n.split("/")[0] in ("tests", "benchmarks", "ci", "docs")):
        problems.append(f"{wheel.name}: {stray} does not belong in the wheel")
    if meta.get("Version") != version:
        problems.append(f"{wheel.name}: METADATA Version {meta.get('Version')!r}, expected {version!r}")
    if meta.get("License-Expression") != "MIT":
        problems.append(f"{wheel.name}: METADATA License-Expression {meta.get('License-Expression')!r}")
    if not any(n.endswith(".dist-info/licenses/LICENSE") for n in names):
        problems.append(f"{wheel.name}: no LICENSE under its dist-info/licenses")
    with tarfile.open(sdist) as tf:
        top = f"dyt_kernels-{version}"
        members = {m.name.removeprefix(f"{top}/") for m in tf.getmembers()}
    wanted = package_files(root) | {"pyproject.toml", "README.md", "LICENSE"}
    for missing in sorted(wanted - members):
        problems.append(f"{sdist.name}: {missing} is missing")
    if not problems:
        print(f"dist_check: {wheel.name} and {sdist.name}: version {version}, {len(names)} wheel files, "
              "tables, native source and license present")  # fmt: skip
    return problems


def check_installed(wheel: pathlib.Path, root: pathlib.Path) -> list[str]:
    import importlib.metadata

    import dyt
    from dyt import native, planner

    problems = []
    installed = pathlib.Path(dyt.__file__).resolve().parent
    if installed == (root / PACKAGE).resolve() or "site-packages" not in installed.parts:
        problems.append(f"import dyt came from the checkout ({installed}), not from the installed wheel")
    for what, path in [("launch table", planner.TABLES / "sm90.json"), ("native source", native.SOURCE)]:
        path = pathlib.Path(path).resolve()
        if not path.is_file() or installed not in path.parents:
            problems.append(f"the {what} {path} is not a file of the installed package {installed}")
    wheel_version = wheel.name.split("-")[1]
    versions = {"wheel": wheel_version, "metadata": importlib.metadata.version("dyt-kernels"),
                "dyt.__version__": dyt.__version__}  # fmt: skip
    script = shutil.which("dyt")
    out = subprocess.run([script, "--version"], capture_output=True, text=True) if script else None
    shown = out.stdout.strip().removeprefix("dyt ") if out and out.returncode == 0 else None
    versions["dyt --version"] = shown
    if len(set(versions.values())) != 1:
        problems.append(f"the versions disagree: {versions}")
    if not problems:
        print(f"dist_check --installed: dyt {dyt.__version__} from {installed}")
    return problems


def main(argv: list[str]) -> int:
    if argv[:1] == ["--installed"] and len(argv) == 3:
        problems = check_installed(pathlib.Path(argv[1]), pathlib.Path(argv[2]))
    elif len(argv) == 1:
        problems = check_dist(pathlib.Path(argv[0]), pathlib.Path(__file__).resolve().parents[1])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    for line in problems:
        print(f"dist_check: {line}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
