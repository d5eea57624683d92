"""tooling: the rules of the tree that a machine can check.

- The operator (dyt/*.py) never imports the service (dyt.service, dyt.conformance): a user's import pulls
  in no bench, report, matrix runner or checks, and the layout stays one-way.
- Code and docs describe the project in present tense: no citations of a version diary ("NOTES.md vN"),
  no words about how the work was organised (numbered work periods, borrowed machines, their time budgets).
- Operator code states contracts, not measurements: no microsecond figures and no commit SHAs in it.
- The launch tables (dyt/tables/*.json) hold launch choices only: what was measured, and where, is the
  tuner's report's and the docs'.
- reports/ tracks its README and one current baseline per GPU model, named after that model.
- The scripts outside the package (benchmarks/, ci/) use dyt's public names only: no `from dyt.x import
  _name`, no private module (`import dyt._x`), no `<a name bound to dyt>._name`.
"""

from __future__ import annotations

import ast
import json
import os
import pathlib
import re
import subprocess

import pytest

pytestmark = pytest.mark.tooling

ROOT = pathlib.Path(__file__).resolve().parents[1]
OPERATOR = sorted((ROOT / "dyt").glob("*.py"))


def _tracked(*patterns: str) -> list[pathlib.Path]:
    """Tracked files (git ls-files), else every file under the patterns' folders (a tree without .git)."""
    try:
        out = subprocess.run(
            ["git", "ls-files", *patterns], cwd=ROOT, capture_output=True, text=True, check=True
        )
        names = out.stdout.split()
    except (OSError, subprocess.CalledProcessError):
        names = []
    if names:
        return [ROOT / n for n in names if (ROOT / n).is_file()]
    return [p for pattern in patterns for p in ROOT.glob(f"{pattern.rstrip('/')}/**/*") if p.is_file()]


def _imported_modules(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
    return names


def test_the_operator_never_imports_the_service():
    assert OPERATOR, "no operator modules found"
    for path in OPERATOR:
        if path.name == "__main__.py":  # `python -m dyt` is the service's command line, by design
            continue
        service = {m for m in _imported_modules(path)
                   if m.split(".")[:2] in (["dyt", "service"], ["dyt", "conformance"])}  # fmt: skip
        assert not service, f"{path.relative_to(ROOT)} imports the service: {sorted(service)}"


# Words of how the work was organised, or of a version diary; CHANGELOG.md holds the versions.
DIARY = re.compile(
    r"NOTES\.md|\bsession \d|\bsessions? \d+\b|\blent (gpu|h200|machine)|\bdevice\s+time\b|until v\d", re.I
)


def test_the_tree_speaks_of_the_project_only():
    folders = ("dyt", "tests", "benchmarks", "ci", "docs", ".github", ".ci")
    files = [p for p in _tracked(*folders) if p.suffix != ".json"]
    files += [
        ROOT / name for name in ("README.md", "noxfile.py", "Dockerfile", "pyproject.toml", "CHANGELOG.md")
    ]
    this = pathlib.Path(__file__).resolve()
    offenders = []
    for path in files:
        if not path.is_file() or path.resolve() == this:
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if DIARY.search(line):
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:100]}")
    assert not offenders, "\n".join(offenders[:20])


MICROSECONDS = re.compile(r"\b\d+(\.\d+)?\s?us\b")
SHA = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b")


def test_operator_code_states_contracts_not_measurements():
    offenders = []
    for path in OPERATOR:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if MICROSECONDS.search(line) or SHA.search(line):
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:100]}")
    assert not offenders, "\n".join(offenders)


def test_the_launch_tables_hold_launch_choices_only():
    """dyt/tables/*.json hold launch choices: each loads into dyt.launch_table's records, which take no other
    key (no measured times, no provenance note: `python -m dyt tune`'s report and docs/kernels.md hold
    those), and no commit hash appears in them."""
    from dyt.launch_table import LaunchTable

    for path in sorted((ROOT / "dyt" / "tables").glob("*.json")):
        text = path.read_text()
        LaunchTable.from_dict(json.loads(text), where=f"dyt/tables/{path.name}")
        assert not SHA.search(text), f"{path.name}: {SHA.search(text).group()}"


