"""Model benchmark: what users get from dyt, as training steps and inference of real models.

    python -m dyt bench --suite models --time-limit 540   # the whole table on an H200 in about 7.5 minutes
    nox -s bench -- --suite models --time-limit 540
    python -m dyt bench --suite models --models vit_s16,narrow --quick   # a smoke run

Models (random init, nothing downloaded; a model whose library does not import is a skipped row saying
why): timm ViT-S/16 (batch 8, 64, 256), ViT-B/16 (8, 128), ConvNeXt-T (8, 64; LayerNorm2d in the stem and
downsampling is channels-first, LayerNorm in the blocks channels-last), a narrow pre-norm transformer
written here (width 128, 4096 tokens; 2, 8, 32) and a LLaMA-style decoder (transformers' LlamaForCausalLM,
small config; 4, 16) whose RMSNorms become DyT without beta.

Variants, all from the same weights: `norm` (the model's own norm), `eager` (the paper's DyT module,
dyt.service.peers.EagerDyT), `dyt` (dyt.DyT), `dyt_autocast` (dyt.DyT(autocast_output=True): the norms
return autocast's bf16, the cast in front of the next layer gone), `packed_dyt` (dyt.PackedDyT: alpha,
weight and bias in one parameter; what dyt.convert_layernorm makes by default), `liger` (Liger-Kernel's
LigerDyT, where it imports) and, in separate compiled cases (ViT-S/16 at 64 and the narrow net at 8 by
default), `compile_eager`, `compile_dyt`, `compile_dyt_autocast` and `compile_packed_dyt`: torch.compile
of the whole model with each module, and `graphs_eager`, `graphs_dyt`, `graphs_dyt_autocast` and
`graphs_packed_dyt`: the same with mode="reduce-overhead" (CUDA graphs; CUDA only). Run only when named
(they need torchao), FP8 training with torchao's float8 linear layers (Float8LinearConfig(emulate=True) off
CUDA; linears with a dimension not a multiple of 16 stay in high precision): `fp8_eager` (the paper's
module, then torchao.float8.convert_to_float8_training), `fp8_dyt_cast` (dyt.PackedDyT, then torchao's
convert: torchao casts the norms' output), `fp8_dyt` (dyt.PackedDyT, then
dyt.float8_training.convert_to_float8_training: the norms that feed only float8 linears write FP8
themselves; the row's `wired` counts them, `float8_kept` says why the others were not), and their compiled
`compile_fp8_*`. dyt's ratios compare variants of one kind (eager, compiled, graphs; FP8 or not).

Measures, per variant: a training step (zero_grad, forward and loss under bf16 autocast, backward, AdamW
step) and inference (torch.inference_mode, bf16 autocast). Each step starts from an idle GPU (synchronize
first) and is timed by CUDA events; the host's issue time is perf_counter around the step's call, before
any synchronize; peak memory is what one step allocates above what was held before it. The variants of a
case run in rounds inside one process, each round timing every variant (the order rotated each round), so
that host drift cancels in the per-round ratios: speedup_vs[v] is v's round time over dyt's, per round,
with its median and spread. A round is one step of each variant by default (`--steps` more).

A failing variant is a row with its error, never a crash. SIGTERM, Ctrl-C or --time-limit stop the run and
keep the rows finished (a case stopped mid-way keeps its complete rounds). Rows go into the perf JSON of
the run (reports/perf/<gpu>-<sha7>.json) as `model_records`, beside the kernel bench's `records`, whole or
not at all; where that folder cannot be written, the rows go to a file in the temporary folder that the
one-line message names (exit codes: dyt.service.run_control).
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dyt.service.files import locked, unwritten, write_atomic
from dyt.service.gate import gate_files
from dyt.service.records import json_safe, load_perf, perf_path
from dyt.service.run_control import STOPPED, BenchStopped, error_text, progress, stops

MODES = ("train", "infer")
AUTOCAST = "bfloat16"
CHANNELS_FIRST_NORMS = ("LayerNorm2d", "LayerNorm2dFp32")  # timm's (N, C, H, W) LayerNorm subclasses


# ------------------------------------------------------------------------------------------- the models


@dataclass(frozen=True)
class ModelSpec:
    """How to build one model (random init, CPU, float32), make a batch, and turn it into a loss."""

    name: str
    title: str
    batches: tuple[int, ...]
    build: Callable[[], Any]
    batch: Callable[[int, Any], dict]  # (batch size, torch.Generator) -> inputs on the CPU
    forward: Callable[[Any, dict], Any]
    loss: Callable[[Any, dict], Any]
    compiled_batches: tuple[int, ...] = ()


def _timm(name: str):
    import timm

    return timm.create_model(name, pretrained=False)


def _images(n, gen):
    import torch

    return {"x": torch.randn(n, 3, 224, 224, generator=gen), "y": torch.randint(0, 1000, (n,), generator=gen)}


def _classify_forward(model, b):
    return model(b["x"])


def _classify_loss(model, b):
    import torch.nn.functional as F

    return F.cross_entropy(model(b["x"]).float(), b["y"])


def narrow_transformer(width: int = 128, depth: int = 4, heads: int = 4):
    """The narrow pre-norm transformer (width 128 by default; 4096 tokens in the spec): the shape class
    where rows are many and narrow, past 65,535 rows at batch 32."""
    import torch.nn.functional as F
    from torch import nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
            self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
            self.fc1, self.fc2 = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

        def forward(self, x):
            b, n, c = x.shape
            qkv = self.qkv(self.norm1(x)).view(b, n, 3, heads, c // heads).permute(2, 0, 3, 1, 4)
            att = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2])
            x = x + self.proj(att.transpose(1, 2).reshape(b, n, c))
            return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))

    class Narrow(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.Sequential(*[Block() for _ in range(depth)])
            self.norm = nn.LayerNorm(width)
            self.head = nn.Linear(width, width)

        def forward(self, x):
            return self.head(self.norm(self.blocks(x)))

    return Narrow()


def narrow_spec(tokens: int = 4096, width: int = 128, depth: int = 4, heads: int = 4,
                batches: tuple[int, ...] = (2, 8, 32), compiled_batches: tuple[int, ...] = (8,),
                name: str = "narrow") -> ModelSpec:  # fmt: skip
    """The narrow transformer's spec; the tests build a tiny one through the same function."""
    import torch
    import torch.nn.functional as F

    def batch(n, gen):
        return {
            "x": torch.randn(n, tokens, width, generator=gen),
            "y": torch.randn(n, tokens, width, generator=gen),
        }

    return ModelSpec(
        name=name,
        title=f"narrow (width {width}, {tokens} tokens)",
        batches=batches,
        build=lambda: narrow_transformer(width, depth, heads),
        batch=batch,
        forward=lambda model, b: model(b["x"]),
        loss=lambda model, b: F.mse_loss(model(b["x"]).float(), b["y"]),
        compiled_batches=compiled_batches,
    )


