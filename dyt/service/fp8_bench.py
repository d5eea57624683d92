"""FP8 suite of the benchmark: DyT's output written in FP8 by dyt (dyt.fp8.dyt_fp8) beside dyt followed by
torchao's dynamic tensorwise cast of that output, against a copy that moves the same bytes.

    python -m dyt bench --suite fp8                       # bf16 and fp32 x, the model and bandwidth shapes
    python -m dyt bench --suite fp8 --device cpu --quick  # a smoke run on tiny shapes (numbers for nobody)

Providers, each a forward under torch.no_grad on the case's inputs (bench.make_inputs):
- dyt_fp8: dyt.fp8.dyt_fp8 with its tensorwise scale from the parameters (float8_e4m3fn);
- dyt_fp8_rowwise: the same with one scale per row (rowwise=True);
- dyt_then_torchao_cast: dyt.dyt, then torchao's dynamic tensorwise cast of y to float8_e4m3fn
  (torchao.float8.float8_scaling_utils.hp_tensor_to_float8_dynamic: an amax pass over y, then the cast);
- dyt_bf16: dyt.dyt alone (y in x's dtype), for reference;
- copy: bench.measure_ceiling of a device copy that moves the bytes dyt_fp8 moves (x read, one byte per
  element written), the ceiling each row's ratio_to_ceiling is taken against.

The providers of a case run interleaved in rounds (the order rotated each round), each time measured by the
kernel bench's timer (bench.triton_timer on a GPU, bench.wallclock_timer on the CPU); a row's median_ms is
the median of its rounds, and speedup_vs_torchao_cast the median of the per-round ratios
dyt_then_torchao_cast / this provider. Before it is timed, each provider's first output is dequantized
(data * scale; torchao's data / its multiplier) and compared with the float64 reference: the relative L2
error goes into the row, and a provider above its format's bound (ERROR_BOUNDS) becomes an error row and is
not timed, so a wrong kernel cannot look fast.

Record fields (the perf JSON's `fp8_records`, beside the kernel bench's `records` and the model bench's
`model_records`): provider, M, N, dtype (x), param_dtype, shape_set, mode (fwd_nograd), out_dtype,
scaling (tensorwise, rowwise or None), bytes_moved (x read + the output written, rowwise scales included),
median_ms, round_ms, rounds, gbps (bytes_moved over median_ms), ratio_to_ceiling (gbps over the copy's),
speedup_vs_torchao_cast and speedup_rounds (FP8 providers of dyt), first_call_s, err ({"y", "max"}: relative
L2 error of the dequantized output against float64), err_bound, error.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dyt.service import bench
from dyt.service.files import locked, unwritten, write_atomic
from dyt.service.records import json_safe, perf_path
from dyt.service.run_control import STOPPED, BenchStopped, error_text, progress, stops

PROVIDERS = ("dyt_fp8", "dyt_fp8_rowwise", "dyt_then_torchao_cast", "dyt_bf16")
COPY = "copy"
CAST = "dyt_then_torchao_cast"
FP8_DTYPE = "float8_e4m3fn"
MODE = "fwd_nograd"
DEFAULT_SHAPES = "model,bandwidth"
TINY_SHAPES = ((64, 64), (48, 768))  # the named set "tiny": --quick's default, for CPU runs
DEFAULT_ROUNDS, QUICK_ROUNDS = 5, 2
# Relative L2 error of an output against the float64 reference that no correct provider reaches: half an
# ulp relative to a normal value of the format (2^-(mantissa bits + 1)), twice that for the 16 and 32 bit
# outputs, whose float32 evaluation error also counts. A wrong scale or a wrong element is far above.
ERROR_BOUNDS = {"float8_e4m3fn": 2**-4, "float8_e5m2": 2**-3, "bfloat16": 2**-8, "float16": 2**-10,
                "float32": 2**-20}  # fmt: skip


# -------------------------------------------------------------------------------------------- providers


@dataclass(frozen=True)
class Provider:
    """A forward fn(x, alpha, gamma, beta) made by make() (its imports there: a missing library is a row),
    the dequantization of its output in float64, and the format and scaling it writes."""

    name: str
    make: Callable[[], Callable]
    dequantize: Callable[[Any], Any]
    out_dtype: Callable[[Any], Any]
    scaling: str | None = None


def _fp8(rowwise: bool) -> Callable[[], Callable]:
    def make():
        import torch

        from dyt.fp8 import dyt_fp8

        fmt = getattr(torch, FP8_DTYPE)
        return lambda x, a, g, b: dyt_fp8(x, a, g, b, fp8_dtype=fmt, rowwise=rowwise)

    return make


def _fp8_values(out):
    import torch

    return out.data.to(torch.float64) * out.scale.to(torch.float64)


def _then_torchao_cast():
    import torch
    from torchao.float8.float8_scaling_utils import hp_tensor_to_float8_dynamic
    from torchao.float8.float8_training_tensor import GemmInputRole, LinearMMConfig

    import dyt

    fmt, config = getattr(torch, FP8_DTYPE), LinearMMConfig()

    def run(x, a, g, b):
        return hp_tensor_to_float8_dynamic(
            dyt.dyt(x, a, g, b), fmt, config, gemm_input_role=GemmInputRole.INPUT
        )

    return run


def _torchao_values(out):
    """A Float8TrainingTensor's values: its float8 data over its scale (torchao's scale multiplies y)."""
    import torch

    return out._data.to(torch.float64) / out._scale.to(torch.float64)


def _dyt():
    import dyt

    return dyt.dyt


def _plain_values(out):
    import torch

    return out.to(torch.float64)


PROVIDER_SPECS: dict[str, Provider] = {
    "dyt_fp8": Provider("dyt_fp8", _fp8(False), _fp8_values, lambda o: o.data.dtype, "tensorwise"),
    "dyt_fp8_rowwise": Provider("dyt_fp8_rowwise", _fp8(True), _fp8_values, lambda o: o.data.dtype,
                                "rowwise"),
    CAST: Provider(CAST, _then_torchao_cast, _torchao_values, lambda o: o._data.dtype, "tensorwise"),
    "dyt_bf16": Provider("dyt_bf16", _dyt, _plain_values, lambda o: o.dtype),
}  # fmt: skip


# ---------------------------------------------------------------------------------------------- shapes


def parse_shapes(spec: str, dtypes: list[str]) -> list[bench.Case]:
    """The kernel bench's shape sets and MxN (bench.parse_shapes), and `tiny` (TINY_SHAPES)."""
    items = bench._split(spec)
    tiny = [bench.Case(m, n, d, d, "tiny") for item in items if item == "tiny" for d in dtypes
            for m, n in TINY_SHAPES]  # fmt: skip
    rest = ",".join(item for item in items if item != "tiny")
    cases = tiny + (bench.parse_shapes(rest, dtypes) if rest else [])
    seen: set = set()
    return [c for c in cases if not (c.key in seen or seen.add(c.key))]


