"""The published summary: turns a reports/ folder into summary.md, summary.html and PNG plots.

Works from the files alone (no GPU, no torch, no triton) and renders whatever is there, saying what is
missing, so a crashed or partial run still produces a page a person can read first. Where the folder holds
no run of its own, it renders the results the repository commits in the folder's baselines/ and
conformance/ subfolders, labelled with the GPU, commit and date they were measured.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import re
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dyt.service.bench import BANDWIDTH_ELEMENTS, SMALL_SHAPES
from dyt.service.files import WRITE_FAILED, write_atomic, write_error
from dyt.service.gate import gate
from dyt.service.records import baseline_path, load_perf, record_key

MAX_SUMMARY_BYTES = 1024 * 1024  # GitHub's job summary limit
MAX_FAILURES_SHOWN = 200
MAX_NOTES_BYTES = 64 * 1024  # per failures-<session>.md
PROVIDER_ORDER = ("dyt", "eager", "compile", "liger")
MODE_ORDER = {"fwd": 0, "fwd_nograd": 1, "bwd": 2, "fwdbwd": 3}
SHORT_DTYPE = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


# ----------------------------------------------------------------------------------------------- JUnit


@dataclass
class Failure:
    session: str
    suite: str
    nodeid: str
    kind: str  # failure or error
    message: str
    excerpt: str
    reproduce: str
    properties: dict[str, str]
    impl: str = "dyt"  # the implementation under test (--impl)


@dataclass
class SuiteCounts:
    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0
    time_s: float = 0.0


@dataclass
class Verdict:
    """One conformance check of one implementation over its parameter cases: counts, the first failure."""

    passed: int = 0
    failed: int = 0
    skipped: int = 0
    first_failure: Failure | None = None
    skip_reason: str = ""


@dataclass
class JunitData:
    counts: dict[tuple[str, str], SuiteCounts] = field(default_factory=dict)  # (session, suite)
    failures: list[Failure] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)
    # (implementation, check): the conformance suite's cases (tests/test_conformance.py, --impl), and per
    # implementation the other suites' counts ("dyt's suites": not applicable to other implementations)
    conformance: dict[tuple[str, str], Verdict] = field(default_factory=dict)
    own_suites: dict[str, SuiteCounts] = field(default_factory=dict)


def suite_of(classname: str, name: str = "") -> str:
    """Marker of a test: test_<suite>.py's <suite>, from the JUnit classname (or name, for collection)."""
    for part in re.split(r"[./]", classname or name or ""):
        if part.startswith("test_") and len(part) > 5:
            return part[5:].removesuffix(".py")
    return classname or "(unknown)"


def nodeid_of(classname: str, name: str) -> str:
    """pytest node id from JUnit's dotted classname (tests.test_x.TestC, t -> tests/test_x.py::TestC::t)."""
    parts = (classname or "").split(".")
    for i, part in enumerate(parts):
        if part.startswith("test_"):
            path = "/".join(parts[: i + 1]) + ".py"
            return "::".join([path, *parts[i + 1 :], name])
    return f"{classname}::{name}" if classname else name


def default_reproduce(session: str, nodeid: str) -> str:
    """The command that reruns one test when the run did not record its own."""
    if session in ("tests", "gpu_tests"):
        return f"nox -s {session} -- '{nodeid}'"
    return f"python -m pytest '{nodeid}'"


def _properties(case) -> dict[str, str]:
    props: dict[str, str] = {}
    for prop in case._elem.iter("property"):
        if prop.get("name"):
            props[prop.get("name")] = prop.get("value", "")
    return props


def _suite_impl(suite) -> str:
    """The implementation a JUnit test suite ran for (its global property impl; dyt where absent)."""
    for prop in suite._elem.iter("property"):
        if prop.get("name") == "impl":
            return prop.get("value") or "dyt"
    return "dyt"


def _seconds(case) -> float:
    """A test case's time attribute in seconds; 0 where it is missing or not a number."""
    try:
        return float(case.time or 0.0)
    except (TypeError, ValueError):
        return 0.0


def _excerpt(text: str | None, lines: int = 15, chars: int = 2000) -> str:
    tail = "\n".join((text or "").strip().splitlines()[-lines:])
    return tail[-chars:]


