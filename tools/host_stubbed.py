"""Host time of dyt's Python layers with every launch stubbed at the compiled launcher, on CPU tensors: the
Python between `dyt.dyt` and a kernel launch, apart from the GPU and the launcher itself. Runs on any
machine with Triton installed (no GPU); compare two trees by running it in each.

    python tools/host_stubbed.py --shape 64,197,384        # ViT-S/16's norms at batch 64
"""

import argparse
import statistics
import time
import types

import torch

import dyt
from dyt import direct_launch, launcher, ops


class _Compiled:
    """What a compiled kernel offers direct_launch: a launcher that does nothing."""

    function = 0
    packed_metadata = None

    def run(self, *args):
        pass


class _Jit:
    """Stands in for a @triton.jit kernel: its signature, and a compile that returns _Compiled."""

    def __init__(self, real):
        self.fn = real.fn

    def __getitem__(self, grid):
        return lambda *args, **kwargs: _Compiled()


def stub_launches() -> None:
    for compiled in (launcher.FORWARD, launcher.BACKWARD, launcher.FINISH):
        compiled.kernel = _Jit(compiled.kernel)
    driver = types.SimpleNamespace(get_current_stream=lambda index: 0)
    direct_launch._driver = types.SimpleNamespace(active=driver)
    ops._use_triton = lambda x: True
    launcher._INTERPRET = False
    torch.cuda.current_device = lambda: 0  # a CPU build has no device to ask; a tree that asks gets 0


def host_us(fn, n: int = 3000, repeats: int = 9) -> float:
    """Median over repeats of the mean time of n calls, in microseconds."""
    for _ in range(100):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        times.append((time.perf_counter() - start) / n * 1e6)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="64,197,384", help="x's shape, comma separated (last: channels)")
    args = parser.parse_args()
    stub_launches()
    shape = tuple(int(s) for s in args.shape.split(","))
    x = torch.randn(*shape, dtype=torch.bfloat16, requires_grad=True)
    a = torch.full((1,), 0.5, requires_grad=True)
    g, b = (torch.randn(shape[-1], requires_grad=True) for _ in range(2))
    dy = torch.randn_like(x)
    leaves = (x, a, g, b)
    detached = tuple(t.detach() for t in leaves)
    cases = {
        "dyt.dyt forward (autograd)": lambda: dyt.dyt(*leaves),
        "dyt.dyt forward (no grad)": lambda: dyt.dyt(*detached),
        "ops.backward_impl": lambda: ops.backward_impl(dy, *detached),
        "forward + backward (autograd.grad)": lambda: torch.autograd.grad(dyt.dyt(*leaves), leaves, dy),
    }
    print(f"host us per call, launches stubbed, x {tuple(shape)} bf16")
    for name, fn in cases.items():
        print(f"  {name:36s} {host_us(fn):8.2f}")


if __name__ == "__main__":
    main()
