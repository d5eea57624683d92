"""tooling: the CI wrappers of the shipped conformance suite, run on CPU. The composite action
(.github/actions/dyt-conformance) and the reusable workflow (.github/workflows/conformance.yml) run as
other repositories call them: their own run: scripts, taken from the files, in a temporary layout of a
caller's repository with two runners, one judging the paper's expression and one a broken implementation;
then the workflow's merge step over the two runners' folders (labelled as two GPU models) gives one table per
GPU model in the job summary."""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import textwrap

import pytest

from dyt.service import gpu_matrix

pytestmark = pytest.mark.tooling
ROOT = pathlib.Path(__file__).parents[1]
ACTION = ROOT / ".github" / "actions" / "dyt-conformance" / "action.yml"
WORKFLOW = ROOT / ".github" / "workflows" / "conformance.yml"


def steps(text: str) -> dict[str, dict]:
    """Each step's run: script (dedented) and env: mapping, by its name (a minimal reader of this file's
    layout: `- name:` items, `run: |` blocks and `env:` blocks of KEY: value lines)."""
    lines = text.splitlines()
    found = {}
    for i, line in enumerate(lines):
        head = re.match(r"^(\s*)- name: (.+)$", line)
        if not head:
            continue
        indent = len(head.group(1))
        body = []
        for later in lines[i + 1 :]:
            if later.strip() and len(later) - len(later.lstrip()) <= indent:
                break
            body.append(later)
        step = {"run": None, "env": {}}
        for j, item in enumerate(body):
            key = re.match(r"^(\s*)(run|env): ?(\|)?\s*$", item)
            if not key:
                continue
            depth = len(key.group(1))
            block = []
            for nested in body[j + 1 :]:
                if nested.strip() and len(nested) - len(nested.lstrip()) <= depth:
                    break
                block.append(nested)
            if key.group(2) == "run":
                step["run"] = textwrap.dedent("\n".join(block))
            else:
                step["env"] = dict(re.findall(r"^\s+([A-Z_]+): (.*)$", "\n".join(block), re.M))
        found[head.group(2).strip()] = step
    return found


def _bash(script: str, cwd: pathlib.Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", "-c", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=900
    )


def test_the_workflow_runs_the_actions_command():
    """One command in both: the workflow's runner step is the action's (the workflow cannot reach the
    action by a relative path from a caller's checkout, so it carries the same lines)."""
    action, workflow = steps(ACTION.read_text()), steps(WORKFLOW.read_text())
    command = [line for line in action["python -m dyt conformance"]["run"].splitlines() if "dyt" in line]
    assert command and all(line in workflow["python -m dyt conformance"]["run"] for line in command)


def test_two_runners_and_the_merge_as_a_caller_runs_them(tmp_path):
    caller = tmp_path / "caller"
    caller.mkdir()
    (caller / "mykernels.py").write_text(
        "from dyt.conformance.implementations import paper_expression as my_dyt  # noqa: F401\n"
    )
    base = {**gpu_matrix.outside_session(), "PYTHONPATH": f"{ROOT}{os.pathsep}{caller}"}
    action = steps(ACTION.read_text())
    run_step, verdict_step = action["python -m dyt conformance"], action["The verdict"]
    runners = {"h100": "mykernels:my_dyt", "h200": "dyt.conformance.broken:unmasked_padding"}
    codes = {}
    for label, impl in runners.items():
        summary, output = tmp_path / f"{label}-summary.md", tmp_path / f"{label}-output"
        env = {**base, "IMPL": impl, "PARAMS": "", "UNSUPPORTED": "", "OUT": f"out-{label}",
               "GITHUB_STEP_SUMMARY": str(summary), "GITHUB_OUTPUT": str(output)}  # fmt: skip
        run = _bash(run_step["run"], caller, env)
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]  # the step records, then goes on
        codes[label] = dict(line.split("=", 1) for line in output.read_text().splitlines())["exit-code"]
        assert f"# DyT conformance: {impl}" in summary.read_text()
        for fail_on_failure, expected in (("true", 1), ("false", 0)):
            verdict = _bash(verdict_step["run"], caller, {**base, "CODE": codes[label],
                                                          "FAIL_ON_FAILURE": fail_on_failure})  # fmt: skip
            assert verdict.returncode == expected, (label, fail_on_failure, verdict.stdout)
    assert codes == {
        "h100": "1",
        "h200": "1",
    }  # the paper's expression fails in 16 bits; the fixture, padding
    for label, gpu in (("h100", "NVIDIA H100 80GB HBM3"), ("h200", "NVIDIA H200")):  # two GPU models
        path = caller / f"out-{label}" / "verdict.json"
        data = json.loads(path.read_text())
        data["env"]["gpu_name"] = gpu
        path.write_text(json.dumps(data))
    downloaded = caller / "runners"
    downloaded.mkdir()
    for i, label in enumerate(runners):  # as download-artifact lays out dyt-conformance-<job index>
        (caller / f"out-{label}").rename(downloaded / f"dyt-conformance-{i}")
    merge = steps(WORKFLOW.read_text())["python -m dyt conformance merge"]
    script = "\n".join(line for line in merge["run"].splitlines() if "pip install" not in line)  # installed
    summary = tmp_path / "merge-summary.md"
    run = _bash(script, caller, {**base, "GITHUB_STEP_SUMMARY": str(summary)})
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    text = summary.read_text()
    assert "## NVIDIA H100 80GB HBM3" in text and "## NVIDIA H200" in text
    h100, h200 = text.split("## NVIDIA H200")
    assert "| check | mykernels:my_dyt |" in h100
    assert "| check | dyt.conformance.broken:unmasked_padding |" in h200
    assert re.search(r"\| test_nonfinite_alpha_with_padding \(.*\) \| fail \d/6 \|", h200)
    assert re.search(r"\| test_nonfinite_alpha_with_padding \(.*\) \| pass \|", h100)
    copied = caller / "merged" / "nvidia-h200" / "dyt-conformance-broken-unmasked-padding"
    assert (copied / "junit.xml").is_file() and (copied / "verdict.json").is_file()
