"""Prints the CHANGELOG.md entry of the version a release tag names: the release's notes.

    python ci/release_notes.py TAG [ROOT]    # TAG: v<version>, e.g. v0.2.0; ROOT: the checkout (default: ..)

The entry is the text between the heading `## <version>` and the next `## ` heading. Exit 1 with one line
on stderr when TAG is no `v<version>`, when its version is not dyt/__init__.py's __version__ (read without
importing the package), or when CHANGELOG.md has no entry for it (or an empty one). The release workflow
runs it in its build job (the tag names this version) and for the GitHub release's notes.
"""

from __future__ import annotations

import argparse
import ast
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


class ReleaseError(Exception):
    """A reason, in one line, why TAG has no release notes here."""


def source_version(root: pathlib.Path) -> str:
    """__version__ as written in root/dyt/__init__.py."""
    path = root / "dyt" / "__init__.py"
    try:
        tree = ast.parse(path.read_text(), filename=str(path))
    except (OSError, SyntaxError) as exc:
        raise ReleaseError(f"{path}: cannot read __version__ ({exc.__class__.__name__})") from exc
    for node in tree.body:
        names = [getattr(target, "id", None) for target in getattr(node, "targets", [])]
        if isinstance(node, ast.Assign) and "__version__" in names:
            value = node.value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                return value.value
            raise ReleaseError(f"{path}: __version__ is not a string literal")
    raise ReleaseError(f"{path}: no __version__")


def tag_version(tag: str) -> str:
    """The version a tag names: v0.2.0 -> 0.2.0."""
    match = re.fullmatch(r"v(\d[0-9A-Za-z.+!-]*)", tag)
    if not match:
        raise ReleaseError(f"tag {tag!r} names no version (expected v<version>, e.g. v0.2.0)")
    return match.group(1)


def changelog_entry(text: str, version: str) -> str | None:
    """The text under `## <version>` up to the next `## ` heading, stripped; None when there is none."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.split()[:2] == ["##", version]), None)
    if start is None:
        return None
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    return "\n".join(lines[start + 1 : end]).strip()


def release_notes(tag: str, root: pathlib.Path = ROOT) -> str:
    version = tag_version(tag)
    source = source_version(root)
    if version != source:
        raise ReleaseError(f"tag {tag} names {version}, but dyt/__init__.py's __version__ is {source}")
    path = root / "CHANGELOG.md"
    try:
        text = path.read_text()
    except OSError as exc:
        raise ReleaseError(f"{path}: cannot read it ({exc.__class__.__name__})") from exc
    entry = changelog_entry(text, version)
    if entry is None:
        raise ReleaseError(f"CHANGELOG.md has no '## {version}' entry for tag {tag}")
    if not entry:
        raise ReleaseError(f"CHANGELOG.md's '## {version}' entry is empty")
    return entry


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="release_notes.py", description=__doc__.splitlines()[0])
    parser.add_argument("tag", help="the release tag, v<version>")
    parser.add_argument("root", nargs="?", type=pathlib.Path, default=ROOT, help="the checkout (default: ..)")
    args = parser.parse_args(argv)
    try:
        notes = release_notes(args.tag, args.root)
    except ReleaseError as exc:
        print(f"release_notes: {exc}", file=sys.stderr)
        return 1
    sys.stdout.write(notes + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
