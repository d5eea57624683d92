"""Session 11 probe (one H200): the production forward with each table entry's plan as committed and with
only its polynomial swapped (plan.replaced(poly_terms=3 or 5)), at the rows v23 gave the 3-term form
(768, 2048, folded 64-512) and at 1024 (5 terms) as a control. CUDA-graph replays, rounds interleaved,
the copy of 2^27 bytes each way in the same rounds.

    cd reports/baselines/experiments/v25-session11
    ROUNDS=9 [WIDTHS=768,..] [SHAPES=6304x768,..] [PARAMS=fp32] python poly_ab.py

Why: bd1ea52's bench had 87381x768 bf16 at 66.69 us (poly 3) against 65.8-65.9 us in the two benches
before (poly 5), while session 10's probe had poly 3 1% faster; only one process timing both settles it.
"""
# ruff: noqa: B023 - each closure is timed in the loop iteration that defines it

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.abspath(os.path.join(HERE, *[".."] * 4)))  # the repo

import torch  # noqa: E402

from dyt import launcher  # noqa: E402
from dyt.bench import replay_median_ms  # noqa: E402

ROUNDS = int(os.environ.get("ROUNDS", "9"))
_WIDTHS = "768,2048,1024,64,128,256,512"
WIDTHS = [int(w) for w in os.environ.get("WIDTHS", _WIDTHS).split(",")]
_SHAPES = "6304x768,50432x768,2048x4096"
# alpha, gamma and beta's dtype (x is bf16)
PARAMS = {"bf16": torch.bfloat16, "fp32": torch.float32}[os.environ.get("PARAMS", "bf16")]
SHAPES = [tuple(int(v) for v in s.split("x")) for s in os.environ.get("SHAPES", _SHAPES).split(",") if s]


def main():
    torch.manual_seed(0)
    n = 2**26
    shapes = [(n // w, w) for w in WIDTHS] + SHAPES
    flat_x = torch.randn(max(n, *(m * w for m, w in shapes)), device="cuda", dtype=torch.bfloat16)
    flat_y = torch.empty_like(flat_x)
    cases = []
    for m, width in shapes:
        x2d = flat_x[: m * width].view(m, width)
        y2d = flat_y[: m * width].view(m, width)
        a = torch.full((1,), 0.5, device="cuda", dtype=PARAMS)
        g, b = torch.randn(2, width, device="cuda", dtype=PARAMS)
        plan = launcher.forward_plan(x2d, g, b)
        tile = f"{plan.BLOCK_M}x{plan.BLOCK_N}x{plan.num_warps}"
        label = f"bf16/{str(PARAMS)[6:]} {m}x{width} as {plan.M}x{plan.N} ({tile}), poly {plan.poly_terms}"
        calls = {}
        for poly in (5, 3):
            p = plan.replaced(poly_terms=poly)
            args = (p, x2d, y2d, a, g, b)  # bound now: the loop's names move on to the next shape
            calls[f"p{poly}"] = lambda args=args: launcher.launch_forward(*args)
        ref = torch.tanh(a.double() * x2d.double()) * g.double() + b.double()
        for name, call in calls.items():  # both forms within the suites' bf16 rule before timing
            y2d.fill_(float("nan"))
            call()
            r = ref.to(torch.bfloat16).double().abs().clamp_min(2.0**-126)
            spacing = torch.ldexp(torch.ones_like(r), torch.frexp(r).exponent - 8)
            scale = (g.double() * torch.tanh(a.double() * x2d.double())).abs() + b.double().abs()
            excess = float(((y2d.double() - ref).abs() / (spacing + 8 * 2.0**-23 * scale)).max())
            assert excess <= 1.0, (label, name, excess)
        cases.append((label, calls))
        print(label, "checked", flush=True)
    times = [{k: [] for k in calls} for _, calls in cases]
    copy_us = []
    for r in range(ROUNDS):
        copy_us.append(1e3 * replay_median_ms(lambda: flat_y[:n].copy_(flat_x[:n]), reps=20, replays=9))
        for (_, calls), t in zip(cases, times, strict=True):
            names = list(calls) if r % 2 == 0 else list(calls)[::-1]  # alternate which form goes first
            for name in names:
                t[name].append(1e3 * replay_median_ms(calls[name], reps=20, replays=9))
        print(f"round {r} done", flush=True)
    med_copy = sorted(copy_us)[len(copy_us) // 2]
    print(f"copy of 2^27 bytes each way: best {min(copy_us):.2f} us, median {med_copy:.2f}, all",
          *(f"{t:.2f}" for t in copy_us))  # fmt: skip
    for (label, _), t in zip(cases, times, strict=True):
        print(label)
        meds = {}
        for name, ts in t.items():
            meds[name] = sorted(ts)[len(ts) // 2]
            head = f"  {name}  best {min(ts):7.2f} us  median {meds[name]:7.2f}  all"
            print(head, *(f"{v:.2f}" for v in ts))
        wins = sum(a < b for a, b in zip(t["p3"], t["p5"], strict=True))
        print(f"  p3 / p5 median {meds['p3'] / meds['p5']:.4f}; p3 faster in {wins} of {ROUNDS} rounds")


if __name__ == "__main__":
    import triton

    print({k: os.environ[k] for k in sorted(os.environ) if k in ("ROUNDS", "WIDTHS", "SHAPES", "PARAMS")})
    print("torch", torch.__version__, "triton", triton.__version__, torch.cuda.get_device_name())
    main()
