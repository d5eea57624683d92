"""tooling: README.md and docs/*.md read as reference, not as a lab notebook.

- README.md is at most README_MAX_LINES lines.
- No commit hash in README.md or docs/*.md but on a measured line. A commit hash is a word of 7-40
  lowercase hex characters with at least one digit and one letter (the SHA rule of test_tree_rules.py). A
  measured line names one hash, after "measured" (any case) and " at ": "Measured with `<command>` on
  <GPU> at <commit>.". It belongs to a table: the nearest line above or below it, with at most one blank
  line between, is a row of that table (a table: consecutive lines starting with "|"), and no table has two
  measured lines. What was measured when, and what was tried, is CHANGELOG.md's.
- Every relative Markdown link in README.md and docs/*.md (code blocks and inline code aside) points to a
  file or folder of the repository, and an #anchor to a heading of that Markdown file (GitHub's slugs).
- A section named in prose or code as docs/<page>.md followed by a comma and the heading in double quotes,
  anywhere in the tree, is a heading of that page.
"""

from __future__ import annotations

import pathlib
import re
import subprocess

import pytest

pytestmark = pytest.mark.tooling

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 150

SHA = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b")
MEASURED = re.compile(r"\b(?i:measured)\b.* at (?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b")
FENCE = re.compile(r"^\s*(```|~~~)")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
SECTION_REF = re.compile(r"docs/([\w.-]+\.md),\s*(?:(?:#|//)\s*)?\"([^\"]+)\"")


def _rel(path: pathlib.Path) -> str:
    return str(path.relative_to(ROOT))


def _prose(text: str) -> list[str]:
    """The lines of a Markdown text with fenced code blocks blanked (line numbers kept)."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            lines.append("")
            continue
        lines.append("" if fenced else line)
    return lines


def _tables(lines: list[str]) -> list[tuple[int, int]]:
    """(first, last) line index of each table: a run of consecutive lines starting with '|'."""
    tables, start = [], None
    for i, line in enumerate([*lines, ""]):
        row = line.lstrip().startswith("|")
        if row and start is None:
            start = i
        elif not row and start is not None:
            tables.append((start, i - 1))
            start = None
    return tables


def _attached(i: int, lines: list[str], tables: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The tables a measured line at index i sits beside (at most one blank line between)."""
    near = []
    for first, last in tables:
        above = first in (i + 1, i + 2) and all(not lines[j].strip() for j in range(i + 1, first))
        below = last in (i - 1, i - 2) and all(not lines[j].strip() for j in range(last + 1, i))
        if above or below:
            near.append((first, last))
    return near


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but '-' and '_' dropped, spaces to '-'."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def headings(path: pathlib.Path) -> list[str]:
    return [
        m.group(1).strip() for line in _prose(path.read_text()) if (m := re.match(r"#{1,6}\s+(.+)", line))
    ]


def anchors(path: pathlib.Path) -> set[str]:
    """The anchors GitHub gives the headings of a Markdown file (a repeated slug gets -1, -2, ...)."""
    seen: dict[str, int] = {}
    out = set()
    for heading in headings(path):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def test_the_readme_is_short():
    lines = README.read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines, at most {README_MAX_LINES}"


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_commit_hashes_only_on_measured_lines_beside_a_table(page):
    lines = page.read_text().splitlines()
    tables = _tables(lines)
    owner: dict[tuple[int, int], int] = {}
    offenders = []
    for i, line in enumerate(lines):
        shas = SHA.findall(line)
        if not shas:
            continue
        where = f"{_rel(page)}:{i + 1}: {line.strip()[:120]}"
        if len(shas) > 1 or not MEASURED.search(line):
            offenders.append(
                f"{where}\n    a commit hash outside a 'measured ... at <commit>' line of its own"
            )
            continue
        near = _attached(i, lines, tables)
        if len(near) != 1:
            offenders.append(f"{where}\n    a measured line must sit just above or below one table")
            continue
        if near[0] in owner:
            offenders.append(
                f"{where}\n    the table already has a measured line (line {owner[near[0]] + 1})"
            )
        owner.setdefault(near[0], i)
    assert not offenders, "\n".join(offenders)


# reports/ holds run outputs; in the container the run mounts it (docker run -v ...), hiding the committed
# reports/README.md and baselines. Links into it are checked where the tree is a git checkout.
REPORTS_MAY_BE_A_MOUNT = not (ROOT / ".git").exists()


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_relative_links_point_into_the_repository(page):
    broken = []
    for number, line in enumerate(_prose(page.read_text()), 1):
        for target in LINK.findall(re.sub(r"`[^`]*`", "", line)):
            if SCHEME.match(target):
                continue
            name, _, anchor = target.partition("#")
            path = (page.parent / name).resolve() if name else page
            where = f"{_rel(page)}:{number}: ({target})"
            if REPORTS_MAY_BE_A_MOUNT and path.is_relative_to(ROOT / "reports"):
                continue
            if not path.is_relative_to(ROOT) or not path.exists():
                broken.append(f"{where}: no such file in the repository")
            elif anchor and path.suffix == ".md" and anchor not in anchors(path):
                broken.append(f"{where}: no heading with anchor #{anchor} in {_rel(path)}")
    assert not broken, "\n".join(broken)


def _tree_texts() -> list[pathlib.Path]:
    """Tracked text files (git ls-files), else the same folders on disk (a tree without .git)."""
    folders = ["dyt", "tests", "tools", "ci", "docs", ".github"]
    files = ["README.md", "CHANGELOG.md", "Dockerfile", "noxfile.py"]
    try:
        out = subprocess.run(["git", "ls-files", *folders, *files], cwd=ROOT, capture_output=True,
                             text=True, check=True)  # fmt: skip
        paths = [ROOT / name for name in out.stdout.split()]
    except (OSError, subprocess.CalledProcessError):
        paths = []
    if not paths:
        paths = [p for folder in folders for p in (ROOT / folder).rglob("*")] + [ROOT / f for f in files]
    suffixes = {".py", ".md", ".cpp", ".yml", ".yaml", ".sh", ".toml", ".txt", ""}
    return [p for p in paths if p.is_file() and p.suffix in suffixes]


def test_named_doc_sections_exist():
    """A reference such as the words docs/kernels.md, then the heading "Forward" in quotes, names a heading
    that the page has (wrapped over lines and comment markers too)."""
    known: dict[str, set[str]] = {}
    missing = []
    for path in _tree_texts():
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for match in SECTION_REF.finditer(text):
            page, heading = match.group(1), re.sub(r"\s*\n\s*(?:#|//|\*)?\s*", " ", match.group(2)).strip()
            doc = ROOT / "docs" / page
            if page not in known:
                known[page] = {h.lower() for h in headings(doc)} if doc.is_file() else set()
            if heading.lower() not in known[page]:
                line = text.count("\n", 0, match.start()) + 1
                missing.append(f'{_rel(path)}:{line}: docs/{page} has no heading "{heading}"')
    assert not missing, "\n".join(missing)
