"""Host time of `dyt.dyt` where autograd must record the call and where it need not (session 11, v26), on
any machine: the launches stubbed out, the interpreter's bf16 staging turned off, medians of 5 x 20000
calls. Run from the repository root, at two commits, to compare:

    python reports/baselines/experiments/v25-session11/host_nograd.py
"""

# ruff: noqa: B023 - each closure is timed in the loop iteration that defines it

import os
import platform
import statistics
import sys
import time

os.environ["TRITON_INTERPRET"] = "1"  # the launcher's path on CPU tensors; every launch below is stubbed
sys.path.insert(0, os.getcwd())

import torch  # noqa: E402

import dyt  # noqa: E402
from dyt import launcher, ops  # noqa: E402

launcher.launch_forward = lambda *a, **k: None
launcher._staged = lambda dt: dt


def per_call_us(fn, n=20000):
    for _ in range(200):
        fn()
    runs = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        runs.append((time.perf_counter() - start) / n * 1e6)
    return statistics.median(runs)


def under_no_grad(x, a, g, b):
    with torch.no_grad():
        return dyt.dyt(x, a, g, b)


print(platform.processor() or platform.machine(), "torch", torch.__version__)
x = torch.randn(4096, 64, dtype=torch.bfloat16, requires_grad=True)
a, g, b = (torch.randn(n, requires_grad=True) for n in (1, 64, 64))
xd, ad, gd, bd = (v.detach() for v in (x, a, g, b))
rows = {
    "dyt.dyt, inputs require grad": lambda: dyt.dyt(x, a, g, b),
    "dyt.dyt under torch.no_grad": lambda: under_no_grad(x, a, g, b),
    "dyt.dyt, no input requires grad": lambda: dyt.dyt(xd, ad, gd, bd),
    "ops.forward_impl": lambda: ops.forward_impl(xd, ad, gd, bd),
}
for name, fn in rows.items():
    print(f"4096x64 {name}: {per_call_us(fn):.2f} us")
