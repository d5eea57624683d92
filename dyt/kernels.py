"""The Triton kernels, and nothing else: forward, backward (one pass), and the backward's finishing reduction.

Every kernel works on a 2-D tile of BLOCK_M rows by BLOCK_N columns of a (M, N) row-major view whose
rows may be strided. Programs are numbered on a 1-D grid only (grid axis 1 holds at most 65,535 blocks),
and a program id is split into (row tile, column block) by division. Launch shapes come from
dyt.planner; these kernels take them as compile-time constants.

Arithmetic is float32 whatever the storage dtypes. Lanes that hold no element (columns past N, rows
past M) are masked after the arithmetic, so tanh(inf * 0) = NaN computed there never reaches a sum.
"""

import triton
import triton.language as tl
from triton.language.extra import libdevice

from dyt.planner import POLY_LIMITS

# TANH (a constexpr) numbers the tanh method as dyt.planner.TANH_METHODS does: 0 poly_exp (default: odd
# polynomial near 0, exp2 and a reciprocal elsewhere; a few float32 ulps), 1 libdevice (CUDA's tanhf; no
# interpreter implementation), 2 hw_approx (PTX tanh.approx.f32, relative error ~2^-11: opt-in, GPU only).

# Below this |z| the polynomial is used; at and above it, 1 - 2 / (exp(2|z|) + 1). The forward may take the
# short polynomial instead (POLY_TERMS = 3, a table entry's "poly"), below its own limit.
_POLY_LIMIT = tl.constexpr(POLY_LIMITS[5])
_SHORT_POLY_LIMIT = tl.constexpr(POLY_LIMITS[3])
_TWO_LOG2E = tl.constexpr(2.8853900817779268)  # 2 / ln(2): exp(2a) = exp2(2a / ln 2)
_NEG_LOG2E = tl.constexpr(-1.4426950408889634)  # exp(-a) = exp2(a * -1 / ln 2): one multiply


@triton.jit
def _rcp(d, APPROX: tl.constexpr):
    """1 / d. On the GPU, rcp.approx (one MUFU, 1 ulp) where the caller's d keeps it in range; the
    interpreter has no PTX, so there (APPROX=False) it is a plain division. Callers: d = exp(2a) + 1,
    whose reciprocal rounding to 0 past 2^126 is harmless (tanh = 1 there), and d = 1 + h^2 in [1, 2]."""
    if APPROX:
        r = tl.inline_asm_elementwise("rcp.approx.ftz.f32 $0, $1;", "=r,r", [d], dtype=tl.float32,
                                      is_pure=True, pack=1)  # fmt: skip
    else:
        r = 1.0 / d
    return r


@triton.jit
def _exp2(x, APPROX: tl.constexpr):
    """2^x. On the GPU, ex2.approx.ftz (one MUFU): tl.exp2 lowers to the non-ftz form, whose extra
    compare-and-scale keeps results below 2^-126, which no caller needs (the backward's h = 2^-a log2(e)
    only gets there past a ~ 87, where sech^2 has underflowed anyway; the forward's argument is >= 0).
    The interpreter (APPROX=False) uses tl.exp2."""
    if APPROX:
        r = tl.inline_asm_elementwise("ex2.approx.ftz.f32 $0, $1;", "=r,r", [x], dtype=tl.float32,
                                      is_pure=True, pack=1)  # fmt: skip
    else:
        r = tl.exp2(x)
    return r


@triton.jit
def _f32(v, APPROX: tl.constexpr):
    """v (a loaded x, dy or parameter) in float32. On the GPU (APPROX) the plain conversion, exact for every
    storage dtype. Triton's interpreter (APPROX=False) widens bfloat16 wrongly where it is subnormal (its
    _convert_float: 3 * 2^-133 comes back as 2^-127, 2^-129 as 0; Triton 3.9), so there a bfloat16's 16 bits
    become the high half of the float32's, which is exactly what the conversion is."""
    if APPROX:
        r = v.to(tl.float32)
    elif v.dtype == tl.bfloat16:
        r = (v.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)
    else:
        r = v.to(tl.float32)
    return r


@triton.jit
def _tanh_poly(z):
    """Minimax fit of tanh(z) = z + z^3 * P(z^2) on [0, 0.6]; 1.2 float32 ulps there."""
    s = z * z
    p = -0.005895386449992657
    p = p * s + 0.02079615369439125
    p = p * s - 0.053783878684043884
    p = p * s + 0.13331924378871918
    p = p * s - 0.33333298563957214
    return z + (z * s) * p


@triton.jit
def _tanh_poly_short(z):
    """tanh(z) = z + z^3 P(z^2) with 3 coefficients on [0, 0.4] (fit weighted to relative error): two FFMA
    fewer than _tanh_poly. 2.4 float32 ulps there, and 1 - 2 / (exp(2|z|) + 1) loses up to ~3.8 ulps to
    cancellation just above 0.4 on the GPU (against ~2.3 above 0.6): inside the suites' 8 float32 ulps."""
    s = z * z
    p = -0.047794003039598465
    p = p * s + 0.13277624547481537
    p = p * s - 0.333318829536438
    return z + (z * s) * p


