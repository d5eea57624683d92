"""DyT's contract as checks any implementation can take: pytest tests over the fixtures of the conformance
plugin (dyt.conformance.plugin: `dyt_impl`, the implementation under test; `dyt_seed`, fresh inputs
reproducible from the run's seed; `dyt_device`).

Each check is one clause of the contract (DESIGN's "The operator contract"), with the float64 reference and
the one tolerance table (dyt.conformance.tolerances), through the implementation's call alone: values,
mixed precision, NaN and inf with padded shapes, output and gradient dtypes, float32 parameter gradients,
more than 65,535 rows and 2^31 elements, rows per program on narrow rows, bitwise repeats, batch
invariance, empty input, a clear error on bad input, non-contiguous input, channels-first input. The bug
classes of the seed pull request each have a check (verdict.SEED_BUG_CLASSES). A check that needs a
capability the implementation does not support (implementations.CAPABILITIES) is skipped as "not
supported".

Invariant: each check judges one clause, so a broken implementation (dyt.conformance.broken) fails the
check of its clause and no other.
"""

from __future__ import annotations

import math

import pytest
import torch

from dyt.conformance import launches
from dyt.conformance.contract import DTYPES, check_against_reference, forward_backward, make_inputs
from dyt.conformance.implementations import Implementation, supports

pytestmark = pytest.mark.conformance


def require(impl: Implementation, device: torch.device, *capabilities: str) -> None:
    """Skips the check as "not supported: ..." where impl does not support one of capabilities."""
    for capability in capabilities:
        support = supports(impl, capability, device)
        if not support.supported:
            pytest.skip(support.reason())


def _on_this_device(impl: Implementation, device: torch.device) -> None:
    if device.type == "cpu":
        require(impl, device, "cpu")


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("shape", [(64, 96), (37, 1000), (4, 5, 768), (1, 4096), (300, 7)], ids=str)
def test_values_against_the_reference(dyt_impl, dyt_device, shape, dtype, dyt_seed):
    """y and every gradient against float64, parameters in x's dtype."""
    _on_this_device(dyt_impl, dyt_device)
    inp = make_inputs(shape, DTYPES[dtype], seed=dyt_seed, device=dyt_device)
    check_against_reference(inp, forward_backward(dyt_impl, inp))


@pytest.mark.parametrize("beta", [True, False], ids=["beta", "nobeta"])
def test_mixed_precision_values(dyt_impl, dyt_device, beta, dyt_seed):
    """bf16 x with float32 parameters (autocast-style training): y and dx against the reference, the
    parameter gradients in float32 (their precision is the float32-gradient check's)."""
    _on_this_device(dyt_impl, dyt_device)
    require(dyt_impl, dyt_device, "float32_params", *([] if beta else ["no_beta"]))
    inp = make_inputs((129, 320), torch.bfloat16, seed=dyt_seed, param_dtype=torch.float32, beta=beta,
                      device=dyt_device)  # fmt: skip
    outs = forward_backward(dyt_impl, inp)
    check_against_reference(inp, outs, only=("y", "dx"))
    grads = [g for g in outs[2:] if g is not None]
    assert all(g.dtype == torch.float32 for g in grads), [g.dtype for g in grads]


@pytest.mark.parametrize("alpha", [math.inf, -math.inf, math.nan], ids=["+inf", "-inf", "nan"])
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_nonfinite_alpha_with_padding(dyt_impl, dyt_device, alpha, dtype, dyt_seed):
    """Shapes that leave any power-of-two tile partly empty: with an infinite alpha, tanh(inf * 0) = NaN in
    padding must not reach dgamma, dbeta or dalpha."""
    _on_this_device(dyt_impl, dyt_device)
    inp = make_inputs((97, 200), DTYPES[dtype], seed=dyt_seed, alpha=alpha, device=dyt_device)
    outs = forward_backward(dyt_impl, inp)
    if not math.isnan(alpha):
        for name, grad in zip(("dalpha", "dgamma", "dbeta"), outs[2:], strict=True):
            assert torch.isfinite(grad).all(), f"{name} got NaN or inf from padding lanes"
    check_against_reference(inp, outs)


def test_nonfinite_x(dyt_impl, dyt_device, dyt_seed):
    """NaN and infinities inside x: NaN in y exactly where x is NaN, everything else as the reference."""
    _on_this_device(dyt_impl, dyt_device)
    inp = make_inputs((97, 200), torch.float32, seed=dyt_seed, device=dyt_device)
    x = inp.x.detach().clone()
    x[3, 5], x[50, 199], x[96, 0], x[10, 10] = math.nan, math.nan, math.inf, -math.inf
    inp.x = x.requires_grad_()
    outs = forward_backward(dyt_impl, inp)
    assert int(torch.isnan(outs[0]).sum()) == 2, "NaN in y where x is not NaN"
    check_against_reference(inp, outs)


@pytest.mark.parametrize(("x_dtype", "param_dtype"), [("fp32", "fp32"), ("bf16", "bf16"), ("fp16", "fp16"),
                                                      ("bf16", "fp32"), ("fp16", "fp32")])  # fmt: skip
