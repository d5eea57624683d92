"""kernels_build: every kernel compiles for Hopper (sm_90) on any machine, with 16-byte global accesses.

The interpreter accepts code that the compiler rejects (e.g. a non-constexpr global read inside a kernel),
so CPU CI also runs Triton's real front end and back end down to PTX and a cubin, which needs no GPU.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import pathlib
import re
import subprocess
import sys
import types

import pytest
import torch

triton = pytest.importorskip("triton")
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from dyt import direct_launch, kernels, planner  # noqa: E402
from dyt.planner import LANE_RUN_TILES, TANH_METHODS  # noqa: E402

from helpers import SM90  # noqa: E402

pytestmark = pytest.mark.kernels_build

ATOMIC = re.compile(r"\s(atom|red)(\.\w+)*\.(global|shared)")
HOPPER = GPUTarget("cuda", 90, 32)
ALIGNED = [["tt.divisibility", 16]]


INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")

# Triton decorates even its own library as interpreted once TRITON_INTERPRET=1 is read, so in an
# interpreter process the compile checks run in one child pytest with the interpreter off, and each test
# here reports the outcome its twin had there (passed, failed with the child's message, or skipped).
_RECORDER = """
import json, os
_outcomes = {}
def pytest_runtest_logreport(report):
    entry = _outcomes.setdefault(report.nodeid.split("::", 1)[1], {"outcome": "passed", "message": ""})
    if report.failed or (report.skipped and entry["outcome"] == "passed"):
        entry["outcome"] = "failed" if report.failed else "skipped"
        skip = report.skipped and isinstance(report.longrepr, tuple)
        text = report.longrepr[2] if skip else report.longreprtext
        entry["message"] = f"{entry['message']}\\n[{report.when}] {text}".strip()
def pytest_sessionfinish(session, exitstatus):
    with open(os.environ["DYT_COMPILE_OUTCOMES"], "w") as f:
        json.dump(_outcomes, f)
"""


def _run_compiler_child(folder: pathlib.Path) -> dict:
    """Runs this file's compile checks in a child pytest (interpreter off); {test name: outcome}."""
    root = pathlib.Path(__file__).parents[1]
    (folder / "dyt_compile_recorder.py").write_text(_RECORDER)
    outcomes_file = folder / "outcomes.json"
    path = os.pathsep.join([str(root), str(folder), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "TRITON_INTERPRET": "0", "DYT_REPORTS": str(folder / "reports"),
           "DYT_COMPILE_OUTCOMES": str(outcomes_file), "PYTHONPATH": path}  # fmt: skip
    cmd = [sys.executable, "-m", "pytest", __file__, "-q", "-p", "no:cacheprovider", "-o", "addopts=",
           "-p", "no:xdist", "-p", "dyt_compile_recorder"]  # fmt: skip
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, cwd=root)
    outcomes = json.loads(outcomes_file.read_text()) if outcomes_file.exists() else {}
    return {
        "outcomes": outcomes,
        "returncode": out.returncode,
        "tail": out.stdout[-3000:] + out.stderr[-2000:],
    }


@pytest.fixture(scope="session")
def compiler_child(tmp_path_factory, request) -> dict:
    """The child's outcomes, computed once per run: under xdist the first worker to need them runs the
    child and the others read its result (behind a lock in the run's shared temporary folder)."""
    import filelock  # a dependency of torch

    shared = tmp_path_factory.getbasetemp()
    if hasattr(request.config, "workerinput"):
        shared = shared.parent
    folder = shared / "kernels_build_child"
    folder.mkdir(exist_ok=True)
    result = folder / "result.json"
    with filelock.FileLock(str(folder / "lock")):
        if not result.exists():
            result.write_text(json.dumps(_run_compiler_child(folder)))
    return json.loads(result.read_text())


_REPLAY: dict = {}


@pytest.fixture(autouse=True)
def _replay_context(request):
    if INTERPRETED and getattr(request.function, "compiled_in_child", False):
        _REPLAY.update(
            name=request.node.nodeid.split("::", 1)[1], child=request.getfixturevalue("compiler_child")
        )
    yield
    _REPLAY.clear()


