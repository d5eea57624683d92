"""module: the nn.Module and its checkpoints, LayerNorm conversion, channels-first input, empty input,
torch.compile(fullgraph=True) of a small model, and CUDA graph capture and replay."""

from __future__ import annotations

import copy
import functools
import logging
import os
import pathlib
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from torch import nn

import dyt
from dyt.conformance.implementations import DynamicTanh

from helpers import check_against_reference, device, make_inputs, on_gpu, run

pytestmark = pytest.mark.module

# The paper's reference module, as published (parameter names and defaults are the contract).
PaperDynamicTanh = DynamicTanh


def test_parameters_and_defaults():
    m = dyt.DyT(48)
    assert [n for n, _ in m.named_parameters()] == ["alpha", "weight", "bias"]
    assert m.alpha.shape == (1,) and float(m.alpha.detach()) == 0.5
    assert torch.equal(m.weight, torch.ones(48)) and torch.equal(m.bias, torch.zeros(48))
    assert dyt.DyT(48, bias=False).bias is None
    assert float(dyt.DyT(8, alpha_init=2.0).alpha.detach()) == 2.0


class _Doubled(nn.Module):
    def forward(self, t):
        return 2 * t


@pytest.mark.parametrize(
    "case", ["plain", "no_bias", "reassigned", "parametrized_weight", "parametrized_bias", "functional_call"]
)
def test_forward_takes_the_parameters_where_they_are(case, seed):
    """DyT.forward reads alpha, weight and bias from the module's parameters and, where a name is not
    among them, as an attribute: a reassigned parameter, a parametrization (of weight or of bias) and
    torch.func.functional_call's substitutes reach dyt.dyt as they are, bit for bit."""
    from torch.nn.utils import parametrize

    torch.manual_seed(seed)
    m = dyt.DyT(16, bias=case != "no_bias").to(device())
    with torch.no_grad():
        m.alpha.fill_(0.7)
        m.weight.normal_()
        if m.bias is not None:
            m.bias.normal_()
    x = torch.randn(5, 16, device=device())
    if case == "reassigned":
        m.weight = nn.Parameter(torch.randn(16, device=device()))
    if case.startswith("parametrized"):
        parametrize.register_parametrization(m, case.removeprefix("parametrized_"), _Doubled())
    substitutes = {"weight": torch.randn(16, device=device())} if case == "functional_call" else {}
    y = torch.func.functional_call(m, substitutes, (x,)) if substitutes else m(x)
    weight = substitutes.get("weight", m.weight)
    expected = dyt.dyt(x, m.alpha, weight, m.bias)
    assert torch.equal(y, expected), case
    if case == "parametrized_bias":
        assert not torch.equal(y, dyt.dyt(x, m.alpha, m.weight, m.parametrizations.bias.original))
        y.sum().backward()
        assert m.parametrizations.bias.original.grad is not None


@pytest.mark.parametrize("channels_last", [True, False])
def test_paper_checkpoint_loads_and_matches(channels_last, seed):
    torch.manual_seed(seed)
    paper = PaperDynamicTanh(32, channels_last)
    with torch.no_grad():
        paper.alpha.fill_(0.8)
        paper.weight.normal_()
        paper.bias.normal_()
    ours = dyt.DyT(32, channels_last=channels_last)
    ours.load_state_dict(paper.state_dict())
    paper, ours = paper.to(device()), ours.to(device())
    shape = (6, 9, 32) if channels_last else (2, 32, 5, 7)
    x = torch.randn(shape, device=device())
    ref = paper.double()(x.double())
    got = ours(x)
    assert got.shape == x.shape
    assert float(((got.double() - ref).norm() / ref.norm()).detach()) < 1e-6


def test_channels_first_gradients(seed):
    m = dyt.DyT(24, channels_last=False, device=device())
    x = torch.randn(2, 24, 3, 5, device=device(), requires_grad=True)
    x_cl = x.detach().to(memory_format=torch.channels_last).requires_grad_()
    for inp in (x, x_cl):
        y = m(inp)
        y.square().sum().backward()
    ref = PaperDynamicTanh(24, False).to(device())
    xr = x.detach().clone().requires_grad_()
    ref(xr).square().sum().backward()
    assert torch.allclose(x.grad, xr.grad, rtol=1e-5, atol=1e-6)
    assert torch.allclose(x_cl.grad, xr.grad, rtol=1e-5, atol=1e-6)


