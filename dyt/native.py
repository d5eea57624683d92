"""The native host path: dyt's op, autograd node and launches in C++ (dyt/csrc/dyt_native.cpp).

Eager CUDA calls of `dyt.dyt` and `dyt.dyt_channels_first` go through `torch.ops.dyt_native.dyt` (those of
`dyt.dyt_packed` through `torch.ops.dyt_native.dyt_packed`, the same with one packed parameter), whose
forward and backward look their launches up in a per-shape cache and launch the Triton-compiled kernels
through the CUDA driver: no Python frame per call beyond `dyt.dyt` itself, no Python autograd node. On a
miss the C++ calls back into the two fill ops defined here, which run the call through dyt.launcher (plans
from the committed tables, Triton compiling as usual) and return the results with the launch record of
what was launched (`launch_record`); the next call with that key runs native. docs/host-path.md, "Native
path".

The extension is built with torch.utils.cpp_extension on first CUDA use (or ahead of time by `python -m
dyt native build`) into a folder per torch version. Where it cannot be built or loaded (no compiler, no
ninja) dyt says so once, in a warning, and keeps the Python path. DYT_NATIVE=0 turns it off.

What takes the Python path instead, per call: launch overrides other than poison (tests and tools),
Triton launch hooks (a profiler's: they see launches only through the JIT), torch.func transforms, and x
that is neither contiguous nor a 2-D view with unit column stride. A record is only made where the
compiled kernel's parameters, read from its PTX, match the arguments one for one (`launch_record`);
otherwise that key stays on the Python path.
"""

from __future__ import annotations

import os
import pathlib
import re
import sys
import threading
import warnings

import torch

SOURCE = pathlib.Path(__file__).parent / "csrc" / "dyt_native.cpp"

# Parameter kinds of a launch record (dyt_native.cpp's ParamKind).
TENSOR, INT32, INT64, NULL = 0, 1, 2, 3

FORWARD_SLOTS = ("x", "y", "alpha", "gamma", "beta")
BACKWARD_SLOTS = ("x", "dy", "dx", "alpha", "gamma", "part_dgamma", "part_dbeta", "part_dalpha",
                  "dgamma", "dbeta", "dalpha")  # fmt: skip

OP = None  # torch.ops.dyt_native.dyt.default once loaded; None until then and where unavailable
PACKED_OP = None  # torch.ops.dyt_native.dyt_packed.default, loaded with OP
_state = "unloaded"  # -> "loaded" | "unavailable" | "disabled"
_reason = ""
_lock = threading.Lock()


def enabled_by_env() -> bool:
    return os.environ.get("DYT_NATIVE", "1") not in ("0", "")


def build_directory() -> pathlib.Path:
    """One folder per torch version and Python (an extension built against one torch must not load in
    another): $DYT_NATIVE_DIR, else ~/.cache/dyt/native/."""
    root = os.environ.get("DYT_NATIVE_DIR") or pathlib.Path.home() / ".cache" / "dyt" / "native"
    version = f"torch{torch.__version__}-py{sys.version_info[0]}{sys.version_info[1]}"
    tag = re.sub(r"[^A-Za-z0-9_.]", "_", version)
    return pathlib.Path(root) / tag


def build(verbose: bool = False) -> pathlib.Path:
    """Builds (or finds built) and loads the extension; returns the library's path. Raises where it
    cannot (the message says why)."""
    from torch.utils import cpp_extension

    global OP, PACKED_OP, _state
    folder = build_directory()
    folder.mkdir(parents=True, exist_ok=True)
    if _state != "loaded":
        cpp_extension.load(name="dyt_native", sources=[str(SOURCE)], extra_cflags=["-O2"],
                           build_directory=str(folder), is_python_module=False, verbose=verbose)  # fmt: skip
        _register_fills()
        PACKED_OP = torch.ops.dyt_native.dyt_packed.default
        OP, _state = torch.ops.dyt_native.dyt.default, "loaded"
    return folder / "dyt_native.so"


