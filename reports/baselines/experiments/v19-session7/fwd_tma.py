"""Session 7 probe (one H200), bf16 forward, CUDA-graph replays (logs beside it, same names):

    python reports/baselines/experiments/v19-session7/fwd_tma.py MODE

scaling: launcher.forward and the kernel at other tiles at 2^25, 2^26, 2^27 elements, beside copies of
the same bytes; fits t = bytes / rate + c per kernel and width (is the gap to 0.95 a rate or a fixed
cost?). tma: TMA loads and stores (one tile per program; persistent and pipelined) at 2^26. occ: fewer
programs per SM (dynamic shared memory added at launch), PDL, smaller tiles for the last programs. lut:
tanh looked up in a per-program table by x's bf16 bits (persistent programs). Every variant's y is
checked bit for bit against launcher.forward's.
"""
# ruff: noqa: B023 - each closure is timed in the loop iteration that defines it

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.abspath(os.path.join(HERE, *[".."] * 4)))  # the repo

import torch  # noqa: E402
from fwd_tma_kernels import fwd_lut, fwd_pdl_tail, fwd_tma, fwd_tma_persist  # noqa: E402
from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: E402

from dyt import kernels, launcher  # noqa: E402
from dyt.bench import replay_median_ms  # noqa: E402

CEIL = 4245.0


def us(fn, reps=20, replays=15):
    return 1e3 * replay_median_ms(fn, reps=reps, replays=replays)


