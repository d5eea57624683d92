"""Where the backward's time goes: its main kernel and its finishing reduction, timed apart on the GPU.

    python tools/bwd_split.py [--out FILE.json] [--widths 64,1024,16384] [--dtypes bf16,fp32]

At each bandwidth shape (2^26 elements) it times, as medians of CUDA-graph replays with the planned
launch: the main kernel alone, the finish alone, the two in sequence with the finish launched by
programmatic dependent launch (the plan's choice on sm_90) and without, and the whole
`dyt.launcher.backward`. Needs a CUDA GPU; docs/kernels.md cites its numbers.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

WIDTHS = (64, 128, 256, 512, 768, 1024, 2048, 4096, 8192, 16384)


def split(width: int, dtype_name: str) -> dict:
    import torch

    from dyt import launcher, planner
    from dyt.service.bench import BANDWIDTH_ELEMENTS, replay_median_ms

    dtype = getattr(torch, {"bf16": "bfloat16", "fp32": "float32"}[dtype_name])
    rows = BANDWIDTH_ELEMENTS // width
    x = torch.randn(rows, width, device="cuda", dtype=dtype)
    dy = torch.randn_like(x)
    alpha = torch.full((1,), 0.5, device="cuda", dtype=dtype)
    gamma = torch.randn(width, device="cuda", dtype=dtype)
    dx = torch.empty_like(x)
    dalpha, dgamma, dbeta = (torch.empty(n, device="cuda", dtype=dtype) for n in (1, width, width))
    plan = launcher.backward_plan(x, dy)
    target = launcher.target_of(x.device)
    no_pdl = planner.plan_backward(
        rows, width, x.element_size(), target=dataclasses.replace(target, allow_pdl=False)
    )
    partials = launcher.backward_partials(plan, x.device)
    us = lambda call: round(1e3 * replay_median_ms(call, reps=10, replays=5), 2)  # noqa: E731
    main = lambda: launcher.launch_backward_main(plan, x, dy, dx, alpha, gamma, partials)  # noqa: E731
    main()

    def both(p):
        def call():
            launcher.launch_backward_main(p, x, dy, dx, alpha, gamma, partials)
            launcher.launch_backward_finish(p, partials, dgamma, dbeta, dalpha)

        return call

    return {
        "dtype": dtype_name,
        "M": rows,
        "N": width,
        "programs": plan.grid[0],
        "n_groups": plan.n_groups,
        "finish_tile": [plan.finish_block_g, plan.finish_block_n],
        "main_us": us(main),
        "finish_us": us(lambda: launcher.launch_backward_finish(plan, partials, dgamma, dbeta, dalpha)),
        "main_finish_us": us(both(plan)),  # with PDL where the plan has it (sm_90 and up)
        "main_finish_no_pdl_us": us(both(no_pdl)),
        "backward_us": us(lambda: launcher.backward(dy, x, alpha, gamma, dtype, dtype, dtype, dtype)),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=pathlib.Path)
    parser.add_argument("--widths", default=",".join(map(str, WIDTHS)))
    parser.add_argument("--dtypes", default="bf16,fp32")
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("bwd_split: needs a CUDA GPU; none is visible")
        return 2
    rows = [split(int(w), dt) for dt in args.dtypes.split(",") for w in args.widths.split(",")]
    keys = list(rows[0])
    print(" | ".join(keys))
    for row in rows:
        print(" | ".join(str(row[k]) for k in keys))
    if args.out:
        args.out.write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