def compiled_in_child(test):
    """Runs the test where Triton compiles for sm_90; in an interpreter process, reports the outcome its
    twin had in the compiler child (the compiler_child fixture) instead."""

    @functools.wraps(test)
    def replay_or_run(*args, **kwargs):
        if not INTERPRETED:
            return test(*args, **kwargs)
        name, child = _REPLAY["name"], _REPLAY["child"]
        entry = child["outcomes"].get(name)
        if entry is None:
            why = f"the compiler child did not run {name} (exit {child['returncode']}):\n{child['tail']}"
            pytest.fail(why, pytrace=False)
        if entry["outcome"] == "failed":
            pytest.fail(f"in the compiler child (TRITON_INTERPRET=0):\n{entry['message']}", pytrace=False)
        if entry["outcome"] == "skipped":
            pytest.skip(f"in the compiler child: {entry['message']}")

    replay_or_run.compiled_in_child = True
    return replay_or_run


def _compile(fn, signature, constexprs, aligned, num_warps=4):
    names = list(signature)
    attrs = {(names.index(n),): ALIGNED for n in aligned}
    src = ASTSource(
        fn, {**signature, **dict.fromkeys(constexprs, "constexpr")}, constexprs=constexprs, attrs=attrs
    )
    return triton.compile(src, target=HOPPER, options={"num_warps": num_warps})


def _fwd_signature(dt):
    return {"X": f"*{dt}", "Y": f"*{dt}", "ALPHA": "*fp32", "GAMMA": "*fp32", "BETA": "*fp32",
            "M": "i32", "N": "i32", "n_elements": "i32", "stride_xm": "i32", "stride_ym": "i32"}  # fmt: skip


def _bwd_signature(dt):
    return {"X": f"*{dt}", "DY": f"*{dt}", "DX": f"*{dt}", "ALPHA": "*fp32", "GAMMA": "*fp32",
            "PART_DGAMMA": "*fp32", "PART_DBETA": "*fp32", "PART_DALPHA": "*fp64", "M": "i32", "N": "i32",
            "n_elements": "i32",
            "stride_xm": "i32", "stride_dym": "i32", "stride_dxm": "i32", "n_col_blocks": "i32",
            "n_groups": "i32", "tiles_per_program": "i32"}  # fmt: skip


# Every compile-time constant of each kernel, as the launcher passes them for a plain 4 x 1024 tile: the
# tests name only what they vary, so a new constant is added here once.
FWD_CONSTEXPRS = {"HAS_BETA": True, "BLOCK_M": 4, "BLOCK_N": 1024, "N_COL_BLOCKS": 1, "INT64": False,
                  "TANH": TANH_METHODS["poly_exp"], "APPROX": True, "GAMMA_PERIOD": 0, "GAMMA_SPAN": 0,
                  "RAGGED": False, "SIGN_SELECT": True, "PDL": True, "POLY_TERMS": 5}  # fmt: skip
BWD_CONSTEXPRS = {"BLOCK_M": 4, "BLOCK_N": 1024, "INT64": False, "TANH": TANH_METHODS["poly_exp"],
                  "APPROX": True, "STRIDED": False, "NUM_STAGES": 3, "EVEN_N": True,
                  "GAMMA_PERIOD": 0, "RAGGED": False, "PDL": True, "LANE_RUN": LANE_RUN_TILES,
                  "FOLD_COPIES": False, "GAMMA_SPAN": 0, "CHANNEL_SLOTS": 0, "POLY_TERMS": 5}  # fmt: skip
# (GAMMA_PERIOD, RAGGED): rows as they are, folded rows (in 1024 and in 3072 columns), and folded rows whose
# last one ends early.
FOLDS = [(0, False), (64, False), (768, False), (768, True)]
FOLD_IDS = ["rows", "folded_rows", "folded_768", "folded_768_ragged"]
FWD_ALIGNED = ["X", "Y", "GAMMA", "BETA", "N", "n_elements", "stride_xm", "stride_ym"]
BWD_ALIGNED = ["X", "DY", "DX", "GAMMA", "N", "n_elements", "stride_xm", "stride_dym", "stride_dxm"]