def load_junit(junit_dir: Path) -> JunitData:
    """Counts per (session, suite) and every failure, from junit/*.xml; unreadable files are listed."""
    from junitparser import Error, JUnitXml, Skipped, TestSuite
    from junitparser import Failure as JFailure

    data = JunitData()
    for path in sorted(junit_dir.glob("*.xml")):
        data.files.append(path)
        session = path.stem
        try:
            xml = JUnitXml.fromfile(str(path))
            suites = [xml] if isinstance(xml, TestSuite) else list(xml)
            cases = [(case, _suite_impl(suite)) for suite in suites for case in suite]
        except Exception as exc:  # noqa: BLE001 - a half-written file must not hide the others
            data.unreadable.append(f"{path.name}: {type(exc).__name__}: {exc}")
            continue
        for case, suite_impl in cases:
            try:  # everything read from the case first: a corrupt one is noted, the others still count
                props = _properties(case)
                classname, name, results = case.classname or "", case.name or "", list(case.result)
                seconds = _seconds(case)
            except Exception as exc:  # noqa: BLE001
                data.unreadable.append(f"{path.name}: a test case: {type(exc).__name__}: {exc}")
                continue
            # The shipped checks name their check (dyt.conformance's plugin), wherever they were collected.
            suite = "conformance" if "check" in props else suite_of(classname, name)
            counts = data.counts.setdefault((session, suite), SuiteCounts())
            counts.time_s += seconds
            bad = next((r for r in results if isinstance(r, (JFailure, Error))), None)
            impl = props.get("impl", suite_impl)
            verdict = None
            if suite == "conformance":
                verdict = data.conformance.setdefault((impl, name.split("[")[0]), Verdict())
            own = data.own_suites.setdefault(impl, SuiteCounts()) if verdict is None else None
            if bad is None:
                skip = next((r for r in results if isinstance(r, Skipped)), None)
                if skip is not None:
                    counts.skipped += 1
                    if verdict is not None:
                        verdict.skipped += 1
                        verdict.skip_reason = verdict.skip_reason or (skip.message or "").strip()[:200]
                    else:
                        own.skipped += 1
                else:
                    counts.passed += 1
                    if verdict is not None:
                        verdict.passed += 1
                    else:
                        own.passed += 1
                continue
            kind = "error" if isinstance(bad, Error) else "failure"
            if kind == "error":
                counts.errors += 1
            else:
                counts.failed += 1
            nodeid = nodeid_of(classname, name)
            failure = Failure(
                session=session,
                suite=suite,
                nodeid=nodeid,
                kind=kind,
                message=(bad.message or "").strip().splitlines()[0][:300] if bad.message else "",
                excerpt=_excerpt(bad.text),
                reproduce=props.get("reproduce") or default_reproduce(session, nodeid),
                properties=props,
                impl=impl,
            )
            data.failures.append(failure)
            if verdict is not None:
                verdict.failed += 1
                verdict.first_failure = verdict.first_failure or failure
            else:
                own.failed += 1
    return data


# -------------------------------------------------------------------------------------------- perf data


def _read_env(path: Path) -> tuple[dict | None, str]:
    """env.json, and what is wrong with it where it exists but cannot be used (empty, truncated, not an
    object); (None, "") where there is none."""
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return None, ""
    except OSError as exc:
        return None, f"cannot read: {exc.strerror or exc}"
    if not text.strip():
        return None, "empty file"
    try:
        env = json.loads(text)
    except ValueError as exc:
        return None, f"truncated or corrupt JSON: {exc}"
    return (env, "") if isinstance(env, dict) else (None, "not a JSON object")


def _timestamp(perf: dict, path: Path) -> float:
    stamp = (perf.get("env") or {}).get("timestamp_utc")
    try:
        return datetime.datetime.fromisoformat(stamp).timestamp()
    except (TypeError, ValueError):
        return path.stat().st_mtime


def _perf_or_none(path: Path) -> dict | None:
    try:
        return load_perf(path)
    except (OSError, ValueError):
        return None


