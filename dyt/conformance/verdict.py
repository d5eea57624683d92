"""A conformance run's verdict, as files a person and a CI job read, and several runners' verdicts merged.

`write(folder, ...)` puts in folder: verdict.json (what the other files are made from, and what `merge`
reads), verdict.md (the table: one row per check, the seed pull request's bug classes first, each failing
case with its first message and the command that reruns it), verdict.html (the same, rendered), failures.md
(each failing case and its command) and env.json (dyt.service.env's manifest, with the implementation and
what it supports). `merge(folders, out)` reads the runners' verdict.json files and writes one table per GPU
model (checks by implementation) to out/summary.md, with every runner's files copied under out/<gpu>/.

Outcomes: pass, fail, not supported (the check needs a capability the implementation lacks: its skip
reason starts "not supported"), n/a (nothing to judge here, e.g. no kernel launch visible) and skipped
(GPU-only checks on a CPU). A check with several cases (parameters) shows "fail k/n" where k fail.

Invariant: files are written whole (a temporary file renamed into place), so a run stopped midway leaves
the previous verdict or none, never half a file.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import re
import shutil
from collections.abc import Iterable

from dyt.service.files import write_atomic

VERDICT_FILE = "verdict.json"

# The seed pull request's bug classes, by the check that catches each (the verdict lists them first).
SEED_BUG_CLASSES = {
    "test_more_than_65535_rows": "rows past grid axis 1 (65,535)",
    "test_narrow_rows_share_programs": "one program per narrow row",
    "test_nonfinite_alpha_with_padding": "NaN from padding with an infinite alpha",
    "test_float32_parameter_gradients_keep_their_precision": "float32 parameter grads rounded through x",
}


@dataclasses.dataclass(frozen=True)
class CaseResult:
    """One case of a check: its test name (with parameters), the check, the outcome, the first line of its
    message, and the command that reruns it."""

    name: str
    check: str
    outcome: str
    message: str = ""
    reproduce: str = ""


def _outcome(report) -> str:
    if report.failed:
        return "fail"
    if report.skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        reason = reason.removeprefix("Skipped: ")
        if reason.startswith("not supported"):
            return "not supported"
        return "n/a" if reason.startswith("not applicable") else "skipped"
    return "pass"


def _message(report) -> str:
    if report.skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        return reason.removeprefix("Skipped: ")
    if not report.failed:
        return ""
    text = getattr(report, "longreprtext", "") or ""
    errors = [line[1:].strip() for line in text.splitlines() if line.startswith("E ")]
    return (errors[0] if errors else text.strip().splitlines()[-1] if text.strip() else "")[:300]


def from_reports(reports: Iterable, impl: str) -> list[CaseResult]:
    """One CaseResult per case from pytest's reports (a case's non-passing setup or teardown counts)."""
    cases: dict[str, CaseResult] = {}
    for report in reports:
        props = dict(report.user_properties)
        name = report.nodeid.split("::")[-1]
        outcome = _outcome(report)
        if name in cases and cases[name].outcome == "fail":
            continue  # the first failure of a case stands
        cases[name] = CaseResult(name, props["check"], outcome, _message(report), props.get("reproduce", ""))
    return sorted(cases.values(), key=lambda c: c.name)


def _order(checks: Iterable[str]) -> list[str]:
    return sorted(set(checks), key=lambda c: (c not in SEED_BUG_CLASSES, c))


def _label(check: str) -> str:
    return f"{check} ({SEED_BUG_CLASSES[check]})" if check in SEED_BUG_CLASSES else check


def cell(cases: list[dict]) -> str:
    """A check's verdict over its cases: pass, fail k/n, not supported, n/a or skipped."""
    outcomes = [c["outcome"] for c in cases]
    failed = outcomes.count("fail")
    if failed:
        return f"fail {failed}/{len(outcomes)}"
    if "pass" in outcomes:
        return "pass"
    for outcome in ("not supported", "n/a", "skipped"):
        if outcome in outcomes:
            return outcome
    return "-"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]


