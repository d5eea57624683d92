"""conformance: DyT's contract, checked on any implementation (`--impl NAME`: dyt, eager, compile, liger
or module:attr; dyt.service.conformance). Test ids begin with the implementation's name.

Each check is the contract as dyt's own suites state it, with the same float64 reference and tolerance
table, through the implementation's callable alone: values, NaN and inf with padded shapes, output and
gradient dtypes, more than 65,535 rows and 2^31 elements, bitwise repeats, batch invariance, empty input,
a clear error on bad input, non-contiguous input. The bug classes of the seed pull request each have a
check here: rows past CUDA's grid axis 1 (`test_more_than_65535_rows`), NaN from padded tiles with an
infinite alpha (`test_nonfinite_alpha_with_padding`), float32 parameter gradients rounded through x's
dtype (`test_float32_parameter_gradients_keep_their_precision`).
"""

from __future__ import annotations

import math

import conftest
import pytest
import torch

from helpers import DTYPES, check_against_reference, device, make_inputs, on_gpu

pytestmark = [
    pytest.mark.conformance,
]


def pytest_generate_tests(metafunc):
    if "impl" in metafunc.fixturenames:
        metafunc.parametrize("impl", [conftest.IMPL], ids=[conftest.IMPL.name], scope="module")


def _run(impl, inp):
    for t in inp.leaves():
        t.grad = None
    y = impl.fn(inp.x, inp.alpha, inp.gamma, inp.beta)
    y.backward(inp.dy)
    return (y.detach(), inp.x.grad, inp.alpha.grad, inp.gamma.grad,
            None if inp.beta is None else inp.beta.grad)  # fmt: skip


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("shape", [(64, 96), (37, 1000), (4, 5, 768), (1, 4096), (300, 7)], ids=str)
def test_values_against_the_reference(impl, shape, dtype, seed):
    inp = make_inputs(shape, DTYPES[dtype], seed=seed)
    check_against_reference(inp, _run(impl, inp))


@pytest.mark.parametrize("beta", [True, False], ids=["beta", "nobeta"])
def test_mixed_precision_values(impl, beta, seed):
    """bf16 x with float32 parameters (autocast-style training) against the reference."""
    inp = make_inputs((129, 320), torch.bfloat16, seed=seed, param_dtype=torch.float32, beta=beta)
    check_against_reference(inp, _run(impl, inp))


@pytest.mark.parametrize("alpha", [math.inf, -math.inf, math.nan], ids=["+inf", "-inf", "nan"])
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_nonfinite_alpha_with_padding(impl, alpha, dtype, seed):
    """Shapes that leave any power-of-two tile partly empty: with an infinite alpha, tanh(inf * 0) = NaN in
    padding must not reach dgamma, dbeta or dalpha."""
    inp = make_inputs((97, 200), DTYPES[dtype], seed=seed, alpha=alpha, param_dtype=torch.float32)
    outs = _run(impl, inp)
    if not math.isnan(alpha):
        for name, grad in zip(("dalpha", "dgamma", "dbeta"), outs[2:], strict=True):
            assert torch.isfinite(grad).all(), f"{name} got NaN or inf from padding lanes"
    check_against_reference(inp, outs)


def test_nonfinite_x(impl, seed):
    """NaN and infinities inside x: NaN in y exactly where x is NaN, everything else as the reference."""
    inp = make_inputs((97, 200), torch.bfloat16, seed=seed)
    x = inp.x.detach().clone()
    x[3, 5], x[50, 199], x[96, 0], x[10, 10] = math.nan, math.nan, math.inf, -math.inf
    inp.x = x.requires_grad_()
    outs = _run(impl, inp)
    assert int(torch.isnan(outs[0]).sum()) == 2
    check_against_reference(inp, outs)