def unreadable_perf(candidates: list[Path]) -> list[str]:
    """Why each perf file that is not a whole perf report cannot be shown (records.load_perf's words)."""
    problems = []
    for path in candidates:
        try:
            load_perf(path)
        except (OSError, ValueError) as exc:
            problems.append(f"{path.parent.name}/{path.name}: {str(exc).removeprefix(str(path) + ': ')}")
    return problems


def newest_perf(perf_dir: Path) -> tuple[Path | None, dict | None, list[Path]]:
    """The newest perf JSON that is a whole perf report (records.load_perf: a truncated or corrupt one is
    passed over), by its env timestamp, else mtime; and all candidates."""
    candidates = sorted(perf_dir.glob("*.json"))
    loaded = [(p, d) for p in candidates if (d := _perf_or_none(p)) is not None]
    if not loaded:
        return None, None, candidates
    path, data = max(loaded, key=lambda pd: _timestamp(pd[1], pd[0]))
    return path, data, candidates


@dataclass
class Measured:
    """Where a set of results was measured: the GPU model, the commit and the UTC date (as the files say)."""

    gpu: str = "unknown GPU"
    commit: str = "unknown"
    date: str = "date unknown"

    def label(self) -> str:
        """'NVIDIA H200, git 6b69605, measured 2026-12-01T10:19:21+00:00': for the Markdown."""
        return f"{self.gpu}, git {self.commit[:12]}, measured {self.date}"

    def short(self) -> str:
        """'NVIDIA H200, git 6b69605, 2026-12-01': for plot titles."""
        return f"{self.gpu}, git {self.commit[:12]}, {self.date[:10]}"


def measured_kernels(perf: dict) -> Measured:
    """The kernel rows' GPU, commit and time, from the perf JSON's env block."""
    env = perf.get("env") or {}
    return Measured(
        gpu=env.get("gpu_name") or "unknown GPU",
        commit=str(env.get("git_sha") or "unknown"),
        date=env.get("timestamp_utc") or "date unknown",
    )


def measured_models(perf: dict) -> Measured:
    """The model rows' GPU, commit and date: model_config's git_sha and timestamp_utc, else the env
    block's (the model benchmark writes its own when its rows join another run's file)."""
    kernels = measured_kernels(perf)
    config = perf.get("model_config") or {}
    return Measured(
        gpu=kernels.gpu,
        commit=str(config.get("git_sha") or kernels.commit),
        date=config.get("timestamp_utc") or kernels.date,
    )


