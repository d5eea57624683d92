"""The report's Markdown sections, each a function from read data to a list of lines.

The contract: pure functions of dyt.service.report.read's data (JunitData, perf dicts, env dicts,
Baseline, CommittedVerdict) and of paths to link; they read no file and write none, and an empty input
gives an empty section or a line that says what is missing. Table cells are escaped to one line
(pipes, newlines). Which sections a page holds, and in what order, is dyt.service.report.render's.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from dyt.service.gate import gate
from dyt.service.records import record_key
from dyt.service.report.read import (
    MODE_ORDER,
    Baseline,
    CommittedVerdict,
    JunitData,
    SuiteCounts,
    Verdict,
    baseline_of,
    finite_float,
    measured_kernels,
    measured_models,
    model_cases,
    model_variants,
    provider_rank,
    providers_in,
    short_dtype,
    unreadable_perf,
)

MAX_FAILURES_SHOWN = 200


MAX_NOTES_BYTES = 64 * 1024  # per failures-<session>.md


def _cell(value: Any) -> str:
    """A table cell: pipes escaped, one line."""
    return str(value).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ").strip()


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return lines


def _fmt(value, spec: str, none: str = "-") -> str:
    num = finite_float(value)
    if num is None:
        return none if value in (None, "") else str(value)
    return format(num, spec)


def _clip(text: str, n: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 3] + "..."


def _fmt_err(value: float | None) -> str:
    if value is None:
        return "-"
    return "NaN/inf" if math.isinf(value) else f"{value:.1e}"


def link(path: Path, base: Path) -> str:
    """A Markdown link to path, relative to the summary's folder where it lies under it."""
    rel = path.relative_to(base).as_posix() if path.is_relative_to(base) else path.as_posix()
    return f"[`{rel}`]({rel})"


def tests_section(junit: JunitData) -> list[str]:
    out = ["## Tests", ""]
    if not junit.files:
        return out + ["no JUnit results (junit/*.xml not found)", ""]
    rows = []
    total = SuiteCounts()
    for (session, suite), c in sorted(junit.counts.items()):
        status = "FAIL" if c.failed or c.errors else ("pass" if c.passed else "skip")
        rows.append([session, suite, status, c.passed, c.failed, c.errors, c.skipped, f"{c.time_s:.1f}"])
        for name in ("passed", "failed", "errors", "skipped", "time_s"):
            setattr(total, name, getattr(total, name) + getattr(c, name))
    rows.append(
        ["**all**", "", "", total.passed, total.failed, total.errors, total.skipped, f"{total.time_s:.1f}"]
    )
    out += _table(["session", "suite", "status", "passed", "failed", "errors", "skipped", "time (s)"], rows)
    out.append("")
    for note in junit.unreadable:
        out.append(f"- unreadable JUnit file: {_cell(note)}")
    return out + [""]


# The seed pull request's bug classes, by the conformance check that guards against each.
BUG_CLASSES = {
    "test_more_than_65535_rows": "rows past grid axis 1 (65,535)",
    "test_nonfinite_alpha_with_padding": "NaN from padding with an infinite alpha",
    "test_float32_parameter_gradients_keep_their_precision": "float32 parameter grads rounded through x",
}


def _verdict_cell(v: Verdict) -> str:
    if v.failed:
        return f"fail {v.failed}/{v.passed + v.failed + v.skipped}"
    if v.passed:
        return "pass" if not v.skipped else f"pass ({v.skipped} skipped)"
    return "skipped"


