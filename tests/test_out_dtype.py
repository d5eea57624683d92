"""dtype_contract for y in another dtype than x's: dyt's out_dtype, and DyT's autocast_output.

y in out_dtype is the float32 result rounded once: the same bits as the float32 output cast to it, on
every entry (dyt, dyt_channels_first, dyt_packed), every tiling path and the channels-first layout; its
gradient arrives in out_dtype and dx keeps x's dtype. Where that gradient converts to x's dtype exactly
(float32 x), dx is the same bits as the default call's fed that conversion (what autocast's cast in front
of a linear layer hands the norm), and the parameter gradients meet the reference as the default call's
do: they sum the same terms, in an order that the compiled kernel's layout sets, and a 16-bit gradient's
loads are laid out otherwise. DyT(autocast_output=True) under autocast: a pre-norm model's output, input
gradient and linear layers' gradients the same bits as with the default module, and no cast node between
the norm and the linear layer.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import dyt
from dyt.conformance.tolerances import assert_close

from helpers import DTYPES, Inputs, check_against_reference, device, on_gpu, run
from paths import PATHS, assert_path, path_context

pytestmark = pytest.mark.dtype_contract

# (layout, tiling path): rows on every path; channels-first (N, C, H, W) with an odd spatial size
CASES = [*(("rows", p) for p in sorted(PATHS)), ("channels_first", "row_tiled")]
CASE_IDS = [f"{layout}-{path}" for layout, path in CASES]


def _entry(layout: str, out_dtype):
    def call(x, alpha, gamma, beta):
        if layout == "channels_first":
            return dyt.dyt_channels_first(x, alpha, gamma, beta, out_dtype=out_dtype)
        return dyt.dyt(x, alpha, gamma, beta, out_dtype=out_dtype)

    return call


def _check(layout: str, inp: Inputs, outs, label: str) -> None:
    """check_against_reference, channels-first x, dy, y and dx moved to channels-last (the reference's
    layout)."""
    if layout == "channels_first":
        moved = Inputs(inp.x.movedim(1, -1), inp.alpha, inp.gamma, inp.beta, inp.dy.movedim(1, -1))
        inp, outs = moved, (outs[0].movedim(1, -1), outs[1].movedim(1, -1), *outs[2:])
    check_against_reference(inp, outs, label)


def _inputs(layout: str, path: str, dtype, seed: int, dy_dtype=None) -> Inputs:
    """The suites' random inputs (float32 parameters), the leaves requiring grad; channels-first x and dy
    drawn channels-last and moved to (N, C, H, W) contiguous. dy in dy_dtype where given."""
    shape = (4, 3, 7, 8) if layout == "channels_first" else (29, PATHS[path][0])
    drawn = dyt.reference.random_inputs(shape, dtype, seed=seed, param_dtype=torch.float32, device=device())
    if layout == "channels_first":
        drawn["x"], drawn["dy"] = (drawn[k].movedim(-1, 1).contiguous() for k in ("x", "dy"))
    leaves = {k: drawn[k].requires_grad_() for k in ("x", "alpha", "gamma", "beta")}
    dy = drawn["dy"] if dy_dtype is None else drawn["dy"].to(dy_dtype)
    return Inputs(**leaves, dy=dy)


@pytest.mark.parametrize("out", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("x_dtype", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize(("layout", "path"), CASES, ids=CASE_IDS)
def test_y_is_the_float32_result_rounded_once(layout, path, x_dtype, out, seed):
    """y in out_dtype has the bits of y in float32 cast to it, and y in float32 matches the reference
    under float32's rule whatever x's dtype."""
    inp = _inputs(layout, path, DTYPES[x_dtype], seed)
    if layout == "rows":
        assert_path(path, inp.x.shape, inp.x.dtype)
    args = (inp.x.detach(), inp.alpha.detach(), inp.gamma.detach(), inp.beta.detach())
    with path_context(path):
        y = _entry(layout, DTYPES[out])(*args)
        y32 = _entry(layout, torch.float32)(*args)
    assert y.dtype == DTYPES[out] and y.shape == inp.x.shape
    assert torch.equal(y, y32.to(DTYPES[out])), f"{layout}/{path}: y is not float32's y rounded once"
    moved = inp.x.movedim(1, -1) if layout == "channels_first" else inp.x
    ref = dyt.reference.dyt_forward_reference(moved, inp.alpha, inp.gamma, inp.beta)
    ref = ref.movedim(-1, 1) if layout == "channels_first" else ref
    assert (y32.double() - ref).norm() <= 1e-6 * ref.norm(), "float32 y off the float64 reference"


@pytest.mark.parametrize("out", ["bf16", "fp16"])
@pytest.mark.parametrize(("layout", "path"), CASES, ids=CASE_IDS)
def test_gradients_equal_the_default_calls_fed_the_upcast_gradient(layout, path, out, seed):
    """float32 x, y in a 16-bit dtype: dx (float32) is the same bits as the default call's when its
    gradient is the 16-bit one converted to float32 (exact), and every gradient of both meets the
    reference."""
    inp = _inputs(layout, path, torch.float32, seed, dy_dtype=DTYPES[out])
    with path_context(path):
        narrow = run(inp, _entry(layout, DTYPES[out]))
        upcast = inp.dy
        inp.dy = upcast.float()
        default = run(inp, _entry(layout, None))
    assert narrow[0].dtype == DTYPES[out] and narrow[1].dtype == torch.float32
    assert torch.equal(narrow[1], default[1]), f"{layout}/{path}: dx differs from the default call's"
    assert all(a.dtype == b.dtype for a, b in zip(narrow[2:], default[2:], strict=True))
    _check(layout, inp, default, f"{layout}/{path} default: ")
    _check(layout, inp, (default[0], *narrow[1:]), f"{layout}/{path} out_dtype: ")


@pytest.mark.parametrize("x_dtype", ["bf16", "fp16"])
def test_16bit_x_with_float32_y_and_gradient(x_dtype, seed):
    """16-bit x, float32 y: the float32 gradient reaches the kernels as it is (no rounding through x's
    dtype) and every gradient matches the float64 reference; dx in x's dtype."""
    inp = _inputs("rows", "row_tiled", DTYPES[x_dtype], seed, dy_dtype=torch.float32)
    outs = run(inp, _entry("rows", torch.float32))
    assert outs[0].dtype == torch.float32 and outs[1].dtype == DTYPES[x_dtype]
    check_against_reference(inp, (outs[0].to(DTYPES[x_dtype]), *outs[1:]))


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("channels_first", [False, True])
def test_packed_call_equals_the_unpacked_one(channels_first, bias, seed):
    layout = "channels_first" if channels_first else "rows"
    inp = _inputs(layout, "row_tiled", torch.float32, seed, dy_dtype=torch.bfloat16)
    beta = inp.beta if bias else None
    params = torch.cat([inp.gamma.detach(), *([beta.detach()] if bias else []), inp.alpha.detach()])
    params.requires_grad_()
    y = dyt.dyt_packed(inp.x, params, bias=bias, channels_first=channels_first, out_dtype=torch.bfloat16)
    y.backward(inp.dy)
    dx_packed = inp.x.grad
    inp.x.grad = None
    y_ref = _entry(layout, torch.bfloat16)(inp.x, inp.alpha, inp.gamma, beta)
    y_ref.backward(inp.dy)
    joined = torch.cat([inp.gamma.grad, *([beta.grad] if bias else []), inp.alpha.grad])
    assert y.dtype == torch.bfloat16 and torch.equal(y, y_ref)
    assert torch.equal(dx_packed, inp.x.grad) and torch.equal(params.grad, joined)


