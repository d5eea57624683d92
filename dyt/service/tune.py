"""Timing-based tuning, opt-in and offline: measures candidate tiles per (mode, dtype, width bucket) on
the GPU at hand and writes the launch table (dyt/tables/<arch>.json) that every later run reads without
timing anything. `python -m dyt tune [--out PATH] [--budget-s S] [--buckets 16bit,fp32]`.
"""

from __future__ import annotations

import argparse
import copy
import json
import pathlib
import time

from dyt import planner
from dyt.service.env import git_sha

# 768 (a common model width) has its own bucket: it runs as 3 x 256 column blocks (dyt.planner.tile_shape).
WIDTH_BUCKETS = [64, 128, 256, 512, 768, 1024, 2048, 4096, 8192, None]
BUCKET_DTYPES = {"16bit": "bfloat16", "fp32": "float32"}
# (elements per tile, num_warps). The backward keeps three float32 accumulators per element in registers
# (its loads in flight sit in shared memory, see NUM_STAGES), so it stays at 8-32 elements per thread.
TILES = {
    "fwd": [(1024, 4), (2048, 4), (4096, 4), (4096, 8), (8192, 8)],
    "bwd": [(1024, 4), (2048, 4), (4096, 4), (4096, 8)],
}
# Column blocks tried for rows wider than WIDE_FROM. The backward also tries 512: under the partial-traffic
# budget its programs number (row groups) x (column blocks), so narrower blocks allow more of them.
WIDE_BLOCK_N = {"fwd": [1024, 2048, 4096], "bwd": [512, 1024, 2048]}
WIDE_FROM = {"fwd": 2048, "bwd": 2048}  # fwd from 2048: 1x1024x4 beat 2x2048x8 in fp32 (docs/kernels.md)
PROGRAMS_PER_SM = [2, 3, 4, 6, 8]  # 2: 4x1024 backward tiles (255 registers, docs/kernels.md)
NUM_STAGES = [3, 4]  # the backward loop's pipelining depth (dyt.kernels.dyt_bwd_kernel)
SIGNS = ["select", "bitwise"]  # how the forward's tanh takes its sign (dyt.kernels._tanh)
POLYS = [{}, {"poly": 3}]  # the forward tanh's polynomial (dyt.planner.POLY_TERMS): 5 terms (no field) or 3
ROW_ORDERS = ["chunked", "strided"]  # the backward's persistent loop: see dyt.kernels.dyt_bwd_kernel
# Fields a bucket keeps from its current entry: "copies_as_rows" and "folded" matter only where the entry
# serves folded narrower widths (dyt.planner.BwdPlan, dyt.planner.FOLDED), "fp32_params" only with float32
# parameters on 16-bit x (dyt.planner.FP32_PARAMS), "channels_first" only on channels-first rows
# (dyt.planner.CHANNELS_FIRST; tools/channels_first_bench.py --sweep); timing the bucket's own width in one
# dtype sees none.
HAND_SET = ("copies_as_rows", planner.FP32_PARAMS, planner.FOLDED, planner.CHANNELS_FIRST)


