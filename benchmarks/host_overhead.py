"""Host (CPU) time per call of each public layer between dyt.dyt and its kernels, beside the eager expression.

    CUDA_VISIBLE_DEVICES=0 python benchmarks/host_overhead.py [--shape 4096x64] [--profile]
    CUDA_VISIBLE_DEVICES=0 DYT_NATIVE=0 python benchmarks/host_overhead.py   # dyt's Python path

On a small bf16 shape, where every kernel is shorter than the host's work: an empty Triton kernel's launch
(the floor any Triton call pays on this host), torch.empty_like, dyt.launcher.forward_plan (the cached
plan), dyt.launcher.forward and dyt.launcher.backward (the kernels without autograd), dyt.dyt forward
under autograd, under no_grad, and forward + backward, and the eager expression gamma * tanh(alpha * x) +
beta. Each is the median over rounds of the mean host time of a batch of calls (synchronized only around
the batch: the GPU keeps up). Then GPU time per call (triton.testing.do_bench medians, host included where
it is the longer part) of the launcher's and dyt.dyt's forward and backward at larger shapes. --profile
adds cProfile's table of dyt.dyt forward + backward. Which host path dyt.dyt takes (dyt.native's C++ path,
or the Python path where DYT_NATIVE=0 or it cannot be built) is printed first. Needs a CUDA GPU; run it
alone (other processes on the host's CPUs move these numbers by tens of percent).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import time

import torch
import triton
import triton.language as tl
from triton.testing import do_bench

import dyt
from dyt import launcher, native

GPU_SHAPES = "4096x64,4096x256,1048576x64,65536x1024,16384x4096"


@triton.jit
def empty_kernel(X, n, ONE: tl.constexpr):
    """Does nothing: its launch cost is the floor any Triton kernel call pays on this host."""
    tl.store(X + tl.arange(0, ONE), tl.zeros((ONE,), tl.float32), mask=tl.arange(0, ONE) < n)


def host_us(fn, calls: int, rounds: int) -> float:
    """Median over rounds of the mean host time of `calls` calls, in microseconds."""
    for _ in range(20):
        fn()
    times = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - start) / calls * 1e6)
    torch.cuda.synchronize()
    return statistics.median(times)


def inputs(M: int, N: int, requires_grad: bool):
    """x (M, N) bf16, alpha (1,), gamma and beta (N,) float32, dy like x."""
    x = torch.randn(M, N, device="cuda", dtype=torch.bfloat16, requires_grad=requires_grad)
    alpha = torch.full((1,), 0.5, device="cuda", requires_grad=requires_grad)
    gamma, beta = (torch.randn(N, device="cuda", requires_grad=requires_grad) for _ in range(2))
    return x, alpha, gamma, beta, torch.randn(M, N, device="cuda", dtype=torch.bfloat16)


def host_table(M: int, N: int, calls: int, rounds: int) -> None:
    x, a, g, b, dy = inputs(M, N, requires_grad=True)
    x2, a2, g2, b2 = (t.detach() for t in (x, a, g, b))
    f32 = torch.float32
    buf = torch.empty(1, device="cuda")

    def dyt_nograd():
        with torch.no_grad():
            dyt.dyt(x, a, g, b)

    cases = {
        "empty Triton kernel (JIT launch)": lambda: empty_kernel[(1,)](buf, 0, ONE=1),
        f"torch.empty_like ({M} x {N})": lambda: torch.empty_like(x2),
        "dyt.launcher.forward_plan": lambda: launcher.forward_plan(x2),
        "dyt.launcher.forward": lambda: launcher.forward(x2, a2, g2, b2, x2.dtype),
        "dyt.launcher.backward": lambda: launcher.backward(dy, x2, a2, g2, x2.dtype, f32, f32, f32),
        "dyt.dyt forward (autograd)": lambda: dyt.dyt(x, a, g, b),
        "dyt.dyt forward (no_grad)": dyt_nograd,
        "dyt.dyt forward + backward": lambda: dyt.dyt(x, a, g, b).backward(dy),
        "eager expression forward": lambda: g * torch.tanh(a * x) + b,
        "eager expression forward + backward": lambda: (g * torch.tanh(a * x) + b).backward(dy),
    }
    print(f"host us per call, x {M} x {N} bf16, median of {rounds} rounds of {calls} calls")
    for name, fn in cases.items():
        print(f"  {name:40s} {host_us(fn, calls, rounds):8.1f}")


def profile(M: int, N: int) -> None:
    x, a, g, b, dy = inputs(M, N, requires_grad=True)
    for _ in range(20):
        dyt.dyt(x, a, g, b).backward(dy)
    torch.cuda.synchronize()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(200):
        dyt.dyt(x, a, g, b).backward(dy)
    prof.disable()
    torch.cuda.synchronize()
    print(f"\ncProfile of 200 dyt.dyt forward + backward calls, x {M} x {N} bf16")
    pstats.Stats(prof).sort_stats("tottime").print_stats(20)


def gpu_calls(M: int, N: int) -> dict:
    """The launcher's kernels beside dyt.dyt's forward and autograd's backward, at (M, N)."""
    f32 = torch.float32
    x, a, g, b, dy = inputs(M, N, requires_grad=True)
    x2, a2, g2, b2 = (t.detach() for t in (x, a, g, b))
    y = dyt.dyt(x, a, g, b)
    return {
        "launcher fwd": lambda: launcher.forward(x2, a2, g2, b2, x2.dtype),
        "dyt.dyt fwd": lambda: dyt.dyt(x, a, g, b),
        "launcher bwd": lambda: launcher.backward(dy, x2, a2, g2, x2.dtype, f32, f32, f32),
        "autograd bwd": lambda: y.backward(dy, retain_graph=True),
    }


def gpu_table(shapes: list[tuple[int, int]]) -> None:
    print("\nGPU us per call (do_bench median; host included where it is the longer part)")
    for M, N in shapes:
        row = {k: round(do_bench(fn, return_mode="median") * 1e3, 1) for k, fn in gpu_calls(M, N).items()}
        print(f"  {M:>8d} x {N:<6d} {row}")


def parse_shape(text: str) -> tuple[int, int]:
    M, N = (int(v) for v in text.lower().split("x"))
    return M, N


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="4096x64", help="MxN of the host table (default 4096x64)")
    parser.add_argument("--calls", type=int, default=200, help="calls per round")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--gpu-shapes", default=GPU_SHAPES, help="comma list of MxN; empty: no GPU table")
    parser.add_argument("--profile", action="store_true", help="add cProfile's table of dyt.dyt")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU (torch.cuda.is_available() is False)")
    M, N = parse_shape(args.shape)
    state, reason = native.state() if native.ensure() is None else ("loaded", "")
    print(f"dyt.dyt's host path: {'native' if state == 'loaded' else 'Python'} (dyt.native: {state}"
          f"{'; ' + reason if reason else ''})")  # fmt: skip
    host_table(M, N, args.calls, args.rounds)
    if args.profile:
        profile(M, N)
    if args.gpu_shapes:
        gpu_table([parse_shape(s) for s in args.gpu_shapes.split(",")])


if __name__ == "__main__":
    main()
