"""FP8 training with torchao's float8 linear layers, DyT's output handed to them already in FP8.

torchao's float8 training (torchao.float8.convert_to_float8_training, Float8Linear) casts each linear
layer's input with a dynamic tensorwise scale: an amax pass over the input, then a cast pass. Where the
input is a DyT's output, its scale is known without looking at it (|y[..., c]| <= |gamma[c]| + |beta[c]|,
dyt.fp8), so a wired DyT writes FP8 itself, in one pass (dyt.kernels.dyt_fwd_fp8_kernel), as torchao's
Float8TrainingTensor, which Float8Linear takes as it is (its input cast is skipped for a tensor already
cast) and which it reuses for its weight gradient (tensorwise scales hold along both dimensions).

torchao's own tensor type, not an adapter of dyt's: Float8Linear recognizes only it (a thin subclass of
dyt's would need a patched Float8Linear), and its dtype is the high-precision one, so autograd hands the
norm its gradient in 16 or 32 bits (a plain float8 output's gradient would be rounded to float8).

convert_to_float8_training(model) converts the linear layers with torchao, then wires each DyT (or
PackedDyT, channels-last) whose output feeds only Float8Linear layers with tensorwise input scaling. Which
norms those are is checked, not assumed: every use of the norm's output must be the input of such a layer
or a read of its metadata (size, shape, dim, dtype, device). With an example call (example=...), the
check watches that forward run (every torch function a norm's output reaches, under a TorchFunctionMode,
and every module it enters): it sees through any Python, as Hugging Face's models need. Without one, it
reads a torch.fx trace of the model, and a model that torch.fx cannot trace keeps every norm at 16 bits
(the account says to pass an example). A norm whose output also feeds anything else (a residual sum, a
layer left in high precision) keeps its 16-bit output; the result says which were wired and why each
other was not.

Route of a wired norm's forward: eager, the FP8 kernels on CUDA (and in Triton's interpreter), the plain
expression on other CPU tensors and under torch.compile, where Inductor fuses it with its neighbours (the
scale from the parameters: no reduction over the activation there either). The backward is dyt's
(torch.ops.dyt.backward), on the gradient the linear layers hand back.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from dyt import fp8
from dyt.fp8 import Float8Input


@dataclasses.dataclass
class Float8Conversion:
    """convert_to_float8_training's account: the qualified names of the wired norms, and of the DyT norms
    left in high precision with the reason."""

    wired: list[str]
    kept: dict[str, str]


def _torchao():
    """torchao's float8 package and its tensor module; an ImportError that names the extra."""
    try:
        import torchao.float8 as float8
        from torchao.float8 import float8_training_tensor as tensor
    except ImportError as err:  # pragma: no cover - the fp8 extra installs it
        raise ImportError(
            "dyt.float8_training needs torchao (pip install 'dyt[fp8]' or pip install torchao)"
        ) from err
    return float8, tensor


_METADATA_METHODS = {"size", "dim"}
_METADATA_ATTRIBUTES = {"shape", "dtype", "device", "ndim"}


def _input_scaling(linear) -> str | None:
    """Why this Float8Linear cannot take a dyt-cast input, or None where it can: dynamic tensorwise
    scaling of its input, for the output and for the weight gradient alike (it reuses the cast input)."""
    float8, _ = _torchao()
    config = linear.config
    cast, cast_gw = config.cast_config_input, config.cast_config_input_for_grad_weight
    tensorwise = float8.ScalingGranularity.TENSORWISE
    if cast.scaling_type is not float8.ScalingType.DYNAMIC or cast.scaling_granularity is not tensorwise:
        return f"its input is not cast with dynamic tensorwise scaling ({cast.short_str()})"
    if cast_gw != cast:
        return "its weight gradient casts the input otherwise than its output does"
    if cast.target_dtype not in fp8.FORMATS:
        return f"its input format {cast.target_dtype} is not one dyt writes"
    return None


class _Tracer(torch.fx.Tracer):
    """Keeps DyT and the linear layers as single nodes, whatever package they come from."""

    def is_leaf_module(self, m: nn.Module, qualname: str) -> bool:
        from dyt.module import DyT

        return isinstance(m, (DyT, nn.Linear)) or super().is_leaf_module(m, qualname)


def _consumers(model: nn.Module) -> tuple[dict[str, list], str | None]:
    """{DyT qualname: [(kind, target, node is its first argument)] of every use of its output}, or the
    reason torch.fx could not trace the model."""
    from dyt.module import DyT

    try:
        graph = _Tracer().trace(model)
    except Exception as err:  # noqa: BLE001 - any tracing failure means "not proven": keep 16 bits
        head = f"{type(err).__name__}: {(str(err).splitlines() or [''])[0][:120]}"
        return {}, f"torch.fx cannot trace the model ({head}); pass example=... to check by a forward run"
    modules = dict(model.named_modules())
    uses: dict[str, list] = {}
    for node in graph.nodes:
        if node.op == "call_module" and isinstance(modules.get(node.target), DyT):
            uses[node.target] = [_use(user, node, modules) for user in node.users]
    return uses, None


def _use(user, node, modules) -> tuple:
    """One use of a norm's output: ('linear', qualname), ('metadata', name) or ('other', description)."""
    first = bool(user.args) and user.args[0] is node
    if user.op == "call_module" and first and type(modules.get(user.target)).__name__ == "Float8Linear":
        return ("linear", user.target)
    if user.op == "call_method" and first and user.target in _METADATA_METHODS:
        return ("metadata", user.target)
    attribute = user.op == "call_function" and user.target is getattr
    if attribute and first and user.args[1] in _METADATA_ATTRIBUTES:
        return ("metadata", user.args[1])
    if user.op == "call_module":
        return ("other", f"module {user.target} ({type(modules.get(user.target)).__name__})")
    return ("other", f"{user.op} {getattr(user.target, '__name__', user.target)}")


