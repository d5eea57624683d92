"""Session 8 probe 3 (one H200): the forward's bf16 -> float32 widening, CUDA-graph replays, rounds
interleaved, on one shared 2^26-element buffer (views of it):

    python reports/baselines/experiments/v20-session8/fwd_unpack.py

Variants of dyt/kernels.py's dyt_fwd_kernel, made from its text (so each is the kernel as committed but
for the lines named): cast (as committed: x, gamma and beta widened by .to(tl.float32), a PRMT and a shift
for every high half), asm_all (all three by AS_FLOAT32's inline PTX, a shift or an AND per element),
asm_x (x only). Registers and SASS per thread, compiled for sm_90 (ci/sass_stats.py): asm_all 60-64 registers,
680 SASS at 4x1024x4; asm_x 56-58, 688; cast 56, 704. Every variant's y is checked bit for bit.
"""
# ruff: noqa: B023 - each closure is timed in the loop iteration that defines it

import importlib.util
import os
import pathlib
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[3]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from dyt import launcher  # noqa: E402
from dyt.bench import replay_median_ms  # noqa: E402

ROUNDS = int(os.environ.get("ROUNDS", "5"))
# bfloat16 on the GPU; a float32 dry run in the interpreter (it writes bf16 by truncation: launcher._staged)
DTYPE = getattr(torch, os.environ.get("DTYPE", "bfloat16"))
COMMITTED = """    t = _tanh(alpha * x.to(tl.float32), TANH, APPROX, SIGN_SELECT)
    y = gamma.to(tl.float32)[None, :] * t
    if HAS_BETA:
        y = y + beta.to(tl.float32)[None, :]
"""
# The helper the session tried (not kept in dyt/kernels.py): bf16 widened in inline PTX.
AS_FLOAT32 = '''@triton.jit
def _as_float32(v, PTX: tl.constexpr):
    """v in float32. bfloat16 on the GPU (PTX): each pair in a 32-bit register widened by one shift (low
    half) and one AND (high half), bit for bit the cast; the cast moves the high half down with a PRMT
    first, 3 instructions a pair instead of 2 (24 of the bf16 forward's 704 per thread, NOTES.md v20). The
    interpreter (PTX=False) and other dtypes take the cast."""
    if PTX and v.dtype == tl.bfloat16:
        r = tl.inline_asm_elementwise("{ shl.b32 $0, $2, 16; and.b32 $1, $2, 0xffff0000; }", "=r,=r,r", [v],
                                      dtype=tl.float32, is_pure=True, pack=2)  # fmt: skip
    else:
        r = v.to(tl.float32)
    return r


'''
VARIANTS = {
    "asm_all": COMMITTED.replace("x.to(tl.float32)", "_as_float32(x, APPROX)")
    .replace("gamma.to(tl.float32)", "_as_float32(gamma, APPROX)")
    .replace("beta.to(tl.float32)", "_as_float32(beta, APPROX)"),
    "asm_x": COMMITTED.replace("x.to(tl.float32)", "_as_float32(x, APPROX)"),
    "cast": COMMITTED,
}


def load_variants() -> dict:
    source = (ROOT / "dyt" / "kernels.py").read_text()
    assert COMMITTED in source, "dyt_fwd_kernel's arithmetic changed: update this probe"
    folder = pathlib.Path(tempfile.mkdtemp())
    kernels = {}
    for name, body in VARIANTS.items():
        path = folder / f"fwd_{name}.py"
        text = source.replace(COMMITTED, body).replace(
            "@triton.jit\ndef _tanh_poly(", AS_FLOAT32 + "@triton.jit\ndef _tanh_poly("
        )
        path.write_text(text)
        spec = importlib.util.spec_from_file_location(f"fwd_{name}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        kernels[name] = module.dyt_fwd_kernel
    return kernels


def caller(kernel, plan, x2d, y, a, g, b):
    args = (x2d, y, a, g, b, plan.M, plan.N, *launcher._layout_args(plan, x2d, y))
    constexprs = dict(HAS_BETA=True, BLOCK_M=plan.BLOCK_M, BLOCK_N=plan.BLOCK_N,
                      N_COL_BLOCKS=plan.n_col_blocks, INT64=plan.int64, TANH=plan.tanh,
                      APPROX=not launcher.interpreter_active(),
                      GAMMA_PERIOD=plan.gamma_period, RAGGED=plan.ragged, SIGN_SELECT=plan.sign_select,
                      PDL=plan.pdl)  # fmt: skip
    options = {"num_warps": plan.num_warps, **({"launch_pdl": True} if plan.pdl else {})}
    return lambda: kernel[plan.grid](*args, **constexprs, **options)


def main():
    kernels = load_variants()
    torch.manual_seed(0)
    device = "cpu" if launcher.interpreter_active() else "cuda"
    n = int(os.environ.get("ELEMENTS", str(2**26)))
    flat_x = torch.randn(n, device=device, dtype=DTYPE)
    flat_y = torch.empty_like(flat_x)
    cases = []
    for width in (64, 256, 768, 1024, 2048, 4096, 16384):
        m = n // width
        x2d, y2d = flat_x[: m * width].view(m, width), flat_y[: m * width].view(m, width)
        a = torch.full((1,), 0.5, device=device, dtype=DTYPE)
        g, b = torch.randn(2, width, device=device, dtype=DTYPE)
        plan = launcher.forward_plan(x2d)
        ref = launcher.forward(x2d, a, g, b, DTYPE)
        calls = {name: caller(k, plan, x2d, y2d, a, g, b) for name, k in kernels.items()}
        for name, call in calls.items():
            y2d.fill_(float("nan"))
            call()
            assert torch.equal(y2d, ref), (width, name)
        tile = f"{plan.BLOCK_M}x{plan.BLOCK_N}x{plan.num_warps}"
        cases.append(
            (f"{str(DTYPE)[6:]} {m}x{width} as {plan.M}x{plan.N} ({tile})", calls, {k: [] for k in calls})
        )
    print("all variants bit for bit equal to launcher.forward", flush=True)
    if device == "cpu":
        return
    copy_us = []
    for r in range(ROUNDS):
        copy_us.append(1e3 * replay_median_ms(lambda: flat_y.copy_(flat_x), reps=20, replays=9))
        for _, calls, times in cases:
            for name, call in calls.items():
                times[name].append(1e3 * replay_median_ms(call, reps=20, replays=9))
        print(f"round {r} done", flush=True)
    ceiling_us = 2 * n * 2 / 4248.2e3  # the a5a5683 bench's 1 GiB copy ceiling, 4248.2 GB/s
    print(
        f"copy of {2 * n} bytes each way: best {min(copy_us):.2f} us, all",
        " ".join(f"{t:.2f}" for t in copy_us),
    )
    for label, _, times in cases:
        print(label)
        for name, ts in times.items():
            all_ts = " ".join(f"{v:.2f}" for v in ts)
            ratio = ceiling_us / min(ts)
            print(f"  {name:8s} best {min(ts):7.2f} us ({ratio:.3f} of the ceiling)  all {all_ts}")


if __name__ == "__main__":
    main()