def test_convert_layernorm():
    model = nn.Sequential(nn.Linear(16, 32), nn.LayerNorm(32), nn.GELU(),
                          nn.Sequential(nn.LayerNorm(32, bias=False), nn.Linear(32, 4)))  # fmt: skip
    out = dyt.convert_layernorm(model, alpha_init=0.7)
    assert out is model
    assert isinstance(model[1], dyt.DyT) and model[1].bias is not None and model[1].num_features == 32
    assert isinstance(model[3][0], dyt.DyT) and model[3][0].bias is None
    assert float(model[1].alpha.detach()) == pytest.approx(0.7)
    assert not any(isinstance(m, nn.LayerNorm) for m in model.modules())
    assert isinstance(dyt.convert_layernorm(nn.LayerNorm(8)), dyt.DyT)


def paper_convert_ln_to_dyt(module):
    """The paper's converter, as published: every nn.LayerNorm becomes a DynamicTanh (weight and bias)."""
    module_output = module
    if isinstance(module, nn.LayerNorm):
        module_output = PaperDynamicTanh(module.normalized_shape, type(module).__name__ != "LayerNorm2d")
    for name, child in module.named_children():
        module_output.add_module(name, paper_convert_ln_to_dyt(child))
    return module_output


def _bias_free_model():
    return nn.Sequential(nn.Linear(16, 32), nn.LayerNorm(32, bias=False), nn.GELU(),
                         nn.LayerNorm(32, elementwise_affine=False), nn.Linear(32, 4))  # fmt: skip


def test_convert_with_bias_true_loads_the_papers_checkpoints():
    paper = paper_convert_ln_to_dyt(_bias_free_model())
    state = paper.state_dict()
    assert state["1.alpha"].shape == (1,) and state["1.weight"].shape == state["1.bias"].shape == (32,)
    ours = dyt.convert_layernorm(_bias_free_model(), bias=True, packed=False)
    ours.load_state_dict(state, strict=True)
    assert [n for n, _ in ours[3].named_parameters()] == ["alpha", "weight", "bias"]
    packed = dyt.convert_layernorm(_bias_free_model(), bias=True)  # the default: PackedDyT, the same keys
    packed.load_state_dict(state, strict=True)
    assert isinstance(packed[3], dyt.PackedDyT) and [n for n, _ in packed[3].named_parameters()] == ["params"]
    x = torch.randn(3, 16)
    assert torch.equal(packed(x), ours(x))
    # The default keeps each norm's own parameter set: a bias-free LayerNorm gives a bias-free DyT.
    default = dyt.convert_layernorm(_bias_free_model())
    assert default[1].bias is None and default[3].bias is None
    missing = default.load_state_dict(state, strict=False).unexpected_keys
    assert sorted(missing) == ["1.bias", "3.bias"]
    assert dyt.convert_layernorm(nn.Sequential(nn.LayerNorm(8)), bias=False)[0].bias is None


class LayerNorm2d(nn.LayerNorm):
    """timm's channels-first LayerNorm2d, as timm.layers.norm defines it (timm itself is not needed)."""

    def forward(self, x):
        x = x.permute(0, 2, 3, 1)
        x = nn.functional.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        return x.permute(0, 3, 1, 2)


LayerNorm2d.__module__ = "timm.layers.norm"


def test_convert_channels_first_layernorm2d(seed):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Conv2d(3, 16, 3), LayerNorm2d(16), nn.Conv2d(16, 8, 1), LayerNorm2d(8))
    paper = paper_convert_ln_to_dyt(copy.deepcopy(model))
    with torch.no_grad():
        for m in paper.modules():
            if isinstance(m, PaperDynamicTanh):
                m.alpha.fill_(0.8), m.weight.normal_(), m.bias.normal_()
    model, converted = dyt.convert_norms(model)
    assert [(c.name, c.source) for c in converted] == [("1", "timm.layers.norm.LayerNorm2d"),
                                                       ("3", "timm.layers.norm.LayerNorm2d")]  # fmt: skip
    assert isinstance(model[1], dyt.DyT) and not model[1].channels_last and model[1].num_features == 16
    model.load_state_dict(paper.state_dict(), strict=True)
    x = torch.randn(2, 3, 9, 11)
    with torch.no_grad():
        assert torch.allclose(model(x), paper(x), rtol=1e-5, atol=1e-5)