def test_output_and_gradient_dtypes(dyt_impl, dyt_device, x_dtype, param_dtype, dyt_seed):
    """y and dx in x's dtype; dalpha, dgamma and dbeta in the parameters' own dtypes."""
    _on_this_device(dyt_impl, dyt_device)
    if x_dtype != param_dtype:
        require(dyt_impl, dyt_device, "float32_params")
    inp = make_inputs((16, 64), DTYPES[x_dtype], seed=dyt_seed, param_dtype=DTYPES[param_dtype],
                      device=dyt_device)  # fmt: skip
    y, dx, da, dg, db = forward_backward(dyt_impl, inp)
    assert (y.dtype, dx.dtype) == (DTYPES[x_dtype],) * 2, f"y {y.dtype}, dx {dx.dtype}: expected x's dtype"
    assert (da.dtype, dg.dtype, db.dtype) == (DTYPES[param_dtype],) * 3, (da.dtype, dg.dtype, db.dtype)


def test_float32_parameter_gradients_keep_their_precision(dyt_impl, dyt_device, dyt_seed):
    """With bf16 x and float32 parameters, the parameter gradients over 8192 rows are float32 and accurate
    to float32 (the tolerance table's float32 rule), not to bf16: a sum rounded through x's dtype misses the
    reference by ~2^-9 of its size."""
    _on_this_device(dyt_impl, dyt_device)
    require(dyt_impl, dyt_device, "float32_params")
    inp = make_inputs((8192, 64), torch.bfloat16, seed=dyt_seed, param_dtype=torch.float32, device=dyt_device)
    outs = forward_backward(dyt_impl, inp)
    assert all(t.dtype == torch.float32 for t in outs[2:]), [t.dtype for t in outs[2:]]
    check_against_reference(inp, outs, only=("dalpha", "dgamma", "dbeta"))


def test_more_than_65535_rows(dyt_impl, dyt_device, dyt_seed):
    """70,000 rows of 96: past CUDA's grid axis-1 limit, where a kernel with one program per row on axis 1
    fails to launch (in Triton's interpreter such a launch is refused as CUDA would: launches.recorded)."""
    _on_this_device(dyt_impl, dyt_device)
    inp = make_inputs((70000, 96), torch.float32, seed=dyt_seed, device=dyt_device)
    with launches.recorded(dyt_device):
        outs = forward_backward(dyt_impl, inp)
    check_against_reference(inp, outs)


# Rows a program must cover at least, on average, on narrow rows: one program per row starves the GPU
# there (a program of 8 elements does almost nothing per launch slot).
NARROW_ROWS_PER_PROGRAM = 4


def test_narrow_rows_share_programs(dyt_impl, dyt_device, dyt_seed):
    """8,192 rows of width 8: every kernel launch covers at least NARROW_ROWS_PER_PROGRAM rows a program,
    forward and backward (launches.recorded: on a GPU every CUDA kernel, in Triton's interpreter every
    Triton launch). Where no launch can be seen (plain PyTorch on the CPU) there is nothing to judge."""
    _on_this_device(dyt_impl, dyt_device)
    rows = 8192
    inp = make_inputs((rows, 8), torch.float32, seed=dyt_seed, device=dyt_device)

    def crowded(launch: launches.Launch) -> str | None:
        if launch.programs * NARROW_ROWS_PER_PROGRAM > rows:
            return (f"one program per narrow row: {launch.name} grid {launch.grid} for {rows} rows of width "
                    f"8 (at most {rows // NARROW_ROWS_PER_PROGRAM} programs a launch)")  # fmt: skip
        return None

    try:
        with launches.recorded(dyt_device, refuse=crowded) as seen:
            forward_backward(dyt_impl, inp)
    except launches.LaunchRefused as refused:
        pytest.fail(str(refused), pytrace=False)
    if not seen:
        pytest.skip("not applicable: no kernel launch can be seen here (plain PyTorch on the CPU)")
    reasons = [reason for reason in map(crowded, seen) if reason]
    assert not reasons, reasons[0]


