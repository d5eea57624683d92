"""Session 9 probe (one H200), the 16-bit forward, CUDA-graph replays, rounds interleaved:

    ROUNDS=5 [WIDTHS=..] [SHAPES=..] [FOLD_TILES=..] [TILES_WIDE=..] [TILES_2048=..] [PARAMS1=0] \
        python reports/baselines/experiments/v21-session9/fwd_probe.py

Cases: bf16 at 2^26 elements for WIDTHS, and SHAPES ("MxN:xdtype/paramdtype"). Variants per case: prod (the
plan of x alone, as before v21), plan_params (v21's plan, which knows the parameters' dtype; shown where it
differs), probe_same (prod through the probe kernel, fwd_probe_kernels.py). (a) Folded widths (64-512 in
rows of 1024; 2% behind 1024 columns in session 8): gamma and beta repeated to 1024 columns beforehand
(expanded, session 8's reference); gamma and beta loaded once as GAMMA_PERIOD-wide vectors and broadcast in
the kernel (params1: at 256 and 512 the compiler stages them through shared memory); FOLD_TILES on the
folded rows (the folded widths use the 1024 entry, never tuned for them). (b) TILES_WIDE at unfolded
multiples of 1024 columns, TILES_1024 at 1024. (c) 2048 columns: TILES_2048, "BMxBNxWARPSxGROUP" with
GROUP row tiles per group of programs, column block outer (0: the production order). The env of each
log's run heads the log. Every variant's y is checked bit for bit against launcher.forward.
"""
# ruff: noqa: B023 - each closure is timed in the loop iteration that defines it

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.abspath(os.path.join(HERE, *[".."] * 4)))  # the repo

import torch  # noqa: E402
from fwd_probe_kernels import fwd_probe  # noqa: E402

from dyt import launch, launcher  # noqa: E402
from dyt.bench import replay_median_ms  # noqa: E402

ROUNDS = int(os.environ.get("ROUNDS", "5"))
WIDTHS = [int(w) for w in os.environ.get("WIDTHS", "64,128,256,512,1024,2048").split(",")]
# Other shapes, "MxN:xdtype/paramdtype" (bf16, fp32), beside the 2^26-element widths
SHAPES = [s for s in os.environ.get("SHAPES", "").split(",") if s]
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def _tiles(name, default):
    """BMxBNxWARPS[xGROUP] tiles from the environment variable `name`."""
    text = os.environ.get(name, default)
    fields = [[int(v) for v in t.split("x")] for t in text.split(",") if t]
    return [tuple(f + [0] * (4 - len(f))) for f in fields]


FOLD_TILES = _tiles("FOLD_TILES", "8x1024x8,4x1024x8,2x1024x4,8x1024x4")
TILES_2048 = _tiles(
    "TILES_2048", "4x1024x4,4x1024x4x1,4x1024x4x8,4x1024x4x64,2x2048x8x8,4x2048x16,8x2048x16,2x2048x16"
)
TILES_1024 = _tiles("TILES_1024", "")  # at 1024 columns (bf16 widths)
TILES_WIDE = _tiles("TILES_WIDE", "")  # at every unfolded multiple of 1024 columns (SHAPES)
PARAMS1 = os.environ.get("PARAMS1", "1") == "1"  # the params1 variant on folded widths (with each fold tile)
PARAMS2 = os.environ.get("PARAMS2", "0") == "1"  # the params2 variant (halves) with the plan and every tile


def retiled(plan, bm, bn, warps):
    n_col = launch.cdiv(plan.N, bn)
    return plan.replaced(BLOCK_M=bm, BLOCK_N=bn, n_col_blocks=n_col, num_warps=warps,
                         grid=(launch.cdiv(plan.M, bm) * n_col,))  # fmt: skip


def probe_call(plan, x2d, y, a, g, b, params=0, group=0):
    n_el, sx, sy = launcher._layout_args(plan, x2d, y)

    def call():
        fwd_probe[plan.grid](
            x2d, y, a, g, b, plan.M, plan.N, n_el, sx, sy,
            HAS_BETA=True, BLOCK_M=plan.BLOCK_M, BLOCK_N=plan.BLOCK_N, N_COL_BLOCKS=plan.n_col_blocks,
            INT64=plan.int64, TANH=plan.tanh, APPROX=True, GAMMA_PERIOD=plan.gamma_period, RAGGED=plan.ragged,
            SIGN_SELECT=plan.sign_select, PDL=plan.pdl, PARAMS=params, GROUP=group,
            num_warps=plan.num_warps, launch_pdl=plan.pdl,
        )  # fmt: skip

    return call


