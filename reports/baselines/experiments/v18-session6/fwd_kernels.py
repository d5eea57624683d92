"""Forward variants of the session-6 probe (no torch import, so sass tools can compile them)."""

import triton
import triton.language as tl

from dyt.kernels import _tanh


@triton.jit
def fwd_even(
    X,
    Y,
    ALPHA,
    GAMMA,
    BETA,
    N,
    n_col_blocks,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SIGN_SELECT: tl.constexpr,
    EARLY: tl.constexpr,
):
    pid = tl.program_id(0)
    pid_m = pid // n_col_blocks
    pid_n = pid % n_col_blocks
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs = rows[:, None] * N + cols[None, :]
    x = tl.load(X + offs).to(tl.float32)
    alpha = tl.load(ALPHA).to(tl.float32)
    gamma = tl.load(GAMMA + cols).to(tl.float32)
    beta = tl.load(BETA + cols).to(tl.float32)
    t = _tanh(alpha * x, 0, True, SIGN_SELECT)
    y = gamma[None, :] * t + beta[None, :]
    tl.store(Y + offs, y.to(Y.dtype.element_ty))


@triton.jit
def fwd_prefetch(
    X,
    Y,
    ALPHA,
    GAMMA,
    BETA,
    N,
    n_row_tiles,
    n_col_blocks,
    row_step,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SIGN_SELECT: tl.constexpr,
):
    """Persistent: program p owns column block p % n_col_blocks, row tiles p // ncb, + row_step, ...; the next
    tile's x is loaded into registers before this one is computed."""
    pid = tl.program_id(0)
    pid_n = pid % n_col_blocks
    tile = pid // n_col_blocks
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    r = tl.arange(0, BLOCK_M)
    alpha = tl.load(ALPHA).to(tl.float32)
    gamma = tl.load(GAMMA + cols).to(tl.float32)
    beta = tl.load(BETA + cols).to(tl.float32)
    offs = (tile * BLOCK_M + r)[:, None] * N + cols[None, :]
    x = tl.load(X + offs)
    for i in tl.range(tile, n_row_tiles, row_step, num_stages=1):
        nxt = i + row_step
        noffs = (nxt * BLOCK_M + r)[:, None] * N + cols[None, :]
        x_next = tl.load(X + noffs, mask=(nxt * BLOCK_M + r)[:, None] < n_row_tiles * BLOCK_M, other=0.0)
        t = _tanh(alpha * x.to(tl.float32), 0, True, SIGN_SELECT)
        y = gamma[None, :] * t + beta[None, :]
        tl.store(Y + offs, y.to(Y.dtype.element_ty))
        x = x_next
        offs = noffs
