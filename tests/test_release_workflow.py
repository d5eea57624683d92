"""tooling: the release: ci/release_notes.py (a tag's CHANGELOG.md entry, or one line and exit 1) and
.github/workflows/release.yml (a `v*` tag builds with `nox -s dist`, tests the wheel as installed, attests,
publishes through trusted publishing and makes the GitHub release). The workflow is read as text, as
tests/test_ci_consistency.py reads the others: no YAML library is a dependency of the project.

Each workflow check is a function of the workflow's text; test_each_check_fails_on_its_mutant feeds each
one a copy of the workflow with one thing broken and expects it to fail.
"""

from __future__ import annotations

import importlib.util
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

pytestmark = pytest.mark.tooling

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "ci" / "release_notes.py"
WORKFLOW = ROOT / ".github" / "workflows" / "release.yml"
CI_RUN = ROOT / ".ci" / "run"
NOXFILE = ROOT / "noxfile.py"


def _load_notes():
    spec = importlib.util.spec_from_file_location("ci_release_notes", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


notes = _load_notes()


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60)


def _tree(tmp_path: pathlib.Path, version: str, changelog: str | None = None) -> pathlib.Path:
    """A root with the checkout's CHANGELOG.md (or the one given) and a dyt/__init__.py of `version`."""
    (tmp_path / "dyt").mkdir()
    init = (ROOT / "dyt" / "__init__.py").read_text()
    init, count = re.subn(r'^__version__ = "[^"]*"', f'__version__ = "{version}"', init, flags=re.M)
    assert count == 1, "dyt/__init__.py writes __version__ otherwise"
    (tmp_path / "dyt" / "__init__.py").write_text(init)
    if changelog is None:
        shutil.copy(ROOT / "CHANGELOG.md", tmp_path / "CHANGELOG.md")
    else:
        (tmp_path / "CHANGELOG.md").write_text(changelog)
    return tmp_path


def _one_line_failure(result: subprocess.CompletedProcess, *words: str) -> None:
    assert result.returncode == 1, (result.returncode, result.stdout[:200], result.stderr)
    assert result.stdout == "", "a failure prints no notes"
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("release_notes: "), result.stderr
    for word in words:
        assert word in lines[0], (word, lines[0])


# ci/release_notes.py


def test_notes_of_v0_2_0_are_the_changelogs_0_2_0_entry(tmp_path):
    result = _run("v0.2.0", str(_tree(tmp_path, "0.2.0")))
    assert result.returncode == 0, result.stderr
    text = result.stdout
    assert text.startswith("The first public release"), text[:200]
    assert "`nox -s dist`" in text and "`dyt --version`" in text and "LICENSE" in text
    # The kernel and host versions are part of 0.2.0's entry, the newest to the first.
    assert "\n### Kernel and host versions\n" in text
    assert "\n- v50 (" in text and "\n- v1 (" in text and "\n- v0 (" in text
    assert not re.search(r"^#{1,2} ", text, re.M), "the entry holds no heading of its own level or above"
    assert text.endswith("\n") and not text.endswith("\n\n")


def test_notes_of_this_checkouts_version():
    """The tag a release of the checkout would carry has its notes."""
    tag = f"v{notes.source_version(ROOT)}"
    result = _run(tag)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == notes.changelog_entry((ROOT / "CHANGELOG.md").read_text(), tag[1:])
    assert len(result.stdout.strip()) > 100


def test_a_tag_of_another_version_fails_in_one_line():
    version = notes.source_version(ROOT)
    other = "0.0.1" if version != "0.0.1" else "0.0.2"
    _one_line_failure(_run(f"v{other}"), f"v{other}", version, "__version__")


def test_v9_9_9_without_an_entry_fails_in_one_line(tmp_path):
    root = _tree(tmp_path, "9.9.9")
    _one_line_failure(_run("v9.9.9", str(root)), "CHANGELOG.md", "## 9.9.9", "no")
    _one_line_failure(_run("v9.9.9"), "9.9.9", "__version__")  # the checkout's version is another


def test_an_empty_entry_and_a_tag_without_v_fail_in_one_line(tmp_path):
    root = _tree(tmp_path, "1.0.0", "# Changelog\n\n## 1.0.0\n\n## 0.2.0\n\n- old\n")
    _one_line_failure(_run("v1.0.0", str(root)), "1.0.0", "empty")
    _one_line_failure(_run("1.0.0", str(root)), "1.0.0", "v<version>")


def test_an_entry_ends_at_the_next_release_heading():
    text = "# Changelog\n\nintro\n\n## 0.3.0\n\n- new\n\n## 0.2.0\n\n- old\n\n### Sub\n\n- x\n\n"
    text += "## 0.1.0\n- older\n"
    assert notes.changelog_entry(text, "0.2.0") == "- old\n\n### Sub\n\n- x"
    assert notes.changelog_entry(text, "0.3.0") == "- new"
    assert notes.changelog_entry(text, "0.1.0") == "- older"
    assert notes.changelog_entry(text, "0.2") is None and notes.changelog_entry(text, "0.4.0") is None