@triton.jit
def _with_sign_of(magnitude, z):
    """magnitude (>= 0 or NaN) with the sign bit of z: one bitwise op, where a compare and a select of
    +-magnitude take three."""
    bits = magnitude.to(tl.uint32, bitcast=True) | (z.to(tl.uint32, bitcast=True) & 0x80000000)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _poly(z, POLY_TERMS: tl.constexpr):
    if POLY_TERMS == 3:
        t = _tanh_poly_short(z)
    else:
        t = _tanh_poly(z)
    return t


@triton.jit
def _tanh(z, TANH: tl.constexpr, APPROX: tl.constexpr, SIGN_SELECT: tl.constexpr,
          POLY_TERMS: tl.constexpr = 5):  # fmt: skip
    """tanh(z) in float32 (the forward's helper). TANH picks the method; the interpreter has only 0.

    SIGN_SELECT picks how method 0 gives the exp branch its sign: a compare and select, or one bitwise op
    (_with_sign_of). Same bits either way; the compiler's registers and schedule differ, and which one is
    faster depends on the tile (a launch-table entry's "sign", docs/kernels.md). POLY_TERMS (5 or 3) picks
    method 0's polynomial and its limit: 3 saves two FFMA per element for ~1.5 float32 ulps more error,
    faster at some tiles and slower at others (a table entry's "poly").
    """
    if TANH == 0:
        LIMIT: tl.constexpr = _SHORT_POLY_LIMIT if POLY_TERMS == 3 else _POLY_LIMIT
        a = tl.abs(z)
        t_exp = 1.0 - 2.0 * _rcp(_exp2(a * _TWO_LOG2E, APPROX) + 1.0, APPROX)  # past |z| ~ 44: inf, so t = 1
        if SIGN_SELECT:
            t = tl.where(a < LIMIT, _poly(z, POLY_TERMS), tl.where(z < 0, -t_exp, t_exp))
        else:
            t = _with_sign_of(tl.where(a < LIMIT, _poly(a, POLY_TERMS), t_exp), z)
    elif TANH == 1:
        t = libdevice.tanh(z)
    else:
        t = tl.inline_asm_elementwise(
            "tanh.approx.f32 $0, $1;", "=r,r", [z], dtype=tl.float32, is_pure=True, pack=1
        )
    return t


@triton.jit
def _sech_and_q(a, APPROX: tl.constexpr):
    """sech(a) = 2h / (1 + h^2) and q = 1 - tanh(a) = h * sech(a), with h = exp(-a), for a >= 0.

    Both stay accurate down into float32's subnormals: exp(2a) would overflow past a ~ 44, but h only
    flushes to zero past a ~ 87, long after sech^2 = sech * sech (one rounding, the last product) has
    underflowed. sech^2 is a nonzero float32 (and bfloat16) subnormal until a ~ 52.
    """
    h = _exp2(a * _NEG_LOG2E, APPROX)
    sech = (2.0 * _rcp(1.0 + h * h, APPROX)) * h
    return sech, h * sech


@triton.jit
def _tanh_sech2(z, TANH: tl.constexpr, APPROX: tl.constexpr, POLY_TERMS: tl.constexpr):
    """tanh(z) and sech(z)^2 = 1 - tanh(z)^2 in float32 (the backward's helper), a few float32 ulps each.

    sech^2 is sech * sech from exp(-|z|) at every z, never 1 - t*t, which cancels to zero once |tanh|
    rounds to 1. tanh takes the polynomial of POLY_TERMS terms (as _tanh's) below its limit (0.6, or 0.4
    for 3 terms), where 1 - q would cancel, and 1 - q above. NaN propagates; z = +-inf gives tanh = +-1,
    sech^2 = 0.
    """
    a = tl.abs(z)
    sech, q = _sech_and_q(a, APPROX)
    if TANH == 0:
        LIMIT: tl.constexpr = _SHORT_POLY_LIMIT if POLY_TERMS == 3 else _POLY_LIMIT
        t = _with_sign_of(tl.where(a < LIMIT, _poly(a, POLY_TERMS), 1.0 - q), z)
        sech2 = sech * sech
    elif TANH == 1:
        t = _tanh(z, TANH, APPROX, True)
        sech2 = sech * sech
    else:  # the hardware approximation's documented opt-in error, sech^2 included
        t = _tanh(z, TANH, APPROX, True)
        sech2 = 1.0 - t * t
    return t, sech2


@triton.jit
def _launch_dependents(PDL: tl.constexpr):
    """Programmatic dependent launch (sm_90+): lets the next kernel on the stream, launched with PDL,
    start once every program of this one has passed here. The interpreter has no PTX (PDL=False)."""
    if PDL:
        tl.inline_asm_elementwise("griddepcontrol.launch_dependents; // $0", "=r", [], dtype=tl.int32,
                                  is_pure=False, pack=1)  # fmt: skip


@triton.jit
def _wait_for_primary(PDL: tl.constexpr):
    """Blocks until the kernel before this one on the stream has finished and its writes are visible
    (a no-op when this kernel was launched without PDL, or PDL=False in the interpreter)."""
    if PDL:
        tl.inline_asm_elementwise("griddepcontrol.wait; // $0", "=r", [], dtype=tl.int32, is_pure=False,
                                  pack=1)  # fmt: skip


