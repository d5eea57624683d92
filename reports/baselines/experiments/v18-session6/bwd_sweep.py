"""Session 6 probe (one H200): the bf16 backward under other table entries for its 1024-column blocks, on
one 2^26-element buffer (widths 64-512 fold into the same 65536 x 1024 view), three rounds; the main kernel
alone and (call 3) main kernel and finish in sequence.

    python reports/baselines/experiments/v18-session6/bwd_sweep.py call1  # bwd_sweep-call1.log
    python reports/baselines/experiments/v18-session6/bwd_sweep.py        # bwd_sweep-call3.log/.json

Both ran at fe91593's code (folded copies added in registers at every width); from 14b6be2 the sm90 1024
entry's copies_as_rows (4) also applies to 256 and 512, so the same command now times that layout there.
"""

import json
import os
import statistics
import sys

sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch
from bwd_layout import with_block_entries

from dyt import launch, launcher
from dyt.bench import replay_median_ms

N_EL = 1 << 26
CALL1_CONFIGS = [  # BLOCK_M, warps, stages, programs_per_sm, row_order (main kernel only, 256/512/1024)
    (2, 4, 3, 3, "strided"),
    (1, 4, 3, 3, "strided"),
    (1, 4, 4, 4, "strided"),
    (2, 4, 4, 3, "strided"),
    (2, 4, 2, 3, "strided"),
    (4, 8, 3, 3, "strided"),
    (2, 8, 3, 3, "strided"),
    (4, 4, 3, 2, "strided"),
    (2, 4, 3, 3, "chunked"),
    (1, 4, 3, 4, "strided"),
]
CONFIGS = [  # BLOCK_M, warps, stages, programs_per_sm, row_order
    (2, 4, 3, 3, "strided"),
    (4, 4, 3, 2, "strided"),
    (4, 4, 4, 2, "strided"),
    (4, 4, 2, 2, "strided"),
    (4, 4, 3, 2, "chunked"),
    (2, 4, 3, 2, "strided"),
    (4, 8, 3, 2, "strided"),
]
WIDTHS = (256, 512, 768, 1024, 2048, 4096, 16384)


def main(call1: bool):
    configs, widths = (CALL1_CONFIGS, (256, 512, 1024)) if call1 else (CONFIGS, WIDTHS)
    table = launch.load_table("sm90")
    x = torch.randn(N_EL, device="cuda", dtype=torch.bfloat16)
    dy, dx = torch.randn_like(x), torch.empty_like(x)
    alpha = torch.full((1,), 0.5, device="cuda", dtype=torch.bfloat16)
    res = {}
    dg, db, da = (torch.empty(n, device="cuda", dtype=torch.bfloat16) for n in (16384, 16384, 1))
    plans = {}
    for cfg in configs:
        t = with_block_entries(table, cfg)
        for w in widths:
            xv, dyv, dxv = (v[: N_EL // w * w].view(N_EL // w, w) for v in (x, dy, dx))
            gamma = torch.randn(w, device="cuda", dtype=torch.bfloat16)
            with launch.overrides(table=t):
                plan = launcher.backward_plan(xv, dyv)
            parts = launcher.backward_partials(plan, x.device)
            plans[(cfg, w)] = (plan, xv, dyv, dxv, gamma, parts)
            if not call1:
                plans[(cfg, -w)] = (plan, xv, dyv, dxv, gamma, parts)
    for rnd in range(3):
        for key, (plan, xv, dyv, dxv, gamma, parts) in plans.items():

            def call(plan=plan, xv=xv, dyv=dyv, dxv=dxv, gamma=gamma, parts=parts, both=key[1] < 0):
                launcher.launch_backward_main(plan, xv, dyv, dxv, alpha, gamma, parts)
                if both:
                    launcher.launch_backward_finish(
                        plan, parts, dg[: plan.param_width], db[: plan.param_width], da
                    )

            try:
                us = 1e3 * replay_median_ms(call, reps=10, replays=5)
            except Exception as e:
                print(key, "FAILED", repr(e)[:200], flush=True)
                us = float("nan")
            res.setdefault(key, []).append(round(us, 2))
        print("round", rnd, "done", flush=True)
    rows = []
    for (cfg, w), v in res.items():
        p = plans[(cfg, w)][0]
        what = "main+finish" if w < 0 else "main"
        print(f"cfg {cfg} w {w} {what}: grid {p.grid[0]} tiles/prog {p.tiles_per_program} "
              f"min {min(v):.1f} med {statistics.median(v):.1f} {v}")  # fmt: skip
        rows.append({"cfg": cfg, "width": w, "us": v, "grid": p.grid[0]})
    json.dump(rows, open(os.path.join(os.environ.get("OUT", "/tmp"), "bwd_sweep.json"), "w"), indent=1)


if __name__ == "__main__":
    main(sys.argv[1:] == ["call1"])