def _by_check(results: list[dict]) -> dict[str, list[dict]]:
    grouped: dict[str, list[dict]] = {}
    for r in results:
        grouped.setdefault(r["check"], []).append(r)
    return grouped


def _gpu(env: dict) -> str:
    return env.get("gpu_name") or "CPU"


def markdown(data: dict) -> str:
    """verdict.md of one run (data as in verdict.json)."""
    env, grouped = data["env"], _by_check(data["results"])
    counts = {o: sum(r["outcome"] == o for r in data["results"]) for o in ("pass", "fail", "not supported")}
    lines = [
        f"# DyT conformance: {data['impl']}",
        "",
        f"On {_gpu(env)} (torch {env.get('torch')}, triton {env.get('triton')}, "
        f"dyt {env.get('dyt_version')}), "
        f"DYT_SEED={data['seed']}: {len(grouped)} checks, {counts['pass']} cases passed, {counts['fail']} "
        f"failed, {counts['not supported']} not supported.",
        "",
    ]
    rows = [[_label(check), cell(grouped[check])] for check in _order(grouped)]
    lines += _table(["check", data["impl"]], rows)
    supports = data.get("capabilities") or {}
    if supports:
        lines += ["", "What it supports (declared, or probed on a tiny input):", ""]
        lines += [f"- {cap}: {'yes' if s['supported'] else 'no'} ({s['how']})" for cap, s in supports.items()]
    failing = [r for r in data["results"] if r["outcome"] == "fail"]
    if failing:
        lines += ["", "## Failures", ""]
        for r in failing:
            lines += [f"- `{r['name']}`: {r['message']}", f"  `{r['reproduce']}`"]
    return "\n".join(lines) + "\n"


def failures_markdown(data: dict) -> str:
    failing = [r for r in data["results"] if r["outcome"] == "fail"]
    lines = [f"# Failures of the conformance checks on {data['impl']} (DYT_SEED={data['seed']})", ""]
    if not failing:
        lines.append("No failures.")
    for r in failing:
        lines += [
            f"## `{r['name']}`",
            "",
            r["message"],
            "",
            "Reproduce:",
            "",
            "```",
            r["reproduce"],
            "```",
            "",
        ]
    return "\n".join(lines) + "\n"


def html(text: str, title: str) -> str:
    """The Markdown rendered (the markdown package's tables), or shown as preformatted text without it."""
    try:
        import markdown as md

        body = md.markdown(text, extensions=["tables"])
    except ImportError:
        from html import escape

        body = f"<pre>{escape(text)}</pre>"
    head = f"<head><meta charset='utf-8'><title>{title}</title></head>"
    return f"<!doctype html><html>{head}<body>{body}</body></html>\n"


def write(folder, impl, seed: str, results: list[CaseResult]) -> pathlib.Path:
    """The run's files in folder (created); returns verdict.json's path."""
    import torch

    from dyt.conformance.contract import default_device
    from dyt.conformance.implementations import CAPABILITIES, supports
    from dyt.service.env import collect_env

    folder = pathlib.Path(folder)
    env = collect_env(seeds={"DYT_SEED": int(seed)})
    device = default_device() if torch.cuda.is_available() else torch.device("cpu")
    capabilities = {}
    for capability in CAPABILITIES:
        s = supports(impl, capability, device)
        capabilities[capability] = {"supported": s.supported, "how": s.how}
    data = {"impl": impl.name, "seed": seed, "env": env, "capabilities": capabilities,
            "results": [dataclasses.asdict(r) for r in results]}  # fmt: skip
    write_atomic(folder / "env.json", json.dumps({**env, "impl": impl.name}, indent=2, sort_keys=True) + "\n")
    text = markdown(data)
    write_atomic(folder / "verdict.md", text)
    write_atomic(folder / "verdict.html", html(text, f"DyT conformance: {impl.name}"))
    write_atomic(folder / "failures.md", failures_markdown(data))
    write_atomic(folder / VERDICT_FILE, json.dumps(data, indent=2, sort_keys=True) + "\n")
    return folder / VERDICT_FILE


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "unknown"