@triton.jit
def _param_index(cols, GAMMA_PERIOD: tl.constexpr, GAMMA_SPAN: tl.constexpr):
    """Index into gamma and beta: the column itself, or (rows folded, see dyt.planner.fold_factor) the
    column modulo the true width: one AND for a power of two, else a remainder by a constant; then, for
    channels-first rows (GAMMA_SPAN = the spatial size L, see "Channels-first" below), that divided by L."""
    index = cols
    if GAMMA_PERIOD > 0:
        # Runs of RUN consecutive indices from multiples of RUN (the width's largest power-of-two divisor,
        # all of a power-of-two width): said, so that loads stay 16 bytes wide.
        RUN: tl.constexpr = GAMMA_PERIOD & -GAMMA_PERIOD
        if RUN == GAMMA_PERIOD:
            index = cols & (GAMMA_PERIOD - 1)
        else:
            index = cols % GAMMA_PERIOD
        index = tl.max_contiguous(tl.multiple_of(index, RUN), RUN)
    if GAMMA_SPAN > 0:
        index = index // GAMMA_SPAN
    return index


@triton.jit
def _tile(pid_m, pid_n, M, N, n_elements, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, INT64: tl.constexpr,
          RAGGED: tl.constexpr):  # fmt: skip
    """Row and column indices of tile (pid_m, pid_n) and its mask (rows below M); rows in int64 when INT64.
    RAGGED (folded rows: contiguous, row stride N) masks row M - 1 from element n_elements on, by one row
    test and one column test per element like the rectangle. The backward passes the end of a program's
    rows as M: a row M - 1 before the true last one gets n_elements - (M - 1) N > N columns, all of it."""
    if INT64:
        pid_m = pid_m.to(tl.int64)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    if RAGGED:
        last = M - 1
        if INT64:
            last = last.to(tl.int64)
        last_cols = n_elements - last * N  # elements in the last row
        mask = (rows < last)[:, None] | ((rows == last)[:, None] & (cols < last_cols)[None, :])
    else:
        mask = (rows < M)[:, None] & (cols < N)[None, :]
    return rows, cols, mask


@triton.jit
def dyt_fwd_kernel(
    X, Y, ALPHA, GAMMA, BETA,
    M, N, n_elements, stride_xm, stride_ym,
    HAS_BETA: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, N_COL_BLOCKS: tl.constexpr,
    INT64: tl.constexpr, TANH: tl.constexpr, APPROX: tl.constexpr, GAMMA_PERIOD: tl.constexpr,
    GAMMA_SPAN: tl.constexpr, RAGGED: tl.constexpr, SIGN_SELECT: tl.constexpr, PDL: tl.constexpr,
    POLY_TERMS: tl.constexpr,
):  # fmt: skip
    """y = gamma * tanh(alpha * x) + beta for one BLOCK_M x BLOCK_N tile per program. With RAGGED folded
    rows the tensors hold n_elements, the last of the M rows in part.

    With PDL, a program waits for the kernel before it on the stream first, then at once lets the next
    kernel launch: back-to-back kernels overlap their launch and first programs with this one's last
    programs.

    N_COL_BLOCKS is a compile-time constant (one compile per count of column blocks), so no program divides
    by a runtime count (docs/kernels.md, "Forward").
    """
    _wait_for_primary(PDL)
    _launch_dependents(PDL)
    pid = tl.program_id(0)
    pid_m = pid // N_COL_BLOCKS
    pid_n = pid % N_COL_BLOCKS
    rows, cols, mask = _tile(pid_m, pid_n, M, N, n_elements, BLOCK_M, BLOCK_N, INT64, RAGGED)
    col_ok = cols < N

    # Every load first, each converted to float32 where it is used: this order keeps the register count
    # the same at every column-block count (docs/kernels.md, "Forward").
    index = _param_index(cols, GAMMA_PERIOD, GAMMA_SPAN)
    alpha = _f32(tl.load(ALPHA), APPROX)
    gamma = tl.load(GAMMA + index, mask=col_ok, other=0.0)
    if HAS_BETA:
        beta = tl.load(BETA + index, mask=col_ok, other=0.0)
    x = tl.load(X + rows[:, None] * stride_xm + cols[None, :], mask=mask, other=0.0)

    t = _tanh(alpha * _f32(x, APPROX), TANH, APPROX, SIGN_SELECT, POLY_TERMS)
    y = _f32(gamma, APPROX)[None, :] * t
    if HAS_BETA:
        y = y + _f32(beta, APPROX)[None, :]
    tl.store(Y + rows[:, None] * stride_ym + cols[None, :], y.to(Y.dtype.element_ty), mask=mask)


# FP8 output: y over a scale, rounded to Y's float8 format (dyt.fp8). The scale is either one for the tensor,
# from the parameters (|y[..., c]| <= |gamma[c]| + |beta[c]|, so no reduction over x: dyt_fp8_scale_kernel),
# or one per row, from the row's own values in the same program (ROWWISE).
_SMALLEST_SCALE = tl.constexpr(2.0**-126)  # dyt.fp8.SMALLEST_SCALE: 1 / scale stays finite