@pytest.mark.parametrize("x_dtype", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("param_dtype", ["fp32", "bf16"])
def test_output_and_gradient_dtypes(impl, x_dtype, param_dtype, seed):
    """y and dx in x's dtype; dalpha, dgamma and dbeta in the parameters' own dtypes."""
    inp = make_inputs((16, 64), DTYPES[x_dtype], seed=seed, param_dtype=DTYPES[param_dtype])
    y, dx, da, dg, db = _run(impl, inp)
    assert (y.dtype, dx.dtype) == (DTYPES[x_dtype],) * 2, f"y {y.dtype}, dx {dx.dtype}: expected x's dtype"
    assert (da.dtype, dg.dtype, db.dtype) == (DTYPES[param_dtype],) * 3


def test_float32_parameter_gradients_keep_their_precision(impl, seed):
    """With bf16 x and float32 parameters, the parameter gradients over 8192 rows are float32 and accurate
    to float32 (the tolerance table's float32 rule), not to bf16: a sum rounded through x's dtype misses the
    reference by ~2^-9 of its size."""
    inp = make_inputs((8192, 64), torch.bfloat16, seed=seed, param_dtype=torch.float32)
    outs = _run(impl, inp)
    assert all(t.dtype == torch.float32 for t in outs[2:]), [t.dtype for t in outs[2:]]
    check_against_reference(inp, outs)


def test_more_than_65535_rows(impl, seed):
    """70,000 rows: past CUDA's grid axis-1 limit, where a kernel with one program per row on axis 1 fails."""
    inp = make_inputs((70000, 8), torch.float32, seed=seed)
    check_against_reference(inp, _run(impl, inp))


@pytest.mark.gpu_only
@pytest.mark.whole_gpu
def test_more_than_2_31_elements(impl):
    """2^31 + 2^22 bf16 elements (int32 offsets overflow past 2^31), checked on rows at both ends."""
    rows, width = 2**19 + 2**10, 4096
    x = torch.randn(rows, width, device="cuda", dtype=torch.bfloat16)
    a = torch.full((1,), 0.8, device="cuda")
    g, b = torch.randn(width, device="cuda"), torch.randn(width, device="cuda")
    assert x.numel() > 2**31
    with torch.no_grad():
        y = impl.fn(x, a, g, b)
    for r in (0, rows // 2, rows - 1):
        ref = g.double() * torch.tanh(a.double() * x[r].double()) + b.double()
        torch.testing.assert_close(y[r].double(), ref, rtol=2e-2, atol=2e-2)


def test_bitwise_repeats(impl, seed):
    inp = make_inputs((1000, 384), torch.bfloat16, seed=seed, param_dtype=torch.float32)
    first = [t.clone() for t in _run(impl, inp)]
    for again in (_run(impl, inp), _run(impl, inp)):
        for name, a, b in zip(("y", "dx", "dalpha", "dgamma", "dbeta"), first, again, strict=True):
            assert torch.equal(a, b), f"{name} differs between two identical calls"


def test_batch_invariance(impl, seed):
    """A row's y and dx do not depend on the rows around it (a batch of 1 against a batch of 512)."""
    inp = make_inputs((512, 256), torch.bfloat16, seed=seed)
    y, dx = _run(impl, inp)[:2]
    row = inp.x.detach()[100:101].clone().requires_grad_()
    y1 = impl.fn(row, inp.alpha, inp.gamma, inp.beta)
    y1.backward(inp.dy[100:101])
    assert torch.equal(y1.detach(), y[100:101]) and torch.equal(row.grad, dx[100:101])


@pytest.mark.parametrize("shape", [(0, 64), (2, 0, 64)], ids=str)
def test_empty_input(impl, shape, seed):
    inp = make_inputs(shape, torch.float32, seed=seed)
    y, dx, da, dg, db = _run(impl, inp)
    assert y.shape == shape and dx.shape == shape
    assert torch.equal(da.cpu(), torch.zeros(1)) and torch.equal(dg.cpu(), torch.zeros(64))
    assert torch.equal(db.cpu(), torch.zeros(64))


@pytest.mark.parametrize("bad", ["gamma_width", "alpha_elements"])
def test_bad_input_raises_a_clear_error(impl, bad):
    """A gamma that does not match x's width, or an alpha of two elements: a standard exception, not a
    crash or a silent result."""
    x = torch.randn(8, 16, device=device())
    a = torch.full((2 if bad == "alpha_elements" else 1,), 0.5, device=device())
    g = torch.ones(15 if bad == "gamma_width" else 16, device=device())
    with pytest.raises((ValueError, TypeError, RuntimeError, IndexError)):
        impl.fn(x, a, g, None)
        if on_gpu():
            torch.cuda.synchronize()  # an error raised by the launch surfaces here


@pytest.mark.parametrize("kind", ["row_slice", "transposed", "expanded_dy"])
def test_non_contiguous_input(impl, kind, seed):
    inp = make_inputs((41, 256), torch.bfloat16, seed=seed)
    base = inp.x.detach()
    if kind == "row_slice":
        wide = torch.randn(41, 300, device=base.device).to(base.dtype)
        wide[:, 7:263] = base
        inp.x = wide[:, 7:263].requires_grad_()
    elif kind == "transposed":
        inp.x = base.t().contiguous().t().requires_grad_()
    else:
        inp.dy = inp.dy[:1].expand(41, 256)
    check_against_reference(inp, _run(impl, inp))
