"""module: the native host path (dyt.native, dyt/csrc/dyt_native.cpp): its build, records, cache and fallback.

On any machine: the extension builds and loads; launch records are parsed and packed as the kernels
receive them; the cache's key tells apart every layout, dtype and alignment a compiled kernel depends on;
where the extension cannot be built dyt warns once and keeps the Python path. On a GPU: calls take the
native path from their second call, with the Python path's bits, under CUDA graphs too.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

pytest.importorskip("triton")

from dyt import launcher, native, ops  # noqa: E402

from helpers import DTYPES, call_in_mode, make_inputs, run, use_python_path  # noqa: E402

pytestmark = pytest.mark.module

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def ext():
    """torch.ops.dyt_native, built (or found built) for this torch. Where it cannot be built (no C++
    compiler or ninja) the tests skip and say why, unless DYT_REQUIRE_NATIVE=1 (`nox -s tests` sets it):
    then they fail."""
    try:
        native.build()
    except Exception as exc:  # noqa: BLE001 - any build failure is the reason shown
        why = f"the native extension cannot be built here: {type(exc).__name__}: {str(exc)[-1500:]}"
        if os.environ.get("DYT_REQUIRE_NATIVE") == "1":
            pytest.fail(why, pytrace=False)
        pytest.skip(why)
    return torch.ops.dyt_native


def _launch(function, grid, threads, shared, pdl, params):
    fields = [function, grid, threads, shared, pdl, len(params)]
    for kind, value in params:
        fields += [kind, value]
    return fields


def test_packed_arguments_are_what_each_parameter_receives(ext):
    """Tensor slots become their tensors' addresses, int32 and int64 values stay themselves, Triton's
    scratch pointers are null; the backward record's two launches pack from one slot list."""
    tensors = [torch.empty(3 + i) for i in range(5)]
    params = [(native.TENSOR, 0), (native.TENSOR, 4), (native.INT32, -7), (native.INT64, 2**40 + 3),
              (native.NULL, 0)]  # fmt: skip
    record = _launch(0x1234, 96, 128, 0, 1, params)
    got = ext.packed_arguments(record, False, tensors)
    assert got == [tensors[0].data_ptr(), tensors[4].data_ptr(), -7, 2**40 + 3, 0]

    slots = [torch.empty(2 + i) for i in range(11)]
    main = _launch(1, 8, 256, 0, 0, [(native.TENSOR, 2), (native.INT32, 5)])
    finish = _launch(2, 3, 128, 0, 1, [(native.TENSOR, 10), (native.TENSOR, 5), (native.NULL, 0)])
    got = ext.packed_arguments([4, 96, 7, *main, *finish], True, slots)
    assert got == [slots[2].data_ptr(), 5, slots[10].data_ptr(), slots[5].data_ptr(), 0]


@pytest.mark.parametrize(
    "record, message",
    [
        (_launch(1, 1, 32, 0, 0, [(9, 0)]), "unknown parameter kind 9"),
        (_launch(1, 1, 32, 0, 0, [(native.TENSOR, 5)]), "tensor slot 5 out of range"),
        (_launch(1, 1, 32, 0, 0, [(native.INT32, 2**31)]), "int32 parameter out of range"),
        (_launch(1, -1, 32, 0, 0, []), "grid out of range"),
        ([1, 1, 32, 0, 0, 3, native.TENSOR, 0], "too short for 3 parameters"),
        ([*_launch(1, 1, 32, 0, 0, []), 0], "trailing values"),
        ([1, 2], "launch record too short"),
    ],
    ids=["kind", "slot", "int32", "grid", "short_params", "trailing", "short"],
)
def test_malformed_records_are_refused(ext, record, message):
    with pytest.raises(RuntimeError, match=message):
        ext.packed_arguments(record, False, [torch.empty(1)] * 5)


def test_the_op_refuses_what_it_cannot_launch(ext):
    """Errors from the extension arrive as RuntimeError naming the problem (never a crash): tensors off
    CUDA, and on a GPU an x that is neither contiguous nor 2-D rows with unit column stride."""
    x, alpha, gamma, beta = _args(torch.randn(4, 8))
    with pytest.raises(RuntimeError, match="x must be a CUDA tensor"):
        ext.dyt(x, alpha, gamma, beta, False, False)
    if torch.cuda.is_available():
        x, alpha, gamma, beta = (t.cuda() for t in _args(torch.randn(8, 4).t()))
        with pytest.raises(RuntimeError, match="x must be contiguous or a 2-D view"):
            ext.dyt(x, alpha, gamma, beta, False, False)