def _num(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def _ok(rec: dict) -> bool:
    return not rec.get("error") and _num(rec.get("median_ms")) is not None


def _is_bandwidth(rec: dict) -> bool:
    if "shape_set" in rec:
        return rec["shape_set"] == "bandwidth"
    return rec["M"] == BANDWIDTH_ELEMENTS // rec["N"]


def _is_small(rec: dict) -> bool:
    if "shape_set" in rec:
        return rec["shape_set"] == "small"
    return (rec["M"], rec["N"]) in SMALL_SHAPES


def providers_in(records: list[dict]) -> list[str]:
    seen = {r["provider"] for r in records}
    return [p for p in PROVIDER_ORDER if p in seen] + sorted(seen - set(PROVIDER_ORDER))


# ------------------------------------------------------------------------------------------------ plots


def _save(fig, path: Path) -> None:
    """A figure as PNG into path, whole or not at all (files.write_atomic)."""
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    write_atomic(path, buf.getvalue())


def make_plots(perf: dict | None, plot_dir: Path) -> list[Path]:
    """Bandwidth against width (one per dtype x mode, ceiling drawn) and small-shape latency bars."""
    if not perf or not perf.get("records"):
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plot_dir.mkdir(parents=True, exist_ok=True)
    records = perf["records"]
    providers = providers_in(records)
    ceiling = _num(perf.get("ceiling_gbps"))
    source = measured_kernels(perf).short()
    written: list[Path] = []

    groups: dict[tuple, list[dict]] = {}
    for rec in records:
        if _is_bandwidth(rec) and _ok(rec) and _num(rec.get("gbps")) is not None:
            groups.setdefault((rec["dtype"], rec.get("param_dtype") or rec["dtype"], rec["mode"]), []).append(
                rec
            )
    for (dtype, pdt, mode), recs in sorted(groups.items()):
        fig, ax = plt.subplots(figsize=(7, 4.2))
        for provider in providers:
            pts = sorted((r["N"], r["gbps"]) for r in recs if r["provider"] == provider)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=provider)
        if ceiling:
            ax.axhline(
                ceiling, color="black", linestyle="--", linewidth=1, label=f"copy ceiling {ceiling:.0f}"
            )
        ax.set_xscale("log", base=2)
        widths = sorted({r["N"] for r in recs})
        ax.set_xticks(widths, [str(w) for w in widths], rotation=45)
        ax.set_xlabel("width C (rows x C = 2^26 elements)")
        ax.set_ylabel("GB/s (minimal bytes)")
        ax.set_ylim(bottom=0)
        params = "" if pdt == dtype else f", params {_short(pdt)}"
        ax.set_title(f"{source}: {_short(dtype)}{params} {mode}")
        ax.legend(fontsize=8)
        ax.grid(True, alpha=0.3)
        fig.tight_layout()
        path = plot_dir / f"bandwidth-{_short(dtype)}{'' if pdt == dtype else '-p' + _short(pdt)}-{mode}.png"
        _save(fig, path)
        plt.close(fig)
        written.append(path)

    small: dict[tuple, list[dict]] = {}
    for rec in records:
        if _is_small(rec) and _ok(rec):
            small.setdefault((rec["dtype"], rec.get("param_dtype") or rec["dtype"]), []).append(rec)
    for (dtype, pdt), recs in sorted(small.items()):
        modes = sorted({r["mode"] for r in recs}, key=lambda m: (MODE_ORDER.get(m, 9), m))
        shapes = sorted({(r["M"], r["N"]) for r in recs}, key=lambda s: s[0] * s[1])
        fig, axes = plt.subplots(1, len(modes), figsize=(4.5 * len(modes), 4), squeeze=False)
        width = 0.8 / max(1, len(providers))
        for ax, mode in zip(axes[0], modes, strict=True):
            for i, provider in enumerate(providers):
                by_shape = {
                    (r["M"], r["N"]): r["median_ms"]
                    for r in recs
                    if r["provider"] == provider and r["mode"] == mode
                }
                xs = [j + i * width for j, s in enumerate(shapes) if s in by_shape]
                ys = [by_shape[s] * 1e3 for s in shapes if s in by_shape]
                if xs:
                    ax.bar(xs, ys, width=width, label=provider)
            ax.set_xticks([j + 0.4 - width / 2 for j in range(len(shapes))], [f"{m}x{n}" for m, n in shapes])
            ax.tick_params(axis="x", labelrotation=30)
            ax.set_ylabel("median latency (us)")
            ax.set_title(f"{_short(dtype)} {mode}")
            ax.grid(True, axis="y", alpha=0.3)
        axes[0][0].legend(fontsize=8)
        fig.suptitle(source)
        fig.tight_layout()
        path = plot_dir / f"small-latency-{_short(dtype)}{'' if pdt == dtype else '-p' + _short(pdt)}.png"
        _save(fig, path)
        plt.close(fig)
        written.append(path)
    return written


MODEL_VARIANT_ORDER = (
    "norm", "eager", "dyt", "dyt_autocast", "packed_dyt", "liger", "compile_eager", "compile_dyt",
    "compile_dyt_autocast", "compile_packed_dyt", "graphs_eager", "graphs_dyt", "graphs_dyt_autocast",
    "graphs_packed_dyt",
)  # fmt: skip


def _model_variants(rows: list[dict]) -> list[str]:
    seen = {r.get("variant") for r in rows}
    return [v for v in MODEL_VARIANT_ORDER if v in seen] + sorted(seen - set(MODEL_VARIANT_ORDER) - {None})


def _model_cases(rows: list[dict]) -> list[tuple]:
    """(model, batch, mode, compiled) in the order the run measured them."""
    cases: list[tuple] = []
    for r in rows:
        case = (r.get("model"), r.get("batch"), r.get("mode"), bool(r.get("compiled")))
        if case not in cases:
            cases.append(case)
    return cases


