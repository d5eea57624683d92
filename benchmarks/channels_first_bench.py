"""Channels-first DyT on the GPU: dyt.dyt_channels_first against the paper's module, torch.compile and a copy.

    python benchmarks/channels_first_bench.py --ceiling-gbps 4246
    python benchmarks/channels_first_bench.py --sweep   # kernel time of each channels_first table variant

dyt.dyt_channels_first (copy-free kernels) against the paper's eager module, torch.compile of it, and the
path through a channels-last copy, in CUDA-graph replay time (host excluded) and as a ratio to the copy
ceiling counting the bytes a copy-free kernel moves (x read + y written forward; x, dy read + dx written
backward). The backward is (forward + torch.autograd.grad's backward) less the forward: no gradient
accumulation into .grad. The last two columns time forward and forward + backward call after call without
a graph (host included: where the host is slower than the GPU, it sets the pace). Needs a CUDA GPU;
--ceiling-gbps is the GPU's copy rate (the copy ceiling of `python -m dyt bench`'s report).

--sweep times dyt.launcher.forward / dyt.launcher.backward (channels_first=True) with the committed table
("committed"), and with each candidate of `python -m dyt tune --channels-first` as the widest 16-bit
entries' channels_first choice (dyt.planner.CHANNELS_FIRST) at every spatial size ("entry": the entry's
own tile), through dyt.launcher.overrides(table=...), interleaved in rounds; the tuner times the same
candidates, one class of spatial size at a time.
"""

import argparse
import math

import torch
from triton.testing import do_bench, do_bench_cudagraph

import dyt
from dyt import launcher, planner
from dyt.service import tune

SHAPES = [(64, 96, 56, 56), (64, 192, 28, 28), (64, 384, 14, 14), (256, 768, 7, 7), (8, 96, 56, 56)]
# The candidates of `python -m dyt tune --channels-first` (dyt.service.tune.CF_CANDIDATES), by name.
FWD_VARIANTS = {"committed": None, **{tune.candidate_name(c): c for c in tune.CF_CANDIDATES["fwd"]}}
BWD_VARIANTS = {"committed": None, **{tune.candidate_name(c): c for c in tune.CF_CANDIDATES["bwd"]}}


def paper(x, a, g, b):
    return torch.tanh(a * x) * g[:, None, None] + b[:, None, None]


def through_copy(x, a, g, b):
    """DyT over dim 1 through a channels-last copy: the path without the channels-first mode."""
    return dyt.dyt(x.movedim(1, -1), a, g, b).movedim(-1, 1)


def graph_us(fn, rep=200) -> float:
    return do_bench_cudagraph(fn, rep=rep) * 1e3


def _inputs(shape):
    x = torch.randn(shape, device="cuda", dtype=torch.bfloat16).requires_grad_()
    C = shape[1]
    a = torch.full((1,), 0.5, device="cuda", requires_grad=True)
    g = (1 + 0.5 * torch.randn(C, device="cuda")).requires_grad_()
    b = torch.randn(C, device="cuda").requires_grad_()
    return x, torch.randn_like(x), a, g, b


def _ratio(n_bytes: float, us: float, ceiling_gbps: float) -> float:
    return n_bytes / (us * 1e-6) / 1e9 / ceiling_gbps


def compare(ceiling_gbps: float) -> None:
    torch._dynamo.config.cache_size_limit = max(64, torch._dynamo.config.cache_size_limit)
    compiled = torch.compile(paper)
    print(f"{'shape':>18s} {'variant':>14s} {'fwd us':>8s} {'ratio':>6s} {'bwd us':>8s} {'ratio':>6s} "
          f"{'fwd+bwd us':>10s} {'ratio':>6s} {'host fwd':>8s} {'host f+b':>8s}")  # fmt: skip
    for shape in SHAPES:
        x, dy, a, g, b = _inputs(shape)
        nbytes = x.numel() * x.element_size()
        args_ = (x, a, g, b)
        variants = (("dyt", dyt.dyt_channels_first), ("paper", paper), ("compiled paper", compiled),
                    ("via copy", through_copy))  # fmt: skip
        for name, fn in variants:
            try:
                fwd = graph_us(lambda fn=fn, args_=args_: fn(*args_))

                def step(fn=fn, args_=args_, dy=dy):
                    return torch.autograd.grad(fn(*args_), args_, dy)

                both = graph_us(step)
                host_fwd = do_bench(lambda fn=fn, args_=args_: fn(*args_), rep=200) * 1e3
                host_both = do_bench(step, rep=200) * 1e3
            except Exception as exc:  # noqa: BLE001 - a failing variant is a row
                print(f"{shape!s:>18s} {name:>14s} error: {exc}")
                continue
            bwd = both - fwd
            r = [_ratio(n * nbytes, t, ceiling_gbps) for n, t in ((2, fwd), (3, bwd), (5, both))]
            print(f"{shape!s:>18s} {name:>14s} {fwd:8.1f} {r[0]:6.3f} {bwd:8.1f} {r[1]:6.3f} {both:10.1f} "
                  f"{r[2]:6.3f} {host_fwd:8.1f} {host_both:8.1f}")  # fmt: skip


def _with_variant(table: planner.LaunchTable, mode: str, variant) -> planner.LaunchTable:
    return table if variant is None else tune.with_channels_first(table, mode, variant)


def sweep(ceiling_gbps: float, rounds: int) -> None:
    table = planner.load_table("sm90")
    f32 = torch.float32
    times: dict[tuple, list[float]] = {}
    for _ in range(rounds):
        for shape in SHAPES:
            x, dy, a, g, b = (t.detach() for t in _inputs(shape))
            calls = {
                "fwd": lambda x=x, a=a, g=g, b=b: launcher.forward(x, a, g, b, x.dtype, channels_first=True),
                "bwd": lambda x=x, dy=dy, a=a, g=g: launcher.backward(dy, x, a, g, x.dtype, f32, f32, f32,
                                                                      channels_first=True),
            }  # fmt: skip
            for mode, variants in (("fwd", FWD_VARIANTS), ("bwd", BWD_VARIANTS)):
                for name, variant in variants.items():
                    with launcher.overrides(table=_with_variant(table, mode, variant)):
                        times.setdefault((mode, name, shape), []).append(graph_us(calls[mode], rep=50))
    for mode, variants in (("fwd", FWD_VARIANTS), ("bwd", BWD_VARIANTS)):
        moved = 2 if mode == "fwd" else 3
        for name in variants:
            rows = [(shape, min(times[(mode, name, shape)])) for shape in SHAPES]
            ratios = [_ratio(moved * math.prod(shape) * 2, us, ceiling_gbps) for shape, us in rows]
            cells = " ".join(f"{us:7.1f} ({r:.2f})" for (_, us), r in zip(rows, ratios, strict=True))
            print(f"{mode} {name:>14s} geomean {math.prod(ratios) ** (1 / len(ratios)):.3f}: {cells}")
    print("shapes:", " ".join(str(s) for s in SHAPES))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ceiling-gbps", type=float, default=4246.0, help="the GPU's copy rate")
    parser.add_argument("--sweep", action="store_true", help="time the channels_first table variants")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    if args.sweep:
        sweep(args.ceiling_gbps, args.rounds)
    else:
        compare(args.ceiling_gbps)


if __name__ == "__main__":
    main()