def _input_cases():
    """(name, channels_first, x, alpha, gamma, beta) on the CPU: inputs validate accepts and refuses."""
    bf16 = torch.bfloat16
    one, C8 = torch.ones(1), torch.ones(8)
    return [
        ("rows", False, torch.ones(4, 8), one, C8, C8),
        ("rows_mixed_nobeta", False, torch.ones(2, 3, 8, dtype=bf16), one, C8, None),
        ("alpha_0d", False, torch.ones(4, 8), torch.tensor(0.5), C8, C8),
        ("alpha_1x1", False, torch.ones(4, 8), torch.ones(1, 1), C8.half(), None),
        ("cf", True, torch.ones(2, 8, 4, 5), one, C8, C8),
        ("cf_2d", True, torch.ones(3, 8), one, C8, C8),
        ("x_float64", False, torch.ones(4, 8, dtype=torch.float64), one, C8, C8),
        ("alpha_float64", False, torch.ones(4, 8), one.double(), C8, C8),
        ("gamma_int", False, torch.ones(4, 8), one, torch.ones(8, dtype=torch.int32), C8),
        ("beta_float64", False, torch.ones(4, 8), one, C8, C8.double()),
        ("x_0d", False, torch.tensor(1.0), one, torch.ones(1), None),
        ("cf_1d", True, torch.ones(8), one, C8, None),
        ("no_channels", False, torch.ones(4, 0), one, torch.ones(0), None),
        ("cf_no_channels", True, torch.ones(2, 0, 3), one, torch.ones(0), None),
        ("alpha_two", False, torch.ones(4, 8), torch.ones(2), C8, C8),
        ("alpha_empty", False, torch.ones(4, 8), torch.ones(0), C8, C8),
        ("gamma_long", False, torch.ones(4, 8), one, torch.ones(9), C8),
        ("gamma_2d", False, torch.ones(4, 8), one, torch.ones(1, 8), C8),
        ("beta_short", False, torch.ones(4, 8), one, C8, torch.ones(7)),
        ("cf_gamma_last_dim", True, torch.ones(2, 8, 5), one, torch.ones(5), None),
        ("alpha_elsewhere", False, torch.ones(4, 8), torch.ones(1, device="meta"), C8, C8),
        ("beta_elsewhere", False, torch.ones(4, 8), one, C8, torch.ones(8, device="meta")),
    ]


@pytest.mark.parametrize("case", _input_cases(), ids=lambda c: c[0])
def test_the_op_refuses_exactly_what_validate_refuses(ext, case):
    """dyt's Python entry calls the native op before validating (validate runs where the op refuses):
    so the op's own checks must refuse every input validate refuses, and pass every other (on these CPU
    tensors, to its CUDA check)."""
    _, channels_first, x, alpha, gamma, beta = case
    try:
        ops.validate(x, alpha, gamma, beta, channels_first=channels_first)
        valid = True
    except (ValueError, TypeError):
        valid = False
    message = "x must be a CUDA tensor" if valid else "dyt_native: (?!x must be a CUDA tensor)"
    with pytest.raises(RuntimeError, match=message):
        ext.dyt(x, alpha, gamma, beta, channels_first, False)


def test_backward_records_need_positive_partial_shapes(ext):
    launch = _launch(1, 1, 32, 0, 0, [])
    with pytest.raises(RuntimeError, match="partial shapes must be positive"):
        ext.packed_arguments([0, 96, 1, *launch, *launch], True, [torch.empty(1)] * 11)


def test_backward_records_with_oversized_partials_are_refused(ext):
    launch = _launch(1, 1, 32, 0, 0, [])
    with pytest.raises(RuntimeError, match="partial shapes are too large"):
        ext.packed_arguments([2**30, 2**20, 1, *launch, *launch], True, [torch.empty(1)] * 11)


@pytest.mark.parametrize("has_beta", [True, False], ids=["beta", "nobeta"])
@pytest.mark.parametrize("shapes", [(1, 1, 1), (4, 96, 7), (3, 1000, 129), (132, 4096, 528)], ids=str)
def test_the_backward_scratch_holds_each_partial_apart(ext, shapes, has_beta):
    """The backward's scratch (in dx's block, after dx): the dalpha partials (float64), the dgamma and dbeta
    partials (float32, finish_rows x partial_width) and, without beta, the dbeta the kernels write, each on
    a 256-byte boundary from the scratch's start, none overlapping another, all inside its size."""
    finish_rows, partial_width, n_dalpha = shapes
    dbeta_bytes = 2 * 77
    *offsets, size = ext.backward_scratch(finish_rows, partial_width, n_dalpha, has_beta, dbeta_bytes)
    need = [8 * n_dalpha, 4 * finish_rows * partial_width, 4 * finish_rows * partial_width, dbeta_bytes]
    assert (offsets[3] == -1) == has_beta
    regions = sorted((o, o + n) for o, n in zip(offsets, need, strict=True) if o != -1)
    assert all(start % 256 == 0 for start, _ in regions), offsets
    assert all(end <= nxt for (_, end), (nxt, _) in zip(regions, regions[1:], strict=False)), offsets
    assert regions[0][0] == 0 and regions[-1][1] <= size < regions[-1][1] + 256


