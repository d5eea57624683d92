"""FP8 output: y = gamma * tanh(alpha * x) + beta written straight in a float8 format, with its scale.

DyT's output is bounded by its parameters: |y[..., c]| <= |gamma[c]| + |beta[c]| (tanh is bounded by 1).
So a tensorwise scale needs no reduction over the activation: scale = max_c (|gamma[c]| + |beta[c]|) / the
format's largest finite value (at least 2^-126, so that 1 / scale is finite), computed on the device from
the parameters (no host sync), and y / scale never passes the format's range. A rowwise scale (one per
row of the last dimension) is the row's largest |y| (NaN left out) over the same value, in the same pass.

Contract (tests/test_fp8.py holds it, and dyt.conformance.tolerances.assert_fp8_close):
- data = y / scale rounded once to the format (round to nearest even, saturating), y evaluated in float32
  as dyt() evaluates it: data * scale is the float64 reference rounded to the format at that scale, within
  the float32 evaluation error of the expression. Never saturated: the bound holds (rowwise: by
  construction).
- NaN in x, or from alpha (inf * 0), is NaN in data where the reference has it; a rowwise scale skips NaN
  and padding. A non-finite gamma or beta makes the tensorwise scale NaN (every element NaN): the bound
  does not exist.
- scale is float32: shape () tensorwise, (*x.shape[:-1], 1) rowwise; y ~ data.float() * scale, the form
  torch._scaled_mm takes (scale_a) and dequantize() computes.
- No gradient flows through data (a float8 tensor's gradient would be rounded to float8): a call that
  autograd would record raises. Training with FP8 linear layers goes through dyt.float8_training, whose
  output carries the gradient in 16 or 32 bits (torchao's Float8TrainingTensor).

Route: CUDA tensors (and CPU tensors under Triton's interpreter) run dyt.kernels.dyt_fwd_fp8_kernel (and,
tensorwise, dyt_fp8_scale_kernel first); other CPU tensors and torch.compile the plain expression
(dyt.torch_path.forward_fp8), which Inductor fuses with its neighbours.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from dyt import inputs, torch_path

# The float8 formats dyt writes, and each one's largest finite value.
FORMATS = {torch.float8_e4m3fn: 448.0, torch.float8_e5m2: 57344.0}
SMALLEST_SCALE = torch_path.SMALLEST_FP8_SCALE


class Float8Input(NamedTuple):
    """What a DyT wired by dyt.float8_training writes (its float8_input): the float8 format and the
    consuming float8 linear layers' matmul configuration (torchao's LinearMMConfig)."""

    fp8_dtype: torch.dtype
    linear_mm_config: object


class Float8Output(NamedTuple):
    """y in a float8 format and its float32 scale: y ~ data.float() * scale."""

    data: torch.Tensor  # x's shape, a float8 dtype
    scale: torch.Tensor  # float32: () tensorwise, (*x.shape[:-1], 1) rowwise

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """data * scale in dtype."""
        return (self.data.to(torch.float32) * self.scale).to(dtype)


def validate_fp8(x, alpha, gamma, beta, fp8_dtype, *, rowwise: bool, channels_first: bool) -> None:
    """dyt's checks of the inputs, then the FP8 arguments': a known format, rowwise only over rows, and no
    call that autograd would record."""
    if fp8_dtype not in FORMATS:
        names = ", ".join(str(d) for d in FORMATS)
        raise TypeError(f"dyt: the FP8 format must be one of {names}, got {fp8_dtype!r}")
    if not isinstance(rowwise, bool):
        raise TypeError(f"dyt: rowwise must be a bool, got {type(rowwise).__name__} {rowwise!r}")
    inputs.validate(x, alpha, gamma, beta, channels_first=channels_first)
    if rowwise and channels_first:
        raise ValueError("dyt: rowwise FP8 scales are per row of the last dimension; channels-first x has "
                         "its channels on dim 1: use tensorwise scales (rowwise=False)")  # fmt: skip
    if inputs.records_grad(x, alpha, gamma, beta):
        raise RuntimeError(
            "dyt: FP8 output carries no gradient (a float8 gradient would be rounded to float8). Call it "
            "under torch.no_grad() or torch.inference_mode(), or, to train, let the linear layers take it: "
            "dyt.float8_training.convert_to_float8_training(model)"
        )


def dyt_fp8(x: torch.Tensor, alpha: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor | None = None, *,
            fp8_dtype: torch.dtype = torch.float8_e4m3fn, rowwise: bool = False,
            channels_first: bool = False) -> Float8Output:  # fmt: skip
    """dyt (or, channels_first, dyt_channels_first) written in the float8 format fp8_dtype
    (torch.float8_e4m3fn or torch.float8_e5m2) with its scale: see the module's contract. Tensorwise scales
    come from the parameters; rowwise=True takes one per row of x's last dimension from y itself."""
    validate_fp8(x, alpha, gamma, beta, fp8_dtype, rowwise=rowwise, channels_first=channels_first)
    return forward(x, alpha, gamma, beta, fp8_dtype, rowwise=rowwise, channels_first=channels_first)


def forward(x, alpha, gamma, beta, fp8_dtype, *, rowwise: bool = False, channels_first: bool = False):
    """dyt_fp8 on validated inputs, the route of the call decided here: the plain expression under
    torch.compile and for CPU tensors without the interpreter, else the kernels (dyt.launcher.forward_fp8)
    on the rows, the channels-first rows, or the moved view of channels-last memory."""
    fp8_max = FORMATS[fp8_dtype]
    if torch.compiler.is_compiling() or not inputs.use_triton(x):
        data, scale = torch_path.forward_fp8(x, alpha, gamma, beta, fp8_dtype, fp8_max, rowwise=rowwise,
                                             channels_first=channels_first)  # fmt: skip
        return Float8Output(data, scale)
    alpha, gamma = inputs.as_one(alpha), gamma.contiguous()
    beta = None if beta is None else beta.contiguous()
    if channels_first:
        moved = x.movedim(1, -1)
        if not x.is_contiguous() and moved.is_contiguous():  # torch.channels_last memory: rows, no copy
            data, scale = inputs.launcher.forward_fp8(moved, alpha, gamma, beta, fp8_dtype)
            return Float8Output(data.movedim(-1, 1), scale.reshape(()))
        data, scale = inputs.launcher.forward_fp8(x.contiguous(), alpha, gamma, beta, fp8_dtype,
                                               channels_first=True)  # fmt: skip
        return Float8Output(data, scale.reshape(()))
    rows = inputs.as_rows(x)
    data, scale = inputs.launcher.forward_fp8(rows, alpha, gamma, beta, fp8_dtype, rowwise=rowwise)
    scale = scale.reshape(*x.shape[:-1], 1) if rowwise else scale.reshape(())
    return Float8Output(inputs.shaped_like(data, x), scale)


def dyt_packed_fp8(x: torch.Tensor, params: torch.Tensor, *, bias: bool = True, channels_first: bool = False,
                   fp8_dtype: torch.dtype = torch.float8_e4m3fn,
                   rowwise: bool = False) -> Float8Output:  # fmt: skip
    """dyt_fp8 with alpha, gamma and beta packed in one tensor (dyt.dyt_packed's layout)."""
    inputs.validate_packed(x, params, bias=bias, channels_first=channels_first)
    return dyt_fp8(x, *inputs.split_params(params, bias), fp8_dtype=fp8_dtype, rowwise=rowwise,
                   channels_first=channels_first)  # fmt: skip
