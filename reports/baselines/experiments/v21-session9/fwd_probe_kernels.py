"""Session 9 probe kernels: dyt_fwd_kernel (01b9b53's, loads first) with three knobs.

PARAMS=1 loads gamma and beta once as GAMMA_PERIOD-wide vectors and broadcasts them to the tile's columns
in the kernel (at 256 and 512 the compiler stages the layout change through shared memory): one request per
line per warp instead of every lane loading its own copy of the same 128-1024 bytes (PARAMS=0, the
production kernel). PARAMS=2 loads each lane's 8 parameters as two 16-byte halves (_params_in_halves).
X_FIRST loads x before the parameters (no change in registers, compiled for sm_90). GROUP > 0 numbers the
programs in groups of GROUP row tiles with the column block outer (pid -> (group, pid_n, row in group)):
another order of 2 KB segments in memory at the same tile. Same bits as dyt.kernels.dyt_fwd_kernel;
helpers are its own."""

import triton
import triton.language as tl

from dyt.kernels import _launch_dependents, _param_index, _tanh, _tile, _wait_for_primary


@triton.jit
def _params(PTR, index, col_ok, BLOCK_N: tl.constexpr, GAMMA_PERIOD: tl.constexpr, PARAMS: tl.constexpr):
    if PARAMS == 1 and GAMMA_PERIOD > 0:
        small = tl.load(PTR + tl.arange(0, GAMMA_PERIOD))
        p = tl.reshape(tl.broadcast_to(small[None, :], (BLOCK_N // GAMMA_PERIOD, GAMMA_PERIOD)), (BLOCK_N,))
    else:
        p = tl.load(PTR + index, mask=col_ok, other=0.0)
    return p


@triton.jit
def _params_in_halves(PTR, pid_n, N, BLOCK_N: tl.constexpr, GAMMA_PERIOD: tl.constexpr):
    """PARAMS=2: each lane's 8 consecutive parameters as two 16-byte loads of 4, joined in registers into
    the x tile's 8-per-lane layout: for float32 parameters Triton otherwise loads 4 per lane and moves them
    to that layout through shared memory (barriers in every program)."""
    cols8 = pid_n * BLOCK_N + tl.arange(0, BLOCK_N // 8) * 8
    idx8 = cols8
    if GAMMA_PERIOD > 0:
        idx8 = cols8 % GAMMA_PERIOD
    idx8 = tl.multiple_of(idx8, 8)
    four = tl.arange(0, 4)
    lo_idx = idx8[:, None] + four[None, :]
    ok = (cols8[:, None] + four[None, :]) < N
    lo = tl.load(PTR + lo_idx, mask=ok, other=0.0)
    hi = tl.load(PTR + lo_idx + 4, mask=(cols8[:, None] + four[None, :] + 4) < N, other=0.0)
    return tl.reshape(tl.permute(tl.join(lo, hi), (0, 2, 1)), (BLOCK_N,))


@triton.jit
def fwd_probe(
    X, Y, ALPHA, GAMMA, BETA,
    M, N, n_elements, stride_xm, stride_ym,
    HAS_BETA: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, N_COL_BLOCKS: tl.constexpr,
    INT64: tl.constexpr, TANH: tl.constexpr, APPROX: tl.constexpr, GAMMA_PERIOD: tl.constexpr,
    RAGGED: tl.constexpr, SIGN_SELECT: tl.constexpr, PDL: tl.constexpr,
    PARAMS: tl.constexpr = 0, GROUP: tl.constexpr = 0, X_FIRST: tl.constexpr = 0,
):  # fmt: skip
    _wait_for_primary(PDL)
    _launch_dependents(PDL)
    pid = tl.program_id(0)
    if GROUP > 0:
        in_group = pid % (GROUP * N_COL_BLOCKS)
        pid_m = (pid // (GROUP * N_COL_BLOCKS)) * GROUP + in_group % GROUP
        pid_n = in_group // GROUP
    else:
        pid_m = pid // N_COL_BLOCKS
        pid_n = pid % N_COL_BLOCKS
    rows, cols, mask = _tile(pid_m, pid_n, M, N, n_elements, BLOCK_M, BLOCK_N, INT64, RAGGED)
    col_ok = cols < N
    index = _param_index(cols, GAMMA_PERIOD)
    if X_FIRST:
        x = tl.load(X + rows[:, None] * stride_xm + cols[None, :], mask=mask, other=0.0)
    alpha = tl.load(ALPHA).to(tl.float32)
    if PARAMS == 2:
        gamma = _params_in_halves(GAMMA, pid_n, N, BLOCK_N, GAMMA_PERIOD)
    else:
        gamma = _params(GAMMA, index, col_ok, BLOCK_N, GAMMA_PERIOD, PARAMS)
    if HAS_BETA:
        if PARAMS == 2:
            beta = _params_in_halves(BETA, pid_n, N, BLOCK_N, GAMMA_PERIOD)
        else:
            beta = _params(BETA, index, col_ok, BLOCK_N, GAMMA_PERIOD, PARAMS)
    if not X_FIRST:
        x = tl.load(X + rows[:, None] * stride_xm + cols[None, :], mask=mask, other=0.0)
    t = _tanh(alpha * x.to(tl.float32), TANH, APPROX, SIGN_SELECT)
    y = gamma.to(tl.float32)[None, :] * t
    if HAS_BETA:
        y = y + beta.to(tl.float32)[None, :]
    tl.store(Y + rows[:, None] * stride_ym + cols[None, :], y.to(Y.dtype.element_ty), mask=mask)
