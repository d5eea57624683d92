"""module: packed parameters (dyt.PackedDyT, dyt.dyt_packed): alpha, weight and bias in one tensor.

On every path (plain CPU, the interpreter, CUDA's native op): a packed call gives the unpacked call's bits
for y, dx and every parameter gradient, its one gradient laid out as the parameter is; double backward
agrees; PackedDyT's state dict is DyT's (each loads the other's); convert_layernorm makes PackedDyT by
default, DyT with packed=False; bad input raises errors in dyt's and the module's terms. The native op's
own packed gradient block and its checks are in test_native.py.
"""

from __future__ import annotations

import copy
import re

import pytest
import torch
from torch import nn

import dyt
from dyt import ops

from helpers import DTYPES, device, make_inputs, on_gpu, run

pytestmark = pytest.mark.module

CASES = {
    "rows_bf16_fp32_params": ((6, 5, 384), "bf16", torch.float32, True, False),
    "rows_fp16_no_beta": ((30, 96), "fp16", None, False, False),
    "rows_fp32": ((7, 1000), "fp32", None, True, False),
    "width_not_16_bytes": ((9, 100), "bf16", None, True, False),  # regions off the 16-byte grid
    "channels_first": ((4, 24, 7, 9), "bf16", torch.float32, True, True),
    "channels_first_no_beta": ((2, 40, 3, 5), "fp32", None, False, True),
    "channels_last_memory": ((4, 24, 7, 9), "bf16", torch.float32, True, "channels_last"),
}


def packed(inp) -> torch.Tensor:
    """The packed parameter [gamma, beta, alpha] of inp's parameters, a fresh leaf."""
    parts = [inp.gamma] + ([inp.beta] if inp.beta is not None else []) + [inp.alpha.reshape(1)]
    return torch.cat([p.detach() for p in parts]).requires_grad_()


def inputs(case, seed):
    shape, dtype, param_dtype, beta, channels_first = CASES[case]
    if not channels_first:
        return make_inputs(shape, DTYPES[dtype], seed=seed, param_dtype=param_dtype, beta=beta)
    last = (shape[0], *shape[2:], shape[1])
    inp = make_inputs(last, DTYPES[dtype], seed=seed, param_dtype=param_dtype, beta=beta)
    if channels_first == "channels_last":  # (N, C, *spatial) in torch.channels_last memory format
        inp.x = inp.x.detach().movedim(-1, 1).requires_grad_()
        inp.dy = inp.dy.movedim(-1, 1)
        return inp
    inp.x = inp.x.detach().movedim(-1, 1).contiguous().requires_grad_()
    inp.dy = inp.dy.movedim(-1, 1).contiguous()
    return inp


def run_packed(inp, channels_first: bool):
    """Forward and backward through dyt_packed: (y, dx, dalpha, dgamma, dbeta) from params' one gradient,
    and that gradient."""
    params = packed(inp)
    x = inp.x.detach().requires_grad_()
    y = dyt.dyt_packed(x, params, bias=inp.beta is not None, channels_first=channels_first)
    y.backward(inp.dy)
    dalpha, dgamma, dbeta = ops.split_params(params.grad, inp.beta is not None)
    return (y.detach(), x.grad, dalpha, dgamma, dbeta), params.grad


def assert_same(fast, slow):
    for name, a, b in zip(("y", "dx", "dalpha", "dgamma", "dbeta"), fast, slow, strict=True):
        if a is None or b is None:
            assert a is None and b is None, name
            continue
        assert (a.dtype, a.shape) == (b.dtype, b.shape), name
        assert torch.equal(a.reshape(b.shape), b), name


@pytest.mark.parametrize("case", list(CASES))
def test_packed_calls_give_the_unpacked_calls_bits(case, seed):
    """y, dx and the parameter gradients of dyt_packed equal dyt's (dyt_channels_first's) bit for bit,
    the gradient in params' dtype and shape."""
    inp = inputs(case, seed)
    cf = CASES[case][4]
    slow = run(inp, dyt.dyt_channels_first if cf else dyt.dyt)
    fast, grad = run_packed(inp, cf)
    assert grad.shape == (ops.packed_size(inp.gamma.shape[0], inp.beta is not None),)
    assert grad.dtype == inp.gamma.dtype
    assert_same(fast, slow)
    if cf == "channels_last":  # y in the layout dyt_channels_first returns for such x
        assert fast[0].stride() == slow[0].stride() == inp.x.stride()