def make_model_plots(perf: dict | None, plot_dir: Path) -> list[Path]:
    """Step time per variant per model/batch (one panel per mode) and dyt's speedup over each other
    variant (median of rounds, whiskers from the slowest to the fastest round)."""
    rows = [r for r in (perf or {}).get("model_records") or [] if _num(r.get("median_ms")) is not None]
    if not rows:
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plot_dir.mkdir(parents=True, exist_ok=True)
    source = measured_models(perf).short()
    variants = _model_variants(rows)
    modes = [m for m in ("train", "infer") if any(r["mode"] == m for r in rows)]
    written = []
    fig, axes = plt.subplots(len(modes), 1, figsize=(12, 4.2 * len(modes)), squeeze=False)
    for ax, mode in zip(axes[:, 0], modes, strict=True):
        cases = [c for c in _model_cases(rows) if c[2] == mode]
        width = 0.8 / max(1, len(variants))
        for i, variant in enumerate(variants):
            by_case = {
                (r["model"], r["batch"], r["mode"], bool(r.get("compiled"))): r["median_ms"]
                for r in rows
                if r["variant"] == variant and r["mode"] == mode
            }
            xs = [j + i * width for j, c in enumerate(cases) if c in by_case]
            if xs:
                ax.bar(xs, [by_case[c] for c in cases if c in by_case], width=width, label=variant)
        labels = [f"{m}/{b}" + (" (compiled)" if comp else "") for m, b, _, comp in cases]
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(cases))], labels, rotation=30, ha="right")
        ax.set_ylabel(f"{mode} step, median ms")
        ax.set_title(f"{source}: {mode} (bf16 autocast)")
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=8, ncol=3)
    fig.tight_layout()
    path = plot_dir / "models-step-time.png"
    _save(fig, path)
    plt.close(fig)
    written.append(path)

    pairs = [
        (r, other, s)
        for r in rows
        for other, s in (r.get("speedup_vs") or {}).items()
        if _num(s.get("median"))
    ]
    if pairs:
        others = [v for v in variants if any(o == v for _, o, _ in pairs)]
        keys = []
        for r, _, _ in pairs:
            key = (r["model"], r["batch"], r["mode"], r["variant"])
            if key not in keys:
                keys.append(key)
        fig, ax = plt.subplots(figsize=(max(12, 0.2 * len(keys)), 5))  # a readable label per group
        width = 0.8 / max(1, len(others))
        for i, other in enumerate(others):
            pts = [
                (keys.index((r["model"], r["batch"], r["mode"], r["variant"])), s)
                for r, o, s in pairs
                if o == other
            ]
            xs = [k + i * width for k, _ in pts]
            med = [s["median"] for _, s in pts]
            err = [[s["median"] - s["min"] for _, s in pts], [s["max"] - s["median"] for _, s in pts]]
            ax.bar(xs, med, width=width, yerr=err, capsize=2, label=f"over {other}")
        ax.axhline(1.0, color="black", linewidth=1, linestyle="--")
        names = [f"{m}/{b} {mode} {v}" for m, b, mode, v in keys]
        ax.set_xticks([k + 0.4 - width / 2 for k in range(len(keys))], names, rotation=90, fontsize=7)
        ax.set_ylabel("dyt speedup (median of rounds)")
        ax.set_title(f"{source}: dyt's speedup over each variant (above 1: dyt faster; whiskers: rounds)")
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = plot_dir / "models-speedup.png"
        _save(fig, path)
        plt.close(fig)
        written.append(path)
    return written


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
    variants = _model_variants(rows)
    by: dict[tuple, dict[str, dict]] = {}
    for r in rows:
        by.setdefault((r.get("model"), r.get("batch"), r.get("mode"), bool(r.get("compiled"))), {})[
            r["variant"]
        ] = r
    table = []
    for case in _model_cases(rows):
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
            elif _num(r.get("median_ms")) is None:
                cells.append("-")
            else:
                cells.append(f"{r['median_ms']:.2f} ({_fmt(r.get('host_ms'), '.2f')})")
        table.append(cells)
    out += _table(["model", "batch", "mode", *[f"{v} ms" for v in variants]], table) + [""]

    speed = []
    others = [v for v in variants if not v.endswith("dyt")]
    for case in _model_cases(rows):
        for v, r in by[case].items():
            ratios = r.get("speedup_vs") or {}
            if not ratios:
                continue
            cells = [case[0], case[1], case[2], v]
            for o in others:
                s = ratios.get(o)
                cells.append(
                    f"{s['median']:.2f}x ({s['min']:.2f}-{s['max']:.2f})"
                    if s and _num(s.get("median"))
                    else ""
                )
            speed.append(cells)
    if speed:
        out += ["### dyt's speedup over each variant", "",
                "Per round, the variant's time over dyt's; the median of rounds and, in parentheses, the "
                "range. Above 1: dyt is faster.", ""]  # fmt: skip
        out += _table(["model", "batch", "mode", "dyt variant", *[f"over {o}" for o in others]], speed) + [""]
    mem = [r for r in rows if _num(r.get("peak_mem_mb")) is not None]
    if mem:
        out += ["Peak memory of one step above what is held between steps (MB): " + "; ".join(
            f"{r['model']}/{r['batch']} {r['mode']} {r['variant']} {r['peak_mem_mb']:.0f}" for r in mem
            if r["variant"] in ("norm", "dyt")) + ".", ""]  # fmt: skip
    for plot in plots:
        rel = plot.relative_to(base).as_posix() if plot.is_relative_to(base) else plot.as_posix()
        out += [f"![{plot.stem}]({rel})", ""]
    return out