LLAMA_SEQ = 512


def _llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=8192, hidden_size=512, intermediate_size=1376, num_hidden_layers=4,
                         num_attention_heads=8, num_key_value_heads=8, max_position_embeddings=LLAMA_SEQ,
                         attn_implementation="sdpa")  # fmt: skip
    return LlamaForCausalLM(config)


def _tokens(n, gen):
    import torch

    return {"ids": torch.randint(0, 8192, (n, LLAMA_SEQ), generator=gen)}


def model_specs() -> dict[str, ModelSpec]:
    """The benchmark's models, in the order they run."""
    return {
        "vit_s16": ModelSpec("vit_s16", "ViT-S/16", (8, 64, 256), lambda: _timm("vit_small_patch16_224"),
                             _images, _classify_forward, _classify_loss, compiled_batches=(64,)),
        "vit_b16": ModelSpec("vit_b16", "ViT-B/16", (8, 128), lambda: _timm("vit_base_patch16_224"),
                             _images, _classify_forward, _classify_loss),
        "convnext_t": ModelSpec("convnext_t", "ConvNeXt-T", (8, 64), lambda: _timm("convnext_tiny"),
                                _images, _classify_forward, _classify_loss),
        "narrow": narrow_spec(),
        "llama": ModelSpec("llama", "LLaMA-style (4 layers, width 512, 512 tokens)", (4, 16), _llama, _tokens,
                           lambda model, b: model(input_ids=b["ids"]).logits,
                           lambda model, b: model(input_ids=b["ids"], labels=b["ids"]).loss),
    }  # fmt: skip


# ------------------------------------------------------------------------------------------- the norms


def norm_kind(module) -> str | None:
    """'last' (LayerNorm over the last dim), 'first' (timm's LayerNorm2d: (N, C, H, W)), 'rms' (an RMSNorm:
    DyT without beta replaces it), or None (not a norm this benchmark replaces)."""
    from torch import nn

    name = type(module).__name__
    if isinstance(module, nn.LayerNorm):
        if len(module.normalized_shape) != 1:
            return None
        return "first" if name in CHANNELS_FIRST_NORMS else "last"
    if isinstance(module, getattr(nn, "RMSNorm", ())) or name.endswith(("RMSNorm", "RmsNorm")):
        return "rms"
    return None


def _width(module) -> int:
    if getattr(module, "normalized_shape", None) is not None:
        return int(module.normalized_shape[0])
    return int(module.weight.shape[0])