def compile_forward(dt="bf16", num_warps=4, **constexprs):
    """dyt_fwd_kernel for sm_90, FWD_CONSTEXPRS with the given ones changed."""
    return _compile(kernels.dyt_fwd_kernel, _fwd_signature(dt), {**FWD_CONSTEXPRS, **constexprs},
                    aligned=FWD_ALIGNED, num_warps=num_warps)  # fmt: skip


def compile_backward(dt="bf16", num_warps=4, **constexprs):
    """dyt_bwd_kernel for sm_90, BWD_CONSTEXPRS with the given ones changed."""
    return _compile(kernels.dyt_bwd_kernel, _bwd_signature(dt), {**BWD_CONSTEXPRS, **constexprs},
                    aligned=BWD_ALIGNED, num_warps=num_warps)  # fmt: skip


@compiled_in_child
@pytest.mark.parametrize("int64", [False, True])
@pytest.mark.parametrize(
    ("dt", "block_m", "block_n"), [("bf16", 16, 256), ("fp32", 1, 2048), ("fp16", 64, 64)]
)
@pytest.mark.parametrize(("period", "ragged"), FOLDS, ids=FOLD_IDS)
@pytest.mark.parametrize("sign_select", [True, False], ids=["sign_select", "sign_bitwise"])
def test_forward_compiles_with_wide_accesses(dt, block_m, block_n, int64, period, ragged, sign_select):
    c = compile_forward(dt, BLOCK_M=block_m, BLOCK_N=block_n, INT64=int64, GAMMA_PERIOD=period, RAGGED=ragged,
                        SIGN_SELECT=sign_select)  # fmt: skip
    ptx = c.asm["ptx"]
    assert "cubin" in c.asm
    assert re.search(r"ld\.global(\.\w+)*\.v4\.b32", ptx), "x is not loaded 16 bytes at a time"
    assert re.search(r"st\.global(\.\w+)*\.v4\.b32", ptx), "y is not stored 16 bytes at a time"
    assert "tanh.approx" not in ptx, "the default tanh must not use the hardware approximation"
    assert "rcp.approx" in ptx and "div.full" not in ptx, "the reciprocal must be one MUFU, not div.full"
    assert_waits_before_memory(ptx)
    assert ptx.count("griddepcontrol.launch_dependents") == 1, "the next kernel's early launch is not allowed"


@compiled_in_child
@pytest.mark.parametrize("int64", [False, True])
@pytest.mark.parametrize(("dt", "span", "block_n", "slots"), [("bf16", 3136, 1024, 2), ("fp32", 49, 256, 8)])
def test_channels_first_rows_compile_with_wide_accesses(dt, span, block_n, slots, int64):
    """The row kernels on channels-first rows (gamma indexed by column // L) and the channels-first finish
    compile for sm_90, x, y, dy and dx still moving 16 bytes at a time."""
    fwd = compile_forward(dt, BLOCK_N=block_n, INT64=int64, GAMMA_SPAN=span)
    bwd = compile_backward(dt, BLOCK_N=block_n, INT64=int64, GAMMA_SPAN=span, CHANNEL_SLOTS=slots)
    for c in (fwd, bwd):
        ptx = c.asm["ptx"]
        assert "cubin" in c.asm
        assert re.search(r"ld\.global(\.\w+)*\.v4\.b32", ptx), "x is not loaded 16 bytes at a time"
        assert re.search(r"st\.global(\.\w+)*\.v4\.b32", ptx), "the output is not stored 16 bytes at a time"
    finish = _compile(kernels.dyt_bwd_cf_finish_kernel,
                      {"PART_DGAMMA": "*fp32", "PART_DBETA": "*fp32", "PART_DALPHA": "*fp64",
                       "DGAMMA": "*fp32", "DBETA": "*fp32", "DALPHA": "*fp32", "C": "i32", "n_groups": "i32",
                       "n_col_blocks": "i32", "n_dalpha_partials": "i32"},
                      {"GAMMA_SPAN": span, "MAIN_BLOCK_N": block_n, "CHANNEL_SLOTS": slots,
                       "BLOCKS_PER_CHANNEL": (span - 1) // block_n + 2, "BLOCK_G": 1, "BLOCK_C": 16,
                       "DALPHA_BLOCK": 2048, "PDL": True}, [])  # fmt: skip
    assert "cubin" in finish.asm