def conformance_section(junit: JunitData) -> list[str]:
    """Implementation x check (tests/test_conformance.py, `--impl`): pass / fail / skipped, the seed's bug
    classes marked; dyt's own suites apply to dyt alone; then each check's first failure, with the command
    that reproduces it."""
    if not junit.conformance:
        return []
    impls = sorted({impl for impl, _ in junit.conformance}, key=lambda i: (i != "dyt", i))
    checks = sorted({check for _, check in junit.conformance}, key=lambda c: (c not in BUG_CLASSES, c))
    out = ["## Conformance", "",
           "The contract checks of tests/test_conformance.py on each implementation (`nox -s tests -- "
           "--impl NAME`, `nox -s gpu_tests -- --impl NAME`); the seed pull request's bug classes first.",
           ""]  # fmt: skip
    header = ["check", *impls]
    rows = []
    for check in checks:
        label = f"{check} ({BUG_CLASSES[check]})" if check in BUG_CLASSES else check
        cells = [_verdict_cell(junit.conformance[(i, check)]) if (i, check) in junit.conformance else "-"
                 for i in impls]  # fmt: skip
        rows.append([label, *cells])
    own = []
    for i in impls:
        c = junit.own_suites.get(i)
        if i != "dyt":
            own.append("n/a (dyt's internals)")
        elif c is None or not (c.passed or c.failed):
            own.append("not run here")
        else:
            own.append(f"{c.passed} passed, {c.failed} failed, {c.skipped} skipped")
    rows.append(["dyt's own suites (plans, tiling paths, mutants, tooling)", *own])
    out += _table(header, rows)
    firsts = [(i, c, v.first_failure) for (i, c), v in sorted(junit.conformance.items()) if v.first_failure]
    if firsts:
        out += ["", "First failure of each failing check:", ""]
    for impl, check, f in firsts:
        out += [f"- **{impl}** `{check}`: {_cell(f.message) or f.kind}", f"  `{f.reproduce}`"]
    return out + [""]


def failures_section(junit: JunitData, notes: list[tuple[Path, str]]) -> list[str]:
    """dyt's failures (another implementation's are its conformance verdict, tabulated above), and the
    failures files of sessions for dyt."""
    out = ["## Failures", ""]
    ours = [f for f in junit.failures if f.impl == "dyt"]
    notes = [(path, text) for path, text in notes if path.stem.count("-") == 1]  # failures-<session>.md
    if not ours and not notes:
        return out + ["no failures recorded", ""]
    for f in ours[:MAX_FAILURES_SHOWN]:
        extra = ", ".join(f"{k} {f.properties[k]}" for k in ("device", "worker", "seed") if k in f.properties)
        out.append(f"### {f.kind}: `{f.nodeid}`")
        out.append("")
        out.append(f"session {f.session}, suite {f.suite}" + (f", {extra}" if extra else ""))
        out.append("")
        if f.message:
            out.append(f"> {_cell(f.message)}")
            out.append("")
        out += ["Reproduce:", "", "```", f.reproduce, "```", ""]
        if f.excerpt:
            out += [
                "<details><summary>traceback (tail)</summary>",
                "",
                "```",
                f.excerpt,
                "```",
                "",
                "</details>",
                "",
            ]
    hidden = len(ours) - MAX_FAILURES_SHOWN
    if hidden > 0:
        out += [f"... and {hidden} more failures (see the JUnit files)", ""]
    for path, text in notes:
        out += [f"### From {path.name}", ""]
        body = text if len(text) <= MAX_NOTES_BYTES else text[:MAX_NOTES_BYTES] + "\n\n... (truncated)"
        out += [re.sub(r"^(#{1,4}) ", r"###\1 ", line) for line in body.splitlines()]
        out.append("")
    return out


def env_section(env: dict | None, problem: str = "") -> list[str]:
    out = ["## Environment", ""]
    if problem:
        return out + [f"env.json unreadable ({problem}): the environment of this run is unknown", ""]
    if not env:
        return out + ["no environment manifest (env.json not found)", ""]
    rows = []
    for key in sorted(env):
        value = env[key]
        rows.append([key, json.dumps(value, sort_keys=True) if isinstance(value, (dict, list)) else value])
    return out + _table(["field", "value"], rows) + [""]