def ensure():
    """OP, loading the extension on the first call (thread-safe); None where it is off or unavailable."""
    global OP, _state, _reason
    if _state != "unloaded":
        return OP
    with _lock:
        if _state != "unloaded":
            return OP
        if not enabled_by_env():
            _state = "disabled"
            return None
        try:
            build()
        except Exception as exc:  # noqa: BLE001 - any build or load failure means the Python path
            _state, _reason = "unavailable", f"{type(exc).__name__}: {exc}".strip()[:2000]
            warnings.warn(
                "dyt: the native host path is unavailable, CUDA calls take the Python path (slower host "
                f"time per call; docs/host-path.md): {_reason}",
                stacklevel=3,
            )
            return None
        return OP


def state() -> tuple[str, str]:
    """("unloaded" | "loaded" | "unavailable" | "disabled", why it is unavailable)."""
    return _state, _reason


# ---- launch records ----------------------------------------------------------------------------------

_ENTRY = re.compile(r"\.entry\s+\w+\s*\((.*?)\)", re.S)


def ptx_parameters(ptx: str) -> list[str] | None:
    """The kernel's parameters from its PTX entry, in order: "ptr" (a global pointer), "u32" or "u64"
    (a 4- or 8-byte value); None if the PTX has no single entry in that form."""
    entries = _ENTRY.findall(ptx)
    if len(entries) != 1:
        return None
    kinds = []
    for line in entries[0].split(","):
        line = line.strip()
        if not line:
            continue
        words = line.split()
        if words[:1] != [".param"] or len(words) < 3:
            return None
        if ".ptr" in words:
            kinds.append("ptr")
        elif words[1] in (".u32", ".s32", ".b32"):
            kinds.append("u32")
        elif words[1] in (".u64", ".s64", ".b64"):
            kinds.append("u64")
        else:
            return None
    return kinds


def launch_fields(compiled, spec, n_tensors: int, slots, function: int | None = None) -> list[int] | None:
    """One launch of a record: [function, grid, threads, shared bytes, pdl, n_params, (kind, value)...]
    for the Triton CompiledKernel `compiled` of a launch planned as `spec` (dyt.planner.KernelLaunch),
    whose first n_tensors parameters are tensors in record slots `slots`; None where the compiled kernel
    asks for more than these launches give (scratch memory, clusters, cooperative grids) or its PTX
    parameters do not match the arguments one for one. function: the CUfunction handle (default: the
    compiled kernel's, loaded on the current GPU). The handle stays valid because dyt.direct_launch's
    cache keeps the compiled kernel for the process's life."""
    meta = compiled.metadata
    scratch = getattr(meta, "global_scratch_size", 0) or getattr(meta, "profile_scratch_size", 0)
    if scratch or getattr(meta, "launch_cooperative_grid", False) or getattr(meta, "num_ctas", 1) != 1:
        return None
    fn = compiled.src.fn
    signature = compiled.src.signature
    names = list(fn.arg_names)
    values = [*range(n_tensors), *spec.scalars, *(v for _, v in spec.constexprs)]
    if len(values) != len(names):
        return None
    params = []
    for i, name in enumerate(names):
        kind = signature.get(name, signature.get(i)) if isinstance(signature, dict) else None
        if kind == "constexpr":
            continue
        if i < n_tensors:
            if not str(kind).startswith("*"):
                return None
            params.append((TENSOR, slots[i]))
        elif kind in ("i32", "u32") or kind in ("i64", "u64"):
            params.append((INT32 if kind in ("i32", "u32") else INT64, int(values[i])))
        else:
            return None
    ptx = ptx_parameters(compiled.asm.get("ptx", "")) if hasattr(compiled, "asm") else None
    if ptx is None or len(ptx) < len(params):
        return None
    expected = {TENSOR: "ptr", INT32: "u32", INT64: "u64"}
    if any(expected[kind] != got for (kind, _), got in zip(params, ptx, strict=False)):
        return None
    if any(got != "ptr" for got in ptx[len(params) :]):  # what follows: Triton's scratch pointers
        return None
    params += [(NULL, 0)] * (len(ptx) - len(params))
    function = compiled.function if function is None else function
    if not function:
        return None
    fields = [int(function), spec.grid[0], meta.num_warps * 32, meta.shared, int(spec.pdl), len(params)]
    for kind, value in params:
        fields += [kind, value]
    return fields


