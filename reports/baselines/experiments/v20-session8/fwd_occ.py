"""Session 8 probe (one H200), bf16 forward at 2^26 elements, CUDA-graph replays, rounds interleaved:

    python reports/baselines/experiments/v20-session8/fwd_occ.py

Why do 1024 columns reach 0.97 of the ceiling and the other widths 0.905-0.94 with the same 4x1024x4
tile? Per width, on one shared buffer (views of it): launcher.forward's plan as it is (cur); the same
tile with the column-block count a compile-time constant (const: no runtime division, 56 registers
instead of 61 at 4096 columns); const with volatile loads (hoist); for 768 columns other tiles, the
bitwise sign, and rows folded into 3072 columns. Beside them a copy of the same bytes. Also the fp32
4096x256 forward (PDL made it slower in session 7) at other tiles, with and without PDL. Every variant's
y is checked bit for bit against launcher.forward's.
"""
# ruff: noqa: B023 - each closure is timed in the loop iteration that defines it

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.abspath(os.path.join(HERE, *[".."] * 4)))  # the repo

import torch  # noqa: E402
from fwd_occ_kernels import fwd_const_blocks  # noqa: E402

from dyt import launch, launcher  # noqa: E402
from dyt.bench import replay_median_ms  # noqa: E402

ROUNDS = int(os.environ.get("ROUNDS", "5"))


def const_call(plan, x2d, y, a, g, b, hoist=False, sign_select=None, maxnreg=None, **hints):
    n_el, sx, sy = launcher._layout_args(plan, x2d, y)
    sel = plan.sign_select if sign_select is None else sign_select
    opts = {"num_warps": plan.num_warps, "launch_pdl": plan.pdl}
    if maxnreg:
        opts["maxnreg"] = maxnreg

    def call():
        fwd_const_blocks[plan.grid](
            x2d, y, a, g, b, plan.M, plan.N, n_el, sx, sy,
            N_COL_BLOCKS=plan.n_col_blocks, HAS_BETA=True, BLOCK_M=plan.BLOCK_M, BLOCK_N=plan.BLOCK_N,
            INT64=plan.int64, TANH=plan.tanh, APPROX=not launcher.interpreter_active(),
            GAMMA_PERIOD=plan.gamma_period, RAGGED=plan.ragged, SIGN_SELECT=sel, PDL=plan.pdl,
            HOIST=hoist, **hints, **opts,
        )  # fmt: skip

    return call


def retiled(plan, bm, bn):
    n_col = launch.cdiv(plan.N, bn)
    return plan.replaced(BLOCK_M=bm, BLOCK_N=bn, n_col_blocks=n_col, grid=(launch.cdiv(plan.M, bm) * n_col,))


def folded_768(plan, x2d):
    """87381 x 768 as rows of 3072 (the last in part), 3 blocks of 1024, gamma modulo 768."""
    n = x2d.numel()
    rows = launch.cdiv(n, 3072)
    return plan.replaced(M=rows, N=3072, BLOCK_M=4, BLOCK_N=1024, n_col_blocks=3,
                         grid=(launch.cdiv(rows, 4) * 3,), gamma_period=768, ragged=True)  # fmt: skip


def variants(plan, x2d, y, a, g, b):
    out = {"cur": lambda: launcher.launch_forward(plan, x2d, y, a, g, b)}
    out["const"] = const_call(plan, x2d, y, a, g, b)
    out["const_hoist"] = const_call(plan, x2d, y, a, g, b, hoist=True)
    if plan.gamma_period == 0 and plan.N == 768:
        out["const_bitwise"] = const_call(plan, x2d, y, a, g, b, sign_select=False)
        for bm, bn in ((8, 256), (32, 256), (4, 256)):
            out[f"{bm}x{bn}_bitwise"] = const_call(retiled(plan, bm, bn), x2d, y, a, g, b, sign_select=False)
        out["fold3072_bitwise"] = const_call(folded_768(plan, x2d), x2d, y, a, g, b, sign_select=False)
    if plan.N == 1024 and plan.gamma_period == 0:
        out["const_maxnreg48"] = const_call(plan, x2d, y, a, g, b, maxnreg=48)
    return out


def main():
    torch.manual_seed(0)
    n = 2**26
    flat_x = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    flat_y = torch.empty_like(flat_x)
    copy_us = []
    cases = []
    for width in (1024, 64, 256, 4096, 16384, 768):
        m = n // width
        x2d, y2d = flat_x[: m * width].view(m, width), flat_y[: m * width].view(m, width)
        a = torch.full((1,), 0.5, device="cuda", dtype=torch.bfloat16)
        g = torch.randn(width, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(width, device="cuda", dtype=torch.bfloat16)
        ref = launcher.forward(x2d, a, g, b, torch.bfloat16)
        plan = launcher.forward_plan(x2d)
        calls = variants(plan, x2d, y2d, a, g, b)
        for name, call in calls.items():
            y2d.fill_(float("nan"))
            call()
            assert torch.equal(y2d, ref), (width, name)
        label = f"bf16 {m}x{width} {plan.BLOCK_M}x{plan.BLOCK_N}x{plan.num_warps}"
        cases.append((label, calls, {k: [] for k in calls}))
    # fp32 4096 x 256: 1024 programs of 4x256 in one wave; PDL made it 2.97 -> 3.42 us (session 7)
    x = torch.randn(4096, 256, device="cuda")
    y = torch.empty_like(x)
    a, g, b = (torch.full((1,), 0.5, device="cuda"), *torch.randn(2, 256, device="cuda"))
    ref = launcher.forward(x, a, g, b, torch.float32)
    plan = launcher.forward_plan(x)
    calls = {}
    for bm in (4, 8, 16, 32):
        for pdl in (True, False):
            p = retiled(plan, bm, 256).replaced(pdl=pdl)
            calls[f"{bm}x256 pdl={int(pdl)}"] = lambda p=p: launcher.launch_forward(p, x, y, a, g, b)
    for name, call in calls.items():
        y.fill_(float("nan"))
        call()
        assert torch.equal(y, ref), name
    label = f"fp32 4096x256 {plan.BLOCK_M}x{plan.BLOCK_N}x{plan.num_warps}"
    cases.append((label, calls, {k: [] for k in calls}))

    copy = lambda: flat_y.copy_(flat_x)
    for r in range(ROUNDS):
        copy_us.append(1e3 * replay_median_ms(copy, reps=20, replays=9))
        for _, calls, times in cases:
            for name, call in calls.items():
                times[name].append(1e3 * replay_median_ms(call, reps=20, replays=9))
        print(f"round {r} done", flush=True)
    ceil_copy = min(copy_us)
    print(f"copy of 2^27 bytes each way: best {ceil_copy:.2f} us, all", " ".join(f"{t:.2f}" for t in copy_us))
    for label, _, times in cases:
        print(label)
        for name, ts in times.items():
            best = min(ts)
            all_ts = " ".join(f"{t:.2f}" for t in ts)
            print(f"  {name:18s} best {best:7.2f} us  ({best / ceil_copy:.3f} of copy)  all {all_ts}")


if __name__ == "__main__":
    main()
