"""Host time per layer in a chain of norm layers: LayerNorm, the paper's eager DyT, dyt.DyT, dyt.PackedDyT.

    CUDA_VISIBLE_DEVICES=0 python benchmarks/layer_host.py [--rounds 5] [--layers 24] [--shapes 8x197x384]
    CUDA_VISIBLE_DEVICES=0 python benchmarks/layer_host.py --profile dyt --shapes 8x197x384
    CUDA_VISIBLE_DEVICES=0 python benchmarks/layer_host.py --layout permuted --shapes 8x96x56x56
    CUDA_VISIBLE_DEVICES=0 python benchmarks/layer_host.py --modes train --variants \
        layernorm,layernorm-frozen-bias,dyt,dyt-frozen-alpha
    CUDA_VISIBLE_DEVICES=0 DYT_NATIVE=0 python benchmarks/layer_host.py   # dyt's Python path

The chain is called the way a model's step calls its norms: one forward through all layers, then one
backward into gradients set to None (training), or the forward under no_grad (inference); the variants
interleaved in rounds within one process. Variants: layernorm (nn.LayerNorm), eager (the paper's module,
dyt.service.peers.EagerDyT), dyt (dyt.DyT), packed (dyt.PackedDyT: one parameter a layer), and the frozen
ones, which hold one parameter out of the gradient (requires_grad False): what that parameter's gradient
costs a step. Which host path dyt's modules take (dyt.native's C++ path, or the Python path where
DYT_NATIVE=0 or it cannot be built) is printed first. Needs a CUDA GPU; run it alone (other processes on
the host's CPUs move these numbers).

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
from dyt import native
from dyt.service.peers import EagerDyT


def without_grad(norm: type, name: str):
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
    "packed": dyt.PackedDyT,
    "layernorm-frozen-bias": without_grad(nn.LayerNorm, "bias"),
    "dyt-frozen-alpha": without_grad(dyt.DyT, "alpha"),
}
DEFAULT_VARIANTS = ["layernorm", "eager", "dyt"]  # the others are asked for by name


class PermutedBlock(nn.Module):
    """A norm over dim 1 of a contiguous (N, C, H, W) tensor, applied to its (N, H, W, C) permute."""

    def __init__(self, norm: nn.Module):
        super().__init__()
        self.norm = norm

    def forward(self, h):
        return self.norm(h.permute(0, 2, 3, 1)).permute(0, 3, 1, 2).contiguous()


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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
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
    variants = args.variants.split(",")
    unknown = sorted(set(variants) - set(NORMS))
    if unknown:
        parser.error(f"--variants takes {', '.join(NORMS)}; got {', '.join(unknown)}")
    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU (torch.cuda.is_available() is False)")
    state, reason = native.state() if native.ensure() is None else ("loaded", "")
    print(f"dyt's host path: {'native' if state == 'loaded' else 'Python'} (dyt.native: {state}"
          f"{'; ' + reason if reason else ''})")  # fmt: skip
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[args.dtype]
    for text in args.shapes.split(","):
        shape = tuple(int(s) for s in text.split("x"))
        for mode in args.modes.split(","):
            if args.profile:
                profile(args.profile, shape, args.layers, dtype, mode == "train", permuted)
                continue
            steps = {v: make_step(v, shape, args.layers, dtype, mode == "train", permuted) for v in variants}
            times: dict[str, list[float]] = {v: [] for v in variants}
            for v in variants:  # warm every variant's caches
                for _ in range(10):
                    steps[v]()
            for _ in range(args.rounds):
                for v in variants:
                    times[v].append(host_us_per_layer(steps[v], args.steps, args.layers))
            med = {v: statistics.median(t) for v, t in times.items()}
            base = med.get("layernorm", next(iter(med.values())))
            cells = " ".join(f"{v} {med[v]:.1f} ({base / med[v]:.2f}x)" for v in variants)
            head = f"{text} {args.layout} {args.dtype} {mode}"
            print(f"{head}, host us per layer (layernorm's / variant's): {cells}")


if __name__ == "__main__":
    main()