# .github/workflows/release.yml, read as text


def _jobs(text: str) -> dict[str, str]:
    body = text[text.index("\njobs:\n") :]
    starts = [(m.group(1), m.start()) for m in re.finditer(r"^  ([\w-]+):\n", body, re.M)]
    ends = [start for _, start in starts[1:]] + [len(body)]
    return {name: body[start:end] for (name, start), end in zip(starts, ends, strict=True)}


def _head(job: str) -> str:
    """A job's keys before its steps."""
    return job.split("\n    steps:\n")[0] + "\n"


def _steps(job: str) -> list[str]:
    return re.split(r"\n(?=      - )", job.split("\n    steps:\n", 1)[1]) if "\n    steps:\n" in job else []


def _permissions(job: str) -> dict[str, str]:
    block = re.search(r"^    permissions:\n((?:      .*\n)*)", _head(job), re.M)
    assert block, "the job states its permissions"
    return dict(re.findall(r"^      ([\w-]+): (\w+)", block.group(1), re.M))


def _needs(job: str) -> set[str]:
    match = re.search(r"^    needs: (.+)$", _head(job), re.M)
    return set(re.findall(r"[\w-]+", match.group(1))) if match else set()


def _uses(step: str) -> str | None:
    match = re.search(r"^[ \t]+(?:- )?uses: (\S+)", step, re.M)
    return match.group(1) if match else None


def _with_step(job: str, action: str, artifact: str | None = None) -> str:
    """The one step of job that uses action (and, with artifact, names that artifact)."""
    found = [s for s in _steps(job) if (_uses(s) or "").startswith(action + "@")]
    if artifact is not None:
        found = [s for s in found if f"name: {artifact}\n" in s]
    assert len(found) == 1, f"{len(found)} steps use {action}" + (f" for {artifact}" if artifact else "")
    return found[0]


def check_trigger_is_v_tags_only(text: str) -> None:
    block = re.search(r"^on:\n((?:[ #].*\n|\n)*)", text, re.M)
    assert block, "no `on:` block"
    events = re.findall(r"^  ([\w-]+):", block.group(1), re.M)
    assert events == ["push"], events
    keys = re.findall(r"^    ([\w-]+):", block.group(1), re.M)
    assert keys == ["tags"], f"push filters {keys}: tags only"
    inline = re.search(r"^    tags: \[(.*)\]$", block.group(1), re.M)
    listed = inline.group(1).split(",") if inline else re.findall(r"^      - (.+)$", block.group(1), re.M)
    assert [p.strip().strip("\"'") for p in listed] == ["v*"], listed


def check_top_permissions_are_empty(text: str) -> None:
    assert re.search(r"^permissions: \{\}$", text, re.M), "the workflow grants a default"
    top = text[: text.index("\njobs:\n")]
    assert len(re.findall(r"^permissions:", top, re.M)) == 1


def check_every_action_is_pinned_by_sha(text: str) -> None:
    uses = re.findall(r"^\s*(?:- )?uses:\s*(\S+)(.*)$", text, re.M)
    assert len(uses) >= 8, uses
    for ref, comment in uses:
        assert re.fullmatch(r"[\w.-]+/[\w./-]+@[0-9a-f]{40}", ref), f"{ref} is not pinned by a commit SHA"
        assert re.fullmatch(r" # v\d+\.\d+\.\d+", comment), f"{ref}: no '# vX.Y.Z' comment"


def check_build_runs_the_dist_session_checks_the_tag_and_uploads_dist(text: str) -> None:
    build = _jobs(text)["build"]
    assert _permissions(build) == {"contents": "read"}
    runs = "\n".join(s for s in _steps(build) if "run:" in s)
    assert re.search(r"^\s+nox -s dist$", runs, re.M), "the build is `nox -s dist`"
    assert 'python ci/release_notes.py "$TAG" > release-notes/changelog-entry.md' in runs
    assert "TAG: ${{ github.ref_name }}" in build
    upload = _with_step(build, "actions/upload-artifact", "dist")
    assert "path: dist/\n" in upload and "if-no-files-found: error" in upload
    notes = _with_step(build, "actions/upload-artifact", "release-notes")
    assert "path: release-notes/\n" in notes and "if-no-files-found: error" in notes


def check_the_dist_session_is_the_one_ci_runs(text: str) -> None:
    check_build_runs_the_dist_session_checks_the_tag_and_uploads_dist(text)
    assert re.search(r"^def dist\(session", NOXFILE.read_text(), re.M)
    assert re.search(r"^\S*nox -s (?:[\w ]+ )?dist\b", CI_RUN.read_text(), re.M), ".ci/run runs no dist"


