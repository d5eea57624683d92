"""tooling: the fp8 suite of the benchmark (dyt/service/fp8_bench.py) on CPU, at tiny shapes.

Its rows (providers, fields, the bytes each moves, ratios to the copy, speedups over torchao's cast), the
error column against an independent dequantization, a wrong provider caught before it is timed, a stop that
keeps the complete rounds, and the CLI path writing the perf JSON's fp8_* keys beside the other suites'.
"""

from __future__ import annotations

import json
import statistics
import warnings

import pytest
import torch

from dyt.service import bench, fp8_bench, model_bench
from dyt.service.run_control import BenchStopped

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    pytest.importorskip(
        "torchao.float8", reason="torchao is not installed: pip install 'dyt[fp8]' (nox -s tests installs it)"
    )

pytestmark = pytest.mark.tooling

ORDER = [*fp8_bench.PROVIDERS, fp8_bench.COPY]
CASES = [
    bench.Case(64, 64, "bfloat16", "bfloat16", "tiny"),
    bench.Case(48, 768, "float32", "float32", "tiny"),
]


def _run(case, **kw):
    args = {"providers": fp8_bench.PROVIDERS, "device": "cpu", "timer": bench.wallclock_timer(reps=1),
            "rounds": 2, "seed": 5} | kw  # fmt: skip
    return fp8_bench.run_case(case, **args)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.M}x{c.N}-{c.dtype}")
def test_rows_of_a_case(case):
    records = _run(case)
    assert [r["provider"] for r in records] == ORDER
    by = {r["provider"]: r for r in records}
    x_size = getattr(torch, case.dtype).itemsize
    fields = set(fp8_bench._record("dyt_fp8", case))
    for rec in records:
        assert set(rec) == fields and rec["error"] is None, rec
        assert (rec["M"], rec["N"], rec["dtype"], rec["mode"]) == (case.M, case.N, case.dtype, "fwd_nograd")
        assert rec["rounds"] == 2 and len(rec["round_ms"]) == 2
        assert rec["median_ms"] == statistics.median(rec["round_ms"]) > 0
        assert rec["gbps"] == pytest.approx(rec["bytes_moved"] / (rec["median_ms"] * 1e-3) / 1e9)
        assert rec["ratio_to_ceiling"] == pytest.approx(rec["gbps"] / by["copy"]["gbps"])
    elements = case.M * case.N
    assert by["dyt_fp8"]["bytes_moved"] == by["copy"]["bytes_moved"] == elements * (x_size + 1)
    assert by["dyt_fp8_rowwise"]["bytes_moved"] == elements * (x_size + 1) + 4 * case.M  # its scales
    assert by["dyt_then_torchao_cast"]["bytes_moved"] == elements * (x_size + 1)
    assert by["dyt_bf16"]["bytes_moved"] == 2 * elements * x_size  # y in x's dtype
    assert [by[p]["out_dtype"] for p in fp8_bench.PROVIDERS] == ["float8_e4m3fn"] * 3 + [case.dtype]
    assert [by[p]["scaling"] for p in ORDER] == ["tensorwise", "rowwise", "tensorwise", None, None]
    for name in ("dyt_fp8", "dyt_fp8_rowwise", "dyt_then_torchao_cast"):
        err = by[name]["err"]["y"]
        # FP8 rounding is there (the output is FP8, not y passed through) and within e4m3's half ulp
        assert 2**-8 < err <= by[name]["err_bound"] == 2**-4 and by[name]["err"]["max"] == err
    assert by["dyt_bf16"]["err"]["y"] <= fp8_bench.ERROR_BOUNDS[case.dtype]
    cast = by["dyt_then_torchao_cast"]["round_ms"]
    for name in ("dyt_fp8", "dyt_fp8_rowwise"):
        rec = by[name]
        assert rec["speedup_rounds"] == pytest.approx(
            [c / m for c, m in zip(cast, rec["round_ms"], strict=True)]
        )
        assert rec["speedup_vs_torchao_cast"] == statistics.median(rec["speedup_rounds"])
    assert all(
        by[p]["speedup_vs_torchao_cast"] is None for p in ("dyt_then_torchao_cast", "dyt_bf16", "copy")
    )