def replace_norms(model, make: Callable[..., Any]) -> dict[str, int]:
    """Every norm norm_kind() knows becomes make(C, bias=..., channels_last=...): bias unless it was an
    RMSNorm, channels_last unless LayerNorm2d. The new module takes the old one's device. Returns how many
    of each original class it replaced."""
    replaced: dict[str, int] = {}
    for parent in list(model.modules()):
        for child_name, child in list(parent.named_children()):
            kind = norm_kind(child)
            if kind is None:
                continue
            new = make(_width(child), bias=kind != "rms", channels_last=kind != "first")
            weight = getattr(child, "weight", None)
            if weight is not None:
                new = new.to(weight.device)
            setattr(parent, child_name, new)
            replaced[type(child).__name__] = replaced.get(type(child).__name__, 0) + 1
    return replaced


def _make_eager(c, *, bias, channels_last):
    from dyt.service.peers import EagerDyT

    return EagerDyT(c, bias=bias, channels_last=channels_last)


def _make_dyt(c, *, bias, channels_last):
    import dyt

    return dyt.DyT(c, bias=bias, channels_last=channels_last)


def _make_dyt_autocast(c, *, bias, channels_last):
    import dyt

    return dyt.DyT(c, bias=bias, channels_last=channels_last, autocast_output=True)


def _make_packed_dyt(c, *, bias, channels_last):
    import dyt

    return dyt.PackedDyT(c, bias=bias, channels_last=channels_last)


def _make_liger(c, *, bias, channels_last):
    from dyt.service.peers import liger_dyt

    return liger_dyt(c, bias=bias, channels_last=channels_last)


@dataclass(frozen=True)
class Variant:
    """One way to run a model: its norms replaced by make (None: kept), compiled or not (graphs: with
    mode="reduce-overhead", CUDA graphs); ours marks dyt. float8: its linear layers become torchao's
    Float8Linear, by torchao's convert ("torchao": each casts its own input) or by dyt's
    ("dyt": dyt.float8_training, the norms that feed only those layers hand them FP8)."""

    name: str
    make: Callable[..., Any] | None
    compiled: bool = False
    ours: bool = False
    cuda_only: bool = False  # its kernels take CUDA tensors alone: on another device, a skipped row
    graphs: bool = False
    float8: str | None = None


VARIANTS: dict[str, Variant] = {
    "norm": Variant("norm", None),
    "eager": Variant("eager", _make_eager),
    "dyt": Variant("dyt", _make_dyt, ours=True),
    "dyt_autocast": Variant("dyt_autocast", _make_dyt_autocast, ours=True),
    "packed_dyt": Variant("packed_dyt", _make_packed_dyt, ours=True),
    "liger": Variant("liger", _make_liger, cuda_only=True),
    "compile_eager": Variant("compile_eager", _make_eager, compiled=True),
    "compile_dyt": Variant("compile_dyt", _make_dyt, compiled=True, ours=True),
    "graphs_eager": Variant("graphs_eager", _make_eager, compiled=True, cuda_only=True, graphs=True),
    "graphs_dyt": Variant("graphs_dyt", _make_dyt, compiled=True, ours=True, cuda_only=True, graphs=True),
    "compile_dyt_autocast": Variant("compile_dyt_autocast", _make_dyt_autocast, compiled=True, ours=True),
    "graphs_dyt_autocast": Variant(
        "graphs_dyt_autocast", _make_dyt_autocast, compiled=True, ours=True, cuda_only=True, graphs=True
    ),  # fmt: skip
    "compile_packed_dyt": Variant("compile_packed_dyt", _make_packed_dyt, compiled=True, ours=True),
    "graphs_packed_dyt": Variant(
        "graphs_packed_dyt", _make_packed_dyt, compiled=True, ours=True, cuda_only=True, graphs=True
    ),  # fmt: skip
    # FP8 training (torchao's float8 linear layers), run when named: the paper's module and dyt's default
    # conversion with torchao casting each linear input, and dyt's norms wired to write FP8 themselves.
    "fp8_eager": Variant("fp8_eager", _make_eager, float8="torchao"),
    "fp8_dyt_cast": Variant("fp8_dyt_cast", _make_packed_dyt, float8="torchao"),
    "fp8_dyt": Variant("fp8_dyt", _make_packed_dyt, ours=True, float8="dyt"),
    "compile_fp8_eager": Variant("compile_fp8_eager", _make_eager, compiled=True, float8="torchao"),
    "compile_fp8_dyt_cast": Variant(
        "compile_fp8_dyt_cast", _make_packed_dyt, compiled=True, float8="torchao"
    ),
    "compile_fp8_dyt": Variant("compile_fp8_dyt", _make_packed_dyt, compiled=True, ours=True, float8="dyt"),
}
# What runs unless --variants names others: every variant but the FP8 ones (they need torchao).
DEFAULT_VARIANTS = tuple(name for name, v in VARIANTS.items() if v.float8 is None)
FLOAT8_MIN_DIM = 16  # torch._scaled_mm takes matrices whose dimensions are multiples of 16


