"""Channels-first DyT on the GPU: dyt.dyt_channels_first (copy-free kernels) against the paper's eager
module, torch.compile of it, and the path through a channels-last copy, in CUDA-graph replay time (host
excluded) and as a ratio to the copy ceiling counting the bytes a copy-free kernel moves (x read + y
written forward; x, dy read + dx written backward). The backward is torch.autograd.grad's (no gradient
accumulation into .grad). Needs a CUDA GPU.

    python tools/channels_first_bench.py --ceiling-gbps 4246
"""

import argparse

import torch
from triton.testing import do_bench_cudagraph

import dyt

SHAPES = [(64, 96, 56, 56), (64, 384, 14, 14), (256, 768, 7, 7), (8, 96, 56, 56)]


def paper(x, a, g, b):
    return torch.tanh(a * x) * g[:, None, None] + b[:, None, None]


def through_copy(x, a, g, b):
    """DyT over dim 1 through a channels-last copy: the path without the channels-first kernels."""
    return dyt.dyt(x.movedim(1, -1), a, g, b).movedim(-1, 1)


def graph_us(fn) -> float:
    return do_bench_cudagraph(fn, rep=200) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ceiling-gbps", type=float, default=4246.0, help="the GPU's copy rate")
    args = parser.parse_args()
    torch._dynamo.config.cache_size_limit = max(64, torch._dynamo.config.cache_size_limit)
    compiled = torch.compile(paper)
    print(
        f"{'shape':>18s} {'variant':>14s} {'fwd us':>8s} {'ratio':>6s} {'bwd us':>8s} {'ratio':>6s} "
        f"{'fwd+bwd us':>10s} {'ratio':>6s}"
    )
    for shape in SHAPES:
        C = shape[1]
        x = torch.randn(shape, device="cuda", dtype=torch.bfloat16).requires_grad_()
        dy = torch.randn_like(x)
        a = torch.full((1,), 0.5, device="cuda", requires_grad=True)
        g = (1 + 0.5 * torch.randn(C, device="cuda")).requires_grad_()
        b = torch.randn(C, device="cuda").requires_grad_()
        nbytes = x.numel() * x.element_size()
        args_ = (x, a, g, b)
        variants = (("dyt", dyt.dyt_channels_first), ("paper", paper), ("compiled paper", compiled),
                    ("via copy", through_copy))  # fmt: skip
        for name, fn in variants:
            try:
                fwd = graph_us(lambda fn=fn, args_=args_: fn(*args_))
                y = fn(*args_)
                bwd = graph_us(
                    lambda y=y, args_=args_, dy=dy: torch.autograd.grad(y, args_, dy, retain_graph=True)
                )
                both = graph_us(lambda fn=fn, args_=args_, dy=dy: torch.autograd.grad(fn(*args_), args_, dy))
            except Exception as exc:  # noqa: BLE001 - a failing variant is a row
                print(f"{shape!s:>18s} {name:>14s} error: {exc}")
                continue
            ratios = [
                n * nbytes / (t * 1e-6) / 1e9 / args.ceiling_gbps for n, t in ((2, fwd), (3, bwd), (5, both))
            ]
            print(
                f"{shape!s:>18s} {name:>14s} {fwd:8.1f} {ratios[0]:6.3f} {bwd:8.1f} {ratios[1]:6.3f} "
                f"{both:10.1f} {ratios[2]:6.3f}"
            )


if __name__ == "__main__":
    main()
