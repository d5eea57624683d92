"""nn.Module wrapper and the norm -> DyT conversion helpers of the DyT paper's recipes."""

from __future__ import annotations

import functools
import itertools
import logging
import numbers
import operator
import warnings
from collections.abc import Mapping
from typing import NamedTuple

import numpy as np
import torch
from torch import nn

from dyt.ops import SUPPORTED_DTYPES, dyt, dyt_channels_first, dyt_float8_training, dyt_packed, split_params

_LOG = logging.getLogger("dyt")
_DTYPE_NAMES = "float32, bfloat16 or float16"


class DyT(nn.Module):
    """Dynamic Tanh: y = weight * tanh(alpha * x) + bias, a drop-in replacement for LayerNorm.

    Parameter names and defaults follow the paper's reference module (alpha (1,) = alpha_init, weight
    ones, bias zeros), so its state dicts load unchanged. channels_last=False takes (N, C, H, W) and
    scales along dim 1 (ConvNeXt) through dyt.dyt_channels_first: contiguous input and input in
    torch.channels_last memory format run without a copy.

    num_features must be an int; alpha_init a real number (a Python, NumPy or one-element torch scalar;
    NaN and +-inf included, which dyt computes as its float64 reference does); bias, channels_last and
    autocast_output bools (Python's or NumPy's; not ints, strings or None); dtype (of the parameters)
    float32, bfloat16 or float16. An argument of another type is refused with a TypeError that names the
    class, the argument, what it takes and what came. The output has
    x's dtype, also under autocast: autocast does not recast DyT's inputs or output, whereas nn.LayerNorm
    (and the paper's eager module, by type promotion) return float32 there for float32 parameters.

    autocast_output=True: where autocast is on for x's device, the output comes in autocast's dtype (the
    float32 result rounded once, dyt's out_dtype), which is what a linear layer or convolution after the
    norm casts it to: that cast's kernel and its backward's are gone, the values it feeds them the same
    bits. Right where the output feeds only such layers (the pre-norm blocks of ViT and LLaMA); where it
    also feeds a residual sum or another float32 consumer, that consumer sees the rounded values
    (docs/host-path.md, "Autocast output").
    """

    autocast_output = False  # the class's default: modules pickled before the argument existed load with it
    # dyt.fp8.Float8Input where dyt.float8_training.convert_to_float8_training wired this norm to write
    # FP8 for the float8 linear layers it feeds; None: the output as above.
    float8_input = None

    def __init__(self, num_features: int, *, alpha_init: float = 0.5, bias: bool = True,
                 channels_last: bool = True, autocast_output: bool = False, device=None,
                 dtype=None):  # fmt: skip
        super().__init__()
        factory = self._settle(num_features, alpha_init, bias, channels_last, autocast_output, device,
                               dtype)  # fmt: skip
        self.alpha = nn.Parameter(torch.full((1,), self.alpha_init, **factory))
        self.weight = nn.Parameter(torch.ones(self.num_features, **factory))
        self.bias = nn.Parameter(torch.zeros(self.num_features, **factory)) if bias else None

    def _settle(self, num_features, alpha_init, bias, channels_last, autocast_output, device, dtype) -> dict:
        """Checks the arguments (a TypeError naming the class, the argument, what it takes and what came),
        sets num_features, alpha_init (a float), channels_last and autocast_output (bools); the parameters'
        factory keywords."""
        name = type(self).__name__
        try:
            if isinstance(num_features, bool):
                raise TypeError
            width = operator.index(num_features)
        except TypeError:
            raise TypeError(
                f"{name}: num_features must be an int, got {type(num_features).__name__} {num_features!r}"
            ) from None
        if width < 1:
            raise ValueError(f"{name}: num_features must be a positive int, got {width}")
        alpha = _real(alpha_init)
        if alpha is None:
            raise TypeError(f"{name}: alpha_init must be a real number, got {_describe(alpha_init)}")
        flags = {"bias": bias, "channels_last": channels_last, "autocast_output": autocast_output}
        for arg, value in flags.items():
            if not isinstance(value, (bool, np.bool_)):
                raise TypeError(f"{name}: {arg} must be a bool, got {_describe(value)}")
        if dtype is not None and dtype not in SUPPORTED_DTYPES:
            raise TypeError(f"{name}: dtype must be {_DTYPE_NAMES}, got {dtype}")
        self.num_features = width
        self.alpha_init = alpha
        self.channels_last = bool(channels_last)
        self.autocast_output = bool(autocast_output)
        return {"device": device, "dtype": dtype}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # The parameters straight from _parameters: attribute access goes through nn.Module.__getattr__,
        # a Python call per parameter on every forward (docs/host-path.md, "Native path"). A name not
        # there (bias=False, or a parametrization by torch.nn.utils.parametrize) is read as an attribute.
        params = self._parameters
        alpha = params["alpha"] if "alpha" in params else self.alpha
        weight = params["weight"] if "weight" in params else self.weight
        bias = params["bias"] if "bias" in params else self.bias
        if self.float8_input is not None:
            return dyt_float8_training(x, alpha, weight, bias, self.float8_input)
        out_dtype = _autocast_dtype(x) if self.autocast_output else None
        try:
            if self.channels_last:
                return dyt(x, alpha, weight, bias, out_dtype=out_dtype)
            return dyt_channels_first(x, alpha, weight, bias, out_dtype=out_dtype)
        except (ValueError, TypeError) as err:
            if not str(err).startswith("dyt:"):
                raise
            raise type(err)(self._explain(x, err)) from err

    def _explain(self, x, err: Exception) -> str:
        """dyt's complaint in the module's terms: weight and bias, num_features, the channel dimension."""
        head = f"{self!r}"
        if not isinstance(x, torch.Tensor):
            return f"{head}: input must be a torch.Tensor, got {type(x).__name__}"
        if x.dtype not in SUPPORTED_DTYPES:
            return f"{head}: input must be a floating tensor of dtype {_DTYPE_NAMES}, got {x.dtype}"
        for name, p in self._own_parameters():
            if p is not None and p.dtype not in SUPPORTED_DTYPES:
                return (
                    f"{head}: parameter {name} has dtype {p.dtype}; DyT's parameters must be {_DTYPE_NAMES} "
                    "(e.g. module.float() after module.double())"
                )
        shape = tuple(x.shape)
        n = self.weight.shape[0] if self.weight.dim() == 1 else self.num_features
        params = "weight" if self.bias is None else "weight and bias"
        if self.channels_last:
            layout, where, dims_ok = f"(..., {n})", "along the last dimension", x.dim() >= 1
            channels = shape[-1] if dims_ok else None
        else:
            layout, where, dims_ok = f"(N, {n}, ...)", "along dim 1, not the last", x.dim() >= 2
            channels = shape[1] if dims_ok else None
        if channels != n:
            return (
                f"{head}: x must have shape {layout}: C = num_features = {n} (the size of {params}) {where}; "
                f"got x of shape {shape}"
            )
        if any(p is not None and p.device != x.device for p in (self.alpha, self.weight, self.bias)):
            return (
                f"{head}: input is on {x.device} but the module's parameters are on {self.weight.device}: "
                "move the module (module.to(x.device)) or the input"
            )
        detail = str(err).removeprefix("dyt:").strip().replace("gamma", "weight").replace("beta", "bias")
        return f"{head}: {detail}"

    def _own_parameters(self):
        return (("alpha", self.alpha), ("weight", self.weight), ("bias", self.bias))

    def extra_repr(self) -> str:
        cast = ", autocast_output=True" if self.autocast_output else ""
        return (f"{self.num_features}, alpha_init={self.alpha_init}, bias={self.bias is not None}, "
                f"channels_last={self.channels_last}{cast}")  # fmt: skip


