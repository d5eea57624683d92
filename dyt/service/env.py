"""The environment manifest: what a result was measured on, so that every report can be reproduced.

Imports torch lazily and only asks it about devices when CUDA is available, so collecting the manifest
never initializes CUDA on a machine without a GPU (and works where torch is absent altogether).
"""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

PACKAGE_DIR = Path(__file__).resolve().parent

# Peers and tools whose versions explain a number in a report; read from metadata, never imported.
_PACKAGES = ("liger-kernel", "numpy", "pytest", "nox", "junitparser", "matplotlib")


def _run(cmd: list[str], cwd: Path | None = None) -> str | None:
    """stdout of a short command, or None when it is missing, fails or hangs."""
    try:
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def project_root() -> Path | None:
    """The directory holding the project's pyproject.toml (dyt/ beside it), or None for an installed copy."""
    root = PACKAGE_DIR.parents[1]
    return root if (root / "pyproject.toml").is_file() else None


def _own_checkout() -> Path | None:
    """The project root when it is the top level of a git checkout; None when there is no checkout, or
    when the project merely lies inside another repository's work tree (whose commit is not ours)."""
    root = project_root()
    if root is None or shutil.which("git") is None:
        return None
    top = _run(["git", "-C", str(root), "rev-parse", "--show-toplevel"])
    return root if top and Path(top).resolve() == root.resolve() else None


def git_sha() -> str:
    """SHA of the project's own checkout; DYT_GIT_SHA wins (containers ship without .git); else "unknown"."""
    override = os.environ.get("DYT_GIT_SHA", "").strip()
    if override:
        return override
    root = _own_checkout()
    if root is None:
        return "unknown"
    return _run(["git", "-C", str(root), "rev-parse", "HEAD"]) or "unknown"


def _git_dirty() -> bool | None:
    """Whether tracked files differ from HEAD: a SHA alone does not reproduce an uncommitted tree."""
    if os.environ.get("DYT_GIT_SHA"):
        return None
    root = _own_checkout()
    if root is None:
        return None
    out = _run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"])
    return None if out is None else bool(out)


def _nvidia_smi() -> dict[str, Any]:
    """GPU names, driver and the driver's CUDA version from nvidia-smi, without touching CUDA."""
    if shutil.which("nvidia-smi") is None:
        return {}
    info: dict[str, Any] = {}
    rows = _run(["nvidia-smi", "--query-gpu=name,driver_version,compute_cap", "--format=csv,noheader"])
    if rows is None:  # drivers before compute_cap was a query field
        rows = _run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"])
    if rows:
        parts = [[p.strip() for p in line.split(",")] for line in rows.splitlines() if line.strip()]
        info["names"] = [p[0] for p in parts]
        info["driver_version"] = parts[0][1] if len(parts[0]) > 1 else None
        info["compute_capability"] = parts[0][2] if len(parts[0]) > 2 else None
    header = _run(["nvidia-smi"])
    match = re.search(r"CUDA Version:\s*([\d.]+)", header or "")
    info["cuda_driver"] = match.group(1) if match else None
    return info


def _torch_info() -> dict[str, Any]:
    """torch version, its CUDA build, and the visible devices when (and only when) CUDA is available."""
    try:
        import torch
    except ImportError:
        return {"torch": None}
    info: dict[str, Any] = {"torch": torch.__version__, "cuda": torch.version.cuda}
    if torch.cuda.is_available():  # counts devices; creates no context
        count = torch.cuda.device_count()
        info["names"] = [torch.cuda.get_device_name(i) for i in range(count)]
        major, minor = torch.cuda.get_device_capability(0)
        info["compute_capability"] = f"{major}.{minor}"
    return info


def _triton_version() -> str | None:
    try:
        return importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        return None


def _package_versions() -> dict[str, str]:
    versions = {}
    for name in _PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions


def collect_env(seeds: dict | None = None) -> dict[str, Any]:
    """The manifest as a JSON-ready dict; GPU fields are None on a machine without one."""
    smi = _nvidia_smi()
    tor = _torch_info()
    names = tor.get("names") or smi.get("names") or []
    import dyt

    return {
        "dyt_version": dyt.__version__,
        "gpu_name": names[0] if names else None,
        "gpu_names": names or None,
        "gpu_count": len(names),
        "compute_capability": tor.get("compute_capability") or smi.get("compute_capability"),
        "driver_version": smi.get("driver_version"),
        "cuda": tor.get("cuda"),
        "cuda_driver": smi.get("cuda_driver"),
        "torch": tor.get("torch"),
        "triton": _triton_version(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "hostname": socket.gethostname(),
        "git_sha": git_sha(),
        "git_dirty": _git_dirty(),
        "triton_interpret": os.environ.get("TRITON_INTERPRET"),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "seeds": dict(seeds) if seeds else {},
        "packages": _package_versions(),
        "timestamp_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def write_env(path: str | os.PathLike, seeds: dict | None = None) -> dict[str, Any]:
    """collect_env() written to path as JSON (parent folders created), whole or not at all
    (files.write_atomic: two sessions sharing a reports/ folder never leave a mix of their manifests);
    returns what was written."""
    from dyt.service.files import write_atomic

    env = collect_env(seeds)
    write_atomic(path, json.dumps(env, indent=2, sort_keys=True) + "\n")
    return env
