"""Host time of the Python layers around the kernels, on any machine (session 10): the launches stubbed
out, the interpreter's bf16 staging turned off (on the GPU y is written in bf16 directly), medians of
5 x 20000 calls. Run from the repository root, at two commits, to compare:

    python reports/baselines/experiments/v22-session10/host_layers.py
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
for shape in ((4096, 64), (8, 512, 64)):
    x = torch.randn(*shape, dtype=torch.bfloat16, requires_grad=True)
    a, g, b = (torch.randn(n, requires_grad=True) for n in (1, 64, 64))
    dy = torch.randn_like(x)
    xd, ad, gd, bd = (v.detach() for v in (x, a, g, b))
    full = per_call_us(lambda: dyt.dyt(x, a, g, b))
    fwd = per_call_us(lambda: ops.forward_impl(xd, ad, gd, bd))
    bwd = per_call_us(lambda: ops.backward_impl(dy, xd, ad, gd, bd), n=5000)
    print(f"{shape}: dyt.dyt {full:.2f} us, forward_impl {fwd:.2f} us, backward_impl {bwd:.2f} us")