def bytes_moved(case: bench.Case, provider: str, out_itemsize: int) -> int:
    """x read and the output written (one byte per element in FP8), plus the rowwise scales (float32)."""
    import torch

    x_size = getattr(torch, case.dtype).itemsize
    scales = 4 * case.M if provider == "dyt_fp8_rowwise" else 0
    return case.M * case.N * (x_size + out_itemsize) + scales


# ------------------------------------------------------------------------------------------- measuring


def _record(provider: str, case: bench.Case) -> dict[str, Any]:
    return {
        "provider": provider,
        "M": case.M,
        "N": case.N,
        "dtype": case.dtype,
        "param_dtype": case.param_dtype,
        "shape_set": case.shape_set,
        "mode": MODE,
        "out_dtype": None,
        "scaling": PROVIDER_SPECS[provider].scaling if provider in PROVIDER_SPECS else None,
        "bytes_moved": None,
        "median_ms": None,
        "round_ms": [],
        "rounds": 0,
        "gbps": None,
        "ratio_to_ceiling": None,
        "speedup_vs_torchao_cast": None,
        "speedup_rounds": [],
        "first_call_s": None,
        "err": {},
        "err_bound": None,
        "error": None,
    }


@dataclass
class _Ready:
    """A provider whose first output passed its check: what the rounds time."""

    call: Callable[[], Any]
    record: dict


def _check(provider: Provider, case: bench.Case, inputs: dict, ref, device, factories) -> _Ready | dict:
    """The provider's first call on the case (its JIT included: first_call_s), its output's error against
    the float64 reference, and the callable the rounds time; or its record with the error."""
    import torch

    rec = _record(provider.name, case)
    try:
        fn = (factories or {}).get(provider.name, provider.make)()
    except Exception as exc:  # noqa: BLE001 - a missing library is a row, not a crash
        rec["error"] = f"unavailable: {error_text(exc)}"
        return rec
    args = [inputs[k] for k in ("x", "alpha", "gamma", "beta")]

    def call():
        with torch.no_grad():
            return fn(*args)

    try:
        start = time.perf_counter()
        out = call()
        bench._sync(device)
        rec["first_call_s"] = time.perf_counter() - start
        out_dtype = provider.out_dtype(out)
        err = bench.rel_l2(provider.dequantize(out), ref)
        del out
    except Exception as exc:  # noqa: BLE001 - OOM, a launch failure: a row
        rec["error"] = error_text(exc)
        bench._free(device)
        return rec
    rec["out_dtype"] = str(out_dtype).removeprefix("torch.")
    rec["bytes_moved"] = bytes_moved(case, provider.name, out_dtype.itemsize)
    rec["err"] = {"y": err, "max": err}
    rec["err_bound"] = ERROR_BOUNDS.get(rec["out_dtype"])
    if rec["err_bound"] is None or not err <= rec["err_bound"]:  # NaN fails too
        rec["error"] = (f"wrong output: relative L2 error {err:.3g} of {rec['out_dtype']} against the "
                        f"float64 reference, above the bound {rec['err_bound']}; not timed")  # fmt: skip
        return rec
    return _Ready(call, rec)


