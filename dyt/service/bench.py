"""Performance harness and its regression gate: dyt beside its peers, as ratios to the copy ceiling.

Every number is measured in one run on one GPU (the peers, the device-to-device copy ceiling and dyt), so
ratios hold on a noisy machine where absolute times do not. A failing provider or shape becomes a record
with an "error" string, never a crash. torch and triton are imported inside functions only: the gate reads
files alone and must run where neither is installed.

Record fields: provider, M, N, dtype (x), param_dtype, mode, shape_set, median_ms, gbps (minimal bytes),
ratio_to_ceiling, speedup_vs_best_peer (fastest other provider's ms / this ms), first_call_s (the
provider's first forward on the case's inputs: JIT or torch.compile time included), y_dtype (what the
provider returned: eager and compile promote y to float32 in the mixed set),
error (None, or why the record failed), err (relative L2 errors against float64: y, dx, dalpha, dgamma,
dbeta, and max over those the mode exercises).
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import re
import signal
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dyt.service.files import locked, unwritten, write_atomic
from dyt.service.gate import gate_files
from dyt.service.records import json_safe, perf_path, record_key
from dyt.service.run_control import STOPPED, BenchStopped, error_text, progress, stop_on_signal

DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
HALF_DTYPES = ("bfloat16", "float16")
PROVIDERS = ("dyt", "eager", "compile", "liger")
MODES = ("fwd", "bwd", "fwdbwd", "fwd_nograd")
DEFAULT_MODES = ("fwd", "bwd", "fwdbwd")
DEFAULT_DTYPES = ("bf16", "fp32")
DEFAULT_SHAPE_SETS = ("bandwidth", "small", "model", "mixed")

BANDWIDTH_ELEMENTS = 2**26
BANDWIDTH_WIDTHS = (64, 128, 256, 512, 768, 1024, 2048, 4096, 8192, 16384)
SMALL_SHAPES = ((4096, 64), (4096, 256), (2048, 4096), (6304, 768))
MODEL_SHAPES = ((50432, 768), (32768, 4096), (16384, 8192))
CEILING_BYTES = 2**30
# The keys of the perf JSON that the other suites write (dyt.service.model_bench, dyt.service.fp8_bench):
# a kernel run of the same commit keeps them.
SUITE_PREFIXES = ("model_", "fp8_")

# Minimal traffic in units of x's size: fwd reads x, writes y; bwd reads x and dy, writes dx.
TRAFFIC = {"fwd": 2, "fwd_nograd": 2, "bwd": 3, "fwdbwd": 5}
# Which relative errors each mode answers for (the "max" in err).
MODE_ERRORS = {
    "fwd": ("y",),
    "fwd_nograd": ("y",),
    "bwd": ("dx", "dalpha", "dgamma", "dbeta"),
    "fwdbwd": ("y", "dx", "dalpha", "dgamma", "dbeta"),
}

Timer = Callable[[Callable[[], Any], list | None], float]


@dataclass(frozen=True)
class Case:
    """One input configuration: every provider and mode of a case shares the same tensors."""

    M: int
    N: int
    dtype: str
    param_dtype: str
    shape_set: str

    @property
    def key(self) -> tuple[int, int, str, str]:
        return (self.M, self.N, self.dtype, self.param_dtype)


# ----------------------------------------------------------------------------------------------- shapes


def bandwidth_shapes() -> list[tuple[int, int]]:
    """rows x C = 2^26 elements (rows = 2^26 // C where C does not divide it, e.g. 768)."""
    return [(BANDWIDTH_ELEMENTS // c, c) for c in BANDWIDTH_WIDTHS]


def parse_dtypes(spec: str) -> list[str]:
    out = []
    for name in _split(spec):
        if name not in DTYPES:
            raise ValueError(f"unknown dtype {name!r}: expected one of {', '.join(DTYPES)}")
        out.append(DTYPES[name])
    return out


def parse_shapes(spec: str, dtypes: list[str]) -> list[Case]:
    """Named sets (bandwidth, small, model, mixed) and explicit MxN, crossed with dtypes; no duplicates.

    mixed: the small and model shapes with half-precision x and float32 parameters (x in the half dtypes
    asked for, bf16 when none was).
    """
    cases: list[Case] = []
    for item in _split(spec):
        if item == "bandwidth":
            cases += [Case(m, n, d, d, "bandwidth") for d in dtypes for m, n in bandwidth_shapes()]
        elif item in ("small", "model"):
            shapes = SMALL_SHAPES if item == "small" else MODEL_SHAPES
            cases += [Case(m, n, d, d, item) for d in dtypes for m, n in shapes]
        elif item == "mixed":
            halves = [d for d in dtypes if d in HALF_DTYPES] or ["bfloat16"]
            cases += [
                Case(m, n, d, "float32", "mixed") for d in halves for m, n in SMALL_SHAPES + MODEL_SHAPES
            ]
        elif match := re.fullmatch(r"(\d+)[xX](\d+)", item):
            m, n = int(match.group(1)), int(match.group(2))
            cases += [Case(m, n, d, d, "custom") for d in dtypes]
        else:
            raise ValueError(f"unknown shape {item!r}: expected bandwidth, small, model, mixed or MxN")
    seen: set = set()
    return [c for c in cases if not (c.key in seen or seen.add(c.key))]


def _split(spec: str) -> list[str]:
    return [s.strip() for s in spec.split(",") if s.strip()]


# -------------------------------------------------------------------------------------------- providers


def _eager(x, alpha, gamma, beta):
    import torch

    return gamma * torch.tanh(alpha * x) + beta


def _provider_dyt():
    import dyt

    return dyt.dyt


def _provider_eager():
    return _eager


def _provider_compile():
    """A fresh compile per case: dynamo state is reset so no case falls back to eager or goes dynamic."""
    import torch

    torch._dynamo.reset()
    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, max(64, getattr(torch._dynamo.config, name)))
    return torch.compile(_eager, dynamic=False)


def _provider_liger():
    from liger_kernel.ops.dyt import LigerDyTFunction

    return LigerDyTFunction.apply


PROVIDER_FACTORIES: dict[str, Callable[[], Callable]] = {
    "dyt": _provider_dyt,
    "eager": _provider_eager,
    "compile": _provider_compile,
    "liger": _provider_liger,
}


# ------------------------------------------------------------------------------------------- measuring


def triton_timer(quick: bool = False) -> Timer:
    """Median of triton.testing.do_bench; grads reset outside the timed region, L2 flushed each rep."""
    from triton.testing import do_bench

    warmup, rep = (3, 10) if quick else (25, 100)

    def timer(fn, grad_to_none):
        return float(do_bench(fn, warmup=warmup, rep=rep, grad_to_none=grad_to_none, return_mode="median"))

    return timer


def wallclock_timer(reps: int = 3) -> Timer:
    """Median wall time: for CPU smoke tests of the harness, not for numbers anyone reads."""

    def timer(fn, grad_to_none):
        times = []
        for _ in range(reps):
            for t in grad_to_none or ():
                t.grad = None
            start = time.perf_counter()
            fn()
            times.append((time.perf_counter() - start) * 1e3)
        return statistics.median(times)

    return timer


def _sync(device) -> None:
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def measure_ceiling(device, timer: Timer, nbytes: int = CEILING_BYTES) -> dict[str, float]:
    """Device-to-device copy of nbytes: GB/s counting bytes read and written (2 x nbytes)."""
    import torch

    buf = [torch.empty(nbytes, dtype=torch.uint8, device=device) for _ in range(2)]
    try:
        ms = timer(lambda: buf[1].copy_(buf[0]), None)
    finally:
        buf.clear()
        _free(device)
    return {"ms": ms, "gbps": 2 * nbytes / (ms * 1e-3) / 1e9, "bytes": nbytes}


def measure_copies_at_traffic(device, timer: Timer, cases: list[Case], modes: list[str],
                              elements: int = BANDWIDTH_ELEMENTS) -> list[dict]:  # fmt: skip
    """Copies that move the bytes each mode moves at the bandwidth shapes (2^26 elements; 268 MB for bf16
    forward), timed like the kernels (do_bench, and CUDA-graph replays when the run has them): how near
    the 1 GiB copy's rate any one kernel of that length gets, its launch and tail being a larger share of
    a shorter run."""
    import torch

    itemsizes = {getattr(torch, c.dtype).itemsize for c in cases if c.shape_set == "bandwidth"}
    moved = sorted({TRAFFIC[m] * elements * size for size in itemsizes for m in modes})
    out = []
    for nbytes in moved:
        buf = [torch.empty(nbytes // 2, dtype=torch.uint8, device=device) for _ in range(2)]
        try:
            copy = lambda buf=buf: buf[1].copy_(buf[0])  # noqa: E731
            rec = {"bytes_moved": nbytes, "ms": timer(copy, None)}
            rec["gbps"] = nbytes / (rec["ms"] * 1e-3) / 1e9
            if getattr(timer, "graph", False):
                rec["graph_ms"] = replay_median_ms(copy)
                rec["graph_gbps"] = nbytes / (rec["graph_ms"] * 1e-3) / 1e9
        finally:
            buf.clear()
            _free(device)
        out.append(rec)
    return out


def make_inputs(case: Case, device, seed: int) -> dict[str, Any]:
    """The suites' fresh random inputs (dyt.reference.random_inputs) for a case, on its device."""
    import torch

    from dyt.reference import random_inputs

    dtype, param_dtype = getattr(torch, case.dtype), getattr(torch, case.param_dtype)
    return random_inputs((case.M, case.N), dtype, seed=seed, param_dtype=param_dtype, device=device)


def reference(inputs: dict[str, Any]) -> dict[str, Any]:
    """float64 y and gradients on exactly the inputs every provider sees."""
    from dyt.reference import dyt_backward_reference, dyt_forward_reference

    x, a, g, b, dy = (inputs[k] for k in ("x", "alpha", "gamma", "beta", "dy"))
    y = dyt_forward_reference(x, a, g, b)
    dx, da, dg, db = dyt_backward_reference(dy, x, a, g, b)
    return {"y": y, "dx": dx, "dalpha": da, "dgamma": dg, "dbeta": db}


def rel_l2(got, ref) -> float:
    """||got - ref|| / ||ref|| in float64 (absolute norm where the reference is all zero)."""
    import torch

    got64 = got.detach().to(torch.float64)
    num = torch.linalg.vector_norm(got64 - ref).item()
    den = torch.linalg.vector_norm(ref).item()
    return num / den if den > 0 else num


def _leaves(inputs):
    return [inputs[k].detach().clone().requires_grad_() for k in ("x", "alpha", "gamma", "beta")]


def measure_errors(fn, inputs, ref, device) -> tuple[dict[str, float], float]:
    """Relative L2 errors of y and of every gradient from one forward and backward, and the cold time.

    Also y's dtype: in the mixed set plain PyTorch promotes y to float32, a different contract from ours.

        This is the provider's first call on the case, so its forward time (JIT or torch.compile included)
        is the first-call time.
    """
    leaves = _leaves(inputs)
    start = time.perf_counter()
    y = fn(*leaves)
    _sync(device)
    first_call_s = time.perf_counter() - start
    y.backward(inputs["dy"])
    got = {"y": y, "dx": leaves[0].grad, "dalpha": leaves[1].grad, "dgamma": leaves[2].grad}
    got["dbeta"] = leaves[3].grad
    errs: dict[str, Any] = {}
    for name, tensor in got.items():
        errs[name] = float("nan") if tensor is None else rel_l2(tensor, ref[name])
    errs["y_dtype"] = str(y.dtype).removeprefix("torch.")
    return errs, first_call_s


def timed_fn(fn, mode: str, inputs) -> tuple[Callable[[], Any], list | None]:
    """The callable to time for a mode, and the leaves whose grads the timer resets between reps."""
    import torch

    if mode == "fwd_nograd":
        args = [inputs[k] for k in ("x", "alpha", "gamma", "beta")]

        def run():
            with torch.no_grad():
                return fn(*args)

        return run, None
    leaves = _leaves(inputs)
    dy = inputs["dy"]
    if mode == "fwd":
        return (lambda: fn(*leaves)), None
    if mode == "bwd":
        y = fn(*leaves)
        return (lambda: y.backward(dy, retain_graph=True)), leaves
    if mode == "fwdbwd":
        return (lambda: fn(*leaves).backward(dy)), leaves
    raise ValueError(f"unknown mode {mode!r}: expected one of {', '.join(MODES)}")


def _free(device) -> None:
    import torch

    gc.collect()
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()


def _record(provider: str, case: Case, mode: str) -> dict[str, Any]:
    return {
        "provider": provider,
        "M": case.M,
        "N": case.N,
        "dtype": case.dtype,
        "param_dtype": case.param_dtype,
        "mode": mode,
        "shape_set": case.shape_set,
        "median_ms": None,
        "gbps": None,
        "ratio_to_ceiling": None,
        "speedup_vs_best_peer": None,
        "first_call_s": None,
        "error": None,
        "err": {},
    }


def run_case(
    case: Case,
    providers: Iterable[str],
    modes: Iterable[str],
    device,
    timer: Timer,
    ceiling_gbps: float | None,
    seed: int = 0,
    factories: dict[str, Callable[[], Callable]] | None = None,
    on_record: Callable[[dict], None] | None = None,
) -> list[dict[str, Any]]:
    """Every provider x mode of one case on shared inputs; exceptions (OOM included) become records."""
    factories = factories or PROVIDER_FACTORIES
    modes = list(modes)
    records: list[dict[str, Any]] = []
    inputs = ref = None
    setup_error = None
    try:
        inputs = make_inputs(case, device, seed)
        ref = reference(inputs)
        _sync(device)
    except Exception as exc:  # noqa: BLE001 - OOM or a bad shape: every record of the case says why
        setup_error = f"inputs: {error_text(exc)}"
    if setup_error is not None:  # freed outside the except block: the traceback pins the tensors
        inputs = ref = None
        _free(device)
    elem_bytes = inputs["x"].element_size() if inputs is not None else 0
    for provider in providers:
        fn, provider_error, errs, cold = None, setup_error, {}, None
        if provider_error is None:
            try:
                fn = factories[provider]()
            except Exception as exc:  # noqa: BLE001 - a missing peer is a row, not a crash
                provider_error = f"unavailable: {error_text(exc)}"
        if provider_error is None:
            try:
                errs, cold = measure_errors(fn, inputs, ref, device)
                _sync(device)
            except Exception as exc:  # noqa: BLE001
                provider_error = error_text(exc)
            if provider_error is not None:
                _free(device)
        for mode in modes:
            rec = _record(provider, case, mode)
            rec["first_call_s"] = cold
            rec["y_dtype"] = errs.get("y_dtype")
            if provider_error is not None:
                rec["error"] = provider_error
            else:
                try:
                    _measure_mode(rec, fn, mode, inputs, device, timer, elem_bytes, ceiling_gbps)
                except Exception as exc:  # noqa: BLE001
                    rec["error"] = error_text(exc)
                if rec["error"]:
                    _free(device)
                wanted = {k: errs[k] for k in MODE_ERRORS[mode] if k in errs}
                finite = [v for v in wanted.values() if math.isfinite(v)]
                rec["err"] = {**wanted, "max": max(finite) if len(finite) == len(wanted) else float("nan")}
            records.append(rec)
            if on_record is not None:
                on_record(rec)
    del inputs, ref
    _free(device)
    fill_speedups(records)
    return records


def _measure_mode(rec, fn, mode, inputs, device, timer, elem_bytes, ceiling_gbps) -> None:
    run, grads = timed_fn(fn, mode, inputs)
    ms = timer(run, grads)
    _sync(device)
    rec["median_ms"] = ms
    rec["gbps"] = TRAFFIC[mode] * rec["M"] * rec["N"] * elem_bytes / (ms * 1e-3) / 1e9
    if ceiling_gbps:
        rec["ratio_to_ceiling"] = rec["gbps"] / ceiling_gbps
    if getattr(timer, "graph", False):
        try:
            rec["graph_ms"] = graph_time_ms(fn, mode, inputs)
            rec["graph_gbps"] = (
                TRAFFIC[mode] * rec["M"] * rec["N"] * elem_bytes / (rec["graph_ms"] * 1e-3) / 1e9
            )
            if ceiling_gbps:
                rec["graph_ratio_to_ceiling"] = rec["graph_gbps"] / ceiling_gbps
        except Exception as exc:  # a provider that cannot be captured keeps its do_bench time
            rec["graph_error"] = error_text(exc)


def graph_time_ms(fn, mode: str, inputs, reps: int = 20, replays: int = 7) -> float:
    """Median GPU time per call with the host taken out: `reps` calls captured in one CUDA graph, the
    graph replayed `replays` times between events. Gradients come from torch.autograd.grad, so no .grad
    accumulation kernels are timed. Shapes under the L2 size (60 MB on an H200) stay warm in L2 here."""
    import torch

    if mode not in ("fwd", "bwd", "fwdbwd", "fwd_nograd"):
        raise ValueError(f"unknown mode {mode!r}")
    leaves = _leaves(inputs)
    dy = inputs["dy"]
    wanted = [t for t in leaves if t is not None]
    # One side stream for everything: autograd runs a backward on the stream of its forward, so y is made
    # on the stream that the capture then records (made on the default stream, the captured backward
    # would run outside the capture).
    side = torch.cuda.Stream()
    if mode == "bwd":
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            y = fn(*leaves)
        call = lambda: torch.autograd.grad(y, wanted, dy, retain_graph=True)
    elif mode == "fwdbwd":
        call = lambda: torch.autograd.grad(fn(*leaves), wanted, dy)
    elif mode == "fwd_nograd":
        args = [inputs[k] for k in ("x", "alpha", "gamma", "beta")]
        call = lambda: torch.no_grad()(fn)(*args)
    else:
        call = lambda: fn(*leaves)
    return replay_median_ms(call, reps, replays, stream=side)


def replay_median_ms(call, reps: int = 20, replays: int = 7, stream=None) -> float:
    """Median GPU time of call() with the host taken out: `reps` calls captured in one CUDA graph
    (after 3 warm calls on the side stream the capture then uses: compiling and allocating outside the
    capture), replayed `replays` times between CUDA events. `python -m dyt tune` times its candidates
    with it too."""
    import torch

    stream = stream or torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            call()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for _ in range(reps):
            call()
    graph.replay()
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / reps)
    del graph
    return statistics.median(times)


def fill_speedups(records: list[dict[str, Any]]) -> None:
    """speedup_vs_best_peer = fastest other provider's ms / this ms, per shape, dtypes and mode."""
    groups: dict[tuple, list[dict]] = {}
    for rec in records:
        groups.setdefault(record_key(rec), []).append(rec)
    for group in groups.values():
        for rec in group:
            peers = [p["median_ms"] for p in group if p is not rec and _ok(p)]
            if _ok(rec) and peers:
                rec["speedup_vs_best_peer"] = min(peers) / rec["median_ms"]


def _ok(rec: dict) -> bool:
    return not rec.get("error") and isinstance(rec.get("median_ms"), (int, float)) and rec["median_ms"] > 0


# ----------------------------------------------------------------------------------------------- the CLI


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--suite",
        choices=("kernels", "models", "fp8"),
        default="kernels",
        help="kernels: the kernel rows against the copy ceiling (default); models: training steps and "
        "inference of real models with each DyT variant (dyt/service/model_bench.py); fp8: DyT's output "
        "written in FP8 beside dyt + torchao's cast and the copy of its bytes (dyt/service/fp8_bench.py)",
    )
    parser.add_argument(
        "--providers",
        help="comma list of " + ",".join(PROVIDERS) + " (default: all); --suite fp8: of "
        "dyt_fp8,dyt_fp8_rowwise,dyt_then_torchao_cast,dyt_bf16 (default: all)",
    )
    parser.add_argument("--dtypes", default=",".join(DEFAULT_DTYPES), help="comma list of bf16,fp16,fp32")
    parser.add_argument(
        "--shapes",
        help="comma list of bandwidth,small,model,mixed and/or MxN (e.g. 4096x64); default "
        + ",".join(DEFAULT_SHAPE_SETS)
        + "; --suite fp8: also tiny, default model,bandwidth (tiny with --quick)",
    )
    parser.add_argument("--modes", default=",".join(DEFAULT_MODES), help="comma list of " + ",".join(MODES))
    parser.add_argument("--out", default="reports/perf", help="output folder (default reports/perf)")
    parser.add_argument(
        "--append",
        action="store_true",
        help="keep the commit's perf file's rows of other cases (a bench in parts)",
    )
    parser.add_argument("--quick", action="store_true", help="few repetitions: a smoke test, not numbers")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    parser.add_argument(
        "--graph",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also time each row as CUDA-graph replays (host excluded): graph_ms, graph_ratio_to_ceiling; "
        "the regression gate compares these where both runs have them (default: on)",
    )
    parser.add_argument("--compare", metavar="BASELINE.json", help="gate this run against a baseline")
    parser.add_argument("--margin", type=float, default=0.05, help="allowed drop in ratio to ceiling")
    parser.add_argument("--strict", action="store_true", help="with --compare: a different GPU model fails")
    from dyt.service import model_bench

    model_bench.add_arguments(parser)


def main(args: argparse.Namespace) -> int:
    """`python -m dyt bench` (the kernels suite; dyt.service.cli hands --suite models and fp8 to
    dyt.service.model_bench and dyt.service.fp8_bench): measure, write reports/perf/<gpu>-<sha7>.json,
    optionally gate."""
    if getattr(args, "suite", "kernels") != "kernels":
        raise ValueError(
            f"bench.main runs the kernels suite; --suite {args.suite} runs through dyt.service.cli"
        )
    shapes = args.shapes or ",".join(DEFAULT_SHAPE_SETS)
    try:
        providers = _split(args.providers or ",".join(PROVIDERS))
        for p in providers:
            if p not in PROVIDERS:
                raise ValueError(f"unknown provider {p!r}: expected one of {', '.join(PROVIDERS)}")
        modes = _split(args.modes)
        for m in modes:
            if m not in MODES:
                raise ValueError(f"unknown mode {m!r}: expected one of {', '.join(MODES)}")
        cases = parse_shapes(shapes, parse_dtypes(args.dtypes))
    except ValueError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 2
    import torch

    if not torch.cuda.is_available():
        print(
            "bench: no CUDA device visible (torch.cuda.is_available() is False); the bench measures GPU "
            "kernels against the GPU's copy ceiling and has nothing to measure here. "
            "`python -m dyt report` and `python -m dyt gate` work without a GPU.",
            file=sys.stderr,
        )
        return 2
    from dyt.service.env import collect_env

    device = torch.device("cuda", torch.cuda.current_device())
    env = collect_env(seeds={"bench": args.seed})
    timer = triton_timer(quick=args.quick)
    timer.graph = bool(getattr(args, "graph", False))
    ceiling = measure_ceiling(device, timer)
    print(f"copy ceiling on {env['gpu_name']}: {ceiling['gbps']:.0f} GB/s", file=sys.stderr)
    copies = measure_copies_at_traffic(device, timer, cases, modes)
    for c in copies:
        graph = f", {c['graph_gbps']:.0f} GB/s in graph replays" if "graph_gbps" in c else ""
        print(f"copy moving {c['bytes_moved'] / 1e6:.0f} MB: {c['gbps']:.0f} GB/s{graph}", file=sys.stderr)
    stopped: list[str] = []
    previous = signal.signal(signal.SIGTERM, stop_on_signal)  # `timeout` running out: keep what is measured
    try:
        records = run_all(cases, providers, modes, device, timer, ceiling["gbps"], args.seed, stopped)
    finally:
        signal.signal(signal.SIGTERM, previous)
    report = {
        "env": env,
        "ceiling_gbps": ceiling["gbps"],
        "ceiling": ceiling,
        "copies_at_traffic": copies,
        "config": {
            "providers": providers,
            "modes": modes,
            "shapes": shapes,
            "dtypes": args.dtypes,
            "quick": args.quick,
            "seed": args.seed,
            "timer": "triton.testing.do_bench median",
            "graph_timer": "CUDA graph replay median (host excluded)" if timer.graph else None,
        },
        "cold_start_s": cold_starts(records),
        "records": records,
    }
    total = len(cases) * len(providers) * len(modes)
    if stopped:
        report["incomplete"] = {"records": len(records), "of": total, "stopped_by": stopped[0]}
    path = perf_path(Path(args.out), env)
    try:
        report = write_perf(path, report, append=getattr(args, "append", False))
    except OSError as exc:  # a full disk, a read-only reports/: the rows go elsewhere, not nowhere
        return unwritten("bench", path, exc, json.dumps(json_safe(report), indent=1) + "\n",
                         f"the {len(records)} records measured")  # fmt: skip
    failed = sum(1 for r in records if r["error"])
    print(f"wrote {path} ({len(records)} records, {failed} with errors)")
    if stopped:
        print(f"bench: stopped by {stopped[0]} after {len(records)} of {total} rows; those are in {path}",
              file=sys.stderr)  # fmt: skip
        return STOPPED
    if args.compare:
        return gate_files(path, args.compare, margin=args.margin, strict=args.strict,
                          model_margin=args.model_margin)  # fmt: skip
    return 0


def _run_summary(report: dict) -> dict:
    """What one run of the kernel bench measured its ratios against: its ceiling, selection and time."""
    return {"ceiling_gbps": report.get("ceiling_gbps"), "config": report.get("config"),
            "timestamp_utc": (report.get("env") or {}).get("timestamp_utc"),
            "records": len(report.get("records") or [])}  # fmt: skip


def write_perf(path: Path, report: dict, append: bool = False) -> dict:
    """Writes a kernel-bench run to path and returns what was written. The model and fp8 suites' keys
    (SUITE_PREFIXES) of an existing file of the same commit are kept. With append, so are its kernel
    records of other cases (a record of the same provider, shape, dtypes and mode is replaced) and its
    copies at other traffic: each record carries the ratio to its own run's ceiling, and `runs` lists every
    run's ceiling and selection, so one file can hold a bench measured in parts.

    The file is read, merged and written back under files.locked (a model bench or another part writing
    the same commit's file waits, so neither drops the other's rows) and written whole or not at all
    (files.write_atomic); an OSError (full disk, read-only folder) propagates with the old file intact."""
    with locked(path):
        return _write_perf_locked(Path(path), report, append)


def _write_perf_locked(path: Path, report: dict, append: bool) -> dict:
    try:
        old = json.loads(path.read_text()) if path.exists() else {}
    except (OSError, ValueError):
        old = {}
    old = old if isinstance(old, dict) else {}
    report = {**report, **{k: v for k, v in old.items() if k.startswith(SUITE_PREFIXES)}}
    if append and isinstance(old.get("records"), list):
        new_keys = {(r["provider"], *record_key(r)) for r in report["records"]}
        kept = [r for r in old["records"] if (r.get("provider"), *record_key(r)) not in new_keys]
        report["runs"] = old.get("runs") or [_run_summary(old)]
        report["records"] = kept + report["records"]
        report["runs"] = [
            *report["runs"],
            _run_summary({**report, "records": report["records"][len(kept) :]}),
        ]
        moved = {c["bytes_moved"] for c in report.get("copies_at_traffic") or []}
        older = [c for c in old.get("copies_at_traffic") or [] if c.get("bytes_moved") not in moved]
        merged = [*older, *(report.get("copies_at_traffic") or [])]
        report["copies_at_traffic"] = sorted(merged, key=lambda c: c["bytes_moved"])
    write_atomic(path, json.dumps(json_safe(report), indent=1) + "\n")
    return report


def run_all(
    cases, providers, modes, device, timer, ceiling_gbps, seed, stopped: list | None = None
) -> list[dict]:
    """All cases, under a progress bar (one tick per provider x mode x case). With a `stopped` list, a
    BenchStopped (SIGTERM) or Ctrl-C ends the loop instead of the process: the rows finished so far, those
    of the case it was in included, come back, and the signal's name goes into `stopped`."""
    total = len(cases) * len(providers) * len(modes)
    bar = progress(total)
    records: list[dict] = []
    case_rows: list[dict] = []

    def tick(rec):
        case_rows.append(rec)
        bar.set_postfix_str(f"{rec['provider']} {rec['M']}x{rec['N']} {rec['dtype']} {rec['mode']}")
        bar.update(1)

    try:
        for i, case in enumerate(cases):
            case_rows.clear()
            records += run_case(case, providers, modes, device, timer, ceiling_gbps, seed + i, on_record=tick)
    except (BenchStopped, KeyboardInterrupt) as exc:
        if stopped is None:
            raise
        fill_speedups(case_rows)
        records += case_rows
        stopped.append(str(exc) if isinstance(exc, BenchStopped) else "SIGINT")
    finally:
        bar.close()
    return records


def cold_starts(records: list[dict]) -> dict[str, float]:
    """First-call time of each provider in this process: the first record it ran without error."""
    cold: dict[str, float] = {}
    for rec in records:
        if rec.get("first_call_s") is not None and rec["provider"] not in cold:
            cold[rec["provider"]] = rec["first_call_s"]
    return cold