@triton.jit
def dyt_fp8_scale_kernel(GAMMA, BETA, SCALE, C, HAS_BETA: tl.constexpr, FP8_MAX: tl.constexpr,
                         BLOCK: tl.constexpr, APPROX: tl.constexpr, PDL: tl.constexpr):  # fmt: skip
    """SCALE[0] = max(max_c (|gamma[c]| + |beta[c]|) / FP8_MAX, 2^-126) in float32, one program; NaN where
    a parameter is NaN or the bound is not finite (dyt.torch_path.fp8_parameter_scale computes the same
    bits)."""
    _wait_for_primary(PDL)
    _launch_dependents(PDL)
    bound = tl.zeros((BLOCK,), tl.float32)
    bad = tl.zeros((BLOCK,), tl.int32)
    for start in range(0, C, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        ok = cols < C
        b = tl.abs(_f32(tl.load(GAMMA + cols, mask=ok, other=0.0), APPROX))
        if HAS_BETA:
            b = b + tl.abs(_f32(tl.load(BETA + cols, mask=ok, other=0.0), APPROX))
        bad = bad | (~(b < float("inf"))).to(tl.int32)  # NaN or inf
        bound = tl.maximum(bound, b)
    scale = tl.maximum(tl.div_rn(tl.max(bound, axis=0), FP8_MAX), _SMALLEST_SCALE)
    scale = tl.where(tl.max(bad, axis=0) > 0, float("nan"), scale)
    tl.store(SCALE, scale)


@triton.jit
def _fwd_tile_values(X, ALPHA, GAMMA, BETA, rows, cols, mask, N, stride_xm, HAS_BETA: tl.constexpr,
                     TANH: tl.constexpr, APPROX: tl.constexpr, GAMMA_PERIOD: tl.constexpr,
                     GAMMA_SPAN: tl.constexpr, SIGN_SELECT: tl.constexpr,
                     POLY_TERMS: tl.constexpr):  # fmt: skip
    """y of one tile in float32, as dyt_fwd_kernel computes it."""
    index = _param_index(cols, GAMMA_PERIOD, GAMMA_SPAN)
    col_ok = cols < N
    alpha = _f32(tl.load(ALPHA), APPROX)
    gamma = tl.load(GAMMA + index, mask=col_ok, other=0.0)
    if HAS_BETA:
        beta = tl.load(BETA + index, mask=col_ok, other=0.0)
    x = tl.load(X + rows[:, None] * stride_xm + cols[None, :], mask=mask, other=0.0)
    y = _f32(gamma, APPROX)[None, :] * _tanh(alpha * _f32(x, APPROX), TANH, APPROX, SIGN_SELECT, POLY_TERMS)
    if HAS_BETA:
        y = y + _f32(beta, APPROX)[None, :]
    return y


@triton.jit
def dyt_fwd_fp8_kernel(
    X, Y, SCALE, ALPHA, GAMMA, BETA,
    M, N, n_elements, stride_xm, stride_ym,
    HAS_BETA: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, N_COL_BLOCKS: tl.constexpr,
    INT64: tl.constexpr, TANH: tl.constexpr, APPROX: tl.constexpr, GAMMA_PERIOD: tl.constexpr,
    GAMMA_SPAN: tl.constexpr, RAGGED: tl.constexpr, SIGN_SELECT: tl.constexpr, PDL: tl.constexpr,
    POLY_TERMS: tl.constexpr, ROWWISE: tl.constexpr, FP8_MAX: tl.constexpr,
):  # fmt: skip
    """Y = y * (1 / scale) rounded to Y's dtype (a float8 format, or float32 in the interpreter, whose
    float8 conversion is wrong: dyt.launcher rounds there), y as dyt_fwd_kernel computes it.

    Tensorwise (ROWWISE False): SCALE holds the tensor's scale (dyt_fp8_scale_kernel); one tile per
    program, as dyt_fwd_kernel's plan has it. Rowwise: one program per BLOCK_M rows (unfolded), which
    passes over the rows' N_COL_BLOCKS column blocks twice: first their largest |y| (padding and NaN
    never enter it), whose max(amax / FP8_MAX, 2^-126) goes to SCALE[row], then y over that scale."""
    _wait_for_primary(PDL)
    _launch_dependents(PDL)
    pid = tl.program_id(0)
    if ROWWISE:
        rows = _tile(pid, 0, M, N, n_elements, BLOCK_M, BLOCK_N, INT64, RAGGED)[0]
        amax = tl.zeros((BLOCK_M,), tl.float32)
        for pid_n in range(N_COL_BLOCKS):
            rows, cols, mask = _tile(pid, pid_n, M, N, n_elements, BLOCK_M, BLOCK_N, INT64, RAGGED)
            y = _fwd_tile_values(X, ALPHA, GAMMA, BETA, rows, cols, mask, N, stride_xm, HAS_BETA, TANH,
                                 APPROX, GAMMA_PERIOD, GAMMA_SPAN, SIGN_SELECT, POLY_TERMS)  # fmt: skip
            amax = tl.maximum(amax, tl.max(tl.where(mask & (y == y), tl.abs(y), 0.0), axis=1))
        scale = tl.maximum(tl.div_rn(amax, FP8_MAX), _SMALLEST_SCALE)
        tl.store(SCALE + rows, scale, mask=rows < M)
        inv = tl.div_rn(tl.full((BLOCK_M,), 1.0, tl.float32), scale)
        for pid_n in range(N_COL_BLOCKS):
            rows, cols, mask = _tile(pid, pid_n, M, N, n_elements, BLOCK_M, BLOCK_N, INT64, RAGGED)
            y = _fwd_tile_values(X, ALPHA, GAMMA, BETA, rows, cols, mask, N, stride_xm, HAS_BETA, TANH,
                                 APPROX, GAMMA_PERIOD, GAMMA_SPAN, SIGN_SELECT, POLY_TERMS)  # fmt: skip
            out = y * inv[:, None]
            tl.store(Y + rows[:, None] * stride_ym + cols[None, :], out.to(Y.dtype.element_ty), mask=mask)
    else:
        pid_m = pid // N_COL_BLOCKS
        pid_n = pid % N_COL_BLOCKS
        rows, cols, mask = _tile(pid_m, pid_n, M, N, n_elements, BLOCK_M, BLOCK_N, INT64, RAGGED)
        inv = tl.div_rn(1.0, tl.load(SCALE))
        y = _fwd_tile_values(X, ALPHA, GAMMA, BETA, rows, cols, mask, N, stride_xm, HAS_BETA, TANH, APPROX,
                             GAMMA_PERIOD, GAMMA_SPAN, SIGN_SELECT, POLY_TERMS)  # fmt: skip
        tl.store(Y + rows[:, None] * stride_ym + cols[None, :], (y * inv).to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _bwd_tile(
    X, DY, DX, rows, cols, mask, stride_xm, stride_dym, stride_dxm, alpha, gamma,
    acc_dgamma, acc_dbeta, acc_dalpha, TANH: tl.constexpr, APPROX: tl.constexpr, MASKED: tl.constexpr,
    POLY_TERMS: tl.constexpr,
):  # fmt: skip
    """One tile of the backward: stores dx, returns the three accumulators with this tile added.

    MASKED=False is for tiles wholly inside the tensor (no padding lane, so no mask to apply): plain loads
    and stores and two selects fewer per element. With MASKED, z and dz are masked right after the
    arithmetic that can make NaN out of padding (x = dy = gamma = 0 there): alpha * 0 is NaN for an
    infinite alpha, and 0 * gamma for an infinite gamma. With z = 0 and dz = 0, every padding term is an
    exact 0.
    """
    x_ptrs = X + rows[:, None] * stride_xm + cols[None, :]
    dy_ptrs = DY + rows[:, None] * stride_dym + cols[None, :]
    dx_ptrs = DX + rows[:, None] * stride_dxm + cols[None, :]
    if MASKED:
        x = _f32(tl.load(x_ptrs, mask=mask, other=0.0), APPROX)
        dy = _f32(tl.load(dy_ptrs, mask=mask, other=0.0), APPROX)
        z = tl.where(mask, alpha * x, 0.0)
        t, sech2 = _tanh_sech2(z, TANH, APPROX, POLY_TERMS)
        dz = tl.where(mask, (dy * gamma[None, :]) * sech2, 0.0)
        tl.store(dx_ptrs, (dz * alpha).to(DX.dtype.element_ty), mask=mask)
    else:
        x = _f32(tl.load(x_ptrs), APPROX)
        dy = _f32(tl.load(dy_ptrs), APPROX)
        t, sech2 = _tanh_sech2(alpha * x, TANH, APPROX, POLY_TERMS)
        dz = (dy * gamma[None, :]) * sech2
        tl.store(dx_ptrs, (dz * alpha).to(DX.dtype.element_ty))
    return acc_dgamma + dy * t, acc_dbeta + dy, acc_dalpha + dz * x


@triton.jit
def _store_run_partials(PART_DGAMMA, PART_DBETA, PART_DALPHA, acc_dgamma, acc_dbeta, acc_dalpha,
                        program_row, group_row, N, cols, col_ok, pid_n, n_col_blocks, BLOCK_N: tl.constexpr,
                        GAMMA_PERIOD: tl.constexpr, FOLD_COPIES: tl.constexpr, GAMMA_SPAN: tl.constexpr,
                        CHANNEL_SLOTS: tl.constexpr):  # fmt: skip
    """A run's partials: column sums of dgamma and dbeta at row group_row of (rows, N), or, with FOLD_COPIES
    (folded rows whose column block holds BLOCK_N // GAMMA_PERIOD whole copies of the true width, see
    dyt.planner.BwdPlan.fold_copies), the copies added up here at row program_row of (rows, GAMMA_PERIOD),
    or, for channels-first rows (GAMMA_SPAN), the sums of each channel the column block touches, in its
    CHANNEL_SLOTS slots at row group_row of (rows, n_col_blocks * CHANNEL_SLOTS): slot k holds channel
    (pid_n * BLOCK_N) // GAMMA_SPAN + k, and slots past the block's last channel hold 0. dalpha's lanes are
    added in float64 (the finish adds the runs' sums without float32 drift) at program_row."""
    if GAMMA_SPAN > 0:
        slot = cols // GAMMA_SPAN - (pid_n * BLOCK_N) // GAMMA_SPAN
        in_slot = slot[None, :] == tl.arange(0, CHANNEL_SLOTS)[:, None]
        dgamma = tl.sum(tl.where(in_slot, tl.sum(acc_dgamma, axis=0)[None, :], 0.0), axis=1)
        dbeta = tl.sum(tl.where(in_slot, tl.sum(acc_dbeta, axis=0)[None, :], 0.0), axis=1)
        offsets = (group_row * n_col_blocks + pid_n) * CHANNEL_SLOTS + tl.arange(0, CHANNEL_SLOTS)
        tl.store(PART_DGAMMA + offsets, dgamma)
        tl.store(PART_DBETA + offsets, dbeta)
    elif FOLD_COPIES:
        copies: tl.constexpr = BLOCK_N // GAMMA_PERIOD
        true_cols = tl.arange(0, GAMMA_PERIOD)
        dgamma = tl.sum(tl.reshape(tl.sum(acc_dgamma, axis=0), (copies, GAMMA_PERIOD)), axis=0)
        dbeta = tl.sum(tl.reshape(tl.sum(acc_dbeta, axis=0), (copies, GAMMA_PERIOD)), axis=0)
        tl.store(PART_DGAMMA + program_row * GAMMA_PERIOD + true_cols, dgamma)
        tl.store(PART_DBETA + program_row * GAMMA_PERIOD + true_cols, dbeta)
    else:  # unfolded, or column blocks that tile the folded row (its N // GAMMA_PERIOD copies: finish rows)
        offsets = group_row * N + cols
        tl.store(PART_DGAMMA + offsets, tl.sum(acc_dgamma, axis=0), mask=col_ok)
        tl.store(PART_DBETA + offsets, tl.sum(acc_dbeta, axis=0), mask=col_ok)
    dalpha = tl.sum(tl.sum(acc_dalpha.to(tl.float64), axis=1), axis=0)
    tl.store(PART_DALPHA + program_row + tl.arange(0, 1), tl.zeros((1,), dtype=tl.float64) + dalpha)


@triton.jit
def dyt_bwd_kernel(
    X, DY, DX, ALPHA, GAMMA, PART_DGAMMA, PART_DBETA, PART_DALPHA,
    M, N, n_elements, stride_xm, stride_dym, stride_dxm, n_col_blocks, n_groups, tiles_per_program,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, INT64: tl.constexpr, TANH: tl.constexpr,
    APPROX: tl.constexpr, STRIDED: tl.constexpr, NUM_STAGES: tl.constexpr, EVEN_N: tl.constexpr,
    GAMMA_PERIOD: tl.constexpr, RAGGED: tl.constexpr, PDL: tl.constexpr, LANE_RUN: tl.constexpr,
    FOLD_COPIES: tl.constexpr, GAMMA_SPAN: tl.constexpr, CHANNEL_SLOTS: tl.constexpr,
    POLY_TERMS: tl.constexpr,
):  # fmt: skip
    """One pass over x and dy: writes dx, and this program's float32 partial sums of the parameter grads.

    Program p owns column block p % n_col_blocks of row group g = p // n_col_blocks, and tiles_per_program
    row tiles of it: with STRIDED, tiles g, g + n_groups, g + 2 n_groups, ... (all programs stream through
    one region of memory at a time); otherwise the contiguous run from tile g * tiles_per_program. The
    launch table picks the order per dtype and width.

    Each lane adds one float32 term per tile, so the tiles go in runs of LANE_RUN (dyt.planner.LANE_RUN_TILES:
    float32's rounding over longer chains can leave the parameter gradients' contract), each
    run with fresh sums and its own partials: run r of R = cdiv(tiles_per_program, LANE_RUN) writes row
    g R + r of PART_DGAMMA/PART_DBETA (shape (n_groups R, N), float32; with FOLD_COPIES, folded rows whose
    column blocks add up their whole copies of the true width, row p R + r of (programs R, GAMMA_PERIOD);
    channels-first rows write per-channel sums, see _store_run_partials) and
    PART_DALPHA[p R + r] (float64); dyt_bwd_finish_kernel adds them up. Mostly R = 1 (see LANE_RUN_TILES).

    In a run, the tiles wholly inside the tensor come first, unmasked (EVEN_N: N is a multiple of BLOCK_N);
    then the rest, masked: the last partial tile, and tiles past M (which load and store nothing). The
    first loop is pipelined by Triton (NUM_STAGES > 1 on the GPU): x and dy of the next NUM_STAGES - 1 tiles
    are copied to shared memory asynchronously (cp.async) while this tile is computed, so the loads in
    flight cost shared memory, not registers. The sums are per-lane accumulators reduced once per run, so
    the loops have no cross-thread reduction.

    With PDL, each program lets the finishing kernel launch once its loops are done: the finish's launch
    then overlaps this kernel's last programs (it waits, griddepcontrol.wait, for the partials). This
    kernel itself is launched the ordinary way, onto an idle GPU: its persistent grid relies on the
    hardware spreading its programs evenly over the SMs, which a launch overlapping the kernel before it
    does not do (docs/kernels.md, "Backward main kernel").
    """
    pid = tl.program_id(0)
    pid_n = pid % n_col_blocks
    group = pid // n_col_blocks
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < N

    alpha = _f32(tl.load(ALPHA), APPROX)
    index = _param_index(cols, GAMMA_PERIOD, GAMMA_SPAN)
    gamma = _f32(tl.load(GAMMA + index, mask=col_ok, other=0.0), APPROX)
    # Rows past this program's tiles are masked like rows past M; n_whole counts its tiles that hold
    # BLOCK_M whole rows below row_end. RAGGED folded rows: the last row ends early.
    m_whole = M
    if RAGGED:
        m_whole = M - 1
    if STRIDED:
        first = group
        step = n_groups
        row_end = M
        n_whole = tl.cdiv(tl.maximum(m_whole // BLOCK_M - group, 0), n_groups)
    else:
        first = group * tiles_per_program
        step = 1
        if INT64:
            row_end = tl.minimum((first.to(tl.int64) + tiles_per_program) * BLOCK_M, M)
        else:
            row_end = tl.minimum((first + tiles_per_program) * BLOCK_M, M)
        n_whole = tl.maximum(tl.minimum(row_end, m_whole) // BLOCK_M - first, 0)
    n_whole = tl.minimum(n_whole, tiles_per_program)
    if not EVEN_N:
        n_whole = 0
    n_runs = tl.cdiv(tiles_per_program, LANE_RUN)
    for run in range(0, n_runs):
        start = run * LANE_RUN
        end = tl.minimum(start + LANE_RUN, tiles_per_program)
        acc_dgamma = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        acc_dbeta = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        acc_dalpha = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for i in tl.range(start, tl.minimum(end, n_whole), num_stages=NUM_STAGES):
            rows, _, mask = _tile(first + i * step, pid_n, row_end, N, n_elements, BLOCK_M, BLOCK_N, INT64,
                                  RAGGED)  # fmt: skip
            acc_dgamma, acc_dbeta, acc_dalpha = _bwd_tile(
                X, DY, DX, rows, cols, mask, stride_xm, stride_dym, stride_dxm, alpha, gamma,
                acc_dgamma, acc_dbeta, acc_dalpha, TANH, APPROX, False, POLY_TERMS,
            )  # fmt: skip
        for i in range(tl.maximum(start, n_whole), end):
            rows, _, mask = _tile(first + i * step, pid_n, row_end, N, n_elements, BLOCK_M, BLOCK_N, INT64,
                                  RAGGED)  # fmt: skip
            acc_dgamma, acc_dbeta, acc_dalpha = _bwd_tile(
                X, DY, DX, rows, cols, mask, stride_xm, stride_dym, stride_dxm, alpha, gamma,
                acc_dgamma, acc_dbeta, acc_dalpha, TANH, APPROX, True, POLY_TERMS,
            )  # fmt: skip
        _store_run_partials(PART_DGAMMA, PART_DBETA, PART_DALPHA, acc_dgamma, acc_dbeta, acc_dalpha,
                            pid * n_runs + run, group * n_runs + run, N, cols, col_ok, pid_n, n_col_blocks,
                            BLOCK_N, GAMMA_PERIOD, FOLD_COPIES, GAMMA_SPAN, CHANNEL_SLOTS)  # fmt: skip
    _launch_dependents(PDL)


@triton.jit
def _add_partial_rows(PART_DGAMMA, PART_DBETA, acc_dgamma, acc_dbeta, n_groups, width, cols, col_ok,
                      BLOCK_G: tl.constexpr):  # fmt: skip
    """The accumulators plus columns cols of every row of the (n_groups, width) partials, BLOCK_G rows a
    step, in row order."""
    for g0 in range(0, n_groups, BLOCK_G):
        groups = g0 + tl.arange(0, BLOCK_G)
        mask = (groups < n_groups)[:, None] & col_ok[None, :]
        offs = groups[:, None] * width + cols[None, :]
        acc_dgamma += tl.load(PART_DGAMMA + offs, mask=mask, other=0.0)
        acc_dbeta += tl.load(PART_DBETA + offs, mask=mask, other=0.0)
    return acc_dgamma, acc_dbeta


@triton.jit
def _store_param_grads(DGAMMA, DBETA, acc_dgamma, acc_dbeta, index, ok):
    """dgamma and dbeta at index: the accumulators' column sums, rounded once, to each parameter's dtype."""
    tl.store(DGAMMA + index, tl.sum(acc_dgamma, axis=0).to(DGAMMA.dtype.element_ty), mask=ok)
    tl.store(DBETA + index, tl.sum(acc_dbeta, axis=0).to(DBETA.dtype.element_ty), mask=ok)


@triton.jit
def _finish_dalpha(PART_DALPHA, DALPHA, n_dalpha_partials, BLOCK: tl.constexpr):
    """dalpha: the float64 partials added up in a fixed order, stored in alpha's dtype."""
    acc_dalpha = tl.zeros((BLOCK,), dtype=tl.float64)
    for p0 in range(0, n_dalpha_partials, BLOCK):
        idx = p0 + tl.arange(0, BLOCK)
        acc_dalpha += tl.load(PART_DALPHA + idx, mask=idx < n_dalpha_partials, other=0.0)
    tl.store(DALPHA, tl.sum(acc_dalpha, axis=0).to(DALPHA.dtype.element_ty))


@triton.jit
def dyt_bwd_finish_kernel(
    PART_DGAMMA, PART_DBETA, PART_DALPHA, DGAMMA, DBETA, DALPHA,
    N, n_groups, n_dalpha_partials,
    BLOCK_G: tl.constexpr, BLOCK_N: tl.constexpr, PDL: tl.constexpr,
):  # fmt: skip
    """Adds the partials in a fixed order (no atomics) and stores each gradient in its parameter's dtype.

    Programs 0 .. cdiv(N, BLOCK_N) - 1 each own a column block of dgamma and dbeta; the last program adds
    up dalpha alone, at the same time (this kernel's time is a few dependent memory round trips). With
    PDL it is launched while the main kernel still runs, waits here for the partials, and then lets the
    next kernel on the stream launch.
    """
    _wait_for_primary(PDL)
    _launch_dependents(PDL)
    pid = tl.program_id(0)
    if pid == tl.num_programs(0) - 1:
        _finish_dalpha(PART_DALPHA, DALPHA, n_dalpha_partials, BLOCK_G * BLOCK_N)
    else:
        cols = pid * BLOCK_N + tl.arange(0, BLOCK_N)
        col_ok = cols < N
        acc_dgamma = tl.zeros((BLOCK_G, BLOCK_N), dtype=tl.float32)
        acc_dbeta = tl.zeros((BLOCK_G, BLOCK_N), dtype=tl.float32)
        acc_dgamma, acc_dbeta = _add_partial_rows(PART_DGAMMA, PART_DBETA, acc_dgamma, acc_dbeta, n_groups, N,
                                                  cols, col_ok, BLOCK_G)  # fmt: skip
        _store_param_grads(DGAMMA, DBETA, acc_dgamma, acc_dbeta, cols, col_ok)


# Channels-first: a contiguous (N, C, *spatial) tensor is N rows of W = C * L elements (L = prod(spatial)),
# column j scaled by channel j // L's gamma and beta (GAMMA_SPAN = L): the row kernels run it as it is, and
# the backward's column blocks add up their columns per channel; dyt_bwd_cf_finish_kernel adds those up
# (docs/kernels.md, "Channels-first").


@triton.jit
def dyt_bwd_cf_finish_kernel(
    PART_DGAMMA, PART_DBETA, PART_DALPHA, DGAMMA, DBETA, DALPHA,
    C, n_groups, n_col_blocks, n_dalpha_partials,
    GAMMA_SPAN: tl.constexpr, MAIN_BLOCK_N: tl.constexpr, CHANNEL_SLOTS: tl.constexpr,
    BLOCKS_PER_CHANNEL: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_C: tl.constexpr,
    DALPHA_BLOCK: tl.constexpr, PDL: tl.constexpr,
):  # fmt: skip
    """dyt_bwd_finish_kernel for channels-first partials: PART_DGAMMA and PART_DBETA are (n_groups,
    n_col_blocks * CHANNEL_SLOTS) float32, where column block b's slot k holds channel
    (b * MAIN_BLOCK_N) // GAMMA_SPAN + k (dyt_bwd_kernel's _store_run_partials). Channel c's columns
    c L .. c L + L - 1 lie in at most BLOCKS_PER_CHANNEL consecutive column blocks; each program adds up
    BLOCK_C channels over the row groups, BLOCK_G at a time, and in each step over those blocks, in a
    fixed order; the last program adds up dalpha, DALPHA_BLOCK partials a step (BLOCK_G is cut to the few
    row groups: BLOCK_G x BLOCK_C partials a step would leave dalpha a loop of dependent loads)."""
    _wait_for_primary(PDL)
    _launch_dependents(PDL)
    pid = tl.program_id(0)
    if pid == tl.num_programs(0) - 1:
        _finish_dalpha(PART_DALPHA, DALPHA, n_dalpha_partials, DALPHA_BLOCK)
    else:
        channels = pid * BLOCK_C + tl.arange(0, BLOCK_C)
        channel_ok = channels < C
        first_block = (channels * GAMMA_SPAN) // MAIN_BLOCK_N
        last_block = (channels * GAMMA_SPAN + GAMMA_SPAN - 1) // MAIN_BLOCK_N
        width = n_col_blocks * CHANNEL_SLOTS
        acc_dgamma = tl.zeros((BLOCK_G, BLOCK_C), dtype=tl.float32)
        acc_dbeta = tl.zeros((BLOCK_G, BLOCK_C), dtype=tl.float32)
        for g0 in range(0, n_groups, BLOCK_G):
            groups = g0 + tl.arange(0, BLOCK_G)
            # unrolled: a step's loads of every block are independent, so they are in flight together
            for j in tl.static_range(BLOCKS_PER_CHANNEL):
                block = first_block + j
                ok = channel_ok & (block <= last_block)
                slot = block * CHANNEL_SLOTS + channels - (block * MAIN_BLOCK_N) // GAMMA_SPAN
                mask = (groups < n_groups)[:, None] & ok[None, :]
                offs = groups[:, None] * width + slot[None, :]
                acc_dgamma += tl.load(PART_DGAMMA + offs, mask=mask, other=0.0)
                acc_dbeta += tl.load(PART_DBETA + offs, mask=mask, other=0.0)
        _store_param_grads(DGAMMA, DBETA, acc_dgamma, acc_dbeta, channels, channel_ok)
