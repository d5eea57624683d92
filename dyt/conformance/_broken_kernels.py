"""The Triton forward of dyt.conformance.broken's launch fixtures: a tile of BLOCK_M rows per program, the
row tiles on grid axis ROW_AXIS; tanh through dyt's own kernels' float32 helper (dyt.kernels._tanh), so the
values are right and only the launch is wrong."""

from __future__ import annotations

import triton
import triton.language as tl

from dyt.kernels import _tanh

next_power_of_2 = triton.next_power_of_2


@triton.jit
def forward(x_ptr, y_ptr, alpha_ptr, gamma_ptr, beta_ptr, M, C, stride, BLOCK_M: tl.constexpr,
            BLOCK_N: tl.constexpr, HAS_BETA: tl.constexpr, ROW_AXIS: tl.constexpr):  # fmt: skip
    rows = tl.program_id(ROW_AXIS) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < M) & (cols[None, :] < C)
    offsets = rows[:, None].to(tl.int64) * stride + cols[None, :]
    x = tl.load(x_ptr + offsets, mask=mask, other=1.0).to(tl.float32)
    alpha = tl.load(alpha_ptr).to(tl.float32)
    gamma = tl.load(gamma_ptr + cols, mask=cols < C, other=0.0).to(tl.float32)
    y = gamma[None, :] * _tanh(alpha * x, 0, False, True)
    if HAS_BETA:
        y += tl.load(beta_ptr + cols, mask=cols < C, other=0.0).to(tl.float32)[None, :]
    tl.store(y_ptr + offsets, y.to(y_ptr.dtype.element_ty), mask=mask)
