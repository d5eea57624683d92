"""The backward's dalpha accumulation emulated in numpy at 131073 x 16384 bf16 (the sm90 plan: 384
programs x 2048 lanes x 2731 tiles): per-lane float32 sums over the whole run (lanes added in float32),
with Kahan's compensation, with the rounding error of each addition added up apart (Fast2Sum), and in runs
of dyt.planner.LANE_RUN_TILES tiles whose lane sums go to float64 (what the kernel does), against float64.
No GPU needed; docs/kernels.md cites its numbers.

    python tools/dalpha_emulation.py [SEED]
"""

from __future__ import annotations

import sys

import numpy as np

from dyt.conformance.tolerances import EVAL_ULPS, FP32_EPS, REL_L2  # the suites' one tolerance table

PROGRAMS, LANES, STEPS = 384, 2048, 2731  # 131073 x 16384 elements: 65537 tiles of 2 x 1024 over 24 groups
RUN = 256  # dyt.planner.LANE_RUN_TILES
ALPHA = np.float32(0.7)


def to_bf16(a: np.ndarray) -> np.ndarray:
    """float32 rounded to bfloat16 (nearest even), kept in float32."""
    bits = a.astype(np.float32).view(np.uint32)
    bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).astype(np.uint32)
    return bits.view(np.float32)


def main(seed: int) -> None:
    rng = np.random.default_rng(seed)
    gamma = rng.standard_normal((16, 1024)).astype(np.float32)  # program p: column block p % 16
    g = np.broadcast_to(gamma[np.arange(PROGRAMS) % 16][:, None, :], (PROGRAMS, 2, 1024)).reshape(
        PROGRAMS, LANES
    )
    plain = np.zeros((PROGRAMS, LANES), np.float32)
    total = np.zeros_like(plain)
    lost = np.zeros_like(plain)
    apart, errors = np.zeros_like(plain), np.zeros_like(plain)
    run, runs_sum = np.zeros_like(plain), 0.0
    exact = squares = 0.0
    for step in range(STEPS):
        x = to_bf16(rng.standard_normal((PROGRAMS, LANES), dtype=np.float32))
        dy = to_bf16(rng.standard_normal((PROGRAMS, LANES), dtype=np.float32))
        sech2 = (np.float32(1) / np.cosh(ALPHA * x)) ** 2
        term = (dy * g * sech2).astype(np.float32) * x
        plain += term
        compensated = term - lost
        new_total = total + compensated
        lost = (new_total - total) - compensated
        total = new_total
        summed = apart + term
        errors += term - (summed - apart)
        apart = summed
        run += term
        if (step + 1) % RUN == 0 or step + 1 == STEPS:
            runs_sum += run.astype(np.float64).sum()
            run[:] = 0
        exact += term.astype(np.float64).sum()
        squares += np.square(term.astype(np.float64)).sum()
    plain_sum = plain.sum(axis=1, dtype=np.float32).astype(np.float64).sum()
    kahan_sum = (total.astype(np.float64) - lost.astype(np.float64)).sum()
    apart_sum = (apart.astype(np.float64) + errors.astype(np.float64)).sum()
    rss = squares**0.5
    allowed = EVAL_ULPS * FP32_EPS * rss + REL_L2["param"] * abs(exact)  # the tolerance table's rule
    print(f"exact {exact:.6f} rss {rss:.1f} allowed {allowed:.4f} ({EVAL_ULPS} float32 ulps of rss "
          f"+ {REL_L2['param']} of |sum|)")  # fmt: skip
    print(f"errors: float32 lanes {plain_sum - exact:+.5f}, Kahan {kahan_sum - exact:+.5f}, "
          f"Fast2Sum errors apart {apart_sum - exact:+.5f}, "
          f"runs of {RUN} {runs_sum - exact:+.5f}")  # fmt: skip


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
