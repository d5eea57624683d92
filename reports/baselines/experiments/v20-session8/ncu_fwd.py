"""Session 8: the bf16 forward at 2^26 elements for WIDTHS (argv), one launch each after a warm-up, for
Nsight Compute to profile (ncu_fwd.sh runs it under ncu; its log is ncu_fwd.log)."""

import os
import sys

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), *[".."] * 4)))  # the repo

import torch  # noqa: E402

from dyt import launcher  # noqa: E402

for width in map(int, sys.argv[1:]):
    x = torch.randn(2**26 // width, width, device="cuda", dtype=torch.bfloat16)
    a = torch.full((1,), 0.5, device="cuda", dtype=torch.bfloat16)
    g, b = torch.randn(2, width, device="cuda", dtype=torch.bfloat16)
    launcher.forward(x, a, g, b, torch.bfloat16)  # compile and warm up: the profiled launch is the second
    torch.cuda.synchronize()
    launcher.forward(x, a, g, b, torch.bfloat16)
    torch.cuda.synchronize()