@pytest.mark.parametrize("has_beta", [True, False], ids=["beta", "nobeta"])
@pytest.mark.parametrize("nbytes", [(4, 4, 4), (2, 2 * 96, 4 * 96), (8, 4 * 1000, 2 * 1000), (4, 2 * 129, 2)])
def test_the_parameter_gradients_lie_apart_in_one_block(ext, nbytes, has_beta):
    """The cached backward's second allocation: dalpha at 0, dgamma and (with beta) dbeta after it, each on
    a 256-byte boundary, none overlapping another, all inside the block."""
    dalpha_bytes, dgamma_bytes, dbeta_bytes = nbytes
    dalpha_at, dgamma_at, dbeta_at, size = ext.param_grads_block(dalpha_bytes, dgamma_bytes, dbeta_bytes,
                                                                 has_beta, False)  # fmt: skip
    assert dalpha_at == 0 and (dbeta_at == -1) == (not has_beta)
    regions = [(0, dalpha_bytes), (dgamma_at, dgamma_at + dgamma_bytes)]
    if has_beta:
        regions.append((dbeta_at, dbeta_at + dbeta_bytes))
    assert all(start % 256 == 0 for start, _ in regions), regions
    assert all(end <= nxt for (_, end), (nxt, _) in zip(regions, regions[1:], strict=False)), regions
    assert regions[-1][1] <= size < regions[-1][1] + 256


@pytest.mark.parametrize("has_beta", [True, False], ids=["beta", "nobeta"])
@pytest.mark.parametrize("nbytes", [(4, 4, 4), (2, 2 * 96, 2 * 96), (4, 4 * 1000, 4 * 1000)])
def test_packed_parameter_gradients_are_laid_out_as_the_packed_parameter(ext, nbytes, has_beta):
    """Packed: dgamma at 0, dbeta (with beta) right after it, dalpha last, no gap, and the block exactly
    their size: it is the packed parameter's gradient, every byte of it written by the kernels."""
    dalpha_bytes, dgamma_bytes, dbeta_bytes = nbytes
    dalpha_at, dgamma_at, dbeta_at, size = ext.param_grads_block(dalpha_bytes, dgamma_bytes, dbeta_bytes,
                                                                 has_beta, True)  # fmt: skip
    assert dgamma_at == 0
    assert dbeta_at == (dgamma_bytes if has_beta else -1)
    assert dalpha_at == dgamma_bytes + (dbeta_bytes if has_beta else 0)
    assert size == dalpha_at + dalpha_bytes


def _args(x, dtype=torch.float32, beta=True):
    C = x.shape[-1]
    beta = torch.zeros(C, dtype=dtype) if beta else None
    return x, torch.ones(1, dtype=dtype), torch.ones(C, dtype=dtype), beta


def test_the_cache_key_tells_apart_what_compiled_kernels_depend_on(ext):
    """A record stored for one call is found for the same layout and nothing else: another dtype, row
    count, row stride, pointer alignment (Triton specializes on 16 bytes), beta's presence or the
    channels-first reading of the same tensor each need their own."""
    ext.clear_cache()
    x = torch.empty(64, 97, dtype=torch.bfloat16)[:, :96]  # rows strided by 97
    record = _launch(1, 4, 128, 0, 0, [(native.TENSOR, 0)])
    ext.store_forward_record(*_args(x), False, record)
    assert ext.cache_entries(False) == 1
    assert ext.has_forward_record(*_args(torch.empty(64, 97, dtype=torch.bfloat16)[:, :96]), False)
    misaligned = torch.empty(64 * 97 + 1, dtype=torch.bfloat16)[1:].view(64, 97)[:, :96]
    assert misaligned.data_ptr() % 16 and not x.data_ptr() % 16
    others = {
        "dtype": _args(torch.empty(64, 97)[:, :96]),
        "param_dtype": _args(x, torch.bfloat16),
        "rows": _args(x[:32]),
        "row_stride": _args(torch.empty(64, 96, dtype=torch.bfloat16)),
        "alignment": _args(misaligned),
        "no_beta": _args(x, beta=False),
    }
    for name, args in others.items():
        assert not ext.has_forward_record(*args, False), name
    cf = torch.empty(4, 6, 5, 7, dtype=torch.bfloat16)
    ext.store_forward_record(*_args(cf), False, record)
    assert ext.has_forward_record(*_args(cf), False) and not ext.has_forward_record(*_args(cf), True)
    ext.clear_cache()
    assert ext.cache_entries(False) == 0 and not ext.has_forward_record(*_args(x), False)


PTX_ENTRY = """
.visible .entry dyt_fwd_kernel(
	.param .u64 .ptr .global .align 1 dyt_fwd_kernel_param_0,
	.param .u32 dyt_fwd_kernel_param_1,
	.param .u64 dyt_fwd_kernel_param_2,
	.param .u64 .ptr .global .align 1 dyt_fwd_kernel_param_3
)
.reqntid 128
{
"""


def test_ptx_parameters():
    assert native.ptx_parameters(PTX_ENTRY) == ["ptr", "u32", "u64", "ptr"]
    assert native.ptx_parameters(PTX_ENTRY + PTX_ENTRY) is None  # one entry per kernel, or no record
    assert native.ptx_parameters(PTX_ENTRY.replace(".u32", ".f16")) is None