def test_unknown_layernorm_subclass_is_reported_not_guessed():
    class ScaledNorm(nn.LayerNorm):
        def forward(self, x):
            return 2 * super().forward(x)

    model = nn.Sequential(nn.Sequential(nn.Linear(8, 8), ScaledNorm(8)))
    with pytest.raises(
        TypeError, match=r"the module 0\.1 \(.*ScaledNorm, a subclass of nn.LayerNorm\).*layouts="
    ):
        dyt.convert_layernorm(model)
    assert isinstance(model[0][1], ScaledNorm)
    with pytest.warns(UserWarning, match="no norm converted"):
        dyt.convert_layernorm(model, layouts={ScaledNorm: "keep"})
    assert isinstance(model[0][1], ScaledNorm)
    dyt.convert_layernorm(model, layouts={nn.LayerNorm: "channels_first"})
    assert isinstance(model[0][1], dyt.DyT) and not model[0][1].channels_last
    with pytest.raises(ValueError, match="must be one of"):
        dyt.convert_norms(model, layouts={ScaledNorm: "last"})


def _no_affine(width):
    return nn.LayerNorm(width, elementwise_affine=False)


@pytest.mark.parametrize("packed", [False, True], ids=["DyT", "PackedDyT"])
def test_converted_norms_keep_the_models_device_and_dtype(packed):
    """A norm without parameters (elementwise_affine=False) gets the device and dtype of the nearest
    enclosing module that has a parameter; a norm with parameters keeps its own."""
    model = nn.Sequential(nn.Linear(8, 8), _no_affine(8)).to("meta")
    dyt.convert_layernorm(model, packed=packed)
    assert isinstance(model[1], dyt.DyT) and all(p.is_meta for p in model[1].parameters())
    model = nn.Sequential(nn.Linear(8, 8), _no_affine(8), nn.LayerNorm(8)).bfloat16()
    dyt.convert_layernorm(model, packed=packed)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert model(torch.randn(2, 8, dtype=torch.bfloat16)).dtype == torch.bfloat16
    # The nearest enclosing module first: the inner norm takes its block's float16, not the model's float32;
    # a norm's own parameters come before its surroundings; a model without parameters gives the defaults.
    model = nn.Sequential(nn.Linear(8, 8), nn.Sequential(nn.Linear(8, 8).half(), _no_affine(8)),
                          nn.LayerNorm(8).bfloat16())  # fmt: skip
    dyt.convert_layernorm(model, packed=packed)
    assert model[1][1].weight.dtype == torch.float16 and model[2].weight.dtype == torch.bfloat16
    model = nn.Sequential(nn.Identity(), _no_affine(8))
    dyt.convert_layernorm(model, packed=packed)
    assert model[1].weight.dtype == torch.float32 and model[1].weight.device.type == "cpu"


class _Net(nn.Module):
    """A float32 norm first, then (in blocks.0) a norm whose block is float64."""

    def __init__(self, width):
        super().__init__()
        self.norm0 = nn.LayerNorm(width)
        self.blocks = nn.Sequential(
            nn.ModuleDict({"norm1": nn.LayerNorm(width), "fc": nn.Linear(width, width)})
        )
        self.blocks.double()


@pytest.mark.parametrize(
    "case, name",
    [("affine", "1"), ("no_affine", "1"), ("nested", "blocks.0.norm1"), ("root", "(the model itself)")],
)
def test_float64_norms_are_refused_naming_the_module_and_the_fix(case, name):
    """DyT's parameters are float32, bfloat16 or float16: a float64 norm (or one without parameters in a
    float64 model) is refused before anything is replaced, in one short error that names the module and
    the way out, which works."""
    import traceback

    if case == "nested":
        model = _Net(8)
    elif case == "root":
        model = nn.LayerNorm(8).double()
    else:
        model = nn.Sequential(nn.Linear(8, 8), nn.LayerNorm(8, elementwise_affine=case == "affine")).double()
    with pytest.raises(TypeError) as info:
        dyt.convert_layernorm(model)
    message = str(info.value)
    assert f"the module {name} (torch.nn.modules.normalization.LayerNorm)" in message, message
    assert "torch.float64" in message and "float32, bfloat16 or float16" in message, message
    assert "model.float()" in message and "layouts={LayerNorm: 'keep'}" in message, message
    if case == "no_affine":
        assert "no parameters of its own" in message and "the model (Sequential)" in message, message
    assert info.value.__cause__ is None and info.value.__context__ is None
    assert len(traceback.extract_tb(info.tb)) <= 5, "".join(traceback.format_tb(info.tb))
    assert not any(isinstance(m, dyt.DyT) for m in model.modules())  # not even _Net's float32 norm0
    with pytest.warns(UserWarning, match="no norm converted"):
        assert dyt.convert_layernorm(model, layouts={nn.LayerNorm: "keep"}) is model
    model = dyt.convert_layernorm(model.float())
    assert not any(isinstance(m, nn.LayerNorm) for m in model.modules())
    assert all(p.dtype == torch.float32 for p in model.parameters())