def _downloads_dist(job: str) -> bool:
    download = _with_step(job, "actions/download-artifact", "dist")
    return re.search(r"path: dist/?\n", download) is not None


def check_installed_tests_the_downloaded_wheel_with_cpu_torch(text: str) -> None:
    installed = _jobs(text)["installed"]
    assert _needs(installed) == {"build"} and _downloads_dist(installed)
    assert _permissions(installed) == {"contents": "read"}
    assert re.search(r"^\s+nox -s installed_tests$", installed, re.M)
    assert re.search(r"^      DYT_TORCH_INDEX: https://download\.pytorch\.org/whl/cpu$", installed, re.M)


def check_attest_signs_dist(text: str) -> None:
    attest = _jobs(text)["attest"]
    assert _needs(attest) == {"build"} and _downloads_dist(attest)
    perms = _permissions(attest)
    assert perms == {"contents": "read", "id-token": "write", "attestations": "write"}, perms
    assert "subject-path: dist/*\n" in _with_step(attest, "actions/attest-build-provenance")


def check_publish_is_trusted_publishing_after_build_installed_and_attest(text: str) -> None:
    publish = _jobs(text)["publish"]
    assert _needs(publish) == {"build", "installed", "attest"}, _needs(publish)
    assert _permissions(publish) == {"id-token": "write"}, _permissions(publish)
    assert re.search(
        r"^    environment:\n      name: pypi\n      url: https://pypi\.org/project/dyt-kernels/\n",
        _head(publish),
        re.M,
    )
    step = _with_step(publish, "pypa/gh-action-pypi-publish")
    inputs = re.findall(r"^          ([\w-]+):", step, re.M)
    assert not {"password", "user", "username"} & set(inputs), f"a stored credential: {inputs}"
    assert "secrets." not in publish, "trusted publishing needs no secret"
    assert _downloads_dist(publish)
    assert "actions/checkout@" not in publish and "run:" not in publish, "the publishing job runs no code"


def check_github_release_attaches_dist_with_the_changelogs_notes(text: str) -> None:
    release = _jobs(text)["github-release"]
    assert _needs(release) == {"publish"}
    assert _permissions(release) == {"contents": "write"}
    assert _downloads_dist(release)
    assert "GH_TOKEN: ${{ github.token }}" in release and "TAG: ${{ github.ref_name }}" in release
    assert "actions/checkout@" not in release, (
        "the job that writes the release runs no code of the repository"
    )
    notes = _with_step(release, "actions/download-artifact", "release-notes")
    assert re.search(r"path: release-notes/?\n", notes)
    run = next(s for s in _steps(release) if "gh release create" in s)
    create = re.search(r'gh release create "\$TAG" (.*)$', re.sub(r"\\\n\s*", "", run), re.M)
    assert create, "gh release create names the tag"
    args = create.group(1).split()
    assert args[0] == "dist/*" and "--verify-tag" in args and "--notes-file" in args, args
    assert args[args.index("--notes-file") + 1] == "release-notes/changelog-entry.md", args


# The only write permissions, each job's: build and installed read.
WRITES = {"attest": {"id-token", "attestations"}, "publish": {"id-token"}, "github-release": {"contents"}}


def check_only_the_release_jobs_write(text: str) -> None:
    jobs = _jobs(text)
    assert set(jobs) == {"build", "installed", "attest", "publish", "github-release"}, set(jobs)
    for job_id, job in jobs.items():
        writes = {scope for scope, level in _permissions(job).items() if level == "write"}
        assert writes <= WRITES.get(job_id, set()), f"{job_id} writes {writes}"
        assert re.search(r"^    timeout-minutes: \d+$", _head(job), re.M), f"{job_id}: no timeout"
        for step in _steps(job):
            assert re.search(r"^      - name: \S", step, re.M), f"{job_id}: a step without a name"
            if _uses(step) and _uses(step).startswith("actions/checkout@"):
                assert "persist-credentials: false" in step, f"{job_id}: checkout keeps credentials"
    for match in re.finditer(r"^([ \t]+)run: \|\n((?:\1  .*\n|\n)*)", text, re.M):
        assert "${{" not in match.group(2), f"an expression inside a run script: {match.group(2)[:80]}"


CHECKS = [
    check_trigger_is_v_tags_only,
    check_top_permissions_are_empty,
    check_every_action_is_pinned_by_sha,
    check_the_dist_session_is_the_one_ci_runs,
    check_installed_tests_the_downloaded_wheel_with_cpu_torch,
    check_attest_signs_dist,
    check_publish_is_trusted_publishing_after_build_installed_and_attest,
    check_github_release_attaches_dist_with_the_changelogs_notes,
    check_only_the_release_jobs_write,
]


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__[len("check_") :])
def test_release_workflow(check):
    check(WORKFLOW.read_text())