def test_native_plans_follow_the_launch_overrides():
    """Cached records are planned with the import-time overrides: poison changes only allocation, any
    other override sends calls back to the Python path while it holds."""
    assert launcher.native_plans
    with launcher.overrides(poison=True):
        assert launcher.native_plans
    with launcher.overrides(int64=True):
        assert not launcher.native_plans
        with launcher.overrides(int64=False):
            assert launcher.native_plans
        assert not launcher.native_plans
    assert launcher.native_plans
    assert launcher.native_overrides(True)["poison"] and not launcher.native_overrides(False)["poison"]


def test_cpu_tensors_never_take_the_native_path():
    assert ops._native_op(torch.empty(4, 8)) is None


_FALLBACK = textwrap.dedent(
    """
    import warnings
    from dyt import native
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first, second = native.ensure(), native.ensure()
    print(first, second, native.state()[0], sum("native host path is unavailable" in str(w.message)
          for w in caught))
    """
)


@pytest.mark.parametrize("case", ["no_compiler", "disabled"])
def test_without_a_compiler_dyt_warns_once_and_keeps_the_python_path(case, tmp_path):
    """A fresh build folder and a compiler that does not exist: the build fails, ensure() says so in one
    warning and answers None from then on (the Python path). DYT_NATIVE=0: no build, no warning."""
    env = {**os.environ, "DYT_NATIVE_DIR": str(tmp_path), "CXX": str(tmp_path / "no-such-c++"),
           "PYTHONPATH": ROOT}  # fmt: skip
    if case == "disabled":
        env["DYT_NATIVE"] = "0"
    out = subprocess.run([sys.executable, "-c", _FALLBACK], env=env, capture_output=True, text=True,
                         timeout=600, cwd=ROOT)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    state = "unavailable" if case == "no_compiler" else "disabled"
    warned = 1 if case == "no_compiler" else 0
    assert out.stdout.split() == ["None", "None", state, str(warned)], out.stdout + out.stderr[-2000:]


# ---- on a GPU ------------------------------------------------------------------------------------------


CASES = {
    "rows_bf16_fp32_params": ((6, 50, 384), "bf16", torch.float32, True, False),
    "rows_fp16_no_beta": ((300, 96), "fp16", None, False, False),
    "rows_fp32": ((7, 1000), "fp32", None, True, False),
    "narrow_folded": ((4096, 64), "bf16", None, True, False),
    "channels_first": ((4, 24, 7, 9), "bf16", torch.float32, True, True),
}


def assert_same_outputs(fast, slow):
    """(y, dx, dalpha, dgamma, dbeta) of two paths: the same dtypes, shapes, strides and bits (None, no
    beta, in both)."""
    for name, a, b in zip(("y", "dx", "dalpha", "dgamma", "dbeta"), fast, slow, strict=True):
        if a is None or b is None:
            assert a is None and b is None, name
            continue
        assert (a.dtype, a.shape, a.stride()) == (b.dtype, b.shape, b.stride()), name
        assert torch.equal(a, b), name


def _run_case(shape, dtype, param_dtype, beta, channels_first, seed):
    """Forward and backward of fresh inputs (channels-first: x and dy of shape (N, C, *spatial))."""
    import dyt

    if not channels_first:
        inp = make_inputs(shape, DTYPES[dtype], seed=seed, param_dtype=param_dtype, beta=beta)
        return inp, run(inp)
    last = (shape[0], *shape[2:], shape[1])
    inp = make_inputs(last, DTYPES[dtype], seed=seed, param_dtype=param_dtype, beta=beta)
    keep = channels_first == "channels_last"  # x and dy in torch.channels_last memory format
    inp.x = inp.x.detach().movedim(-1, 1)
    inp.x = (inp.x if keep else inp.x.contiguous()).requires_grad_()
    inp.dy = inp.dy.movedim(-1, 1) if keep else inp.dy.movedim(-1, 1).contiguous()
    return inp, run(inp, dyt.dyt_channels_first)


def _packed_cases():
    """(name, channels_first, bias, x, params) on the CPU: inputs validate_packed accepts and refuses."""
    bf16 = torch.bfloat16
    return [
        ("rows", False, True, torch.ones(4, 8), torch.ones(17)),
        ("rows_nobias", False, False, torch.ones(2, 3, 8, dtype=bf16), torch.ones(9)),
        ("rows_mixed", False, True, torch.ones(4, 8, dtype=bf16), torch.ones(17)),
        ("cf", True, True, torch.ones(2, 8, 4, 5), torch.ones(17)),
        ("cf_2d", True, False, torch.ones(3, 8), torch.ones(9)),
        ("short", False, True, torch.ones(4, 8), torch.ones(16)),
        ("long_for_nobias", False, False, torch.ones(4, 8), torch.ones(17)),
        ("params_2d", False, True, torch.ones(4, 8), torch.ones(1, 17)),
        ("params_float64", False, True, torch.ones(4, 8), torch.ones(17, dtype=torch.float64)),
        ("params_int", False, True, torch.ones(4, 8), torch.ones(17, dtype=torch.int32)),
        ("x_float64", False, True, torch.ones(4, 8, dtype=torch.float64), torch.ones(17)),
        ("x_0d", False, True, torch.tensor(1.0), torch.ones(3)),
        ("cf_1d", True, True, torch.ones(8), torch.ones(17)),
        ("no_channels", False, True, torch.ones(4, 0), torch.ones(1)),
        ("cf_width_last_dim", True, True, torch.ones(2, 8, 5), torch.ones(11)),
        ("params_elsewhere", False, True, torch.ones(4, 8), torch.ones(17, device="meta")),
    ]


