"""Session 6 probe (one H200, call 9, at 14b6be2): float32 forward tiles at the model shapes where
Liger-Kernel's forward was 0.2-1.5% faster in the 14b6be2 bench (graph replays), Liger timed in the same
process; 'table' is 14b6be2's sm90 choice (2x2048x8 at 2048 and the widest, 1x1024x4 between).

    python reports/baselines/experiments/v18-session6/fwd_fp32.py  # fwd_fp32.log; needs liger-kernel
"""

import copy
import os
import sys

sys.path.insert(0, os.getcwd())
import torch

from dyt import bench, launch, launcher
from dyt.bench import replay_median_ms

SHAPES = [(32768, 2048), (8192, 8192), (2048, 4096), (16384, 8192), (16384, 4096), (4096, 16384)]
CONFIGS = [
    (2, 2048, 8, "bitwise"),
    (1, 1024, 4, "bitwise"),
    (1, 1024, 4, "select"),
    (2, 1024, 4, "bitwise"),
    (4, 1024, 4, "bitwise"),
    (2, 1024, 8, "bitwise"),
    (1, 2048, 4, "bitwise"),
    (1, 2048, 8, "bitwise"),
    (4, 2048, 8, "bitwise"),
    (1, 4096, 8, "bitwise"),
    (2, 512, 4, "bitwise"),
    (4, 512, 4, "bitwise"),
]


def main():
    liger = bench._provider_liger()
    base = launch.load_table("sm90")
    for M, N in SHAPES:
        x = torch.randn(M, N, device="cuda")
        alpha = torch.full((1,), 0.5, device="cuda")
        gamma, beta = torch.randn(N, device="cuda"), torch.randn(N, device="cuda")
        res = {}
        for _rnd in range(2):
            args = (x, alpha, gamma, beta)
            res.setdefault("liger", []).append(1e3 * replay_median_ms(lambda args=args: liger(*args)))
            res.setdefault("table", []).append(
                1e3 * replay_median_ms(lambda args=args: launcher.forward(*args, args[0].dtype))
            )
            for bm, bn, w, sign in CONFIGS:
                if bn > N:
                    continue
                t = copy.deepcopy(base)
                t["fwd"]["fp32"] = [
                    {"max_width": None, "BLOCK_M": bm, "BLOCK_N": bn, "num_warps": w, "sign": sign}
                ]

                def call(t=t, args=args):
                    with launch.overrides(table=t):
                        return launcher.forward(*args, args[0].dtype)

                res.setdefault(f"{bm}x{bn}x{w} {sign}", []).append(1e3 * replay_median_ms(call))
        lig = min(res["liger"])
        for k, v in sorted(res.items(), key=lambda kv: min(kv[1])):
            print(f"{M}x{N} fp32 fwd {k:22s} {min(v):7.2f} us  vs liger {lig / min(v):.3f}  "
                  f"{[round(u, 2) for u in v]}", flush=True)  # fmt: skip


main()