def _register_fills() -> None:
    """The Python kernels of dyt_native::fill_forward and fill_backward (CUDA), and of
    differentiable_backward (CompositeImplicitAutograd: autograd records its ops), registered once."""
    global _library
    if _library is None:
        library = torch.library.Library("dyt_native", "IMPL")  # the schemas are the C++ library's
        library.impl("fill_forward", _fill_forward, "CUDA")
        library.impl("fill_backward", _fill_backward, "CUDA")
        library.impl("differentiable_backward", _differentiable_backward, "CompositeImplicitAutograd")
        _library = library


def _differentiable_backward(dy, x, alpha, gamma, beta, channels_first):
    from dyt import torch_path

    return torch_path.differentiable_backward(dy, x, alpha, gamma, beta, channels_first=channels_first)


_library = None


def _plain_overrides(poison: bool):
    """The import-time launch overrides with this call's poison: what every cached record is planned with."""
    from dyt import launcher

    return launcher.overrides(**launcher.native_overrides(poison))


def _fill_forward(x, alpha, gamma, beta, channels_first, poison, out_dtype):
    """dyt_native::fill_forward: y in out_dtype through dyt.launcher, and the record of its launch ([]: do
    not cache)."""
    from dyt import launcher

    with _plain_overrides(poison):
        one = alpha.reshape(1)
        y = launcher.forward(x, one, gamma, beta, out_dtype, channels_first=channels_first)
        if not y.numel():
            return y, []
        plan = launcher.forward_plan(x, gamma, beta, channels_first=channels_first)
        tensors = (x, y, one, gamma, gamma if beta is None else beta)
        compiled = launcher.FORWARD.compiled(plan.kernel, tensors)
    fields = None if compiled is None else launch_fields(compiled, plan.kernel, 5, range(5))
    return y, fields or []


def _fill_backward(dy, x, alpha, gamma, beta, channels_first, poison):
    """dyt_native::fill_backward: (dx, dalpha (1,), dgamma, dbeta) through dyt.launcher, and the record of
    its two launches ([]: do not cache). dbeta is in gamma's dtype without beta."""
    from dyt import launcher

    dtypes = (x.dtype, alpha.dtype, gamma.dtype, gamma.dtype if beta is None else beta.dtype)
    with _plain_overrides(poison):
        one = alpha.reshape(1)
        grads = launcher.backward(dy, x, one, gamma, *dtypes, channels_first=channels_first)
        dx, dalpha, dgamma, dbeta = grads
        if not dx.numel():
            return dx, dalpha, dgamma, dbeta, []
        plan = launcher.backward_plan(x, dy, channels_first=channels_first)
        partials = launcher.backward_partials(plan, x.device)  # their signature: dtypes and alignment
        main = launcher.BACKWARD.compiled(plan.main, (x, dy, dx, one, gamma, *partials))
        finish = launcher.finish_kernel(plan).compiled(plan.finish, (*partials, dgamma, dbeta, dalpha))
    record = []
    if main is not None and finish is not None:
        main_fields = launch_fields(main, plan.main, 8, range(8))
        finish_fields = launch_fields(finish, plan.finish, 6, (5, 6, 7, 8, 9, 10))
        if main_fields and finish_fields:
            shapes = [plan.finish_rows, plan.partial_width, plan.n_dalpha_partials]
            record = [*shapes, *main_fields, *finish_fields]
    return dx, dalpha, dgamma, dbeta, record
