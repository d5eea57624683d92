"""fuzz: property-based differential tests of every call path against the float64 reference (hypothesis).

Each path draws whole calls (a Case: shape, layouts of x and dy, dtypes of x and of each parameter, beta or
none, out_dtype, values with subnormals, +-0, +-inf, NaN and huge magnitudes injected, alpha of any value),
runs forward and backward, and holds y and every gradient to dyt.reference under the one tolerance rule and
the NaN contract (dyt.conformance.contract.check_against_reference). docs/fuzzing.md says what each path
draws, the CI budget and its measured run, and the failures found and fixed (tests/fuzz_regressions.py
holds them as explicit cases, run by test_regression).

Budget: DYT_FUZZ_PROFILE=ci (default) runs EXAMPLES[path]["ci"] examples per path; DYT_FUZZ_PROFILE=gpu
its "gpu" count (`DYT_FUZZ_PROFILE=gpu nox -s gpu_tests -- -m fuzz`); DYT_FUZZ_EXAMPLES=N runs N on every
path. Examples are drawn from a seed derived from DYT_SEED and the path, so a run reproduces from its
DYT_SEED (the reproduce line of conftest.py). Each test records in the JUnit XML the examples it ran
(property fuzz_examples), the outputs they held (fuzz_outputs), the examples judged in full
(fuzz_fully_judged) and the outputs not judged, by output and reason (fuzz_not_judged, see _judge).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import math
import os
import zlib
from unittest import mock

import pytest
import torch
from fuzz_regressions import regressions
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

import dyt
from dyt import launcher, ops, reference, torch_path
from dyt.conformance.tolerances import assert_same_nonfinite

from helpers import DTYPES, Inputs, check_against_reference, device, forward_backward, on_gpu

pytestmark = [
    pytest.mark.fuzz,
    # the interpreter's sums (numpy reductions) of the non-finite and huge values drawn here
    pytest.mark.filterwarnings("ignore:overflow encountered in reduce:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:invalid value encountered in reduce:RuntimeWarning"),
]

# ---- budget ---------------------------------------------------------------------------------------------

# Examples per path and profile. The kernel paths run in Triton's interpreter on the CPU (10-300 ms a call),
# the plain paths and the transforms in PyTorch ops (about a millisecond): most examples go to those.
EXAMPLES = {
    "kernels_rows": {"ci": 200, "gpu": 20000},
    "kernels_channels_first": {"ci": 150, "gpu": 10000},
    "kernels_packed": {"ci": 120, "gpu": 10000},
    "compile": {"ci": 60, "gpu": 300},
    "plain_rows": {"ci": 3000, "gpu": 20000},
    "plain_channels_first": {"ci": 2500, "gpu": 10000},
    "transforms": {"ci": 3000, "gpu": 10000},
    "create_graph": {"ci": 1500, "gpu": 10000},
}
PROFILE = os.environ.get("DYT_FUZZ_PROFILE", "ci")
if PROFILE not in ("ci", "gpu"):
    raise ValueError(f"DYT_FUZZ_PROFILE must be ci or gpu, got {PROFILE!r}")

# The hypothesis profiles, one per budget: the same settings, the budget per path (EXAMPLES) on top.
for _name in ("ci", "gpu"):
    settings.register_profile(
        f"dyt-fuzz-{_name}",
        deadline=None,  # the interpreter's first call of a kernel signature takes seconds
        database=None,  # failures are kept as explicit cases (tests/fuzz_regressions.py), not in a database
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
SETTINGS = settings.get_profile(f"dyt-fuzz-{PROFILE}")


def _examples(path: str) -> int:
    forced = os.environ.get("DYT_FUZZ_EXAMPLES")
    return int(forced) if forced else EXAMPLES[path][PROFILE]


def _seed(path: str) -> int:
    """The path's hypothesis seed: DYT_SEED (the session's salt) and the path's name."""
    return zlib.crc32(path.encode()) ^ int(os.environ["DYT_SEED"])


# ---- cases ----------------------------------------------------------------------------------------------

SPECIAL_NAMES = ("nan", "inf", "-inf", "max", "-max", "tiny", "-tiny", "sub", "-sub")


def _special(value, dtype: torch.dtype) -> float:
    """A special value by name, in dtype's terms (max: its largest finite number, tiny: its smallest
    normal, sub: three times its smallest subnormal), or the float itself."""
    if not isinstance(value, str):
        return float(value)
    finfo = torch.finfo(dtype)
    sign = -1.0 if value.startswith("-") else 1.0
    name = value.lstrip("-")
    if name == "nan":
        return math.nan
    if name == "inf":
        return sign * math.inf
    if name == "max":
        return sign * finfo.max
    if name == "tiny":
        return sign * finfo.tiny
    assert name == "sub", value
    return sign * 3 * finfo.smallest_normal * 2.0 ** -({torch.float32: 23, torch.bfloat16: 7}.get(dtype, 10))


