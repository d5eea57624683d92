"""conformance: DyT's contract checked on an implementation (`--impl NAME`, dyt by default): the shipped
checks of dyt.conformance.checks, collected here so that dyt's own runs (`nox -s tests`, `nox -s
gpu_tests`) take them with the rest of the suites; `python -m dyt conformance` runs the same checks from
an installed wheel. Test ids begin with the implementation's name."""

from __future__ import annotations

import pytest

from dyt.conformance import checks

pytestmark = pytest.mark.conformance

# Every check of the shipped module, by its own name (pytest collects them from this module's namespace).
globals().update({name: getattr(checks, name) for name in dir(checks) if name.startswith("test_")})
