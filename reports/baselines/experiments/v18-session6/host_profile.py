"""Session 6 probe (one H200, call 8, at 14b6be2): where the host time of dyt's backward goes (steady state,
4096x64 bf16, cProfile), and of a first backward in a fresh process (4096x1024), with an empty and then a
warm Triton cache.

    export TRITON_CACHE_DIR=/tmp/tc_probe
    python reports/baselines/experiments/v18-session6/host_profile.py first   # first_empty.log
    python reports/baselines/experiments/v18-session6/host_profile.py first   # first_warm.log
    python reports/baselines/experiments/v18-session6/host_profile.py steady  # steady.log
"""

import cProfile
import io
import os
import pstats
import sys
import time

sys.path.insert(0, os.getcwd())
import torch  # noqa: E402

import dyt  # noqa: E402

mode = sys.argv[1]
x = torch.randn(
    4096, 1024 if mode == "first" else 64, device="cuda", dtype=torch.bfloat16, requires_grad=True
)
alpha = torch.full((1,), 0.5, device="cuda", dtype=torch.bfloat16, requires_grad=True)
gamma = torch.randn(x.shape[1], device="cuda", dtype=torch.bfloat16, requires_grad=True)
beta = torch.randn(x.shape[1], device="cuda", dtype=torch.bfloat16, requires_grad=True)
dy = torch.randn_like(x)
torch.cuda.synchronize()
pr = cProfile.Profile()
if mode == "first":
    s = time.perf_counter()
    y = dyt.dyt(x, alpha, gamma, beta)
    torch.cuda.synchronize()
    f = time.perf_counter() - s
    pr.enable()
    s = time.perf_counter()
    y.backward(dy)
    torch.cuda.synchronize()
    b = time.perf_counter() - s
    pr.disable()
    print(f"first forward {f:.3f} s, first backward {b:.3f} s")
else:
    y = dyt.dyt(x, alpha, gamma, beta)
    for _ in range(50):
        y.backward(dy, retain_graph=True)
    torch.cuda.synchronize()
    n = 300
    s = time.perf_counter()
    for _ in range(n):
        y.backward(dy, retain_graph=True)
    torch.cuda.synchronize()
    print(f"steady backward: {(time.perf_counter() - s) / n * 1e6:.1f} us per call (host-bound)")
    from dyt import launcher

    x2, dy2 = x.detach(), dy
    s = time.perf_counter()
    for _ in range(n):
        launcher.backward(
            dy2, x2, alpha.detach(), gamma.detach(), x.dtype, alpha.dtype, gamma.dtype, beta.dtype
        )
    torch.cuda.synchronize()
    print(f"launcher.backward: {(time.perf_counter() - s) / n * 1e6:.1f} us per call")
    s = time.perf_counter()
    for _ in range(n):
        torch.empty(64, device="cuda")
    print(f"torch.empty: {(time.perf_counter() - s) / n * 1e6:.1f} us per call")
    pr.enable()
    for _ in range(n):
        y.backward(dy, retain_graph=True)
    torch.cuda.synchronize()
    pr.disable()
out = io.StringIO()
pstats.Stats(pr, stream=out).sort_stats("cumulative").print_stats(28)
print(out.getvalue()[-6000:])
out = io.StringIO()
pstats.Stats(pr, stream=out).sort_stats("tottime").print_stats(15)
print(out.getvalue()[-3500:])
