"""convergence: small models trained K steps with dyt and with the paper's eager DyT module agree.

Each model is built once; every run loads the same state dict and sees the same batches, in float32 or
under bf16 autocast. The runs step in lockstep and are compared at every step: the loss, and each
parameter's gradient (relative L2), grouped as alpha, weight (gamma), bias (beta) and the rest of the
model.

The tolerance is measured, not chosen: the floor is how far the eager module evaluated in float64 (inside
an otherwise unchanged float32 or autocast model) drifts from the same module evaluated in float32, over
the same steps. dyt is a float32 evaluation too, so against the float32 eager module it may drift by its
own float32 error plus the eager module's, and the test allows FLOOR_FACTOR times the floor in every
quantity (the tolerance table's EVAL_ULPS: the float32 evaluation error the contract allows dyt). A dyt
whose dgamma is off by 1e-4 relative (a mutant: an autograd Function around gamma that scales its
gradient) must fail the same comparison wherever the floor resolves 1e-4 (bf16 autocast at the GPU sizes
does not: its floor is larger, and the test says so).

SGD with momentum, not Adam: Adam's first updates are sign(g), which turns a rounding difference in a
near-zero gradient into a full-size step, and the floor would then measure coin flips rather than
arithmetic.

Sizes: tiny on CPU (the Triton interpreter, and the plain PyTorch path that CPU tensors take without it),
the real sizes on a GPU. The models are written here: a pre-norm transformer (DyT with beta), the same
transformer with DyT without beta (the LLaMA recipe), and a ConvNeXt-style net (channels-first DyT in the
stem and downsampling, channels-last in the blocks).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import dyt
from dyt import torch_path
from dyt.conformance.tolerances import EVAL_ULPS
from dyt.service.peers import EagerDyT

pytestmark = pytest.mark.convergence

ON_GPU = torch.cuda.is_available()
DEVICE = torch.device("cuda") if ON_GPU else torch.device("cpu")
# The contract lets dyt's float32 evaluation be off by EVAL_ULPS float32 ulps where torch.tanh is off by
# about one: dyt may drift from the float32 eager module by EVAL_ULPS times the float64-vs-float32 floor.
FLOOR_FACTOR = float(EVAL_ULPS)
MUTANT_SCALE = 1 + 1e-4
GROUPS = ("loss", "alpha", "weight", "bias", "other")
# Under bf16 autocast, a float32 rounding difference in one element now and then flips a bf16 rounding (a
# relative step of 2^-8) and from there two free trajectories part at a step set by chance; these
# precisions compare runs that start every step from the same weights instead.
SYNCED = ("bf16",)


@dataclass(frozen=True)
class Size:
    batch: int
    tokens: int
    width: int
    depth: int
    heads: int
    image: int
    steps: int


SIZE = (
    Size(batch=16, tokens=196, width=384, depth=4, heads=6, image=64, steps=20)
    if ON_GPU
    else Size(batch=4, tokens=16, width=32, depth=1, heads=2, image=16, steps=5)
)


# ------------------------------------------------------------------------------------- the norm layers


def _as_dyt_returns(y: torch.Tensor, x: torch.Tensor, channels_last: bool) -> torch.Tensor:
    """y in x's dtype and in the memory layout dyt returns: dense with C innermost for channels-last DyT;
    for channels-first DyT, x's own layout where x is contiguous or in torch.channels_last memory format
    (both run without a copy), else contiguous. Under autocast the eager module returns float32 (its
    float32 parameters promote the product) in its input's strides; the neighbouring matmuls and
    convolutions round differently on different layouts, which in bf16 shows as one-ulp flips that no DyT
    arithmetic caused. Matching both makes the comparison one of the layer's arithmetic
    (test_the_eager_modules_return_dyts_layout holds this to dyt's own outputs)."""
    in_channels_last_memory = (
        not channels_last and x.dim() == 4 and not x.is_contiguous()
        and x.is_contiguous(memory_format=torch.channels_last)
    )  # fmt: skip
    fmt = torch.channels_last if in_channels_last_memory else torch.contiguous_format
    return y.to(x.dtype).contiguous(memory_format=fmt)


class Eager32(EagerDyT):
    """The paper's module in float32, returning what dyt returns (_as_dyt_returns)."""

    def forward(self, x):
        return _as_dyt_returns(super().forward(x), x, self.channels_last)


class Eager64(EagerDyT):
    """The same module evaluated in float64, returning what dyt returns (_as_dyt_returns)."""

    def forward(self, x):
        a, w = self.alpha.double(), self.weight.double()
        b = None if self.bias is None else self.bias.double()
        t = torch.tanh(a * x.double())
        if self.channels_last:
            y = t * w if b is None else t * w + b
        else:
            y = t * w[:, None, None] if b is None else t * w[:, None, None] + b[:, None, None]
        return _as_dyt_returns(y, x, self.channels_last)


class _ScaleGrad(torch.autograd.Function):
    """Identity forward; the gradient scaled by MUTANT_SCALE on the way back."""

    @staticmethod
    def forward(ctx, t):
        return t.clone()

    @staticmethod
    def backward(ctx, g):
        return g * MUTANT_SCALE


class MutantDyT(dyt.DyT):
    """dyt with dgamma off by 1e-4 relative: what the suite must catch."""

    def forward(self, x):
        weight = _ScaleGrad.apply(self.weight)
        if self.channels_last:
            return dyt.dyt(x, self.alpha, weight, self.bias)
        return dyt.dyt(x.movedim(1, -1), self.alpha, weight, self.bias).movedim(-1, 1)


NORMS = {"eager32": Eager32, "eager64": Eager64, "dyt": dyt.DyT, "mutant": MutantDyT}


# ------------------------------------------------------------------------------------------- the models


class Block(nn.Module):
    def __init__(self, norm, width, heads, bias):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = norm(width, bias=bias), norm(width, bias=bias)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.fc1, self.fc2 = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x):
        b, n, c = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        att = (q @ k.transpose(-2, -1) / math.sqrt(c // self.heads)).softmax(-1) @ v
        x = x + self.proj(att.transpose(1, 2).reshape(b, n, c))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class PreNormTransformer(nn.Module):
    def __init__(self, norm, size: Size, bias: bool = True, classes: int = 10):
        super().__init__()
        self.embed = nn.Linear(16, size.width)
        self.blocks = nn.Sequential(*[Block(norm, size.width, size.heads, bias) for _ in range(size.depth)])
        self.norm = norm(size.width, bias=bias)
        self.head = nn.Linear(size.width, classes)

    def forward(self, x):
        return self.head(self.norm(self.blocks(self.embed(x))).mean(1))


class ConvNeXtBlock(nn.Module):
    def __init__(self, norm, dim):
        super().__init__()
        self.dw = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = norm(dim)
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x):
        y = self.norm(self.dw(x).permute(0, 2, 3, 1))
        return x + self.fc2(F.gelu(self.fc1(y))).permute(0, 3, 1, 2)


class SmallConvNeXt(nn.Module):
    def __init__(self, norm, size: Size, classes: int = 10):
        super().__init__()
        dims = (size.width // 2, size.width)
        self.stem = nn.Sequential(nn.Conv2d(3, dims[0], 4, stride=4), norm(dims[0], channels_last=False))
        self.stage1 = ConvNeXtBlock(norm, dims[0])
        self.down = nn.Sequential(
            norm(dims[0], channels_last=False), nn.Conv2d(dims[0], dims[1], 2, stride=2)
        )
        self.stage2 = ConvNeXtBlock(norm, dims[1])
        self.norm = norm(dims[1])
        self.head = nn.Linear(dims[1], classes)

    def forward(self, x):
        x = self.stage2(self.down(self.stage1(self.stem(x))))
        return self.head(self.norm(x.mean((2, 3))))


MODELS = {
    "prenorm": lambda norm: PreNormTransformer(norm, SIZE, bias=True),
    "llama_recipe": lambda norm: PreNormTransformer(norm, SIZE, bias=False),
    "convnext": lambda norm: SmallConvNeXt(norm, SIZE),
}


def _batches(model_name: str, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    shape = (
        (SIZE.batch, 3, SIZE.image, SIZE.image) if model_name == "convnext" else (SIZE.batch, SIZE.tokens, 16)
    )
    return [
        (
            torch.randn(shape, generator=gen).to(DEVICE),
            torch.randint(0, 10, (SIZE.batch,), generator=gen).to(DEVICE),
        )
        for _ in range(SIZE.steps)
    ]


def _initial_state(model_name: str) -> dict:
    """One set of weights for every run; the DyT parameters moved off their defaults so that every
    gradient term is exercised."""
    torch.manual_seed(1234)
    model = MODELS[model_name](EagerDyT)
    gen = torch.Generator().manual_seed(99)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, EagerDyT):
                module.alpha.copy_(0.5 + 0.2 * torch.rand(1, generator=gen))
                module.weight.copy_(1 + 0.2 * torch.randn(module.weight.shape, generator=gen))
                if module.bias is not None:
                    module.bias.copy_(0.1 * torch.randn(module.bias.shape, generator=gen))
    return {k: v.clone() for k, v in model.state_dict().items()}


def _group(name: str, model: nn.Module) -> str:
    owner = model.get_submodule(name.rpartition(".")[0])
    leaf = name.rpartition(".")[2]
    return leaf if isinstance(owner, EagerDyT | dyt.DyT) else "other"


def train_in_lockstep(model_name: str, precision: str, runs: tuple[str, ...]) -> dict[str, dict[str, float]]:
    """Trains one model per run (NORMS key) from the same weights on the same batches; returns, for each
    run but the first, its divergence from the first per group of GROUPS: at every step the relative L2
    distance of the group (the B per-sample losses; all the group's gradients), and of those the median
    over the steps.

    float32: every run follows its own trajectory. bf16 (SYNCED): every step starts each run from the
    first run's weights and only the first run's optimizer steps, so that each step compares one step;
    a one-ulp bf16 flip then touches the step it happens in, and the median judges the typical step,
    where an error that every step makes (the mutant's) shows in full."""
    state = _initial_state(model_name)
    synced = precision in SYNCED
    models, optims = [], []
    for run in runs:
        model = MODELS[model_name](NORMS[run]).to(DEVICE)
        model.load_state_dict(state)
        models.append(model)
        optims.append(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9))
    steps = {run: {g: [] for g in GROUPS} for run in runs[1:]}
    for x, labels in _batches(model_name):
        if synced:
            for model in models[1:]:
                model.load_state_dict(models[0].state_dict())
        losses, grads = [], []
        for model, opt in zip(models, optims, strict=True):
            opt.zero_grad(set_to_none=True)
            with torch.autocast(DEVICE.type, dtype=torch.bfloat16, enabled=precision == "bf16"):
                logits = model(x)
            # float64, per sample: the loss resolves any logit change, and B values a step judge it
            loss = F.cross_entropy(logits.double(), labels, reduction="none")
            loss.mean().backward()
            losses.append(loss.detach())
            grads.append([(p.grad.detach(), _group(n, model)) for n, p in model.named_parameters()])
        for i, opt in enumerate(optims):
            if not (synced and i):
                opt.step()
        for run, loss, grad in zip(runs[1:], losses[1:], grads[1:], strict=True):
            assert torch.isfinite(loss).all(), f"{run}: loss {loss}"
            sums = {g: [0.0, 0.0] for g in GROUPS}  # ||got - ref||^2, ||ref||^2
            _accumulate(sums["loss"], loss, losses[0])
            for (g, group), (ref, _) in zip(grad, grads[0], strict=True):
                _accumulate(sums[group], g, ref)
            for group, (num2, den2) in sums.items():
                steps[run][group].append(math.sqrt(num2 / den2) if den2 > 0 else math.sqrt(num2))
    return {run: {g: statistics.median(v) for g, v in steps[run].items()} for run in runs[1:]}


def _accumulate(slot: list[float], got: torch.Tensor, ref: torch.Tensor) -> None:
    got, ref = got.double(), ref.double()
    slot[0] += torch.sum((got - ref) ** 2).item()
    slot[1] += torch.sum(ref**2).item()


# --------------------------------------------------------------------------------------------- the path


@pytest.fixture(params=["triton", "plain"])
def path(request, monkeypatch):
    """Which implementation dyt runs: its Triton kernels (on CPU, through the interpreter), or the plain
    PyTorch path that CPU tensors take without the interpreter. Counts calls into the plain path, so a
    test knows which one ran."""
    from dyt import launcher

    if request.param == "plain":
        if ON_GPU:
            pytest.skip("CUDA tensors always run the kernels; the plain path is for CPU tensors")
        monkeypatch.setattr(launcher, "interpreter_active", lambda: False)
    elif not ON_GPU and not launcher.interpreter_active():
        pytest.skip("TRITON_INTERPRET is off: CPU tensors cannot run the kernels here")
    calls = []
    for name in ("forward", "backward"):
        inner = getattr(torch_path, name)
        monkeypatch.setattr(
            torch_path, name, lambda *a, _inner=inner, **k: calls.append(1) or _inner(*a, **k)
        )
    yield request.param
    if request.param == "plain":
        assert calls, "the plain path was asked for but dyt did not call it"
    else:
        assert not calls, "the kernels were asked for but dyt took the plain path"


# ------------------------------------------------------------------------------------------------ tests


def _over(got: dict[str, float], floor: dict[str, float]) -> dict[str, tuple[float, float]]:
    return {g: (got[g], floor[g]) for g in GROUPS if got[g] > FLOOR_FACTOR * floor[g]}


def _norm_input(channels_last: bool, layout: str, C: int = 8) -> torch.Tensor:
    """x for a norm of C channels in one of the layouts the models feed their norms."""
    if channels_last:  # (N, H, W, C): dense, the ConvNeXt block's permuted view, a row-strided slice
        shapes = {"contiguous": (2, 6, 5, C), "channels_last_memory": (2, C, 6, 5), "strided": (2, 12, 5, C)}
    else:  # (N, C, H, W): dense, torch.channels_last memory format, every other sample
        shapes = {"contiguous": (2, C, 6, 5), "channels_last_memory": (2, C, 6, 5), "strided": (4, C, 6, 5)}
    x = torch.randn(shapes[layout], device=DEVICE)
    if layout == "strided":
        return x[:, ::2] if channels_last else x[::2]
    if layout == "channels_last_memory":
        return x.permute(0, 2, 3, 1) if channels_last else x.contiguous(memory_format=torch.channels_last)
    return x


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("layout", ["contiguous", "channels_last_memory", "strided"])
@pytest.mark.parametrize("channels_last", [True, False], ids=["rows", "channels_first"])
def test_the_eager_modules_return_dyts_layout(channels_last, layout, precision, path):
    """Eager32 and Eager64 return what dyt.DyT returns for the same input: dtype, shape and strides, so
    that the layers after the norm see the same tensor (_as_dyt_returns)."""
    x = _norm_input(channels_last, layout)
    outs = {}
    for name in ("dyt", "eager32", "eager64"):
        norm = NORMS[name](x.shape[-1 if channels_last else 1], channels_last=channels_last).to(DEVICE)
        with torch.autocast(DEVICE.type, dtype=torch.bfloat16, enabled=precision == "bf16"):
            y = norm(x.to(torch.bfloat16) if precision == "bf16" else x)
        outs[name] = (y.dtype, tuple(y.shape), y.stride())
    assert outs["eager32"] == outs["dyt"] and outs["eager64"] == outs["dyt"], outs


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("model_name", list(MODELS))
def test_dyt_trains_like_the_eager_module(model_name, precision, path):
    worst = train_in_lockstep(model_name, precision, ("eager32", "eager64", "dyt"))
    floor, got = worst["eager64"], worst["dyt"]
    assert floor["weight"] > 0, f"the float64 and float32 evaluations agree bit for bit: no floor ({floor})"
    over = _over(got, floor)
    assert not over, f"dyt drifts past {FLOOR_FACTOR} x the float64-vs-float32 floor: {over} (floor {floor})"


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_dgamma_off_by_1e4_relative_is_caught(precision, path):
    worst = train_in_lockstep("prenorm", precision, ("eager32", "eager64", "mutant"))
    floor, got = worst["eager64"], worst["mutant"]
    if FLOOR_FACTOR * floor["weight"] >= MUTANT_SCALE - 1:
        why = f"{precision} at these sizes cannot resolve a dgamma error of {MUTANT_SCALE - 1:g}"
        pytest.skip(
            f"{why}: its float64-vs-float32 floor is {floor['weight']:.2g} (x {FLOOR_FACTOR:g} allowed)"
        )
    assert got["weight"] > FLOOR_FACTOR * floor["weight"], (got, floor)
