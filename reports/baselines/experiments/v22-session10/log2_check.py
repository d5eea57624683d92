"""floor(log2(x)) at every float64 power of two 2^-149..2^127, on the CPU and the GPU (session 10): the
suites' ulp() used it until 9e52570.

    python reports/baselines/experiments/v22-session10/log2_check.py
"""

import torch

p = torch.arange(-149, 128, dtype=torch.float64)
for dev in ("cpu", "cuda"):
    x = torch.exp2(p).to(dev)
    fl = torch.floor(torch.log2(x)).cpu()
    bad = fl != p
    print(
        dev, "floor(log2(2^p)) != p for", int(bad.sum()), "of", p.numel(), "powers, e.g.", p[bad][:8].tolist()
    )