def run_case(case: bench.Case, providers: Iterable[str], device, timer: bench.Timer, rounds: int,
             seed: int = 0, factories: dict[str, Callable[[], Callable]] | None = None,
             on_record: Callable[[dict], None] | None = None) -> list[dict]:  # fmt: skip
    """Every provider of one case and the copy of its bytes, interleaved in `rounds` rounds on shared
    inputs; failures become records. A stop (BenchStopped, Ctrl-C) mid-way first hands the records of the
    complete rounds to on_record, then re-raises."""
    import torch

    from dyt.reference import dyt_forward_reference

    records: list[dict] = []
    providers = list(providers)

    def emit(rec):
        records.append(rec)
        if on_record is not None:
            on_record(rec)

    try:
        inputs = bench.make_inputs(case, device, seed)
        ref = dyt_forward_reference(inputs["x"], inputs["alpha"], inputs["gamma"], inputs["beta"])
        bench._sync(device)
    except Exception as exc:  # noqa: BLE001 - OOM or a bad shape: every record of the case says why
        inputs = ref = None
        bench._free(device)
        for name in [*providers, COPY]:
            emit({**_record(name, case), "error": f"inputs: {error_text(exc)}"})
        return records
    ready: dict[str, _Ready] = {}
    failed: dict[str, dict] = {}
    for name in providers:
        checked = _check(PROVIDER_SPECS[name], case, inputs, ref, device, factories)
        if isinstance(checked, _Ready):
            ready[name] = checked
        else:
            failed[name] = checked
    ref = None
    half = bytes_moved(case, "dyt_fp8", torch.float8_e4m3fn.itemsize) // 2  # the copy reads and writes it
    copy_rec = {**_record(COPY, case), "bytes_moved": 2 * half}

    def copy():
        return bench.measure_ceiling(device, timer, half)["ms"]

    timed = {name: [] for name in [*ready, COPY]}
    errors: dict[str, str] = {}
    try:
        active = list(timed)
        for r in range(rounds):
            shift = r % len(active) if active else 0
            for name in active[shift:] + active[:shift]:
                try:
                    ms = copy() if name == COPY else timer(ready[name].call, None)
                    bench._sync(device)
                except Exception as exc:  # noqa: BLE001
                    errors[name] = error_text(exc)
                    bench._free(device)
                    continue
                timed[name].append(ms)
            active = [n for n in active if n not in errors]
    finally:  # a stop hands over the complete rounds first
        rows = {name: ready[name].record for name in ready} | {COPY: copy_rec}
        done = {rec["provider"]: rec for rec in _fill(rows, timed, errors)} | failed
        for name in [*providers, COPY]:
            if name in done:
                emit(done[name])
        inputs = None
        ready.clear()
        bench._free(device)
    return records


def _fill(rows: dict[str, dict], timed: dict[str, list], errors: dict[str, str]) -> list[dict]:
    """Times, rates, ratios to the copy and speedups over the torchao cast from the rounds every surviving
    provider completed; providers that failed in the rounds keep their error."""
    alive = [n for n in timed if n not in errors]
    complete = min((len(timed[n]) for n in alive), default=0)
    out = []
    for name, rec in rows.items():
        if name in errors:
            rec["error"] = errors[name]
        elif complete:
            rec["round_ms"] = timed[name][:complete]
            rec["rounds"] = complete
            rec["median_ms"] = statistics.median(rec["round_ms"])
            rec["gbps"] = rec["bytes_moved"] / (rec["median_ms"] * 1e-3) / 1e9
        else:
            continue  # stopped before its first complete round: nothing measured to report
        out.append(rec)
    copy = rows[COPY]
    cast = rows.get(CAST)
    for rec in out:
        if rec["gbps"] is not None and copy["gbps"]:
            rec["ratio_to_ceiling"] = rec["gbps"] / copy["gbps"]
        if rec["scaling"] is None or rec["provider"] == CAST or cast is None or not cast["round_ms"]:
            continue
        ratios = [c / m for c, m in zip(cast["round_ms"], rec["round_ms"], strict=False) if m > 0]
        if ratios:
            rec["speedup_rounds"] = ratios
            rec["speedup_vs_torchao_cast"] = statistics.median(ratios)
    return out


