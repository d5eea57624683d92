"""Host time of dyt's Python layers with every launch stubbed at the compiled launcher, on CPU tensors: the
Python between `dyt.dyt` and a kernel launch, apart from the GPU and the launcher itself. Runs on any
machine with Triton installed (no GPU); compare two trees by running it in each.

    python tools/host_stubbed.py --shape 64,197,384        # ViT-S/16's norms at batch 64
    python tools/host_stubbed.py --shape 8,96,56,56 --channels-first   # ConvNeXt-T's first stage
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


class _AttributeLookupDyT(dyt.DyT):
    """dyt.DyT with its parameters read as attributes (nn.Module.__getattr__), not from _parameters as
    DyT.forward reads them."""

    def forward(self, x):
        return ops.dyt(x, self.alpha, self.weight, self.bias)


def stub_launches() -> None:
    for compiled in (launcher.FORWARD, launcher.BACKWARD, launcher.FINISH, launcher.FINISH_CF):
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
    parser.add_argument("--channels-first", action="store_true",
                        help="x is (N, C, *spatial), through dyt.dyt_channels_first")  # fmt: skip
    args = parser.parse_args()
    stub_launches()
    shape = tuple(int(s) for s in args.shape.split(","))
    x = torch.randn(*shape, dtype=torch.bfloat16, requires_grad=True)
    a = torch.full((1,), 0.5, requires_grad=True)
    C = shape[1] if args.channels_first else shape[-1]
    g, b = (torch.randn(C, requires_grad=True) for _ in range(2))
    dy = torch.randn_like(x)
    leaves = (x, a, g, b)
    detached = tuple(t.detach() for t in leaves)
    call = dyt.dyt_channels_first if args.channels_first else dyt.dyt
    name = call.__name__
    cases = {
        f"dyt.{name} forward (autograd)": lambda: call(*leaves),
        f"dyt.{name} forward (no grad)": lambda: call(*detached),
        "forward + backward (autograd.grad)": lambda: torch.autograd.grad(call(*leaves), leaves, dy),
    }
    if not args.channels_first:
        cases["ops.backward_impl"] = lambda: ops.backward_impl(dy, *detached)
        module, lookups = dyt.DyT(C).requires_grad_(False), _AttributeLookupDyT(C).requires_grad_(False)
        cases["dyt.DyT forward (no grad)"] = lambda: module(detached[0])
        cases["  the same, parameters as attributes"] = lambda: lookups(detached[0])
    # The yardstick: the eager expression's dispatch alone (aten ops on tensors too small to compute).
    tiny = (torch.randn(2, 3, 8, dtype=torch.bfloat16, requires_grad=True), a, *(
        torch.randn(8, requires_grad=True) for _ in range(2)))  # fmt: skip
    tiny_dy = torch.randn_like(tiny[0])
    cases["eager expression fwd + bwd, 2x3x8"] = lambda: torch.autograd.grad(
        torch.tanh(tiny[1] * tiny[0]) * tiny[2] + tiny[3], tiny, tiny_dy
    )
    print(f"host us per call, launches stubbed, x {tuple(shape)} bf16")
    for name, fn in cases.items():
        print(f"  {name:36s} {host_us(fn):8.2f}")


if __name__ == "__main__":
    main()