@dataclass(frozen=True)
class Case:
    """One model at one batch size, eager or compiled: the variants that run interleaved."""

    spec: ModelSpec
    batch: int
    compiled: bool


def plan_cases(
    specs: Iterable[ModelSpec], variants: Iterable[str], compile_cases: str = "default"
) -> list[Case]:
    """Eager cases of every model and batch first, then the compiled ones (each spec's compiled_batches;
    compile_cases 'all' compiles every case, 'none' none), so that a time limit cuts the compiles first."""
    specs = list(specs)
    variants = list(variants)
    eager = [Case(s, b, False) for s in specs for b in s.batches]
    if not any(VARIANTS[v].compiled for v in variants) or compile_cases == "none":
        return eager
    picked = [b for s in specs for b in s.batches] if compile_cases == "all" else None
    compiled = [Case(s, b, True) for s in specs for b in (s.batches if picked else s.compiled_batches)]
    if not any(not VARIANTS[v].compiled for v in variants):
        return compiled
    return eager + compiled


# ---------------------------------------------------------------------------------------------- clocks


class CudaClock:
    """GPU time by CUDA events around a step that starts from an idle GPU; host time by perf_counter."""

    def __init__(self, device):
        import torch

        self.torch, self.device = torch, device

    def time(self, fn) -> tuple[float, float]:
        torch = self.torch
        torch.cuda.synchronize(self.device)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0 = time.perf_counter()
        start.record()
        fn()
        end.record()
        host_ms = (time.perf_counter() - t0) * 1e3
        end.synchronize()
        return start.elapsed_time(end), host_ms

    def peak_mb(self, fn) -> float:
        torch = self.torch
        torch.cuda.synchronize(self.device)
        held = torch.cuda.memory_allocated(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)
        fn()
        torch.cuda.synchronize(self.device)
        return (torch.cuda.max_memory_allocated(self.device) - held) / 2**20


class WallClock:
    """For CPU runs of the harness: wall time is both the step time and the host time; no memory figure."""

    def time(self, fn) -> tuple[float, float]:
        t0 = time.perf_counter()
        fn()
        ms = (time.perf_counter() - t0) * 1e3
        return ms, ms

    def peak_mb(self, fn) -> None:
        fn()
        return None


# ------------------------------------------------------------------------------------------- measuring


@dataclass
class Settings:
    """Rounds of one step per variant by default: host-bound steps drift by more than the variants
    differ, so every step has its neighbours in time as its ratio's partners (docs/performance.md,
    "Models")."""

    rounds: int = 32
    steps: int = 1  # timed steps per variant per round
    warmup: int = 3
    lr: float = 1e-4


@dataclass
class _Prepared:
    variant: Variant
    model: Any
    runner: Any
    opt: Any
    replaced: dict[str, int]
    first_call_s: dict[str, float] = field(default_factory=dict)
    peak_mb: dict[str, float | None] = field(default_factory=dict)
    float8: dict[str, Any] | None = None  # float8_linears, wired, float8_kept


def _row(case: Case, variant: str, mode: str, settings: Settings) -> dict[str, Any]:
    return {
        "model": case.spec.name,
        "title": case.spec.title,
        "batch": case.batch,
        "mode": mode,
        "variant": variant,
        "compiled": VARIANTS[variant].compiled if variant in VARIANTS else case.compiled,
        "autocast": AUTOCAST,
        "norm": None,
        "replaced": None,
        "median_ms": None,
        "round_ms": [],
        "host_ms": None,
        "peak_mem_mb": None,
        "first_call_s": None,
        "rounds": 0,
        "steps": settings.steps,
        "speedup_vs": {},
        "error": None,
        "skipped": None,
        "float8_linears": None,  # FP8 variants: the Float8Linear layers, the norms wired to feed them FP8,
        "wired": None,  # and why each other norm was not (reason: count)
        "float8_kept": None,
    }


def model_key(rec: dict) -> tuple:
    """What makes two model rows comparable: model, batch, mode, variant."""
    return (rec["model"], rec["batch"], rec["mode"], rec["variant"])


def _free(device) -> None:
    import torch

    gc.collect()
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()