def _tensors(value):
    """The tensors among a call's arguments (nested tuples, lists and dicts)."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for v in value:
            yield from _tensors(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v)


# The torch functions that read only a tensor's metadata: the reads of a norm's output that let it stay FP8.
_METADATA_FUNCTIONS = tuple(getattr(torch.Tensor, name) for name in sorted(_METADATA_METHODS))
_METADATA_DESCRIPTORS = tuple(getattr(torch.Tensor, name) for name in sorted(_METADATA_ATTRIBUTES))


def _reads_metadata(func) -> bool:
    return func in _METADATA_FUNCTIONS or getattr(func, "__self__", None) in _METADATA_DESCRIPTORS


class _UseProbe(torch.overrides.TorchFunctionMode):
    """Records, during one forward, each use of a DyT's output: entering a Float8Linear as its input, or any
    torch function outside such a layer that reads more than its metadata."""

    def __init__(self, model: nn.Module):
        super().__init__()
        from dyt.module import DyT

        self.uses: dict[str, list] = {}
        self._tags: dict[int, str] = {}
        self._outputs: list = []  # kept alive, so that no id is reused during the run
        self._frames: list[set] = []  # per module entered: the norms whose output it is a Float8Linear of
        self._handles = []
        for name, m in model.named_modules():
            if isinstance(m, DyT):
                self.uses[name] = []
                self._handles.append(m.register_forward_hook(self._tag(name)))
            self._handles.append(m.register_forward_pre_hook(self._enter(name), with_kwargs=True))
            self._handles.append(m.register_forward_hook(self._leave, always_call=True))

    def _tag(self, name):
        def hook(module, args, output):
            if isinstance(output, torch.Tensor):
                self._tags[id(output)] = name
                self._outputs.append(output)

        return hook

    def _enter(self, name):
        def hook(module, args, kwargs):
            fed = {self._tags[id(t)] for t in _tensors((args, kwargs)) if id(t) in self._tags}
            if fed and type(module).__name__ == "Float8Linear":
                for norm in fed:
                    self.uses[norm].append(("linear", name))
                self._frames.append(fed)
            else:
                self._frames.append(set())

        return hook

    def _leave(self, module, args, output):
        self._frames.pop()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        fed = {self._tags[id(t)] for t in _tensors((args, kwargs)) if id(t) in self._tags}
        inside = self._frames[-1] if self._frames else set()
        for norm in fed - inside:
            if not _reads_metadata(func):
                self.uses[norm].append(("other", getattr(func, "__name__", str(func))))
        return func(*args, **kwargs)

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()


def _watched_uses(model: nn.Module, example) -> tuple[dict[str, list], str | None]:
    """_consumers' answer from one forward run of the example (a tuple of positional inputs, a dict of
    keyword inputs, or a function of the model that calls it), under torch.no_grad."""
    probe = _UseProbe(model)
    try:
        with torch.no_grad(), probe:
            if callable(example):
                example(model)
            elif isinstance(example, dict):
                model(**example)
            else:
                model(*example)
    finally:
        probe.remove()
    return {name: uses for name, uses in probe.uses.items() if uses}, None


def convert_to_float8_training(model: nn.Module, *, config=None, module_filter_fn=None,
                               example=None) -> Float8Conversion:  # fmt: skip
    """torchao.float8.convert_to_float8_training(model, config=config, module_filter_fn=module_filter_fn),
    then each DyT whose output feeds only Float8Linear layers that can take it writes FP8 (module docstring).
    example: a forward call to watch for the check (a tuple of positional inputs, a dict of keyword
    inputs, or a function of the model that calls it); None reads a torch.fx trace instead. Returns the
    account of the norms; the model is converted in place."""
    from dyt.module import DyT

    float8, _ = _torchao()
    float8.convert_to_float8_training(model, config=config, module_filter_fn=module_filter_fn)
    norms = {name: m for name, m in model.named_modules() if isinstance(m, DyT)}
    result = Float8Conversion(wired=[], kept={})
    if not norms:
        return result
    for norm in norms.values():  # checked as the 16-bit norms they are until wired
        norm.float8_input = None
    uses, untraced = _watched_uses(model, example) if example is not None else _consumers(model)
    modules = dict(model.named_modules())
    for name, norm in norms.items():
        why = untraced or _why_kept(norm, uses.get(name), modules)
        if why is not None:
            result.kept[name] = why
            continue
        linears = [modules[target] for kind, target in uses[name] if kind == "linear"]
        norm.float8_input = Float8Input(linears[0].config.cast_config_input.target_dtype,
                                        linears[0].linear_mm_config)  # fmt: skip
        result.wired.append(name)
    return result


def _why_kept(norm, uses, modules) -> str | None:
    """Why a norm keeps its 16-bit output, or None where it can write FP8."""
    if uses is None:
        return "not called in the traced or watched forward"
    if not norm.channels_last:
        return "channels-first: its consumers are not linear layers"
    others = [what for kind, what in uses if kind == "other"]
    if others:
        return "its output also feeds " + ", ".join(others)
    linears = [modules[target] for kind, target in uses if kind == "linear"]
    if not linears:
        return "its output feeds no Float8Linear"
    for linear in linears:
        why = _input_scaling(linear)
        if why is not None:
            return f"{type(linear).__name__} {why}"
    first = linears[0]
    if any(lin.linear_mm_config != first.linear_mm_config or
           lin.config.cast_config_input != first.config.cast_config_input for lin in linears):  # fmt: skip
        return "the linear layers it feeds cast their inputs differently"
    return None
