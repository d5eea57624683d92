"""The regression gate: a run's dyt rows against the committed baseline of the same GPU model, as ratios.

Kernel rows: dyt's ratio to the copy ceiling. Model rows (the model benchmark's `model_records`): dyt's
speedup over each other variant of the same model, batch and mode, the median of the per-round ratios.

File-only (no torch, no Triton), so `python -m dyt gate` runs on a machine that holds only the result files.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

from dyt.service.records import load_perf, record_key


@dataclass
class GateResult:
    """Outcome of comparing a run with a baseline; code is the CLI exit status."""

    code: int
    compared: int = 0
    regressions: list[dict] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)


GATE_OK, GATE_REGRESSION, GATE_USAGE, GATE_NOT_COMPARABLE = 0, 1, 2, 3


# The gate compares the CUDA-graph ratio (host excluded) when both runs measured it: on a slow or busy host
# CPU, do_bench times of small and bf16 rows move by a third of the ceiling between two runs of one commit.
GATE_FIELDS = ("graph_ratio_to_ceiling", "ratio_to_ceiling")


def _ratio(rec: dict | None, field: str = "ratio_to_ceiling") -> float | None:
    value = None if rec is None or rec.get("error") else rec.get(field)
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def gate_field(base: dict, now: dict) -> str:
    """The ratio both records have, host-free first."""
    both = [f for f in GATE_FIELDS if _ratio(base, f) is not None and _ratio(now, f) is not None]
    return both[0] if both else "ratio_to_ceiling"


def _describe(key: tuple) -> str:
    m, n, dtype, pdt, mode = key
    params = "" if pdt == dtype else f" (params {pdt})"
    return f"{m}x{n} {dtype}{params} {mode}"


MODEL_MARGIN = 0.10


def _model_ratios(data: dict, low: bool = False) -> dict[tuple, float | None]:
    """(model, batch, mode, variant, other) -> dyt's median speedup over other (with low, its lowest round
    instead); None where the dyt row failed. Rows skipped (a library that does not import) carry nothing."""
    out: dict[tuple, float | None] = {}
    for rec in data.get("model_records") or []:
        if not isinstance(rec, dict) or rec.get("skipped") or not rec.get("variant", "").endswith("dyt"):
            continue
        key = (rec.get("model"), rec.get("batch"), rec.get("mode"), rec["variant"])
        if rec.get("error"):
            out[(*key, None)] = None
            continue
        for other, ratio in (rec.get("speedup_vs") or {}).items():
            value = ratio.get("min" if low else "median") if isinstance(ratio, dict) else None
            ok = isinstance(value, (int, float)) and math.isfinite(value)
            out[(*key, other)] = float(value) if ok else None
    return out


def _describe_model(key: tuple) -> str:
    model, batch, mode, variant, other = key
    return f"{model}/{batch} {mode} {variant} vs {other}"


def gate_models(current: dict, baseline: dict, result: GateResult, margin: float = MODEL_MARGIN) -> int:
    """Adds the model rows' verdicts to result; returns how many ratios it compared. A ratio drops when
    its median falls more than margin (absolute) below the baseline's median and below the baseline's
    lowest round too: host-bound steps move by more than any fixed margin between rounds of one run, and
    the baseline's own spread says how far. A dyt row that measured in the baseline and fails now drops
    every ratio it had. A baseline without model rows compares nothing."""
    base = {k: v for k, v in _model_ratios(baseline).items() if v is not None}
    base_low = _model_ratios(baseline, low=True)
    if not base:
        return 0
    now = _model_ratios(current)
    compared, missing = 0, []
    for key, ratio in base.items():
        failed_now = (*key[:4], None) in now
        if key not in now and not failed_now:
            missing.append(_describe_model(key))
            continue
        compared += 1
        value = None if failed_now else now[key]
        if value is None:
            result.regressions.append({"key": key, "baseline": ratio, "current": None})
            result.lines.append(f"REGRESSION {_describe_model(key)}: speedup {ratio:.3f} -> failed")
        elif value < min(ratio - margin, base_low.get(key) or ratio):
            result.regressions.append({"key": key, "baseline": ratio, "current": value})
            result.lines.append(
                f"REGRESSION {_describe_model(key)}: speedup {ratio:.3f} -> {value:.3f} "
                f"({value - ratio:+.3f}, margin {margin})"
            )
    if missing:
        result.lines.append(f"note: {len(missing)} baseline model ratios not measured now, e.g. {missing[0]}")
    return compared


def gate(current: dict, baseline: dict, margin: float = 0.05, strict: bool = False,
         model_margin: float = MODEL_MARGIN) -> GateResult:  # fmt: skip
    """Fails when a dyt record's ratio to the copy ceiling drops more than margin (absolute) below the
    baseline: graph_ratio_to_ceiling where both runs have it, else ratio_to_ceiling (do_bench).

    Ratios, not times, and only against a baseline of the same GPU model: a different model says so and
    passes with a warning (or returns GATE_NOT_COMPARABLE under strict). A record that measured in the
    baseline and fails now is a regression; one not measured now is listed, not failed.
    """
    gpu_now = (current.get("env") or {}).get("gpu_name")
    gpu_base = (baseline.get("env") or {}).get("gpu_name")
    if not gpu_now or gpu_now != gpu_base:
        msg = f"GPU model differs (current {gpu_now!r}, baseline {gpu_base!r}): ratios are not comparable"
        if strict:
            return GateResult(GATE_NOT_COMPARABLE, lines=[f"ERROR: {msg} (--strict)"])
        return GateResult(GATE_OK, lines=[f"WARNING: {msg}; gate skipped"])

    ours_now = {record_key(r): r for r in current.get("records") or [] if r.get("provider") == "dyt"}
    result = GateResult(GATE_OK)
    missing = []
    for rec in baseline.get("records") or []:
        if rec.get("provider") != "dyt" or _ratio(rec) is None:
            continue
        key = record_key(rec)
        if key not in ours_now:
            missing.append(_describe(key))
            continue
        result.compared += 1
        now_rec = ours_now[key]
        field = gate_field(rec, now_rec)
        base, now = _ratio(rec, field), _ratio(now_rec, field)
        if now is None:
            why = now_rec.get("error") or f"no {field}"
            result.regressions.append({"key": key, "baseline": base, "current": None, "error": why})
            result.lines.append(f"REGRESSION dyt {_describe(key)}: ratio {base:.3f} -> failed ({why})")
        elif now < base - margin:
            result.regressions.append({"key": key, "baseline": base, "current": now, "field": field})
            result.lines.append(
                f"REGRESSION dyt {_describe(key)}: {field} {base:.3f} -> {now:.3f} "
                f"({now - base:+.3f}, margin {margin})"
            )
    if missing:
        result.lines.append(f"note: {len(missing)} baseline rows not measured now, e.g. {missing[0]}")
    models = gate_models(current, baseline, result, model_margin)
    result.compared += models
    if result.regressions:
        result.code = GATE_REGRESSION
        result.lines.append(
            f"FAIL: {len(result.regressions)} of {result.compared} dyt rows and ratios regressed"
        )
    elif result.compared == 0:
        msg = "no dyt rows in common with the baseline"
        result.code = GATE_NOT_COMPARABLE if strict else GATE_OK
        result.lines.append(("ERROR: " if strict else "WARNING: ") + msg)
    else:
        kernels = result.compared - models
        result.lines.append(
            f"OK: {kernels} dyt rows compared on {gpu_now}, none dropped more than {margin} "
            "in ratio to ceiling"
            + (f"; {models} model ratios, none dropped more than {model_margin}" if models else "")
        )
    return result


def gate_files(current: str | Path, baseline: str | Path, margin: float = 0.05, strict: bool = False,
               model_margin: float = MODEL_MARGIN) -> int:  # fmt: skip
    """gate() on two files, printed; the exit status. A file that cannot be read, or is not a whole perf
    report (empty, truncated, corrupt: records.load_perf), is one line naming it and which of the two it
    is, and GATE_USAGE: the gate never passes on a baseline it could not read."""
    loaded = []
    for role, path in (("current", current), ("baseline", baseline)):
        try:
            loaded.append(load_perf(path))
        except OSError as exc:
            print(f"gate: {role} {path}: cannot read: {exc.strerror or exc}", file=sys.stderr)
            return GATE_USAGE
        except ValueError as exc:
            print(f"gate: {role} {exc}", file=sys.stderr)
            return GATE_USAGE
    cur, base = loaded
    result = gate(cur, base, margin=margin, strict=strict, model_margin=model_margin)
    for line in result.lines:
        print(line, file=sys.stderr if result.code else sys.stdout)
    return result.code
