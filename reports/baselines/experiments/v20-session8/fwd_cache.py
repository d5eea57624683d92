"""Session 8 probe 2 (one H200), bf16 forward, CUDA-graph replays, rounds interleaved:

    python reports/baselines/experiments/v20-session8/fwd_cache.py

(a) Folded widths (64-512 in rows of 1024) ran ~2% slower than 1024 columns with the same tile and the
same instruction count (fwd_occ.log); the one difference is gamma's and beta's addresses: with a period
of 64 every warp of every program loads the same 128 bytes. Variants on one shared buffer: the plan as
it is (prod); gamma and beta repeated to 1024 columns beforehand and indexed plainly (expanded: the
1024-column kernel on the folded problem); cache hints (x through L2 only, .cg; x evict_first; gamma and
beta evict_last). (b) 768 columns: the plan (rows of 3072) against 256-wide blocks as before (split,
select and bitwise sign), at the bench's shapes. (c) At 1024 columns, tiles of 64 elements per thread
(8x1024x4, 4x2048x4) and 2x2048x4; at 2048 columns (HINTS=0 too) the table's 2x2048x8 (prod) against
4x1024x4, 2x1024x4 and 1x2048x4. Every variant's y is checked bit for bit.
"""
# ruff: noqa: B023 - each closure is timed in the loop iteration that defines it

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.abspath(os.path.join(HERE, *[".."] * 4)))  # the repo

import torch  # noqa: E402
from fwd_occ import const_call, retiled  # noqa: E402

from dyt import launch, launcher  # noqa: E402
from dyt.bench import replay_median_ms  # noqa: E402

ROUNDS = int(os.environ.get("ROUNDS", "5"))
WIDTHS = [int(w) for w in os.environ.get("WIDTHS", "1024,64,256,512").split(",")]
HINTS = os.environ.get("HINTS", "1") == "1"  # the cache-hint and tile variants (b) and (c)
# 2048 columns: the tiles tried beside the table's 2x2048x8, "BMxBNxWARPS[xselect]" (default: run 5's)
TILES_2048 = [
    tuple(int(v) for v in t.split("x"))
    for t in os.environ.get("TILES_2048", "4x1024x4,2x1024x4,1x2048x4").split(",")
]


def folded_variants(plan, x2d, y, a, g, b, width):
    out = {"prod": lambda: launcher.launch_forward(plan, x2d, y, a, g, b)}
    if plan.gamma_period:
        reps = plan.N // width
        ge, be = g.repeat(reps), b.repeat(reps)
        flat = plan.replaced(gamma_period=0)
        xw, yw = x2d.view(plan.M, plan.N), y.view(plan.M, plan.N)  # not ragged at 2^26 elements
        out["expanded"] = lambda: launcher.launch_forward(flat, xw, yw, a, ge, be)
    if plan.N == 2048:  # the table's 2x2048x8 against the 4096-16384 entries' 4x1024x4
        for bm, bn, warps in TILES_2048:
            p = retiled(plan, bm, bn).replaced(num_warps=warps)
            out[f"{bm}x{bn}x{warps}"] = lambda p=p: launcher.launch_forward(p, x2d, y, a, g, b)
        select = plan.replaced(sign_select=True)
        out["select"] = lambda: launcher.launch_forward(select, x2d, y, a, g, b)
    if HINTS:
        out["x_cg"] = const_call(plan, x2d, y, a, g, b, X_CACHE=".cg")
        out["x_first"] = const_call(plan, x2d, y, a, g, b, X_EVICT="evict_first")
        out["p_last"] = const_call(plan, x2d, y, a, g, b, P_EVICT="evict_last")
        out["x_first_p_last"] = const_call(plan, x2d, y, a, g, b, X_EVICT="evict_first", P_EVICT="evict_last")
    if HINTS and plan.N == 1024 and not plan.gamma_period:
        for bm, bn, warps in ((8, 1024, 4), (4, 2048, 4), (2, 2048, 4)):
            p = retiled(plan, bm, bn).replaced(num_warps=warps)
            out[f"{bm}x{bn}x{warps}"] = const_call(p, x2d, y, a, g, b)
    return out


def split_variants(plan, split, x2d, y, a, g, b):
    out = {"prod": lambda: launcher.launch_forward(plan, x2d, y, a, g, b)}
    for sel in (True, False):
        p = split.replaced(sign_select=sel)
        out[f"split_{'select' if sel else 'bitwise'}"] = lambda p=p: launcher.launch_forward(
            p, x2d, y, a, g, b
        )
    return out


def main():
    torch.manual_seed(0)
    n = 2**26
    flat_x = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    flat_y = torch.empty_like(flat_x)
    cases = []
    for width in WIDTHS:
        m = n // width
        x2d, y2d = flat_x.view(m, width), flat_y.view(m, width)
        a = torch.full((1,), 0.5, device="cuda", dtype=torch.bfloat16)
        g, b = torch.randn(2, width, device="cuda", dtype=torch.bfloat16)
        plan = launcher.forward_plan(x2d)
        ref = launcher.forward(x2d, a, g, b, torch.bfloat16)
        calls = folded_variants(plan, x2d, y2d, a, g, b, width)
        cases.append((f"bf16 {m}x{width} as {plan.M}x{plan.N}", y2d, ref, calls))
    for m, dt, pdt in ((87381, torch.bfloat16, torch.bfloat16), (50432, torch.bfloat16, torch.bfloat16),
                       (6304, torch.bfloat16, torch.bfloat16), (50432, torch.bfloat16, torch.float32),
                       (87381, torch.float32, torch.float32)):  # fmt: skip
        x2d = torch.randn(m, 768, device="cuda", dtype=dt)
        y2d = torch.empty_like(x2d)
        a = torch.full((1,), 0.5, device="cuda", dtype=pdt)
        g, b = torch.randn(2, 768, device="cuda", dtype=pdt)
        plan = launcher.forward_plan(x2d)
        split = launch.plan_forward(
            m, 768, x2d.element_size(), (769, 768), arch=launcher.device_facts(x2d.device)[0]
        )  # a row stride other than 768 keeps the rows unfolded: 256-wide blocks
        calls = split_variants(plan, split, x2d, y2d, a, g, b)
        label = f"{str(dt)[6:]}/{str(pdt)[6:]} {m}x768 as {plan.M}x{plan.N}"
        label += f" (split {split.BLOCK_M}x{split.BLOCK_N})"
        cases.append((label, y2d, launcher.forward(x2d, a, g, b, dt), calls))
    for _, y, ref, calls in cases:
        for name, call in calls.items():
            y.fill_(float("nan"))
            call()
            assert torch.equal(y, ref), name
    times = [{k: [] for k in calls} for *_, calls in cases]
    copy_us = []
    for r in range(ROUNDS):
        copy_us.append(1e3 * replay_median_ms(lambda: flat_y.copy_(flat_x), reps=20, replays=9))
        for (_, _, _, calls), t in zip(cases, times, strict=True):
            for name, call in calls.items():
                t[name].append(1e3 * replay_median_ms(call, reps=20, replays=9))
        print(f"round {r} done", flush=True)
    best_copy = min(copy_us)
    print(f"copy of 2^27 bytes each way: best {best_copy:.2f} us, all", " ".join(f"{t:.2f}" for t in copy_us))
    for (label, *_), t in zip(cases, times, strict=True):
        print(label)
        for name, ts in t.items():
            all_ts = " ".join(f"{v:.2f}" for v in ts)
            print(f"  {name:16s} best {min(ts):7.2f} us  all {all_ts}")


if __name__ == "__main__":
    main()
