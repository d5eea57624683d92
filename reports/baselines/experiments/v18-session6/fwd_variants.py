"""Session 6 probe (one H200): forward variants on one 2^26-element bf16 buffer, CUDA-graph replays, against
a copy of the same bytes (268 MB) in the same process; every variant's y checked bit for bit against
launcher.forward's.

    python reports/baselines/experiments/v18-session6/fwd_variants.py kernels  # fwd_variants-call2.log
    python reports/baselines/experiments/v18-session6/fwd_variants.py tiles  # fwd_variants-call3.log

kernels: the repo's kernel at 4x1024 and other tiles with either sign form, a copy without masks
(fwd_even), and a persistent kernel that loads the next tile into registers first (fwd_prefetch); at
widths 1024 and 4096. tiles: the repo's kernel at 1024-, 2048- and 4096-column blocks, widths 1024, 4096
and 16384. (The 'ratio' column of the logs divides by a 1 GiB copy measured wrongly low here; the bench's
ceiling is 4246 GB/s; 'vs_copy' is the ratio to the same-size copy.)
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(os.path.dirname(os.path.dirname(HERE))), HERE]

import torch  # noqa: E402
from fwd_kernels import fwd_even, fwd_prefetch  # noqa: E402

from dyt import kernels, launcher  # noqa: E402
from dyt.bench import replay_median_ms  # noqa: E402

N_EL = 1 << 26
REPO_TILES = {
    "kernels": [(4, 1024, 4), (2, 1024, 4), (8, 1024, 4), (8, 1024, 8), (4, 1024, 8), (2, 1024, 2)],
    "tiles": [(4, 1024, 4), (2, 1024, 4), (1, 4096, 4), (2, 2048, 4), (1, 4096, 8), (1, 2048, 4)],
}
WIDTHS = {"kernels": (1024, 4096), "tiles": (1024, 4096, 16384)}


def graph_us(fn, reps=20, replays=15):
    """Median device time per call of fn, in us (CUDA-graph replays; the run used a local copy of this)."""
    return 1e3 * replay_median_ms(fn, reps=reps, replays=replays)


def variants(which, x, alpha, gamma, beta, sm_count):
    M, N = x.shape
    out = {}

    def repo(bm, bn, warps, sign):
        def call(y):
            kernels.dyt_fwd_kernel[(M // bm * (N // bn),)](
                x, y, alpha, gamma, beta, M, N, N_EL, N, N, N // bn, HAS_BETA=True, BLOCK_M=bm, BLOCK_N=bn,
                INT64=False, TANH=0, APPROX=True, GAMMA_PERIOD=0, RAGGED=False, SIGN_SELECT=sign, PDL=False,
                num_warps=warps,
            )  # fmt: skip

        return call

    for bm, bn, warps in REPO_TILES[which]:
        if bn <= N:
            for sign in (True, False):
                out[f"repo {bm}x{bn}x{warps} {'sel' if sign else 'bit'}"] = repo(bm, bn, warps, sign)
    if which != "kernels":
        return out

    def even(bm, warps, sign):
        def call(y):
            fwd_even[(M // bm * (N // 1024),)](x, y, alpha, gamma, beta, N, N // 1024, BLOCK_M=bm,
                                               BLOCK_N=1024, SIGN_SELECT=sign, EARLY=False,
                                               num_warps=warps)  # fmt: skip

        return call

    def prefetch(bm, warps, per_sm):
        ncb = N // 1024
        programs = sm_count * per_sm // ncb * ncb

        def call(y):
            fwd_prefetch[(programs,)](x, y, alpha, gamma, beta, N, M // bm, ncb, programs // ncb, BLOCK_M=bm,
                                      BLOCK_N=1024, SIGN_SELECT=True, num_warps=warps)  # fmt: skip

        return call

    for bm, warps in ((4, 4), (8, 4)):
        for sign in (True, False):
            out[f"even {bm}x1024x{warps} {'sel' if sign else 'bit'}"] = even(bm, warps, sign)
    for bm, warps, per_sm in ((4, 4, 6), (4, 4, 8), (2, 4, 12), (2, 4, 16), (4, 8, 4), (8, 8, 3)):
        out[f"prefetch {bm}x1024x{warps} {per_sm}/SM sel"] = prefetch(bm, warps, per_sm)
    return out


def main(which):
    torch.manual_seed(0)
    sm_count = torch.cuda.get_device_properties(0).multi_processor_count
    flat = torch.randn(N_EL, device="cuda", dtype=torch.bfloat16)
    copied = torch.empty_like(flat)
    copy_us = graph_us(lambda: copied.copy_(flat))
    print(f"copy of 268 MB: {copy_us:.1f} us", flush=True)
    for N in WIDTHS[which]:
        x = flat.view(N_EL // N, N)
        alpha = torch.tensor([0.5], device="cuda", dtype=torch.bfloat16)
        gamma = torch.randn(N, device="cuda", dtype=torch.bfloat16)
        beta = torch.randn(N, device="cuda", dtype=torch.bfloat16)
        reference = launcher.forward(x, alpha, gamma, beta, x.dtype)
        calls = variants(which, x, alpha, gamma, beta, sm_count)
        outputs = {name: torch.full_like(x, float("nan")) for name in calls}
        same = {}
        for name, call in calls.items():
            call(outputs[name])
            same[name] = bool(torch.equal(outputs[name], reference))
        args = (x, alpha, gamma, beta)
        calls["launcher.forward"] = lambda y, args=args: launcher.forward(*args, args[0].dtype)
        same["launcher.forward"] = True
        times = {name: [] for name in calls}
        for _ in range(3):
            for name, call in calls.items():
                y = outputs.get(name, reference)
                times[name].append(graph_us(lambda call=call, y=y: call(y)))
        for name, us in times.items():
            best = min(us)
            print(f"N={N} {name:34s} same={same[name]} us={' '.join(f'{u:.1f}' for u in us)} "
                  f"vs_copy={copy_us / best:.3f}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tiles")