@dataclasses.dataclass(frozen=True)
class Values:
    """How one tensor's values are drawn: N(0, 1) times 2^exp, each element times 2^k with k uniform in
    [-spread, spread], plus offset (gamma's 1) before scaling; then specials put at flat indices (modulo the
    element count): (index, value) with value a float or a SPECIAL_NAMES name."""

    exp: int = 0
    spread: int = 0
    offset: float = 0.0
    specials: tuple = ()

    def __repr__(self) -> str:
        return _short_repr(self)


@dataclasses.dataclass(frozen=True)
class Case:
    """One drawn call. shape: x's ((..., C), or (N, C, *spatial) where channels_first); dtypes by name
    (DTYPES), beta_dtype None for no beta, out_dtype None for x's; alpha a float or SPECIAL_NAMES name, of
    alpha_shape; layouts by name (_lay_rows, _lay_cf); params_strided: alpha, gamma and beta (the packed
    tensor) as strided views with a storage offset; seed for the bulk values; int64: the kernels' int64
    offsets forced (kernel paths); api: how transforms differentiate (vjp or grad)."""

    shape: tuple
    channels_first: bool = False
    x_dtype: str = "fp32"
    alpha_dtype: str = "fp32"
    gamma_dtype: str = "fp32"
    beta_dtype: str | None = "fp32"
    out_dtype: str | None = None
    alpha: float | str = 0.5
    alpha_shape: tuple = (1,)
    x: Values = Values()
    dy: Values = Values()
    gamma: Values = Values(offset=1.0)
    beta: Values = Values()
    x_layout: str = "contiguous"
    dy_layout: str = "contiguous"
    params_strided: bool = False
    seed: int = 0
    int64: bool = False
    api: str = "vjp"

    def __repr__(self) -> str:
        return _short_repr(self)


def _short_repr(obj) -> str:
    """The dataclass's repr without the fields at their defaults (a regression case pastes it)."""
    parts = []
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        default = f.default if f.default is not dataclasses.MISSING else None
        if f.default is dataclasses.MISSING or value != default:
            parts.append(f"{f.name}={value!r}")
    return f"{type(obj).__name__}({', '.join(parts)})"


