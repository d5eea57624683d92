"""DyT's conformance suite, shipped for any DyT implementation's CI: the contract's checks
(dyt.conformance.checks), the implementations they judge and what each supports (implementations), the
pytest plugin that runs them (plugin; this package is the plugin: `pytest -p dyt.conformance --dyt-impl
NAME --pyargs dyt.conformance.checks`), the verdict files and their merge across runners (verdict), and
broken implementations that each fail the check of their clause (broken).

`python -m dyt conformance --impl NAME` runs the checks and writes the verdict (dyt.conformance.runner).
The verdict and its merge need neither torch nor pytest; the checks need both.
"""

from __future__ import annotations

try:
    import pytest  # noqa: F401
except ImportError:  # the verdict and its merge work without pytest: the plugin's hooks are not defined
    pass
else:
    from dyt.conformance.plugin import (  # noqa: F401  (the hooks of `pytest -p dyt.conformance`)
        dyt_device,
        dyt_seed,
        pytest_addoption,
        pytest_collection_modifyitems,
        pytest_configure,
        pytest_generate_tests,
        pytest_runtest_setup,
        pytest_sessionfinish,
        pytest_sessionstart,
    )
