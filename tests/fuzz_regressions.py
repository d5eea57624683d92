"""The failures the fuzz tests (tests/test_fuzz.py) found, kept as explicit cases: each runs on its path in
every run, whatever the budget (test_fuzz.py::test_regression), before and apart from the drawn examples.

A new failure goes here as hypothesis printed it (its Case), on the path whose test found it, with what it
caught; docs/fuzzing.md lists them with their fixes. The cases are built from test_fuzz's Case and Values,
which it hands to regressions() (no import of the test module from here).
"""

from __future__ import annotations


def regressions(Case, Values) -> list[tuple[str, str, object, str]]:  # noqa: N803  (the classes, as named)
    """[(id, path, case, what it caught)]."""
    return [
        (
            "interpreter_bf16_subnormal_alpha",
            "kernels_rows",
            Case(
                shape=(1,),
                alpha_dtype="bf16",
                beta_dtype=None,
                alpha="sub",
                x=Values(exp=40),
                dy=Values(exp=40),
            ),
            "Triton's interpreter widened a bfloat16 subnormal alpha (3 * 2^-133) to 2^-127: y 21 times too "
            "large (found at x ~ 1, where y is a float32 subnormal; here x, dy ~ 2^40 keep y and dx "
            "normal, so that the case is judged in full). Fixed in dyt/kernels.py (_f32: the bits widened "
            "by hand in the interpreter).",
        ),
        (
            "interpreter_bf16_subnormal_inputs",
            "kernels_rows",
            Case(
                shape=(3, 5),
                x_dtype="bf16",
                alpha_dtype="bf16",
                gamma_dtype="bf16",
                beta_dtype="bf16",
                alpha=1.0,
                x=Values(specials=((0, "sub"), (6, "-sub"), (9, "tiny"))),
                dy=Values(specials=((1, "sub"), (7, "-sub"))),
                gamma=Values(specials=((2, "sub"),)),
                beta=Values(exp=-140),
            ),
            "the same for x, dy, gamma and beta: bfloat16 subnormals read as 0 or as 2^-127 in the "
            "interpreter's forward and backward.",
        ),
        (
            "interpreter_bf16_subnormal_channels_first",
            "kernels_channels_first",
            Case(
                shape=(2, 3, 4),
                channels_first=True,
                x_dtype="bf16",
                alpha_dtype="bf16",
                gamma_dtype="bf16",
                beta_dtype="bf16",
                x=Values(exp=-131),
                beta=Values(exp=-133),
            ),
            "the same on the channels-first kernels (every x a bfloat16 subnormal).",
        ),
        (
            "interpreter_bf16_subnormal_packed",
            "kernels_packed",
            Case(
                shape=(4, 8),
                alpha_dtype="bf16",
                gamma_dtype="bf16",
                beta_dtype="bf16",
                alpha="sub",
                x=Values(exp=40),
                beta=Values(exp=-130),
            ),
            "the same through dyt_packed, parameters packed in bfloat16.",
        ),
        (
            "one_row_under_vjp",
            "transforms",
            Case(shape=(1,), beta_dtype=None, alpha="nan"),
            "torch.func.vjp of dyt on a 1-D x (one row) failed: dyt.torch_path.differentiable_backward "
            "summed dgamma and dbeta over dims [], which torch takes for every dimension (a scalar, "
            "'invalid gradient at index 2 - got [] but expected shape compatible with [1]'). Fixed there.",
        ),
        (
            "one_row_under_grad",
            "transforms",
            Case(shape=(7,), api="grad"),
            "the same through torch.func.grad, 7 channels.",
        ),
        (
            "one_row_create_graph",
            "create_graph",
            Case(shape=(5,), alpha_dtype="bf16"),
            "the same bug through a backward with create_graph=True (double backward, gradient penalties), "
            "on every device.",
        ),
        (
            "plain_sech2_subnormal",
            "plain_rows",
            Case(
                shape=(127,),
                x_dtype="bf16",
                beta_dtype=None,
                alpha=7.0,
                x=Values(spread=8),
                dy=Values(exp=3, spread=8),
                gamma=Values(exp=3),
                seed=2157498,
            ),
            "the plain path's dx at |alpha x| ~ 49.5, a bfloat16 subnormal, one ulp off (1.84e-40 against "
            "2.80e-40): dyt.torch_path._sech2 was 4h / (1 + h)^2 with h = exp(-2|z|), a float32 subnormal "
            "there, its rounding scaled by 4 and then by |dy gamma alpha| ~ 2^12. Fixed there: sech * sech "
            "from h = exp(-|z|), as the kernels compute it.",
        ),
        (
            "plain_sech2_subnormal_under_vjp",
            "transforms",
            Case(
                shape=(127,),
                x_dtype="bf16",
                beta_dtype=None,
                alpha=7.0,
                x=Values(spread=8),
                dy=Values(exp=3, spread=8),
                gamma=Values(exp=3),
                seed=2157498,
            ),
            "the same _sech2 under torch.func (dyt.ops._ComposableDyT's backward).",
        ),
        (
            "plain_sech2_subnormal_create_graph",
            "create_graph",
            Case(
                shape=(127,),
                x_dtype="bf16",
                beta_dtype=None,
                alpha=7.0,
                x=Values(spread=8),
                dy=Values(exp=3, spread=8),
                gamma=Values(exp=3),
                seed=2157498,
            ),
            "the same _sech2 in differentiable_backward (create_graph=True).",
        ),
    ]
