"""The row backward under several partial-traffic budgets (dyt.planner.PARTIAL_TRAFFIC_BUDGET): the main
kernel's program count each budget allows and `launcher.backward`'s time in CUDA-graph replays, interleaved
in rounds within one process, the middle time of each. Below 2^26 elements the budget, not the table's
programs per SM, sets the grid (docs/kernels.md, "Backward main kernel"). Needs a CUDA GPU.

    python tools/partial_budget.py
    python tools/partial_budget.py --shapes 4096x4096,2048x8192 --budgets 0.018,0.036,0.1 --rounds 3
"""

import argparse

import torch
from triton.testing import do_bench_cudagraph

from dyt import launcher, planner

SHAPES = "4096x4096,4704x4096,8192x4096,2048x8192,16384x1024,32768x512"


def timed(M: int, N: int, budget: float) -> tuple[float, int]:
    """(us, programs) of the bf16 backward of (M, N) planned under this budget."""
    planner.PARTIAL_TRAFFIC_BUDGET = budget
    launcher._cached_backward.cache_clear()
    f32 = torch.float32
    x = torch.randn(M, N, device="cuda", dtype=torch.bfloat16)
    dy = torch.randn_like(x)
    alpha, gamma = torch.full((1,), 0.5, device="cuda"), torch.randn(N, device="cuda")

    def call():
        return launcher.backward(dy, x, alpha, gamma, x.dtype, f32, f32, f32)

    call()
    programs = launcher.backward_plan(x, dy).main.grid[0]
    return do_bench_cudagraph(call, rep=50) * 1e3, programs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default=SHAPES, help="comma list of MxN")
    parser.add_argument("--budgets", default="0.018,0.036,0.1", help="comma list (the first: the base)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    shapes = [tuple(map(int, s.lower().split("x"))) for s in args.shapes.split(",")]
    budgets = [float(b) for b in args.budgets.split(",")]
    committed = planner.PARTIAL_TRAFFIC_BUDGET
    times: dict = {}
    programs: dict = {}
    try:
        for _ in range(args.rounds):
            for shape in shapes:
                for budget in budgets:
                    us, programs[shape, budget] = timed(*shape, budget)
                    times.setdefault((shape, budget), []).append(us)
    finally:
        planner.PARTIAL_TRAFFIC_BUDGET = committed
        launcher._cached_backward.cache_clear()
    print(f"bf16 launcher.backward, us (programs; the first budget's time over this one's), committed budget "
          f"{committed}")  # fmt: skip
    for shape in shapes:
        middle = {b: sorted(times[shape, b])[len(times[shape, b]) // 2] for b in budgets}
        cells = [f"{b}: {middle[b]:6.1f} ({programs[shape, b]}; {middle[budgets[0]] / middle[b]:.2f}x)"
                 for b in budgets]  # fmt: skip
        print(f"{shape[0]}x{shape[1]:<6d} " + " | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