@pytest.mark.parametrize(
    "call",
    [
        lambda x, a, g, b, o: dyt.dyt(x, a, g, b, out_dtype=o),
        lambda x, a, g, b, o: dyt.dyt_channels_first(x.reshape(2, -1, 1), a, g, b, out_dtype=o),
        lambda x, a, g, b, o: dyt.dyt_packed(x, torch.cat([g, b, a]), out_dtype=o),
    ],
    ids=["dyt", "dyt_channels_first", "dyt_packed"],
)
@pytest.mark.parametrize("bad", [torch.float64, torch.int32, "bfloat16"], ids=str)
def test_bad_out_dtype_raises_type_error(call, bad):
    x = torch.randn(2, 16, device=device())
    a, g, b = (torch.full((1,), 0.5, device=device()), torch.ones(16, device=device()),
               torch.zeros(16, device=device()))  # fmt: skip
    with pytest.raises(TypeError, match=r"dyt: out_dtype must be torch.float32, torch.bfloat16, "):
        call(x, a, g, b, bad)


def test_forward_mode_tangent_in_out_dtype(seed):
    """Under forward-mode AD (dyt.ops._ComposableDyT) the primal and the tangent have out_dtype and are
    that path's float32 primal and tangent rounded once; its float32 primal meets the float64 reference.

    The bits are compared within the path: torch's tanh and the kernels' may differ by an ulp of float32,
    which moves a bf16 rounding now and then."""
    import torch.autograd.forward_ad as fwAD

    inp = _inputs("rows", "row_tiled", torch.float32, seed)
    x, a, g, b = (t.detach() for t in (inp.x, inp.alpha, inp.gamma, inp.beta))
    with fwAD.dual_level():
        y = dyt.dyt(fwAD.make_dual(x, inp.dy.float()), a, g, b, out_dtype=torch.bfloat16)
        primal, tangent = fwAD.unpack_dual(y)
        y32 = dyt.dyt(fwAD.make_dual(x, inp.dy.float()), a, g, b)
        primal32, tangent32 = fwAD.unpack_dual(y32)
    assert primal.dtype == tangent.dtype == torch.bfloat16 and primal32.dtype == torch.float32
    assert torch.equal(primal, primal32.to(torch.bfloat16)), "primal is not float32's primal rounded once"
    assert torch.equal(tangent, tangent32.to(torch.bfloat16)), "tangent is not float32's tangent rounded once"
    ref = dyt.reference.dyt_forward_reference(x, a, g, b)
    assert (primal32.double() - ref).norm() <= 1e-6 * ref.norm(), "float32 primal off the float64 reference"


