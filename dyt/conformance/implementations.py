"""The implementations the conformance checks judge, each called as (x, alpha, gamma, beta) -> y.

An implementation under test is one of:
- a function `(x, alpha, gamma, beta) -> y`, differentiable through autograd;
- a torch.autograd.Function subclass, called through its `apply(x, alpha, gamma, beta)`;
- an nn.Module class built from the channel count C (`cls(C)`, else `cls(C, channels_last=True)`, the
  paper's signature), whose parameters are found under the names the paper, Liger-Kernel and timm use
  (alpha; weight or gamma; bias or beta) or under the names the caller gives; it is called through
  torch.func.functional_call with the check's own alpha, gamma and beta, so the gradients reach them.

Names (`resolve`): `dyt` (this project), `eager` (the paper's expression as a function), `paper` (the
paper's DynamicTanh module, through the module adapter), `liger` (Liger-Kernel's LigerDyTFunction),
`liger_module` (its LigerDyT module), `compile:NAME` (torch.compile of implementation NAME; `compile` alone
is `compile:eager`), and `module:attr` for anything importable.

What an implementation supports (Capabilities) is declared or probed: declared by a `dyt_conformance`
mapping on the object (or by the caller, `declare`), probed on a tiny input otherwise; a check that needs
what the implementation does not support reads "not supported" in the verdict, not failed.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from collections.abc import Callable, Mapping

import torch
from torch import nn

BUILTINS = ("dyt", "eager", "paper", "compile", "liger", "liger_module")

# What a check may need beyond the contract's core (bf16/fp16/fp32 x, parameters in x's dtype, beta):
# each is True (supported), False (not) or None (not declared: probe it).
CAPABILITIES = {
    "no_beta": "beta=None (DyT without a bias, the LLaMA recipe)",
    "float32_params": "float32 parameters with 16-bit x (mixed precision)",
    "cpu": "CPU tensors",
    "channels_first": "channels-first input (N, C, *spatial), scaled along dim 1",
    "over_2_31_elements": "more than 2^31 elements in x",
}

# Parameter names by role, in the order they are looked for on a module: the paper's and timm's first,
# then Liger-Kernel's.
PARAMETER_NAMES = {"alpha": ("alpha",), "gamma": ("weight", "gamma"), "beta": ("bias", "beta")}


class ImplementationError(ValueError):
    """A name or object that cannot be judged, with the reason in one line."""


@dataclasses.dataclass(frozen=True)
class Implementation:
    """One implementation under test: its name (as given), the call (x, alpha, gamma, beta) -> y, the
    channels-first call where it has one, what it declares it supports (None: probe), and whether it is
    this project's own (dyt's internal suites apply to it alone)."""

    name: str
    fn: Callable
    channels_first_fn: Callable | None = None
    declared: Mapping[str, bool | None] = dataclasses.field(default_factory=dict)
    ours: bool = False

    def __call__(self, x, alpha, gamma, beta=None):
        return self.fn(x, alpha, gamma, beta)


def paper_expression(x, alpha, gamma, beta=None):
    """The paper's module's forward (`tanh(alpha * x) * weight + bias`) as a function, plain PyTorch."""
    y = torch.tanh(alpha * x) * gamma
    return y if beta is None else y + beta


class DynamicTanh(nn.Module):
    """The paper's DyT module (Zhu et al., "Transformers without Normalization", its reference code's
    class and forward): alpha (1,), weight and bias (C,), channels_last or (N, C, H, W)."""

    def __init__(self, normalized_shape: int, channels_last: bool, alpha_init_value: float = 0.5):
        super().__init__()
        self.channels_last = channels_last
        self.alpha = nn.Parameter(torch.ones(1) * alpha_init_value)
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.bias = nn.Parameter(torch.zeros(normalized_shape))

    def forward(self, x):
        x = torch.tanh(self.alpha * x)
        if self.channels_last:
            return x * self.weight + self.bias
        return x * self.weight[:, None, None] + self.bias[:, None, None]


def _dyt() -> Implementation:
    def dyt_rows(x, alpha, gamma, beta=None):
        # Imported at the call: resolving at pytest's configure must not load the kernels before a suite's
        # patches (the repository's mutants) are in place.
        from dyt.ops import dyt

        return dyt(x, alpha, gamma, beta)

    def dyt_channels_first(x, alpha, gamma, beta=None):
        from dyt.ops import dyt_channels_first

        return dyt_channels_first(x, alpha, gamma, beta)

    everything = dict.fromkeys(CAPABILITIES, True)
    return Implementation("dyt", dyt_rows, dyt_channels_first, everything, ours=True)


def _liger() -> Callable:
    try:
        from liger_kernel.ops.dyt import LigerDyTFunction
    except ImportError:
        from liger_kernel.ops import LigerDyTFunction
    return LigerDyTFunction


def _liger_module() -> type:
    try:
        from liger_kernel.transformers.dyt import LigerDyT
    except ImportError:
        from liger_kernel.transformers import LigerDyT
    return LigerDyT


def _compiled(inner: Implementation, name: str) -> Implementation:
    # Every shape of the suite compiles once; past Dynamo's default limit it would run eager silently.
    for limit in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, limit):
            setattr(torch._dynamo.config, limit, max(1024, getattr(torch._dynamo.config, limit)))
    cf = None if inner.channels_first_fn is None else torch.compile(inner.channels_first_fn)
    return Implementation(name, torch.compile(inner.fn), cf, dict(inner.declared))


def adapt(name: str, obj, *, parameter_names: Mapping[str, str] | None = None,
          declared: Mapping[str, bool] | None = None) -> Implementation:  # fmt: skip
    """obj (a function, an autograd.Function subclass or an nn.Module class) as an Implementation named
    name; declared overrides the object's own `dyt_conformance` declarations; parameter_names maps roles
    (alpha, gamma, beta) to a module's parameter names. ImplementationError where obj is none of these."""
    own = getattr(obj, "dyt_conformance", None) or {}
    unknown = set(own) | set(declared or {}) - set(CAPABILITIES)
    if unknown:
        raise ImplementationError(
            f"{name}: unknown capabilities {sorted(unknown)}; known: {sorted(CAPABILITIES)}"
        )
    claims = {**own, **(declared or {})}
    if isinstance(obj, type) and issubclass(obj, torch.autograd.Function):
        return Implementation(name, _autograd_function(obj), declared=claims)
    if isinstance(obj, type) and issubclass(obj, nn.Module):
        rows, cf = _module_calls(name, obj, parameter_names or {})
        return Implementation(name, rows, cf, claims)
    if isinstance(obj, type) or not callable(obj):
        raise ImplementationError(f"{name}: a {type(obj).__name__} is not a function, an autograd.Function "
                                  "subclass or an nn.Module class")  # fmt: skip
    try:
        inspect.signature(obj).bind(object(), object(), object(), None)
    except TypeError as exc:
        raise ImplementationError(f"{name}: cannot be called as (x, alpha, gamma, beta): {exc}") from None
    except ValueError:
        pass  # no signature to inspect (a builtin): the checks will tell
    return Implementation(name, obj, declared=claims)