@pytest.mark.parametrize("beta", [True, False], ids=["beta", "nobeta"])
def test_double_backward_matches_the_unpacked_call(beta, seed):
    """create_graph=True: the packed call's first gradients, and the gradients of a function of them,
    match the unpacked call's (autograd differentiates through params' views)."""
    inp = make_inputs((12, 64), torch.float32, seed=seed, beta=beta)
    params = packed(inp)

    def second(fn, leaves):
        y = fn()
        first = torch.autograd.grad(y, leaves, inp.dy, create_graph=True)
        return first, torch.autograd.grad(sum((g * g).sum() for g in first), leaves, materialize_grads=True)

    x = inp.x.detach().requires_grad_()
    first_p, second_p = second(lambda: dyt.dyt_packed(x, params, bias=beta), (x, params))
    leaves = inp.leaves()
    first_u, second_u = second(lambda: dyt.dyt(*leaves) if beta else dyt.dyt(*leaves, None), leaves)
    join = lambda g: torch.cat([g[2], *(g[3:] if beta else ()), g[1].reshape(1)])  # noqa: E731
    for packed_grads, unpacked in ((first_p, first_u), (second_p, second_u)):
        torch.testing.assert_close(packed_grads[0], unpacked[0], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(packed_grads[1], join(unpacked), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("channels_last", [True, False], ids=["channels_last", "channels_first"])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
def test_packed_module_is_dyt_with_one_parameter(bias, channels_last, seed):
    """PackedDyT: one parameter; the same defaults, output and gradients as DyT; the same state dict,
    which each loads from the other; alpha, weight and bias are views of params."""
    torch.manual_seed(seed)
    ref = dyt.DyT(24, bias=bias, channels_last=channels_last, alpha_init=0.75).to(device())
    with torch.no_grad():
        for p in ref.parameters():
            p.normal_()
    m = dyt.PackedDyT(24, bias=bias, channels_last=channels_last, alpha_init=0.75).to(device())
    assert [n for n, _ in m.named_parameters()] == ["params"] and m.params.shape == (49 if bias else 25,)
    assert float(m.alpha.detach()) == 0.75 and torch.equal(m.weight, torch.ones(24, device=device()))
    assert (m.bias is None) == (not bias) and isinstance(m, dyt.DyT) and repr(m).startswith("PackedDyT(24")
    assert list(m.state_dict()) == list(ref.state_dict())
    storages = {t.untyped_storage().data_ptr() for t in m.state_dict().values()}
    assert len(storages) == len(m.state_dict()) and m.params.untyped_storage().data_ptr() not in storages
    m.load_state_dict(ref.state_dict())
    for name, t in ref.state_dict().items():
        assert torch.equal(m.state_dict()[name], t), name
    back = dyt.DyT(24, bias=bias, channels_last=channels_last).to(device())
    back.load_state_dict(m.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(back.parameters(), ref.parameters(), strict=True))

    shape = (3, 7, 24) if channels_last else (2, 24, 5, 3)
    x = torch.randn(shape, device=device())
    y_ref, y = ref(x), m(x)
    assert torch.equal(y, y_ref)
    dy = torch.randn_like(y)
    y_ref.backward(dy)
    y.backward(dy)
    grads = [ref.weight.grad] + ([ref.bias.grad] if bias else []) + [ref.alpha.grad]
    assert torch.equal(m.params.grad, torch.cat(grads))


def test_the_views_read_and_write_params_and_an_optimizer_updates_them(seed):
    m = dyt.PackedDyT(8)
    with torch.no_grad():
        m.weight.fill_(2.0)
        m.alpha.fill_(0.25)
    assert torch.equal(m.params[:8], torch.full((8,), 2.0)) and float(m.params[-1].detach()) == 0.25
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    m(torch.randn(4, 8)).sum().backward()
    before = m.params.detach().clone()
    opt.step()
    assert not torch.equal(m.params, before) and torch.equal(m.bias.detach(), m.params[8:16].detach())
    with pytest.raises(KeyError, match="attribute 'weight' already exists"):  # a view, not a parameter
        m.weight = nn.Parameter(torch.ones(8))


class _Doubled(nn.Module):
    def forward(self, t):
        return 2 * t


def test_forward_takes_params_where_it_is(seed):
    """PackedDyT.forward reads params from the module's parameters and, where it is not among them, as an
    attribute: a reassigned parameter, torch.func.functional_call's substitute and a parametrization
    reach dyt_packed."""
    from torch.nn.utils import parametrize

    torch.manual_seed(seed)
    m = dyt.PackedDyT(16).to(device())
    x = torch.randn(5, 16, device=device())
    substitute = torch.randn(33, device=device())
    y = torch.func.functional_call(m, {"params": substitute}, (x,))
    assert torch.equal(y, dyt.dyt_packed(x, substitute))
    m.params = nn.Parameter(torch.randn(33, device=device()))
    assert torch.equal(m(x), dyt.dyt_packed(x, m.params))
    original = m.params.detach().clone()
    parametrize.register_parametrization(m, "params", _Doubled())
    assert "params" not in m._parameters
    assert torch.equal(m(x), dyt.dyt_packed(x, 2 * original))


def test_a_state_dict_of_another_width_is_refused_in_dyts_names():
    m = dyt.PackedDyT(8)
    with pytest.raises(RuntimeError) as err:
        m.load_state_dict(dyt.DyT(9).state_dict())
    text = str(err.value)
    assert "size mismatch for weight" in text and "size mismatch for bias" in text
    assert "params" not in text
    with pytest.raises(RuntimeError, match='Missing key\\(s\\) in state_dict: "params"'):
        m.load_state_dict({"weight": torch.ones(8)})


def test_convert_layernorm_makes_packed_modules_by_default(seed):
    torch.manual_seed(seed)
    norms = nn.LayerNorm(16), nn.LayerNorm(16, bias=False)
    model = nn.Sequential(nn.Linear(16, 16), norms[0], nn.Linear(16, 16), norms[1])
    plain = dyt.convert_layernorm(copy.deepcopy(model), packed=False)
    assert [type(m).__name__ for m in plain] == ["Linear", "DyT", "Linear", "DyT"]
    packed_model = dyt.convert_layernorm(copy.deepcopy(model))
    assert [type(m).__name__ for m in packed_model] == ["Linear", "PackedDyT", "Linear", "PackedDyT"]
    assert packed_model[3].bias is None and packed_model[1].bias is not None
    packed_model.load_state_dict(plain.state_dict())
    x = torch.randn(5, 16)
    assert torch.equal(packed_model(x), plain(x))


@pytest.mark.parametrize(
    "params, x, message",
    [
        (
            torch.ones(16),
            torch.ones(4, 8),
            "params must have shape (17,), [weight (C), bias (C), alpha (1)] "
            "for C = 8 (x's last dimension), got (16,)",
        ),
        (torch.ones(2, 17), torch.ones(4, 8), "params must have shape (17,)"),
        (torch.ones(17, dtype=torch.float64), torch.ones(4, 8), "params must be a floating tensor of dtype"),
        ([1.0] * 17, torch.ones(4, 8), "params must be a torch.Tensor, got list"),
        (torch.ones(17), torch.ones(4, 8, dtype=torch.int32), "x must be a floating tensor"),
        (torch.ones(17), torch.tensor(1.0), "x must have at least one dimension"),
        (torch.tensor(1.0), torch.tensor(1.0), "x must have at least one dimension"),
        (torch.ones(17, device="meta"), torch.ones(4, 8), "x and params must be on one device"),
    ],
    ids=["length", "2d", "float64", "list", "x_int", "x_0d", "x_and_params_0d", "device"],
)
def test_bad_packed_input_is_refused_by_name(params, x, message):
    with pytest.raises((ValueError, TypeError), match=re.escape("dyt: " + message)):
        dyt.dyt_packed(x, params, bias=True)


def test_the_modules_errors_name_its_parameters():
    m = dyt.PackedDyT(8)
    with pytest.raises(ValueError, match=re.escape("x must have shape (..., 8): C = num_features = 8")):
        m(torch.ones(3, 9))
    with pytest.raises(TypeError, match="parameter params has dtype torch.float64"):
        m.double()(torch.ones(3, 8))
    with pytest.raises(TypeError, match="PackedDyT: num_features must be an int"):
        dyt.PackedDyT(8.0)


def test_torch_compile_fullgraph_packed_module(seed):
    """Compiled, PackedDyT takes dyt's compiled path on views of params: fullgraph, eager's values."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(32, 32), dyt.PackedDyT(32), nn.Linear(32, 32)).to(device())
    x = torch.randn(8, 32, device=device())
    compiled = torch.compile(model, fullgraph=True, backend="inductor" if on_gpu() else "aot_eager")
    compiled(x).square().mean().backward()
    grads_c = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    y = model(x)
    y.square().mean().backward()
    assert torch.allclose(compiled(x), y, rtol=1e-5, atol=1e-5)
    for gc, p in zip(grads_c, model.parameters(), strict=True):
        assert torch.allclose(gc, p.grad, rtol=1e-4, atol=1e-6)