def candidates(mode: str, width: int) -> list[dict]:
    widest = planner.next_pow2(width)  # a wider block would shrink to this one: the same candidate again
    block_ns = [widest] if width < WIDE_FROM[mode] else [b for b in WIDE_BLOCK_N[mode] if b <= widest]
    out = []
    for block_n in block_ns:
        for tile, warps in TILES[mode]:
            if tile < block_n:
                continue
            entry = {"max_width": None, "BLOCK_M": tile // block_n, "BLOCK_N": block_n, "num_warps": warps}
            if mode == "fwd":
                out += [{**entry, "sign": sign, **poly} for sign in SIGNS for poly in POLYS]
                continue
            for pps in PROGRAMS_PER_SM:
                for order in ROW_ORDERS:
                    for stages in NUM_STAGES:
                        knobs = {"programs_per_sm": pps, "row_order": order, "num_stages": stages}
                        out.append({**entry, **knobs})
    return out


def tuned_entry(best: dict, current: dict, max_width: int | None, ms: float) -> dict:
    """The bucket's new entry: the fastest candidate, with the HAND_SET fields of the entry it replaces."""
    kept = {k: current[k] for k in HAND_SET if k in current and current["max_width"] == max_width}
    return {**best, **kept, "max_width": max_width, "median_us": round(ms * 1e3, 2)}


def _time(mode, entry, bucket, x, dy, alpha, gamma, beta):
    from dyt import launcher
    from dyt.service.bench import replay_median_ms

    table = {"fwd": {bucket: [entry]}, "bwd": {bucket: [entry]}}
    with launcher.overrides(table=table):
        if mode == "fwd":
            fn = lambda: launcher.forward(x, alpha, gamma, beta, x.dtype)
        else:
            fn = lambda: launcher.backward(dy, x, alpha, gamma, x.dtype, alpha.dtype, gamma.dtype, beta.dtype)
        try:
            # Timed as CUDA-graph replays: the host's launch cost (tens of microseconds on a slow host
            # CPU) would otherwise swamp the kernels being compared.
            return replay_median_ms(fn, reps=10, replays=5)
        except Exception as exc:  # a config that does not compile or launch is simply not chosen
            print(f"  skip {entry}: {type(exc).__name__}: {exc}")
            return float("inf")


def tune(out: pathlib.Path, budget_s: float, buckets: list[str], modes: list[str], widths=None) -> dict:
    """Tunes the width buckets named in widths (max_width values; None: all) and keeps the others."""
    import torch

    from dyt import launcher

    arch = launcher.target_of(torch.device("cuda")).arch
    table = copy.deepcopy(planner.load_table(arch))
    table["arch"] = arch
    gpu = torch.cuda.get_device_name()
    sha = git_sha()[:7]
    table["note"] = f"Written by `python -m dyt tune` on {gpu} at {sha} (medians of CUDA-graph replays)"
    start = time.time()
    for bucket in buckets:
        dtype = getattr(torch, BUCKET_DTYPES[bucket])
        for mode in modes:
            entries = []
            for max_width in WIDTH_BUCKETS:
                width = max_width or 16384
                rows = 2**26 // width
                current = planner.table_entry(table, mode, 2 if bucket == "16bit" else 4, width)
                skipped = widths is not None and width not in widths
                if skipped or time.time() - start > budget_s:
                    print(f"{mode} {bucket} width<={max_width} keeps its current entry")
                    entries.append(current | {"max_width": max_width})
                    continue
                x = torch.randn(rows, width, device="cuda", dtype=dtype)
                dy = torch.randn_like(x)
                alpha = torch.full((1,), 0.5, device="cuda", dtype=dtype)
                gamma = torch.randn(width, device="cuda", dtype=dtype)
                beta = torch.randn(width, device="cuda", dtype=dtype)
                timed = [
                    (_time(mode, c, bucket, x, dy, alpha, gamma, beta), c) for c in candidates(mode, width)
                ]
                ms, best = min(timed, key=lambda t: t[0])
                moved = (2 if mode == "fwd" else 3) * x.numel() * x.element_size()
                gbps = moved / ms / 1e6
                print(f"{mode} {bucket} width<={max_width}: {ms * 1e3:.1f} us {gbps:.0f} GB/s {best}")
                entries.append(tuned_entry(best, current, max_width, ms))
                del x, dy
            table[mode][bucket] = entries
    out.write_text(json.dumps(table, indent=1) + "\n")
    print(f"wrote {out}")
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dyt tune", description=__doc__)
    parser.add_argument("--out", type=pathlib.Path, default=None, help="default: dyt/tables/<arch>.json")
    parser.add_argument("--budget-s", type=float, default=600.0)
    parser.add_argument("--buckets", default="16bit,fp32")
    parser.add_argument("--modes", default="fwd,bwd")
    parser.add_argument("--widths", help="only these width buckets, e.g. 768,2048 (16384: the last)")
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("dyt tune: needs a CUDA GPU (it times kernels); none is visible")
        return 2
    from dyt import launcher

    arch = launcher.target_of(torch.device("cuda")).arch
    out = args.out or planner.TABLES / f"{arch}.json"
    widths = None if args.widths is None else {int(w) for w in args.widths.split(",")}
    tune(out, args.budget_s, args.buckets.split(","), args.modes.split(","), widths)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
