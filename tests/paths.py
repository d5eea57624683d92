"""The tiling paths every suite must cover, as data: a width that takes each path, and how to force it.

Each case asserts the path it took (forward and backward plans), so a change of the launch table that
moves a width to another path fails loudly instead of silently dropping coverage.
"""

from __future__ import annotations

import contextlib

from dyt import launcher

from helpers import plans_for

# name -> (width, force int64 offsets)
PATHS = {
    "row_tiled": (100, False),
    "column_blocked": (5000, False),
    "int64": (100, True),
}


def path_context(name: str):
    _, force64 = PATHS[name]
    return launcher.overrides(int64=True) if force64 else contextlib.nullcontext()


def assert_path(name: str, shape, dtype) -> None:
    """The plans for this shape take the named path (int64 is checked on top of row tiling)."""
    with path_context(name):
        fwd, bwd = plans_for(shape, dtype)
    expected = "row_tiled" if name == "int64" else name
    assert fwd.path == bwd.path == expected, (
        f"{shape} {dtype}: paths {fwd.path}/{bwd.path}, expected {expected}"
    )
    assert fwd.int64 == bwd.int64 == (name == "int64"), (
        f"{shape}: int64 {fwd.int64}/{bwd.int64} for path {name}"
    )
    if name == "row_tiled":
        assert fwd.BLOCK_M > 1 and bwd.BLOCK_M > 1, f"narrow rows must stack rows per tile: {fwd} {bwd}"