def test_the_error_column_is_the_dequantized_outputs_error():
    """Recomputed here from the same inputs: dyt.fp8's own dequantize() and torchao's, against float64."""
    from torchao.float8.float8_scaling_utils import hp_tensor_to_float8_dynamic
    from torchao.float8.float8_training_tensor import LinearMMConfig

    import dyt
    from dyt.fp8 import dyt_fp8
    from dyt.reference import dyt_forward_reference

    case = CASES[0]
    by = {r["provider"]: r for r in _run(case, rounds=1)}
    inputs = bench.make_inputs(case, "cpu", 5)
    args = [inputs[k] for k in ("x", "alpha", "gamma", "beta")]
    ref = dyt_forward_reference(*args)

    def rel(got):
        return float(torch.linalg.vector_norm(got.double() - ref) / torch.linalg.vector_norm(ref))

    with torch.no_grad():
        tensorwise, rowwise = dyt_fp8(*args), dyt_fp8(*args, rowwise=True)
        cast = hp_tensor_to_float8_dynamic(dyt.dyt(*args), torch.float8_e4m3fn, LinearMMConfig())
    assert by["dyt_fp8"]["err"]["y"] == pytest.approx(rel(tensorwise.dequantize(torch.float64)), rel=1e-4)
    assert by["dyt_fp8_rowwise"]["err"]["y"] == pytest.approx(
        rel(rowwise.dequantize(torch.float64)), rel=1e-4
    )
    assert by["dyt_then_torchao_cast"]["err"]["y"] == pytest.approx(
        rel(cast.to_original_precision().float()), rel=2e-2
    )  # torchao's own dequantization rounds to bf16 on the way


def test_a_wrong_provider_is_an_error_row_and_never_timed():
    """An FP8 output with the wrong scale (off by 2), and one that leaves beta out: the error column
    exposes both, and neither gets a time or a speedup."""
    from dyt.fp8 import Float8Output, dyt_fp8

    def wrong_scale():
        return lambda *args: (lambda out: Float8Output(out.data, out.scale * 2))(dyt_fp8(*args))

    def no_beta():
        return lambda x, a, g, b: dyt_fp8(x, a, g, None, fp8_dtype=torch.float8_e5m2, rowwise=True)

    records = _run(CASES[0], factories={"dyt_fp8": wrong_scale, "dyt_fp8_rowwise": no_beta})
    by = {r["provider"]: r for r in records}
    assert [r["provider"] for r in records] == ORDER
    for name in ("dyt_fp8", "dyt_fp8_rowwise"):
        rec = by[name]
        assert rec["error"].startswith("wrong output: relative L2 error"), rec
        assert rec["err"]["y"] > rec["err_bound"] and rec["median_ms"] is None and rec["rounds"] == 0
        assert rec["speedup_vs_torchao_cast"] is None and rec["round_ms"] == []
    assert by["dyt_fp8"]["err"]["y"] == pytest.approx(1.0, rel=0.05)  # every value twice its size
    assert by["dyt_fp8_rowwise"]["out_dtype"] == "float8_e5m2" and by["dyt_fp8_rowwise"]["err_bound"] == 2**-3
    assert by["dyt_then_torchao_cast"]["error"] is None and by["dyt_then_torchao_cast"]["rounds"] == 2


def test_a_missing_or_failing_provider_is_a_row():
    def missing():
        raise ImportError("No module named 'torchao'")

    def failing():
        def run(*args):
            raise RuntimeError("Triton Error [CUDA]: invalid argument")

        return run

    by = {r["provider"]: r for r in _run(CASES[0], factories={"dyt_then_torchao_cast": missing,
                                                              "dyt_bf16": failing})}  # fmt: skip
    assert by["dyt_then_torchao_cast"]["error"] == "unavailable: ImportError: No module named 'torchao'"
    assert by["dyt_bf16"]["error"] == "RuntimeError: Triton Error [CUDA]: invalid argument"
    assert by["dyt_fp8"]["error"] is None and by["dyt_fp8"]["rounds"] == 2
    assert by["dyt_fp8"]["speedup_vs_torchao_cast"] is None  # nothing to compare with