def _autograd_function(cls: type) -> Callable:
    def call(x, alpha, gamma, beta=None):
        return cls.apply(x, alpha, gamma, beta)

    call.__qualname__ = f"{cls.__qualname__}.apply"
    return call


def _build(name: str, cls: type, channels: int, channels_last: bool, bias: bool) -> nn.Module:
    """cls(C) (or cls(C, channels_last=...)), with its bias switched off where bias is False, through the
    keyword its constructor takes for it (bias or beta). ImplementationError where none fits."""
    params = inspect.signature(cls).parameters
    kwargs = {}
    if not channels_last:
        if "channels_last" not in params:
            raise ImplementationError(f"{name}: {cls.__qualname__} takes no channels_last argument")
        kwargs["channels_last"] = False
    elif "channels_last" in params and params["channels_last"].default is inspect.Parameter.empty:
        kwargs["channels_last"] = True
    if not bias:
        flag = next((k for k in ("bias", "beta") if k in params), None)
        if flag is None:
            raise ImplementationError(f"{name}: {cls.__qualname__} has no bias=/beta= switch for beta=None")
        kwargs[flag] = False
    try:
        return cls(channels, **kwargs)
    except TypeError as exc:
        raise ImplementationError(
            f"{name}: {cls.__qualname__}({channels}, **{kwargs}) fails: {exc}"
        ) from None


def _roles(name: str, module: nn.Module, given: Mapping[str, str], bias: bool) -> dict[str, str]:
    """Parameter name by role (alpha, gamma, beta) on module: given, else the first of PARAMETER_NAMES
    that the module has."""
    own = dict(module.named_parameters())
    roles = {}
    for role, candidates in PARAMETER_NAMES.items():
        if role == "beta" and not bias:
            continue
        found = given.get(role) or next((c for c in candidates if c in own), None)
        if found not in own:
            raise ImplementationError(
                f"{name}: no parameter for {role} among {sorted(own)} (looked for "
                f"{given.get(role) or candidates}; name it with --dyt-params alpha=...,gamma=...,beta=...)"
            )
        roles[role] = found
    return roles