@pytest.mark.parametrize("case", _packed_cases(), ids=lambda c: c[0])
def test_the_packed_op_refuses_exactly_what_validate_packed_refuses(ext, case):
    """dyt_packed calls the native op before validating, as dyt does: the op's checks refuse every input
    validate_packed refuses and pass every other (on these CPU tensors, to its CUDA check)."""
    _, channels_first, bias, x, params = case
    try:
        ops.validate_packed(x, params, bias=bias, channels_first=channels_first)
        valid = True
    except (ValueError, TypeError):
        valid = False
    message = "x must be a CUDA tensor" if valid else "dyt_native: (?!x must be a CUDA tensor)"
    with pytest.raises(RuntimeError, match=message):
        ext.dyt_packed(x, params, bias, channels_first, False)


@pytest.mark.gpu_only
@pytest.mark.parametrize("case", list(CASES))
def test_native_calls_give_the_python_paths_bits(case, seed, monkeypatch, ext):
    """From its second call a shape runs on the native path (the launcher is not called, the caches hold
    its records) and gives the Python path's bits for y and every gradient."""
    ext.clear_cache()
    shape, dtype, param_dtype, beta, cf = CASES[case]
    _, first = _run_case(shape, dtype, param_dtype, beta, cf, seed)  # fills the caches
    assert ext.cache_entries(False) == 1 and ext.cache_entries(True) == 1
    calls = []
    for name, real in (("forward", launcher.forward), ("backward", launcher.backward)):
        monkeypatch.setattr(launcher, name, lambda *a, _n=name, _r=real, **k: calls.append(_n) or _r(*a, **k))
    inp, fast = _run_case(shape, dtype, param_dtype, beta, cf, seed)
    assert calls == [], "the second call went through dyt.launcher"
    use_python_path(monkeypatch)
    inp_py, slow = _run_case(shape, dtype, param_dtype, beta, cf, seed)
    assert calls == ["forward", "backward"]
    assert_same_outputs(fast, slow)
    assert fast[2].shape == inp.alpha.shape


def _permuted_case(seed):
    """ConvNeXt's block norm: DyT over the last dimension of a (N, H, W, C) permute of a contiguous
    (N, C, H, W) tensor (last-dimension stride H * W); y, the gradient of the (N, C, H, W) leaf, and the
    parameters' gradients."""
    import dyt

    inp = make_inputs((2, 7, 5, 96), torch.bfloat16, seed=seed, param_dtype=torch.float32)
    leaf = inp.x.detach().permute(0, 3, 1, 2).contiguous().requires_grad_()
    x = leaf.permute(0, 2, 3, 1)
    assert x.stride(-1) == 35
    y = dyt.dyt(x, inp.alpha, inp.gamma, inp.beta)
    y.backward(inp.dy)
    return y, leaf.grad, inp.alpha.grad, inp.gamma.grad, inp.beta.grad


@pytest.mark.gpu_only
def test_a_strided_last_dimension_is_copied_and_runs_natively(seed, monkeypatch, ext):
    """x whose last dimension is strided is copied, as the Python path copies it, and the call
    runs on the native path (not through dyt.launcher) with the Python path's bits."""
    _permuted_case(seed)  # fills the caches
    calls = []
    for name, real in (("forward", launcher.forward), ("backward", launcher.backward)):
        monkeypatch.setattr(launcher, name, lambda *a, _n=name, _r=real, **k: calls.append(_n) or _r(*a, **k))
    fast = _permuted_case(seed)
    assert calls == [], "a strided last dimension went through dyt.launcher"
    assert "dyt_native::DyTBackward" in fast[0].grad_fn.name()
    use_python_path(monkeypatch)
    slow = _permuted_case(seed)
    assert calls == ["forward", "backward"]
    assert_same_outputs(fast, slow)


@pytest.mark.gpu_only
@pytest.mark.parametrize("mode", ["no_grad", "inference_mode", "no_input_requires_grad"])
def test_native_calls_autograd_need_not_see_have_no_grad_fn(mode, seed, ext):
    """The native op records nothing where no gradient can flow, with the bits of a recorded call."""
    import dyt

    inp = make_inputs((37, 96), torch.bfloat16, seed=seed, param_dtype=torch.float32)
    args = (inp.x, inp.alpha, inp.gamma, inp.beta)
    through_autograd = dyt.dyt(*args)
    node = through_autograd.grad_fn
    assert node is not None and "dyt_native::DyTBackward" in node.name()
    y = call_in_mode(mode, dyt.dyt, args)
    assert y.grad_fn is None and not y.requires_grad
    assert torch.equal(y, through_autograd.detach())


def _next_sequence_nr(leaf: torch.Tensor) -> int:
    """The autograd sequence number the next node made on this thread takes (every node takes one)."""
    return (leaf * 2).grad_fn._sequence_nr() + 1


