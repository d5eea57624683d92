"""Seconds to dyt.dyt's first forward and backward in a fresh process: an empty Triton cache, then a warm one.

    python benchmarks/cold_start.py [--shape 4096x1024] [--dtype bf16] [--out FILE.json]

Two fresh processes over one Triton cache directory, the first starting it empty. A first call must tune
nothing and, with a warm cache, return within 1 s; the bench's cold_start_s is the first call inside its
own process, so whether it compiled depends on what ran before it there. Each child first runs a plain
PyTorch backward, timed apart: PyTorch's first backward of anything imports modules lazily (seconds on a
machine without a bytecode cache), which is not dyt's cost. Meant for a GPU machine; on a CPU it runs the
same processes, through the Triton interpreter when TRITON_INTERPRET=1, else through the plain CPU path.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]

# The child: import time, then the first forward and the first backward, each up to a device sync.
CHILD = r"""
import json, sys, time
start = time.perf_counter()
import torch
import dyt
import_s = time.perf_counter() - start
rows, cols, dtype_name = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype_name]
device = "cuda" if torch.cuda.is_available() else "cpu"
sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
x = torch.randn(rows, cols, device=device, dtype=dtype, requires_grad=True)
alpha = torch.full((1,), 0.5, device=device, requires_grad=True)
gamma = torch.randn(cols, device=device, requires_grad=True)
beta = torch.randn(cols, device=device, requires_grad=True)
dy = torch.randn_like(x)
sync()
# PyTorch's own first backward imports what autograd needs lazily (sympy, through symbolic shapes:
# 2.2 s on the H200 machine, whose site-packages has no bytecode cache): paid here, by a plain one.
start = time.perf_counter()
w = torch.ones(2, device=device, requires_grad=True)
(w * 2).backward(torch.ones_like(w))  # with an explicit gradient, as dyt's below (a scalar's imports less)
sync()
torch_first_backward_s = time.perf_counter() - start
start = time.perf_counter()
y = dyt.dyt(x, alpha, gamma, beta)
sync()
forward_s = time.perf_counter() - start
start = time.perf_counter()
y.backward(dy)
sync()
backward_s = time.perf_counter() - start
print(json.dumps({"device": torch.cuda.get_device_name() if device == "cuda" else "cpu", "import_s": import_s,
                  "torch_first_backward_s": torch_first_backward_s, "forward_s": forward_s,
                  "backward_s": backward_s}))
"""


def first_call(rows: int, cols: int, dtype: str, cache_dir: str) -> dict:
    """The child's timings, in a fresh process whose Triton cache is cache_dir."""
    env = {**os.environ, "TRITON_CACHE_DIR": cache_dir}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    proc = subprocess.run([sys.executable, "-c", CHILD, str(rows), str(cols), dtype], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"cold_start child failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--shape", default="4096x1024", help="ROWSxCOLS (default 4096x1024)")
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"])
    parser.add_argument("--out", type=pathlib.Path)
    args = parser.parse_args(argv)
    rows, cols = (int(v) for v in args.shape.lower().split("x"))
    with tempfile.TemporaryDirectory(prefix="dyt_triton_cache_") as cache:
        runs = {"empty_cache": first_call(rows, cols, args.dtype, cache)}
        runs["warm_cache"] = first_call(rows, cols, args.dtype, cache)
    result = {"shape": [rows, cols], "dtype": args.dtype,
              "interpreter": os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"), **runs}  # fmt: skip
    for name, run in runs.items():
        print(f"{name}: import {run['import_s']:.2f} s, a plain torch backward first "
              f"{run['torch_first_backward_s']:.3f} s, then dyt's first forward {run['forward_s']:.3f} s, "
              f"first backward {run['backward_s']:.3f} s ({run['device']})")  # fmt: skip
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
