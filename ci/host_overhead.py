"""Host (CPU) time per call of each layer of the stack on a small GPU shape, and a cProfile of the
slowest: where the microseconds between `dyt.dyt` and the kernel launch go. Dev tool, GPU machine."""

import cProfile
import pstats
import time

import torch
import triton
import triton.language as tl

import dyt
from dyt import launcher, ops

x = torch.randn(4096, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
a = torch.full((1,), 0.5, device="cuda", requires_grad=True)
g = torch.randn(64, device="cuda", requires_grad=True)
b = torch.randn(64, device="cuda", requires_grad=True)
dy = torch.randn_like(x)
x2 = x.detach()


@triton.jit
def _empty_kernel(X, n):
    """Does nothing: its launch cost is the floor any Triton kernel call pays on this host."""
    tl.store(X + tl.arange(0, 1), tl.zeros((1,), tl.float32), mask=tl.arange(0, 1) < n)


def host_us(fn, n=300):
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(n):
        fn()
    host = (time.perf_counter() - start) / n * 1e6
    torch.cuda.synchronize()
    return host


buf = torch.empty(1, device="cuda")
cases = {
    "empty Triton kernel launch": lambda: _empty_kernel[(1,)](buf, 0),
    "torch.empty_like (4096 x 64)": lambda: torch.empty_like(x2),
    "eager expression": lambda: g * torch.tanh(a * x) + b,
    "launcher.forward": lambda: launcher.forward(x2, a.detach(), g.detach(), b.detach(), x2.dtype),
    "launcher.forward_plan": lambda: launcher.forward_plan(x2),
    "ops.validate": lambda: ops.validate(x, a, g, b),
    "torch.ops.dyt.forward (no grad)": lambda: torch.ops.dyt.forward(x2, a.detach(), g.detach(), b.detach()),
    "dyt.dyt (autograd)": lambda: dyt.dyt(x, a, g, b),
    "launcher.backward": lambda: launcher.backward(
        dy, x2, a.detach(), g.detach(), x2.dtype, a.dtype, g.dtype, b.dtype
    ),
}
for name, fn in cases.items():
    print(f"{name:34s} {host_us(fn):8.1f} us host per call")
prof = cProfile.Profile()
prof.enable()
for _ in range(200):
    dyt.dyt(x, a, g, b)
prof.disable()
torch.cuda.synchronize()
pstats.Stats(prof).sort_stats("tottime").print_stats(15)

# The same shapes timed on the GPU at every layer (do_bench medians, us): a gap between layers that
# grows with the data is not host time.
from triton.testing import do_bench  # noqa: E402

for M, N in [(4096, 64), (1048576, 64), (524288, 128), (65536, 1024), (16384, 4096)]:
    xs = torch.randn(M, N, device="cuda", dtype=torch.bfloat16)
    xg = xs.clone().requires_grad_()
    p = [torch.randn(N, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
    al = torch.full((1,), 0.5, device="cuda", dtype=torch.bfloat16)
    ag, gg, bg = (t.clone().requires_grad_() for t in (al, *p))
    calls = {
        "launcher": lambda xs=xs, al=al, p=p: launcher.forward(xs, al, p[0], p[1], xs.dtype),
        "op": lambda xs=xs, al=al, p=p: torch.ops.dyt.forward(xs, al, p[0], p[1]),
        "dyt.dyt": lambda xg=xg, ag=ag, gg=gg, bg=bg: dyt.dyt(xg, ag, gg, bg),
    }
    row = {k: do_bench(fn, return_mode="median") for k, fn in calls.items()}
    plan = launcher.forward_plan(xs)
    print(M, N, {k: round(v * 1e3, 1) for k, v in row.items()}, plan)
