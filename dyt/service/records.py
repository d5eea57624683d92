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


def load_perf(path: str | Path) -> dict:
    """A perf JSON (our format); raises ValueError naming the file when it is not one."""
    data = json.loads(Path(path).read_text())
    if not isinstance(data, dict) or not isinstance(data.get("records"), list):
        raise ValueError(f"{path}: not a perf report (expected an object with a 'records' list)")
    return data


def baseline_path(baselines: Path, gpu_name: str | None) -> Path:
    """<baselines>/<gpu>.json: the one current baseline of a GPU model, the file the gate reads."""
    return Path(baselines) / f"{gpu_slug(gpu_name)}.json"
