"""The row backward under several grid choices: values of dyt.planner.MIN_TILES_PER_PROGRAM (--min-tiles)
crossed with values of one table entry's programs_per_sm (--entry, --programs-per-sm). For each, the main
kernel's program count and tiles per program and `launcher.backward`'s time in CUDA-graph replays, the
choices interleaved in rounds within one process, the middle time of each. With --model, the model
benchmark's training step of dyt (dyt.service.model_bench) instead, the choices interleaved in rounds of
steps. The first choice is the base of the ratios. Needs a CUDA GPU.

    python tools/backward_grid.py --min-tiles 8,4,1
    python tools/backward_grid.py --min-tiles 8 --entry 16bit:512 --programs-per-sm 3,4 --shapes 12608x384
    python tools/backward_grid.py --shapes 131072x512:1024 --dtypes bf16  # MxN:S, rows S elements apart
    python tools/backward_grid.py --model vit_b16 --batch 128 --min-tiles 8,1
"""

import argparse
import itertools
import statistics

import torch
from triton.testing import do_bench_cudagraph

from dyt import launcher, planner

SHAPES = ("4096x64,4096x256,6304x384,6304x768,2048x4096,12608x320,12608x384,12608x768,1024x4096,4096x4096,"
          "8192x4096,2048x8192,16384x1024,262144x64,8191x768")  # fmt: skip
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def entry_of(spec: str) -> dict:
    """The sm90 table's backward entry named bucket:max_width (16bit:512, fp32:none): the planner's cached
    dict itself, so that a change to it plans every later call (main puts the committed value back)."""
    bucket, width = spec.split(":")
    entries = planner.load_table("sm90")["bwd"][bucket]
    return next(e for e in entries if str(e["max_width"]).lower() == width.lower())


def use(choice: tuple, entry: dict | None) -> None:
    """Plan every later call with this (min tiles, programs per SM), both plan caches emptied."""
    planner.MIN_TILES_PER_PROGRAM, programs = choice
    if entry is not None:
        entry["programs_per_sm"] = programs
    launcher._cached_backward.cache_clear()
    if hasattr(torch.ops, "dyt_native") and hasattr(torch.ops.dyt_native, "clear_cache"):
        torch.ops.dyt_native.clear_cache()


def parse_shape(text: str) -> tuple[int, int, int]:
    size, _, stride = text.lower().partition(":")
    M, N = map(int, size.split("x"))
    return M, N, int(stride or N)


def timed(M: int, N: int, stride: int, dtype: torch.dtype) -> tuple[float, str]:
    """(us, 'programs x tiles') of the backward of (M, N) rows stride elements apart, as now planned."""
    f32 = torch.float32
    x = torch.randn(M, stride, device="cuda", dtype=dtype)[:, :N]
    dy = torch.randn(M, N, device="cuda", dtype=dtype)
    alpha, gamma = torch.full((1,), 0.5, device="cuda"), torch.randn(N, device="cuda")

    def call():
        return launcher.backward(dy, x, alpha, gamma, x.dtype, f32, f32, f32)

    call()
    plan = launcher.backward_plan(x, dy)
    return do_bench_cudagraph(call, rep=50) * 1e3, f"{plan.main.grid[0]}x{plan.tiles_per_program}"


def label(choice: tuple, entry: dict | None) -> str:
    return f"min {choice[0]}" + (f" pps {choice[1]}" if entry is not None else "")


def kernel_rows(args, choices: list[tuple], entry: dict | None) -> None:
    shapes = [parse_shape(s) for s in args.shapes.split(",")]
    dtypes = args.dtypes.split(",")
    times: dict = {}
    grids: dict = {}
    for _ in range(args.rounds):
        for name, shape, choice in itertools.product(dtypes, shapes, choices):
            use(choice, entry)
            us, grids[name, shape, choice] = timed(*shape, DTYPES[name])
            times.setdefault((name, shape, choice), []).append(us)
    print(f"launcher.backward, us (programs x tiles per program; the first choice's time over this one's), "
          f"middle of {args.rounds} rounds")  # fmt: skip
    for name, shape in itertools.product(dtypes, shapes):
        middle = {c: statistics.median(times[name, shape, c]) for c in choices}
        base = middle[choices[0]]
        cells = [f"{label(c, entry)}: {middle[c]:6.1f} ({grids[name, shape, c]}; {base / middle[c]:.2f}x)"
                 for c in choices]  # fmt: skip
        rows = f"{shape[0]}x{shape[1]}" + (f":{shape[2]}" if shape[2] != shape[1] else "")
        print(f"{name:4s} {rows:>16s} " + " | ".join(cells), flush=True)


def model_rows(args, choices: list[tuple], entry: dict | None) -> None:
    from dyt.service import model_bench

    spec = model_bench.model_specs()[args.model]
    torch.manual_seed(0)
    settings = model_bench.Settings()
    prep = model_bench._prepare(spec.build(), model_bench.VARIANTS["dyt"], "cuda", settings)
    prep.model.train()
    data = {k: t.cuda() for k, t in spec.batch(args.batch, torch.Generator().manual_seed(0)).items()}
    step = model_bench._step_fn(spec, prep, "train", data, "cuda")
    clock = model_bench.CudaClock("cuda")
    times: dict = {c: [] for c in choices}
    for _ in range(args.rounds):
        for choice in choices:
            use(choice, entry)
            for _ in range(settings.warmup):
                step()
            times[choice] += [clock.time(step) for _ in range(args.steps)]
    print(f"{spec.title} batch {args.batch} train, dyt: step ms (GPU / host, median of {args.rounds} rounds "
          f"x {args.steps} steps); the first choice's GPU time over this one's")  # fmt: skip
    first = statistics.median(t[0] for t in times[choices[0]])
    for choice in choices:
        gpu = statistics.median(t[0] for t in times[choice])
        host = statistics.median(t[1] for t in times[choice])
        print(f"  {label(choice, entry)}: {gpu:8.3f} / {host:8.3f}  {first / gpu:.3f}x", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default=SHAPES, help="comma list of MxN or MxN:S (row stride S)")
    parser.add_argument("--dtypes", default="bf16,fp32", help=f"comma list of {', '.join(DTYPES)}")
    parser.add_argument("--min-tiles", default=f"{planner.MIN_TILES_PER_PROGRAM},4,1", help="comma list")
    parser.add_argument("--entry", help="the table entry whose programs_per_sm varies, e.g. 16bit:512")
    parser.add_argument("--programs-per-sm", default="", help="--entry: comma list of its programs_per_sm")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--model", help="time this model's training step instead (model_bench's names)")
    parser.add_argument("--batch", type=int, default=64, help="--model: its batch")
    parser.add_argument("--steps", type=int, default=10, help="--model: timed steps per choice per round")
    args = parser.parse_args()
    if bool(args.entry) != bool(args.programs_per_sm):
        parser.error("--entry and --programs-per-sm go together")
    entry = entry_of(args.entry) if args.entry else None
    committed = (planner.MIN_TILES_PER_PROGRAM, entry["programs_per_sm"] if entry else None)
    programs = [int(p) for p in args.programs_per_sm.split(",")] if entry else [None]
    choices = list(itertools.product([int(m) for m in args.min_tiles.split(",")], programs))
    print(f"committed: {label(committed, entry)}")
    try:
        (model_rows if args.model else kernel_rows)(args, choices, entry)
    finally:
        use(committed, entry)


if __name__ == "__main__":
    main()