def read_runs(folders: Iterable) -> list[tuple[pathlib.Path, dict]]:
    """(folder, verdict.json's data) of every verdict.json under folders, at any depth."""
    runs = []
    for folder in folders:
        for path in sorted(pathlib.Path(folder).rglob(VERDICT_FILE)):
            runs.append((path.parent, json.loads(path.read_text())))
    return runs


def by_gpu(runs: list[tuple[pathlib.Path, dict]]) -> dict[str, list[tuple[pathlib.Path, dict]]]:
    grouped: dict[str, list[tuple[pathlib.Path, dict]]] = {}
    for where, data in runs:
        grouped.setdefault(_gpu(data["env"]), []).append((where, data))
    return grouped


def _provenance(data: dict) -> str:
    env = data["env"]
    return (f"{data['impl']} DYT_SEED={data['seed']} (dyt {env.get('dyt_version')}, git "
            f"{str(env.get('git_sha'))[:12]}, {env.get('timestamp_utc')})")  # fmt: skip


def gpu_section(gpu: str, runs: list[tuple[pathlib.Path, dict]]) -> list[str]:
    """One GPU model's table (checks by implementation, dyt first), each failing case with its command."""
    impls = sorted({d["impl"] for _, d in runs}, key=lambda i: (i != "dyt", i))
    cells: dict[tuple[str, str], list[dict]] = {}
    for _, data in runs:
        for r in data["results"]:
            cells.setdefault((data["impl"], r["check"]), []).append(r)
    checks = _order(check for _, check in cells)
    rows = [[_label(c), *(cell(cells.get((i, c), [])) for i in impls)] for c in checks]
    seeds = ", ".join(_provenance(d) for _, d in runs)
    lines = [f"## {gpu}", "", f"Runs: {seeds}.", "", *_table(["check", *impls], rows), ""]
    failing = [(d["impl"], r) for _, d in runs for r in d["results"] if r["outcome"] == "fail"]
    for impl, r in failing:
        lines += [f"- **{impl}** `{r['name']}`: {r['message']}", f"  `{r['reproduce']}`"]
    return lines + ([""] if failing else [])


def merge(folders: Iterable, out) -> pathlib.Path:
    """The verdicts found under folders (each folder's verdict.json files, at any depth) as one table per GPU
    model in out/summary.md (and .html), each runner's files copied to out/<gpu>/<impl>/; returns
    summary.md's path. ValueError where no verdict is found."""
    out = pathlib.Path(out)
    runs = read_runs(folders)
    if not runs:
        raise ValueError(f"no {VERDICT_FILE} under {[str(f) for f in folders]}")
    lines = ["# DyT conformance", ""]
    for gpu, gpu_runs in sorted(by_gpu(runs).items()):
        for where, data in gpu_runs:
            target = out / _slug(gpu) / _slug(data["impl"])
            if target.resolve() != where.resolve():
                shutil.copytree(where, target, dirs_exist_ok=True)
        lines += gpu_section(gpu, gpu_runs)
    text = "\n".join(lines)
    write_atomic(out / "summary.md", text)
    write_atomic(out / "summary.html", html(text, "DyT conformance"))
    return out / "summary.md"


def publish(runs: list[tuple[pathlib.Path, dict]], out) -> list[pathlib.Path]:
    """The committed form of runs on this machine, per GPU model (CPU where there is none): out/<gpu>/
    summary.md (its table) and junit/<impl>.xml of each run, the files the report reads; the folder's
    earlier files are replaced. Returns the summaries written."""
    out = pathlib.Path(out)
    written = []
    for gpu, gpu_runs in sorted(by_gpu(runs).items()):
        folder = out / _slug(gpu)
        shutil.rmtree(folder, ignore_errors=True)
        for where, data in gpu_runs:
            write_atomic(folder / "junit" / f"{_slug(data['impl'])}.xml", (where / "junit.xml").read_text())
        text = "\n".join(["# DyT conformance", "", "Written by `python -m dyt conformance publish`.", "",
                          *gpu_section(gpu, gpu_runs)])  # fmt: skip
        write_atomic(folder / "summary.md", text)
        written.append(folder / "summary.md")
    return written
