"""Host (CPU) time per call of each layer of the stack on a small GPU shape, the JIT launch path beside
the direct one (dyt.direct_launch), and a cProfile of `dyt.dyt`: where the microseconds between the
public API and the kernel launch go. Needs a CUDA GPU; run it alone (other processes on the host's
CPUs move these numbers by tens of percent).

    CUDA_VISIBLE_DEVICES=0 python tools/host_overhead.py
"""

import contextlib
import cProfile
import pstats
import statistics
import time

import torch
import triton
import triton.language as tl
from triton.testing import do_bench

import dyt
from dyt import direct_launch, launcher, ops, planner

x = torch.randn(4096, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
a = torch.full((1,), 0.5, device="cuda", requires_grad=True)
g = torch.randn(64, device="cuda", requires_grad=True)
b = torch.randn(64, device="cuda", requires_grad=True)
dy = torch.randn_like(x)
x2, a2, g2, b2 = (t.detach() for t in (x, a, g, b))


@triton.jit
def _empty_kernel(X, n, ONE: tl.constexpr):
    """Does nothing: its launch cost is the floor any Triton kernel call pays on this host."""
    tl.store(X + tl.arange(0, ONE), tl.zeros((ONE,), tl.float32), mask=tl.arange(0, ONE) < n)


@contextlib.contextmanager
def jit_path():
    """Every launch through Triton's JIT, as without dyt.direct_launch."""
    real = direct_launch.CompiledKernel.launch

    def jit(self, spec, tensors, *, direct):
        real(self, spec, tensors, direct=False)

    direct_launch.CompiledKernel.launch = jit
    try:
        yield
    finally:
        direct_launch.CompiledKernel.launch = real


def host_us(fn, n=200, repeats=7):
    """Median over repeats of the mean host time of n calls (the GPU keeps up: these kernels are short)."""
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


def fwd_bwd():
    dyt.dyt(x, a, g, b).backward(dy)


def eager_fwd_bwd():
    (g * torch.tanh(a * x) + b).backward(dy)


buf = torch.empty(1, device="cuda")
empty = direct_launch.CompiledKernel(_empty_kernel)
empty_launch = planner.KernelLaunch((1,), (0,), (("ONE", 1),), num_warps=4)
cases = {
    "empty Triton kernel, JIT launch": lambda: _empty_kernel[(1,)](buf, 0, ONE=1),
    "empty Triton kernel, direct launch": lambda: empty.launch(empty_launch, (buf,), direct=True),
    "torch.empty_like (4096 x 64)": lambda: torch.empty_like(x2),
    "ops.validate": lambda: ops.validate(x, a, g, b),
    "launcher.forward_plan": lambda: launcher.forward_plan(x2),
    "launcher.forward": lambda: launcher.forward(x2, a2, g2, b2, x2.dtype),
    "launcher.backward": lambda: launcher.backward(dy, x2, a2, g2, x2.dtype, a.dtype, g.dtype, b.dtype),
    "dyt.dyt forward (autograd)": lambda: dyt.dyt(x, a, g, b),
    "dyt.dyt forward + backward": fwd_bwd,
    "eager expression forward": lambda: g * torch.tanh(a * x) + b,
    "eager expression forward + backward": eager_fwd_bwd,
    "torch.ops.dyt.forward (no grad)": lambda: torch.ops.dyt.forward(x2, a2, g2, b2),
}
jit_cases = ("launcher.forward", "launcher.backward", "dyt.dyt forward (autograd)",
             "dyt.dyt forward + backward")  # fmt: skip
print(f"{'host us per call':40s} {'direct':>8s} {'JIT':>8s}")
for name, fn in cases.items():
    direct = host_us(fn)
    if name in jit_cases:
        with jit_path():
            jit = f"{host_us(fn):8.1f}"
    else:
        jit = ""
    print(f"{name:40s} {direct:8.1f} {jit:>8s}")

prof = cProfile.Profile()
prof.enable()
for _ in range(200):
    fwd_bwd()
prof.disable()
torch.cuda.synchronize()
pstats.Stats(prof).sort_stats("tottime").print_stats(20)

# The same calls timed on the GPU (do_bench medians, us, host included where it is the longer part).
for M, N in [(4096, 64), (4096, 256), (1048576, 64), (65536, 1024), (16384, 4096)]:
    xs = torch.randn(M, N, device="cuda", dtype=torch.bfloat16)
    xg = xs.clone().requires_grad_()
    dys = torch.randn_like(xs)
    p = [torch.randn(N, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
    al = torch.full((1,), 0.5, device="cuda", dtype=torch.bfloat16)
    ag, gg, bg = (t.clone().requires_grad_() for t in (al, *p))
    y = dyt.dyt(xg, ag, gg, bg)
    calls = {
        "launcher fwd": lambda xs=xs, al=al, p=p: launcher.forward(xs, al, p[0], p[1], xs.dtype),
        "dyt.dyt fwd": lambda xg=xg, ag=ag, gg=gg, bg=bg: dyt.dyt(xg, ag, gg, bg),
        "launcher bwd": lambda xs=xs, dys=dys, al=al, p=p: launcher.backward(
            dys, xs, al, p[0], xs.dtype, al.dtype, p[0].dtype, p[1].dtype
        ),
        "autograd bwd": lambda y=y, dys=dys: y.backward(dys, retain_graph=True),
    }
    row = {k: round(do_bench(fn, return_mode="median") * 1e3, 1) for k, fn in calls.items()}
    print(M, N, row)
