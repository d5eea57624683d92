"""Host time per call of dyt.dyt on its native host path beside its Python path (DYT_NATIVE=0) and eager.

    CUDA_VISIBLE_DEVICES=0 python benchmarks/native_host.py [--rounds 5] [--shapes 4096x64,64x197x384]

Forward through autograd, forward under no_grad, and forward + backward, each path in its own process
(DYT_NATIVE=1: dyt.native's C++ op; DYT_NATIVE=0: the Python path), the eager expression gamma *
tanh(alpha * x) + beta interleaved with dyt in rounds within each process. Each cell is the median over
rounds of the mean host time of --calls calls (synchronized only around the batch of calls: the GPU keeps
up, these kernels are short); the eager column is the native process's, and the ratios are to the native
path's time. Needs a CUDA GPU; run it alone (other processes on the host's CPUs move these numbers).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

CALLS = ("forward (autograd)", "forward (no_grad)", "forward + backward")


def host_us(fn, calls: int) -> float:
    import torch

    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def cases(shape, dtype) -> dict:
    """call -> (dyt's, the eager expression's)."""
    import torch

    import dyt

    x = torch.randn(*shape, device="cuda", dtype=dtype, requires_grad=True)
    C = shape[-1]
    a = torch.full((1,), 0.5, device="cuda", requires_grad=True)
    g = torch.randn(C, device="cuda", requires_grad=True)
    b = torch.randn(C, device="cuda", requires_grad=True)
    dy = torch.randn_like(x)

    def dyt_nograd():
        with torch.no_grad():
            dyt.dyt(x, a, g, b)

    def eager_nograd():
        with torch.no_grad():
            g * torch.tanh(a * x) + b

    return dict(zip(CALLS, (
        (lambda: dyt.dyt(x, a, g, b), lambda: g * torch.tanh(a * x) + b),
        (dyt_nograd, eager_nograd),
        (lambda: dyt.dyt(x, a, g, b).backward(dy), lambda: (g * torch.tanh(a * x) + b).backward(dy)),
    ), strict=True))  # fmt: skip


def measure(args) -> dict:
    """In this process (one path): {shape: {call: {"dyt": us, "eager": us}}} and the path's state."""
    import torch

    from dyt import native

    native.ensure()
    state = native.state()[0]
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[args.dtype]
    out: dict = {"state": state, "rows": {}}
    for text in args.shapes.split(","):
        shape = tuple(int(s) for s in text.split("x"))
        for call, (dyt_fn, eager_fn) in cases(shape, dtype).items():
            for fn in (dyt_fn, eager_fn):  # warm both
                for _ in range(20):
                    fn()
            times: dict[str, list[float]] = {"dyt": [], "eager": []}
            for _ in range(args.rounds):
                times["dyt"].append(host_us(dyt_fn, args.calls))
                times["eager"].append(host_us(eager_fn, args.calls))
            out["rows"].setdefault(text, {})[call] = {k: statistics.median(v) for k, v in times.items()}
    return out


def run_path(path: str, argv: list[str]) -> dict:
    """This script's --child run with the native path on or off; its JSON."""
    env = {**os.environ, "DYT_NATIVE": "1" if path == "native" else "0"}
    cmd = [sys.executable, __file__, "--child", *argv]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"native_host: the {path} path's process failed (exit {proc.returncode}):\n"
                 f"{proc.stderr[-4000:]}")  # fmt: skip
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--shapes", default="4096x64,64x197x384,6304x768")
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU (torch.cuda.is_available() is False)")
    if args.child:
        print(json.dumps(measure(args)))
        return
    argv = ["--rounds", str(args.rounds), "--calls", str(args.calls), "--shapes", args.shapes,
            "--dtype", args.dtype]  # fmt: skip
    native, python = run_path("native", argv), run_path("python", argv)
    if native["state"] != "loaded":
        sys.exit(f"native_host: the native path is unavailable (dyt.native state {native['state']!r})")
    print(f"host us per call, {args.dtype}, median of {args.rounds} rounds of {args.calls} calls")
    heads = ("native", "python", "eager", "py/nat", "eag/nat")
    print(f"{'shape':>12s} {'call':20s} " + " ".join(f"{h:>8s}" for h in heads))
    for text, calls in native["rows"].items():
        for call, cell in calls.items():
            nat, py, eager = cell["dyt"], python["rows"][text][call]["dyt"], cell["eager"]
            print(f"{text:>12s} {call:20s} {nat:8.1f} {py:8.1f} {eager:8.1f} "
                  f"{py / nat:8.2f} {eager / nat:8.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