@pytest.mark.parametrize("packed", [False, True], ids=["dyt", "dyt_packed"])
@pytest.mark.parametrize("mode", ["no_grad", "no_input_requires_grad", "recorded"])
def test_the_op_makes_a_node_only_where_autograd_records(mode, packed, ext):
    """On any machine: the op's Autograd kernel makes its node (before the forward runs, as PyTorch's
    generated ops make theirs) only where autograd records the call; off CUDA the forward then refuses the
    tensors, so the sequence number that every new node takes tells which way the call went."""
    x, alpha, gamma, beta = _args(torch.randn(4, 8))
    leaf = torch.ones(1, requires_grad=True)
    if mode != "no_input_requires_grad":
        x.requires_grad_(True)
    call = (lambda: ext.dyt_packed(x, torch.cat([gamma, beta, alpha]), True, False, False)) if packed else (
        lambda: ext.dyt(x, alpha, gamma, beta, False, False))  # fmt: skip
    before = _next_sequence_nr(leaf)
    with torch.no_grad() if mode == "no_grad" else contextlib.nullcontext():
        with pytest.raises(RuntimeError, match="x must be a CUDA tensor"):
            call()
    made = _next_sequence_nr(leaf) - before - 1
    assert made == (1 if mode == "recorded" else 0), f"{made} autograd nodes made by a {mode} call"


@pytest.mark.gpu_only
@pytest.mark.parametrize("packed", [False, True], ids=["DyT", "PackedDyT"])
@pytest.mark.parametrize("mode", ["no_grad", "no_input_requires_grad"])
def test_native_calls_autograd_need_not_see_make_no_node(mode, packed, seed, ext):
    """Where autograd need not record a call, the op makes no autograd node (one made would be dropped
    unused): the sequence number that every new node takes does not move over such calls."""
    import dyt

    inp = make_inputs((37, 96), torch.bfloat16, seed=seed, param_dtype=torch.float32)
    module = (dyt.PackedDyT if packed else dyt.DyT)(96).cuda()
    leaf = torch.ones(1, device="cuda", requires_grad=True)
    x = inp.x if mode == "no_grad" else inp.x.detach()
    if mode == "no_input_requires_grad":
        module.requires_grad_(False)

    def calls():
        with torch.no_grad() if mode == "no_grad" else contextlib.nullcontext():
            return [module(x) for _ in range(3)]

    calls()  # fills the caches
    before = _next_sequence_nr(leaf)
    ys = calls()
    assert _next_sequence_nr(leaf) == before + 1, "a call autograd need not see made an autograd node"
    assert all(y.grad_fn is None for y in ys)
    module.requires_grad_(True)
    assert torch.equal(ys[0], module(inp.x).detach())


@pytest.mark.gpu_only
def test_native_op_refuses_forward_mode_tangents_under_no_grad(seed, ext):
    """The op refuses a forward-mode tangent on x (its nodes have no jvp) also where autograd need not record
    the call: it is never dropped in silence. dyt.dyt does not hand it one (tests/test_transforms.py: such
    calls take dyt.ops._ComposableDyT)."""
    import torch.autograd.forward_ad as fwAD

    inp = make_inputs((37, 96), torch.bfloat16, seed=seed, param_dtype=torch.float32)
    args = [t.detach() for t in (inp.alpha, inp.gamma, inp.beta)]
    with fwAD.dual_level(), torch.no_grad():
        x = fwAD.make_dual(inp.x.detach(), torch.randn_like(inp.x))
        with pytest.raises(RuntimeError, match="jvp"):
            ext.dyt(x, *args, False, False)


@pytest.mark.gpu_only
@pytest.mark.parametrize("norm", ["DyT", "DyT-no-bias", "PackedDyT"])
def test_compiled_autograd_runs_the_native_backward(norm, seed, ext):
    """Compiled autograd (torch._dynamo.compiled_autograd) over an eager forward puts the op's node into its
    graph as one opaque call: the gradients have the bits of the eager backward's, also on the second pass
    (compiled autograd's cached graph)."""
    from torch._dynamo import compiled_autograd

    import dyt

    torch.manual_seed(seed)
    make = {"DyT": lambda: dyt.DyT(96), "DyT-no-bias": lambda: dyt.DyT(96, bias=False),
            "PackedDyT": lambda: dyt.PackedDyT(96)}[norm]  # fmt: skip
    model = torch.nn.Sequential(torch.nn.Linear(96, 96), make(), torch.nn.Linear(96, 8)).cuda()
    node = model[1](torch.randn(2, 96, device="cuda")).grad_fn
    assert node.name().startswith("dyt_native::"), node.name()

    def grads(x):
        for p in model.parameters():
            p.grad = None
        model(x).square().sum().backward()
        return [p.grad.clone() for p in model.parameters()]

    for _ in range(2):
        x = torch.randn(64, 96, device="cuda")
        eager = grads(x)
        with compiled_autograd._enable(torch.compile(backend="eager")):
            compiled = grads(x)
        names = [name for name, _ in model.named_parameters()]
        for name, a, b in zip(names, eager, compiled, strict=True):
            assert torch.equal(a, b), f"{name}: compiled autograd's gradient is not the eager backward's"