# ---- DyT(autocast_output=True) -----------------------------------------------------------------------


class _PreNorm(nn.Module):
    """A pre-norm block: the norm feeds only a linear layer, whose output joins the residual."""

    def __init__(self, norm: nn.Module, C: int):
        super().__init__()
        self.norm, self.proj = norm, nn.Linear(C, C)

    def forward(self, x):
        return x + self.proj(self.norm(x))


def _blocks(make, C=64, seed=0):
    torch.manual_seed(seed)
    model = nn.Sequential(_PreNorm(make(C), C), _PreNorm(make(C), C)).to(device())
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, dyt.DyT):
                m.alpha.fill_(0.7)
                m.weight.normal_()
                m.bias.normal_()
    return model


def _same_gradients(model, grads, others) -> None:
    """The linear layers' gradients bit for bit; the norms' (sums of the same float32 terms in another
    order) within float32's relative L2 rule for parameter gradients of each other."""
    names = [n for n, _ in model.named_parameters()]
    for name, a, b in zip(names, grads, others, strict=True):
        if ".proj." in name:
            assert torch.equal(a, b), f"{name} differs"
        else:
            assert_close(name, a, b.double(), kind="param", storage=a.dtype)


@pytest.mark.module
@pytest.mark.parametrize("packed", [False, True], ids=["DyT", "PackedDyT"])
def test_autocast_output_is_bitwise_the_default_in_a_prenorm_block(packed, seed):
    """Under bf16 autocast, a pre-norm model with autocast_output=True gives the default module's output,
    input gradient and linear layers' gradients bit for bit, and its norms' parameter gradients to
    float32's rule for sums (module docstring); its norms return bf16 (float32 outside autocast), and the
    linear layer's input gradient flows into the norm's node with no cast node between."""
    cls = dyt.PackedDyT if packed else dyt.DyT
    default = _blocks(lambda C: cls(C), seed=seed)
    cast = _blocks(lambda C: cls(C, autocast_output=True), seed=seed)
    cast.load_state_dict(default.state_dict())
    x = torch.randn(6, 9, 64, device=device())
    results = []
    for model in (default, cast):
        xi = x.clone().requires_grad_()
        with torch.autocast(device().type, dtype=torch.bfloat16):
            out = model(xi)
            normed = model[0].norm(xi)
        out.float().square().sum().backward()
        results.append((out, xi.grad, [p.grad for p in model.parameters()], normed))
    (o1, dx1, g1, n1), (o2, dx2, g2, n2) = results
    assert n1.dtype == torch.float32 and n2.dtype == torch.bfloat16
    assert torch.equal(o1, o2) and torch.equal(dx1, dx2)
    _same_gradients(default, g1, g2)
    assert cast[0].norm(x).dtype == torch.float32, "outside autocast y keeps x's dtype"
    with torch.autocast(device().type, dtype=torch.bfloat16):
        y = cast[0].proj(cast[0].norm(x.clone().requires_grad_()))
    feeds = [type(f).__name__ for f, _ in y.grad_fn.next_functions if f is not None]
    assert not any("ToCopy" in name for name in feeds), f"a cast node feeds the linear layer: {feeds}"


