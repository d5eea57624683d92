"""Session 7: the forward with and without PDL at every bench shape (graph replays, one process, rounds
interleaved); mixed = bf16 x with float32 parameters."""
# ruff: noqa: B023 - each closure is timed in the loop iteration that defines it

import os
import sys

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), *[".."] * 4)))  # the repo

import torch  # noqa: E402

from dyt import launcher  # noqa: E402
from dyt.bench import BANDWIDTH_WIDTHS, MODEL_SHAPES, SMALL_SHAPES, replay_median_ms  # noqa: E402


def main():
    torch.manual_seed(0)
    shapes = [("small", s) for s in SMALL_SHAPES] + [("model", s) for s in MODEL_SHAPES]
    shapes += [("bandwidth", (2**26 // n, n)) for n in BANDWIDTH_WIDTHS]
    wins = 0
    for xdt, pdt in (
        (torch.bfloat16, torch.bfloat16),
        (torch.float32, torch.float32),
        (torch.bfloat16, torch.float32),
    ):
        for kind, (M, N) in shapes:
            if pdt != xdt and kind == "bandwidth":
                continue
            x = torch.randn(M, N, device="cuda", dtype=xdt)
            a = torch.full((1,), 0.5, device="cuda", dtype=pdt)
            g = torch.randn(N, device="cuda", dtype=pdt)
            b = torch.randn(N, device="cuda", dtype=pdt)
            y = torch.empty_like(x)
            plan = launcher.forward_plan(x)
            ref = launcher.forward(x, a, g, b, xdt)
            plans = {pdl: plan.replaced(pdl=pdl) for pdl in (True, False)}
            calls = {pdl: (lambda p=p: launcher.launch_forward(p, x, y, a, g, b)) for pdl, p in plans.items()}
            for call in calls.values():
                y.fill_(float("nan"))
                call()
                assert torch.equal(y, ref)
            times = {k: [] for k in calls}
            for _ in range(5):
                for k, call in calls.items():
                    times[k].append(1e3 * replay_median_ms(call, reps=20, replays=9))
            on, off = min(times[True]), min(times[False])
            wins += on < off
            print(
                f"{kind:9s} {str(xdt)[6:]}/{str(pdt)[6:]} {M}x{N} pdl {on:.2f} no_pdl {off:.2f} us "
                f"({100 * (on / off - 1):+.1f}%) all: {' '.join(f'{t:.2f}' for t in times[True])} / "
                f"{' '.join(f'{t:.2f}' for t in times[False])}",
                flush=True,
            )
    print(f"pdl faster at {wins} shapes")


if __name__ == "__main__":
    main()
