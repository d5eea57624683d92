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


def test_the_command_reports_progress_as_each_mutant_starts_and_ends(monkeypatch, capsys):
    """`python tests/mutants.py` takes minutes: a line on stderr as each child run starts and one as it
    ends, before the table (child runs stubbed here: each mutant caught, the control green)."""

    def child(tests, mutant=None, timeout=300):
        expect = mutants.MUTANTS[mutant].expect if mutant else ""
        failed = {t.split("::", 1)[1]: expect for t in tests} if mutant else {}
        passed = [] if mutant else [t.split("::", 1)[1] for t in tests]
        output = f"DYT_MUTANT active: {mutant}:" if mutant else ""
        return mutants.Outcome(mutant, 1 if mutant else 0, tuple(tests), failed, passed, {}, output)

    monkeypatch.setattr(mutants, "run_child", child)
    assert mutants.main() == 0
    out = capsys.readouterr()
    total = len(mutants.MUTANTS) + 1
    starts = [line for line in out.err.splitlines() if line.startswith("mutants: [")]
    assert [line.split("]")[0] for line in starts] == [f"mutants: [{i}/{total}" for i in range(1, total + 1)]
    assert out.err.count("caught: ") == len(mutants.MUTANTS) and "green in" in out.err
    table = out.out.splitlines()
    assert table[0].split()[:3] == ["mutant", "suite", "caught"] and len(table) == total + 2
