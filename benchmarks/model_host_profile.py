"""Where the host time of a model benchmark step goes: the step timed, then profiled per op and function.

    python benchmarks/model_host_profile.py --model vit_s16 --batch 64 --mode train --variants eager,dyt
    python benchmarks/model_host_profile.py --model narrow --batch 2 --parts \
        --variants norm,dyt,dyt-frozen-alpha
    python benchmarks/model_host_profile.py --model narrow --batch 8 --kernels \
        --variants compile_eager,compile_dyt

The model benchmark's models and variants (dyt.service.model_bench, which `python -m dyt bench --suite
models` runs), one step built as its step is (norms replaced by the variant's module, AdamW, bf16
autocast), timed on the host, then profiled by torch.profiler (CPU self time per op and call counts per
step) and, with --python, by cProfile (Python self time per function). Needs a CUDA GPU (--device cpu: a
smoke test); run it alone (other processes on the host's CPUs move these numbers by tens of percent).

--parts times a training step's parts instead (zero_grad, forward under autocast, backward, the
optimizer's step), the variants interleaved step by step, and prints the median of each part and each
variant's median per-step ratio to the first variant's. dyt-frozen-alpha is dyt with every DyT's alpha
frozen (requires_grad False: no gradient accumulated, no optimizer state), what the third parameter costs.

--kernels prints the GPU's side instead: each variant's kernel time per step by kernel name (torch.profiler's
CUDA activity), compiled variants included (compile_*: the kernels that graphs_* replays, Inductor's and
dyt's, each launched on its own).
"""

import argparse
import copy
import cProfile
import dataclasses
import io
import pstats
import statistics
import time

import torch
from torch.profiler import ProfilerActivity, profile

import dyt
from dyt.service import model_bench


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def host_ms(step, n: int) -> float:
    """Median host time of one step over n steps, each started from an idle GPU."""
    times = []
    for _ in range(n):
        _sync()
        start = time.perf_counter()
        step()
        times.append((time.perf_counter() - start) * 1e3)
    _sync()
    return statistics.median(times)


def op_table(step, n: int, top: int) -> str:
    """torch.profiler's CPU ops over n steps: self time and calls per step, the top ops by self time."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(n):
            step()
        _sync()
    events = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    total = sum(e.self_cpu_time_total for e in events) / n / 1e3
    lines = [f"  profiled CPU self time per step: {total:.2f} ms"]
    lines.append(f"  {'op':58s} {'us/step':>9s} {'calls/step':>10s}")
    for e in events[:top]:
        lines.append(f"  {e.key[:58]:58s} {e.self_cpu_time_total / n:9.1f} {e.count / n:10.1f}")
    return "\n".join(lines)


def python_table(step, n: int, top: int) -> str:
    """cProfile over n steps: Python self time per function and step."""
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(n):
        step()
    _sync()
    prof.disable()
    out = io.StringIO()
    stats = pstats.Stats(prof, stream=out)
    stats.sort_stats("tottime").print_stats(top)
    return "\n".join("  " + line for line in out.getvalue().splitlines() if line.strip())


def kernel_table(step, n: int, top: int) -> str:
    """torch.profiler's CUDA kernels over n steps: GPU time and launches per step, the top kernels by time."""
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            step()
        _sync()
    events = prof.key_averages()
    # The GPU's events less the spans of user annotations (the optimizer's step), which are no kernels: their
    # names are those of the CPU-side annotations.
    spans = {e.key for e in events if getattr(e, "is_user_annotation", False)}
    kernels = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA and e.key not in spans]
    kernels.sort(key=lambda e: e.self_device_time_total, reverse=True)
    total = sum(e.self_device_time_total for e in kernels) / n
    lines = [f"  kernel time per step: {total:.1f} us in {sum(e.count for e in kernels) / n:.0f} kernels"]
    lines.append(f"  {'kernel':88s} {'us/step':>9s} {'calls/step':>10s}")
    for e in kernels[:top]:
        lines.append(f"  {e.key[:88]:88s} {e.self_device_time_total / n:9.1f} {e.count / n:10.1f}")
    return "\n".join(lines)


PARTS = ("zero_grad", "forward", "backward", "optimizer")
FROZEN_ALPHA = "dyt-frozen-alpha"


@dataclasses.dataclass
class Prepared:
    """One variant of the model, ready to step: the model, what runs it (compiled or not), its optimizer."""

    name: str
    model: torch.nn.Module
    runner: object
    opt: torch.optim.Optimizer
    replaced: dict[str, int]
    graphs: bool


def prepare(base, name: str, device: str, settings) -> Prepared:
    """model_bench's variant `name` of a copy of base, or dyt with its alphas frozen (FROZEN_ALPHA): the
    norms replaced (model_bench.replace_norms), compiled where the variant is, and an AdamW as the model
    benchmark's step uses."""
    variant = model_bench.VARIANTS["dyt" if name == FROZEN_ALPHA else name]
    model = copy.deepcopy(base)
    replaced = model_bench.replace_norms(model, variant.make) if variant.make is not None else {}
    model.to(device)
    if name == FROZEN_ALPHA:
        for module in model.modules():
            if isinstance(module, dyt.DyT):
                module.alpha.requires_grad_(False)
    runner = model
    if variant.compiled:
        runner = torch.compile(model, mode="reduce-overhead" if variant.graphs else None)
    opt = torch.optim.AdamW(model.parameters(), lr=settings.lr)
    return Prepared(name, model, runner, opt, replaced, variant.graphs)


