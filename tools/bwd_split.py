"""Where the backward's time goes: its main kernel and its finishing reduction, timed apart on the GPU.

    python tools/bwd_split.py [--out FILE.json] [--widths 64,1024,16384] [--dtypes bf16,fp32]
    python tools/bwd_split.py --channels-first  # ConvNeXt-T's (N, C, H, W) shapes, bf16

At each bandwidth shape (2^26 elements), or each channels-first shape, it times, as medians of CUDA-graph
replays with the planned launch: the main kernel alone, the finish alone, the two in sequence with the
finish launched by programmatic dependent launch (the plan's choice on sm_90) and without, and the whole
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
# --channels-first: ConvNeXt-T's stage shapes (N, C, H, W) and a small batch, bf16 x, float32 parameters
CF_SHAPES = ((64, 96, 56, 56), (64, 192, 28, 28), (64, 384, 14, 14), (256, 768, 7, 7), (8, 96, 56, 56))


def split(shape: tuple[int, ...], dtype_name: str, channels_first: bool = False) -> dict:
    """The timings of one backward: rows (M, N) of dtype_name, or channels-first (N, C, H, W) rows of bf16
    x with float32 parameters."""
    import torch

    from dyt import launcher, planner
    from dyt.service.bench import replay_median_ms

    dtype = getattr(torch, {"bf16": "bfloat16", "fp32": "float32"}[dtype_name])
    params = torch.float32 if channels_first else dtype
    C = shape[1] if channels_first else shape[-1]
    x = torch.randn(shape, device="cuda", dtype=dtype)
    dy = torch.randn_like(x)
    alpha = torch.full((1,), 0.5, device="cuda", dtype=params)
    gamma = torch.randn(C, device="cuda", dtype=params)
    dx = torch.empty_like(x)
    dalpha, dgamma, dbeta = (torch.empty(n, device="cuda", dtype=params) for n in (1, C, C))
    plan = launcher.backward_plan(x, dy, channels_first=channels_first)
    target = launcher.target_of(x.device)
    rows, width, _, span = launcher.rows_of(x, channels_first)
    no_pdl = planner.plan_backward(
        rows, width, x.element_size(), channel_span=span, target=dataclasses.replace(target, allow_pdl=False)
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
        "shape": "x".join(map(str, shape)),
        "M": rows,
        "N": width,
        "programs": plan.grid[0],
        "n_groups": plan.n_groups,
        "finish_tile": [plan.finish_block_g, plan.finish_block_n],
        "main_us": us(main),
        "finish_us": us(lambda: launcher.launch_backward_finish(plan, partials, dgamma, dbeta, dalpha)),
        "main_finish_us": us(both(plan)),  # with PDL where the plan has it (sm_90 and up)
        "main_finish_no_pdl_us": us(both(no_pdl)),
        "backward_us": us(
            lambda: launcher.backward(
                dy, x, alpha, gamma, dtype, params, params, params, channels_first=channels_first
            )
        ),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=pathlib.Path)
    parser.add_argument("--widths", default=",".join(map(str, WIDTHS)))
    parser.add_argument("--dtypes", default="bf16,fp32")
    parser.add_argument(
        "--channels-first", action="store_true", help="ConvNeXt's channels-first shapes, bf16"
    )
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("bwd_split: needs a CUDA GPU; none is visible")
        return 2
    from dyt.service.bench import BANDWIDTH_ELEMENTS

    if args.channels_first:
        rows = [split(shape, "bf16", channels_first=True) for shape in CF_SHAPES]
    else:
        widths = [int(w) for w in args.widths.split(",")]
        rows = [split((BANDWIDTH_ELEMENTS // w, w), dt) for dt in args.dtypes.split(",") for w in widths]
    keys = list(rows[0])
    print(" | ".join(keys))
    for row in rows:
        print(" | ".join(str(row[k]) for k in keys))
    if args.out:
        args.out.write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
