"""Session 9 probe kernels: dyt_fwd_kernel (01b9b53's, loads first) with two knobs.

PARAMS=1 loads gamma and beta once as GAMMA_PERIOD-wide vectors and broadcasts them to the tile's columns in
the kernel (the compiler stages the layout change through shared memory): one request per line per warp
instead of every lane loading its own copy of the same 128-1024 bytes (PARAMS=0, the production kernel).
GROUP > 0 numbers the programs in groups of GROUP row tiles, every column block of the group's first tile
before... no: column block outer within the group (pid -> (group, pid_n, row in group)), a different order of
2 KB segments in memory at the same tile. Same bits as dyt.kernels.dyt_fwd_kernel; helpers are its own."""

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
def fwd_probe(
    X, Y, ALPHA, GAMMA, BETA,
    M, N, n_elements, stride_xm, stride_ym,
    HAS_BETA: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, N_COL_BLOCKS: tl.constexpr,
    INT64: tl.constexpr, TANH: tl.constexpr, APPROX: tl.constexpr, GAMMA_PERIOD: tl.constexpr,
    RAGGED: tl.constexpr, SIGN_SELECT: tl.constexpr, PDL: tl.constexpr,
    PARAMS: tl.constexpr = 0, GROUP: tl.constexpr = 0,
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
    alpha = tl.load(ALPHA).to(tl.float32)
    gamma = _params(GAMMA, index, col_ok, BLOCK_N, GAMMA_PERIOD, PARAMS)
    if HAS_BETA:
        beta = _params(BETA, index, col_ok, BLOCK_N, GAMMA_PERIOD, PARAMS)
    x = tl.load(X + rows[:, None] * stride_xm + cols[None, :], mask=mask, other=0.0)
    t = _tanh(alpha * x.to(tl.float32), TANH, APPROX, SIGN_SELECT)
    y = gamma.to(tl.float32)[None, :] * t
    if HAS_BETA:
        y = y + beta.to(tl.float32)[None, :]
    tl.store(Y + rows[:, None] * stride_ym + cols[None, :], y.to(Y.dtype.element_ty), mask=mask)