@pytest.mark.gpu_only
def test_native_forward_allocates_only_y(seed, ext):
    """No copy of x on the way in: a cached contiguous forward allocates one block, y's."""
    import dyt

    inp, _ = _run_case((8, 96, 14, 14), "bf16", None, True, True, seed)
    with torch.no_grad():
        dyt.dyt_channels_first(inp.x, inp.alpha, inp.gamma, inp.beta)
        torch.cuda.synchronize()
        before = torch.cuda.memory_stats()["allocation.all.allocated"]
        y = dyt.dyt_channels_first(inp.x, inp.alpha, inp.gamma, inp.beta)
        after = torch.cuda.memory_stats()["allocation.all.allocated"]
    assert after - before == 1 and y.shape == inp.x.shape


@pytest.mark.gpu_only
@pytest.mark.parametrize("beta", [True, False], ids=["beta", "nobeta"])
def test_native_backward_allocates_two_blocks(beta, seed, ext):
    """A cached backward allocates two blocks: dx with every partial after it (and the dbeta the kernels
    write where there is none), and the parameter gradients."""
    import dyt

    inp = make_inputs((64, 197, 384), torch.bfloat16, seed=seed, param_dtype=torch.float32, beta=beta)
    args = (inp.x, inp.alpha, inp.gamma, inp.beta)
    leaves = [t for t in args if t is not None]
    for _ in range(2):
        torch.autograd.grad(dyt.dyt(*args), leaves, inp.dy)
    y = dyt.dyt(*args)
    torch.cuda.synchronize()
    before = torch.cuda.memory_stats()["allocation.all.allocated"]
    grads = torch.autograd.grad(y, leaves, inp.dy)
    after = torch.cuda.memory_stats()["allocation.all.allocated"]
    assert after - before == 2 and len(grads) == len(leaves)


def _storage(t: torch.Tensor) -> tuple[int, int]:
    s = t.untyped_storage()
    return s.data_ptr(), s.nbytes()


@pytest.mark.gpu_only
@pytest.mark.parametrize("beta", [True, False], ids=["beta", "nobeta"])
def test_native_parameter_gradients_share_a_block_and_accumulate(beta, seed, ext):
    """The parameter gradients of a cached backward are disjoint regions of one storage that dx does not
    share; .grad accumulates into them across backward passes (twice one pass's gradient, bit for bit),
    a residual's gradient adds into dx, and a gradient held from one call survives the next."""
    import dyt

    inp = make_inputs((64, 197, 384), torch.bfloat16, seed=seed, param_dtype=torch.float32, beta=beta)
    x = inp.x.detach().requires_grad_(True)
    params = [p.detach().requires_grad_(True) for p in (inp.alpha, inp.gamma, inp.beta) if p is not None]
    args = (x, *params) if beta else (x, *params, None)
    for _ in range(2):
        torch.autograd.grad(dyt.dyt(*args), (x, *params), inp.dy)
    held = torch.autograd.grad(dyt.dyt(*args), (x, *params), inp.dy)
    copies = [g.clone() for g in held]
    dx, *dparams = torch.autograd.grad(dyt.dyt(*args), (x, *params), inp.dy)
    assert all(torch.equal(h, c) for h, c in zip(held, copies, strict=True))
    assert len({_storage(g) for g in dparams}) == 1 and _storage(dx) != _storage(dparams[0])
    spans = sorted((g.data_ptr(), g.data_ptr() + g.nbytes) for g in dparams)
    assert all(end <= nxt for (_, end), (nxt, _) in zip(spans, spans[1:], strict=False)), spans
    assert all(torch.equal(g, c) for g, c in zip(dparams, copies[1:], strict=True))

    (dyt.dyt(*args) + x).backward(inp.dy)
    dyt.dyt(*args).backward(inp.dy)
    assert torch.equal(x.grad, (copies[0] + inp.dy) + copies[0])
    for p, once in zip(params, copies[1:], strict=True):
        assert torch.equal(p.grad, once + once), p.shape


@pytest.mark.gpu_only
@pytest.mark.parametrize("case", [c for c in _input_cases() if "elsewhere" not in c[0]], ids=lambda c: c[0])
@pytest.mark.parametrize("where", ["all_cuda", "gamma_on_cpu"])
def test_native_calls_raise_what_validate_raises(case, where, ext):
    """On CUDA tensors dyt.dyt and dyt.dyt_channels_first call the native op first: what it refuses
    raises validate's own error (type and message), and what validate accepts runs."""
    import dyt

    _, channels_first, *tensors = case
    x, alpha, gamma, beta = (None if t is None else t.cuda() for t in tensors)
    if where == "gamma_on_cpu":
        gamma = gamma.cpu()
    entry = dyt.dyt_channels_first if channels_first else dyt.dyt
    try:
        ops.validate(x, alpha, gamma, beta, channels_first=channels_first)
    except (ValueError, TypeError) as expected:
        with pytest.raises(type(expected), match=re.escape(str(expected))):
            entry(x, alpha, gamma, beta)
    else:
        assert entry(x, alpha, gamma, beta).shape == x.shape