def _step_fn(spec: ModelSpec, prep: _Prepared, mode: str, data: dict, device):
    import torch

    runner, opt = prep.runner, prep.opt
    dev_type = torch.device(device).type

    graphs = prep.variant.graphs

    if mode == "train":

        def step():
            if graphs:
                torch.compiler.cudagraph_mark_step_begin()
            opt.zero_grad(set_to_none=True)
            with torch.autocast(dev_type, dtype=getattr(torch, AUTOCAST)):
                loss = spec.loss(runner, data)
            loss.backward()
            opt.step()

    else:

        def step():
            if graphs:
                torch.compiler.cudagraph_mark_step_begin()
            with torch.inference_mode(), torch.autocast(dev_type, dtype=getattr(torch, AUTOCAST)):
                spec.forward(runner, data)

    step.variant = prep.variant.name  # the harness tests' clocks read it
    step.mode = mode
    return step


def _prepare(base, variant: Variant, device, settings: Settings, example=None) -> _Prepared:
    """The variant's model, runner and optimizer; example: a function of the model that runs its forward
    on the case's batch (the FP8 variants' check of which norms feed only float8 linear layers)."""
    import torch

    model = copy.deepcopy(base)
    replaced = replace_norms(model, variant.make) if variant.make is not None else {}
    model.to(device)
    float8 = convert_float8(model, variant.float8, device, example) if variant.float8 else None
    if variant.compiled:
        runner = torch.compile(model, mode="reduce-overhead" if variant.graphs else None)
    else:
        runner = model
    opt = torch.optim.AdamW(model.parameters(), lr=settings.lr)
    return _Prepared(variant, model, runner, opt, replaced, float8=float8)


def _float8_filter(module, name: str) -> bool:
    """The linear layers torchao's float8 matmuls take: both dimensions multiples of FLOAT8_MIN_DIM (a
    classifier head of 1000 classes stays in high precision), the same for every FP8 variant."""
    return module.in_features % FLOAT8_MIN_DIM == 0 and module.out_features % FLOAT8_MIN_DIM == 0


def convert_float8(model, how: str, device, example=None) -> dict[str, Any]:
    """model's linear layers to torchao's Float8Linear in place (Float8LinearConfig(emulate=True) off
    CUDA), by torchao ("torchao") or by dyt.float8_training ("dyt": it also wires the norms that feed only
    those layers, checked by watching example, a function of the model that runs its forward on the
    case's batch: torch.fx cannot trace Hugging Face's LLaMA). Returns the account: float8_linears, wired
    (norms writing FP8), float8_kept (why the other norms were not wired, reason: count)."""
    import torch
    from torchao.float8 import Float8LinearConfig
    from torchao.float8 import convert_to_float8_training as torchao_convert

    from dyt import float8_training

    config = Float8LinearConfig(emulate=torch.device(device).type != "cuda")
    kept: dict[str, int] = {}
    wired = 0
    if how == "dyt":
        result = float8_training.convert_to_float8_training(
            model, config=config, module_filter_fn=_float8_filter, example=example
        )
        wired = len(result.wired)
        for why in result.kept.values():
            kept[why] = kept.get(why, 0) + 1
    elif how == "torchao":
        torchao_convert(model, config=config, module_filter_fn=_float8_filter)
    else:
        raise ValueError(f"unknown float8 conversion {how!r}: expected torchao or dyt")
    linears = sum(1 for m in model.modules() if type(m).__name__ == "Float8Linear")
    return {"float8_linears": linears, "wired": wired, "float8_kept": kept}


def _norm_names(base) -> str:
    names = sorted({type(m).__name__ for m in base.modules() if norm_kind(m) is not None})
    return ", ".join(names) or "none"


def round_ratios(round_ms: dict[str, list[float]], ours: str, others: Iterable[str]) -> dict[str, dict]:
    """Per round, other's time over ours (above 1: ours faster); the median, min and max of those."""
    out: dict[str, dict] = {}
    mine = round_ms.get(ours) or []
    for other in others:
        theirs = round_ms.get(other) or []
        ratios = [t / m for t, m in zip(theirs, mine, strict=False) if m > 0]
        if ratios:
            out[other] = {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios),
                          "rounds": ratios}  # fmt: skip
    return out