def test_reports_track_one_baseline_and_one_conformance_verdict_per_gpu_model():
    """On disk, reports/baselines/ holds its README and baselines named after their GPU model, and
    reports/conformance/ one folder per GPU model, or cpu/ (its summary.md and junit/*.xml);
    git tracks nothing else under reports/ (checked where the git index describes this tree)."""
    from dyt.service.records import baseline_path

    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    shipped = os.environ.get("DYT_GIT_SHA", "").strip()
    if head.returncode != 0 or (shipped and not head.stdout.startswith(shipped)):
        pytest.skip(f"this tree is a copy of commit {shipped or '?'}, not a checkout of it: the rule holds "
                    "for the repository, and is checked in its checkouts")  # fmt: skip
    folder = ROOT / "reports" / "baselines"
    baselines = sorted(folder.glob("*.json"))
    assert baselines, "no committed baseline"
    assert {p.name for p in folder.iterdir()} == {"README.md", *(p.name for p in baselines)}
    for path in baselines:
        gpu = json.loads(path.read_text())["env"]["gpu_name"]
        expected = baseline_path(folder, gpu)
        assert path == expected, f"{path.name}: a baseline of {gpu!r} belongs at {expected.relative_to(ROOT)}"
    verdicts = ROOT / "reports" / "conformance"
    published = [p for p in verdicts.rglob("*") if p.is_file()] if verdicts.exists() else []
    for path in published:
        slug, *rest = path.relative_to(verdicts).parts
        junit = len(rest) == 2 and rest[0] == "junit" and path.suffix == ".xml"
        assert rest == ["summary.md"] or junit, f"{path}: a verdict folder holds summary.md and junit/"
    tracked = _tracked("reports")
    if tracked and all(p.exists() for p in tracked):  # a copy of the tree may carry a stale index
        allowed = {ROOT / "reports" / "README.md", folder / "README.md", *baselines, *published}
        assert set(tracked) <= allowed, sorted(str(p.relative_to(ROOT)) for p in set(tracked) - allowed)


# The scripts that must reach dyt through its public names alone: the benchmarks, a reader's first
# example of the API, and CI's scripts. Every .py file under these folders, tracked or not.
PUBLIC_ONLY = ("benchmarks", "ci")
_ACCESSORS = ("getattr", "setattr", "delattr", "hasattr")


def _private(name: str) -> bool:
    """A leading underscore, dunders (`dyt.__version__`) aside."""
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _root(node: ast.expr) -> ast.expr:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node


def private_uses(source: str, filename: str = "<source>") -> list[str]:
    """Where source reaches a private name of dyt: a private part of an imported module path (`import
    dyt._x`, `from dyt.x._y import z`), a private name imported from dyt (`from dyt.ops import _native_op`),
    an attribute with a private name of any name bound by those imports (`ops._native_op`,
    `dyt.ops._native_op`, read or assigned), or getattr/setattr/delattr/hasattr of one with a private name
    as a literal string."""
    tree = ast.parse(source, filename=filename)
    bound: set[str] = set()  # the local names that imports from dyt bind
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] != "dyt":
                    continue
                if any(map(_private, parts)):
                    found.append(f"{filename}:{node.lineno}: import {alias.name}")
                bound.add(alias.asname or "dyt")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            parts = node.module.split(".")
            if parts[0] != "dyt":
                continue
            if any(map(_private, parts)):
                found.append(f"{filename}:{node.lineno}: from {node.module} import ...")
            for alias in node.names:
                if _private(alias.name):
                    found.append(f"{filename}:{node.lineno}: from {node.module} import {alias.name}")
                bound.add(alias.asname or alias.name)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            root = _root(node)
            if isinstance(root, ast.Name) and root.id in bound:
                found.append(f"{filename}:{node.lineno}: {ast.unparse(node)}")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _ACCESSORS
              and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
              and isinstance(node.args[1].value, str) and _private(node.args[1].value)):  # fmt: skip
            root = _root(node.args[0])
            if isinstance(root, ast.Name) and root.id in bound:
                found.append(f"{filename}:{node.lineno}: {ast.unparse(node)}")
    return found


@pytest.mark.parametrize(
    ("source", "caught"),
    [
        ("from dyt.ops import _native_op", True),
        ("from dyt import ops as o\nfrom dyt.ops import dyt, _use_triton as u", True),
        ("import dyt._private", True),
        ("from dyt._private import thing", True),
        ("from dyt import ops\nops._native_op = None", True),
        ("import dyt\ndyt.ops._native_op(x)", True),
        ("import dyt.launcher as L\nL._cached_backward.cache_clear()", True),
        ("from dyt.service import model_bench\nmodel_bench._prepare(b, v, 'cuda', s)", True),
        ("from dyt import launcher\ngetattr(launcher, '_INTERPRET')", True),
        ("from dyt import launcher\nsetattr(launcher.FORWARD, '_kernel', None)", True),
        ("import dyt\nprint(dyt.__version__, dyt.dyt, dyt.DyT)", False),
        ("from dyt import launcher as L\nwith L.overrides(int64=True): L.forward_plan(x)", False),
        ("import torch\ntorch._dynamo.config.cache_size_limit = 64", False),
        ("from dyt import native\nimport os\nos._exit(native.state()[0] == 'loaded')", False),
    ],
)
def test_the_private_name_rule_catches_each_form(source, caught):
    assert bool(private_uses(source)) == caught, private_uses(source)


def test_benchmarks_and_ci_scripts_use_public_names_only():
    """What a benchmark or a CI script reads of dyt is what a user may: dyt's exports, the service's
    modules and the documented functions of its modules, never a name with a leading underscore."""
    scripts = sorted(p for folder in PUBLIC_ONLY for p in (ROOT / folder).rglob("*.py"))
    assert any(p.parts[-2] == "benchmarks" for p in scripts), "no benchmarks found"
    offenders = []
    for path in scripts:
        offenders += private_uses(path.read_text(), str(path.relative_to(ROOT)))
    assert not offenders, "private names of dyt used outside the package:\n" + "\n".join(offenders)
