"""The forward's per-entry launch-table fields, A/B in one process: every entry's "sign" and "streaming"
set one way, then the other, at the bandwidth shapes (2^26 elements), as medians of CUDA-graph replays of
`dyt.launcher.forward`. Dev tool for NOTES.md; needs a CUDA GPU.

    python ci/fwd_fields.py [--widths 64,768,1024,4096,16384] [--dtypes bf16,fp32]
"""

from __future__ import annotations

import argparse
import functools
import itertools
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SIGNS = ("select", "bitwise")
STREAMING = (False, True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--widths", default="64,768,1024,4096,16384")
    parser.add_argument("--dtypes", default="bf16,fp32")
    args = parser.parse_args(argv)
    import torch

    from dyt import launch, launcher
    from dyt.bench import BANDWIDTH_ELEMENTS, measure_ceiling, replay_median_ms, triton_timer

    if not torch.cuda.is_available():
        print("fwd_fields: needs a CUDA GPU; none is visible")
        return 2
    ceiling = measure_ceiling(torch.device("cuda"), triton_timer())["gbps"]
    table = launch.load_table(launcher.device_facts(torch.device("cuda"))[0])
    print(f"ceiling {ceiling:.0f} GB/s; ratio of each variant's graph time to it")
    print(
        "dtype | width | "
        + " | ".join(f"{s}{' streaming' if st else ''}" for s, st in itertools.product(SIGNS, STREAMING))
    )
    for dt_name in args.dtypes.split(","):
        dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[dt_name]
        for width in map(int, args.widths.split(",")):
            x = torch.randn(BANDWIDTH_ELEMENTS // width, width, device="cuda", dtype=dtype)
            alpha = torch.full((1,), 0.5, device="cuda", dtype=dtype)
            gamma, beta = (torch.randn(width, device="cuda", dtype=dtype) for _ in range(2))
            ratios = []
            for sign, streaming in itertools.product(SIGNS, STREAMING):
                fwd = {
                    b: [{**e, "sign": sign, "streaming": streaming} for e in es]
                    for b, es in table["fwd"].items()
                }
                with launch.overrides(table={**table, "fwd": fwd}):
                    ms = replay_median_ms(
                        functools.partial(launcher.forward, x, alpha, gamma, beta, dtype), 10, 5
                    )
                ratios.append(2 * x.numel() * x.element_size() / (ms * 1e-3) / 1e9 / ceiling)
            print(f"{dt_name} | {width} | " + " | ".join(f"{r:.3f}" for r in ratios), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