def _module_calls(name: str, cls: type, given: Mapping[str, str]) -> tuple[Callable, Callable | None]:
    """The row call and the channels-first call (None where the class takes no channels_last) of an
    nn.Module class: a module built once per (C, layout, bias) and called with the check's tensors in
    place of its parameters."""
    built: dict[tuple, tuple[nn.Module, dict]] = {}

    def call(x, alpha, gamma, beta, channels_last: bool):
        key = (gamma.shape[0], channels_last, beta is not None)
        if key not in built:
            module = _build(name, cls, *key)
            built[key] = (module, _roles(name, module, given, beta is not None))
        module, roles = built[key]
        tensors = {roles["alpha"]: alpha, roles["gamma"]: gamma}
        if beta is not None:
            tensors[roles["beta"]] = beta
        return torch.func.functional_call(module, tensors, (x,), strict=False)

    def rows(x, alpha, gamma, beta=None):
        return call(x, alpha, gamma, beta, True)

    def channels_first(x, alpha, gamma, beta=None):
        return call(x, alpha, gamma, beta, False)

    takes_layout = "channels_last" in inspect.signature(cls).parameters
    return rows, channels_first if takes_layout else None


def _import(name: str, spec: str):
    module_name, _, attr = spec.partition(":")
    try:
        obj = importlib.import_module(module_name)
    except ImportError as exc:
        raise ImplementationError(f"{name}: module {module_name!r} does not import: {exc}") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ImplementationError(f"{name}: {module_name} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


def resolve(name: str, *, parameter_names: Mapping[str, str] | None = None,
            declared: Mapping[str, bool] | None = None) -> Implementation:  # fmt: skip
    """The implementation called name (a built-in of BUILTINS, `compile:NAME`, or `module:attr`);
    ImplementationError naming the problem (unknown name, an import that fails, not callable, a signature
    that cannot take (x, alpha, gamma, beta))."""
    if name == "dyt":
        return _dyt()
    if name == "compile" or name.startswith("compile:"):
        inner = name.partition(":")[2] or "eager"
        return _compiled(resolve(inner, parameter_names=parameter_names, declared=declared), name)
    factories = {"eager": lambda: paper_expression, "paper": lambda: DynamicTanh,
                 "liger": _liger, "liger_module": _liger_module}  # fmt: skip
    if name in factories:
        try:
            obj = factories[name]()
        except ImportError as exc:
            raise ImplementationError(f"{name}: its library does not import here: {exc}") from None
        return adapt(name, obj, parameter_names=parameter_names, declared=declared)
    if ":" not in name:
        raise ImplementationError(
            f"{name!r}: not a built-in ({', '.join(BUILTINS)}), not compile:NAME and not of the form "
            "module:attr"
        )
    return adapt(name, _import(name, name), parameter_names=parameter_names, declared=declared)


@dataclasses.dataclass(frozen=True)
class Support:
    """Whether an implementation supports a capability, and how that is known: "declared" or
    "probed" (with the probe's error where it failed)."""

    capability: str
    supported: bool
    how: str

    def reason(self) -> str:
        """The verdict's words for an unsupported capability."""
        return f"not supported: {CAPABILITIES[self.capability]} ({self.how})"


_PROBED: dict[tuple[str, str, str], Support] = {}


def supports(impl: Implementation, capability: str, device: torch.device) -> Support:
    """What impl declares for capability, else what a tiny call shows on device (once per implementation,
    capability and device). more than 2^31 elements is not probed (it takes GBs): undeclared, the check
    itself judges it."""
    if capability not in CAPABILITIES:
        raise KeyError(f"unknown capability {capability!r}; known: {sorted(CAPABILITIES)}")
    claim = impl.declared.get(capability)
    if claim is not None:
        return Support(capability, bool(claim), "declared")
    if capability == "over_2_31_elements":
        return Support(capability, True, "not declared; judged by its check")
    key = (impl.name, capability, str(device))
    if key not in _PROBED:
        _PROBED[key] = _probe(impl, capability, device)
    return _PROBED[key]


def _probe(impl: Implementation, capability: str, device: torch.device) -> Support:
    dev = torch.device("cpu") if capability == "cpu" else device
    x_dtype = torch.bfloat16 if capability == "float32_params" else torch.float32
    gen = torch.Generator().manual_seed(0)
    shape = (2, 8, 3, 3) if capability == "channels_first" else (4, 8)
    x = torch.randn(shape, generator=gen).to(dev, x_dtype).requires_grad_()
    alpha = torch.full((1,), 0.5, device=dev, requires_grad=True)
    gamma = torch.ones(8, device=dev, requires_grad=True)
    beta = None if capability == "no_beta" else torch.zeros(8, device=dev, requires_grad=True)
    fn = impl.channels_first_fn if capability == "channels_first" else impl.fn
    if fn is None:
        return Support(capability, False, "probed: the implementation has no channels-first call")
    try:
        y = fn(x, alpha, gamma, beta)
        if not isinstance(y, torch.Tensor) or y.shape != x.shape:
            raise TypeError(f"returned {type(y).__name__} {getattr(y, 'shape', '')}, not x's shape")
        y.sum().backward()
    except Exception as exc:  # noqa: BLE001 - any failure of the tiny call means: not supported
        first = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else ""
        return Support(capability, False, f"probed: {type(exc).__name__}: {first}")
    return Support(capability, True, "probed")
