"""nan_masking: non-finite alpha and x give exactly the reference's NaN/inf pattern, and padding lanes
(columns past C, rows past the end of the last tile) never reach a reduction, on every tiling path."""

from __future__ import annotations

import math

import pytest
import torch

from helpers import check_against_reference, make_inputs, plans_for, run
from paths import PATHS, assert_path, path_context

# NaN and inf inputs make Triton's interpreter (numpy underneath) warn about the very values these tests
# feed it; expected here, and user code is unaffected.
pytestmark = [
    pytest.mark.nan_masking,
]

NONFINITE_ALPHA = {"+inf": math.inf, "-inf": -math.inf, "nan": math.nan}


def _padded_rows(path: str, dtype) -> int:
    """A row count that leaves the last forward and backward tiles partly empty."""
    width = PATHS[path][0]
    with path_context(path):
        fwd, bwd = plans_for((1, width), dtype)
    rows = 2 * max(fwd.BLOCK_M, bwd.BLOCK_M) + 1
    for plan in (fwd, bwd):
        assert rows % plan.BLOCK_M or width % plan.BLOCK_N, f"{rows}x{width} leaves no padding in {plan}"
    return rows


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize("alpha", sorted(NONFINITE_ALPHA))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_nonfinite_alpha_with_padding(path, alpha, dtype, seed):
    width = PATHS[path][0]
    rows = _padded_rows(path, dtype)
    assert_path(path, (rows, width), dtype)
    inp = make_inputs(
        (rows, width), dtype, seed=seed, alpha=NONFINITE_ALPHA[alpha], param_dtype=torch.float32
    )
    with path_context(path):
        outs = run(inp)
    if alpha != "nan":
        # The bug class: tanh(inf * 0) = NaN in padding lanes must not poison the parameter gradients.
        assert torch.isfinite(outs[3]).all(), "dgamma got NaN from padding lanes"
        assert torch.isfinite(outs[4]).all(), "dbeta got NaN from padding lanes"
        assert torch.isfinite(outs[2]).all(), "dalpha got NaN from padding lanes"
    check_against_reference(inp, outs)


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.bfloat16, torch.float16], ids=["fp32", "bf16", "fp16"]
)
def test_nonfinite_x(path, dtype, seed):
    """NaN, +inf and -inf inside x: NaN only where the reference has NaN, everything else exact."""
    width = PATHS[path][0]
    rows = _padded_rows(path, dtype)
    inp = make_inputs((rows, width), dtype, seed=seed)
    x = inp.x.detach().clone()
    gen = torch.Generator().manual_seed(seed)
    flat = torch.randperm(x.numel(), generator=gen)[:6].tolist()
    for value, where in zip(
        [math.nan, math.nan, math.inf, -math.inf, math.inf, -math.inf], flat, strict=True
    ):
        x.view(-1)[where] = value
    inp.x = x.requires_grad_()
    with path_context(path):
        outs = run(inp)
    check_against_reference(inp, outs)
    y = outs[0]
    assert int(torch.isnan(y).sum()) == 2, "exactly the two NaN elements of x give NaN in y"


@pytest.mark.parametrize("path", sorted(PATHS))
def test_infinite_alpha_and_nan_x_together(path, seed):
    width = PATHS[path][0]
    rows = _padded_rows(path, torch.float32)
    inp = make_inputs((rows, width), torch.float32, seed=seed, alpha=math.inf)
    x = inp.x.detach().clone()
    x[rows // 2, width // 2] = math.nan
    x[0, 0] = 0.0  # alpha * 0 = NaN on a real element: the reference propagates it, so must we
    inp.x = x.requires_grad_()
    with path_context(path):
        check_against_reference(inp, run(inp))


@pytest.mark.parametrize("path", sorted(PATHS))
def test_infinite_gamma_with_padding(path, seed):
    """An infinite gamma makes dalpha exactly +inf when every term is positive (x, dy, alpha > 0 here).
    Padding rows hold dy = 0, and 0 * inf = NaN there must not reach the dalpha sum."""
    width = PATHS[path][0]
    rows = _padded_rows(path, torch.float32)
    inp = make_inputs((rows, width), torch.float32, seed=seed)
    inp.x = (inp.x.detach().abs() + 0.1).requires_grad_()
    inp.dy = inp.dy.abs() + 0.1
    gamma = inp.gamma.detach().clone()
    gamma[width // 3] = math.inf
    inp.gamma = gamma.requires_grad_()
    with path_context(path):
        outs = run(inp)
    dalpha = float(outs[2])
    assert dalpha == math.inf, f"dalpha is {dalpha}, expected +inf: NaN means padding rows reached the sum"
    check_against_reference(inp, outs)
