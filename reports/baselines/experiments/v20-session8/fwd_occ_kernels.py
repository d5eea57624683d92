"""Session 8 probe kernels: dyt_fwd_kernel with the column-block count as a compile-time constant
(N_COL_BLOCKS: pid // 4 is a shift, not a runtime division) and, optionally, every load issued before
the arithmetic (HOIST: the loads made volatile, which ptxas keeps in program order); fwd_cache.py adds
cache hints (X_CACHE, X_EVICT for x; P_EVICT for gamma and beta). Same bits as
dyt.kernels.dyt_fwd_kernel; helpers are the kernels' own."""

import triton
import triton.language as tl

from dyt.kernels import _launch_dependents, _param_index, _tanh, _tile, _wait_for_primary


@triton.jit
def fwd_const_blocks(
    X, Y, ALPHA, GAMMA, BETA,
    M, N, n_elements, stride_xm, stride_ym,
    N_COL_BLOCKS: tl.constexpr,
    HAS_BETA: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    INT64: tl.constexpr, TANH: tl.constexpr, APPROX: tl.constexpr, GAMMA_PERIOD: tl.constexpr,
    RAGGED: tl.constexpr, SIGN_SELECT: tl.constexpr, PDL: tl.constexpr, HOIST: tl.constexpr,
    X_CACHE: tl.constexpr = "", X_EVICT: tl.constexpr = "", P_EVICT: tl.constexpr = "",
):  # fmt: skip
    _wait_for_primary(PDL)
    _launch_dependents(PDL)
    pid = tl.program_id(0)
    pid_m = pid // N_COL_BLOCKS
    pid_n = pid % N_COL_BLOCKS
    rows, cols, mask = _tile(pid_m, pid_n, M, N, n_elements, BLOCK_M, BLOCK_N, INT64, RAGGED)
    col_ok = cols < N
    index = _param_index(cols, GAMMA_PERIOD)
    alpha = tl.load(ALPHA).to(tl.float32)
    gamma = tl.load(GAMMA + index, mask=col_ok, other=0.0, volatile=HOIST, eviction_policy=P_EVICT)
    beta = tl.load(BETA + index, mask=col_ok, other=0.0, volatile=HOIST, eviction_policy=P_EVICT)
    x = tl.load(X + rows[:, None] * stride_xm + cols[None, :], mask=mask, other=0.0, volatile=HOIST,
                cache_modifier=X_CACHE, eviction_policy=X_EVICT)  # fmt: skip
    t = _tanh(alpha * x.to(tl.float32), TANH, APPROX, SIGN_SELECT)
    y = gamma.to(tl.float32)[None, :] * t
    if HAS_BETA:
        y = y + beta.to(tl.float32)[None, :]
    tl.store(Y + rows[:, None] * stride_ym + cols[None, :], y.to(Y.dtype.element_ty), mask=mask)