@compiled_in_child
def test_the_short_polynomial_saves_two_fma_per_element():
    """POLY_TERMS=3 (a table entry's "poly") takes two coefficients, so two FMA per element, out of the
    forward: 32 elements per thread at 4 x 1024 on 4 warps."""
    fma = [compile_forward("bf16", SIGN_SELECT=False, POLY_TERMS=terms).asm["ptx"].count("fma.rn.f32")
           for terms in (5, 3)]  # fmt: skip
    assert fma[0] - fma[1] == 2 * 32, fma


@compiled_in_child
@pytest.mark.parametrize("n_col_blocks", [1, 3, 4, 16])
def test_forward_splits_its_program_id_without_a_runtime_division(n_col_blocks):
    """The column-block count is a compile-time constant: no runtime division splits the program id
    (docs/kernels.md, "Forward"). A constant 4 is a shift, a constant 3 a multiply-high."""
    ptx = compile_forward(N_COL_BLOCKS=n_col_blocks).asm["ptx"]
    assert not re.search(r"\b(div|rem)\.(s|u)32", ptx), "the program id is split by a runtime division"


def assert_waits_before_memory(ptx: str) -> None:
    """Launched by PDL, a kernel may start while the one before it still writes: it must wait
    (griddepcontrol.wait) before it touches global memory at all (alpha, gamma, x, partials)."""
    wait = ptx.find("griddepcontrol.wait")
    first_access = min(
        i for i in (ptx.find("ld.global"), ptx.find("cp.async"), ptx.find("st.global")) if i >= 0
    )
    assert 0 <= wait < first_access, (
        "global memory is accessed before the previous kernel is known to be done"
    )


@compiled_in_child
@pytest.mark.parametrize("tanh", [TANH_METHODS["libdevice"], TANH_METHODS["hw_approx"]])
def test_gpu_only_tanh_methods_compile_in_the_backward(tanh):
    c = compile_backward(TANH=tanh, num_warps=8)
    assert ("tanh.approx.f32" in c.asm["ptx"]) == (tanh == TANH_METHODS["hw_approx"])


@compiled_in_child
@pytest.mark.parametrize("tanh", [TANH_METHODS["libdevice"], TANH_METHODS["hw_approx"]])
def test_gpu_only_tanh_methods_compile(tanh):
    c = compile_forward(HAS_BETA=False, BLOCK_M=8, BLOCK_N=512, TANH=tanh)
    assert ("tanh.approx.f32" in c.asm["ptx"]) == (tanh == TANH_METHODS["hw_approx"])


CP_ASYNC_16B = re.compile(r"cp\.async\.cg\.shared\.global \[[^]]*\], \[[^]]*\], 0x10")


@compiled_in_child
@pytest.mark.parametrize(("dt", "block_m", "block_n"), [("bf16", 16, 256), ("fp32", 4, 1024)])
@pytest.mark.parametrize("strided", [False, True], ids=["chunked", "strided"])
@pytest.mark.parametrize("stages", [1, 3], ids=["unpipelined", "pipelined"])
@pytest.mark.parametrize(("period", "ragged"), FOLDS, ids=FOLD_IDS)
def test_backward_and_finish_compile(dt, block_m, block_n, strided, stages, period, ragged):
    """16-byte accesses: plain ld.global.v4 for the masked tiles (and for all without pipelining),
    16-byte cp.async copies into shared memory for the whole tiles with pipelining (the launch tables ask
    for NUM_STAGES >= 3 on Hopper); 16-byte dx stores."""
    fold_copies = period > 0 and block_n % period == 0
    c = compile_backward(dt, BLOCK_M=block_m, BLOCK_N=block_n, STRIDED=strided, NUM_STAGES=stages,
                         GAMMA_PERIOD=period, RAGGED=ragged, FOLD_COPIES=fold_copies)  # fmt: skip
    ptx = c.asm["ptx"]
    assert not ATOMIC.search(ptx), "reductions must not use atomics (determinism)"
    assert "div.full" not in ptx and "ex2.approx.ftz" in ptx
    assert re.search(r"st\.global(\.\w+)*\.v4\.b32", ptx), "dx is not stored 16 bytes at a time"
    assert re.search(r"ld\.global(\.\w+)*\.v4\.b32", ptx), "masked tiles: not 16-byte loads"
    if stages == 1:
        assert "cp.async" not in ptx
    else:
        assert CP_ASYNC_16B.search(ptx), "x and dy are not copied to shared memory 16 bytes at a time"
    assert ptx.count("griddepcontrol.launch_dependents") == 1, "the finish's early launch is not allowed"


