"""Session 6 probe (one H200, call 4, at fe91593 + the FOLD_COPIES refactor of 14b6be2): folded narrow
widths (64-512 in the 1024-wide view), partial copies added in registers against written as rows for the
finish to add (RowsPlan), at two table entries for the view; the two layouts' gradients compared.

    python reports/baselines/experiments/v18-session6/bwd_layout.py  # bwd_layout.log
"""

import copy
import dataclasses
import json
import os
import sys

sys.path.insert(0, os.getcwd())
import torch

from dyt import launch, launcher
from dyt.bench import replay_median_ms

N_EL = 1 << 26
CONFIGS = [(2, 4, 3, 3, "strided"), (4, 4, 3, 2, "strided")]


class RowsPlan(launch.BwdPlan):
    copies_in_block = property(lambda self: 0)


def with_block_entries(table, cfg):
    """A copy of the launch table whose 16-bit backward entries with 1024-column blocks take cfg:
    (BLOCK_M, num_warps, num_stages, programs_per_sm, row_order)."""
    table = copy.deepcopy(table)
    for entry in table["bwd"]["16bit"]:
        if entry["BLOCK_N"] == 1024:
            entry.update(
                zip(("BLOCK_M", "num_warps", "num_stages", "programs_per_sm", "row_order"), cfg, strict=True)
            )
    return table


def as_rows(plan):
    fields = {f.name: getattr(plan, f.name) for f in dataclasses.fields(plan) if f.name != "launches"}
    return RowsPlan(**fields)


def main():
    table = launch.load_table("sm90")
    x = torch.randn(N_EL, device="cuda", dtype=torch.bfloat16)
    dy, dx = torch.randn_like(x), torch.empty_like(x)
    alpha = torch.full((1,), 0.5, device="cuda", dtype=torch.bfloat16)
    runs = {}
    for cfg in CONFIGS:
        t = with_block_entries(table, cfg)
        for w in (64, 128, 256, 512, 1024):
            xv, dyv, dxv = (v.view(N_EL // w, w) for v in (x, dy, dx))
            gamma = torch.randn(w, device="cuda", dtype=torch.bfloat16)
            with launch.overrides(table=t):
                plan = launcher.backward_plan(xv, dyv)
            layouts = {"regs": plan} if not plan.gamma_period else {"regs": plan, "rows": as_rows(plan)}
            outs = {}
            for name, p in layouts.items():
                parts = launcher.backward_partials(p, x.device)
                dg, db, da = (
                    torch.full((n,), float("nan"), device="cuda", dtype=torch.float32) for n in (w, w, 1)
                )
                launcher.launch_backward_main(p, xv, dyv, dxv, alpha, gamma, parts)
                launcher.launch_backward_finish(p, parts, dg, db, da)
                outs[name] = (dg.clone(), db.clone(), da.clone())
                for both in (False, True):

                    def call(
                        p=p, xv=xv, dyv=dyv, dxv=dxv, gamma=gamma, parts=parts, both=both, dg=dg, db=db, da=da
                    ):
                        launcher.launch_backward_main(p, xv, dyv, dxv, alpha, gamma, parts)
                        if both:
                            launcher.launch_backward_finish(p, parts, dg, db, da)

                    runs[(cfg, w, name, both)] = call
            if "rows" in outs:
                diffs = [
                    float((a.double() - b.double()).norm() / b.double().norm())
                    for a, b in zip(outs["rows"], outs["regs"], strict=False)
                ]
                print(f"check cfg {cfg} w {w}: rows vs regs rel diff dgamma {diffs[0]:.2e} "
                      f"dbeta {diffs[1]:.2e} dalpha {diffs[2]:.2e}", flush=True)  # fmt: skip
    res = {}
    for _rnd in range(3):
        for key, call in runs.items():
            res.setdefault(key, []).append(round(1e3 * replay_median_ms(call, reps=10, replays=5), 2))
    out = []
    for (cfg, w, name, both), v in res.items():
        print(f"cfg {cfg} w {w:5d} {name} {'main+finish' if both else 'main       '}: min {min(v):.1f} {v}")
        out.append({"cfg": cfg, "width": w, "layout": name, "with_finish": both, "us": v})
    json.dump(out, open(os.path.join(os.environ.get("OUT", "/tmp"), "bwd_layout.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
