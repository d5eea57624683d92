"""Runs the suites on CUDA: one pytest-xdist worker per visible GPU, each pinned to its GPU.

`python -m dyt.gpu_matrix [pytest args]` is what `nox -s gpu_tests`, ci/entry.sh and the container run.
It fails at once when no GPU is visible. Workers are pinned through DYT_GPUS (read by tests/conftest.py
before CUDA initializes), get their own Triton cache directories, are distributed by work stealing, and a
crashed worker is restarted with its test reported failed. pytest-timeout (thread method) turns a hung
kernel into one failed test.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def visible_gpus() -> list[str]:
    """GPU ids as CUDA_VISIBLE_DEVICES would name them, without initializing CUDA in this process."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [g.strip() for g in listed.split(",") if g.strip() and g.strip() != "-1"]
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        out = None
    if out is not None:
        return [line.strip() for line in out.stdout.splitlines() if line.strip()]
    probe = "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)"
    count = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True).stdout.strip()
    return [str(i) for i in range(int(count or 0))]


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    gpus = visible_gpus()
    if not gpus:
        print(
            "gpu_tests: no CUDA GPU is visible (nvidia-smi and torch see none); this session needs one.",
            file=sys.stderr,
        )
        return 2
    reports = pathlib.Path(os.environ.get("DYT_REPORTS", ROOT / "reports"))
    session = os.environ.setdefault("DYT_SESSION", "gpu_tests")
    env = dict(os.environ)
    env.update(
        {
            "DYT_GPUS": ",".join(gpus),
            "DYT_REQUIRE_GPU": "1",
            "DYT_REPORTS": str(reports),
            "TRITON_INTERPRET": "0",
            "DYT_TRITON_CACHE_ROOT": env.get(
                "DYT_TRITON_CACHE_ROOT",
                str(
                    pathlib.Path(env.get("TRITON_CACHE_DIR", "~/.triton/cache")).expanduser() / "dyt-workers"
                ),
            ),
        }
    )
    junit = (
        [] if any(a.startswith("--junitxml") for a in args) else [f"--junitxml={reports}/junit/{session}.xml"]
    )
    (reports / "junit").mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "xdist",
        "-n",
        str(len(gpus)),
        "--dist",
        "worksteal",
        "--max-worker-restart",
        str(4 * len(gpus)),
        "-o",
        f"junit_suite_name={session}",
        "--timeout",
        env.get("DYT_TEST_TIMEOUT", "900"),
        "--timeout-method",
        "thread",
        *junit,
        *args,
    ]
    print(f"gpu_tests: {len(gpus)} GPU(s) {gpus}, one xdist worker each:\n  {' '.join(cmd)}", flush=True)
    return subprocess.call(cmd, cwd=ROOT, env=env)


if __name__ == "__main__":
    sys.exit(main())
