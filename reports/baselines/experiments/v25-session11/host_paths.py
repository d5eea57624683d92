"""Host time of the Python layers on the autograd path (session 11, v27), on any machine: the launches
stubbed out, the interpreter's bf16 staging turned off, medians of 5 x 20000 calls (5 x 5000 with the
backward). Run from the repository root, at two commits, to compare:

    python reports/baselines/experiments/v25-session11/host_paths.py
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
launcher.launch_backward_main = lambda *a, **k: None
launcher.launch_backward_finish = lambda *a, **k: None
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


print(platform.processor() or platform.machine(), "torch", torch.__version__)
x = torch.randn(4096, 64, dtype=torch.bfloat16, requires_grad=True)
a, g, b = (torch.randn(n, requires_grad=True) for n in (1, 64, 64))
dy = torch.randn_like(x)
xd, ad, gd, bd = (v.detach() for v in (x, a, g, b))
rows = {
    "ops.validate": (lambda: ops.validate(x, a, g, b), 20000),
    "launcher.forward_plan": (lambda: launcher.forward_plan(xd, gd, bd), 20000),
    "launcher.backward_plan": (lambda: launcher.backward_plan(xd, dy), 20000),
    "dyt.dyt, inputs require grad": (lambda: dyt.dyt(x, a, g, b), 20000),
    "ops.backward_impl": (lambda: ops.backward_impl(dy, xd, ad, gd, bd), 5000),
    "dyt.dyt forward + backward": (lambda: dyt.dyt(x, a, g, b).backward(dy), 5000),
}
for name, (fn, n) in rows.items():
    print(f"4096x64 {name}: {per_call_us(fn, n):.2f} us")