# (check, what the mutant replaces, with what): each must make its check fail.
MUTANTS = [
    (check_trigger_is_v_tags_only, 'tags: ["v*"]', 'tags: ["v*", "nightly"]'),
    (check_trigger_is_v_tags_only, "on:\n  push:\n", "on:\n  pull_request:\n  push:\n"),
    (check_trigger_is_v_tags_only, '    tags: ["v*"]\n', '    branches: [main]\n    tags: ["v*"]\n'),
    (check_top_permissions_are_empty, "permissions: {}\n", "permissions:\n  contents: read\n"),
    (check_every_action_is_pinned_by_sha, "@a2bbfa25375fe432b6a289bc6b6cd05ecd0c4c32", "@v4"),
    (check_every_action_is_pinned_by_sha, "@cef221092ed1bacb1cc03d23a2d87d1d172e277b", "@release/v1"),
    (check_every_action_is_pinned_by_sha, "# v4.1.0", "# v4"),
    (check_the_dist_session_is_the_one_ci_runs, "          nox -s dist\n", "          python -m build\n"),
    (check_the_dist_session_is_the_one_ci_runs, 'python ci/release_notes.py "$TAG"', "true"),
    (check_the_dist_session_is_the_one_ci_runs, "if-no-files-found: error", "if-no-files-found: warn"),
    (
        check_installed_tests_the_downloaded_wheel_with_cpu_torch,
        "  nox -s installed_tests\n",
        "  nox -s tests\n",
    ),
    (check_installed_tests_the_downloaded_wheel_with_cpu_torch, "      DYT_TORCH_INDEX", "      X_INDEX"),
    (check_attest_signs_dist, "subject-path: dist/*", "subject-path: dist/*.whl"),
    (check_attest_signs_dist, "      attestations: write", "      attestations: read"),
    (
        check_publish_is_trusted_publishing_after_build_installed_and_attest,
        "needs: [build, installed, attest]",
        "needs: [build]",
    ),
    (
        check_publish_is_trusted_publishing_after_build_installed_and_attest,
        "packages-dir: dist/",
        "password: ${{ secrets.PYPI_TOKEN }}",
    ),
    (
        check_publish_is_trusted_publishing_after_build_installed_and_attest,
        "      id-token: write # trusted",
        "      contents: write\n      id-token: write # trusted",
    ),
    (
        check_publish_is_trusted_publishing_after_build_installed_and_attest,
        "      name: pypi\n",
        "      name: release\n",
    ),
    (check_github_release_attaches_dist_with_the_changelogs_notes, 'create "$TAG" dist/* ', 'create "$TAG" '),
    (check_github_release_attaches_dist_with_the_changelogs_notes, " --verify-tag", ""),
    (
        check_the_dist_session_is_the_one_ci_runs,
        '"$TAG" > release-notes/changelog-entry.md',
        '"$TAG" > x.md',
    ),
    (
        check_github_release_attaches_dist_with_the_changelogs_notes,
        "--notes-file release-notes/changelog-entry.md",
        "--notes x",
    ),
    (
        check_github_release_attaches_dist_with_the_changelogs_notes,
        "    steps:\n      - name: Download the changelog's entry",
        "    steps:\n      - name: Check out\n        uses: actions/checkout@"
        "3d3c42e5aac5ba805825da76410c181273ba90b1 # v7.0.1\n      - name: Download the changelog's entry",
    ),
    (check_github_release_attaches_dist_with_the_changelogs_notes, "needs: publish", "needs: attest"),
    (
        check_only_the_release_jobs_write,
        "      contents: read\n    steps:\n      - name: Check out",
        "      contents: write\n    steps:\n      - name: Check out",
    ),
    (check_only_the_release_jobs_write, "persist-credentials: false", "persist-credentials: true"),
    (
        check_only_the_release_jobs_write,
        'python ci/release_notes.py "$TAG"',
        "python ci/release_notes.py ${{ github.ref_name }}",
    ),
    (check_only_the_release_jobs_write, "    timeout-minutes: 10\n", "\n"),
]


@pytest.mark.parametrize("check,old,new", MUTANTS, ids=lambda v: v.__name__[6:] if callable(v) else None)
def test_each_check_fails_on_its_mutant(check, old, new):
    text = WORKFLOW.read_text()
    assert old in text, f"the mutant's text {old!r} is not in release.yml"
    with pytest.raises(AssertionError):
        check(text.replace(old, new, 1))


def test_every_check_has_a_mutant():
    assert {check for check, _, _ in MUTANTS} == set(CHECKS)
