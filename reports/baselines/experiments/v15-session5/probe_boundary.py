"""Session 5 probe (one GPU): what a kernel boundary costs after the backward's main kernel, and the main
kernel per width on one shared 2^26-element bf16 buffer (the 256-wide anomaly with identical data).

    python reports/baselines/experiments/v15-session5/probe_boundary.py
"""

import pathlib
import statistics
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[4]))

import torch  # noqa: E402
import triton  # noqa: E402

from dyt import launcher  # noqa: E402
from dyt.bench import replay_median_ms  # noqa: E402

ELEMENTS = 2**26


@triton.jit
def empty_kernel(P):
    pass


def us(call) -> float:
    return round(1e3 * replay_median_ms(call, reps=10, replays=7), 2)


def main() -> None:
    x = torch.randn(ELEMENTS, device="cuda", dtype=torch.bfloat16)
    dy, dx = torch.randn_like(x), torch.empty_like(x)
    alpha = torch.full((1,), 0.5, device="cuda", dtype=torch.bfloat16)
    buf = torch.empty(16, device="cuda")

    def empty(programs=1):
        empty_kernel[(programs,)](buf)

    print("empty kernel alone (1 program):", us(empty), "us; 132 programs:", us(lambda: empty(132)))
    res: dict[int, dict[str, list[float]]] = {}
    for _ in range(3):
        for w in (64, 128, 256, 512, 1024):
            xv, dyv, dxv = (t.view(ELEMENTS // w, w) for t in (x, dy, dx))
            gamma = torch.randn(w, device="cuda", dtype=torch.bfloat16)
            plan = launcher.backward_plan(xv, dyv)
            parts = launcher.backward_partials(plan, x.device)

            def main_kernel(plan=plan, xv=xv, dyv=dyv, dxv=dxv, gamma=gamma, parts=parts):
                launcher.launch_backward_main(plan, xv, dyv, dxv, alpha, gamma, parts)

            def main_then_empty(main_kernel=main_kernel):
                main_kernel()
                empty()

            r = res.setdefault(w, {"main": [], "main+empty": []})
            r["main"].append(us(main_kernel))
            r["main+empty"].append(us(main_then_empty))
    for w, r in res.items():
        print(w, {k: (min(v), statistics.median(v)) for k, v in r.items()})


if __name__ == "__main__":
    main()
