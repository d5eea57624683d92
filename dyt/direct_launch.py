"""Launching compiled Triton kernels without the JIT's per-call work.

`kernel[grid](*args, **constexprs)` binds every argument, specializes each one, builds a cache key and
looks the compiled kernel up on every call: host time that small shapes pay in full, twice per backward
(docs/host-path.md). A `CompiledKernel` does that once per launch (a
dyt.planner.KernelLaunch) and tensor signature, keeps the compiled kernel Triton returned, and afterwards
hands the arguments straight to its launcher.

What makes that safe: a KernelLaunch fixes every integer argument and every compile-time constant a kernel
receives, and the cache is keyed by its value, so two launches that differ in any of them never share a
compiled kernel. What Triton specializes on besides is each tensor's dtype and whether its address is a
multiple of 16 bytes; the signature holds exactly those. A compiled kernel's function handle belongs to
one GPU, so the key names the GPU too. Anything unusual (the interpreter, Triton's launch
hooks set by a profiler, a Triton whose compiled kernels lack the launcher fields used here, constants that
are not the kernel's last parameters in order) takes the ordinary JIT path on every call.
"""

from __future__ import annotations

import inspect

import triton

try:
    from triton import knobs
except ImportError:  # Triton before 3.4: no knobs, so no way to see launch hooks: always the JIT path
    knobs = None

ALIGNMENT = 16  # bytes: Triton's pointer specialization (the "D" divisibility attribute)

_driver = triton.runtime.driver


def _signature(tensors) -> tuple:
    return tuple([(t.dtype, not t.data_ptr() % ALIGNMENT) for t in tensors])


def hooks_set() -> bool:
    """Launch hooks (a profiler's) see launches only through the JIT path. Triton 3.6 keeps them in
    HookChain objects that are never None (empty chains have no calls); older releases use None."""
    if knobs is None:
        return True
    runtime = knobs.runtime
    enter, leave = runtime.launch_enter_hook, runtime.launch_exit_hook  # every call pays: no generator
    return bool(enter is not None and getattr(enter, "calls", True)) or bool(
        leave is not None and getattr(leave, "calls", True)
    )


def trailing_constexprs(kernel, n_args: int, constexprs: tuple) -> tuple | None:
    """The constants' values, when their names are exactly the kernel's parameters after the n_args
    positional ones, in order (the compiled launcher takes all parameters in order); else None."""
    names = list(inspect.signature(kernel.fn).parameters)
    if names[n_args:] != [name for name, _ in constexprs]:
        return None
    return tuple(value for _, value in constexprs)


class CompiledKernel:
    """One @triton.jit kernel and its compiled launches, keyed by (KernelLaunch, tensor signature)."""

    def __init__(self, kernel):
        self.kernel = kernel
        self.cache: dict = {}

    def launch(self, spec, tensors: tuple, *, direct: bool) -> None:
        """kernel[spec.grid](*tensors, *spec.scalars, **constexprs, num_warps=..., launch_pdl=...), directly
        where this launch and these tensors' signature were compiled before, on the current stream of the
        tensors' GPU. direct=False (the interpreter) always takes the JIT path. The tensors' GPU must be
        the current device (dyt.launcher makes it so)."""
        direct = direct and not hooks_set()
        if direct:
            index = tensors[0].device.index
            key = (spec, index, _signature(tensors))
            hit = self.cache.get(key)
            if hit is not None:
                run, function, packed_metadata, tail, _ = hit
                run(spec.grid[0], 1, 1, _driver.active.get_current_stream(index), function, packed_metadata,
                    None, None, None, *tensors, *spec.scalars, *tail)  # fmt: skip
                return
        options = {"num_warps": spec.num_warps, **({"launch_pdl": True} if spec.pdl else {})}
        compiled = self.kernel[spec.grid](*tensors, *spec.scalars, **dict(spec.constexprs), **options)
        if not direct:
            return
        tail = trailing_constexprs(self.kernel, len(tensors) + len(spec.scalars), spec.constexprs)
        fields = ("run", "function", "packed_metadata")
        if tail is not None and compiled is not None and all(hasattr(compiled, f) for f in fields):
            self.cache[key] = (compiled.run, compiled.function, compiled.packed_metadata, tail, compiled)

    def compiled_for(self, spec) -> list:
        """Every Triton CompiledKernel this launch has run directly, over all tensor signatures and GPUs
        (`python -m dyt tune` reads their registers and shared memory)."""
        return [hit[4] for (launch, *_), hit in self.cache.items() if launch == spec]

    def compiled(self, spec, tensors: tuple):
        """The Triton CompiledKernel this launch and these tensors' signature run directly (on the tensors'
        GPU), or None where they take the JIT path (dyt.native builds its launch records from it)."""
        hit = self.cache.get((spec, tensors[0].device.index, _signature(tensors)))
        return None if hit is None else hit[4]
