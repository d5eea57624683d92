"""Registers and SASS instructions per element of the kernels, compiled for sm_90 on any machine.

    python tools/sass_stats.py bwd bf16 1x1024x4 2x1024x8x4  # mode, dtype, BLOCK_MxBLOCK_Nxwarps[xNUM_STAGES]
    python tools/sass_stats.py fwd fp32 4x1024x4 4x1024x4x0  # forward: a last field 0: the bitwise sign
    python tools/sass_stats.py bwd bf16 4x256x4x3 4x256x4x3:L49  # :L<span>: channels-first rows of span L
    python tools/sass_stats.py bwd bf16 1x1024x4x4:L3136 1x1024x4x4:L3136:P3  # :P<terms>: tanh's polynomial
    python tools/sass_stats.py bwd bf16 1x256x1x4:L49:P3:S1  # :S1: strided row order (STRIDED)

Compiles with triton.compile for Hopper (no GPU needed; Triton's wheel carries ptxas and cuobjdump), reads
the register count from `cuobjdump -res-usage`, and counts the SASS of the backward's persistent loop
(the instructions between the loop's backward branch and its target) or of the whole forward kernel.
docs/kernels.md cites its counts: where the instruction budget per element goes.
"""

from __future__ import annotations

import collections
import os
import pathlib
import re
import subprocess
import sys
import tempfile

os.environ.pop("TRITON_INTERPRET", None)
ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import test_kernels_build as build  # noqa: E402
import triton  # noqa: E402

from dyt import planner  # noqa: E402

CUOBJDUMP = pathlib.Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
INSTRUCTION = re.compile(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")


def compile_kernel(mode: str, dt: str, block_m: int, block_n: int, warps: int, stages: int = 3, span: int = 0,
                   poly: int = 5, strided: bool = False):  # fmt: skip
    """The kernel as the launcher compiles it, with aligned pointers and strides (tests/test_kernels_build.py
    holds the full set of compile-time constants). For the forward, stages = 0 takes the bitwise sign.
    span > 0: channels-first rows (GAMMA_SPAN; the backward with its planner.channel_slots); poly: tanh's
    polynomial terms (POLY_TERMS); strided: the backward's strided row order (STRIDED, a table entry's
    "row_order", which channels-first tiles inherit)."""
    if mode == "bwd":
        cf = {"GAMMA_SPAN": span, "CHANNEL_SLOTS": planner.channel_slots(block_n, span)} if span else {}
        return build.compile_backward(dt, warps, BLOCK_M=block_m, BLOCK_N=block_n, NUM_STAGES=stages,
                                      POLY_TERMS=poly, STRIDED=strided, **cf)  # fmt: skip
    return build.compile_forward(dt, warps, BLOCK_M=block_m, BLOCK_N=block_n, SIGN_SELECT=stages != 0,
                                 GAMMA_SPAN=span, POLY_TERMS=poly)  # fmt: skip


def sass_of(cubin: bytes) -> tuple[int, list[tuple[int, str]]]:
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        usage = subprocess.run([CUOBJDUMP, "-res-usage", f.name], capture_output=True, text=True).stdout
        sass = subprocess.run([CUOBJDUMP, "-sass", f.name], capture_output=True, text=True).stdout
    regs = int(re.search(r"REG:(\d+)", usage).group(1))
    return regs, [(int(m.group(1), 16), m.group(2)) for m in map(INSTRUCTION.match, sass.splitlines()) if m]


def loop_body(instructions: list[tuple[int, str]]) -> list[str]:
    """The instructions of the backward's pipelined loop over whole tiles: the innermost loop (a backward
    branch to its target with no other loop inside) that copies tiles to shared memory (LDGSTS, cp.async),
    else the longest innermost one. The loop over the masked rest is not pipelined, and the loop over
    runs of tiles (dyt.planner.LANE_RUN_TILES) holds both."""
    loops = []
    for addr, text in instructions:
        target = re.search(r"BRA\s+0x([0-9a-f]+)", text)
        if target and int(target.group(1), 16) < addr:
            loops.append((int(target.group(1), 16), addr))
    innermost = [
        (lo, hi) for lo, hi in loops if not any(lo <= a < b <= hi and (a, b) != (lo, hi) for a, b in loops)
    ]
    bodies = [[t for a, t in instructions if lo <= a <= hi] for lo, hi in innermost]
    return max(bodies, key=lambda body: (any("LDGSTS" in t for t in body), len(body)), default=[])


def opcode(text: str) -> str:
    words = text.split()
    word = words[1] if words[0].startswith("@") else words[0]
    return word.split(".")[0]


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[0] not in ("fwd", "bwd"):
        print(__doc__)
        return 2
    mode, dt = argv[0], argv[1]
    for config in argv[2:]:
        tile, *suffixes = config.split(":")
        extra = {s[0]: int(s[1:]) for s in suffixes}  # L<span>, P<terms>, S1 (strided)
        block_m, block_n, warps, *stages = map(int, tile.split("x"))
        per_thread = block_m * block_n // (32 * warps)
        compiled = compile_kernel(mode, dt, block_m, block_n, warps, *(stages or [3]), span=extra.get("L", 0),
                                  poly=extra.get("P", 5), strided=bool(extra.get("S", 0)))  # fmt: skip
        regs, instructions = sass_of(compiled.asm["cubin"])
        counted = loop_body(instructions) if mode == "bwd" else [t for _, t in instructions]
        ops = collections.Counter(map(opcode, counted)).most_common(10)
        print(f"{mode} {dt} {config} ({warps} warps): {regs} registers, {compiled.metadata.shared} B shared, "
              f"{per_thread} elements per "
              f"thread, {len(counted)} SASS {'in the loop' if mode == 'bwd' else 'in the kernel'} = "
              f"{len(counted) / per_thread:.1f} per element; {dict(ops)}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
