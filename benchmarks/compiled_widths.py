"""Compiled training of the narrow transformer by width: torch.compile with the eager DyT against dyt.

    python benchmarks/compiled_widths.py --widths 64,128,256,384 --rounds 16
    python benchmarks/compiled_widths.py --widths 128 --no-graphs

torch.compile of the model benchmark's narrow transformer (dyt.service.model_bench) with the paper's eager
DyT module against it with dyt, with CUDA graphs (mode="reduce-overhead") by default, the variants
interleaved in rounds. Shows at which widths dyt's backward kernels win under Inductor and where
Inductor's fusion of the eager module's backward does (docs/host-path.md, "Compiled mode"). Needs a CUDA
GPU.
"""

import argparse

import torch

from dyt.service import model_bench


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--widths", default="64,128,256,384")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=16)
    parser.add_argument("--modes", default="train", help="comma list of train,infer")
    parser.add_argument("--no-graphs", action="store_true", help="torch.compile without CUDA graphs")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU (torch.cuda.is_available() is False)")
    device = torch.device("cuda", torch.cuda.current_device())
    variants = ["compile_eager", "compile_dyt"] if args.no_graphs else ["graphs_eager", "graphs_dyt"]
    settings = model_bench.Settings(rounds=args.rounds)
    for width in (int(w) for w in args.widths.split(",")):
        spec = model_bench.narrow_spec(tokens=args.tokens, width=width, name=f"narrow-{width}")
        case = model_bench.Case(spec, args.batch, compiled=True)
        rows = model_bench.run_model_case(case, variants, args.modes.split(","), device,
                                          model_bench.CudaClock(device), settings)  # fmt: skip
        for row in rows:
            if row["error"] or row["skipped"]:
                print(f"width {width} {row['variant']} {row['mode']}: {row['error'] or row['skipped']}")
        ms = {(r["variant"], r["mode"]): r["median_ms"] for r in rows if not (r["error"] or r["skipped"])}
        for row in rows:
            if row["variant"] != variants[1] or not row["speedup_vs"]:
                continue
            r = row["speedup_vs"][variants[0]]
            eager_ms = ms[(variants[0], row["mode"])]
            print(f"width {width} ({args.batch * args.tokens} rows) {row['mode']}: {variants[0]} "
                  f"{eager_ms:.3f} ms, {variants[1]} {row['median_ms']:.3f} ms; its over dyt's "
                  f"{r['median']:.3f} (rounds {r['min']:.2f}-{r['max']:.2f})")  # fmt: skip


if __name__ == "__main__":
    main()
