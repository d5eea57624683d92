"""The kernel launches an implementation makes, seen from outside it: each launch's name and grid.

On a GPU, torch.profiler records every CUDA kernel with its grid (CUPTI), whatever launched it: Triton,
a C++ extension, PyTorch's own kernels. In Triton's CPU interpreter (TRITON_INTERPRET=1) the interpreter's
launch is wrapped instead, and there a launch that CUDA would refuse (grid axis 1 or 2 past 65,535 blocks,
axis 0 past 2^31 - 1) is refused the same way, before it runs: the interpreter itself accepts any grid.
Elsewhere (plain PyTorch on the CPU) no launch is seen.

Invariant: `recorded()` restores everything it patched when it exits, also on an error.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import tempfile
from collections.abc import Callable, Iterator

import torch

# CUDA's grid limits (blocks per axis): x, y, z.
GRID_LIMITS = (2**31 - 1, 65535, 65535)


@dataclasses.dataclass(frozen=True)
class Launch:
    """One kernel launch: its name and grid (x, y, z), z and y 1 where the launch gave fewer axes."""

    name: str
    grid: tuple[int, int, int]

    @property
    def programs(self) -> int:
        return self.grid[0] * self.grid[1] * self.grid[2]

    def over_limits(self) -> str | None:
        """Which axis CUDA refuses, in words; None within its limits."""
        for axis, (blocks, limit) in enumerate(zip(self.grid, GRID_LIMITS, strict=True)):
            if blocks > limit:
                return f"grid axis {axis} of {blocks} blocks (CUDA takes at most {limit:,})"
        return None


class LaunchRefused(RuntimeError):
    """A launch the interpreter refuses where CUDA would: the message says which axis and limit."""


def _as_grid(grid) -> tuple[int, int, int]:
    dims = [int(d) for d in (grid if isinstance(grid, (tuple, list)) else (grid,))]
    return tuple(dims + [1] * (3 - len(dims)))  # type: ignore[return-value]


@contextlib.contextmanager
def _interpreter(launches: list[Launch], refuse: Callable[[Launch], str | None]) -> Iterator[None]:
    from triton.runtime import interpreter

    original = interpreter.InterpretedFunction.run

    def run(self, *args, grid, warmup, **kwargs):
        if not warmup:
            resolved = grid(kwargs) if callable(grid) else grid
            launch = Launch(self.__name__, _as_grid(resolved))
            launches.append(launch)
            refused = launch.over_limits() or refuse(launch)
            if refused:
                raise LaunchRefused(f"{launch.name}: {refused}: CUDA refuses this launch (invalid argument)")
        return original(self, *args, grid=grid, warmup=warmup, **kwargs)

    interpreter.InterpretedFunction.run = run
    try:
        yield
    finally:
        interpreter.InterpretedFunction.run = original


@contextlib.contextmanager
def _cuda(launches: list[Launch]) -> Iterator[None]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        yield
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory(prefix="dyt-launches-") as folder:
        path = os.path.join(folder, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = json.load(f).get("traceEvents", [])
    for event in events:
        grid = (event.get("args") or {}).get("grid")
        if event.get("cat") == "kernel" and grid:
            launches.append(Launch(event.get("name", "?"), _as_grid(grid)))


@contextlib.contextmanager
def recorded(device: torch.device, refuse: Callable[[Launch], str | None] = lambda launch: None
             ) -> Iterator[list[Launch]]:  # fmt: skip
    """The launches made inside the block, in order (the list fills as they happen in the interpreter, at
    the block's end on a GPU); an empty list where none can be seen (plain PyTorch on the CPU). In the
    interpreter a launch is refused (LaunchRefused, before it runs) past CUDA's grid limits, and where
    refuse(launch) gives a reason: a check that has seen enough need not wait for it."""
    launches: list[Launch] = []
    if device.type == "cuda":
        with _cuda(launches):
            yield launches
    elif os.environ.get("TRITON_INTERPRET") == "1":
        with _interpreter(launches, refuse):
            yield launches
    else:
        yield launches