def _short(dtype: str) -> str:
    return SHORT_DTYPE.get(dtype, dtype)


# --------------------------------------------------------------------------------------------- Markdown


def _cell(value: Any) -> str:
    """A table cell: pipes escaped, one line."""
    return str(value).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ").strip()


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return lines


def _fmt(value, spec: str, none: str = "-") -> str:
    num = _num(value)
    if num is None:
        return none if value in (None, "") else str(value)
    return format(num, spec)


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
    ceiling = _num(perf.get("ceiling_gbps"))
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
    copies = [c for c in perf.get("copies_at_traffic") or [] if _num(c.get("gbps")) and ceiling]
    if copies:
        out.append(
            "Copies moving a bandwidth shape's bytes, as a fraction of the ceiling (what one kernel of that "
            "length reaches): " + ", ".join(
                f"{c['bytes_moved'] / 1e6:.0f} MB {_fmt(c['gbps'] / ceiling, '.3f')}"
                + (f" (graph {_fmt(c['graph_gbps'] / ceiling, '.3f')})" if _num(c.get("graph_gbps")) else "")
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
        row: list[Any] = [sets[key], f"{m}x{n}", _short(dtype), _short(pdt), mode]
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
            + ("x" if _num(ours.get("speedup_vs_best_peer")) else ""),
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


def _clip(text: str, n: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 3] + "..."


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
            elif _num(value) is not None:
                slot[name] = max(slot.get(name, 0.0), float(value))
    rows = []
    for (provider, dtype, pdt), slot in sorted(
        worst.items(), key=lambda kv: (_provider_rank(kv[0][0]), kv[0])
    ):
        if slot:
            rows.append([provider, _short(dtype), _short(pdt)] + [_fmt_err(slot.get(n)) for n in names])
    if not rows:
        return []
    header = ["provider", "x", "params"] + [f"max rel L2 {n}" for n in names]
    return (
        ["### Accuracy (relative L2 error against float64, worst over shapes)", ""]
        + _table(header, rows)
        + [""]
    )


def _fmt_err(value: float | None) -> str:
    if value is None:
        return "-"
    return "NaN/inf" if math.isinf(value) else f"{value:.1e}"


def _provider_rank(provider: str) -> int:
    return PROVIDER_ORDER.index(provider) if provider in PROVIDER_ORDER else len(PROVIDER_ORDER)


def errors_list(records: list[dict]) -> list[str]:
    """Each distinct failure message once, with the rows it hit: the table only has room for a clip."""
    seen: dict[tuple[str, str], list[str]] = {}
    for rec in records:
        if rec.get("error"):
            seen.setdefault((rec["provider"], str(rec["error"])), []).append(
                f"{rec['M']}x{rec['N']} {_short(rec['dtype'])} {rec['mode']}"
            )
    if not seen:
        return []
    out = ["### Failed rows", ""]
    for (provider, error), rows in sorted(seen.items(), key=lambda kv: (_provider_rank(kv[0][0]), kv[0])):
        sample = ", ".join(rows[:6]) + (f", ... ({len(rows)} rows)" if len(rows) > 6 else "")
        quoted = error.replace("`", "'")
        out.append(f"- **{provider}**: `{quoted}` ({sample})")
    return out + [""]


# ------------------------------------------------------------------------------------ committed results


@dataclass
class Baseline:
    """A committed baseline: baselines/<gpu>.json, a perf JSON of one GPU model."""

    path: Path
    perf: dict


@dataclass
class CommittedVerdict:
    """A committed conformance verdict: conformance/<gpu>/junit/*.xml read as a run's, and where it ran."""

    folder: Path
    junit: JunitData
    measured: Measured

    def page(self) -> Path:
        """What a reader opens: the verdict's summary.md, else its folder."""
        summary = self.folder / "summary.md"
        return summary if summary.is_file() else self.folder


def load_baselines(baselines_dir: Path) -> list[Baseline]:
    """Every readable perf JSON under baselines/, by file name; none when the folder is absent."""
    found = []
    for path in sorted(baselines_dir.glob("*.json")):
        try:
            found.append(Baseline(path, load_perf(path)))
        except (OSError, ValueError):
            continue
    return found


def baseline_of(baselines: list[Baseline], gpu_name: str | None) -> Baseline | None:
    """The baseline of a GPU model: the one named baselines/<gpu slug>.json, as the gate finds it."""
    if not gpu_name:
        return None
    return next((b for b in baselines if b.path == baseline_path(b.path.parent, gpu_name)), None)


_DEVICE = re.compile(r"^cuda:\d+ (?P<gpu>.+?)(?: \(CUDA_VISIBLE_DEVICES=[^)]*\))?$")
_SUMMARY_ROW = re.compile(r"^\| (?P<field>git_sha|gpu_name|timestamp_utc) \| (?P<value>[^|]+?) \|$", re.M)


def junit_measured(folder: Path) -> Measured:
    """GPU, commit and date of a committed verdict: from its JUnit files (the `gpu_name`, `device` and
    `git_sha` properties, the earliest test suite timestamp), then from the summary.md beside them (its
    environment table), then the GPU from the folder's name."""
    found: dict[str, str] = {}
    stamps = []
    for path in sorted((folder / "junit").glob("*.xml")):
        try:
            root = ET.parse(path).getroot()
        except (OSError, ET.ParseError):
            continue
        for elem in root.iter():
            if elem.tag == "testsuite" and elem.get("timestamp"):
                stamps.append(elem.get("timestamp"))
            elif elem.tag == "property" and elem.get("name") in ("git_sha", "gpu_name") and elem.get("value"):
                found.setdefault(elem.get("name"), elem.get("value"))
            elif elem.tag == "property" and elem.get("name") == "device":
                match = _DEVICE.match(elem.get("value") or "")
                if match:
                    found.setdefault("gpu_name", match["gpu"])
    if stamps:
        found["timestamp_utc"] = _iso_seconds(min(stamps))
    try:
        summary = (folder / "summary.md").read_text(errors="replace")
    except OSError:
        summary = ""
    for match in _SUMMARY_ROW.finditer(summary):
        if match["value"] not in ("None", ""):
            found.setdefault(match["field"], match["value"])
    return Measured(
        gpu=found.get("gpu_name") or folder.name,
        commit=found.get("git_sha") or "unknown",
        date=found.get("timestamp_utc") or "date unknown",
    )


def _iso_seconds(stamp: str) -> str:
    """An ISO time to the second ('2026-12-01T14:05:09.70+00:00' -> '2026-12-01T14:05:09+00:00')."""
    try:
        return datetime.datetime.fromisoformat(stamp).isoformat(timespec="seconds")
    except ValueError:
        return stamp


def load_verdicts(conformance_dir: Path) -> list[CommittedVerdict]:
    """Every conformance/<gpu>/ folder that holds JUnit files, by name; none when the folder is absent."""
    verdicts = []
    for folder in sorted(p for p in conformance_dir.glob("*") if p.is_dir()):
        junit = load_junit(folder / "junit")
        if junit.files:
            verdicts.append(CommittedVerdict(folder, junit, junit_measured(folder)))
    return verdicts


def _link(path: Path, base: Path) -> str:
    """A Markdown link to path, relative to the summary's folder where it lies under it."""
    rel = path.relative_to(base).as_posix() if path.is_relative_to(base) else path.as_posix()
    return f"[`{rel}`]({rel})"


def committed(section: list[str], title: str, label: str) -> list[str]:
    """A section rendered by its own function for committed data: its heading extended by title, and label
    as the first paragraph under it; an empty section stays empty."""
    if not section:
        return []
    head, rest = section[0], section[1:]
    return [f"{head}: {title}", "", label, *(rest if rest[:1] == [""] else ["", *rest])]


def baseline_sections(baseline: Baseline, plot_dir: Path, base: Path) -> tuple[list[str], list[Path]]:
    """A committed baseline rendered as a run (the performance and model sections, with their plots under
    plot_dir), each titled as the committed baseline of its GPU; the Markdown and the plots written."""
    perf = baseline.perf
    plots = make_plots(perf, plot_dir)
    model_plots = make_model_plots(perf, plot_dir)
    title = f"committed baseline, {measured_kernels(perf).gpu}"
    label = f"The committed baseline {_link(baseline.path, base)}; no bench run in this folder."
    lines = committed(perf_section(baseline.path, perf, [baseline.path], plots, base), title, label)
    lines += committed(models_section(perf, model_plots, base), title, label)
    return lines, plots + model_plots


def baseline_note(perf: dict, baselines: list[Baseline], base: Path) -> list[str]:
    """Beside a fresh run: the committed baseline of its GPU model, named and linked with where it was
    measured, and the regression gate's verdict of the run against it; which baselines exist otherwise."""
    if not baselines:
        return []
    out = ["## Committed baseline", ""]
    gpu = measured_kernels(perf).gpu
    ours = baseline_of(baselines, gpu)
    if ours is None:
        names = ", ".join(_link(b.path, base) for b in baselines)
        return out + [f"No committed baseline of {gpu}; the repository holds {names}.", ""]
    out += [
        f"The committed baseline of {gpu}, {_link(ours.path, base)}: kernel rows of "
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
        label = (f"The committed verdict {_link(v.page(), base)}, from its JUnit files (no test run in this "
                 f"folder): {v.measured.label()}.")  # fmt: skip
        out += committed(conformance_section(v.junit), f"committed verdict, {v.measured.gpu}", label)
    return out


def verdict_note(verdicts: list[CommittedVerdict], base: Path) -> list[str]:
    """Beside a fresh run's conformance results: which committed verdicts exist, linked and labelled."""
    if not verdicts:
        return []
    items = [f"- {_link(v.page(), base)}: {v.measured.label()}" for v in verdicts]
    return ["Committed conformance verdicts to compare with:", "", *items, ""]


# --------------------------------------------------------------------------------------------- render


def compose(reports: Path) -> tuple[str, list[Path]]:
    """The summary's Markdown and the plots written for it.

    A run's files in the folder (junit/, perf/, env.json, failures-*.md) come first. Where the folder holds
    no JUnit results, or no perf data, the results the repository commits beside them take their place:
    the conformance verdicts of conformance/<gpu>/ and the baselines of baselines/, rendered by the same
    section functions and titled as committed. Beside a run's results, the committed ones are named.
    """
    junit = load_junit(reports / "junit")
    notes = []
    for path in sorted(reports.glob("failures-*.md")):
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        if re.search(r"^## ", text, re.M):  # a session without failures writes only its header
            notes.append((path, text))
    env, env_problem = _read_env(reports / "env.json")
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


if __name__ == "__main__":
    sys.exit("run through the CLI: python -m dyt report")