def _bulk(spec: Values, shape, dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    """spec's values of shape in dtype (drawn in float64 on the CPU, rounded once)."""
    n = math.prod(shape)
    v = torch.randn(n, generator=gen, dtype=torch.float64)
    if spec.spread:
        v *= torch.exp2(torch.randint(-spec.spread, spec.spread + 1, (n,), generator=gen).double())
    v = (v + spec.offset) * 2.0**spec.exp
    for index, value in spec.specials:
        if n:
            v[index % n] = _special(value, dtype)
    return v.reshape(shape).to(dtype)


def _nan_like(shape, like: torch.Tensor) -> torch.Tensor:
    return torch.full(shape, math.nan, dtype=like.dtype, device=like.device)


# Row layouts of x and dy ((..., C)): the values of a contiguous tensor in another memory layout. "expanded"
# repeats the first row over dim 0 (stride 0), "scalar_expanded" one element everywhere (all strides 0).
def _lay_rows(data: torch.Tensor, layout: str) -> torch.Tensor:
    S, rank = tuple(data.shape), data.dim()
    if layout == "contiguous":
        return data
    if layout == "offset_slice":  # strided rows, storage offset: a window of a wider, taller tensor
        if rank == 1:
            view = _nan_like((S[0] + 5,), data)[3 : 3 + S[0]]
        else:
            view = _nan_like((S[0] + 1, *S[1:-1], S[-1] + 5), data)[1:, ..., 3 : 3 + S[-1]]
    elif layout == "row_step":  # every other row of a taller tensor
        view = _nan_like((2 * S[0], *S[1:]), data)[::2]
    elif layout == "last_strided":  # every other column: the last dimension not contiguous
        view = _nan_like((*S[:-1], 2 * S[-1]), data)[..., ::2]
    elif layout == "transposed":
        return data.transpose(-1, -2).contiguous().transpose(-1, -2)
    elif layout == "leading_permuted":  # the leading dims do not collapse into rows
        return data.transpose(0, 1).contiguous().transpose(0, 1)
    elif layout == "expanded":
        return data[:1].expand(S)
    elif layout == "scalar_expanded":
        return data.reshape(-1)[:1].reshape([1] * rank).expand(S) if data.numel() else data
    else:
        raise ValueError(layout)
    view.copy_(data)
    return view


def _row_layouts(rank: int, for_dy: bool) -> list[str]:
    names = ["contiguous", "offset_slice", "last_strided"]
    if rank >= 2:
        names += ["row_step", "transposed", "expanded"]
    if rank >= 3:
        names.append("leading_permuted")
    if for_dy:
        names.append("scalar_expanded")
    return names


# Channels-first layouts of x and dy ((N, C, *spatial)). "channels_innermost" is torch.channels_last memory
# (channels_last_3d for 5-D; the same idea at every rank).
def _lay_cf(data: torch.Tensor, layout: str) -> torch.Tensor:
    S, rank = tuple(data.shape), data.dim()
    if layout == "contiguous":
        return data
    if layout == "channels_innermost":
        formats = {4: torch.channels_last, 5: torch.channels_last_3d}
        if rank in formats:
            return data.contiguous(memory_format=formats[rank])
        return data.movedim(1, -1).contiguous().movedim(-1, 1)
    if layout == "batch_step":
        view = _nan_like((2 * S[0], *S[1:]), data)[::2]
    elif layout == "offset_slice":  # a spatial window (or, at rank 2, a channel window) with an offset
        if rank == 2:
            view = _nan_like((S[0], S[1] + 3), data)[:, 2 : 2 + S[1]]
        else:
            view = _nan_like((S[0], S[1], S[2] + 3, *S[3:]), data)[:, :, 2 : 2 + S[2]]
    elif layout == "spatial_transposed":
        return data.transpose(-1, -2).contiguous().transpose(-1, -2)
    elif layout == "expanded":
        return data[:1].expand(S)
    elif layout == "scalar_expanded":
        return data.reshape(-1)[:1].reshape([1] * rank).expand(S) if data.numel() else data
    else:
        raise ValueError(layout)
    view.copy_(data)
    return view


def _cf_layouts(rank: int, for_dy: bool) -> list[str]:
    names = ["contiguous", "channels_innermost", "batch_step", "offset_slice", "expanded"]
    if rank >= 4:
        names.append("spatial_transposed")
    if for_dy:
        names.append("scalar_expanded")
    return names


def materialize(case: Case, dev: torch.device) -> Inputs:
    """The case's tensors on dev: x (in its layout) and the parameters as autograd leaves, dy in y's dtype."""
    gen = torch.Generator().manual_seed(case.seed)
    shape = tuple(case.shape)
    C = shape[1] if case.channels_first else shape[-1]
    x_dt = DTYPES[case.x_dtype]
    y_dt = DTYPES[case.out_dtype] if case.out_dtype else x_dt
    lay = _lay_cf if case.channels_first else _lay_rows
    x = lay(_bulk(case.x, shape, x_dt, gen).to(dev), case.x_layout)
    dy = lay(_bulk(case.dy, shape, y_dt, gen).to(dev), case.dy_layout)
    a_dt = DTYPES[case.alpha_dtype]
    alpha = torch.full(case.alpha_shape, _special(case.alpha, a_dt), dtype=torch.float64).to(a_dt)
    gamma = _bulk(case.gamma, (C,), DTYPES[case.gamma_dtype], gen)
    beta = None if case.beta_dtype is None else _bulk(case.beta, (C,), DTYPES[case.beta_dtype], gen)

    def leaf(t):
        if t is None:
            return None
        return (_strided(t.to(dev)) if case.params_strided else t.to(dev)).requires_grad_()

    return Inputs(x.requires_grad_(), leaf(alpha), leaf(gamma), leaf(beta), dy)


def _strided(t: torch.Tensor) -> torch.Tensor:
    """t's values as every other element of a larger tensor, three elements in (a parameter's non-unit
    stride and storage offset; a 0-dim alpha keeps only the offset)."""
    view = _nan_like((2 * t.numel() + 3,), t)[3::2][: t.numel()]
    view = view.view(t.shape) if t.dim() == 1 else view[:1].reshape(t.shape)
    view.copy_(t)
    return view


# ---- strategies -----------------------------------------------------------------------------------------

DTYPE_NAMES = ("fp32", "bf16", "fp16")
PRIMES = (2, 3, 5, 7, 11, 13, 31, 61, 97, 127, 257, 509, 1021, 1031, 2053, 4099)
POWERS = tuple(sorted({max(1, 2**k + d) for k in range(1, 13) for d in (-1, 0, 1)}))
FOLDING = (2, 4, 8, 16, 32, 64, 128, 256, 512, 768, 1536, 2304)
ROW_COUNTS = (1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129)
EXTREME_EXPS = (-149, -140, -133, -126, -100, -60, -24, 24, 60, 100, 120, 127)


def _specials():
    """Up to three (index, value) pairs, none two times in three: names (SPECIAL_NAMES, +-0) and any finite
    float32, which reaches the huge and the tiny."""
    finite = st.floats(width=32, allow_nan=False, allow_infinity=False)
    value = st.one_of(st.sampled_from(SPECIAL_NAMES + (0.0, -0.0)), finite)
    some = st.lists(st.tuples(st.integers(0, 2**16), value), min_size=1, max_size=3).map(tuple)
    return st.one_of(st.just(()), st.just(()), some)


@st.composite
def values(draw, kind: str) -> Values:
    # Mostly moderate magnitudes (extreme ones overflow y and the gradients' dtypes, which then go unjudged:
    # _judge), extreme ones a sixth of the time; specials put huge, tiny and non-finite values anywhere.
    moderate = st.integers(-3, 3)
    exp = draw(
        st.one_of(moderate, moderate, moderate, moderate, st.integers(-20, 20), st.sampled_from(EXTREME_EXPS))
    )
    spread = draw(st.sampled_from((0, 0, 0, 2, 2, 8, 30, 80)))
    offset = 1.0 if kind == "gamma" and draw(st.booleans()) else 0.0
    return Values(exp, spread, offset, draw(_specials()))


ALPHAS = st.one_of(
    st.sampled_from(("nan", "inf", "-inf", "max", "-max", "tiny", "sub", 0.0, -0.0, 0.5, 1.0, -1.0)),
    st.floats(-8.0, 8.0),
    st.floats(-8.0, 8.0),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
)


def _width(max_width: int):
    """C: small, prime, a power of two or one off it, one whose contiguous rows fold into rows of 1024 or 3072
    (dyt.planner.fold_factor), any; past 2048 (where float32 rows leave the widest
    forward tile and every row the backward's: column blocks) a quarter of the time where max_width allows."""
    widths = [
        st.integers(1, 16),
        st.sampled_from([w for w in PRIMES + POWERS if w <= max_width]),
        st.sampled_from([w for w in FOLDING if w <= max_width]),
        st.integers(1, max_width),
    ]
    return st.one_of(*widths, st.integers(2049, max_width)) if max_width > 4096 else st.one_of(*widths)


def _dim(limit: int):
    """A leading dimension from 1 to limit (at least 1): small, at a tile boundary, or any."""
    return st.one_of(
        st.integers(1, max(1, min(limit, 8))),
        st.sampled_from([r for r in ROW_COUNTS if r <= limit] or [1]),
        st.integers(1, max(1, limit)),
    )


# Empty input (a dimension of 0) in one example in twelve.
EMPTY = st.sampled_from((False,) * 11 + (True,))


@st.composite
def row_shapes(draw, max_elements: int, max_width: int):
    C = draw(_width(max_width))
    rank = draw(st.integers(1, 4))
    lead, room = [], max(1, max_elements // C)
    for _ in range(rank - 1):
        d = draw(_dim(room))
        lead.append(d)
        room = max(1, room // d)
    if lead and draw(EMPTY):
        lead[draw(st.integers(0, len(lead) - 1))] = 0
    return (*lead, C)


@st.composite
def cf_shapes(draw, max_elements: int, max_width: int):
    C = draw(_width(max_width))
    n_spatial = draw(st.integers(0, 3))
    room = max(1, max_elements // C)
    spatial = []
    for _ in range(n_spatial):
        d = draw(st.integers(1, max(1, min(9, room))))
        spatial.append(d)
        room = max(1, room // d)
    N = draw(_dim(room))
    if draw(EMPTY):  # no sample, or (where there is one) a spatial dimension of 0
        where = draw(st.integers(0, len(spatial)))
        if where == len(spatial):
            N = 0
        else:
            spatial[where] = 0
    return (N, C, *spatial)


@st.composite
def cases(draw, *, channels_first: bool, max_elements: int, max_width: int, kernels: bool = False,
          packed: bool = False, compile_: bool = False, transforms: bool = False) -> Case:  # fmt: skip
    shape = draw((cf_shapes if channels_first else row_shapes)(max_elements, max_width))
    x_dtype = draw(st.sampled_from(DTYPE_NAMES))
    if packed or compile_:  # one parameter dtype (packed: one tensor; compile: fewer signatures)
        p = draw(st.sampled_from(DTYPE_NAMES if packed else (x_dtype, "fp32")))
        alpha_dtype = gamma_dtype = p
        beta_dtype = draw(st.sampled_from((p, None)))
    else:
        alpha_dtype, gamma_dtype = draw(st.sampled_from(DTYPE_NAMES)), draw(st.sampled_from(DTYPE_NAMES))
        beta_dtype = draw(st.one_of(st.none(), st.sampled_from(DTYPE_NAMES)))
    out_dtype = draw(st.one_of(st.none(), st.sampled_from(DTYPE_NAMES)))
    rank = len(shape)
    layouts = _cf_layouts if channels_first else _row_layouts
    return Case(
        shape=shape,
        channels_first=channels_first,
        x_dtype=x_dtype,
        alpha_dtype=alpha_dtype,
        gamma_dtype=gamma_dtype,
        beta_dtype=beta_dtype,
        out_dtype=out_dtype,
        alpha=draw(ALPHAS),
        alpha_shape=(1,) if packed else draw(st.sampled_from(((1,), ()))),
        x=draw(values("x")),
        dy=draw(values("dy")),
        gamma=draw(values("gamma")),
        beta=draw(values("beta")),
        x_layout=draw(st.one_of(st.just("contiguous"), st.sampled_from(layouts(rank, False)))),
        dy_layout=draw(st.one_of(st.just("contiguous"), st.sampled_from(layouts(rank, True)))),
        params_strided=draw(st.booleans()),
        seed=draw(st.integers(0, 2**31 - 1)),
        int64=kernels and draw(st.booleans()),
        api=draw(st.sampled_from(("vjp", "grad"))) if transforms else "vjp",
    )


# ---- running and judging --------------------------------------------------------------------------------

OUTPUTS = ("y", "dx", "dalpha", "dgamma", "dbeta")
COUNTS: collections.Counter = collections.Counter()


def _entry(case: Case):
    return dyt.dyt_channels_first if case.channels_first else dyt.dyt


def _out(case: Case):
    return DTYPES[case.out_dtype] if case.out_dtype else None


def _call(case: Case):
    """fn(x, alpha, gamma, beta) of the case's entry with its out_dtype."""
    entry, out = _entry(case), _out(case)
    return lambda x, a, g, b: entry(x, a, g, b, out_dtype=out)


def run_kernels(case: Case, inp: Inputs):
    with launcher.overrides(int64=True) if case.int64 else contextlib.nullcontext():
        return forward_backward(_call(case), inp)


def run_plain(case: Case, inp: Inputs):
    """The plain PyTorch path CPU tensors take without the interpreter (dyt.torch_path), through the public
    entry: the process runs the interpreter, so its test for kernels (ops._use_triton) is made to say no."""
    with mock.patch.object(ops, "_use_triton", lambda x: False):
        return forward_backward(_call(case), inp)


def run_packed(case: Case, inp: Inputs):
    """dyt.dyt_packed on [gamma, beta, alpha] in one tensor; its one gradient split back."""
    bias = inp.beta is not None
    parts = [inp.gamma, *([inp.beta] if bias else []), inp.alpha.reshape(1)]
    params = torch.cat([p.detach() for p in parts])
    params = (_strided(params) if case.params_strided else params).requires_grad_()
    x = inp.x
    x.grad = None
    with launcher.overrides(int64=True) if case.int64 else contextlib.nullcontext():
        y = dyt.dyt_packed(x, params, bias=bias, channels_first=case.channels_first, out_dtype=_out(case))
        y.backward(inp.dy)
    dalpha, dgamma, dbeta = ops.split_params(params.grad, bias)
    return y.detach(), x.grad, dalpha, dgamma, dbeta


_COMPILED: dict = {}


def run_compiled(case: Case, inp: Inputs):
    """torch.compile(fullgraph=True, dynamic=True) of the entry, one compiled function per entry and
    out_dtype (a Python constant: one guard), recompiled by Dynamo per dtype signature and rank."""
    key = (case.channels_first, case.out_dtype)
    if key not in _COMPILED:
        backend = "inductor" if on_gpu() else "aot_eager"
        _COMPILED[key] = torch.compile(_call(case), backend=backend, fullgraph=True, dynamic=True)
    with torch._dynamo.config.patch(recompile_limit=1000, accumulated_recompile_limit=10000):
        return forward_backward(_COMPILED[key], inp)


def run_create_graph(case: Case, inp: Inputs):
    """A backward that builds a graph (create_graph=True: double backward, gradient penalties) runs
    dyt.torch_path.differentiable_backward on every device; after the kernels' forward on a GPU, the plain
    path's on the CPU (the interpreter's forward is the kernels_* paths' to draw)."""
    leaves = inp.leaves()
    plain = mock.patch.object(ops, "_use_triton", lambda x: False)
    with contextlib.nullcontext() if inp.x.is_cuda else plain:
        y = _call(case)(*leaves[:3], inp.beta)
        grads = torch.autograd.grad(y, leaves, inp.dy, create_graph=True)
    # dbeta = sum(dy) depends on no input: only dx, dalpha and dgamma carry a graph
    assert all(g.requires_grad for g in grads[:3]), "create_graph=True gave gradients without a graph"
    return (y.detach(), *(g.detach() for g in grads), *([None] if inp.beta is None else []))


def run_transforms(case: Case, inp: Inputs):
    """torch.func.vjp of the entry, or torch.func.grad of the sum of y * dy (both run dyt.ops._ComposableDyT,
    as every call under a transform does)."""
    fn = _call(case)
    leaves = [t.detach() for t in inp.leaves()]
    has_beta = inp.beta is not None

    def f(x, a, g, b=None):
        return fn(x, a, g, b)

    if case.api == "vjp":
        y, pull = torch.func.vjp(f, *leaves)
        grads = pull(inp.dy)
    else:
        dy = inp.dy

        def loss(*args):
            y = f(*args)
            return (y.float() * dy.float()).sum(), y

        grads, y = torch.func.grad(loss, argnums=tuple(range(len(leaves))), has_aux=True)(*leaves)
    return (y.detach(), grads[0], grads[1], grads[2], grads[3] if has_beta else None)


def _float32_evaluation(inp: Inputs, outs, argument: int = 0) -> tuple:
    """The reference's formulas (dyt.reference) evaluated in float32 as the tolerance model has it: alpha x
    rounded to float32 (what the contract's "computation in float32" cannot avoid), tanh of it and sech^2
    correctly rounded to float32, each product rounded to float32, the sums exact (float64) and rounded
    once; each result in its output's dtype. sech^2's argument is z itself (argument=0) or z moved away from
    (+1) or towards (-1) zero by dyt.reference.ARGUMENT_ULPS float32 ulps, the rounding that the GPU's
    exponential, exp2(|z| log2 e), adds to its argument (dyt.reference.evaluation_scales). _judge's floor:
    what float32 arithmetic can deliver."""
    x, dy = inp.x.detach().float(), inp.dy.float()
    a, g = inp.alpha.detach().float().reshape(()), inp.gamma.detach().float()
    z = a * x
    t = torch.tanh(z.double()).float()
    z64 = z.double()
    ulp = torch.ldexp(torch.ones_like(z64), torch.frexp(z64).exponent - 24)  # float32's spacing at |z|
    sech2 = reference.sech2_reference(z64 + argument * reference.ARGUMENT_ULPS * ulp * z64.sign()).float()
    y = g * t
    if inp.beta is not None:
        y = y + inp.beta.detach().float()
    dz = dy * g * sech2
    lead = tuple(range(x.dim() - 1))

    def total(v, dims):
        return v.double().sum(dims) if dims else v.double()

    grads = (dz * a, (dz * x).double().sum().reshape(inp.alpha.shape), total(dy * t, lead), total(dy, lead))
    return tuple(None if o is None else v.to(o.dtype) for v, o in zip((y, *grads), outs, strict=True))


def _references(inp: Inputs) -> dict:
    y = reference.dyt_forward_reference(inp.x, inp.alpha, inp.gamma, inp.beta)
    grads = reference.dyt_backward_reference(inp.dy, inp.x, inp.alpha, inp.gamma, inp.beta)
    return dict(zip(OUTPUTS, (y, *grads), strict=True))


FLOAT32_MAX = torch.finfo(torch.float32).max


def _accumulation_overflows(inp: Inputs, name: str) -> bool:
    """Whether a parameter gradient's finite float64 terms (dyt.reference's: dy tanh(z) for dgamma, dy for
    dbeta, dy gamma sech^2(z) x for dalpha) add up in magnitude past float32's largest number for some
    element: a float32 accumulation, the contract's, then overflows for some order of its additions
    whatever the sum comes to."""
    if name not in ("dalpha", "dgamma", "dbeta"):
        return False
    x, dy = inp.x.detach().double(), inp.dy.double()
    a, g = inp.alpha.detach().double().reshape(()), inp.gamma.detach().double()
    z = a * x
    terms = {"dgamma": dy * torch.tanh(z), "dbeta": dy, "dalpha": dy * g * reference.sech2_reference(z) * x}
    t = terms[name]
    magnitude = t.abs().masked_fill(~torch.isfinite(t), 0.0)
    dims = tuple(range(x.dim())) if name == "dalpha" else tuple(range(x.dim() - 1))
    return bool((magnitude.sum(dims) if dims else magnitude).max() > FLOAT32_MAX) if t.numel() else False


def _judge(path: str, case: Case, inp: Inputs, outs) -> None:
    """Output dtypes and shapes by the contract; then y and every gradient against the float64 reference
    (check_against_reference: the one tolerance rule, NaN and inf patterns exact).

    An output that fails the rule is a failure of dyt, unless the draw asks of that output more than the
    contract's "computation in float32 ... accumulated in float32" (DESIGN.md, "The operator contract") can
    give, which is the case where
    - the reference's own formulas evaluated in float32 (_float32_evaluation, with sech^2's argument as
      it is or off by the GPU exponential's rounding either way) fail the rule there too, with dyt's NaN
      and inf pattern no further off than theirs: an output beyond its dtype's range (fp16 y of a huge
      gamma), a float32 output that cancels far below its terms or lies in float32's subnormals, a float32
      dx whose norm the saturated tail |alpha x| > ~8 carries (the float32 rule is relative L2 1e-6 of the
      values, with no allowance for their evaluation; test_saturated_tail's docstring says the same),
      sech^2 of |alpha x| past 44 in float32's subnormals; or
    - a parameter gradient's terms add up past float32's range in magnitude (_accumulation_overflows).
    Such an output is not judged in that example, and is counted (fuzz_not_judged, by reason)."""
    y, dx, dalpha, dgamma, dbeta = outs
    x_dt = inp.x.dtype
    assert y.dtype == (_out(case) or x_dt) and tuple(y.shape) == tuple(inp.x.shape), (y.dtype, y.shape)
    assert dx.dtype == x_dt and tuple(dx.shape) == tuple(inp.x.shape), (dx.dtype, dx.shape)
    assert dalpha.dtype == inp.alpha.dtype and dalpha.shape == inp.alpha.shape, (dalpha.dtype, dalpha.shape)
    assert dgamma.dtype == inp.gamma.dtype, dgamma.dtype
    if inp.beta is not None:
        assert dbeta.dtype == inp.beta.dtype, dbeta.dtype
    if case.channels_first:  # the reference's layout: channels last
        inp = Inputs(inp.x.movedim(1, -1), inp.alpha, inp.gamma, inp.beta, inp.dy.movedim(1, -1))
        outs = (y.movedim(1, -1), dx.movedim(1, -1), dalpha, dgamma, dbeta)
    try:
        check_against_reference(inp, outs)
        COUNTS[(path, "fully_judged")] += 1
        return
    except AssertionError:
        pass
    floors = [_float32_evaluation(inp, outs, argument) for argument in (0, 1, -1)]
    refs = _references(inp)
    reasons = {}
    for i, name in enumerate(OUTPUTS if inp.beta is not None else OUTPUTS[:-1]):
        try:
            check_against_reference(inp, outs, only=(name,))
            continue
        except AssertionError as err:
            failure = err
        if any(_beyond_float32(inp, outs[i], floor[i], refs[name], name) for floor in floors):
            reasons[name] = "float32_evaluation"
        elif _accumulation_overflows(inp, name):
            reasons[name] = "float32_accumulation"
        else:
            raise failure
    for name, reason in reasons.items():
        COUNTS[(path, f"not_judged:{name}:{reason}")] += 1
    COUNTS[(path, "fully_judged")] += not reasons


def _beyond_float32(inp: Inputs, got, floor, ref, name: str) -> bool:
    """Whether float32 arithmetic (floor) fails the rule for this output too, with dyt's NaN and inf
    pattern right wherever the floor's is."""
    try:
        check_against_reference(inp, _only(name, floor), only=(name,))
        return False
    except AssertionError:
        pass
    try:
        assert_same_nonfinite(name, got, ref)
    except AssertionError:
        try:
            assert_same_nonfinite(name, floor, ref)
        except AssertionError:
            return True
        return False
    return True


def _only(name: str, value) -> tuple:
    """An outs tuple holding value at name's place (check_against_reference reads the others' shapes not)."""
    return tuple(value if n == name else None for n in OUTPUTS)


RUNNERS = {
    "kernels_rows": run_kernels,
    "kernels_channels_first": run_kernels,
    "kernels_packed": run_packed,
    "compile": run_compiled,
    "plain_rows": run_plain,
    "plain_channels_first": run_plain,
    "transforms": run_transforms,
    "create_graph": run_create_graph,
}


def run_case(path: str, case: Case) -> None:
    """One example: the case's tensors (on the device for the kernel, compile and transform paths; the
    plain paths on the CPU), the path's call, the judgement."""
    dev = torch.device("cpu") if path.startswith("plain") else device()
    inp = materialize(case, dev)
    outs = RUNNERS[path](case, inp)
    _judge(path, case, inp, outs)
    COUNTS[(path, "examples")] += 1
    COUNTS[(path, "outputs")] += 5 if inp.beta is not None else 4


def _both_layouts(**kwargs):
    """Rows and channels-first calls, half each."""
    return st.one_of(cases(channels_first=False, **kwargs), cases(channels_first=True, **kwargs))


# Element budgets and widths: the interpreter's cost grows with the elements and the programs of a launch;
# kernels_rows reaches past every tile's width (column blocks), kernels_channels_first's rows of C * L
# elements too; the plain paths have no tiles.
STRATEGIES = {
    "kernels_rows": cases(channels_first=False, max_elements=2048, max_width=5003, kernels=True),
    "kernels_channels_first": cases(channels_first=True, max_elements=6000, max_width=300, kernels=True),
    "kernels_packed": _both_layouts(max_elements=2048, max_width=1100, kernels=True, packed=True),
    "compile": _both_layouts(max_elements=512, max_width=300, compile_=True),
    "plain_rows": cases(channels_first=False, max_elements=2048, max_width=1100),
    "plain_channels_first": cases(channels_first=True, max_elements=2048, max_width=300),
    "transforms": _both_layouts(max_elements=2048, max_width=1100, transforms=True),
    "create_graph": _both_layouts(max_elements=2048, max_width=1100),
}


def _property(path: str):
    @hypothesis_seed(_seed(path))
    @settings(SETTINGS, max_examples=_examples(path))
    @given(case=STRATEGIES[path])
    def check(case):
        run_case(path, case)

    return check


PROPERTIES = {path: _property(path) for path in EXAMPLES}


@pytest.mark.parametrize("path", list(EXAMPLES))
def test_fuzz(path, record_property):
    """The path's property over its budget of drawn cases; the examples run and the outputs not judged (as
    _judge says) go to the JUnit properties."""
    for key in [k for k in COUNTS if k[0] == path]:
        del COUNTS[key]
    try:
        PROPERTIES[path]()
    finally:
        record_property("fuzz_examples", COUNTS[(path, "examples")])
        record_property("fuzz_outputs", COUNTS[(path, "outputs")])
        record_property("fuzz_fully_judged", COUNTS[(path, "fully_judged")])
        skipped = {
            k[1].split(":", 1)[1]: v for k, v in COUNTS.items() if k[0] == path and "not_judged" in k[1]
        }
        record_property("fuzz_not_judged", ",".join(f"{k}={v}" for k, v in sorted(skipped.items())) or "0")


REGRESSIONS = regressions(Case, Values)


@pytest.mark.parametrize(("path", "case"), [r[1:3] for r in REGRESSIONS], ids=[r[0] for r in REGRESSIONS])
def test_regression(path, case):
    """The failures found so far (tests/fuzz_regressions.py), each on its path; every output judged."""
    COUNTS.clear()
    run_case(path, case)
    not_judged = {k[1]: v for k, v in COUNTS.items() if k[0] == path and "not_judged" in k[1]}
    COUNTS.clear()
    assert not not_judged, f"a regression case must be judged in full: {not_judged}"


# ---- the judge's own check ------------------------------------------------------------------------------


def _dgamma_through_x_dtype(real):  # the seed library's bug: float32 gradients rounded through x's dtype
    def backward(dy, x, alpha, gamma, dx_dtype, *dtypes):
        dx, dalpha, dgamma, dbeta = real(dy, x, alpha, gamma, dx_dtype, *dtypes)
        return dx, dalpha, dgamma.to(dx_dtype).to(dgamma.dtype), dbeta

    return backward


def _beta_dropped(real):
    return lambda x, alpha, gamma, beta, out_dtype, **kw: real(x, alpha, gamma, None, out_dtype, **kw)


def _sech2_cancels(real):  # 1 - tanh^2, which cancels to 0 once tanh rounds to 1
    def tanh_sech2(z):
        t = torch.tanh(z)
        return t, 1.0 - t * t

    return tanh_sech2


def _dalpha_nan_hidden(real):
    def backward(*args):
        dx, dalpha, dgamma, dbeta = real(*args)
        return dx, torch.nan_to_num(dalpha), dgamma, dbeta

    return backward


def _dbeta_slightly_off(real):  # 3e-5 relative: three times the float32 rule for parameter gradients
    def backward(*args):
        dx, dalpha, dgamma, dbeta = real(*args)
        return dx, dalpha, dgamma, (dbeta.double() * (1 + 3e-5)).to(dbeta.dtype)

    return backward


MUTANTS = {
    "dgamma_rounded_through_x_dtype": ("backward", _dgamma_through_x_dtype),
    "beta_dropped": ("forward", _beta_dropped),
    "sech2_as_one_minus_tanh_squared": ("_tanh_sech2", _sech2_cancels),
    "dalpha_nan_hidden": ("backward", _dalpha_nan_hidden),
    "dbeta_off_by_3e-5": ("backward", _dbeta_slightly_off),
}


@pytest.mark.parametrize("mutant", list(MUTANTS))
def test_the_judge_catches_a_broken_path(mutant, monkeypatch):
    """The plain path broken on purpose (dyt.torch_path patched): the plain_rows property fails within 300
    examples, on the judgement of an output (not on an outputs-not-judged exclusion): what _judge leaves
    unjudged does not hide these bugs. Each is caught within 20 examples at the seeds tried."""
    attr, make = MUTANTS[mutant]
    monkeypatch.setattr(torch_path, attr, make(getattr(torch_path, attr)))

    @hypothesis_seed(_seed(f"mutant {mutant}"))
    @settings(SETTINGS, max_examples=300, phases=[Phase.generate], print_blob=False)
    @given(case=STRATEGIES["plain_rows"])
    def check(case):
        run_case("plain_rows", case)

    with pytest.raises(AssertionError, match=r"^(y|dx|dalpha|dgamma|dbeta): "):
        check()