def perf_section(path: Path | None, perf: dict | None, others: list[Path], plots: list[Path], base: Path):
    out = ["## Performance", ""]
    if perf is None:
        if others:
            return out + ["no readable perf data; unreadable: " + "; ".join(unreadable_perf(others)), ""]
        return out + ["no perf data (perf/*.json not found)", ""]
    env = perf.get("env") or {}
    records = perf.get("records") or []
    ceiling = finite_float(perf.get("ceiling_gbps"))
    out.append(
        f"From `{path.name}`: {env.get('gpu_name') or 'unknown GPU'}, git {str(env.get('git_sha'))[:12]}, "
        f"torch {env.get('torch')}, triton {env.get('triton')}, {env.get('timestamp_utc') or ''}."
    )
    out.append("")
    stop = perf.get("incomplete")
    if isinstance(stop, dict):
        done = f"after {stop.get('records')} of {stop.get('of')} rows"
        out += [f"**Incomplete run**: stopped by {stop.get('stopped_by')} {done} (a time limit, most often); "
                "below are the rows it finished.", ""]  # fmt: skip
    out.append(f"Copy ceiling (device-to-device, bytes read + written): **{_fmt(ceiling, '.0f')} GB/s**.")
    copies = [c for c in perf.get("copies_at_traffic") or [] if finite_float(c.get("gbps")) and ceiling]
    if copies:
        out.append(
            "Copies moving a bandwidth shape's bytes, as a fraction of the ceiling (what one kernel of that "
            "length reaches): " + ", ".join(
                f"{c['bytes_moved'] / 1e6:.0f} MB {_fmt(c['gbps'] / ceiling, '.3f')}"
                + (f" (graph {_fmt(c['graph_gbps'] / ceiling, '.3f')})"
                   if finite_float(c.get("graph_gbps")) else "")
                for c in copies
            ) + "."
        )  # fmt: skip
    cold = perf.get("cold_start_s") or {}
    if cold:
        out.append(
            "First call (cold): " + ", ".join(f"{k} {_fmt(v, '.2f')} s" for k, v in cold.items()) + "."
        )
    if len(others) > 1:
        out.append(f"({len(others)} perf files in perf/; the newest is shown.)")
        out += [f"Unreadable perf file {problem}." for problem in unreadable_perf(others)]
    out.append("")
    if not records:
        return out + ["the perf file holds no records", ""]
    providers = providers_in(records)
    by_key: dict[tuple, dict[str, dict]] = {}
    sets: dict[tuple, str] = {}
    for rec in records:
        key = record_key(rec)
        by_key.setdefault(key, {})[rec["provider"]] = rec
        sets.setdefault(key, rec.get("shape_set", ""))
    header = ["set", "shape", "x", "params", "mode"]
    for p in providers:
        header += [f"{p} ms", f"{p} GB/s"]
    header += ["dyt / ceiling", "dyt speedup vs best peer", "dyt rel err"]
    rows = []
    set_order = {"bandwidth": 0, "small": 1, "model": 2, "mixed": 3}
    ordered = sorted(
        by_key,
        key=lambda k: (set_order.get(sets[k], 9), k[2], k[3], MODE_ORDER.get(k[4], 9), k[1], k[0]),
    )
    for key in ordered:
        m, n, dtype, pdt, mode = key
        row: list[Any] = [sets[key], f"{m}x{n}", short_dtype(dtype), short_dtype(pdt), mode]
        for p in providers:
            rec = by_key[key].get(p)
            if rec is None:
                row += ["", ""]
            elif rec.get("error"):
                row += [f"error: {_clip(rec['error'], 48)}", "-"]
            else:
                row += [_fmt(rec.get("median_ms"), ".4g"), _fmt(rec.get("gbps"), ".0f")]
        ours = by_key[key].get("dyt") or {}
        row += [
            _fmt(ours.get("ratio_to_ceiling"), ".3f"),
            _fmt(ours.get("speedup_vs_best_peer"), ".2f")
            + ("x" if finite_float(ours.get("speedup_vs_best_peer")) else ""),
            _fmt((ours.get("err") or {}).get("max"), ".1e"),
        ]
        rows.append(row)
    out += _table(header, rows) + [""]
    out += accuracy_table(records)
    out += errors_list(records)
    if plots:
        out += ["### Plots", ""]
        for plot in plots:
            rel = plot.relative_to(base).as_posix() if plot.is_relative_to(base) else plot.as_posix()
            out += [f"![{plot.stem}]({rel})", ""]
    return out


def accuracy_table(records: list[dict]) -> list[str]:
    """Worst relative L2 error against float64 per provider and dtypes, over every shape."""
    names = ("y", "dx", "dalpha", "dgamma", "dbeta")
    worst: dict[tuple, dict[str, float]] = {}
    for rec in records:
        errs = rec.get("err") or {}
        slot = worst.setdefault((rec["provider"], rec["dtype"], rec.get("param_dtype") or rec["dtype"]), {})
        for name in names:
            value = errs.get(name)
            if value in ("nan", "inf", "-inf") or (isinstance(value, float) and math.isnan(value)):
                slot[name] = math.inf
            elif finite_float(value) is not None:
                slot[name] = max(slot.get(name, 0.0), float(value))
    rows = []
    for (provider, dtype, pdt), slot in sorted(
        worst.items(), key=lambda kv: (provider_rank(kv[0][0]), kv[0])
    ):
        if slot:
            dtypes = [short_dtype(dtype), short_dtype(pdt)]
            rows.append([provider, *dtypes] + [_fmt_err(slot.get(n)) for n in names])
    if not rows:
        return []
    header = ["provider", "x", "params"] + [f"max rel L2 {n}" for n in names]
    return (
        ["### Accuracy (relative L2 error against float64, worst over shapes)", ""]
        + _table(header, rows)
        + [""]
    )