def run_model_case(case: Case, variants: list[str], modes: list[str], device, clock, settings: Settings,
                   seed: int = 0, on_row: Callable[[dict], None] | None = None) -> list[dict]:  # fmt: skip
    """Every variant x mode of one case, interleaved in rounds. Rows go to on_row as they finish (a stop
    mid-mode first hands over the rows of that mode's complete rounds, then re-raises)."""
    import torch

    rows: list[dict] = []

    def emit(row):
        rows.append(row)
        if on_row is not None:
            on_row(row)

    def all_rows(variant_names, **fields):
        for mode in modes:
            for v in variant_names:
                emit({**_row(case, v, mode, settings), **fields})

    try:
        torch.manual_seed(seed)
        base = case.spec.build()
        gen = torch.Generator().manual_seed(seed)
        data = {k: t.to(device) for k, t in case.spec.batch(case.batch, gen).items()}
    except ImportError as exc:
        all_rows(
            variants, skipped=f"{case.spec.title} needs a library that does not import: {error_text(exc)}"
        )
        return rows
    except Exception as exc:  # noqa: BLE001 - a model that cannot be built is a row per variant
        all_rows(variants, error=f"build: {error_text(exc)}")
        _free(device)
        return rows
    norms = _norm_names(base)
    if case.compiled:
        torch._dynamo.reset()
        for name in ("recompile_limit", "cache_size_limit"):
            if hasattr(torch._dynamo.config, name):
                setattr(torch._dynamo.config, name, max(64, getattr(torch._dynamo.config, name)))
    prepared: dict[str, _Prepared] = {}
    failed: dict[str, dict] = {}
    for name in variants:
        if VARIANTS[name].cuda_only and torch.device(device).type != "cuda":
            failed[name] = {"skipped": f"{name} runs its kernels on CUDA tensors only (device {device})"}
            continue
        try:
            prepared[name] = _prepare(base, VARIANTS[name], device, settings,
                                      example=lambda m: case.spec.forward(m, data))  # fmt: skip
        except ImportError as exc:
            failed[name] = {"skipped": f"unavailable: {error_text(exc)}"}
        except Exception as exc:  # noqa: BLE001
            failed[name] = {"error": f"setup: {error_text(exc)}"}
            _free(device)
    del base
    try:
        for mode in modes:
            _run_mode(case, mode, variants, prepared, failed, data, norms, device, clock, settings, emit)
    finally:
        prepared.clear()
        data = None
        if case.compiled:
            torch._dynamo.reset()
        _free(device)
    return rows


def _run_mode(case, mode, variants, prepared, failed, data, norms, device, clock, settings, emit) -> None:
    """Warm-up of each variant (first call timed, then peak memory of one step), then the rounds."""
    errors = dict(failed)
    steps = {}
    for name in variants:
        if name in errors:
            continue
        prep = prepared[name]
        try:
            prep.model.train(mode == "train")
            step = _step_fn(case.spec, prep, mode, data, device)
            t0 = time.perf_counter()
            clock.time(step)  # the first call: Triton JIT, torch.compile, cuBLAS heuristics
            prep.first_call_s[mode] = time.perf_counter() - t0
            for _ in range(max(0, settings.warmup - 1)):
                clock.time(step)
            prep.peak_mb[mode] = clock.peak_mb(step)
            steps[name] = step
        except Exception as exc:  # noqa: BLE001 - OOM, a launch failure, a compile error: a row
            errors[name] = {"error": error_text(exc)}
            _free(device)
    timed = {name: {"round_ms": [], "ms": [], "host": []} for name in steps}
    try:
        active = list(steps)
        for r in range(settings.rounds):
            shift = r % len(active) if active else 0
            for name in active[shift:] + active[:shift]:
                try:
                    times = [clock.time(steps[name]) for _ in range(settings.steps)]
                except Exception as exc:  # noqa: BLE001
                    errors[name] = {"error": error_text(exc)}
                    _free(device)
                    continue
                slot = timed[name]
                slot["round_ms"].append(statistics.median(t[0] for t in times))
                slot["ms"] += [t[0] for t in times]
                slot["host"] += [t[1] for t in times]
            active = [n for n in active if n not in errors]
    finally:  # a stop (BenchStopped, Ctrl-C) hands over the complete rounds first
        for row in _mode_rows(case, mode, variants, prepared, errors, timed, norms, settings):
            emit(row)


def _mode_rows(case, mode, variants, prepared, errors, timed, norms, settings) -> list[dict]:
    """One row per variant from the rounds every surviving variant completed, with dyt's ratios."""
    alive = [n for n in timed if n not in errors]
    complete = min((len(timed[n]["round_ms"]) for n in alive), default=0)
    rows = []
    for name in variants:
        row = _row(case, name, mode, settings)
        row["norm"] = norms
        if name in prepared:
            row["replaced"] = sum(prepared[name].replaced.values())
            row["first_call_s"] = prepared[name].first_call_s.get(mode)
            row["peak_mem_mb"] = prepared[name].peak_mb.get(mode)
            row.update(prepared[name].float8 or {})
        if name in errors:
            row.update(errors[name])
        elif name in alive and complete:
            slot = timed[name]
            row["round_ms"] = slot["round_ms"][:complete]
            row["rounds"] = complete
            row["median_ms"] = statistics.median(slot["ms"][: complete * settings.steps])
            row["host_ms"] = statistics.median(slot["host"][: complete * settings.steps])
        else:
            continue  # stopped before its first complete round: nothing measured to report
        rows.append(row)
    by_name = {r["variant"]: r for r in rows if r["median_ms"] is not None}
    for row in rows:
        variant = VARIANTS.get(row["variant"])
        if variant is None or not variant.ours or row["variant"] not in by_name:
            continue
        kind = (variant.compiled, variant.graphs, variant.float8 is None)
        others = [
            n for n, v in VARIANTS.items()
            if n in by_name and not v.ours and (v.compiled, v.graphs, v.float8 is None) == kind
        ]  # fmt: skip
        round_ms = {n: by_name[n]["round_ms"] for n in [*others, row["variant"]]}
        row["speedup_vs"] = round_ratios(round_ms, row["variant"], others)
    return rows