class LlamaRMSNorm(nn.Module):
    """Hugging Face's LlamaRMSNorm, as transformers defines it (transformers itself is not needed)."""

    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        variance = hidden_states.float().pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states


def _llama_like():
    return nn.Sequential(nn.Linear(16, 24), LlamaRMSNorm(24), nn.Linear(24, 12), nn.RMSNorm(12))


def test_rmsnorm_converts_on_request_to_dyt_without_bias(caplog):
    with pytest.warns(UserWarning, match=r"no norm converted in Sequential; 2 RMSNorm .*rmsnorm=True"):
        model = dyt.convert_layernorm(_llama_like())
    assert isinstance(model[1], LlamaRMSNorm) and isinstance(model[3], nn.RMSNorm)
    model, converted = dyt.convert_norms(_llama_like(), rmsnorm=True)
    assert [(c.name, c.source.rsplit(".", 1)[-1]) for c in converted] == [("1", "LlamaRMSNorm"),
                                                                          ("3", "RMSNorm")]  # fmt: skip
    assert [c.dyt for c in converted] == [model[1], model[3]]
    norm_keys = [k for k in model.state_dict() if k.startswith(("1.", "3."))]
    assert norm_keys == ["1.alpha", "1.weight", "3.alpha", "3.weight"]
    assert model[1].num_features == 24 and model[3].num_features == 12 and model[3].bias is None
    with caplog.at_level(logging.INFO, logger="dyt"):
        dyt.convert_layernorm(_llama_like(), rmsnorm=True)
    assert f"1 {LlamaRMSNorm.__module__}.LlamaRMSNorm -> DyT" in caplog.text
    assert "1 torch.nn.modules.normalization.RMSNorm -> DyT" in caplog.text


def test_float64_rmsnorm_is_refused_naming_the_fix():
    model = _llama_like().double()
    with pytest.raises(
        TypeError, match=r"the module 1 \(.*LlamaRMSNorm\): it has dtype torch.float64.*rmsnorm=False"
    ):
        dyt.convert_norms(model, rmsnorm=True)
    assert isinstance(model[1], LlamaRMSNorm)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post_norm", "pre_norm"])
def test_converted_encoder_layer_runs_dyt_math_in_inference_mode(norm_first, seed):
    """PyTorch's fused encoder path (eval, no grad) runs LayerNorm math and reads norm.eps: a converted
    layer must not take it, and must give what its modules compute one by one."""
    torch.manual_seed(seed)
    layer = nn.TransformerEncoderLayer(32, 4, dim_feedforward=64, dropout=0.0, batch_first=True,
                                       norm_first=norm_first)  # fmt: skip
    dyt.convert_layernorm(layer)
    with torch.no_grad():
        for norm in (layer.norm1, layer.norm2):
            norm.alpha.fill_(0.8), norm.weight.normal_(), norm.bias.normal_()
    layer.eval()
    x = torch.randn(3, 5, 32)

    def by_hand(x):
        sa = lambda h: layer.self_attn(h, h, h, need_weights=False)[0]
        ff = lambda h: layer.linear2(layer.activation(layer.linear1(h)))
        if norm_first:
            x = x + sa(layer.norm1(x))
            return x + ff(layer.norm2(x))
        x = layer.norm1(x + sa(x))
        return layer.norm2(x + ff(x))

    with torch.no_grad():
        ref = by_hand(x)
    for ctx in (torch.no_grad, torch.inference_mode):
        with ctx():
            got = layer(x)
        assert torch.allclose(got, ref, rtol=1e-5, atol=1e-5), float((got - ref).abs().max())
    encoder = nn.TransformerEncoder(
        nn.TransformerEncoderLayer(32, 4, dim_feedforward=64, dropout=0.0, batch_first=True), 2,
        enable_nested_tensor=True,
    )  # fmt: skip
    dyt.convert_layernorm(encoder).eval()
    pad = torch.zeros(3, 5, dtype=torch.bool)
    pad[0, 3:] = True
    with torch.inference_mode():
        got = encoder(x, src_key_padding_mask=pad)
    with torch.no_grad():
        ref = x
        for lay in encoder.layers:
            ref = lay.norm1(ref + lay.self_attn(ref, ref, ref, key_padding_mask=pad, need_weights=False)[0])
            ref = lay.norm2(ref + lay.linear2(lay.activation(lay.linear1(ref))))
    keep = ~pad
    assert torch.allclose(got[keep], ref[keep], rtol=1e-5, atol=1e-5)


