"""Host time per norm layer in a chain of norm layers, the way a model's step calls them: one forward
through all layers, then one backward into gradients set to None (training), or the forward under
no_grad (inference). Interleaved
rounds within one process; variants: LayerNorm, the paper's eager DyT module, dyt.DyT on the native path,
dyt.DyT on the Python path, and the native op called straight from a module (what dyt's Python checks
cost on top); on request, dyt.PackedDyT (`packed`: one parameter a layer) and dyt.DyT reading its
parameters as attributes (`dyt-attribute-lookups`). Needs a CUDA GPU; run it
alone (other processes on the host's CPUs move these numbers).

    CUDA_VISIBLE_DEVICES=0 python tools/layer_host.py [--rounds 5] [--layers 24] [--shapes 8x197x384]
    CUDA_VISIBLE_DEVICES=0 python tools/layer_host.py --profile dyt --shapes 8x197x384
    CUDA_VISIBLE_DEVICES=0 python tools/layer_host.py --layout permuted --shapes 8x96x56x56 --variants \
        layernorm,eager,dyt,dyt-python
    CUDA_VISIBLE_DEVICES=0 python tools/layer_host.py --modes train --variants \
        layernorm,layernorm-frozen-bias,native-op,native-op-frozen-alpha

The frozen variants hold one parameter out of the gradient: what each parameter's gradient costs a step.

--layout permuted runs ConvNeXt's block norms: shapes are (N, C, H, W), and each layer normalizes C of the
(N, H, W, C) permute of a contiguous (N, C, H, W) tensor (last-dimension stride H * W), its output
permuted back and made contiguous again (in ConvNeXt, by the next block's convolution) for the next layer.

Each cell is the median over rounds of (wall time of --steps steps) / (steps x layers), synchronized only
around the steps: at these sizes every kernel is shorter than the host's work per layer, so the wall time
is the host's. --profile prints torch.profiler's table of one variant's host time per operator instead.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn

import dyt
from dyt import native, ops
from dyt.service.peers import EagerDyT

_REAL_NATIVE_OP = ops._native_op


class NativeOpDyT(dyt.DyT):
    """dyt.DyT calling the native op with no Python check: the floor of the native path's host time."""

    def forward(self, x):
        return native.OP(x, self.alpha, self.weight, self.bias, False, False)


class AttributeLookupDyT(dyt.DyT):
    """dyt.DyT with its parameters read as attributes (through nn.Module.__getattr__), not from
    _parameters as DyT.forward reads them: what the attribute reads cost."""

    def forward(self, x):
        return ops.dyt(x, self.alpha, self.weight, self.bias)


def without_grad(norm: type, name: str) -> type:
    """norm with its parameter `name` frozen (requires_grad False): what one parameter's gradient costs the
    step (its accumulation into .grad, and whatever the norm's backward then skips)."""

    def make(C: int) -> nn.Module:
        module = norm(C)
        getattr(module, name).requires_grad_(False)
        return module

    return make


NORMS = {
    "layernorm": nn.LayerNorm,
    "eager": EagerDyT,
    "dyt": dyt.DyT,
    "dyt-python": dyt.DyT,
    "packed": dyt.PackedDyT,
    "native-op": NativeOpDyT,
    "dyt-attribute-lookups": AttributeLookupDyT,
    "layernorm-frozen-bias": without_grad(nn.LayerNorm, "bias"),
    "native-op-frozen-alpha": without_grad(NativeOpDyT, "alpha"),
}
# The default variants: the frozen ones and packed are asked for by name.
DEFAULT_VARIANTS = ["layernorm", "eager", "dyt", "dyt-python", "native-op"]


class PermutedBlock(nn.Module):
    """A norm over dim 1 of a contiguous (N, C, H, W) tensor, applied to its (N, H, W, C) permute."""

    def __init__(self, norm: nn.Module):
        super().__init__()
        self.norm = norm

    def forward(self, h):
        return self.norm(h.permute(0, 2, 3, 1)).permute(0, 3, 1, 2).contiguous()


def use_native(on: bool) -> None:
    ops._native_op = _REAL_NATIVE_OP if on else (lambda x: None)


def make_step(variant: str, shape, layers: int, dtype, train: bool, permuted: bool = False):
    C = shape[1] if permuted else shape[-1]
    block = (lambda: PermutedBlock(NORMS[variant](C))) if permuted else (lambda: NORMS[variant](C))
    stack = nn.Sequential(*[block() for _ in range(layers)]).to("cuda", dtype)
    x = torch.randn(*shape, device="cuda", dtype=dtype, requires_grad=train)
    dy = torch.randn_like(x)

    def step():
        if train:  # as a training step: gradients set to None, then one backward
            stack.zero_grad(set_to_none=True)
            x.grad = None
            stack(x).backward(dy)
        else:
            with torch.no_grad():
                stack(x)

    return step


def host_us_per_layer(step, steps: int, layers: int) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / (steps * layers) * 1e6


def profile(variant: str, shape, layers: int, dtype, train: bool, permuted: bool) -> None:
    use_native(variant != "dyt-python")
    step = make_step(variant, shape, layers, dtype, train, permuted)
    for _ in range(10):
        step()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(20):
            step()
        torch.cuda.synchronize()
    print(f"{variant} {'train' if train else 'infer'} {shape}: 20 steps of {layers} layers")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--layers", type=int, default=24)
    parser.add_argument("--shapes", default="8x197x384,2x256x256,8x49x768")
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    parser.add_argument("--variants", default=",".join(DEFAULT_VARIANTS), help=f"of {', '.join(NORMS)}")
    parser.add_argument("--modes", default="train,infer")
    parser.add_argument("--profile", default=None, choices=list(NORMS))
    parser.add_argument("--layout", default="rows", choices=["rows", "permuted"])
    args = parser.parse_args()
    permuted = args.layout == "permuted"
    unknown = sorted(set(args.variants.split(",")) - set(NORMS))
    if unknown:
        parser.error(f"--variants takes {', '.join(NORMS)}; got {', '.join(unknown)}")
    if permuted and any(v.startswith("native-op") for v in args.variants.split(",")):
        parser.error("native-op takes contiguous x only: leave it out of --variants with --layout permuted")
    assert native.ensure() is not None, f"the native path is unavailable: {native.state()}"
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[args.dtype]
    variants = args.variants.split(",")
    for text in args.shapes.split(","):
        shape = tuple(int(s) for s in text.split("x"))
        for mode in args.modes.split(","):
            if args.profile:
                profile(args.profile, shape, args.layers, dtype, mode == "train", permuted)
                continue
            steps = {v: make_step(v, shape, args.layers, dtype, mode == "train", permuted) for v in variants}
            times = {v: [] for v in variants}
            for v in variants:  # warm every variant's caches
                use_native(v != "dyt-python")
                for _ in range(10):
                    steps[v]()
            for _ in range(args.rounds):
                for v in variants:
                    use_native(v != "dyt-python")
                    times[v].append(host_us_per_layer(steps[v], args.steps, args.layers))
            use_native(True)
            med = {v: statistics.median(t) for v, t in times.items()}
            base = med.get("layernorm", next(iter(med.values())))
            cells = " ".join(f"{v} {med[v]:.1f} ({base / med[v]:.2f}x)" for v in variants)
            head = f"{text} {args.layout} {args.dtype} {mode}"
            print(f"{head}, host us per layer (layernorm's / variant's): {cells}")


if __name__ == "__main__":
    main()
