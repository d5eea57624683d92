"""The published summary: turns a reports/ folder into summary.md, summary.html and PNG plots.

Works from the files alone (no GPU, no torch, no triton) and renders whatever is there, saying what is
missing, so a crashed or partial run still produces a page a person can read first. Where the folder holds
no run of its own, it renders the results the repository commits in the folder's baselines/ and
conformance/ subfolders, labelled with the GPU, commit and date they were measured.

One job per module:

- read: the folder's files into data (JUnit, env.json, perf JSON, committed baselines and verdicts);
  reads only, and a damaged file becomes a note, never an exception.
- plots: PNG plots of a perf JSON's kernel and model rows (matplotlib, imported on first use).
- markdown: the page's sections, pure functions of read's data.
- render: which sections the page holds, summary.md and summary.html written, `python -m dyt report`.

The names below are the package's interface (the CLI, the nox sessions and the tests use them); each
lives in the module that does its job.
"""

from __future__ import annotations

from dyt.service.report.markdown import (
    BUG_CLASSES,
    MAX_FAILURES_SHOWN,
    MAX_NOTES_BYTES,
    accuracy_table,
    baseline_note,
    committed,
    conformance_section,
    env_section,
    errors_list,
    failures_section,
    models_section,
    perf_section,
    source_note,
    tests_section,
    verdict_note,
    verdict_sections,
)
from dyt.service.report.plots import make_model_plots, make_plots
from dyt.service.report.read import (
    MODE_ORDER,
    MODEL_VARIANT_ORDER,
    PROVIDER_ORDER,
    SHORT_DTYPE,
    Baseline,
    CommittedVerdict,
    Failure,
    JunitData,
    Measured,
    SuiteCounts,
    Verdict,
    baseline_of,
    default_reproduce,
    junit_measured,
    load_baselines,
    load_junit,
    load_verdicts,
    measured_kernels,
    measured_models,
    newest_perf,
    nodeid_of,
    providers_in,
    suite_of,
    unreadable_perf,
)
from dyt.service.report.render import (
    MAX_SUMMARY_BYTES,
    add_arguments,
    baseline_sections,
    compose,
    main,
    render,
)

__all__ = [
    "BUG_CLASSES", "MAX_FAILURES_SHOWN", "MAX_NOTES_BYTES", "MAX_SUMMARY_BYTES", "MODEL_VARIANT_ORDER",
    "MODE_ORDER", "PROVIDER_ORDER", "SHORT_DTYPE", "Baseline", "CommittedVerdict", "Failure", "JunitData",
    "Measured", "SuiteCounts", "Verdict", "accuracy_table", "add_arguments", "baseline_note", "baseline_of",
    "baseline_sections", "committed", "compose", "conformance_section", "default_reproduce", "env_section",
    "errors_list", "failures_section", "junit_measured", "load_baselines", "load_junit", "load_verdicts",
    "main", "make_model_plots", "make_plots", "measured_kernels", "measured_models", "models_section",
    "newest_perf", "nodeid_of", "perf_section", "providers_in", "render", "source_note", "suite_of",
    "tests_section", "unreadable_perf", "verdict_note", "verdict_sections",
]  # fmt: skip