def test_module_errors_name_the_modules_parameters():
    expected = r"x must have shape \(\.\.\., 8\): C = num_features = 8 \(the size of weight and bias\) "
    with pytest.raises(
        ValueError, match=expected + r"along the last dimension; got x of shape \(4, 7\)"
    ) as info:
        dyt.DyT(8)(torch.randn(4, 7))
    assert "gamma" not in str(info.value) and str(info.value).startswith("DyT(8,")
    expected = r"\(N, 8, \.\.\.\): .*\(the size of weight\) along dim 1, not the last; got x of shape \(2, 7"
    with pytest.raises(ValueError, match=expected):
        dyt.DyT(8, bias=False, channels_last=False)(torch.randn(2, 7, 3, 8))
    with pytest.raises(ValueError, match=r"x must have shape \(N, 8, \.\.\.\).*got x of shape \(8,\)"):
        dyt.DyT(8, channels_last=False)(torch.randn(8))
    with pytest.raises(TypeError, match=r"parameter alpha has dtype torch.float64"):
        dyt.DyT(8).double()(torch.randn(2, 8))
    with pytest.raises(TypeError, match=r"input must be a floating tensor .* got torch.int64"):
        dyt.DyT(8)(torch.ones(2, 8, dtype=torch.int64))


@pytest.mark.parametrize("width", [8.7, 8.0, "8", True, None], ids=repr)
def test_non_int_widths_are_rejected(width):
    with pytest.raises(TypeError, match="num_features must be an int"):
        dyt.DyT(width)


@pytest.mark.parametrize("dtype", [torch.float64, torch.int32, torch.complex64], ids=str)
def test_unsupported_parameter_dtypes_are_rejected_at_construction(dtype):
    with pytest.raises(TypeError, match=f"dtype must be float32, bfloat16 or float16, got {dtype}"):
        dyt.DyT(8, dtype=dtype)


def test_widths_that_are_ints_are_accepted():
    assert dyt.DyT(np.int64(8)).num_features == 8 and dyt.DyT(torch.tensor(8)).num_features == 8
    with pytest.raises(ValueError, match="positive"):
        dyt.DyT(0)


_MODULES = [dyt.DyT, dyt.PackedDyT]
_FLAGS = ["bias", "channels_last", "autocast_output"]


@pytest.mark.parametrize("cls", _MODULES, ids=lambda c: c.__name__)
@pytest.mark.parametrize(
    "value, got",
    [("a", "str 'a'"), ("0.5", "str '0.5'"), (None, "NoneType None"), (True, "bool True"),
     (np.bool_(False), "bool np.False_"), (1 + 2j, "complex (1+2j)"), ([0.5], "list [0.5]"),
     (torch.ones(2), "Tensor of dtype torch.float32 and shape (2,)"),
     (torch.tensor(True), "Tensor of dtype torch.bool and shape ()"),
     (torch.ones(1, device="meta"), "Tensor of dtype torch.float32 and shape (1,)")],
    ids=repr,
)  # fmt: skip
def test_alpha_init_that_is_not_a_real_number_is_rejected(cls, value, got):
    expected = f"{cls.__name__}: alpha_init must be a real number, got {got}"
    with pytest.raises(TypeError, match=f"^{re.escape(expected)}$"):
        cls(8, alpha_init=value)


@pytest.mark.parametrize("cls", _MODULES, ids=lambda c: c.__name__)
@pytest.mark.parametrize(
    "value",
    [0.25, 2, np.float32(0.25), np.int64(2), torch.tensor(0.25), torch.tensor([0.25]), torch.tensor(2),
     float("nan"), float("inf"), -float("inf")],
    ids=repr,
)  # fmt: skip
def test_alpha_init_that_is_a_real_number_is_accepted(cls, value):
    """A real number: a Python or NumPy int or float, a torch tensor of one element (such as another
    module's alpha), NaN and +-inf (which dyt computes as its float64 reference does)."""
    m = cls(8, alpha_init=value)
    expected = torch.full((1,), float(value))
    same = functools.partial(torch.testing.assert_close, expected=expected, rtol=0, atol=0, equal_nan=True)
    assert type(m.alpha_init) is float
    same(torch.tensor([m.alpha_init]))
    same(m.alpha.detach())
    same(cls(8, alpha_init=m.alpha).alpha.detach())