def errors_list(records: list[dict]) -> list[str]:
    """Each distinct failure message once, with the rows it hit: the table only has room for a clip."""
    seen: dict[tuple[str, str], list[str]] = {}
    for rec in records:
        if rec.get("error"):
            seen.setdefault((rec["provider"], str(rec["error"])), []).append(
                f"{rec['M']}x{rec['N']} {short_dtype(rec['dtype'])} {rec['mode']}"
            )
    if not seen:
        return []
    out = ["### Failed rows", ""]
    for (provider, error), rows in sorted(seen.items(), key=lambda kv: (provider_rank(kv[0][0]), kv[0])):
        sample = ", ".join(rows[:6]) + (f", ... ({len(rows)} rows)" if len(rows) > 6 else "")
        quoted = error.replace("`", "'")
        out.append(f"- **{provider}**: `{quoted}` ({sample})")
    return out + [""]


def models_section(perf: dict | None, plots: list[Path], base: Path) -> list[str]:
    """The model benchmark's tables: step time per variant per model/batch/mode, and dyt's speedups."""
    rows = (perf or {}).get("model_records") or []
    if not rows:
        return []
    out = ["## Model benchmark", ""]
    config = (perf or {}).get("model_config") or {}
    out += [f"Rows of {measured_models(perf or {}).label()}.", ""]
    out.append(
        f"Training step (zero_grad, forward, backward, AdamW under {config.get('autocast', 'bfloat16')} "
        f"autocast) and inference (inference_mode): median ms per step over {config.get('rounds')} "
        f"interleaved rounds of {config.get('steps')} steps ({config.get('timer') or 'timer unknown'}); "
        "host issue time per step in parentheses."
    )
    out.append("")
    stop = (perf or {}).get("model_incomplete")
    if isinstance(stop, dict):
        out += [f"**Incomplete run**: stopped by {stop.get('stopped_by')} after {stop.get('rows')} of "
                f"{stop.get('of')} rows; below are the rows it finished.", ""]  # fmt: skip
    variants = model_variants(rows)
    by: dict[tuple, dict[str, dict]] = {}
    for r in rows:
        by.setdefault((r.get("model"), r.get("batch"), r.get("mode"), bool(r.get("compiled"))), {})[
            r["variant"]
        ] = r
    table = []
    for case in model_cases(rows):
        model, batch, mode, compiled = case
        cells: list[Any] = [model, batch, mode + (" (compiled)" if compiled else "")]
        for v in variants:
            r = by[case].get(v)
            if r is None:
                cells.append("")
            elif r.get("skipped"):
                cells.append(f"skipped: {_clip(r['skipped'], 40)}")
            elif r.get("error"):
                cells.append(f"error: {_clip(r['error'], 40)}")
            elif finite_float(r.get("median_ms")) is None:
                cells.append("-")
            else:
                cells.append(f"{r['median_ms']:.2f} ({_fmt(r.get('host_ms'), '.2f')})")
        table.append(cells)
    out += _table(["model", "batch", "mode", *[f"{v} ms" for v in variants]], table) + [""]

    speed = []
    others = [v for v in variants if not v.endswith("dyt")]
    for case in model_cases(rows):
        for v, r in by[case].items():
            ratios = r.get("speedup_vs") or {}
            if not ratios:
                continue
            cells = [case[0], case[1], case[2], v]
            for o in others:
                s = ratios.get(o)
                cells.append(
                    f"{s['median']:.2f}x ({s['min']:.2f}-{s['max']:.2f})"
                    if s and finite_float(s.get("median"))
                    else ""
                )
            speed.append(cells)
    if speed:
        out += ["### dyt's speedup over each variant", "",
                "Per round, the variant's time over dyt's; the median of rounds and, in parentheses, the "
                "range. Above 1: dyt is faster.", ""]  # fmt: skip
        out += _table(["model", "batch", "mode", "dyt variant", *[f"over {o}" for o in others]], speed) + [""]
    mem = [r for r in rows if finite_float(r.get("peak_mem_mb")) is not None]
    if mem:
        out += ["Peak memory of one step above what is held between steps (MB): " + "; ".join(
            f"{r['model']}/{r['batch']} {r['mode']} {r['variant']} {r['peak_mem_mb']:.0f}" for r in mem
            if r["variant"] in ("norm", "dyt")) + ".", ""]  # fmt: skip
    for plot in plots:
        rel = plot.relative_to(base).as_posix() if plot.is_relative_to(base) else plot.as_posix()
        out += [f"![{plot.stem}]({rel})", ""]
    return out