@compiled_in_child
@pytest.mark.parametrize("compile_kernel", [compile_forward, compile_backward], ids=["forward", "backward"])
def test_without_pdl_no_grid_dependency_control(compile_kernel):
    """PDL=False (the interpreter's plans, GPUs before sm_90): no griddepcontrol, which needs sm_90."""
    assert "griddepcontrol" not in compile_kernel(PDL=False).asm["ptx"]


@compiled_in_child
@pytest.mark.parametrize("width", [64, 1024, 16384])
@pytest.mark.parametrize("pdl", [True, False], ids=["pdl", "no_pdl"])
def test_finish_compiles_for_its_planned_tiles(width, pdl):
    """With PDL the finish waits for the main kernel before its first load of a partial, then lets the
    next kernel launch."""
    block_g, block_n = planner.finish_tile(width, sm_count=132)
    finish = _compile(
        kernels.dyt_bwd_finish_kernel,
        {"PART_DGAMMA": "*fp32", "PART_DBETA": "*fp32", "PART_DALPHA": "*fp64", "DGAMMA": "*bf16",
         "DBETA": "*fp32", "DALPHA": "*fp32", "N": "i32", "n_groups": "i32", "n_dalpha_partials": "i32"},
        {"BLOCK_G": block_g, "BLOCK_N": block_n, "PDL": pdl},
        aligned=[],
        num_warps=planner.FINISH_NUM_WARPS,
    )  # fmt: skip
    ptx = finish.asm["ptx"]
    assert not ATOMIC.search(ptx)
    if pdl:
        assert_waits_before_memory(ptx)
        assert ptx.count("griddepcontrol.launch_dependents") == 1, (
            "the next kernel's early launch is not allowed"
        )
    else:
        assert "griddepcontrol" not in ptx


@pytest.mark.parametrize("mode", ["fwd", "bwd"])
def test_pdl_is_planned_on_sm90_and_up_outside_the_interpreter(mode):
    def plan(arch, interpreter=False):
        target = planner.Target(arch, 132, interpreter)
        if mode == "fwd":
            return planner.plan_forward(4096, 1024, 2, target=target)
        return planner.plan_backward(4096, 1024, 2, target=target)

    assert plan("sm90").pdl and plan("sm100").pdl
    assert not plan("sm80").pdl and not plan("default").pdl
    assert not plan("sm90", interpreter=True).pdl


class _FakeKernel:
    """Stands in for a @triton.jit kernel: records JIT launches, returns a compiled kernel's fields."""

    def __init__(self, fn):
        self.fn, self.jit_launches = fn, []

    def __getitem__(self, grid):
        def launch(*args, **constexprs):
            self.jit_launches.append((grid, args, constexprs))
            return types.SimpleNamespace(run=len(self.jit_launches), function=None, packed_metadata=None)

        return launch