@pytest.mark.parametrize("cls", _MODULES, ids=lambda c: c.__name__)
@pytest.mark.parametrize("flag", _FLAGS)
@pytest.mark.parametrize(
    "value, got",
    [("no", "str 'no'"), ("", "str ''"), (None, "NoneType None"), (1, "int 1"), (0, "int 0"),
     (1.0, "float 1.0"), (torch.tensor(True), "Tensor of dtype torch.bool and shape ()")],
    ids=repr,
)  # fmt: skip
def test_flags_that_are_not_bools_are_rejected(cls, flag, value, got):
    expected = f"{cls.__name__}: {flag} must be a bool, got {got}"
    with pytest.raises(TypeError, match=f"^{re.escape(expected)}$"):
        cls(8, **{flag: value})


@pytest.mark.parametrize("cls", _MODULES, ids=lambda c: c.__name__)
@pytest.mark.parametrize("flag", _FLAGS)
@pytest.mark.parametrize("value", [True, False, np.bool_(True), np.bool_(False)], ids=repr)
def test_flags_that_are_bools_are_accepted(cls, flag, value):
    m = cls(8, **{flag: value})
    assert ((m.bias is not None) if flag == "bias" else getattr(m, flag)) is bool(value)
    assert str(m).startswith(f"{cls.__name__}(8,")


@pytest.mark.parametrize("fullgraph", [True, False], ids=["fullgraph", "graph_breaks_allowed"])
def test_compile_shows_dyts_message_for_bad_input(fullgraph):
    # Past Dynamo's recompile limit for DyT.forward (every compiled DyT before this one in the process),
    # the call would run eagerly and show the module's message instead.
    torch._dynamo.reset()
    compiled = torch.compile(dyt.DyT(8), fullgraph=fullgraph, backend="eager")
    with pytest.raises(
        Exception, match=r"dyt: gamma must have shape \(7,\) to match x's last dimension"
    ) as info:
        compiled(torch.randn(4, 7))
    # The message is in the exception's first lines, not only in a debug section.
    assert "dyt: gamma must have shape" in "\n".join(str(info.value).splitlines()[:3])


