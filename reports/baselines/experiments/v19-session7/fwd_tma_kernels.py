"""Session 7 probe: the bf16 forward with TMA (tensor descriptors) instead of per-thread loads and stores."""

import triton
import triton.language as tl

from dyt.kernels import _launch_dependents, _tanh, _wait_for_primary, _with_sign_of


@triton.jit
def fwd_tma(
    x_desc,
    y_desc,
    ALPHA,
    GAMMA,
    BETA,
    n_col_blocks,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SIGN_SELECT: tl.constexpr,
    APPROX: tl.constexpr,
):
    """One tile per program, loaded and stored by the copy engine of the SM (TMA)."""
    pid = tl.program_id(0)
    pid_m = pid // n_col_blocks
    pid_n = pid % n_col_blocks
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    x = x_desc.load([pid_m * BLOCK_M, pid_n * BLOCK_N]).to(tl.float32)
    alpha = tl.load(ALPHA).to(tl.float32)
    gamma = tl.load(GAMMA + cols).to(tl.float32)
    beta = tl.load(BETA + cols).to(tl.float32)
    t = _tanh(alpha * x, 0, APPROX, SIGN_SELECT)
    y = gamma[None, :] * t + beta[None, :]
    y_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], y.to(tl.bfloat16))


@triton.jit
def fwd_tma_persist(
    x_desc,
    y_desc,
    ALPHA,
    GAMMA,
    BETA,
    n_tiles,
    n_col_blocks,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    STAGES: tl.constexpr,
    SIGN_SELECT: tl.constexpr,
    APPROX: tl.constexpr,
):
    """Persistent: program p takes tiles p, p + P, ...; Triton pipelines the TMA loads STAGES deep."""
    pid = tl.program_id(0)
    step = tl.num_programs(0)
    alpha = tl.load(ALPHA).to(tl.float32)
    for tile in tl.range(pid, n_tiles, step, num_stages=STAGES):
        pid_m = tile // n_col_blocks
        pid_n = tile % n_col_blocks
        cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        x = x_desc.load([pid_m * BLOCK_M, pid_n * BLOCK_N]).to(tl.float32)
        gamma = tl.load(GAMMA + cols).to(tl.float32)
        beta = tl.load(BETA + cols).to(tl.float32)
        t = _tanh(alpha * x, 0, APPROX, SIGN_SELECT)
        y = gamma[None, :] * t + beta[None, :]
        y_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], y.to(tl.bfloat16))


@triton.jit
def _fwd_rows(
    X,
    Y,
    alpha,
    GAMMA,
    BETA,
    row0,
    N,
    pid_n,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SIGN_SELECT: tl.constexpr,
):
    rows = row0 + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs = rows[:, None] * N + cols[None, :]
    x = tl.load(X + offs).to(tl.float32)
    gamma = tl.load(GAMMA + cols).to(tl.float32)
    beta = tl.load(BETA + cols).to(tl.float32)
    t = _tanh(alpha * x, 0, True, SIGN_SELECT)
    y = gamma[None, :] * t + beta[None, :]
    tl.store(Y + offs, y.to(Y.dtype.element_ty))


@triton.jit
def fwd_pdl_tail(
    X,
    Y,
    ALPHA,
    GAMMA,
    BETA,
    N,
    n_col_blocks,
    n_big,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SIGN_SELECT: tl.constexpr,
    PDL: tl.constexpr,
    SMALL_M: tl.constexpr,
):
    """Even shapes only. With PDL, waits for the previous kernel first and lets the next one launch at
    once. Programs from n_big on take SMALL_M-row tiles (the last ones dispatched: a shorter tail)."""
    _wait_for_primary(PDL)
    _launch_dependents(PDL)
    pid = tl.program_id(0)
    pid_m = pid // n_col_blocks
    pid_n = pid % n_col_blocks
    alpha = tl.load(ALPHA).to(tl.float32)
    if pid_m < n_big:
        _fwd_rows(X, Y, alpha, GAMMA, BETA, pid_m * BLOCK_M, N, pid_n, BLOCK_M, BLOCK_N, SIGN_SELECT)
    else:
        _fwd_rows(
            X,
            Y,
            alpha,
            GAMMA,
            BETA,
            n_big * BLOCK_M + (pid_m - n_big) * SMALL_M,
            N,
            pid_n,
            SMALL_M,
            BLOCK_N,
            SIGN_SELECT,
        )


@triton.jit
def fwd_lut(
    X,
    Y,
    ALPHA,
    GAMMA,
    BETA,
    N,
    n_row_tiles,
    tiles_per_prog,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    TABLE: tl.constexpr,
    APPROX: tl.constexpr,
):
    """bf16 only, rows of width BLOCK_N (N == BLOCK_N): tanh(|alpha| |x|) for the TABLE bf16 values above
    lo (2^-12 / |alpha|) computed once per program, then looked up by x's bits for a run of row tiles."""
    pid = tl.program_id(0)
    alpha = tl.load(ALPHA).to(tl.float32)
    abs_alpha = tl.abs(alpha)
    lo_val = (1.0 / 4096.0) / abs_alpha
    lo = (lo_val.to(tl.uint32, bitcast=True) >> 16) & 0x7FFF  # bf16 bits at or below 2^-12 / |alpha|
    entry_bits = (lo + tl.arange(0, TABLE)) << 16
    entry_x = entry_bits.to(tl.float32, bitcast=True)
    table = _tanh(abs_alpha * entry_x, 0, APPROX, False)
    cols = tl.arange(0, BLOCK_N)
    gamma = tl.load(GAMMA + cols).to(tl.float32)
    beta = tl.load(BETA + cols).to(tl.float32)
    first = pid * tiles_per_prog
    last = tl.minimum(first + tiles_per_prog, n_row_tiles)
    for tile in range(first, last):
        rows = tile * BLOCK_M + tl.arange(0, BLOCK_M)
        offs = rows[:, None] * N + cols[None, :]
        xb = tl.load(X + offs)
        x = xb.to(tl.float32)
        z = alpha * x
        bits = xb.to(tl.uint16, bitcast=True).to(tl.uint32) & 0x7FFF
        idx = tl.minimum(bits - lo, TABLE - 1)  # unsigned: below lo wraps high (those take the z branch)
        t_big = tl.gather(table, tl.reshape(idx, (BLOCK_M * BLOCK_N,)), 0)
        t_big = _with_sign_of(tl.reshape(t_big, (BLOCK_M, BLOCK_N)), z)
        s = z * z
        t_small = z + z * (s * -0.3333333432674408)
        t = tl.where(tl.abs(z) >= 1.0 / 2048.0, t_big, t_small)  # NaN z takes t_small: NaN
        y = gamma[None, :] * t + beta[None, :]
        tl.store(Y + offs, y.to(Y.dtype.element_ty))
