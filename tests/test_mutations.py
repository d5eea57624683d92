"""mutation: each bug class of the seed pull request, as a mutant built from the real source, is caught by
its suite: the child pytest exits 1 with every selected test failing on the assertion that names the bug,
and the same selections pass on the real code. A suite that cannot catch its own bug class is not done.

One command for people: ``python tests/mutants.py`` (prints mutant -> suite -> caught).
"""

from __future__ import annotations

import importlib

import pytest

import mutants

pytestmark = pytest.mark.mutation


@pytest.mark.parametrize("name", sorted(mutants.MUTANTS))
def test_mutant_patches_match_the_real_code(name):
    """Built in-process without installing it: every exact patch still applies, and changes something."""
    m = mutants.MUTANTS[name]
    module = importlib.import_module(m.module)
    built = mutants.build(name)
    assert set(built) == {function for function, _ in m.targets}
    for function, obj in built.items():
        assert obj is not getattr(module, function), f"{name}: {function} was installed by build()"


def test_a_patch_that_no_longer_matches_fails_loudly():
    with pytest.raises(AssertionError, match="real code changed"):
        mutants._patched("acc += x", (("acc += tl.where(mask, x, 0.0)", "acc += x", 1),), "kernel")
    with pytest.raises(AssertionError, match="expected 1 occurrence"):
        mutants._patched("a; a", (("a", "b", 1),), "twice")


@pytest.mark.parametrize("name", list(mutants.MUTANTS))
def test_suite_catches_mutant(name):
    """Exit code 1 only: 2/3/4 (interrupted, internal error, usage error) would be a crash, not a catch."""
    m = mutants.MUTANTS[name]
    out = mutants.run_child(m.tests, name)
    assert out.caught(m.expect), f"{m.suite} did not catch {name} ({m.bug}):\n{out.describe()}"


def test_selections_pass_on_the_real_code():
    """The control: without DYT_MUTANT the same selections are green, so the failures are the mutants'."""
    out = mutants.run_child(mutants.control_tests())
    assert out.green(), f"the mutation selections fail on the real code:\n{out.describe()}"
    assert "DYT_MUTANT active" not in out.output
