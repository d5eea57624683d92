"""Broken DyT implementations, one per bug class of the seed pull request and per contract clause, each
right in everything but its one defect: the proof that the checks catch what they claim. Each fails the
check named in BREAKS and no other (tests/test_conformance_broken.py runs them all).

    python -m dyt conformance --impl dyt.conformance.broken:unmasked_padding

The two launch defects are Triton kernels (in Triton's CPU interpreter on a machine without a GPU, where
dyt.conformance.launches refuses a launch past CUDA's grid limits as CUDA would); the rest are plain PyTorch
autograd Functions. Their backward is exact where their defect does not reach it.
"""

from __future__ import annotations

import torch

# The check each breaks.
BREAKS = {
    "rows_on_grid_axis_1": "test_more_than_65535_rows",
    "one_program_per_narrow_row": "test_narrow_rows_share_programs",
    "unmasked_padding": "test_nonfinite_alpha_with_padding",
    "param_grads_rounded_through_x": "test_float32_parameter_gradients_keep_their_precision",
    "wrong_output_dtype": "test_output_and_gradient_dtypes",
    "nondeterministic_reduction": "test_bitwise_repeats",
    "accepts_bad_input": "test_bad_input_raises_a_clear_error",
}

# The launch fixtures' widths: rows_on_grid_axis_1 tiles rows up to WIDE (several rows a program) and puts
# wider ones one a program on grid axis 1; one_program_per_narrow_row gives each row up to NARROW a program
# of its own and tiles wider ones.
WIDE = 64
NARROW = 16


def _check(x, alpha, gamma, beta):
    if x.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise TypeError(f"x must be float32, bfloat16 or float16, got {x.dtype}")
    if alpha.numel() != 1:
        raise ValueError(f"alpha must have one element, got {alpha.numel()}")
    if gamma.shape != (x.shape[-1],) or (beta is not None and beta.shape != (x.shape[-1],)):
        raise ValueError(f"gamma and beta must have shape ({x.shape[-1]},)")


def _grads(dy, x, alpha, gamma, beta):
    """The exact backward in float32 (dx, dalpha, dgamma, dbeta), before any rounding to the outputs'
    dtypes: the part the fixtures share."""
    a, xf, dyf = alpha.float().reshape(()), x.float(), dy.float()
    t = torch.tanh(a * xf)
    h = torch.exp(-2.0 * (a * xf).abs())
    sech2 = 4.0 * h / (1.0 + h) ** 2
    dz = dyf * gamma.float() * sech2
    rows = tuple(range(x.dim() - 1))
    dbeta = dyf.sum(rows) if beta is not None else None
    return dz * a, (dz * xf).sum().reshape(1), (dyf * t).sum(rows), dbeta


def _finish(ctx, grads, x, alpha, gamma, beta):
    dx, dalpha, dgamma, dbeta = grads
    return (dx.to(x.dtype), dalpha.to(alpha.dtype), dgamma.to(gamma.dtype),
            None if dbeta is None else dbeta.to(beta.dtype))  # fmt: skip


class _Exact(torch.autograd.Function):
    """The contract's forward and backward in float32, in PyTorch: the fixtures subclass it and change one
    step."""

    @staticmethod
    def compute(x, alpha, gamma, beta):
        y = gamma.float() * torch.tanh(alpha.float().reshape(()) * x.float())
        return (y if beta is None else y + beta.float()).to(x.dtype)

    @classmethod
    def forward(cls, ctx, x, alpha, gamma, beta):
        _check(x, alpha, gamma, beta)
        ctx.save_for_backward(x, alpha, gamma, beta)
        return cls.compute(x, alpha, gamma, beta)

    @classmethod
    def backward(cls, ctx, dy):
        x, alpha, gamma, beta = ctx.saved_tensors
        return cls.finish(cls.grads(dy, x, alpha, gamma, beta), x, alpha, gamma, beta)

    @staticmethod
    def grads(dy, x, alpha, gamma, beta):
        return _grads(dy, x, alpha, gamma, beta)

    @staticmethod
    def finish(grads, x, alpha, gamma, beta):
        return _finish(None, grads, x, alpha, gamma, beta)


class _UnmaskedPadding(_Exact):
    """Rows padded to a tile of 64 with zeros (x 0, dy 0) and the parameter gradients summed over the
    padding too: tanh(alpha * 0) with an infinite alpha is NaN there, and NaN * 0 poisons every sum."""

    @staticmethod
    def grads(dy, x, alpha, gamma, beta):
        C = x.shape[-1]
        rows = x.reshape(-1, C)
        pad = (-rows.shape[0]) % 64
        xp = torch.cat([rows, rows.new_zeros(pad, C)])
        dyp = torch.cat([dy.reshape(-1, C), dy.new_zeros(pad, C)])
        a = alpha.float().reshape(())
        z = a * xp.float()
        t = torch.tanh(z)
        sech2 = 1.0 - t * t
        dz = dyp.float() * gamma.float() * sech2
        dx = _grads(dy, x, alpha, gamma, beta)[0]  # x's own gradient as the contract has it
        dbeta = dyp.float().sum(0) if beta is not None else None
        return dx, (dz * xp.float()).sum().reshape(1), (dyp.float() * t).sum(0), dbeta


