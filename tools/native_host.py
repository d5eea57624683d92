"""Host time per call of dyt's native path (dyt.native) beside its Python path and the eager expression,
in interleaved rounds within one process: forward through autograd, forward under no_grad, and forward +
backward. Needs a CUDA GPU; run it alone (other processes on the host's CPUs move these numbers).

    CUDA_VISIBLE_DEVICES=0 python tools/native_host.py [--rounds 5] [--shapes 4096x64,64x197x384]

Each cell is the median over rounds of the mean host time of --calls calls (synchronized only around
the batch of calls: the GPU keeps up, these kernels are short), and its ratio to the native path's.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import dyt
from dyt import native, ops

_REAL_NATIVE_OP = ops._native_op


def _python_path(x):
    return None


def set_path(name: str) -> None:
    ops._native_op = _REAL_NATIVE_OP if name == "native" else _python_path


def host_us(fn, calls: int) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def cases(shape, dtype):
    x = torch.randn(*shape, device="cuda", dtype=dtype, requires_grad=True)
    C = shape[-1]
    a = torch.full((1,), 0.5, device="cuda", requires_grad=True)
    g = torch.randn(C, device="cuda", requires_grad=True)
    b = torch.randn(C, device="cuda", requires_grad=True)
    dy = torch.randn_like(x)

    def dyt_fwd():
        dyt.dyt(x, a, g, b)

    def dyt_nograd():
        with torch.no_grad():
            dyt.dyt(x, a, g, b)

    def dyt_both():
        dyt.dyt(x, a, g, b).backward(dy)

    def eager_fwd():
        g * torch.tanh(a * x) + b

    def eager_both():
        (g * torch.tanh(a * x) + b).backward(dy)

    def eager_nograd():
        with torch.no_grad():
            g * torch.tanh(a * x) + b

    return {
        "forward (autograd)": (dyt_fwd, eager_fwd),
        "forward (no_grad)": (dyt_nograd, eager_nograd),
        "forward + backward": (dyt_both, eager_both),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--shapes", default="4096x64,64x197x384,6304x768")
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    args = parser.parse_args()
    assert native.ensure() is not None, f"the native path is unavailable: {native.state()}"
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[args.dtype]
    print(f"host us per call, {args.dtype}, median of {args.rounds} interleaved rounds of {args.calls} calls")
    heads = ("native", "python", "eager", "py/nat", "eag/nat")
    print(f"{'shape':>12s} {'call':20s} " + " ".join(f"{h:>8s}" for h in heads))
    for text in args.shapes.split(","):
        shape = tuple(int(s) for s in text.split("x"))
        for call, (dyt_fn, eager_fn) in cases(shape, dtype).items():
            times = {"native": [], "python": [], "eager": []}
            for path in ("native", "python"):  # warm both paths' caches
                set_path(path)
                for _ in range(20):
                    dyt_fn()
            for _ in range(args.rounds):
                for path in ("native", "python", "eager"):
                    set_path(path)
                    times[path].append(host_us(eager_fn if path == "eager" else dyt_fn, args.calls))
            set_path("native")
            med = {k: statistics.median(v) for k, v in times.items()}
            print(
                f"{text:>12s} {call:20s} {med['native']:8.1f} {med['python']:8.1f} {med['eager']:8.1f} "
                f"{med['python'] / med['native']:8.2f} {med['eager'] / med['native']:8.2f}"
            )


if __name__ == "__main__":
    main()
