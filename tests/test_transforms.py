"""reference_equivalence through torch.func's transforms and forward-mode AD: forward-mode tangents
(torch.autograd.forward_ad and torch.func.jvp), per-sample gradients (vmap of grad), batched parameters
(model ensembles through the modules), and second derivatives agree with the float64 reference through
dyt.dyt, dyt.dyt_channels_first, DyT and PackedDyT, on whatever path the call would otherwise take. Such
calls run dyt.ops._ComposableDyT: a kernel launch can neither be batched nor carry a tangent. With
torch.compile, the transform inside the compiled region (Dynamo traces dyt as the plain expression there)
or applied over it (Dynamo runs those frames eagerly)."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.autograd.forward_ad as fwAD
from torch.func import functional_call, grad, hessian, jvp, stack_module_state, vmap

import dyt
from dyt import reference
from dyt.conformance.tolerances import EVAL_ULPS, REL_L2, assert_close

from helpers import DTYPES, device, on_gpu

pytestmark = pytest.mark.reference_equivalence

# (shape, C): rows over the last dimension; channels-first over dim 1 with an odd spatial size
LAYOUTS = {"rows": ((6, 5, 32), 32), "channels_first": ((3, 8, 5, 7), 8)}
ENTRIES = {"rows": dyt.dyt, "channels_first": dyt.dyt_channels_first}


def _draw(layout: str, dtype: torch.dtype, seed: int, beta: bool, batch: tuple = ()):
    """[x, alpha, gamma, beta] (beta None without it) and a weight w of x's shape: the suites' random
    inputs (float32 parameters), x of `batch + shape`, laid out channels-first for that layout."""
    shape, C = LAYOUTS[layout]
    moved = (*batch, *shape[:1], *shape[2:], C) if layout == "channels_first" else (*batch, *shape)
    drawn = reference.random_inputs(moved, dtype, seed=seed, param_dtype=torch.float32, beta=beta,
                                    device=device())  # fmt: skip
    x, w = drawn["x"], drawn["dy"]
    if layout == "channels_first":
        x, w = (t.movedim(-1, len(batch) + 1).contiguous() for t in (x, w))
    return [x, drawn["alpha"], drawn["gamma"], drawn["beta"]], w


def _paper(layout: str):
    """The paper's expression over the layout's channel dimension, in the inputs' own dtype (float64 for
    the reference)."""

    def fn(x, alpha, gamma, beta=None):
        view = (-1, *([1] * (x.dim() - 2))) if layout == "channels_first" else (-1,)
        y = gamma.reshape(view) * torch.tanh(alpha.reshape(()) * x)
        return y if beta is None else y + beta.reshape(view)

    return fn


def _as64(ts):
    return [None if t is None else t.detach().double() for t in ts]


def _y_scale(layout: str, x, alpha, gamma, beta):
    """|gamma tanh(alpha x)| + |beta| per element, in float64 (y's largest float32 terms: the 16-bit
    rule's scale)."""
    x64, a64, g64, b64 = _as64([x, alpha, gamma, beta])
    scale = _paper(layout)(x64, a64, g64).abs()
    return scale if b64 is None else scale + _paper(layout)(torch.zeros_like(x64), a64, g64, b64).abs()


def _tangent_scale(layout: str, tangents, x, alpha, gamma):
    """The sum of the magnitudes of the tangent's terms per element, in float64 (the tolerance's scale)."""
    view = (-1, *([1] * (x.dim() - 2))) if layout == "channels_first" else (-1,)
    x_t, alpha_t, gamma_t, beta_t = _as64(tangents)
    x64, a64, g64 = _as64([x, alpha, gamma])
    z = a64.reshape(()) * x64
    slope = (g64.reshape(view) * reference.sech2_reference(z)).abs()
    scale = torch.zeros_like(x64)
    if x_t is not None:
        scale += slope * (a64.reshape(()) * x_t).abs()
    if alpha_t is not None:
        scale += slope * (alpha_t.reshape(()) * x64).abs()
    if gamma_t is not None:
        scale += (gamma_t.reshape(view) * torch.tanh(z)).abs()
    if beta_t is not None:
        scale += beta_t.reshape(view).abs()
    return scale


def _jvp_along(fn, primals, tangents):
    """torch.func.jvp of fn(*primals) along the tangents given (None: that input held fixed)."""
    moving = [i for i, t in enumerate(tangents) if t is not None]

    def along(*values):
        args = list(primals)
        for i, v in zip(moving, values, strict=True):
            args[i] = v
        return fn(*args)

    return jvp(along, tuple(primals[i] for i in moving), tuple(tangents[i] for i in moving))


def _rel_l2(got: torch.Tensor, ref: torch.Tensor) -> float:
    ref = ref.detach()
    return float(torch.linalg.vector_norm(got.detach().double() - ref) / torch.linalg.vector_norm(ref))


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("which", ["x", "all"], ids=["tangent_on_x", "tangents_on_all"])
@pytest.mark.parametrize("api", ["forward_ad", "func.jvp", "forward_ad_no_grad"])
@pytest.mark.parametrize("beta", [True, False], ids=["beta", "nobeta"])
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_forward_mode_tangents_match_the_float64_reference(layout, beta, api, which, dtype, seed):
    """y and its forward-mode derivative along random tangents (of x alone, or of every input), in x's
    dtype and shape, both to the suites' output rule (the 16-bit rule's scale for the tangent: the sum of
    its terms' magnitudes). A dual level with no grad mode is tested as well: forward-mode AD does not
    depend on it, and no tangent is dropped there either."""
    primals, _ = _draw(layout, DTYPES[dtype], seed, beta)
    gen = torch.Generator(device=device()).manual_seed(seed + 1)
    tangents = [
        None
        if p is None or (which == "x" and i > 0)
        else torch.randn(p.shape, generator=gen, device=device())
        for i, p in enumerate(primals)
    ]
    tangents = [None if t is None else t.to(p.dtype) for p, t in zip(primals, tangents, strict=True)]
    entry = ENTRIES[layout]
    if api == "func.jvp":
        y, y_t = _jvp_along(entry, primals, tangents)
    else:
        with fwAD.dual_level(), torch.no_grad() if api == "forward_ad_no_grad" else torch.enable_grad():
            duals = [p if t is None else fwAD.make_dual(p, t) for p, t in zip(primals, tangents, strict=True)]
            y, y_t = fwAD.unpack_dual(entry(*duals))
    assert y_t is not None, "the tangent was dropped"
    y64, y_t64 = _jvp_along(_paper(layout), _as64(primals), _as64(tangents))
    x, alpha, gamma, b = primals
    assert_close("y", y, y64, kind="out", storage=x.dtype, scale=_y_scale(layout, x, alpha, gamma, b))
    assert_close("tangent", y_t, y_t64, kind="out", storage=x.dtype,
                 scale=_tangent_scale(layout, tangents, x, alpha, gamma))  # fmt: skip


@pytest.mark.parametrize("beta", [True, False], ids=["beta", "nobeta"])
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_per_sample_gradients_match_the_float64_reference(layout, beta, seed):
    """vmap of grad (per-sample gradients, as in differential privacy): each sample's dx and parameter
    gradients against float64, dx to the output rule, the parameters' to the parameter rule with each
    sample's own evaluation scales; dx in x's dtype, the parameters' gradients in theirs."""
    batch = 4
    (x, alpha, gamma, b), w = _draw(layout, torch.float32, seed, beta, batch=(batch,))
    entry, paper = ENTRIES[layout], _paper(layout)
    argnums = (0, 1, 2) if b is None else (0, 1, 2, 3)

    def loss(fn):
        return lambda x, alpha, gamma, b, w: (fn(x, alpha, gamma, b) * w).sum()

    in_dims = (0, None, None, None, 0)
    got = vmap(grad(loss(entry), argnums=argnums), in_dims=in_dims)(x, alpha, gamma, b, w)
    ref = vmap(grad(loss(paper), argnums=argnums), in_dims=in_dims)(*_as64([x, alpha, gamma, b, w]))
    _assert_per_sample_grads(layout, got, ref, x, w, alpha, gamma, b)


def _assert_per_sample_grads(layout: str, got, ref, x, w, alpha, gamma, b,
                             names=("dx", "dalpha", "dgamma", "dbeta")) -> None:  # fmt: skip
    """Per-sample gradients (names: dx, dalpha, dgamma, dbeta, in got's order) against float64: dx to the
    output rule, the parameters' to the parameter rule with each sample's own evaluation scales; dx in x's
    dtype, the parameters' gradients in theirs, each of the reference's shape."""
    assert len(got) == len(ref)
    for i in range(x.shape[0]):
        xi, wi = x[i], w[i]
        if layout == "channels_first":
            xi, wi = xi.movedim(1, -1), wi.movedim(1, -1)  # the scales are over the last dimension
        scales = reference.evaluation_scales(wi, xi, alpha, gamma, b)
        for name, g, r in zip(names, got, ref, strict=False):
            assert g.dtype == (x if name == "dx" else alpha).dtype and g.shape == r.shape, name
            if name == "dx":
                assert_close(f"sample {i} dx", g[i], r[i], kind="out", storage=torch.float32)
            else:
                scale, rss = scales[name]
                assert_close(f"sample {i} {name}", g[i], r[i], kind="param", storage=torch.float32,
                             scale=scale, rss=rss)  # fmt: skip


def _module_with(module: str, layout: str, alpha, gamma, b) -> torch.nn.Module:
    """dyt.DyT or dyt.PackedDyT for the layout, on the device, holding these parameters (loaded through
    DyT's state dict, which both take)."""
    C = LAYOUTS[layout][1]
    model = getattr(dyt, module)(C, channels_last=layout == "rows").to(device())
    with torch.no_grad():
        reference_module = dyt.DyT(C, channels_last=layout == "rows").to(device())
        reference_module.alpha.copy_(alpha)
        reference_module.weight.copy_(gamma)
        reference_module.bias.copy_(b)
        model.load_state_dict(reference_module.state_dict())
    return model


@pytest.mark.parametrize("module", ["DyT", "PackedDyT"])
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_vmap_over_an_ensemble_of_modules(layout, module, seed):
    """An ensemble of modules batched by torch.func.stack_module_state and functional_call: each member's
    y through vmap equals, to the suites' rule, the float64 expression of its own parameters, and the
    ensemble's parameter gradients (grad of the summed outputs, batched) are each member's own."""
    shape, C = LAYOUTS[layout]
    members = 3
    models = []
    for i in range(members):
        (_, alpha, gamma, b), _ = _draw(layout, torch.float32, seed + i, True)
        models.append(_module_with(module, layout, alpha, gamma, b))
    params, buffers = stack_module_state(models)
    base = copy.deepcopy(models[0]).to("meta")
    (x, *_), w = _draw(layout, torch.float32, seed + members, False)

    def member(p, bufs, x):
        return functional_call(base, (p, bufs), (x,))

    ys = vmap(member, in_dims=(0, 0, None))(params, buffers, x)
    grads = vmap(grad(lambda p, bufs, x: (member(p, bufs, x) * w).sum()), in_dims=(0, 0, None))(
        params, buffers, x
    )
    paper = _paper(layout)
    for i, model in enumerate(models):
        state = model.state_dict()
        alpha64, gamma64, beta64 = _as64([state["alpha"], state["weight"], state["bias"]])
        y64 = paper(x.double(), alpha64, gamma64, beta64)
        assert_close(f"member {i} y", ys[i], y64, kind="out", storage=torch.float32,
                     scale=_y_scale(layout, x, alpha64, gamma64, beta64))  # fmt: skip
        leaves = [t.requires_grad_() for t in (alpha64, gamma64, beta64)]
        ref = torch.autograd.grad((paper(x.double(), *leaves) * w.double()).sum(), leaves)
        moved_x, moved_w = (t.movedim(1, -1) if layout == "channels_first" else t for t in (x, w))
        scales = reference.evaluation_scales(moved_w, moved_x, *(t.detach() for t in leaves))
        if module == "PackedDyT":  # one gradient, laid out as params is
            got = dict(zip(("dalpha", "dgamma", "dbeta"), dyt.ops.split_params(grads["params"][i], True),
                           strict=True))  # fmt: skip
        else:
            got = {"dalpha": grads["alpha"][i], "dgamma": grads["weight"][i], "dbeta": grads["bias"][i]}
        for name, r in zip(("dalpha", "dgamma", "dbeta"), ref, strict=True):
            scale, rss = scales[name]
            assert_close(f"member {i} {name}", got[name], r, kind="param", storage=torch.float32, scale=scale,
                         rss=rss)  # fmt: skip


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_second_derivatives_through_transforms(layout, seed):
    """torch.func.hessian of a weighted sum over (alpha, gamma) (forward over reverse: jvp through the
    backward dyt gives) against float64, at the parameter rule plus EVAL_ULPS times the error of the
    paper's expression evaluated the same way in float32 (where a second derivative cancels, float32
    arithmetic itself cannot deliver 1e-5)."""
    (x, alpha, gamma, b), w = _draw(layout, torch.float32, seed, True)
    entry, paper = ENTRIES[layout], _paper(layout)

    def loss(fn):
        return lambda alpha, gamma, x, b, w: (fn(x, alpha, gamma, b) * w).sum()

    got = hessian(loss(entry), argnums=(0, 1))(alpha, gamma, x, b, w)
    ref = hessian(loss(paper), argnums=(0, 1))(*_as64([alpha, gamma, x, b, w]))
    in_float32 = hessian(loss(paper), argnums=(0, 1))(alpha, gamma, x, b, w)
    for i, row in enumerate(("alpha", "gamma")):
        for j, col in enumerate(("alpha", "gamma")):
            g, r = got[i][j], ref[i][j]
            assert g.dtype == torch.float32 and g.shape == r.shape, (row, col)
            if not r.any():  # d2/dgamma2 of a function linear in gamma
                assert not g.any(), (row, col)
                continue
            limit = REL_L2["param"] + EVAL_ULPS * _rel_l2(in_float32[i][j], r)
            err = _rel_l2(g, r)
            assert err <= limit, f"d2/d{row} d{col}: relative L2 error {err:.2e} > {limit:.2e}"


def _compiled(fn, where: str):
    """fn under torch.compile with a transform inside (where="inside": fullgraph, so Dynamo traces the
    transform and dyt under it) or a transform applied over the compiled fn ("over": Dynamo then runs the
    transformed frames eagerly)."""
    torch._dynamo.reset()
    backend = "inductor" if on_gpu() else "aot_eager"
    return (
        (lambda make: torch.compile(make(fn), backend=backend, fullgraph=True))
        if where == "inside"
        else (lambda make: make(torch.compile(fn, backend=backend)))
    )


@pytest.mark.parametrize("where", ["inside", "over"])
@pytest.mark.parametrize("api", ["vmap_of_grad", "jvp"])
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_transforms_and_torch_compile(layout, api, where, seed):
    """torch.func transforms with torch.compile, the transform inside the compiled region or applied over
    it: per-sample gradients (vmap of grad) and a jvp along tangents of every input, to the float64
    reference by the rules the uncompiled transforms above are held to (a tangent traced as zero fails)."""
    entry, paper = ENTRIES[layout], _paper(layout)
    if api == "jvp":
        primals, _ = _draw(layout, torch.float32, seed, True)
        gen = torch.Generator(device=device()).manual_seed(seed + 1)
        tangents = tuple(torch.randn(p.shape, generator=gen, device=device()) for p in primals)
        y, y_t = _compiled(entry, where)(lambda f: lambda *p: jvp(f, p, tangents))(*primals)
        y64, y_t64 = jvp(paper, tuple(_as64(primals)), tuple(_as64(tangents)))
        x, alpha, gamma, b = primals
        assert_close("y", y, y64, kind="out", storage=x.dtype, scale=_y_scale(layout, x, alpha, gamma, b))
        assert_close("tangent", y_t, y_t64, kind="out", storage=x.dtype,
                     scale=_tangent_scale(layout, tangents, x, alpha, gamma))  # fmt: skip
        return
    batch = 3
    (x, alpha, gamma, b), w = _draw(layout, torch.float32, seed, True, batch=(batch,))

    def loss(fn):
        return lambda x, alpha, gamma, b, w: (fn(x, alpha, gamma, b) * w).sum()

    argnums, in_dims = (0, 1, 2, 3), (0, None, None, None, 0)
    per_sample = _compiled(loss(entry), where)(lambda f: vmap(grad(f, argnums=argnums), in_dims=in_dims))
    got = per_sample(x, alpha, gamma, b, w)
    ref = vmap(grad(loss(paper), argnums=argnums), in_dims=in_dims)(*_as64([x, alpha, gamma, b, w]))
    _assert_per_sample_grads(layout, got, ref, x, w, alpha, gamma, b)


@pytest.mark.parametrize("api", ["vmap_of_grad", "jvp"])
@pytest.mark.parametrize("module", ["DyT", "PackedDyT"])
def test_modules_under_transforms_inside_torch_compile(module, api, seed):
    """torch.compile(fullgraph=True) of per-sample parameter gradients (vmap of grad of functional_call)
    or of a jvp along x through the module (whose parameters require grad), to the float64 reference;
    PackedDyT's call goes through dyt_packed."""
    batch = 3
    (x, alpha, gamma, b), w = _draw("rows", torch.float32, seed, True, batch=(batch,))
    model = _module_with(module, "rows", alpha, gamma, b)
    paper = _paper("rows")
    if api == "jvp":
        x_t = torch.randn(x.shape, generator=torch.Generator(device=device()).manual_seed(seed + 1),
                          device=device())  # fmt: skip
        y, y_t = _compiled(model, "inside")(lambda f: lambda x, x_t: jvp(f, (x,), (x_t,)))(x, x_t)
        y64, y_t64 = jvp(lambda v: paper(v, *_as64([alpha, gamma, b])), (x.double(),), (x_t.double(),))
        assert_close("y", y, y64, kind="out", storage=x.dtype, scale=_y_scale("rows", x, alpha, gamma, b))
        assert_close("tangent", y_t, y_t64, kind="out", storage=x.dtype,
                     scale=_tangent_scale("rows", (x_t, None, None, None), x, alpha, gamma))  # fmt: skip
        return
    params = dict(model.named_parameters())
    per_sample = _compiled(lambda p, x, w: (functional_call(model, p, (x,)) * w).sum(), "inside")(
        lambda f: vmap(grad(f), in_dims=(None, 0, 0))
    )
    got = per_sample(params, x, w)
    if module == "PackedDyT":  # one gradient, laid out as params is
        got = dict(zip(("alpha", "weight", "bias"), dyt.ops.split_params(got["params"].movedim(0, -1), True),
                       strict=True))  # fmt: skip
        got = {k: v.movedim(-1, 0) for k, v in got.items()}
    ref = vmap(grad(lambda a, g, bb, x, w: (paper(x, a, g, bb) * w).sum(), argnums=(0, 1, 2)),
               in_dims=(None, None, None, 0, 0))(*_as64([alpha, gamma, b, x, w]))  # fmt: skip
    got = tuple(got[k].reshape(r.shape) for k, r in zip(("alpha", "weight", "bias"), ref, strict=True))
    _assert_per_sample_grads("rows", got, ref, x, w, alpha, gamma, b, names=("dalpha", "dgamma", "dbeta"))
