"""The summary page: composes the sections for a reports folder and writes summary.md, summary.html and
the plots into it; `python -m dyt report`.

The contract: compose decides the page (the folder's own run first; committed baselines and verdicts
where the folder holds no run of that kind, titled as committed), render writes each file whole or not
at all (files.write_atomic) and lets an OSError through, main turns that into one line and exit 74
(files.WRITE_FAILED). The summary stays under GitHub's 1 MiB job-summary limit (MAX_SUMMARY_BYTES).
"""

from __future__ import annotations

import argparse
import datetime
import sys
from pathlib import Path

from dyt.service.files import WRITE_FAILED, write_atomic, write_error
from dyt.service.report.markdown import (
    baseline_note,
    committed,
    conformance_section,
    env_section,
    failures_section,
    link,
    models_section,
    perf_section,
    source_note,
    tests_section,
    verdict_note,
    verdict_sections,
)
from dyt.service.report.plots import make_model_plots, make_plots
from dyt.service.report.read import (
    Baseline,
    failure_notes,
    load_baselines,
    load_junit,
    load_verdicts,
    measured_kernels,
    newest_perf,
    read_env,
)

MAX_SUMMARY_BYTES = 1024 * 1024  # GitHub's job summary limit


def baseline_sections(baseline: Baseline, plot_dir: Path, base: Path) -> tuple[list[str], list[Path]]:
    """A committed baseline rendered as a run (the performance and model sections, with their plots under
    plot_dir), each titled as the committed baseline of its GPU; the Markdown and the plots written."""
    perf = baseline.perf
    plots = make_plots(perf, plot_dir)
    model_plots = make_model_plots(perf, plot_dir)
    title = f"committed baseline, {measured_kernels(perf).gpu}"
    label = f"The committed baseline {link(baseline.path, base)}; no bench run in this folder."
    lines = committed(perf_section(baseline.path, perf, [baseline.path], plots, base), title, label)
    lines += committed(models_section(perf, model_plots, base), title, label)
    return lines, plots + model_plots


def compose(reports: Path) -> tuple[str, list[Path]]:
    """The summary's Markdown and the plots written for it.

    A run's files in the folder (junit/, perf/, env.json, failures-*.md) come first. Where the folder holds
    no JUnit results, or no perf data, the results the repository commits beside them take their place:
    the conformance verdicts of conformance/<gpu>/ and the baselines of baselines/, rendered by the same
    section functions and titled as committed. Beside a run's results, the committed ones are named.
    """
    junit = load_junit(reports / "junit")
    notes = failure_notes(reports)
    env, env_problem = read_env(reports / "env.json")
    perf_path, perf, perf_files = newest_perf(reports / "perf")
    plots = make_plots(perf, reports / "plots")
    model_plots = make_model_plots(perf, reports / "plots")
    baselines = load_baselines(reports / "baselines")
    verdicts = load_verdicts(reports / "conformance")
    committed_perf = [] if perf is not None else baselines
    committed_verdicts = [] if junit.files else verdicts
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    sha = (env or {}).get("git_sha") or ((perf or {}).get("env") or {}).get("git_sha") or "unknown"
    lines = ["# DyT report", "", f"Generated {now} from `{reports}` (git {str(sha)[:12]}).", ""]
    lines += source_note(bool(junit.files), perf is not None, bool(verdicts), bool(baselines))
    lines += tests_section(junit)
    if committed_verdicts:
        lines += verdict_sections(committed_verdicts, reports)
    else:
        lines += conformance_section(junit)
        lines += verdict_note(verdicts, reports)
    lines += failures_section(junit, notes)
    lines += env_section(env, env_problem)
    if committed_perf:
        for baseline in committed_perf:
            plot_dir = reports / "plots" / f"baseline-{baseline.path.stem}"
            section, written = baseline_sections(baseline, plot_dir, reports)
            lines += section
            plots += written
    else:
        lines += perf_section(perf_path, perf, perf_files, plots, reports)
        lines += models_section(perf, model_plots, reports)
        lines += baseline_note(perf, baselines, reports) if perf is not None else []
    return _cap("\n".join(lines) + "\n", MAX_SUMMARY_BYTES), plots + model_plots


def _cap(text: str, limit: int) -> str:
    """Cut at a line boundary so the summary stays under limit bytes (GitHub drops larger summaries)."""
    data = text.encode()
    if len(data) <= limit:
        return text
    note = "\n\n... (summary truncated to stay under 1 MiB; the full data is in the JUnit and perf files)\n"
    cut = data[: limit - len(note.encode()) - 16].decode(errors="ignore")
    return cut[: cut.rfind("\n")] + note


_HTML = """<!doctype html>
<html><head><meta charset="utf-8"><title>DyT report</title>
<style>
body {{ font-family: system-ui, sans-serif; max-width: 1400px; margin: 2em auto; padding: 0 1em; }}
table {{ border-collapse: collapse; font-size: 13px; }}
th, td {{ border: 1px solid #ccc; padding: 2px 6px; text-align: right; }}
th {{ background: #f3f3f3; }}
code, pre {{ background: #f6f8fa; }}
pre {{ padding: 6px; overflow-x: auto; }}
img {{ max-width: 100%; }}
</style></head><body>
{body}
</body></html>
"""


def render(reports: str | Path) -> Path:
    """Writes summary.md, summary.html and plots/ into the reports folder; returns summary.md's path.
    Each file is written whole or not at all (files.write_atomic): where the folder refuses a write (full
    disk, read-only) the OSError propagates and the summary of an earlier render is left as it was."""
    import markdown

    reports = Path(reports)
    reports.mkdir(parents=True, exist_ok=True)
    text, _ = compose(reports)
    md_path = reports / "summary.md"
    body = markdown.markdown(text, extensions=["tables", "fenced_code"])
    write_atomic(md_path, text)
    write_atomic(reports / "summary.html", _HTML.format(body=body))
    return md_path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--reports", default="reports", help="the reports folder (default reports)")


def main(args: argparse.Namespace) -> int:
    """`python -m dyt report`: 0 with summary.md's path printed; files.WRITE_FAILED (74) with one line where
    the folder cannot be written (full disk, read-only, no permission), the files already there untouched
    (the result files are only read)."""
    try:
        path = render(args.reports)
    except OSError as exc:
        print(write_error("report", args.reports, exc), file=sys.stderr)
        return WRITE_FAILED
    print(path)
    return 0
