"""Session 5 probe (one GPU): the backward's main kernel per width on one shared 2^26-element bf16 buffer,
three rounds (widths 64-512 fold into the same 65536 x 1024 view; only gamma's period differs).

    python reports/baselines/experiments/v15-session5/probe_periods.py
"""

import pathlib
import statistics
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[4]))

import torch  # noqa: E402

from dyt import launcher  # noqa: E402
from dyt.bench import replay_median_ms  # noqa: E402

ELEMENTS = 2**26


def main() -> None:
    x = torch.randn(ELEMENTS, device="cuda", dtype=torch.bfloat16)
    dy, dx = torch.randn_like(x), torch.empty_like(x)
    alpha = torch.full((1,), 0.5, device="cuda", dtype=torch.bfloat16)
    res: dict[int, list[float]] = {}
    for _ in range(3):
        for w in (64, 128, 256, 512, 1024, 16384):
            xv, dyv, dxv = (t.view(ELEMENTS // w, w) for t in (x, dy, dx))
            gamma = torch.randn(w, device="cuda", dtype=torch.bfloat16)
            plan = launcher.backward_plan(xv, dyv)
            parts = launcher.backward_partials(plan, x.device)

            def main_kernel(plan=plan, xv=xv, dyv=dyv, dxv=dxv, gamma=gamma, parts=parts):
                launcher.launch_backward_main(plan, xv, dyv, dxv, alpha, gamma, parts)

            res.setdefault(w, []).append(round(1e3 * replay_median_ms(main_kernel, reps=10, replays=7), 2))
    for w, v in res.items():
        print("main bf16", w, "min", min(v), "median", statistics.median(v), v)


if __name__ == "__main__":
    main()