@pytest.mark.gpu_only
def test_native_launches_are_captured_by_cuda_graphs(seed, ext):
    """Forward and backward on the native path inside a CUDA graph: replays give eager's bits."""
    import dyt

    inp = make_inputs((64, 197, 384), torch.bfloat16, seed=seed)
    x, alpha, gamma, beta, dy = inp.x, inp.alpha, inp.gamma, inp.beta, inp.dy
    leaves = (x, alpha, gamma, beta)
    eager = [t.clone() for t in torch.autograd.grad(dyt.dyt(*leaves), leaves, dy)]
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            torch.autograd.grad(dyt.dyt(*leaves), leaves, dy)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with warnings.catch_warnings(), torch.cuda.graph(graph):
        grads = torch.autograd.grad(dyt.dyt(*leaves), leaves, dy)
    x.data.mul_(0.5)
    graph.replay()
    torch.cuda.synchronize()
    again = torch.autograd.grad(dyt.dyt(*leaves), leaves, dy)
    for a, b in zip(grads, again, strict=True):
        assert torch.equal(a, b)
    assert not torch.equal(grads[0], eager[0])  # the replay read the new x


def _run_packed(shape, dtype, param_dtype, beta, channels_first, seed):
    """_run_case's inputs through dyt_packed: (y, dx, dalpha, dgamma, dbeta), params' gradient, and how
    many blocks the backward allocated."""
    import dyt

    inp, _ = _run_case(shape, dtype, param_dtype, beta, channels_first, seed)
    parts = [inp.gamma] + ([inp.beta] if beta else []) + [inp.alpha.reshape(1)]
    params = torch.cat([p.detach() for p in parts]).requires_grad_()
    x = inp.x.detach().requires_grad_()
    y = dyt.dyt_packed(x, params, bias=beta, channels_first=channels_first)
    torch.cuda.synchronize()
    before = torch.cuda.memory_stats()["allocation.all.allocated"]
    dx, grad = torch.autograd.grad(y, (x, params), inp.dy)
    allocated = torch.cuda.memory_stats()["allocation.all.allocated"] - before
    dalpha, dgamma, dbeta = ops.split_params(grad, beta)
    return y, (y.detach(), dx, dalpha.reshape(inp.alpha.shape), dgamma, dbeta), grad, allocated


PACKED_CASES = {
    **CASES,
    "width_not_16_bytes": ((50, 100), "bf16", None, True, False),
    "channels_last_memory": ((4, 24, 7, 9), "bf16", torch.float32, True, "channels_last"),
}


@pytest.mark.gpu_only
@pytest.mark.parametrize("case", list(PACKED_CASES))
def test_packed_native_calls_give_the_unpacked_calls_bits_in_one_gradient(case, seed, monkeypatch, ext):
    """From its second call dyt_packed runs on the native op (not through dyt.launcher) with the
    unpacked native call's bits. Where every region is 16-byte aligned, its backward allocates two
    blocks as the unpacked one does (dx's, and the one that is params' gradient); elsewhere it joins the
    three gradients into a third. Channels-first x in torch.channels_last memory format runs the op on
    the moved view."""
    shape, dtype, param_dtype, beta, cf = PACKED_CASES[case]
    _, unpacked = _run_case(shape, dtype, param_dtype, beta, cf, seed)
    _run_packed(shape, dtype, param_dtype, beta, cf, seed)  # fills the caches where unpacked did not
    calls = []
    for name, real in (("forward", launcher.forward), ("backward", launcher.backward)):
        monkeypatch.setattr(launcher, name, lambda *a, _n=name, _r=real, **k: calls.append(_n) or _r(*a, **k))
    y, fast, grad, allocated = _run_packed(shape, dtype, param_dtype, beta, cf, seed)
    assert calls == [], "the second packed call went through dyt.launcher"
    node = y.grad_fn.next_functions[0][0] if cf == "channels_last" else y.grad_fn  # under the moved view
    assert "dyt_native::DyTPackedBackward" in node.name()
    assert_same_outputs(fast, unpacked)
    fits = shape[1 if cf else -1] * grad.element_size() % 16 == 0
    assert allocated == (2 if fits else 3) and grad.shape == (ops.packed_size(shape[1 if cf else -1], beta),)


@pytest.mark.gpu_only
@pytest.mark.parametrize("case", [c for c in _packed_cases() if "elsewhere" not in c[0]], ids=lambda c: c[0])
def test_packed_native_calls_raise_what_validate_packed_raises(case, ext):
    import dyt

    _, channels_first, bias, x, params = case
    x, params = x.cuda(), params.cuda()
    try:
        ops.validate_packed(x, params, bias=bias, channels_first=channels_first)
    except (ValueError, TypeError) as expected:
        with pytest.raises(type(expected), match=re.escape(str(expected))):
            dyt.dyt_packed(x, params, bias=bias, channels_first=channels_first)
    else:
        assert dyt.dyt_packed(x, params, bias=bias, channels_first=channels_first).shape == x.shape
