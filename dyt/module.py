"""nn.Module wrapper and the LayerNorm -> DyT conversion helper of the DyT paper."""

from __future__ import annotations

import torch
from torch import nn

from dyt.ops import dyt


class DyT(nn.Module):
    """Dynamic Tanh: y = weight * tanh(alpha * x) + bias, a drop-in replacement for LayerNorm.

    Parameter names and defaults follow the paper's reference module (alpha (1,) = alpha_init, weight
    ones, bias zeros), so its state dicts load unchanged. channels_last=False takes (N, C, H, W) and
    scales along dim 1 (ConvNeXt); such input is copied to channels-last order for the kernels unless it
    is already in torch.channels_last memory format, where the permuted view is free.
    """

    def __init__(self, num_features: int, *, alpha_init: float = 0.5, bias: bool = True,
                 channels_last: bool = True, device=None, dtype=None):  # fmt: skip
        super().__init__()
        if int(num_features) < 1:
            raise ValueError(f"DyT: num_features must be a positive int, got {num_features!r}")
        factory = {"device": device, "dtype": dtype}
        self.num_features = int(num_features)
        self.alpha_init = float(alpha_init)
        self.channels_last = channels_last
        self.alpha = nn.Parameter(torch.full((1,), self.alpha_init, **factory))
        self.weight = nn.Parameter(torch.ones(self.num_features, **factory))
        self.bias = nn.Parameter(torch.zeros(self.num_features, **factory)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.channels_last:
            return dyt(x, self.alpha, self.weight, self.bias)
        if x.dim() < 2:
            raise ValueError(
                f"DyT(channels_last=False) expects (N, C, ...) input, got shape {tuple(x.shape)}"
            )
        y = dyt(x.movedim(1, -1), self.alpha, self.weight, self.bias)
        return y.movedim(-1, 1)

    def extra_repr(self) -> str:
        return (f"{self.num_features}, alpha_init={self.alpha_init}, bias={self.bias is not None}, "
                f"channels_last={self.channels_last}")  # fmt: skip


def convert_layernorm(module: nn.Module, alpha_init: float = 0.5) -> nn.Module:
    """Replaces every nn.LayerNorm in module (itself included) by a DyT of the same width; returns it.

    The new DyT keeps the LayerNorm's device and dtype, and has a bias exactly when the LayerNorm had one.
    """
    if isinstance(module, nn.LayerNorm):
        shape = module.normalized_shape
        if len(shape) != 1:
            raise ValueError(f"convert_layernorm: only 1-D normalized_shape converts, got {tuple(shape)}")
        ref = module.weight if module.weight is not None else None
        factory = {"device": ref.device, "dtype": ref.dtype} if ref is not None else {}
        has_bias = getattr(module, "bias", None) is not None
        return DyT(shape[0], alpha_init=alpha_init, bias=has_bias, **factory)
    for name, child in module.named_children():
        setattr(module, name, convert_layernorm(child, alpha_init))
    return module
