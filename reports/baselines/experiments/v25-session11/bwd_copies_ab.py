"""Session 11 probe (one H200): the bf16 backward of rows folded from 64 and 128 columns (16 and 8 copies
of the true width per 1024-column block), with the copies added up in the block after the loop (as the
sm90 table does: copies_as_rows 4 covers only 256 and 512) or written as partial rows for the finish
(copies_as_rows 8, 16). v18 found the add-up epilogue made ptxas schedule the loop itself 3-6% slower at
256 and 512; 128 is the bf16 backward's lowest bandwidth row (0.907 at 05a2f60).

Each variant is the production plan under a table with only copies_as_rows changed, its launches cached
on that plan; main kernel and finish in sequence, CUDA-graph replays, rounds interleaved. dx must come
out bit for bit equal; dgamma and dbeta within float32 rounding of the float64 sums (another order of
additions: 1e-6 of the sum of the terms' magnitudes).

    cd reports/baselines/experiments/v25-session11
    ROUNDS=7 [WIDTHS=64,128,256] python bwd_copies_ab.py
"""
# ruff: noqa: B023 - each closure is timed in the loop iteration that defines it

import copy
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.abspath(os.path.join(HERE, *[".."] * 4)))  # the repo

import torch  # noqa: E402

from dyt import launch, launcher  # noqa: E402
from dyt.bench import replay_median_ms  # noqa: E402

ROUNDS = int(os.environ.get("ROUNDS", "7"))
WIDTHS = [int(w) for w in os.environ.get("WIDTHS", "64,128,256").split(",")]
SETTINGS = (4, 8, 16)  # copies_as_rows of the 1024 bwd entry (the table's: 4)


def main():
    torch.manual_seed(0)
    n = 2**26
    table = launch.load_table("sm90")
    cases = []
    for width in WIDTHS:
        x2d = torch.randn(n // width, width, device="cuda", dtype=torch.bfloat16)
        dy2d = torch.randn_like(x2d)
        a = torch.full((1,), 0.5, device="cuda")
        g = torch.randn(width, device="cuda")
        calls, outs = {}, {}
        for setting in SETTINGS:
            t = copy.deepcopy(table)
            launch.table_entry(t, "bwd", 2, 1024)["copies_as_rows"] = setting
            with launch.overrides(table=t):
                plan = launcher.backward_plan(x2d, dy2d)
            dx = torch.empty_like(x2d)
            grads = [torch.empty(s, device="cuda") for s in (1, width, width)]
            partials = launcher.backward_partials(plan, x2d.device)

            def call(plan=plan, dx=dx, grads=grads, partials=partials):
                launcher.launch_backward_main(plan, x2d, dy2d, dx, a, g, partials)
                launcher.launch_backward_finish(plan, partials, grads[1], grads[2], grads[0])

            for o in (dx, *grads):
                o.fill_(float("nan"))
            call()
            name = f"rows<={setting}"
            calls[name], outs[name] = call, (dx.clone(), *(o.clone() for o in grads))
            print(f"bf16 {n // width}x{width} {name}: {plan.BLOCK_M}x{plan.BLOCK_N}x{plan.num_warps}, grid "
                  f"{plan.grid[0]}, copies added in the block: {plan.copies_in_block}, finish rows "
                  f"{plan.finish_rows}", flush=True)  # fmt: skip
        first = outs[f"rows<={SETTINGS[0]}"]
        terms = {2: dy2d.double() * torch.tanh(a.double() * x2d.double()), 3: dy2d.double()}
        for name, o in outs.items():
            assert torch.equal(o[0], first[0]), (width, name, "dx")
            for i, what in ((2, "dgamma"), (3, "dbeta")):  # against float64, relative to sum |term|
                err = float(((o[i].double() - terms[i].sum(0)).abs() / terms[i].abs().sum(0)).max())
                assert err < 1e-6, (width, name, what, err)
        cases.append((f"bf16 {n // width}x{width}", calls))
    times = [{k: [] for k in calls} for _, calls in cases]
    copy_us = []
    flat = torch.empty(2**27, device="cuda", dtype=torch.bfloat16)
    flat_out = torch.empty_like(flat)
    for r in range(ROUNDS):
        copy_us.append(1e3 * replay_median_ms(lambda: flat_out.copy_(flat), reps=10, replays=7))
        for (_, calls), t in zip(cases, times, strict=True):
            for name in list(calls) if r % 2 == 0 else list(calls)[::-1]:
                t[name].append(1e3 * replay_median_ms(calls[name], reps=10, replays=7))
        print(f"round {r} done", flush=True)
    print(f"copy of 2^28 bytes each way (3 x 2^26 bf16 is the backward's): median "
          f"{sorted(copy_us)[len(copy_us) // 2]:.2f} us")  # fmt: skip
    for (label, _), t in zip(cases, times, strict=True):
        meds = {k: sorted(v)[len(v) // 2] for k, v in t.items()}
        base = meds[f"rows<={SETTINGS[0]}"]
        print(label + ": " + ", ".join(f"{k} {v:.2f} us ({v / base:.4f})" for k, v in meds.items()))
        for k, v in t.items():
            print(f"  {k} all", *(f"{u:.2f}" for u in v))


if __name__ == "__main__":
    import triton

    print({k: os.environ[k] for k in sorted(os.environ) if k in ("ROUNDS", "WIDTHS")})
    print("torch", torch.__version__, "triton", triton.__version__, torch.cuda.get_device_name())
    main()