@pytest.mark.parametrize("x_dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_output_has_xs_dtype_under_autocast(x_dtype):
    m = dyt.DyT(16)
    x = torch.randn(4, 16, dtype=x_dtype)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = m(x)
        y_fn = dyt.dyt(x, m.alpha, m.weight, m.bias)
    assert y.dtype == y_fn.dtype == x_dtype


@pytest.mark.parametrize("shape", [(0, 64), (3, 0, 64), (0, 5000)], ids=str)
def test_empty_input(shape, seed):
    inp = make_inputs(shape, torch.bfloat16, seed=seed, param_dtype=torch.float32)
    y, dx, da, dg, db = run(inp)
    assert y.shape == shape and dx.shape == shape
    assert torch.equal(da.cpu(), torch.zeros(1)) and torch.equal(dg.cpu(), torch.zeros(shape[-1]))
    assert torch.equal(db.cpu(), torch.zeros(shape[-1])) and dg.dtype == torch.float32


class _Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.norm1 = dyt.DyT(width)
        self.fc = nn.Linear(width, width)
        self.norm2 = dyt.DyT(width, bias=False)

    def forward(self, x):
        return self.norm2(x + self.fc(self.norm1(x)))


@pytest.mark.parametrize("shapes", [((8, 16, 64), (5, 16, 64), (3, 7, 64))], ids=["three_shapes"])
def test_torch_compile_dynamic_shapes(shapes, seed):
    """torch.compile(dynamic=True) and Dynamo's automatic dynamic shapes (a second shape through the same
    code): forward and backward at each shape as eager's. The backward's plan is per shape, so its sizes
    specialize the compiled graph where they are symbolic (dyt.launcher.backward_plan)."""
    torch.manual_seed(seed)
    model = _Block(64).to(device())
    backend = "inductor" if on_gpu() else "aot_eager"
    for dynamic in (True, None):
        torch._dynamo.reset()
        compiled = torch.compile(model, fullgraph=True, backend=backend, dynamic=dynamic)
        for shape in shapes:
            _assert_compiled_matches_eager(compiled, model, torch.randn(*shape, device=device()),
                                           f"dynamic={dynamic} {shape}")  # fmt: skip


def test_torch_compile_fullgraph_small_model(seed):
    torch.manual_seed(seed)
    model = _Block(64).to(device())
    x = torch.randn(8, 16, 64, device=device())
    backend = "inductor" if on_gpu() else "aot_eager"
    compiled = torch.compile(model, fullgraph=True, backend=backend)
    _assert_compiled_matches_eager(compiled, model, x)


def _assert_compiled_matches_eager(compiled, model, x, label: str = "") -> None:
    """compiled(x)'s output and parameter gradients (of mean(y^2)) against model's own, eagerly."""
    model.zero_grad()
    y_c = compiled(x)
    y_c.square().mean().backward()
    grads_c = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    y_e = model(x)
    y_e.square().mean().backward()
    assert torch.allclose(y_c, y_e, rtol=1e-5, atol=1e-5), label
    for gc, p in zip(grads_c, model.parameters(), strict=True):
        assert torch.allclose(gc, p.grad, rtol=1e-4, atol=1e-6), label


def _aot_graphs(fn, *args):
    """The forward and backward graphs AOTAutograd hands a backend for fn(*args) (decompositions as
    Inductor's lowering sees them), after one compiled forward and backward."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    graphs = {}

    def keep(name):
        def compiler(gm, example_inputs):
            graphs[name] = gm
            return make_boxed_func(gm.forward)

        return compiler

    torch._dynamo.reset()
    backend = aot_autograd(fw_compiler=keep("forward"), bw_compiler=keep("backward"))
    out = torch.compile(fn, fullgraph=True, backend=backend)(*args)
    out.float().square().sum().backward()
    return graphs


def _targets(gm) -> list[str]:
    return [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]


def test_compiled_forward_is_the_plain_expression_and_the_backward_dyts_kernels(seed):
    """Under torch.compile AOTAutograd sees the forward as aten ops (Inductor fuses them with the ops
    around), and the backward as dyt's kernels: the triton op's two kernel launches on the GPU, the
    backward op where the kernels run in the interpreter, torch_path's ops on plain CPU."""
    inp = make_inputs((64, 96), torch.bfloat16, seed=seed, param_dtype=torch.float32)
    graphs = _aot_graphs(lambda x, a, g, b: dyt.dyt(x, a, g, b) * 2, inp.x, inp.alpha, inp.gamma, inp.beta)
    forward, backward = _targets(graphs["forward"]), _targets(graphs["backward"])
    assert not any("dyt" in t for t in forward), forward
    assert "aten.tanh.default" in forward, forward
    if on_gpu():
        from torch._higher_order_ops.triton_kernel_wrap import kernel_side_table

        nodes = [n for n in graphs["backward"].graph.nodes if "triton_kernel_wrapper" in str(n.target)]
        launched = [kernel_side_table.get_kernel(n.kwargs["kernel_idx"]).fn.__name__ for n in nodes]
        assert launched == ["dyt_bwd_kernel", "dyt_bwd_finish_kernel"], backward
    elif os.environ.get("TRITON_INTERPRET") == "1":
        assert "dyt.backward.default" in backward, backward
    else:
        assert not any("dyt" in t for t in backward) and "aten.sum.dim_IntList" in backward, backward


def test_importing_dyt_and_eager_calls_leave_inductor_unimported():
    """Registering the backward's triton op imports Inductor (most of a second): it waits for the first
    torch.ops.dyt.forward, which eager calls and `import dyt` never make."""
    code = (
        "import sys, torch, dyt\n"
        "x = torch.randn(4, 8, requires_grad=True)\n"
        "dyt.DyT(8)(x).sum().backward()\n"
        "print('torch._inductor' in sys.modules)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(pathlib.Path(__file__).parents[1])}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_custom_ops_are_registered_with_fake_kernels():
    import dyt.ops  # noqa: F401  (importing the ops module registers torch.ops.dyt.forward)

    x = torch.empty(4, 7, 96, device="meta", dtype=torch.bfloat16)
    a, g = torch.empty(1, device="meta"), torch.empty(96, device="meta")
    assert torch.ops.dyt.forward(x, a, g, None).shape == x.shape  # its first call registers the backward
    dx, da, dg, db = torch.ops.dyt.backward(x, x, a, g, None)
    assert (dx.dtype, da.dtype, dg.shape) == (torch.bfloat16, torch.float32, (96,))


@pytest.mark.gpu_only
def test_cuda_graph_capture_and_replay(seed):
    inp = make_inputs((4096, 256), torch.bfloat16, seed=seed, param_dtype=torch.float32)
    static_x = inp.x.detach().clone().requires_grad_()
    params = [inp.alpha, inp.gamma, inp.beta]
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):  # warm up: compile the kernels outside the capture
            dyt.dyt(static_x, *params).backward(inp.dy)
    torch.cuda.current_stream().wait_stream(stream)
    for t in [static_x, *params]:
        t.grad = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_y = dyt.dyt(static_x, *params)
        static_y.backward(inp.dy)
    for trial in range(2):
        fresh = make_inputs((4096, 256), torch.bfloat16, seed=seed + 1 + trial, param_dtype=torch.float32)
        with torch.no_grad():
            static_x.copy_(fresh.x)
            for t in [static_x, *params]:
                t.grad.zero_() if t.grad is not None else None
        graph.replay()
        torch.cuda.synchronize()
        fresh.alpha, fresh.gamma, fresh.beta, fresh.dy = inp.alpha, inp.gamma, inp.beta, inp.dy
        outs = (static_y.detach(), static_x.grad, inp.alpha.grad, inp.gamma.grad, inp.beta.grad)
        check_against_reference(fresh, outs)


def test_tensors_on_a_gpu_that_is_not_the_current_one(seed):
    """Triton launches on the current device; dyt makes the tensors' GPU current for its launches. Checked
    in a child process that sees every GPU of the run (the GPU matrix pins one GPU per worker)."""
    gpus = [g for g in os.environ.get("DYT_GPUS", "").split(",") if g]
    if len(gpus) < 2 and not (torch.cuda.is_available() and torch.cuda.device_count() >= 2):
        pytest.skip("needs two GPUs: tensors on cuda:1 while cuda:0 is current")
    env = dict(os.environ)
    if len(gpus) >= 2:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
    tests = pathlib.Path(__file__).parent
    env["PYTHONPATH"] = os.pathsep.join([str(tests.parent), str(tests), env.get("PYTHONPATH", "")])
    code = textwrap.dedent(f"""
        import torch
        from helpers import check_against_reference, make_inputs, run
        assert torch.cuda.device_count() >= 2
        with torch.cuda.device(0):
            inp = make_inputs((300, 256), torch.bfloat16, seed={seed}, device=torch.device("cuda:1"))
            check_against_reference(inp, run(inp))
        print("checked on cuda:1 with cuda:0 current")
    """)  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0 and "checked on cuda:1" in out.stdout, out.stdout[-2000:] + out.stderr[-3000:]


def test_the_default_conversion_packs_and_alpha_gets_a_group_of_its_own_unpacked(seed):
    """convert_layernorm makes PackedDyT by default (one parameter a norm); with packed=False the DyT
    modules' alphas take an optimizer group of their own (dyt.alpha_parameters), which a packed model
    refuses by name."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(8, 8), nn.LayerNorm(8), nn.Sequential(nn.Linear(8, 8), nn.LayerNorm(8)))
    packed = dyt.convert_layernorm(copy.deepcopy(model))
    assert [type(m).__name__ for m in (packed[1], packed[2][1])] == ["PackedDyT", "PackedDyT"]
    with pytest.raises(ValueError, match=r"alpha_parameters: 1 is a PackedDyT.*packed=False"):
        dyt.alpha_parameters(packed)
    plain = dyt.convert_layernorm(copy.deepcopy(model), packed=False)
    alphas = dyt.alpha_parameters(plain)
    assert alphas == [plain[1].alpha, plain[2][1].alpha]
    rest = [p for p in plain.parameters() if all(p is not a for a in alphas)]
    assert len(rest) + len(alphas) == len(list(plain.parameters()))
    opt = torch.optim.SGD([{"params": rest, "lr": 0.0}, {"params": alphas, "lr": 0.5}])
    before = [p.detach().clone() for p in plain.parameters()]
    plain(torch.randn(4, 8)).square().sum().backward()
    opt.step()
    for p, old in zip(plain.parameters(), before, strict=True):
        moved = not torch.equal(p.detach(), old)
        assert moved == any(p is a for a in alphas), "only the alpha group moves (its lr; the rest at 0)"