def variants(plan, x2d, y, a, g, b, width):
    out = {"prod": lambda: launcher.launch_forward(plan, x2d, y, a, g, b)}
    out["probe_same"] = probe_call(plan, x2d, y, a, g, b)
    with_params = launcher.forward_plan(x2d, g, b)  # v21: the plan as the launcher makes it (fp32_params)
    if with_params != plan:
        out["plan_params"] = lambda: launcher.launch_forward(with_params, x2d, y, a, g, b)
    if PARAMS2:
        out["params2"] = probe_call(plan, x2d, y, a, g, b, params=2)
    if plan.gamma_period:
        reps = plan.N // width
        ge, be = g.repeat(reps), b.repeat(reps)
        flat = plan.replaced(gamma_period=0)
        xw, yw = x2d.view(plan.M, plan.N), y.view(plan.M, plan.N)  # not ragged at 2^26 elements
        out["expanded"] = lambda: launcher.launch_forward(flat, xw, yw, a, ge, be)
        if PARAMS1:
            out["params1"] = probe_call(plan, x2d, y, a, g, b, params=1)
        for bm, bn, w, _ in FOLD_TILES:
            tiled = retiled(plan, bm, bn, w)
            out[f"{bm}x{bn}x{w}"] = probe_call(tiled, x2d, y, a, g, b)
            if PARAMS1:
                out[f"{bm}x{bn}x{w} params1"] = probe_call(tiled, x2d, y, a, g, b, params=1)
            if PARAMS2:
                out[f"{bm}x{bn}x{w} params2"] = probe_call(tiled, x2d, y, a, g, b, params=2)
    wide = TILES_WIDE if plan.N % 1024 == 0 and not plan.gamma_period and width == plan.N else []
    if plan.N == 1024 and not plan.gamma_period:
        wide = wide + TILES_1024
    for bm, bn, w, _ in wide:
        out[f"{bm}x{bn}x{w}"] = probe_call(retiled(plan, bm, bn, w), x2d, y, a, g, b)
        if PARAMS2:
            out[f"{bm}x{bn}x{w} params2"] = probe_call(retiled(plan, bm, bn, w), x2d, y, a, g, b, params=2)
    if plan.N == 2048:
        for bm, bn, w, group in TILES_2048:
            tiled = retiled(plan, bm, bn, w)
            out[f"{bm}x{bn}x{w} g{group}"] = probe_call(tiled, x2d, y, a, g, b, group=group)
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
        label = f"bf16 {m}x{width} as {plan.M}x{plan.N} ({plan.BLOCK_M}x{plan.BLOCK_N}x{plan.num_warps})"
        cases.append((label, y2d, ref, variants(plan, x2d, y2d, a, g, b, width)))
    for shape in SHAPES:
        dims, dts = shape.split(":")
        m, width = (int(v) for v in dims.split("x"))
        dt, pdt = (DTYPES[d] for d in dts.split("/"))
        x2d = torch.randn(m, width, device="cuda", dtype=dt)
        y2d = torch.empty_like(x2d)
        a = torch.full((1,), 0.5, device="cuda", dtype=pdt)
        g, b = torch.randn(2, width, device="cuda", dtype=pdt)
        plan = launcher.forward_plan(x2d)
        ref = launcher.forward(x2d, a, g, b, dt)
        label = f"{dts} {m}x{width} as {plan.M}x{plan.N} ({plan.BLOCK_M}x{plan.BLOCK_N}x{plan.num_warps})"
        cases.append((label, y2d, ref, variants(plan, x2d, y2d, a, g, b, width)))
    for label, y, ref, calls in cases:
        for name, call in calls.items():
            y.fill_(float("nan"))
            call()
            assert torch.equal(y, ref), (label, name)
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
            med = sorted(ts)[len(ts) // 2]
            print(f"  {name:16s} best {min(ts):7.2f} us  median {med:7.2f}  all {all_ts}")


if __name__ == "__main__":
    main()
