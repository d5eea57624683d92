"""conformance: the shipped checks catch what they claim. Each broken implementation of
dyt.conformance.broken (one per bug class of the seed pull request and per contract clause) fails, through
`python -m dyt conformance`, exactly the check its clause names (broken.BREAKS) and no other; the eager
module's verdict comes from the same command. On CPU the launch fixtures run in Triton's interpreter, where
dyt.conformance.launches refuses a launch past CUDA's grid limits as CUDA would."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

from dyt.conformance import broken
from dyt.service import gpu_matrix

pytestmark = pytest.mark.conformance
ROOT = pathlib.Path(__file__).parents[1]


def _conformance(impl: str, out: pathlib.Path, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    """`python -m dyt conformance --impl impl --out out` in a child (this checkout importable), and the
    verdict.json it wrote."""
    env = {**gpu_matrix.outside_session(), "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "dyt", "conformance", "--impl", impl, "--out", str(out), *extra]
    run = subprocess.run(cmd, cwd=out.parent, env=env, capture_output=True, text=True, timeout=900)
    verdict = out / "verdict.json"
    assert verdict.exists(), run.stdout[-3000:] + run.stderr[-3000:]
    return run, json.loads(verdict.read_text())


def _failing(data: dict) -> set[str]:
    return {r["check"] for r in data["results"] if r["outcome"] == "fail"}


@pytest.mark.parametrize("name", sorted(broken.BREAKS))
def test_each_broken_implementation_fails_exactly_its_check(name, tmp_path):
    run, data = _conformance(f"dyt.conformance.broken:{name}", tmp_path / name)
    assert run.returncode == 1, run.stdout[-3000:] + run.stderr[-3000:]
    assert _failing(data) == {broken.BREAKS[name]}, [
        (r["name"], r["message"]) for r in data["results"] if r["outcome"] == "fail"
    ]


def test_every_check_of_a_bug_class_or_clause_has_its_broken_implementation():
    from dyt.conformance import verdict

    assert set(verdict.SEED_BUG_CLASSES) <= set(broken.BREAKS.values())


def test_the_eager_module_is_judged_and_its_verdict_written(tmp_path):
    """The paper's expression on CPU: its known failures (16-bit values rounded at each step, float32 y
    with float32 parameters, integer and complex x accepted), each with a command that reruns it."""
    out = tmp_path / "eager"
    run, data = _conformance("eager", out, "--seed", "11")
    assert run.returncode == 1, run.stdout[-3000:] + run.stderr[-3000:]
    assert _failing(data) == {"test_values_against_the_reference", "test_output_and_gradient_dtypes",
                              "test_bad_input_raises_a_clear_error"}  # fmt: skip
    for name in ("verdict.md", "verdict.html", "failures.md", "env.json", "junit.xml"):
        assert (out / name).is_file(), name
    text = (out / "verdict.md").read_text()
    assert "| test_more_than_65535_rows (rows past grid axis 1 (65,535)) | pass |" in text
    assert "| test_channels_first_values | not supported |" in text
    assert all(r["reproduce"].startswith("DYT_SEED=11 python -m dyt conformance --impl eager --select ")
               for r in data["results"] if r["outcome"] == "fail")  # fmt: skip


def test_a_failure_reruns_from_its_printed_command(tmp_path):
    """The reproduce command of one failing case, run as printed: that case fails with the same message."""
    run, data = _conformance("dyt.conformance.broken:param_grads_rounded_through_x", tmp_path / "first")
    (case,) = [r for r in data["results"] if r["outcome"] == "fail"]
    env = {**gpu_matrix.outside_session(), "PYTHONPATH": str(ROOT)}
    again = subprocess.run(["bash", "-c", f"{case['reproduce']} --out {tmp_path / 'again'}"], cwd=tmp_path,
                           env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
    rerun = json.loads((tmp_path / "again" / "verdict.json").read_text())
    assert again.returncode == 1 and [r["name"] for r in rerun["results"]] == [case["name"]]
    assert rerun["results"][0]["message"] == case["message"]


def test_a_module_class_is_judged_through_its_parameters(tmp_path):
    """The paper's DynamicTanh (an nn.Module class: alpha, weight, bias) is called with the check's own
    tensors; its channels-first form (channels_last=False) is found and judged."""
    cases = ("test_channels_first_values[paper-fp32]", "test_mixed_precision_values[paper-nobeta]")
    run, data = _conformance("paper", tmp_path / "paper", "--select", cases[0], "--select", cases[1])
    outcomes = {r["name"]: r["outcome"] for r in data["results"]}
    assert outcomes == {"test_channels_first_values[paper-fp32]": "pass",
                        "test_mixed_precision_values[paper-nobeta]": "not supported"}, outcomes  # fmt: skip
    assert data["capabilities"]["no_beta"]["supported"] is False


@pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1", reason="the dyt verdict on CPU runs in the interpreter"
)
def test_dyt_is_judged_by_the_same_command(tmp_path):
    run, data = _conformance("dyt", tmp_path / "dyt", "--select", "test_empty_input[dyt-(0, 64)]")
    assert run.returncode == 0 and [r["outcome"] for r in data["results"]] == ["pass"]