@pytest.mark.module
def test_convert_layernorm_sets_autocast_output():
    model = nn.Sequential(nn.LayerNorm(16), nn.Linear(16, 16), nn.LayerNorm(16))
    converted = dyt.convert_layernorm(model, autocast_output=True)
    norms = [m for m in converted.modules() if isinstance(m, dyt.DyT)]
    assert len(norms) == 2 and all(m.autocast_output for m in norms)
    assert "autocast_output=True" in repr(norms[0])
    packed = dyt.convert_layernorm(nn.Sequential(nn.LayerNorm(16)), autocast_output=True)
    assert isinstance(packed[0], dyt.PackedDyT) and packed[0].autocast_output
    unpacked = dyt.convert_layernorm(nn.Sequential(nn.LayerNorm(16)), packed=False, autocast_output=True)
    assert type(unpacked[0]) is dyt.DyT and unpacked[0].autocast_output
    plain = dyt.convert_layernorm(nn.Sequential(nn.LayerNorm(16)))
    assert not plain[0].autocast_output and "autocast_output" not in repr(plain[0])


@pytest.mark.module
def test_autocast_output_under_torch_compile(seed):
    """torch.compile(fullgraph=True) traces autocast_output's check: under bf16 autocast the compiled
    pre-norm model gives the compiled default model's output and gradients as the eager test does (the
    norm's gradient reaches dyt's backward in bf16 instead of through the cast's float32 copy)."""
    backend = "inductor" if on_gpu() else "aot_eager"
    results = []
    for kwargs in ({}, {"autocast_output": True}):
        model = _blocks(lambda C, kw=kwargs: dyt.DyT(C, **kw), seed=seed)
        compiled = torch.compile(model, fullgraph=True, backend=backend)
        x = torch.randn(4, 64, device=device(), generator=torch.Generator(device()).manual_seed(seed))
        with torch.autocast(device().type, dtype=torch.bfloat16):
            out = compiled(x)
        out.float().square().sum().backward()
        results.append((out.detach(), [p.grad for p in model.parameters()]))
    (o_default, g_default), (o_cast, g_cast) = results
    assert o_cast.dtype == o_default.dtype and torch.equal(o_cast, o_default)
    _same_gradients(model, g_default, g_cast)