def step_fn(spec, prep: Prepared, mode: str, data: dict, device: str):
    """One training step (zero_grad, forward under bf16 autocast, backward, the optimizer's step) or one
    inference step (inference_mode), as the model benchmark times them."""
    autocast = getattr(torch, model_bench.AUTOCAST)

    def step():
        if prep.graphs:
            torch.compiler.cudagraph_mark_step_begin()
        if mode == "train":
            prep.opt.zero_grad(set_to_none=True)
            with torch.autocast(device, dtype=autocast):
                loss = spec.loss(prep.runner, data)
            loss.backward()
            prep.opt.step()
        else:
            with torch.inference_mode(), torch.autocast(device, dtype=autocast):
                spec.forward(prep.runner, data)

    return step


def timed_parts(spec, prep: Prepared, data, device: str) -> list[float]:
    """One training step from an idle GPU, step_fn's calls: host ms of each of PARTS."""
    _sync()
    marks = [time.perf_counter()]
    prep.opt.zero_grad(set_to_none=True)
    marks.append(time.perf_counter())
    with torch.autocast(device, dtype=getattr(torch, model_bench.AUTOCAST)):
        loss = spec.loss(prep.runner, data)
    marks.append(time.perf_counter())
    loss.backward()
    marks.append(time.perf_counter())
    prep.opt.step()
    marks.append(time.perf_counter())
    return [(b - a) * 1e3 for a, b in zip(marks, marks[1:], strict=False)]


def parts_table(spec, preps: dict, data, device: str, steps: int) -> str:
    """Each variant's median host ms per part over `steps` steps interleaved with the other variants'
    (the order rotating), and its median per-step ratio to the first variant's whole step."""
    names = list(preps)
    for name in names:
        for _ in range(3):
            timed_parts(spec, preps[name], data, device)
    times = {name: [] for name in names}
    for i in range(steps):
        shift = i % len(names)
        for name in names[shift:] + names[:shift]:
            times[name].append(timed_parts(spec, preps[name], data, device))
    lines = [f"  {'variant':18s} " + " ".join(f"{p:>9s}" for p in PARTS) + f" {'step':>9s} {'ratio':>6s}"]
    first = [sum(t) for t in times[names[0]]]
    for name in names:
        cells = [statistics.median(t[k] for t in times[name]) for k in range(len(PARTS))]
        whole = [sum(t) for t in times[name]]
        ratio = statistics.median(a / b for a, b in zip(first, whole, strict=True))
        lines.append(f"  {name:18s} " + " ".join(f"{c:9.3f}" for c in cells)
                     + f" {statistics.median(whole):9.3f} {ratio:6.3f}")  # fmt: skip
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="vit_s16", choices=list(model_bench.model_specs()))
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--mode", default="train", choices=model_bench.MODES)
    parser.add_argument("--variants", default="eager,dyt")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of host timing")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--python", action="store_true", help="add cProfile's table per variant")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="cpu: a smoke test")
    parser.add_argument("--parts", action="store_true", help="time a training step's parts (see above)")
    parser.add_argument("--part-steps", type=int, default=120, help="--parts: timed steps per variant")
    parser.add_argument("--kernels", action="store_true", help="GPU kernel time per step (see above)")
    args = parser.parse_args()
    if args.parts and args.mode != "train":
        parser.error("--parts times training steps: leave --mode at train")
    if args.kernels and (args.parts or args.python):
        parser.error("--kernels prints kernel tables alone: leave out --parts and --python")

    spec = model_bench.model_specs()[args.model]
    torch.manual_seed(0)
    base = spec.build()
    data = {k: t.to(args.device) for k, t in spec.batch(args.batch, torch.Generator().manual_seed(0)).items()}
    settings = model_bench.Settings()
    variants = args.variants.split(",")
    if args.parts:
        preps = {name: prepare(base, name, args.device, settings) for name in variants}
        for prep in preps.values():
            prep.model.train()
        print(f"{spec.title} batch {args.batch} train: host ms per part of a step (median of "
              f"{args.part_steps} steps interleaved)")  # fmt: skip
        print(parts_table(spec, preps, data, args.device, args.part_steps))
        return
    steps = {}
    for name in variants:
        prep = prepare(base, name, args.device, settings)
        steps[name] = (step_fn(spec, prep, args.mode, data, args.device), prep.replaced)
        for _ in range(5):
            steps[name][0]()
    _sync()
    timed = {name: [] for name in variants}
    for _ in range(args.rounds):
        for name in variants:
            timed[name].append(host_ms(steps[name][0], args.steps))
    print(f"{spec.title} batch {args.batch} {args.mode}: host ms per step (median of {args.rounds} rounds)")
    for name in variants:
        rounds = [round(t, 2) for t in timed[name]]
        median = statistics.median(timed[name])
        print(f"  {name:14s} {median:8.2f}  rounds {rounds}  replaced {steps[name][1]}")
    for name in variants:
        if args.kernels:
            print(f"\n{name}: GPU kernels")
            print(kernel_table(steps[name][0], args.steps, args.top))
            continue
        print(f"\n{name}: torch.profiler")
        print(op_table(steps[name][0], args.steps, args.top))
        if args.python:
            print(f"\n{name}: cProfile")
            print(python_table(steps[name][0], args.steps, args.top))


if __name__ == "__main__":
    main()
