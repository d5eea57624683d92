"""The row backward under several partial-traffic budgets (dyt.planner.PARTIAL_TRAFFIC_BUDGET): the main
kernel's program count each budget allows and `launcher.backward`'s time in CUDA-graph replays, interleaved
in rounds within one process, the middle time of each. A budget of 0 stands for none: every grid is the
table's programs per SM (up to the row tiles there are). With --model, the model benchmark's training step
of dyt (dyt.service.model_bench) instead, the budgets interleaved in rounds of steps. Needs a CUDA GPU.

    python tools/partial_budget.py
    python tools/partial_budget.py --shapes 4096x4096,2048x8192 --budgets 0.018,0.036,0 --dtypes bf16
    python tools/partial_budget.py --model vit_s16 --batch 64 --budgets 0.018,0
"""

import argparse
import statistics

import torch
from triton.testing import do_bench_cudagraph

from dyt import launcher, planner

SHAPES = ("4096x64,4096x256,6304x768,2048x4096,12608x384,12608x768,1024x4096,4096x4096,4704x4096,"
          "8192x4096,2048x8192,16384x1024,32768x512,65536x256,262144x64,8191x768")  # fmt: skip
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def use_budget(budget: float) -> None:
    """Plan every later call under this budget (0: none): the Python and native plan caches emptied."""
    planner.PARTIAL_TRAFFIC_BUDGET = budget or 1e6  # past any grid the table asks for
    launcher._cached_backward.cache_clear()
    if hasattr(torch.ops, "dyt_native") and hasattr(torch.ops.dyt_native, "clear_cache"):
        torch.ops.dyt_native.clear_cache()


def timed(M: int, N: int, dtype: torch.dtype, budget: float) -> tuple[float, int]:
    """(us, programs) of the backward of (M, N) planned under this budget."""
    use_budget(budget)
    f32 = torch.float32
    x = torch.randn(M, N, device="cuda", dtype=dtype)
    dy = torch.randn_like(x)
    alpha, gamma = torch.full((1,), 0.5, device="cuda"), torch.randn(N, device="cuda")

    def call():
        return launcher.backward(dy, x, alpha, gamma, x.dtype, f32, f32, f32)

    call()
    programs = launcher.backward_plan(x, dy).main.grid[0]
    return do_bench_cudagraph(call, rep=50) * 1e3, programs


def kernel_rows(args, budgets: list[float]) -> None:
    shapes = [tuple(map(int, s.lower().split("x"))) for s in args.shapes.split(",")]
    dtypes = args.dtypes.split(",")
    times: dict = {}
    programs: dict = {}
    for _ in range(args.rounds):
        for name in dtypes:
            for shape in shapes:
                for budget in budgets:
                    key = (name, shape, budget)
                    us, programs[key] = timed(*shape, DTYPES[name], budget)
                    times.setdefault(key, []).append(us)
    print(f"launcher.backward, us (programs; the first budget's time over this one's), middle of "
          f"{args.rounds} rounds")  # fmt: skip
    for name in dtypes:
        for shape in shapes:
            middle = {b: statistics.median(times[name, shape, b]) for b in budgets}
            cells = [f"{b or 'none'}: {middle[b]:6.1f} ({programs[name, shape, b]}; "
                     f"{middle[budgets[0]] / middle[b]:.2f}x)" for b in budgets]  # fmt: skip
            print(f"{name:4s} {shape[0]:>6d}x{shape[1]:<6d} " + " | ".join(cells), flush=True)


def model_rows(args, budgets: list[float]) -> None:
    from dyt.service import model_bench

    spec = model_bench.model_specs()[args.model]
    torch.manual_seed(0)
    settings = model_bench.Settings()
    prep = model_bench._prepare(spec.build(), model_bench.VARIANTS["dyt"], "cuda", settings)
    prep.model.train()
    data = {k: t.cuda() for k, t in spec.batch(args.batch, torch.Generator().manual_seed(0)).items()}
    step = model_bench._step_fn(spec, prep, "train", data, "cuda")
    clock = model_bench.CudaClock("cuda")
    times: dict = {b: [] for b in budgets}
    for _ in range(args.rounds):
        for budget in budgets:
            use_budget(budget)
            for _ in range(settings.warmup):
                step()
            times[budget] += [clock.time(step) for _ in range(args.steps)]
    print(f"{spec.title} batch {args.batch} train, dyt: step ms (GPU / host, median of {args.rounds} rounds "
          f"x {args.steps} steps); the first budget's GPU time over this one's")  # fmt: skip
    first = statistics.median(t[0] for t in times[budgets[0]])
    for budget in budgets:
        gpu = statistics.median(t[0] for t in times[budget])
        host = statistics.median(t[1] for t in times[budget])
        print(f"  {budget or 'none'}: {gpu:8.3f} / {host:8.3f}  {first / gpu:.3f}x", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default=SHAPES, help="comma list of MxN")
    parser.add_argument("--dtypes", default="bf16,fp32", help=f"comma list of {', '.join(DTYPES)}")
    parser.add_argument("--budgets", default="0.018,0.036,0", help="comma list (first: the base; 0: none)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--model", help="time this model's training step instead (model_bench's names)")
    parser.add_argument("--batch", type=int, default=64, help="--model: its batch")
    parser.add_argument("--steps", type=int, default=10, help="--model: timed steps per budget per round")
    args = parser.parse_args()
    budgets = [float(b) for b in args.budgets.split(",")]
    committed = planner.PARTIAL_TRAFFIC_BUDGET
    print(f"committed budget {committed}")
    try:
        (model_rows if args.model else kernel_rows)(args, budgets)
    finally:
        use_budget(committed)


if __name__ == "__main__":
    main()