def test_a_stop_keeps_the_complete_rounds():
    calls = []
    wallclock = bench.wallclock_timer(reps=1)

    def timer(fn, grads):
        calls.append(fn)
        if len(calls) == 5 + 5 + 2:  # the third round's second call
            raise BenchStopped("SIGTERM")
        return wallclock(fn, grads)

    stopped = []
    records = fp8_bench.run_all(CASES, list(fp8_bench.PROVIDERS), "cpu", timer, 3, 0, stopped)
    assert stopped == ["SIGTERM"]
    assert [r["provider"] for r in records] == ORDER  # the first case only
    assert all(r["rounds"] == 2 and r["error"] is None for r in records)
    with pytest.raises(BenchStopped):
        calls.clear()
        fp8_bench.run_all(CASES, list(fp8_bench.PROVIDERS), "cpu", timer, 3, 0)


def test_shapes_and_arguments():
    names = [(c.M, c.N, c.dtype, c.shape_set) for c in fp8_bench.parse_shapes("tiny,16x32,tiny", ["float32"])]
    assert names == [(64, 64, "float32", "tiny"), (48, 768, "float32", "tiny"), (16, 32, "float32", "custom")]
    default = fp8_bench.parse_shapes(fp8_bench.DEFAULT_SHAPES, ["bfloat16"])
    assert [(c.M, c.N) for c in default] == [*bench.MODEL_SHAPES, *bench.bandwidth_shapes()]


def _args(tmp_path, *extra):
    from dyt.service import cli

    return cli._parser().parse_args(["bench", "--suite", "fp8", "--device", "cpu", "--quick", "--dtypes",
                                     "bf16", "--out", str(tmp_path), *extra])  # fmt: skip


def test_main_on_cpu_writes_the_fp8_keys_and_prints_the_table(tmp_path, capsys):
    assert fp8_bench.main(_args(tmp_path)) == 0
    (path,) = tmp_path.glob("*.json")
    data = json.loads(path.read_text())
    assert data["records"] == [] and data["env"]["git_sha"] and "fp8_incomplete" not in data
    assert [(r["M"], r["N"], r["provider"]) for r in data["fp8_records"]] == [
        (m, n, p) for m, n in fp8_bench.TINY_SHAPES for p in ORDER
    ]
    assert all(r["error"] is None for r in data["fp8_records"])
    config = data["fp8_config"]
    assert (config["rounds"], config["shapes"], config["device"]) == (2, "tiny", "cpu")
    assert data["fp8_ceiling"]["gbps"] > 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-4].startswith("| shape | x | copy GB/s | dyt_fp8 ms (of copy) |")
    assert out[-2].startswith("| 64x64 | bfloat16 |") and out[-1].startswith("| 48x768 | bfloat16 |")
    # the other suites writing the same commit's file keep the fp8 keys, and the fp8 suite theirs
    kernel = bench.write_perf(path, {"env": data["env"], "ceiling_gbps": 1.0, "records": []})
    assert kernel["fp8_records"] == data["fp8_records"] and "fp8_config" in kernel
    model_bench.write_rows(path, data["env"], [], {"rounds": 1}, None)
    assert fp8_bench.main(_args(tmp_path, "--shapes", "16x32", "--append")) == 0
    merged = json.loads(path.read_text())
    assert merged["model_config"] == {"rounds": 1} and merged["ceiling_gbps"] == 1.0
    assert len(merged["fp8_records"]) == 3 * len(ORDER)  # the tiny cases kept, 16x32 added
    assert fp8_bench.main(_args(tmp_path, "--shapes", "16x32")) == 0
    assert len(json.loads(path.read_text())["fp8_records"]) == len(ORDER)


def test_main_refuses_bad_arguments_and_a_missing_gpu(tmp_path, capsys, monkeypatch):
    assert fp8_bench.main(_args(tmp_path, "--providers", "dyt_fp8,nope")) == 2
    assert "unknown provider 'nope'" in capsys.readouterr().err
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    args = _args(tmp_path)
    args.device = "cuda"
    assert fp8_bench.main(args) == 2
    assert "no CUDA device" in capsys.readouterr().err and not list(tmp_path.glob("*.json"))
