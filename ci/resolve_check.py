"""Metadata-only check that the GPU image's pip set resolves for the image's Python and platform
(`nox -s resolve`, run by .ci/run; needs PyPI, downloads no wheel).

    python ci/resolve_check.py

  1. ci/requirements-gpu.txt (the lock the Dockerfile installs, with hashes) resolves with
     `pip install --dry-run --only-binary=:all: --platform manylinux_2_28_x86_64 (and older manylinux tags)
     --python-version <the base image's Python> --require-hashes --report -`, and the resolved set is the
     lock, exactly (nothing added, nothing missing);
  2. the torch of that lock with the CPU CI's triton pin (ci/constraints-cpu.txt) must NOT resolve there:
     PyPI's CUDA build of torch requires its own triton, and this check is what shows it.
pip runs without this machine's pip configuration (no local wheel folders, no caps), on PyPI only.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
LOCK = ROOT / "ci" / "requirements-gpu.txt"
CPU_CONSTRAINTS = ROOT / "ci" / "constraints-cpu.txt"
DOCKERFILE = ROOT / "Dockerfile"
# pip's own default index (PyPI) unless DYT_RESOLVE_INDEX_URL names another.
INDEX = os.environ.get("DYT_RESOLVE_INDEX_URL", "").strip()
# The python3 of each base image the Dockerfile may name (its tag's distribution release).
BASE_PYTHON = {"ubuntu24.04": "3.12", "ubuntu22.04": "3.10"}
# manylinux_2_28 and every older glibc tag a wheel may carry (pip does not widen --platform by itself).
PLATFORMS = [f"manylinux_2_{minor}_x86_64" for minor in range(28, 16, -1)] + [
    "manylinux2014_x86_64",
    "linux_x86_64",
]


def log(message: str) -> None:
    print(f"resolve: {message}", flush=True)


def base_python(dockerfile: pathlib.Path = DOCKERFILE) -> tuple[str, str]:
    match = re.search(r"^ARG BASE_IMAGE=(\S+)", dockerfile.read_text(), re.M)
    assert match, "the Dockerfile has no ARG BASE_IMAGE=..."
    image = match.group(1)
    for release, python in BASE_PYTHON.items():
        if f"-{release}" in image:
            return image, python
    raise AssertionError(f"the base image {image} is not one whose Python this check knows: {BASE_PYTHON}")


def locked(path: pathlib.Path = LOCK) -> dict[str, str]:
    pins = re.findall(r"^([A-Za-z0-9_.-]+)==([^\s;\\]+)", path.read_text(), re.M)
    return {canonical(name): version for name, version in pins}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def dry_run(python: str, requirements: list[str]) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") or k == "PIP_CERT"}
    env["PIP_CONFIG_FILE"] = os.devnull
    with tempfile.TemporaryDirectory() as target:
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--ignore-installed",
            "--quiet",
            "--disable-pip-version-check",
            "--no-input",
            *(["--index-url", INDEX] if INDEX else []),
            "--only-binary=:all:",
            *(f"--platform={p}" for p in PLATFORMS),
            "--python-version",
            python,
            "--implementation",
            "cp",
            "--target",
            target,
            "--report",
            "-",
            *requirements,
        ]
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)


def main() -> int:
    image, python = base_python()
    pins = locked()
    log(
        f"{LOCK.relative_to(ROOT)}: {len(pins)} pins, torch {pins.get('torch')}, "
        f"triton {pins.get('triton')}; "
        f"for CPython {python} on manylinux_2_28 x86_64 (the Python of {image.split('@')[0]})"
    )
    proc = dry_run(python, ["--require-hashes", "-r", str(LOCK)])
    if proc.returncode != 0:
        log(f"FAILED: the GPU image's pip set does not resolve (pip exit {proc.returncode}):")
        print(proc.stderr[-4000:], file=sys.stderr)
        return 1
    report = json.loads(proc.stdout)
    resolved = {canonical(i["metadata"]["name"]): i["metadata"]["version"] for i in report["install"]}
    if resolved != pins:
        extra = sorted(set(resolved) - set(pins))
        missing = sorted(set(pins) - set(resolved))
        differ = sorted(n for n in set(pins) & set(resolved) if pins[n] != resolved[n])
        log(
            f"FAILED: the resolved set is not the lock: added {extra}, missing {missing}, "
            f"other versions {differ}"
        )
        return 1
    log(f"ok: the lock resolves as it is ({len(resolved)} packages, every one by its hash)")

    cpu_triton = re.search(r"^triton==(\S+)", CPU_CONSTRAINTS.read_text(), re.M).group(1)
    old = [f"torch=={pins['torch']}", f"triton=={cpu_triton}"]
    proc = dry_run(python, old)
    if proc.returncode == 0:
        log(
            f"FAILED: {' + '.join(old)} resolved for the GPU platform: this check would not catch a wrong pin"
        )
        return 1
    if "ResolutionImpossible" not in proc.stderr and "conflicting dependencies" not in proc.stderr:
        log(f"FAILED: {' + '.join(old)} did not resolve, but not for a conflict:")
        print(proc.stderr[-4000:], file=sys.stderr)
        return 1
    log(f"ok: {' + '.join(old)} (the CPU CI's triton) is refused for this platform: ResolutionImpossible")
    return 0


if __name__ == "__main__":
    sys.exit(main())