def _real(value) -> float | None:
    """value as a float where it is a real number: a numbers.Real that is not a bool (int, float, NumPy's
    integer and floating scalars) or a torch tensor of one element (shape () or (1,), as DyT's alpha) of a
    floating or integer dtype with a value (not on meta); else None."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1 or value.is_meta or value.dtype == torch.bool or value.is_complex():
            return None
        return float(value.item())
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        return None
    return float(value)


def _describe(value) -> str:
    """An argument for a message: its type and repr (cut at 60 characters), a tensor by dtype and shape."""
    if isinstance(value, torch.Tensor):
        return f"Tensor of dtype {value.dtype} and shape {tuple(value.shape)}"
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 60 else text[:57] + '...'}"


def _autocast_dtype(x) -> torch.dtype | None:
    """Autocast's dtype for x's device where autocast is on there, else None."""
    if not isinstance(x, torch.Tensor) or not torch.is_autocast_enabled(x.device.type):
        return None
    return torch.get_autocast_dtype(x.device.type)


class PackedDyT(DyT):
    """DyT whose alpha, weight and bias are one parameter, `params` = [weight (C), bias (C), alpha (1)]
    ([weight, alpha] without bias): a layer then has one parameter where DyT has three and LayerNorm two,
    so autograd accumulates one gradient and the optimizer updates one tensor per layer, which is what
    sets the pace of host-bound training (docs/host-path.md, "Packed parameters").

    The same arguments, output and gradients as DyT. Its state dict holds alpha, weight and bias as DyT's
    does (as copies), so the checkpoints of the two load into each other. alpha, weight and bias are views
    of params: reading them, and changing their values in place (module.weight.data.fill_(2.0)), works as
    on DyT; they are not parameters of their own, so per-parameter optimizer settings (a weight decay for
    weight but not alpha) do not apply to one of them alone. All three share params' dtype.
    """

    def __init__(self, num_features: int, *, alpha_init: float = 0.5, bias: bool = True,
                 channels_last: bool = True, autocast_output: bool = False, device=None,
                 dtype=None):  # fmt: skip
        nn.Module.__init__(self)
        factory = self._settle(num_features, alpha_init, bias, channels_last, autocast_output, device,
                               dtype)  # fmt: skip
        self.has_bias = bool(bias)
        init = [torch.ones(self.num_features, **factory)]
        if self.has_bias:
            init.append(torch.zeros(self.num_features, **factory))
        init.append(torch.full((1,), self.alpha_init, **factory))
        self.params = nn.Parameter(torch.cat(init))
        self.register_state_dict_post_hook(_unpacked_state)
        self.register_load_state_dict_pre_hook(_packed_state)

    @property
    def alpha(self) -> torch.Tensor:
        return split_params(self.params, self.has_bias)[0]

    @property
    def weight(self) -> torch.Tensor:
        return split_params(self.params, self.has_bias)[1]

    @property
    def bias(self) -> torch.Tensor | None:
        return split_params(self.params, self.has_bias)[2]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        try:
            own = self._parameters  # read as DyT.forward reads its parameters
            params = own["params"] if "params" in own else self.params
            if self.float8_input is not None:
                return dyt_float8_training(x, *split_params(params, self.has_bias), self.float8_input)
            out_dtype = _autocast_dtype(x) if self.autocast_output else None
            return dyt_packed(x, params, bias=self.has_bias, channels_first=not self.channels_last,
                              out_dtype=out_dtype)  # fmt: skip
        except (ValueError, TypeError) as err:
            if not str(err).startswith("dyt:"):
                raise
            raise type(err)(self._explain(x, err)) from err

    def _own_parameters(self):
        return (("params", self.params),)


_PACKED_NAMES = ("weight", "bias", "alpha")


def _unpacked_state(module: PackedDyT, state: dict, prefix: str, local_metadata) -> None:
    """state_dict's post-hook: params as DyT's alpha, weight and bias, copies that share no storage (a
    state dict of views of one storage is refused by savers such as safetensors')."""
    params = state.pop(prefix + "params")
    alpha, weight, bias = split_params(params, module.has_bias)
    state[prefix + "alpha"] = alpha.clone()
    state[prefix + "weight"] = weight.clone()
    if bias is not None:
        state[prefix + "bias"] = bias.clone()


def _packed_state(module: PackedDyT, state: dict, prefix: str, local_metadata, strict, missing_keys,
                  unexpected_keys, error_msgs) -> None:  # fmt: skip
    """load_state_dict's pre-hook: DyT's alpha, weight and bias packed into params, a shape mismatch
    reported in their names. A state dict without all of them is left as it is (load_state_dict then
    names params as missing)."""
    names = [n for n in _PACKED_NAMES if n != "bias" or module.has_bias]
    if not all(prefix + n in state for n in names):
        return
    parts = [state.pop(prefix + n) for n in names]
    wanted = [(module.num_features,)] * (len(names) - 1) + [(1,)]
    mismatched = [
        (name, tuple(part.shape), shape)
        for name, part, shape in zip(names, parts, wanted, strict=True)
        if tuple(part.shape) != shape and not (name == "alpha" and part.numel() == 1)
    ]
    for name, got, shape in mismatched:
        error_msgs.append(
            f"size mismatch for {prefix}{name}: copying a param with shape {got} from checkpoint, the shape "
            f"in current model is {shape}."
        )
    if mismatched:  # the module's own value, so that params is not also reported missing
        state[prefix + "params"] = module.params.detach()
    else:
        state[prefix + "params"] = torch.cat([t.reshape(-1).to(module.params.dtype) for t in parts])


class Converted(NamedTuple):
    """One module replaced by convert_norms: its qualified name in the model ("" for the model itself),
    the class it had (module.qualname), and the DyT that took its place."""

    name: str
    source: str
    dyt: DyT


LAYOUTS = ("channels_last", "channels_first", "keep")
# nn.LayerNorm subclasses whose layout is known, by (top-level package, class name): they need no import.
_KNOWN_SUBCLASSES = {("timm", "LayerNorm"): "channels_last", ("timm", "LayerNorm2d"): "channels_first"}


def _qualname(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _is_rmsnorm(m: nn.Module) -> bool:
    """nn.RMSNorm, and RMSNorm modules of other libraries (Hugging Face's LlamaRMSNorm and its kind): a
    class whose name ends in RMSNorm, with a one-dimensional weight."""
    if isinstance(m, getattr(nn, "RMSNorm", ())):
        return True
    weight = getattr(m, "weight", None)
    return type(m).__name__.endswith("RMSNorm") and isinstance(weight, torch.Tensor) and weight.dim() == 1


def _layout(m: nn.LayerNorm, name: str, layouts: Mapping) -> str:
    cls = type(m)
    for klass in cls.__mro__:
        if klass in layouts:
            return layouts[klass]
    if cls is nn.LayerNorm:
        return "channels_last"
    known = _KNOWN_SUBCLASSES.get((cls.__module__.partition(".")[0], cls.__name__))
    if known is not None:
        return known
    raise TypeError(
        f"convert_layernorm: cannot tell which dimension the module {name or '(the model itself)'} "
        f"({_qualname(cls)}, a subclass of nn.LayerNorm) normalizes; pass "
        f"layouts={{{cls.__name__}: 'channels_last'}} (normalizes the last dimension), 'channels_first' "
        "(dim 1, as (N, C, H, W)) or 'keep' (leave it as it is)"
    )


def _width(m: nn.Module, name: str) -> int:
    shape = getattr(m, "normalized_shape", None)
    if shape is None:
        shape = tuple(m.weight.shape)
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    if len(shape) != 1:
        raise ValueError(
            f"convert_layernorm: only a 1-D normalized_shape converts, got {shape} at {name or 'the model'} "
            f"({_qualname(type(m))})"
        )
    return shape[0]


def _factory(m: nn.Module, name: str, around: tuple, keep: str) -> dict:
    """The device and dtype of m's DyT: those of m's first floating-point parameter or buffer (in the order
    of parameters(), then buffers()); where m has none, as nn.LayerNorm(C, elementwise_affine=False), those
    of the nearest enclosing module that has one anywhere inside it (its parent first, the model itself
    last); where the model has none either, {} (the factory defaults). around: the (name, module) pairs
    enclosing m, the model first. A dtype that DyT's parameters cannot have is refused with a TypeError
    that names the module and the way out (keep: how to leave the norm as it is)."""
    found = ((n, o, _first_floating(o)) for n, o in ((name, m), *reversed(around)))
    owner_name, owner, ref = next(((n, o, t) for n, o, t in found if t is not None), ("", None, None))
    if ref is None:
        return {}
    if ref.dtype not in SUPPORTED_DTYPES:
        where = f"{name or '(the model itself)'} ({_qualname(type(m))})"
        if owner is m:
            has = f"has dtype {ref.dtype}"
        else:
            has = (f"has no parameters of its own and the module around it, {owner_name or 'the model'} "
                   f"({type(owner).__name__}), has dtype {ref.dtype}")  # fmt: skip
        raise TypeError(
            f"convert_layernorm: cannot convert the module {where}: it {has}, and DyT's parameters must be "
            f"{_DTYPE_NAMES}; convert the model first (model.float(), or model.bfloat16() or model.half()), "
            f"or {keep}"
        )
    return {"device": ref.device, "dtype": ref.dtype}


def _first_floating(m: nn.Module) -> torch.Tensor | None:
    """m's first floating-point parameter (its submodules' included), else its first such buffer."""
    return next((t for t in itertools.chain(m.parameters(), m.buffers()) if t.is_floating_point()), None)


def convert_norms(module: nn.Module, alpha_init: float = 0.5, *, bias: bool | None = None,
                  rmsnorm: bool = False, layouts: Mapping[type, str] | None = None, packed: bool = True,
                  autocast_output: bool = False) -> tuple[nn.Module, list[Converted]]:  # fmt: skip
    """Replaces the norms of module (itself included) by fresh DyT modules; returns (module, converted).

    - nn.LayerNorm becomes DyT(C); timm's LayerNorm2d (channels-first, recognized by its class name and
      package, timm need not be imported) becomes DyT(C, channels_last=False). Any other subclass of
      nn.LayerNorm is not guessed: a TypeError names it and says what to pass in layouts, which maps a
      class (subclasses included) to "channels_last", "channels_first" or "keep".
    - bias: None (the default) gives the DyT a bias exactly when the LayerNorm has one, so a model
      whose norms have no bias keeps the parameters its author chose; True gives every DyT a bias, as
      the paper's convert_ln_to_dyt does (its DynamicTanh always has alpha, weight and bias), so that a
      checkpoint of a model converted by the paper's code loads strictly; False gives none a bias.
    - rmsnorm=True also converts nn.RMSNorm and RMSNorm modules of other libraries (a class whose name
      ends in RMSNorm with a (C,) weight, such as Hugging Face's LlamaRMSNorm) into DyT(C, bias=False),
      the paper's LLaMA recipe; they are left as they are by default.
    - Each DyT keeps the norm's device and dtype: those of the norm's first floating-point parameter or
      buffer; for a norm without any (nn.LayerNorm(C, elementwise_affine=False)), those of the nearest
      enclosing module that has one (its parent's first, else its grandparent's, up to the model's own
      first one); the factory defaults (CPU, float32) where the model has none. A norm of a dtype that DyT
      cannot have (float64) is refused with a TypeError that names it and what to do (model.float() first,
      or layouts={cls: "keep"}). Every norm is checked and its DyT made before any is replaced: an error
      leaves the model as it was.
    - A converted nn.TransformerEncoderLayer has PyTorch's fused inference path turned off (it runs
      LayerNorm math and reads norm.eps): in eval and under torch.inference_mode it runs its modules, DyT
      among them; a converted nn.TransformerEncoder likewise stops packing inputs into nested tensors.
    - packed (the default) makes PackedDyT modules: alpha, weight and bias in one parameter, `params`, so
      autograd and the optimizer handle one tensor a norm where DyT has three and LayerNorm two (the host
      cost of a training step: docs/host-path.md, "Packed parameters"). Its state dict is DyT's (alpha,
      weight, bias), so the paper's checkpoints load either way. packed=False makes DyT modules, whose
      alpha, weight and bias are parameters of their own: for an optimizer setting of alpha's own
      (alpha_parameters), or rules that pick parameters by name.
    - autocast_output=True makes every DyT return autocast's dtype under autocast (DyT's argument: right
      where each norm feeds only linear layers or convolutions).
    """
    layouts = dict(layouts or {})
    for cls, layout in layouts.items():
        if layout not in LAYOUTS:
            raise ValueError(f"convert_norms: layouts[{cls!r}] must be one of {LAYOUTS}, got {layout!r}")
    make = functools.partial(PackedDyT if packed else DyT, autocast_output=autocast_output)
    plan = _plan(module, make, alpha_init, bias, rmsnorm, layouts)
    for parent, attr, c in plan:
        if parent is None:
            module = c.dyt
        else:
            setattr(parent, attr, c.dyt)
    new = {id(c.dyt) for _, _, c in plan}
    for m in module.modules():
        if not isinstance(m, (nn.TransformerEncoderLayer, nn.TransformerEncoder)):
            continue
        if not any(id(sub) in new for sub in m.modules()):
            continue
        if isinstance(m, nn.TransformerEncoderLayer) and any(isinstance(n, DyT) for n in (m.norm1, m.norm2)):
            m.activation_relu_or_gelu = 0  # the first of the fused path's conditions that fails
        if isinstance(m, nn.TransformerEncoder):
            m.use_nested_tensor = False
    return module, [c for _, _, c in plan]


def _plan(model, make, alpha_init, bias, rmsnorm, layouts) -> list[tuple[nn.Module | None, str, Converted]]:
    """The norms of model that convert, each as (its parent, None for the model itself; its attribute name
    there; the Converted with its new DyT), in the order of a depth-first walk (model.named_modules()'s);
    replaces nothing, so that a norm that cannot convert stops the conversion before it changes the model.
    A norm's subtree is not walked; a submodule reached twice (shared) is walked once."""
    plan = []
    walked: set[int] = set()
    # (parent, attribute name, qualified name, module, the (name, module) pairs enclosing it)
    todo = [(None, "", "", model, ())]
    while todo:
        parent, attr, name, m, around = todo.pop()
        new = None
        if isinstance(m, nn.LayerNorm):
            layout = _layout(m, name, layouts)
            if layout != "keep":
                has_bias = getattr(m, "bias", None) is not None if bias is None else bias
                width = _width(m, name)
                keep = f"leave the norms of its class as they are with layouts={{{type(m).__name__}: 'keep'}}"
                factory = _factory(m, name, around, keep)
                last = layout == "channels_last"
                new = make(width, alpha_init=alpha_init, bias=has_bias, channels_last=last, **factory)
        elif rmsnorm and _is_rmsnorm(m):
            width, keep = _width(m, name), "leave the RMSNorm modules as they are (rmsnorm=False)"
            new = make(width, alpha_init=alpha_init, bias=False, **_factory(m, name, around, keep))
        if new is not None:
            plan.append((parent, attr, Converted(name, _qualname(type(m)), new)))
            continue
        if id(m) in walked:
            continue
        walked.add(id(m))
        inside = (*around, (name, m))
        children = [(m, n, f"{name}.{n}" if name else n, child, inside) for n, child in m.named_children()]
        todo.extend(reversed(children))
    return plan


def convert_layernorm(module: nn.Module, alpha_init: float = 0.5, *, bias: bool | None = None,
                      rmsnorm: bool = False, layouts: Mapping[type, str] | None = None, packed: bool = True,
                      autocast_output: bool = False) -> nn.Module:  # fmt: skip
    """convert_norms (see there for the arguments) that returns the module and says what it converted.

    The count per source class goes to the "dyt" logger (INFO); a model in which nothing converts gets
    a UserWarning (naming any RMSNorm modules left, which rmsnorm=True converts) instead of passing
    through unchanged without a word. convert_norms returns the list itself.
    """
    module, converted = convert_norms(module, alpha_init, bias=bias, rmsnorm=rmsnorm, layouts=layouts,
                                      packed=packed, autocast_output=autocast_output)  # fmt: skip
    if converted:
        counts: dict[str, int] = {}
        for c in converted:
            counts[c.source] = counts.get(c.source, 0) + 1
        _LOG.info("convert_layernorm: %s", ", ".join(f"{n} {src} -> DyT" for src, n in counts.items()))
        return module
    rms = sum(1 for m in module.modules() if _is_rmsnorm(m))
    hint = f"; {rms} RMSNorm module(s) left as they are (rmsnorm=True converts them)" if rms else ""
    warnings.warn(f"convert_layernorm: no norm converted in {type(module).__name__}{hint}", stacklevel=2)
    return module


def alpha_parameters(module: nn.Module) -> list[nn.Parameter]:
    """The alpha parameters of module's DyT modules, for an optimizer group of their own:

        model = dyt.convert_layernorm(model, packed=False)
        alphas = dyt.alpha_parameters(model)
        rest = [p for p in model.parameters() if all(p is not a for a in alphas)]
        opt = torch.optim.AdamW([{"params": rest}, {"params": alphas, "weight_decay": 0.0}])

    A PackedDyT holds its alpha inside its one parameter, where no optimizer setting can tell it apart:
    a ValueError names the first such module and the conversion that gives alpha a parameter of its own."""
    packed = next((name for name, m in module.named_modules() if isinstance(m, PackedDyT)), None)
    if packed is not None:
        raise ValueError(
            f"alpha_parameters: {packed or '(the model itself)'} is a PackedDyT, whose alpha is part of its "
            "one parameter; convert with dyt.convert_layernorm(model, packed=False) for alpha parameters of "
            "their own"
        )
    return [m.alpha for m in module.modules() if isinstance(m, DyT)]