def committed(section: list[str], title: str, label: str) -> list[str]:
    """A section rendered by its own function for committed data: its heading extended by title, and label
    as the first paragraph under it; an empty section stays empty."""
    if not section:
        return []
    head, rest = section[0], section[1:]
    return [f"{head}: {title}", "", label, *(rest if rest[:1] == [""] else ["", *rest])]


def baseline_note(perf: dict, baselines: list[Baseline], base: Path) -> list[str]:
    """Beside a fresh run: the committed baseline of its GPU model, named and linked with where it was
    measured, and the regression gate's verdict of the run against it; which baselines exist otherwise."""
    if not baselines:
        return []
    out = ["## Committed baseline", ""]
    gpu = measured_kernels(perf).gpu
    ours = baseline_of(baselines, gpu)
    if ours is None:
        names = ", ".join(link(b.path, base) for b in baselines)
        return out + [f"No committed baseline of {gpu}; the repository holds {names}.", ""]
    out += [
        f"The committed baseline of {gpu}, {link(ours.path, base)}: kernel rows of "
        f"{measured_kernels(ours.perf).label()}"
        + (f"; model rows of {measured_models(ours.perf).label()}" if ours.perf.get("model_records") else "")
        + ".",
        "",
        "This run against it (`python -m dyt gate`, default margins):",
        "",
        "```",
        *gate(perf, ours.perf).lines,
        "```",
        "",
    ]
    return out


def verdict_sections(verdicts: list[CommittedVerdict], base: Path) -> list[str]:
    """The committed conformance verdicts (no JUnit results in this folder): each one's conformance table,
    titled with its GPU and labelled with its commit and date."""
    out = []
    for v in verdicts:
        label = (f"The committed verdict {link(v.page(), base)}, from its JUnit files (no test run in this "
                 f"folder): {v.measured.label()}.")  # fmt: skip
        out += committed(conformance_section(v.junit), f"committed verdict, {v.measured.gpu}", label)
    return out


def verdict_note(verdicts: list[CommittedVerdict], base: Path) -> list[str]:
    """Beside a fresh run's conformance results: which committed verdicts exist, linked and labelled."""
    if not verdicts:
        return []
    items = [f"- {link(v.page(), base)}: {v.measured.label()}" for v in verdicts]
    return ["Committed conformance verdicts to compare with:", "", *items, ""]


def source_note(run_tests: bool, run_perf: bool, verdicts: bool, baselines: bool) -> list[str]:
    """The paragraph that says, for each kind of result the folder holds no run of (JUnit, perf), whether
    the sections show the repository's committed results instead or there are none; none when the
    folder's own run fills every section."""
    out = []
    if not run_tests:
        out.append("No JUnit results in this folder: the conformance section shows the committed verdicts "
                   "(conformance/<gpu>/junit/)." if verdicts else "No JUnit results in this folder and no "
                   "committed conformance verdicts (conformance/<gpu>/junit/).")  # fmt: skip
    if not run_perf:
        out.append("No perf data in this folder: the performance and model sections show the committed "
                   "baselines (baselines/<gpu>.json)." if baselines else "No perf data in this folder and "
                   "no committed baselines (baselines/<gpu>.json).")  # fmt: skip
    if (verdicts and not run_tests) or (baselines and not run_perf):
        out.append("Each committed result is labelled with the GPU, commit and date it was measured.")
    return [" ".join(out), ""] if out else []
