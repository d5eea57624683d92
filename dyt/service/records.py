"""The perf JSON's records: what makes two comparable, where a run's file goes, how it is read and written.

File-only (no torch, no Triton): the gate and the report use these where neither is installed.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path


def record_key(rec: dict) -> tuple:
    """What makes two records comparable: shape, x dtype, parameter dtype, mode."""
    return (rec["M"], rec["N"], rec["dtype"], rec.get("param_dtype") or rec["dtype"], rec["mode"])


def json_safe(value):
    """NaN and inf as strings: strict JSON readers (browsers, jq) reject bare NaN."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_safe(v) for v in value]
    return value


def gpu_slug(name: str | None) -> str:
    """'NVIDIA H200' -> 'nvidia-h200': a file-name-safe GPU model."""
    slug = re.sub(r"[^a-z0-9]+", "-", (name or "unknown-gpu").lower()).strip("-")
    return slug or "unknown-gpu"


def perf_path(out_dir: Path, env: dict) -> Path:
    """<out_dir>/<gpu>-<sha7>.json: one run's file."""
    sha = (env.get("git_sha") or "unknown")[:7]
    return Path(out_dir) / f"{gpu_slug(env.get('gpu_name'))}-{sha}.json"


# The fields the gate and the report read from every row without checking: a row without them is corrupt.
RECORD_FIELDS = ("provider", "M", "N", "dtype", "mode")
MODEL_RECORD_FIELDS = ("model", "batch", "mode", "variant")


def load_perf(path: str | Path) -> dict:
    """A perf JSON (our format); raises ValueError naming the file and what is wrong when it is not one:
    empty, truncated or not JSON, not an object with a 'records' list, or a row that is not an object
    with the fields every reader takes from it (RECORD_FIELDS, MODEL_RECORD_FIELDS)."""
    text = Path(path).read_text(errors="replace")
    if not text.strip():
        raise ValueError(f"{path}: empty file (a write that never finished?)")
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{path}: truncated or corrupt JSON ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("records"), list):
        raise ValueError(f"{path}: not a perf report (expected an object with a 'records' list)")
    if not isinstance(data.get("env", {}), dict):
        raise ValueError(f"{path}: corrupt perf report ('env' is not an object)")
    for key, fields in (("records", RECORD_FIELDS), ("model_records", MODEL_RECORD_FIELDS)):
        rows = data.get(key) or []
        if not isinstance(rows, list):
            raise ValueError(f"{path}: corrupt perf report ({key!r} is not a list)")
        for i, rec in enumerate(rows):
            missing = [f for f in fields if f not in rec] if isinstance(rec, dict) else list(fields)
            if missing:
                raise ValueError(f"{path}: corrupt perf report ({key}[{i}] lacks {', '.join(missing)})")
    return data


def baseline_path(baselines: Path, gpu_name: str | None) -> Path:
    """<baselines>/<gpu>.json: the one current baseline of a GPU model, the file the gate reads."""
    return Path(baselines) / f"{gpu_slug(gpu_name)}.json"
