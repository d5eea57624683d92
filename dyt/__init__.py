"""Fused DyT (Dynamic Tanh) kernels: y = gamma * tanh(alpha * x) + beta, forward and backward in Triton."""

from dyt.module import DyT, convert_layernorm
from dyt.ops import dyt

__all__ = ["DyT", "convert_layernorm", "dyt"]
__version__ = "0.1.0"