def run_all(cases: list[bench.Case], providers: list[str], device, timer: bench.Timer, rounds: int,
            seed: int = 0, stopped: list | None = None) -> list[dict]:  # fmt: skip
    """Every case under a progress bar (one tick per record). With a `stopped` list, a BenchStopped
    (SIGTERM, the time limit) or Ctrl-C ends the loop: the records finished come back, those of the case's
    complete rounds included, and the reason goes into `stopped`; without one, it propagates."""
    bar = progress(len(cases) * (len(providers) + 1))
    getattr(bar, "set_description", lambda _: None)("fp8")
    records: list[dict] = []

    def tick(rec):
        records.append(rec)
        bar.set_postfix_str(f"{rec['provider']} {rec['M']}x{rec['N']} {rec['dtype']}")
        bar.update(1)

    try:
        for i, case in enumerate(cases):
            run_case(case, providers, device, timer, rounds, seed + i, on_record=tick)
    except (BenchStopped, KeyboardInterrupt) as exc:
        if stopped is None:
            raise
        stopped.append(str(exc) if isinstance(exc, BenchStopped) else "SIGINT")
    finally:
        bar.close()
    return records


# ----------------------------------------------------------------------------------------------- output


def write_fp8(path: Path, env: dict, report: dict, append: bool = False) -> dict:
    """The suite's keys (fp8_*) into the run's perf JSON: beside the kernel and model rows of the same
    commit when that file exists (its env block kept), else in a new file with no kernel rows. With append,
    the file's FP8 records of other cases stay (one of the same provider, shape and dtypes is replaced).
    Read and written back under files.locked, whole or not at all (files.write_atomic); an OSError
    propagates with the old file intact. Returns what it wrote."""
    with locked(path):
        data: dict[str, Any] = {"env": env, "records": []}
        if path.exists():
            try:
                old = json.loads(path.read_text())
                data = old if isinstance(old, dict) else data
            except (OSError, ValueError):
                pass
        records = report["fp8_records"]
        if append and isinstance(data.get("fp8_records"), list):
            new = {_key(r) for r in records}
            records = [r for r in data["fp8_records"] if isinstance(r, dict) and _key(r) not in new] + records
        for key in [k for k in data if k.startswith("fp8_")]:
            del data[key]
        data.update(report, fp8_records=records)
        write_atomic(path, json.dumps(json_safe(data), indent=1) + "\n")
    return data


def _key(rec: dict) -> tuple:
    return (rec.get("provider"), rec.get("M"), rec.get("N"), rec.get("dtype"), rec.get("param_dtype"))


def _ms(rec: dict | None) -> str:
    if rec is None:
        return ""
    if rec.get("error"):
        return "error"
    return "-" if rec.get("median_ms") is None else f"{rec['median_ms']:.3f}"


def _of_copy(rec: dict | None) -> str:
    ratio = (rec or {}).get("ratio_to_ceiling")
    return f"{_ms(rec)} ({ratio:.2f})" if ratio is not None else _ms(rec)


def _err(rec: dict | None) -> str:
    value = ((rec or {}).get("err") or {}).get("y")
    return "" if value is None else f"{value:.1e}"