@pytest.mark.gpu_only
@pytest.mark.whole_gpu
def test_more_than_2_31_elements(dyt_impl, dyt_device):
    """2^31 + 2^22 bf16 elements (int32 offsets overflow past 2^31), checked on rows at both ends."""
    if dyt_device.type != "cuda":
        pytest.skip("GPU-only: 2^31 elements on a GPU (the interpreter would take hours)")
    require(dyt_impl, dyt_device, "over_2_31_elements", "float32_params")
    rows, width = 2**19 + 2**10, 4096
    x = torch.randn(rows, width, device="cuda", dtype=torch.bfloat16)
    a = torch.full((1,), 0.8, device="cuda")
    g, b = torch.randn(width, device="cuda"), torch.randn(width, device="cuda")
    assert x.numel() > 2**31
    with torch.no_grad():
        y = dyt_impl(x, a, g, b)
    for r in (0, rows // 2, rows - 1):
        ref = g.double() * torch.tanh(a.double() * x[r].double()) + b.double()
        torch.testing.assert_close(y[r].double(), ref, rtol=2e-2, atol=2e-2)


def test_bitwise_repeats(dyt_impl, dyt_device, dyt_seed):
    """The same inputs twice more: the same bits in y and every gradient (no atomics, a fixed order)."""
    _on_this_device(dyt_impl, dyt_device)
    inp = make_inputs((1000, 384), torch.float32, seed=dyt_seed, device=dyt_device)
    first = [t.clone() for t in forward_backward(dyt_impl, inp)]
    for again in (forward_backward(dyt_impl, inp), forward_backward(dyt_impl, inp)):
        for name, a, b in zip(("y", "dx", "dalpha", "dgamma", "dbeta"), first, again, strict=True):
            assert torch.equal(a, b), f"{name} differs between two identical calls"


def test_batch_invariance(dyt_impl, dyt_device, dyt_seed):
    """A row's y and dx do not depend on the rows around it (a batch of 1 against a batch of 512)."""
    _on_this_device(dyt_impl, dyt_device)
    inp = make_inputs((512, 256), torch.bfloat16, seed=dyt_seed, device=dyt_device)
    y, dx = forward_backward(dyt_impl, inp)[:2]
    row = inp.x.detach()[100:101].clone().requires_grad_()
    y1 = dyt_impl(row, inp.alpha, inp.gamma, inp.beta)
    y1.backward(inp.dy[100:101])
    assert torch.equal(y1.detach(), y[100:101]), "y of a row depends on the batch around it"
    assert torch.equal(row.grad, dx[100:101]), "dx of a row depends on the batch around it"


@pytest.mark.parametrize("shape", [(0, 64), (2, 0, 64)], ids=str)
def test_empty_input(dyt_impl, dyt_device, shape, dyt_seed):
    """Zero rows: an empty y and dx, zero parameter gradients."""
    _on_this_device(dyt_impl, dyt_device)
    inp = make_inputs(shape, torch.float32, seed=dyt_seed, device=dyt_device)
    y, dx, da, dg, db = forward_backward(dyt_impl, inp)
    assert y.shape == shape and dx.shape == shape
    assert torch.equal(da.cpu(), torch.zeros(1)) and torch.equal(dg.cpu(), torch.zeros(64))
    assert torch.equal(db.cpu(), torch.zeros(64))


BAD_INPUTS = ["gamma_width", "beta_width", "alpha_elements", "integer_x", "complex_x"]


@pytest.mark.parametrize("bad", BAD_INPUTS)
def test_bad_input_raises_a_clear_error(dyt_impl, dyt_device, bad):
    """A gamma or beta that does not match x's width, an alpha of two elements, an integer or complex x: a
    standard exception, not a crash or a silent result."""
    _on_this_device(dyt_impl, dyt_device)
    dev = dyt_device
    x = torch.randn(8, 16, device=dev)
    if bad == "integer_x":
        x = torch.randint(-3, 4, (8, 16), device=dev)
    elif bad == "complex_x":
        x = torch.randn(8, 16, device=dev, dtype=torch.complex64)
    a = torch.full((2 if bad == "alpha_elements" else 1,), 0.5, device=dev)
    g = torch.ones(15 if bad == "gamma_width" else 16, device=dev)
    b = torch.zeros(17 if bad == "beta_width" else 16, device=dev)
    with pytest.raises((ValueError, TypeError, RuntimeError, IndexError, NotImplementedError)):
        dyt_impl(x, a, g, b)
        if dev.type == "cuda":
            torch.cuda.synchronize()  # an error raised by the launch surfaces here


@pytest.mark.parametrize("kind", ["row_slice", "transposed", "expanded_dy"])
def test_non_contiguous_input(dyt_impl, dyt_device, kind, dyt_seed):
    """x as a slice of wider rows, x transposed in memory, dy expanded from one row (stride 0)."""
    _on_this_device(dyt_impl, dyt_device)
    inp = make_inputs((41, 256), torch.float32, seed=dyt_seed, device=dyt_device)
    base = inp.x.detach()
    if kind == "row_slice":
        wide = torch.randn(41, 300, device=base.device).to(base.dtype)
        wide[:, 7:263] = base
        inp.x = wide[:, 7:263].requires_grad_()
    elif kind == "transposed":
        inp.x = base.t().contiguous().t().requires_grad_()
    else:
        inp.dy = inp.dy[:1].expand(41, 256)
    check_against_reference(inp, forward_backward(dyt_impl, inp))


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_channels_first_values(dyt_impl, dyt_device, dtype, dyt_seed):
    """(N, C, H, W) scaled along dim 1 (ConvNeXt): y and every gradient against the reference applied
    with C last."""
    _on_this_device(dyt_impl, dyt_device)
    require(dyt_impl, dyt_device, "channels_first")
    rows = make_inputs((2, 5, 7, 24), DTYPES[dtype], seed=dyt_seed, device=dyt_device)
    first = rows.channels_first()
    outs = forward_backward(dyt_impl, first, channels_first=True)
    back = [outs[0].movedim(1, -1), outs[1].movedim(1, -1), *outs[2:]]
    check_against_reference(rows, back)
