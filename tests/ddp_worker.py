"""One rank of tests/test_distributed.py, started by torchrun: trains a small model holding dyt's modules
under DistributedDataParallel (gloo) for two steps and saves, per step, the gradients DDP left in .grad,
the same rank's gradients of an unwrapped copy on the same shard, and the parameters after SGD's step.

    python -m torch.distributed.run --standalone --nproc-per-node 2 tests/ddp_worker.py \
        --kind rows --seed 1 --out /tmp/ddp

Every rank builds the same model and batches from the seed; rank r takes every world-th sample from r on.
"""

from __future__ import annotations

import argparse
import copy
import pathlib

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import dyt

KINDS = ("rows", "channels_first", "packed")
STEPS = 2
BATCH = 6


def build(kind: str, seed: int, device: torch.device):
    """(model, batches, upstream gradients): a model whose norm is dyt's module, with random DyT parameters
    (alpha ~ U(0.3, 1.2), weight ~ 1 + N(0, 1/4), bias ~ N(0, 1)), and STEPS batches of BATCH samples."""
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    if kind == "channels_first":
        norm = dyt.DyT(8, channels_last=False)
        model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), norm, nn.Conv2d(8, 4, 1))
        sample, out = (3, 6, 5), (4, 6, 5)
    else:
        norm = dyt.PackedDyT(32) if kind == "packed" else dyt.DyT(32)
        model = nn.Sequential(nn.Linear(16, 32), norm, nn.Linear(32, 8))
        sample, out = (5, 16), (5, 8)
    with torch.no_grad():
        norm.alpha.copy_(torch.rand(1, generator=gen) * 0.9 + 0.3)
        norm.weight.copy_(1.0 + 0.5 * torch.randn(norm.num_features, generator=gen))
        norm.bias.copy_(torch.randn(norm.num_features, generator=gen))
    xs = [torch.randn(BATCH, *sample, generator=gen) for _ in range(STEPS)]
    dys = [torch.randn(BATCH, *out, generator=gen) for _ in range(STEPS)]
    return model.to(device), [x.to(device) for x in xs], [d.to(device) for d in dys]


def grads(model: nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.grad.detach().clone() for name, p in model.named_parameters() if p.grad is not None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", choices=KINDS, required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--out", type=pathlib.Path, required=True)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model, xs, dys = build(args.kind, args.seed, device)
    local = copy.deepcopy(model)
    ddp = DistributedDataParallel(model, gradient_as_bucket_view=True)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
    record = []
    for x, dy in zip(xs, dys, strict=True):
        x, dy = x[rank::world], dy[rank::world]
        local.load_state_dict(model.state_dict())
        local.zero_grad(set_to_none=True)
        local(x).backward(dy)
        optimizer.zero_grad(set_to_none=True)
        ddp(x).backward(dy)
        step = {"local": grads(local), "ddp": grads(model)}
        optimizer.step()
        step["params"] = {name: p.detach().clone() for name, p in model.named_parameters()}
        record.append(step)
    torch.save(record, args.out / f"rank{rank}.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
