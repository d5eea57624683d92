"""Session 6 probe (one H200, call 5): the finishing reduction alone for the partial layouts of the 4x1024x4
(2 per SM) plan: folded widths written as rows (64-512), and 1024, 4096, 16384; finishing tiles and warps
varied (the plan's tile then was FINISH_TILE 8192 elements; 14b6be2 made it 16384).

    python reports/baselines/experiments/v18-session6/finish_sweep.py  # finish_sweep.log
"""

import json
import os
import sys

sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch
from bwd_layout import as_rows, with_block_entries

from dyt import launch, launcher
from dyt.bench import replay_median_ms

N_EL = 1 << 26
TILES = [
    (None, None),
    (1024, 16, 8),
    (2048, 16, 8),
    (2048, 16, 16),
    (1024, 8, 8),
    (2048, 8, 8),
    (4096, 4, 8),
    (512, 32, 8),
    (1024, 32, 8),
    (2048, 32, 16),
]


def main():
    t = with_block_entries(launch.load_table("sm90"), (4, 4, 3, 2, "strided"))
    x = torch.randn(N_EL, device="cuda", dtype=torch.bfloat16)
    dy, dx = torch.randn_like(x), torch.empty_like(x)
    alpha = torch.full((1,), 0.5, device="cuda", dtype=torch.bfloat16)
    out = []
    for w in (64, 128, 256, 512, 1024, 4096, 16384):
        xv, dyv, dxv = (v.view(N_EL // w, w) for v in (x, dy, dx))
        gamma = torch.randn(w, device="cuda", dtype=torch.bfloat16)
        with launch.overrides(table=t):
            plan = launcher.backward_plan(xv, dyv)
        if plan.gamma_period:
            plan = as_rows(plan)
        parts = launcher.backward_partials(plan, x.device)
        launcher.launch_backward_main(plan, xv, dyv, dxv, alpha, gamma, parts)
        dg, db, da = (torch.empty(n, device="cuda", dtype=torch.float32) for n in (w, w, 1))
        ref = None
        for tile in TILES:
            tl_, nw = (None, None) if tile[0] is None else (tile[:2], tile[2])
            if tl_ and tl_[1] > w:
                continue

            def call(plan=plan, parts=parts, dg=dg, db=db, da=da, tl_=tl_, nw=nw):
                launcher.launch_backward_finish(plan, parts, dg, db, da, tile=tl_, num_warps=nw)

            try:
                call()
                torch.cuda.synchronize()
                got = dg.clone()
                if ref is None:
                    ref = got
                ok = bool(torch.allclose(got, ref, rtol=1e-5, atol=1e-3))
                us = [round(1e3 * replay_median_ms(call, reps=10, replays=5), 2) for _ in range(2)]
            except Exception as e:
                print(w, tile, "FAILED", repr(e)[:150], flush=True)
                continue
            planned = (plan.finish_block_g, plan.finish_block_n)
            print(f"w {w:5d} rows {plan.finish_rows:5d} plan tile {planned} tile {tile}: {min(us):.2f} us "
                  f"{us} ok={ok}", flush=True)  # fmt: skip
            out.append({"width": w, "finish_rows": plan.finish_rows, "tile": tile, "us": us})
    json.dump(out, open(os.path.join(os.environ.get("OUT", "/tmp"), "finish_sweep.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