# ----------------------------------------------------------------------------------------- the whole run


def run_all(cases: list[Case], variants: list[str], modes: list[str], device, clock, settings: Settings,
            seed: int = 0, stopped: list | None = None) -> list[dict]:  # fmt: skip
    """Every case under a progress bar (one tick per case x mode x variant). With a `stopped` list, a
    BenchStopped (SIGTERM, the time limit) or Ctrl-C ends the loop: the rows finished come back, and the
    reason goes into `stopped`; without one, it propagates."""
    per_case = {c: [v for v in variants if VARIANTS[v].compiled == c.compiled] for c in cases}
    bar = progress(sum(len(v) * len(modes) for v in per_case.values()))
    getattr(bar, "set_description", lambda _: None)("models")
    rows: list[dict] = []

    def tick(row):
        rows.append(row)
        bar.set_postfix_str(f"{row['model']}/{row['batch']} {row['mode']} {row['variant']}")
        bar.update(1)

    try:
        for i, case in enumerate(cases):
            if per_case[case]:
                run_model_case(case, per_case[case], modes, device, clock, settings, seed + i, on_row=tick)
    except (BenchStopped, KeyboardInterrupt) as exc:
        if stopped is None:
            raise
        stopped.append(str(exc) if isinstance(exc, BenchStopped) else "SIGINT")
    finally:
        bar.close()
    return rows


def write_rows(path: Path, env: dict, rows: list[dict], config: dict, incomplete: dict | None) -> dict:
    """The model rows into the run's perf JSON: beside the kernel rows of the same commit when that file
    exists (its env block kept), else in a new file with no kernel rows. Returns what it wrote. Read and
    written back under files.locked (a kernel bench of the same commit writing at the same time keeps its
    rows) and whole or not at all (files.write_atomic); an OSError propagates with the old file intact."""
    with locked(path):
        data: dict[str, Any] = {"env": env, "records": []}
        if path.exists():
            try:
                data = load_perf(path)
            except (OSError, ValueError):
                pass
        data["model_records"] = rows
        data["model_config"] = config
        data.pop("model_incomplete", None)
        if incomplete:
            data["model_incomplete"] = incomplete
        write_atomic(path, json.dumps(json_safe(data), indent=1) + "\n")
    return data


