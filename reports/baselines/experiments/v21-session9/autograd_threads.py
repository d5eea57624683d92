"""Session 9: where the backward's host time goes on the GPU machine (4096 x 64 bf16, float32 parameters).

    python reports/baselines/experiments/v21-session9/autograd_threads.py

Host us per call (mean of 200 calls, median of 7 repeats) of forward + backward through autograd for dyt,
the eager expression, and a trivial Python autograd.Function (x * 2 both ways), each with the autograd
engine's device threads (PyTorch's default: a CUDA backward runs on a worker thread, so a Python backward
node needs that thread to take the GIL) and without (torch.autograd.set_multithreading_enabled(False):
the calling thread runs it). Also do_bench medians of the backward alone, as the bench times it.
"""

import os
import statistics
import sys
import time

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), *[".."] * 4)))  # the repo

import torch  # noqa: E402
from triton.testing import do_bench  # noqa: E402

import dyt  # noqa: E402


class Twice(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, dy):
        return dy * 2


x = torch.randn(4096, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
a = torch.full((1,), 0.5, device="cuda", requires_grad=True)
g = torch.randn(64, device="cuda", requires_grad=True)
b = torch.randn(64, device="cuda", requires_grad=True)
dy = torch.randn_like(x)
cases = {
    "dyt.dyt": lambda: dyt.dyt(x, a, g, b),
    "eager expression": lambda: g * torch.tanh(a * x) + b,
    "Python Function x*2": lambda: Twice.apply(x),
    "plain x*2": lambda: x * 2,
}


def host_us(fn, n=200, repeats=7):
    for _ in range(20):
        fn()
    times = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(n):
            fn()
        times.append((time.perf_counter() - start) / n * 1e6)
    torch.cuda.synchronize()
    return statistics.median(times)


header = f"{'fwd + bwd host us per call':28s} {'threads':>9s} {'no threads':>11s}"
print(header, "  do_bench bwd us: threads, none")
for name, fwd in cases.items():
    row = []
    for threads in (True, False):
        with torch.autograd.set_multithreading_enabled(threads):
            row.append(host_us(lambda fwd=fwd: fwd().backward(dy)))
            y = fwd()
            row.append(do_bench(lambda y=y: y.backward(dy, retain_graph=True), return_mode="median") * 1e3)
    print(f"{name:28s} {row[0]:9.1f} {row[2]:11.1f}   {row[1]:7.1f} {row[3]:7.1f}")
