"""What torch's own elementwise kernels reach at the channels-first shapes' bytes, beside dyt's kernels there.

    python benchmarks/channels_first_ceiling.py

CUDA-graph replays of a copy of x (two tensors' bytes, as dyt's forward moves) and of x + dy into a third
tensor (three, as dyt's backward), dyt's channels-first forward and backward (dyt.launcher.forward and
dyt.launcher.backward with channels_first=True: the kernels alone, no autograd), and dyt's row kernels on
the same bytes as rows of 4096 ("rows": what the shape's width costs), interleaved in three rounds, the
middle time of each, and the rate against a 1 GiB copy's. At these sizes part of the data stays in the L2
cache between replays, so a rate can pass the big copy's. Needs a CUDA GPU.
"""

import argparse

import torch
from triton.testing import do_bench_cudagraph

from dyt import launcher

SHAPES = [(64, 96, 56, 56), (64, 384, 14, 14), (256, 768, 7, 7), (8, 96, 56, 56)]


def graph_us(fn) -> float:
    return do_bench_cudagraph(fn, rep=60) * 1e3


def copy_rate_gbps() -> float:
    big = torch.empty(2**28, device="cuda", dtype=torch.bfloat16)
    out = torch.empty_like(big)
    return 2 * big.numel() * 2 / (graph_us(lambda: out.copy_(big)) * 1e-6) / 1e9


def calls(shape):
    """name -> (call, tensors' worth of bytes it moves)."""
    f32 = torch.float32
    x = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
    dy, out = torch.randn_like(x), torch.empty_like(x)
    C = shape[1]
    a, g, b = (
        torch.full((1,), 0.5, device="cuda"),
        torch.randn(C, device="cuda"),
        torch.randn(C, device="cuda"),
    )
    rows, rows_dy = x.view(-1, 4096), dy.view(-1, 4096)
    rows_g, rows_b = torch.randn(4096, device="cuda"), torch.randn(4096, device="cuda")
    return {
        "copy": (lambda: out.copy_(x), 2),
        "add": (lambda: torch.add(x, dy, out=out), 3),
        "dyt cf fwd": (lambda: launcher.forward(x, a, g, b, x.dtype, channels_first=True), 2),
        "dyt cf bwd": (
            lambda: launcher.backward(dy, x, a, g, x.dtype, f32, f32, f32, channels_first=True),
            3,
        ),
        "dyt rows fwd": (lambda: launcher.forward(rows, a, rows_g, rows_b, x.dtype), 2),
        "dyt rows bwd": (lambda: launcher.backward(rows_dy, rows, a, rows_g, x.dtype, f32, f32, f32), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args()
    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU (torch.cuda.is_available() is False)")
    ceiling = copy_rate_gbps()
    print(f"copy of 1 GiB: {ceiling:.0f} GB/s")
    for shape in SHAPES:
        rows = calls(shape)
        times = {name: [] for name in rows}
        for _ in range(3):
            for name, (fn, _) in rows.items():
                times[name].append(graph_us(fn))
        tensor_bytes = torch.Size(shape).numel() * 2
        cells = []
        for name, (_, tensors) in rows.items():
            us = sorted(times[name])[1]
            gbps = tensors * tensor_bytes / us / 1e3
            cells.append(f"{name} {us:.1f} us {gbps:.0f} GB/s ({gbps / ceiling:.2f})")
        print(shape, " | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