def table_lines(records: list[dict]) -> list[str]:
    """One markdown row per case: each provider's ms (its fraction of the copy's rate), dyt_fp8's speedup
    over the torchao cast, and the FP8 outputs' relative errors (dyt_fp8 / rowwise / torchao)."""
    cases: dict[tuple, dict[str, dict]] = {}
    for rec in records:
        cases.setdefault((rec["M"], rec["N"], rec["dtype"], rec["param_dtype"]), {})[rec["provider"]] = rec
    out = ["| shape | x | copy GB/s | dyt_fp8 ms (of copy) | rowwise ms (of copy) | dyt + torchao cast ms | "
           "dyt_fp8 speedup | dyt alone ms | fp8 rel err (dyt / rowwise / torchao) |",
           "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for (m, n, dtype, pdt), by in cases.items():
        copy_gbps = (by.get(COPY) or {}).get("gbps")
        speedup = (by.get("dyt_fp8") or {}).get("speedup_vs_torchao_cast")
        x = dtype if pdt == dtype else f"{dtype} (params {pdt})"
        errs = " / ".join(_err(by.get(p)) for p in ("dyt_fp8", "dyt_fp8_rowwise", CAST))
        copy = "" if copy_gbps is None else f"{copy_gbps:.0f}"
        speed = "" if speedup is None else f"{speedup:.2f}x"
        out.append(f"| {m}x{n} | {x} | {copy} | {_of_copy(by.get('dyt_fp8'))} | "
                   f"{_of_copy(by.get('dyt_fp8_rowwise'))} | {_ms(by.get(CAST))} | {speed} | "
                   f"{_ms(by.get('dyt_bf16'))} | {errs} |")  # fmt: skip
    return out


# ----------------------------------------------------------------------------------------------- the CLI


def main(args: argparse.Namespace) -> int:
    """`python -m dyt bench --suite fp8`: measure, write the fp8_* keys of reports/perf/<gpu>-<sha7>.json,
    print the table."""
    quick = bool(getattr(args, "quick", False))
    try:
        providers = bench._split(args.providers or ",".join(PROVIDERS))
        for p in providers:
            if p not in PROVIDERS:
                raise ValueError(f"unknown provider {p!r}: expected one of {', '.join(PROVIDERS)}")
        shapes = args.shapes or ("tiny" if quick else DEFAULT_SHAPES)
        cases = parse_shapes(shapes, bench.parse_dtypes(args.dtypes))
        rounds = int(getattr(args, "rounds", None) or (QUICK_ROUNDS if quick else DEFAULT_ROUNDS))
        if rounds < 1:
            raise ValueError(f"--rounds must be at least 1, got {rounds}")
    except ValueError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 2
    import torch

    on_cpu = getattr(args, "device", "cuda") == "cpu"
    if not on_cpu and not torch.cuda.is_available():
        print("bench: no CUDA device visible (torch.cuda.is_available() is False); the fp8 suite times GPU "
              "kernels against the GPU's copy. `--device cpu` runs the harness on the CPU (numbers for "
              "nobody).", file=sys.stderr)  # fmt: skip
        return 2
    from dyt.service.env import collect_env

    device = torch.device("cpu") if on_cpu else torch.device("cuda", torch.cuda.current_device())
    timer = bench.wallclock_timer() if on_cpu else bench.triton_timer(quick=quick)
    env = collect_env(seeds={"fp8_bench": args.seed})
    ceiling = bench.measure_ceiling(device, timer, 2**20 if on_cpu else bench.CEILING_BYTES)
    print(f"copy ceiling on {env.get('gpu_name') or device}: {ceiling['gbps']:.0f} GB/s", file=sys.stderr)
    stopped: list[str] = []
    started = time.perf_counter()
    with stops(getattr(args, "time_limit", None)):
        records = run_all(cases, providers, device, timer, rounds, args.seed, stopped)
    report: dict[str, Any] = {
        "fp8_ceiling": ceiling,
        "fp8_config": {
            "providers": providers, "shapes": shapes, "dtypes": args.dtypes, "fp8_dtype": FP8_DTYPE,
            "rounds": rounds, "quick": quick, "seed": args.seed, "device": str(device),
            "timer": "wall clock median" if on_cpu else "triton.testing.do_bench median",
            "error_bounds": ERROR_BOUNDS, "wall_s": time.perf_counter() - started,
            "timestamp_utc": env.get("timestamp_utc"),
        },
        "fp8_records": records,
    }  # fmt: skip
    planned = len(cases) * (len(providers) + 1)
    if stopped:
        report["fp8_incomplete"] = {"records": len(records), "of": planned, "stopped_by": stopped[0]}
    path = perf_path(Path(args.out), env)
    try:
        write_fp8(path, env, report, append=getattr(args, "append", False))
    except OSError as exc:  # a full disk, a read-only reports/: the rows go elsewhere, not nowhere
        own = {"env": env, "records": [], **report}
        return unwritten("bench", path, exc, json.dumps(json_safe(own), indent=1) + "\n",
                         f"the {len(records)} fp8 records measured")  # fmt: skip
    failed = sum(1 for r in records if r["error"])
    print(f"wrote {path} ({len(records)} fp8 records, {failed} with errors)")
    if getattr(args, "compare", None):
        print(
            "bench: --compare gates the kernel and model rows; the fp8 records are not gated", file=sys.stderr
        )
    if stopped:
        print(f"bench: stopped by {stopped[0]} after {len(records)} of {planned} fp8 records; those are in "
              f"{path}", file=sys.stderr)  # fmt: skip
    print()
    for line in table_lines(records):
        print(line)
    return STOPPED if stopped else 0
