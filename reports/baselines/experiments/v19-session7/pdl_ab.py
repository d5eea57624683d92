"""Session 7: forward and backward with and without programmatic dependent launch, one process, graph
replays of 2^26 elements at every bandwidth width (rounds interleaved)."""
# ruff: noqa: B023 - each closure is timed in the loop iteration that defines it

import os
import sys

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), *[".."] * 4)))  # the repo

import torch  # noqa: E402

from dyt import launcher  # noqa: E402
from dyt.bench import replay_median_ms  # noqa: E402

CEIL = 4245.0
WIDTHS = (64, 128, 256, 512, 768, 1024, 2048, 4096, 8192, 16384)


def main():
    torch.manual_seed(0)
    n = 1 << 26
    widths = [int(w) for w in sys.argv[1].split(",")] if len(sys.argv) > 1 else WIDTHS
    for dtype in (torch.bfloat16, torch.float32):
        es = torch.tensor([], dtype=dtype).element_size()
        flat = torch.randn(n, device="cuda", dtype=dtype)
        dyf = torch.randn(n, device="cuda", dtype=dtype)
        out = torch.empty_like(flat)
        copy = 1e3 * replay_median_ms(lambda: out.copy_(flat), reps=20, replays=15)
        print(f"{dtype} copy {copy:.1f} us", flush=True)
        for N in widths:
            x = flat[: n // N * N].view(n // N, N)
            dy = dyf[: n // N * N].view(n // N, N)
            a = torch.full((1,), 0.5, device="cuda", dtype=dtype)
            g = torch.randn(N, device="cuda", dtype=dtype)
            b = torch.randn(N, device="cuda", dtype=dtype)
            y = torch.empty_like(x)
            dx = torch.empty_like(x)
            grads = [torch.empty(k, device="cuda", dtype=dtype) for k in (N, N, 1)]
            fplan = launcher.forward_plan(x)
            bplan = launcher.backward_plan(x, dy)
            parts = launcher.backward_partials(bplan, x.device)
            ref = launcher.forward(x, a, g, b, dtype)
            calls = {}
            for pdl in (True, False):
                fp, bp = fplan.replaced(pdl=pdl), bplan.replaced(pdl=pdl)
                calls[f"fwd pdl{int(pdl)}"] = lambda fp=fp: launcher.launch_forward(fp, x, y, a, g, b)

                def bwd(bp=bp):
                    launcher.launch_backward_main(bp, x, dy, dx, a, g, parts)
                    launcher.launch_backward_finish(bp, parts, *grads)

                calls[f"bwd pdl{int(pdl)}"] = bwd
            for name, call in calls.items():
                y.fill_(float("nan"))
                call()
                torch.cuda.synchronize()
                if name.startswith("fwd"):
                    assert torch.equal(y, ref), name
            times = {k: [] for k in calls}
            for _ in range(3):
                for name, call in calls.items():
                    times[name].append(1e3 * replay_median_ms(call, reps=20, replays=9))
            line = []
            for name, ts in times.items():
                best = min(ts)
                moved = (2 if name.startswith("fwd") else 3) * x.numel() * es
                line.append(f"{name} {best:.1f} ({moved / best / 1e3 / CEIL:.3f})")
            print(f"{str(dtype)[6:]} N={N:5d} " + " | ".join(line), flush=True)


if __name__ == "__main__":
    main()
