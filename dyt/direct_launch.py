"""Launching compiled Triton kernels without the JIT's per-call work.

`kernel[grid](*args, **constexprs)` binds every argument, specializes each one, builds a cache key and
looks the compiled kernel up on every call: host time that small shapes pay in full, twice per backward
(NOTES.md v14). `launch` does that once per launch plan and argument signature, keeps the compiled kernel
Triton returned, and afterwards hands the arguments straight to its launcher.

What makes that safe: a launch plan (dyt.planner) fixes every integer argument and every compile-time
constant a kernel receives, apart from the few the caller names in `variant` (e.g. whether beta exists).
What Triton specializes on besides is each tensor's dtype and whether its address is a multiple of 16
bytes; the signature holds exactly those. Anything unusual (the interpreter, Triton's launch hooks set
by a profiler, a Triton whose compiled kernels lack the launcher fields used here, a kernel whose
compile-time constants are not its last parameters) takes the ordinary JIT path on every call.
"""

from __future__ import annotations

import inspect

import torch
import triton

try:
    from triton import knobs
except ImportError:  # Triton before 3.4: no knobs, so no way to see launch hooks: always the JIT path
    knobs = None

ALIGNMENT = 16  # bytes: Triton's pointer specialization (the "D" divisibility attribute)

_driver = triton.runtime.driver


def _signature(tensors) -> tuple:
    return tuple((t.dtype, t.data_ptr() % ALIGNMENT == 0) for t in tensors)


def _hooks_set() -> bool:
    """Launch hooks (a profiler's) see launches only through the JIT path. Triton 3.6 keeps them in
    HookChain objects that are never None (empty chains have no calls); older releases use None."""
    if knobs is None:
        return True
    runtime = knobs.runtime
    return any(hook is not None and getattr(hook, "calls", True)
               for hook in (runtime.launch_enter_hook, runtime.launch_exit_hook))  # fmt: skip


def trailing_constexprs(kernel, n_args: int, constexprs: dict) -> tuple | None:
    """The constants' values in parameter order, when their names are exactly the kernel's parameters
    after the n_args positional ones (the compiled launcher takes all parameters in order); else None."""
    names = list(inspect.signature(kernel.fn).parameters)
    if len(names) != n_args + len(constexprs) or set(names[n_args:]) != set(constexprs):
        return None
    return tuple(constexprs[name] for name in names[n_args:])


def launch(kernel, grid: tuple, cache: dict, variant, args: tuple, constexprs: dict, *, direct: bool,
           num_warps: int, launch_pdl: bool = False) -> None:  # fmt: skip
    """kernel[grid](*args, **constexprs, num_warps=..., launch_pdl=...), directly where `cache` (a dict
    kept per launch plan) already holds the kernel compiled for `variant` and these tensors' signature.

    The plan and `variant` must determine constexprs, num_warps and launch_pdl. direct=False (the
    interpreter) always takes the JIT path. The tensors must be on the current CUDA device (dyt.launcher
    makes it so)."""
    direct = direct and not _hooks_set()
    if direct:
        key = (variant, _signature([a for a in args if isinstance(a, torch.Tensor)]))
        hit = cache.get(key)
        if hit is not None:
            run, function, packed_metadata, tail = hit
            stream = _driver.active.get_current_stream(torch.cuda.current_device())
            run(grid[0], 1, 1, stream, function, packed_metadata, None, None, None, *args, *tail)
            return
    options = {"num_warps": num_warps, **({"launch_pdl": True} if launch_pdl else {})}
    compiled = kernel[grid](*args, **constexprs, **options)
    if not direct:
        return
    tail = trailing_constexprs(kernel, len(args), constexprs)
    fields = ("run", "function", "packed_metadata")
    if tail is not None and compiled is not None and all(hasattr(compiled, f) for f in fields):
        cache[key] = (compiled.run, compiled.function, compiled.packed_metadata, tail)