def main(args: argparse.Namespace) -> int:
    """`python -m dyt bench --suite models`."""
    specs = model_specs()
    try:
        names = _split(args.models) or list(specs)
        for n in names:
            if n not in specs:
                raise ValueError(f"unknown model {n!r}: expected one of {', '.join(specs)}")
        variants = _split(args.variants)
        for v in variants:
            if v not in VARIANTS:
                raise ValueError(f"unknown variant {v!r}: expected one of {', '.join(VARIANTS)}")
        modes = _split(args.model_modes)
        for m in modes:
            if m not in MODES:
                raise ValueError(f"unknown model mode {m!r}: expected one of {', '.join(MODES)}")
        if args.compile_cases not in ("default", "all", "none"):
            raise ValueError(f"--compile-cases: expected default, all or none, got {args.compile_cases!r}")
    except ValueError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 2
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("bench: no CUDA device visible (torch.cuda.is_available() is False); the model benchmark times "
              "GPU training steps. `--device cpu` runs the harness on the CPU (numbers for nobody).",
              file=sys.stderr)  # fmt: skip
        return 2
    from dyt.service.env import collect_env

    device = (
        torch.device("cuda", torch.cuda.current_device()) if args.device == "cuda" else torch.device("cpu")
    )
    clock = CudaClock(device) if device.type == "cuda" else WallClock()
    settings = Settings(rounds=2, steps=2, warmup=1) if args.quick else Settings()
    for name in ("rounds", "steps", "warmup"):
        if getattr(args, name, None):
            setattr(settings, name, int(getattr(args, name)))
    cases = plan_cases([specs[n] for n in names], variants, args.compile_cases)
    env = collect_env(seeds={"model_bench": args.seed})
    stopped: list[str] = []
    started = time.perf_counter()
    with stops(args.time_limit):
        rows = run_all(cases, variants, modes, device, clock, settings, args.seed, stopped)
    config = {
        "models": names, "variants": variants, "modes": modes, "compile_cases": args.compile_cases,
        "rounds": settings.rounds, "steps": settings.steps, "warmup": settings.warmup, "seed": args.seed,
        "quick": bool(args.quick), "device": str(device), "autocast": AUTOCAST, "optimizer": "AdamW",
        "timer": "CUDA events per step from an idle GPU" if device.type == "cuda" else "wall clock",
        "time_limit_s": args.time_limit, "wall_s": time.perf_counter() - started,
        "timestamp_utc": env.get("timestamp_utc"),
    }  # fmt: skip
    planned = sum(len(modes) * sum(VARIANTS[v].compiled == c.compiled for v in variants) for c in cases)
    incomplete = {"rows": len(rows), "of": planned, "stopped_by": stopped[0]} if stopped else None
    path = perf_path(Path(args.out), env)
    try:
        write_rows(path, env, rows, config, incomplete)
    except OSError as exc:  # a full disk, a read-only reports/: the rows go elsewhere, not nowhere
        own = {"env": env, "records": [], "model_records": rows, "model_config": config,
               **({"model_incomplete": incomplete} if incomplete else {})}  # fmt: skip
        return unwritten("bench", path, exc, json.dumps(json_safe(own), indent=1) + "\n",
                         f"the {len(rows)} model rows measured")  # fmt: skip
    bad = sum(1 for r in rows if r["error"])
    skipped = sum(1 for r in rows if r["skipped"])
    print(f"wrote {path} ({len(rows)} model rows, {bad} with errors, {skipped} skipped)")
    for line in summary_lines(rows):
        print(line)
    if stopped:
        print(f"bench: stopped by {stopped[0]} after {len(rows)} of {planned} model rows; those are in "
              f"{path}", file=sys.stderr)  # fmt: skip
        return STOPPED
    if args.compare:
        return gate_files(path, args.compare, margin=args.margin, strict=args.strict,
                          model_margin=args.model_margin)  # fmt: skip
    return 0


def summary_lines(rows: list[dict]) -> list[str]:
    """dyt's speedups, one line per model/batch/mode: what the run says at a glance."""
    out = []
    for row in rows:
        if VARIANTS.get(row["variant"], Variant("", None)).ours and row["speedup_vs"]:
            ratios = ", ".join(f"vs {k} {v['median']:.2f}x" for k, v in row["speedup_vs"].items())
            out.append(f"{row['model']}/{row['batch']} {row['mode']} {row['variant']} "
                       f"{row['median_ms']:.2f} ms: {ratios}")  # fmt: skip
    return out


def _split(spec: str | None) -> list[str]:
    return [s.strip() for s in (spec or "").split(",") if s.strip()]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The models suite's options (the shared ones, --out --quick --seed --compare --margin --strict, are
    the kernel bench's)."""
    group = parser.add_argument_group("--suite models")
    group.add_argument("--models", default="", help="comma list of vit_s16,vit_b16,convnext_t,narrow,llama "
                       "(default: all)")  # fmt: skip
    group.add_argument("--variants", default=",".join(DEFAULT_VARIANTS),
                       help="comma list of " + ",".join(VARIANTS) + " (default: all but the "
                       "fp8_ ones)")  # fmt: skip
    group.add_argument("--model-modes", default=",".join(MODES), help="comma list of train,infer")
    group.add_argument("--compile-cases", default="default",
                       help="which cases run the compile_* variants: default (ViT-S/16 at 64, narrow at 8), "
                       "all, none")  # fmt: skip
    group.add_argument("--rounds", type=int, help=f"interleaved rounds (default {Settings.rounds}; "
                       "--suite fp8: 5, 2 with --quick)")  # fmt: skip
    group.add_argument(
        "--steps", type=int, help=f"timed steps per variant and round (default {Settings.steps})"
    )
    group.add_argument(
        "--warmup", type=int, help=f"warm-up steps per variant and mode (default {Settings.warmup})"
    )
    group.add_argument("--time-limit", type=float, metavar="S",
                       help="stop after S seconds, keeping the rows finished (exit 3; --suite fp8 "
                       "too)")  # fmt: skip
    group.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                       help="cpu runs the harness on the CPU: a smoke test, not numbers (--suite fp8 "
                       "too)")  # fmt: skip
    group.add_argument("--model-margin", type=float, default=0.10,
                       help="with --compare: allowed drop in a dyt speedup (median of rounds)")  # fmt: skip
