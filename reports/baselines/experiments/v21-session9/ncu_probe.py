"""Session 9: one launch of each forward VARIANT (argv: prod64, expanded64, params64, prod1024, prod2048,
tile2048) after a warm-up, bf16 at 2^26 elements, for Nsight Compute (ncu_probe.sh)."""

# ruff: noqa: B023 - each call runs in the iteration that defines it

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.abspath(os.path.join(HERE, *[".."] * 4)))  # the repo

import torch  # noqa: E402
from fwd_probe import probe_call, retiled  # noqa: E402

from dyt import launcher  # noqa: E402

n = 2**26
flat_x = torch.randn(n, device="cuda", dtype=torch.bfloat16)
flat_y = torch.empty_like(flat_x)
a = torch.full((1,), 0.5, device="cuda", dtype=torch.bfloat16)
for name in sys.argv[1:]:
    width = int("".join(ch for ch in name if ch.isdigit()))
    x2d, y = flat_x.view(n // width, width), flat_y.view(n // width, width)
    g, b = torch.randn(2, width, device="cuda", dtype=torch.bfloat16)
    plan = launcher.forward_plan(x2d)
    if name.startswith("expanded"):
        reps = plan.N // width
        flat = plan.replaced(gamma_period=0)
        ge, be = g.repeat(reps), b.repeat(reps)
        x2d, y = x2d.view(plan.M, plan.N), y.view(plan.M, plan.N)
        call = lambda: launcher.launch_forward(flat, x2d, y, a, ge, be)  # noqa: E731
    elif name.startswith("params"):
        call = probe_call(plan, x2d, y, a, g, b, params=1)
    elif name.startswith("tile"):
        call = probe_call(retiled(plan, 4, 1024, 4), x2d, y, a, g, b)
    else:
        call = lambda: launcher.launch_forward(plan, x2d, y, a, g, b)  # noqa: E731
    call()
    torch.cuda.synchronize()
    call()
    torch.cuda.synchronize()
