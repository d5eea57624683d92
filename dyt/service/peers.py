"""The DyT modules that dyt is measured and checked against: the paper's eager module, Liger-Kernel's.

EagerDyT is the reference module of "Transformers without Normalization" (Zhu et al., CVPR 2025) as the
paper publishes it: alpha (1,) = alpha_init, weight ones, bias zeros, `tanh(alpha * x) * weight + bias`,
with weight and bias broadcast as [:, None, None] for channels-first (N, C, H, W) input. Its parameter
names are dyt.DyT's, so one state dict loads into either. `bias=False` is the LLaMA recipe (DyT in place of
RMSNorm, no beta).

Liger-Kernel's LigerDyT is imported only when asked for (`liger_dyt`), and wrapped for channels-first
input, which it does not take itself.
"""

from __future__ import annotations

import torch
from torch import nn


class EagerDyT(nn.Module):
    """The paper's DynamicTanh: plain PyTorch, one elementwise op per term."""

    def __init__(self, num_features: int, *, alpha_init: float = 0.5, bias: bool = True,
                 channels_last: bool = True, device=None, dtype=None):  # fmt: skip
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        self.num_features = int(num_features)
        self.channels_last = channels_last
        self.alpha = nn.Parameter(torch.ones(1, **factory) * alpha_init)
        self.weight = nn.Parameter(torch.ones(self.num_features, **factory))
        self.bias = nn.Parameter(torch.zeros(self.num_features, **factory)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.tanh(self.alpha * x)
        if self.channels_last:
            x = x * self.weight
            return x if self.bias is None else x + self.bias
        x = x * self.weight[:, None, None]
        return x if self.bias is None else x + self.bias[:, None, None]

    def extra_repr(self) -> str:
        return f"{self.num_features}, bias={self.bias is not None}, channels_last={self.channels_last}"


class ChannelsFirst(nn.Module):
    """Runs a channels-last module on (N, C, H, W) input: C moved last and back."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x.movedim(1, -1)).movedim(-1, 1)


def liger_dyt(num_features: int, *, bias: bool = True, channels_last: bool = True) -> nn.Module:
    """Liger-Kernel's LigerDyT (alpha 0.5, gamma ones, beta zeros); ImportError where it is not installed."""
    from liger_kernel.transformers.dyt import LigerDyT

    module = LigerDyT(num_features, beta=bias, init_alpha=0.5)
    return module if channels_last else ChannelsFirst(module)