def test_launches_that_differ_in_a_constant_never_share_a_compiled_kernel(monkeypatch):
    """The compiled-launch cache is keyed by the whole KernelLaunch (grid, arguments, constants), by value:
    a variant plan (the same launch with and without PDL) compiles its own kernel, and an equal plan
    made afresh finds the one compiled before."""

    def fn(X, n, A: int, B: int):  # two tensors' worth of parameters, one scalar, two constants
        pass

    monkeypatch.setattr(direct_launch, "hooks_set", lambda: False)
    with_pdl = planner.plan_forward(4096, 1024, 2, target=SM90).kernel
    without = planner.plan_forward(4096, 1024, 2, target=dataclasses.replace(SM90, allow_pdl=False)).kernel
    assert with_pdl.pdl and not without.pdl and with_pdl != without
    again = planner.plan_forward(4096, 1024, 2, target=SM90).kernel
    assert again == with_pdl and hash(again) == hash(with_pdl) and again is not with_pdl

    specs = [planner.KernelLaunch((4,), (7,), (("A", 1), ("B", b)), num_warps=4) for b in (2, 3)]
    fake = _FakeKernel(fn)
    compiled = direct_launch.CompiledKernel(fake)
    x = torch.empty(8)
    compiled.launch(specs[0], (x,), direct=True)
    compiled.launch(specs[1], (x,), direct=True)
    assert [c for _, _, c in fake.jit_launches] == [{"A": 1, "B": b, "num_warps": 4} for b in (2, 3)]
    assert {spec for spec, _, _ in compiled.cache} == set(specs)
    assert [hit[3] for hit in compiled.cache.values()] == [(1, 2), (1, 3)]  # the constants, in order


def test_which_launches_overlap_the_kernel_before(monkeypatch):
    """On sm_90 the forward and the finish are launched by PDL (their kernels wait before touching memory,
    tests above); the backward's persistent main kernel is not: launched early, its programs no longer
    spread one or two per SM (docs/kernels.md, "Backward main kernel")."""
    from dyt import launcher

    launched = {}

    def record(self, spec, tensors, *, direct):
        launched[self.kernel.fn.__name__] = (spec.pdl, dict(spec.constexprs)["PDL"])

    monkeypatch.setattr(direct_launch.CompiledKernel, "launch", record)
    monkeypatch.setattr(launcher, "_current", lambda device: contextlib.nullcontext())
    fwd = planner.plan_forward(4096, 1024, 2, target=SM90)
    bwd = planner.plan_backward(4096, 1024, 2, target=SM90)
    x = torch.empty(4096, 1024)
    launcher.launch_forward(fwd, x, x, x, x, None)
    launcher.launch_backward_main(bwd, x, x, x, x, x, (x, x, x))
    launcher.launch_backward_finish(bwd, (x, x, x), x, x, x)
    assert launched == {
        "dyt_fwd_kernel": (True, True),
        "dyt_bwd_kernel": (False, True),  # PDL=True: it lets the finish launch early
        "dyt_bwd_finish_kernel": (True, True),
    }


def _jit_signature(fn, n_tensors, tensor_types, spec):
    """The signature Triton's JIT gives a call of this launch: the tensors' pointer types, each integer
    argument i32 or i64 by its value, an integer equal to 1 specialized into a constant."""
    names = fn.arg_names
    signature, constants = dict(zip(names[:n_tensors], tensor_types, strict=True)), {}
    for name, value in zip(names[n_tensors:], spec.scalars, strict=False):
        if value == 1:
            signature[name], constants[name] = "constexpr", 1
        else:
            signature[name] = "i32" if -(2**31) <= value < 2**31 else "i64"
    for name, value in spec.constexprs:
        signature[name], constants[name] = "constexpr", value
    return signature, constants


RECORD_SCALARS = {"i32": (4096, 1024, 4194304, 1024, 1024), "one": (1, 1024, 1024, 1024, 1024),
                  "i64": (2**20, 4096, 2**32, 4096, 4096)}  # fmt: skip