class _ParamGradsRoundedThroughX(_Exact):
    """Parameter gradients rounded to x's dtype before they are stored in the parameters' dtypes."""

    @staticmethod
    def finish(grads, x, alpha, gamma, beta):
        dx, dalpha, dgamma, dbeta = grads
        through = [None if g is None else g.to(x.dtype) for g in (dalpha, dgamma, dbeta)]
        return _finish(None, (dx, *through), x, alpha, gamma, beta)


class _WrongOutputDtype(_Exact):
    """y in float32 whatever x's dtype."""

    @staticmethod
    def compute(x, alpha, gamma, beta):
        y = gamma.float() * torch.tanh(alpha.float().reshape(()) * x.float())
        return y if beta is None else y + beta.float()


class _NondeterministicReduction(_Exact):
    """dgamma and dbeta summed over the rows in a fresh random order each call (as atomics would)."""

    @staticmethod
    def grads(dy, x, alpha, gamma, beta):
        dx, dalpha, _, _ = _grads(dy, x, alpha, gamma, beta)
        C = x.shape[-1]
        rows = x.reshape(-1, C)
        order = torch.randperm(rows.shape[0], device=x.device)
        xf, dyf = rows.float()[order], dy.reshape(-1, C).float()[order]
        t = torch.tanh(alpha.float().reshape(()) * xf)
        dgamma = torch.zeros(C, device=x.device)
        dbeta = torch.zeros(C, device=x.device)
        for start in range(0, xf.shape[0], 7):  # sequential partial sums in that order
            dgamma = dgamma + (dyf[start : start + 7] * t[start : start + 7]).sum(0)
            dbeta = dbeta + dyf[start : start + 7].sum(0)
        return dx, dalpha, dgamma, dbeta if beta is not None else None


def _exact_call(cls):
    def call(x, alpha, gamma, beta=None):
        return cls.apply(x, alpha, gamma, beta)

    return call


unmasked_padding = _exact_call(_UnmaskedPadding)
param_grads_rounded_through_x = _exact_call(_ParamGradsRoundedThroughX)
wrong_output_dtype = _exact_call(_WrongOutputDtype)
nondeterministic_reduction = _exact_call(_NondeterministicReduction)


def accepts_bad_input(x, alpha, gamma, beta=None):
    """Runs on whatever comes: alpha's first element, gamma and beta cut or zero-padded to x's width, x cast
    to float32 where it is an integer, its real part where it is complex."""
    if x.is_complex():
        x = x.real
    if not x.is_floating_point():
        x = x.float()
    C = x.shape[-1]

    def fit(p):
        return p[:C] if p.shape[0] >= C else torch.nn.functional.pad(p, (0, C - p.shape[0]))

    return _Exact.apply(x, alpha.reshape(-1)[:1], fit(gamma), None if beta is None else fit(beta))


# ------------------------------------------------------------------ the launch defects, as Triton kernels


def _triton_forward(x, alpha, gamma, beta, *, rows_on_axis_1: bool):
    from dyt.conformance import _broken_kernels as k

    C = x.shape[-1]
    rows = x.reshape(-1, C).contiguous()
    y = torch.empty_like(rows)
    M = rows.shape[0]
    if M == 0:
        return y.reshape(x.shape)
    block_n = k.next_power_of_2(C)
    if rows_on_axis_1:
        block_m = 8 if C <= WIDE else 1  # wide rows one a program, on axis 1
        grid = (1, (M + block_m - 1) // block_m)
    else:
        block_m = 1 if C <= NARROW else 64  # one program a narrow row
        grid = ((M + block_m - 1) // block_m,)
    has_beta = beta is not None
    axis = 1 if rows_on_axis_1 else 0
    k.forward[grid](rows, y, alpha, gamma, beta if has_beta else gamma, M, C, rows.stride(0),
                    BLOCK_M=block_m, BLOCK_N=block_n, HAS_BETA=has_beta, ROW_AXIS=axis)  # fmt: skip
    return y.reshape(x.shape)


class _TritonForward(_Exact):
    rows_on_axis_1 = False

    @classmethod
    def compute(cls, x, alpha, gamma, beta):
        return _triton_forward(x, alpha, gamma, beta, rows_on_axis_1=cls.rows_on_axis_1)


class _RowsOnGridAxis1(_TritonForward):
    """Wide rows one per program on CUDA's grid axis 1 (at most 65,535 blocks): fails to launch past
    65,535 rows."""

    rows_on_axis_1 = True


class _OneProgramPerNarrowRow(_TritonForward):
    """One program per row of width up to 16: a launch of as many programs as rows, each of a few elements
    (the GPU starves)."""


rows_on_grid_axis_1 = _exact_call(_RowsOnGridAxis1)
one_program_per_narrow_row = _exact_call(_OneProgramPerNarrowRow)