def repo_call(x, y, alpha, gamma, beta, bm, bn, warps, sign, period=0):
    M, N = x.shape

    def call():
        kernels.dyt_fwd_kernel[(M // bm * (N // bn),)](
            x,
            y,
            alpha,
            gamma,
            beta,
            M,
            N,
            M * N,
            N,
            N,
            N // bn,
            HAS_BETA=True,
            BLOCK_M=bm,
            BLOCK_N=bn,
            INT64=False,
            TANH=0,
            APPROX=True,
            GAMMA_PERIOD=period,
            RAGGED=False,
            SIGN_SELECT=sign,
            PDL=False,  # added after the logs were made (v19): the kernel had no PDL then
            num_warps=warps,
        )

    return call


def params(N):
    alpha = torch.tensor([0.5], device="cuda", dtype=torch.bfloat16)
    gamma = torch.randn(N, device="cuda", dtype=torch.bfloat16)
    beta = torch.randn(N, device="cuda", dtype=torch.bfloat16)
    return alpha, gamma, beta


def scaling():
    torch.manual_seed(0)
    flat = torch.randn(1 << 27, device="cuda", dtype=torch.bfloat16)
    out = torch.empty_like(flat)
    rows = []
    for log_n in (25, 26, 27):
        n = 1 << log_n
        src, dst = flat[:n], out[:n]
        copy = us(lambda: dst.copy_(src))
        print(f"2^{log_n} copy {copy:.1f} us ({4 * n / copy / 1e3 / CEIL:.3f})", flush=True)
        for N in (64, 768, 1024, 4096, 16384):
            M = n // N
            x = src[: M * N].view(M, N)
            a, g, b = params(N)
            ref = launcher.forward(x, a, g, b, x.dtype)
            t = us(lambda: launcher.forward(x, a, g, b, x.dtype))
            rows.append((N, "launcher", log_n, t))
            print(f"N={N} 2^{log_n} launcher {t:.1f} us ratio {4 * M * N / t / 1e3 / CEIL:.3f}", flush=True)
            if N in (1024, 4096):
                for bm, bn, w, s in (
                    (4, 1024, 4, False),
                    (2, 1024, 4, False),
                    (1, 1024, 4, False),
                    (1, 1024, 2, False),
                    (8, 1024, 8, False),
                ):
                    y = torch.full_like(x, float("nan"))
                    call = repo_call(x, y, a, g, b, bm, bn, w, s)
                    call()
                    same = torch.equal(y, ref)
                    t = us(call)
                    name = f"repo {bm}x{bn}x{w}"
                    rows.append((N, name, log_n, t))
                    print(f"N={N} 2^{log_n} {name} {t:.1f} us same={same}", flush=True)
    fit(rows)


def tma():
    torch.manual_seed(0)
    n = 1 << 26
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    flat = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    dst = torch.empty_like(flat)
    copy = us(lambda: dst.copy_(flat))
    print(f"copy 268 MB {copy:.1f} us ({4 * n / copy / 1e3 / CEIL:.3f})", flush=True)
    for N, period in ((1024, 0), (4096, 0)):
        a, g, b = params(N)
        W = max(N, 1024)
        x = flat.view(n // W, W)
        ref = launcher.forward(flat.view(n // N, N), a, g, b, torch.bfloat16).view(n // W, W)
        calls = {"launcher": lambda: launcher.forward(flat.view(n // N, N), a, g, b, torch.bfloat16)}
        M = n // W
        for bm, bn, w in (
            (4, 1024, 4),
            (2, 1024, 4),
            (8, 1024, 4),
            (8, 1024, 8),
            (16, 256, 4),
            (8, 512, 4),
            (16, 512, 8),
            (32, 256, 8),
        ):
            if period:
                continue

            def mk(bm=bm, bn=bn, w=w):
                y = torch.full_like(x, float("nan"))
                xd = TensorDescriptor.from_tensor(x, [bm, bn])
                yd = TensorDescriptor.from_tensor(y, [bm, bn])

                def call():
                    fwd_tma[(M // bm * (W // bn),)](
                        xd,
                        yd,
                        a,
                        g,
                        b,
                        W // bn,
                        BLOCK_M=bm,
                        BLOCK_N=bn,
                        SIGN_SELECT=False,
                        APPROX=True,
                        num_warps=w,
                    )

                return call, y

            calls[f"tma {bm}x{bn}x{w}"] = mk()
        for bm, bn, w, stages, per_sm in (
            (4, 1024, 4, 2, 2),
            (4, 1024, 4, 3, 2),
            (4, 1024, 4, 4, 2),
            (4, 1024, 4, 3, 3),
            (4, 1024, 4, 3, 4),
            (8, 1024, 8, 3, 2),
            (2, 1024, 4, 4, 4),
            (16, 256, 4, 4, 4),
            (8, 1024, 4, 2, 3),
        ):
            if period:
                continue

            def mkp(bm=bm, bn=bn, w=w, stages=stages, per_sm=per_sm):
                y = torch.full_like(x, float("nan"))
                xd = TensorDescriptor.from_tensor(x, [bm, bn])
                yd = TensorDescriptor.from_tensor(y, [bm, bn])
                tiles = M // bm * (W // bn)

                def call():
                    fwd_tma_persist[(sms * per_sm,)](
                        xd,
                        yd,
                        a,
                        g,
                        b,
                        tiles,
                        W // bn,
                        BLOCK_M=bm,
                        BLOCK_N=bn,
                        STAGES=stages,
                        SIGN_SELECT=False,
                        APPROX=True,
                        num_warps=w,
                    )

                return call, y

            calls[f"persist {bm}x{bn}x{w} s{stages} {per_sm}/SM"] = mkp()
        results = {}
        for name, item in calls.items():
            try:
                if isinstance(item, tuple):
                    call, y = item
                    call()
                    torch.cuda.synchronize()
                    same = torch.equal(y, ref)
                else:
                    call, same = item, True
                results[name] = (same, [])
            except Exception as e:  # a variant that does not compile is reported, not fatal
                print(f"N={N} {name}: {type(e).__name__}: {str(e)[:300]}", flush=True)
        for _ in range(3):
            for name in results:
                item = calls[name]
                call = item[0] if isinstance(item, tuple) else item
                results[name][1].append(us(call))
        for name, (same, ts) in results.items():
            best = min(ts)
            print(
                f"N={N} {name:32s} same={same} us={' '.join(f'{t:.1f}' for t in ts)} "
                f"ratio={4 * n / best / 1e3 / CEIL:.3f} vs_copy={copy / best:.3f}",
                flush=True,
            )


def fit(rows):
    print("\nfit t = bytes / rate + c over 2^25..2^27 (least squares):")
    for key in sorted({(r[0], r[1]) for r in rows}):
        pts = [(4 * (1 << r[2]), r[3]) for r in rows if (r[0], r[1]) == key]
        nx = len(pts)
        mx = sum(p[0] for p in pts) / nx
        my = sum(p[1] for p in pts) / nx
        slope = sum((p[0] - mx) * (p[1] - my) for p in pts) / sum((p[0] - mx) ** 2 for p in pts)
        c = my - slope * mx
        print(
            f"N={key[0]:6d} {key[1]:26s} rate {1e-3 / slope:.0f} GB/s ({1e-3 / slope / CEIL:.3f}) "
            f"c {c:.2f} us times {' '.join(f'{p[1]:.1f}' for p in pts)} "
            f"(2^26: {4 * (1 << 26) / pts[1][1] / 1e3 / CEIL:.3f})",
            flush=True,
        )


def occ():
    """Occupancy (extra dynamic shared memory per program), PDL, and smaller tiles for the last programs."""
    torch.manual_seed(0)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    flat = torch.randn(1 << 27, device="cuda", dtype=torch.bfloat16)
    out = torch.empty_like(flat)
    rows = []
    for log_n in (25, 26, 27):
        n = 1 << log_n
        src, dst = flat[:n], out[:n]
        rows.append((0, "copy", log_n, us(lambda: dst.copy_(src))))
        for N in (1024, 4096):
            M = n // N
            x = src.view(M, N)
            a, g, b = params(N)
            ref = launcher.forward(x, a, g, b, x.dtype)
            calls = {"launcher": lambda: launcher.forward(x, a, g, b, x.dtype)}
            for sign in (True, False):
                y = torch.full_like(x, float("nan"))
                ck = kernels.dyt_fwd_kernel[(M // 4 * (N // 1024),)](
                    x,
                    y,
                    a,
                    g,
                    b,
                    M,
                    N,
                    M * N,
                    N,
                    N,
                    N // 1024,
                    HAS_BETA=True,
                    BLOCK_M=4,
                    BLOCK_N=1024,
                    INT64=False,
                    TANH=0,
                    APPROX=True,
                    GAMMA_PERIOD=0,
                    RAGGED=False,
                    SIGN_SELECT=sign,
                    PDL=False,
                    num_warps=4,
                )
                assert torch.equal(y, ref)
                tail = (True, 4, 1024, False, 0, True, 0, False, sign, False)  # ..., SIGN_SELECT, PDL
                for smem in (0, 30000, 36000, 44000, 48000):

                    def call(ck=ck, smem=smem, y=y, tail=tail):
                        stream = torch.cuda.current_stream().cuda_stream
                        ck.run(
                            M // 4 * (N // 1024),
                            1,
                            1,
                            stream,
                            ck.function,
                            (4, 1, smem),
                            None,
                            None,
                            None,
                            x,
                            y,
                            a,
                            g,
                            b,
                            M,
                            N,
                            M * N,
                            N,
                            N,
                            N // 1024,
                            *tail,
                        )

                    calls[f"4x1024x4 {'sel' if sign else 'bit'} smem{smem // 1000}"] = call
            for pdl in (False, True):
                for small, n_small in ((4, 0), (2, sms * 8), (2, sms * 16), (1, sms * 8), (1, sms * 16)):
                    if pdl and small != 4 and n_small != sms * 8:
                        continue
                    small_rows = n_small * small
                    n_big = (M - small_rows) // 4
                    grid = (n_big + n_small) * (N // 1024)
                    y = torch.full_like(x, float("nan"))

                    def call(y=y, grid=grid, n_big=n_big, small=small, pdl=pdl):
                        fwd_pdl_tail[(grid,)](
                            x,
                            y,
                            a,
                            g,
                            b,
                            N,
                            N // 1024,
                            n_big,
                            BLOCK_M=4,
                            BLOCK_N=1024,
                            SIGN_SELECT=True,
                            PDL=pdl,
                            SMALL_M=small,
                            num_warps=4,
                            launch_pdl=pdl,
                        )

                    call()
                    torch.cuda.synchronize()
                    name = f"pdl_tail pdl{int(pdl)} small{small}x{n_small // sms}/SM"
                    if not torch.equal(y, ref):
                        print("MISMATCH", name, flush=True)
                    calls[name] = call
            for name, call in calls.items():
                t = min(us(call) for _ in range(2))
                rows.append((N, name, log_n, t))
        print(f"2^{log_n} done", flush=True)
    fit(rows)


def lut():
    """tanh by table lookup (bf16 x): persistent programs over contiguous runs of 4096-element row tiles."""
    torch.manual_seed(0)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    flat = torch.randn(1 << 27, device="cuda", dtype=torch.bfloat16)
    out = torch.empty_like(flat)
    rows = []
    N = 1024
    for log_n in (25, 26, 27):
        n = 1 << log_n
        src, dst = flat[:n], out[:n]
        rows.append((0, "copy", log_n, us(lambda: dst.copy_(src))))
        M = n // N
        x = src.view(M, N)
        a, g, b = params(N)
        ref = launcher.forward(x, a, g, b, x.dtype)
        exact = g.double() * torch.tanh(a.double() * x.double()) + b.double()
        calls = {"launcher": lambda: launcher.forward(x, a, g, b, x.dtype)}
        for bm, w in ((4, 4), (4, 8), (2, 4), (8, 8), (2, 2)):
            for per_sm in (4, 6, 8, 12, 16):
                programs = sms * per_sm
                tiles = M // bm
                tpp = -(-tiles // programs)
                grid = -(-tiles // tpp)
                y = torch.full_like(x, float("nan"))

                def call(y=y, bm=bm, w=w, grid=grid, tpp=tpp, tiles=tiles):
                    fwd_lut[(grid,)](
                        x,
                        y,
                        a,
                        g,
                        b,
                        N,
                        tiles,
                        tpp,
                        BLOCK_M=bm,
                        BLOCK_N=N,
                        TABLE=2048,
                        APPROX=True,
                        num_warps=w,
                    )

                try:
                    call()
                    torch.cuda.synchronize()
                except Exception as e:
                    print(f"lut {bm}x{w} {per_sm}/SM: {type(e).__name__} {str(e)[:200]}", flush=True)
                    continue
                if log_n == 26 and per_sm == 8:
                    diff = (y != ref).sum().item()
                    err_new = (y.double() - exact).abs().max().item()
                    err_old = (ref.double() - exact).abs().max().item()
                    print(
                        f"lut {bm}x1024x{w}: {diff} elements differ from launcher's; max |y - exact| "
                        f"{err_new:.3g} (launcher {err_old:.3g}), NaNs {y.isnan().sum().item()}",
                        flush=True,
                    )
                calls[f"lut {bm}x1024x{w} {per_sm}/SM"] = call
        for name, call in calls.items():
            t = min(us(call) for _ in range(2))
            rows.append((N, name, log_n, t))
        print(f"2^{log_n} done", flush=True)
    fit(rows)


if __name__ == "__main__":
    {"scaling": scaling, "tma": tma, "occ": occ, "lut": lut}[sys.argv[1]]()