@compiled_in_child
@pytest.mark.parametrize("scalars", list(RECORD_SCALARS.values()), ids=list(RECORD_SCALARS))
def test_native_launch_records_follow_the_compiled_parameters(scalars):
    """dyt.native's launch record of a compiled forward: the tensors in their slots, each integer argument
    as the compiled kernel takes it (an argument equal to 1 is a compile-time constant there, so the
    record leaves it out; one past 2^31 is 8 bytes), Triton's trailing scratch pointers null, one entry
    per parameter of the PTX; and no record where the arguments do not match the PTX one for one."""
    from dyt import native

    plan = planner.plan_forward(4096, 1024, 2, target=SM90).kernel
    spec = dataclasses.replace(plan, scalars=scalars)
    fn = kernels.dyt_fwd_kernel
    signature, constants = _jit_signature(fn, 5, ["*bf16", "*bf16", "*fp32", "*fp32", "*fp32"], spec)
    attrs = {(0,): ALIGNED, (1,): ALIGNED}
    src = ASTSource(fn, signature, constexprs=constants, attrs=attrs)
    compiled = triton.compile(src, target=HOPPER, options={"num_warps": spec.num_warps})
    fields = native.launch_fields(compiled, spec, 5, range(5), function=0xABC)
    assert fields[:5] == [0xABC, spec.grid[0], spec.num_warps * 32, compiled.metadata.shared, int(spec.pdl)]
    params = list(zip(fields[6::2], fields[7::2], strict=True))
    assert len(params) == fields[5] == len(native.ptx_parameters(compiled.asm["ptx"]))
    kinds = {"i32": native.INT32, "i64": native.INT64}
    ints = [(kinds[signature[n]], v) for n, v in zip(fn.arg_names[5:], scalars, strict=False) if v != 1]
    assert params[:5] == [(native.TENSOR, slot) for slot in range(5)]
    assert params[5 : 5 + len(ints)] == ints
    assert set(params[5 + len(ints) :]) == {(native.NULL, 0)} and len(params) > 5 + len(ints)
    assert native.launch_fields(compiled, spec, 4, range(4), function=0xABC) is None


def _fp8_signature(dt, fmt):
    return {"X": f"*{dt}", "Y": f"*{fmt}", "SCALE": "*fp32", "ALPHA": "*fp32", "GAMMA": "*fp32",
            "BETA": "*fp32", "M": "i32", "N": "i32", "n_elements": "i32", "stride_xm": "i32",
            "stride_ym": "i32"}  # fmt: skip


@compiled_in_child
@pytest.mark.parametrize(("fmt", "cvt"), [("fp8e4nv", "e4m3x2"), ("fp8e5", "e5m2x2")])
@pytest.mark.parametrize(("rowwise", "n_col_blocks"), [(False, 1), (True, 1), (True, 3)])
def test_fp8_forward_compiles_rounding_to_nearest_and_saturating(fmt, cvt, rowwise, n_col_blocks):
    """dyt_fwd_fp8_kernel for sm_90: x loaded 16 bytes at a time, y converted by the hardware's
    round-to-nearest, saturating float8 conversion (what torch's cast does, which the plain path and the
    interpreter use), the scale's reciprocal correctly rounded (div.rn, the plain path's bits), and nothing
    touched before the previous kernel is done. dyt_fp8_scale_kernel compiles too."""
    fp8_max = planner.FP8_MAX["float8_e4m3fn" if fmt == "fp8e4nv" else "float8_e5m2"]
    constexprs = {**FWD_CONSTEXPRS, "BLOCK_N": 1024, "N_COL_BLOCKS": n_col_blocks, "ROWWISE": rowwise,
                  "FP8_MAX": fp8_max}  # fmt: skip
    c = _compile(kernels.dyt_fwd_fp8_kernel, _fp8_signature("bf16", fmt), constexprs, aligned=FWD_ALIGNED)
    ptx = c.asm["ptx"]
    assert "cubin" in c.asm
    assert re.search(r"ld\.global(\.\w+)*\.v4\.b32", ptx), "x is not loaded 16 bytes at a time"
    assert re.search(rf"cvt\.rn\.satfinite\.{cvt}\.f32", ptx), f"y is not converted by cvt.rn.satfinite.{cvt}"
    assert "div.rn.f32" in ptx, "the scale's reciprocal must be correctly rounded"
    assert_waits_before_memory(ptx)
    scale = _compile(kernels.dyt_fp8_scale_kernel,
                     {"GAMMA": "*bf16", "BETA": "*bf16", "SCALE": "*fp32", "C": "i32"},
                     {"HAS_BETA": True, "FP8_MAX": 448.0, "BLOCK": 1024, "APPROX": True, "PDL": True},
                     ["GAMMA", "BETA"])  # fmt: skip
    assert "cubin" in scale.asm and "div.rn.f32" in scale.asm["ptx"]
