"""Reading a reports folder's results: JUnit files, env.json, perf JSON, and the committed baselines and
conformance verdicts, into plain data (dataclasses, dicts).

The contract: functions here only read. They never write a file, never import matplotlib or markdown,
and never raise on a damaged input: an unreadable JUnit file, test case, env.json or perf JSON becomes a
note in the data (JunitData.unreadable, read_env's problem, unreadable_perf) so the page still renders.
Also here: the names and orders the other modules present records in (PROVIDER_ORDER, MODE_ORDER,
short_dtype, model_variants) and the predicates that pick the rows a table or plot shows.
"""

from __future__ import annotations

import datetime
import json
import math
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from dyt.service.bench import BANDWIDTH_ELEMENTS, SMALL_SHAPES
from dyt.service.records import baseline_path, load_perf

PROVIDER_ORDER = ("dyt", "eager", "compile", "liger")


MODE_ORDER = {"fwd": 0, "fwd_nograd": 1, "bwd": 2, "fwdbwd": 3}


SHORT_DTYPE = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


MODEL_VARIANT_ORDER = (
    "norm", "eager", "dyt", "dyt_autocast", "packed_dyt", "liger", "compile_eager", "compile_dyt",
    "compile_dyt_autocast", "compile_packed_dyt", "graphs_eager", "graphs_dyt", "graphs_dyt_autocast",
    "graphs_packed_dyt",
)  # fmt: skip


@dataclass
class Failure:
    session: str
    suite: str
    nodeid: str
    kind: str  # failure or error
    message: str
    excerpt: str
    reproduce: str
    properties: dict[str, str]
    impl: str = "dyt"  # the implementation under test (--impl)


@dataclass
class SuiteCounts:
    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0
    time_s: float = 0.0


@dataclass
class Verdict:
    """One conformance check of one implementation over its parameter cases: counts, the first failure."""

    passed: int = 0
    failed: int = 0
    skipped: int = 0
    first_failure: Failure | None = None
    skip_reason: str = ""


@dataclass
class JunitData:
    counts: dict[tuple[str, str], SuiteCounts] = field(default_factory=dict)  # (session, suite)
    failures: list[Failure] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)
    # (implementation, check): the conformance suite's cases (tests/test_conformance.py, --impl), and per
    # implementation the other suites' counts ("dyt's suites": not applicable to other implementations)
    conformance: dict[tuple[str, str], Verdict] = field(default_factory=dict)
    own_suites: dict[str, SuiteCounts] = field(default_factory=dict)


def suite_of(classname: str, name: str = "") -> str:
    """Marker of a test: test_<suite>.py's <suite>, from the JUnit classname (or name, for collection)."""
    for part in re.split(r"[./]", classname or name or ""):
        if part.startswith("test_") and len(part) > 5:
            return part[5:].removesuffix(".py")
    return classname or "(unknown)"


def nodeid_of(classname: str, name: str) -> str:
    """pytest node id from JUnit's dotted classname (tests.test_x.TestC, t -> tests/test_x.py::TestC::t)."""
    parts = (classname or "").split(".")
    for i, part in enumerate(parts):
        if part.startswith("test_"):
            path = "/".join(parts[: i + 1]) + ".py"
            return "::".join([path, *parts[i + 1 :], name])
    return f"{classname}::{name}" if classname else name


def default_reproduce(session: str, nodeid: str) -> str:
    """The command that reruns one test when the run did not record its own."""
    if session in ("tests", "gpu_tests"):
        return f"nox -s {session} -- '{nodeid}'"
    return f"python -m pytest '{nodeid}'"


def _properties(case) -> dict[str, str]:
    props: dict[str, str] = {}
    for prop in case._elem.iter("property"):
        if prop.get("name"):
            props[prop.get("name")] = prop.get("value", "")
    return props


def _suite_impl(suite) -> str:
    """The implementation a JUnit test suite ran for (its global property impl; dyt where absent)."""
    for prop in suite._elem.iter("property"):
        if prop.get("name") == "impl":
            return prop.get("value") or "dyt"
    return "dyt"


def _seconds(case) -> float:
    """A test case's time attribute in seconds; 0 where it is missing or not a number."""
    try:
        return float(case.time or 0.0)
    except (TypeError, ValueError):
        return 0.0


def _excerpt(text: str | None, lines: int = 15, chars: int = 2000) -> str:
    tail = "\n".join((text or "").strip().splitlines()[-lines:])
    return tail[-chars:]


def load_junit(junit_dir: Path) -> JunitData:
    """Counts per (session, suite) and every failure, from junit/*.xml; unreadable files are listed."""
    from junitparser import Error, JUnitXml, Skipped, TestSuite
    from junitparser import Failure as JFailure

    data = JunitData()
    for path in sorted(junit_dir.glob("*.xml")):
        data.files.append(path)
        session = path.stem
        try:
            xml = JUnitXml.fromfile(str(path))
            suites = [xml] if isinstance(xml, TestSuite) else list(xml)
            cases = [(case, _suite_impl(suite)) for suite in suites for case in suite]
        except Exception as exc:  # noqa: BLE001 - a half-written file must not hide the others
            data.unreadable.append(f"{path.name}: {type(exc).__name__}: {exc}")
            continue
        for case, suite_impl in cases:
            try:  # everything read from the case first: a corrupt one is noted, the others still count
                props = _properties(case)
                classname, name, results = case.classname or "", case.name or "", list(case.result)
                seconds = _seconds(case)
            except Exception as exc:  # noqa: BLE001
                data.unreadable.append(f"{path.name}: a test case: {type(exc).__name__}: {exc}")
                continue
            # The shipped checks name their check (dyt.conformance's plugin), wherever they were collected.
            suite = "conformance" if "check" in props else suite_of(classname, name)
            counts = data.counts.setdefault((session, suite), SuiteCounts())
            counts.time_s += seconds
            bad = next((r for r in results if isinstance(r, (JFailure, Error))), None)
            impl = props.get("impl", suite_impl)
            verdict = None
            if suite == "conformance":
                verdict = data.conformance.setdefault((impl, name.split("[")[0]), Verdict())
            own = data.own_suites.setdefault(impl, SuiteCounts()) if verdict is None else None
            if bad is None:
                skip = next((r for r in results if isinstance(r, Skipped)), None)
                if skip is not None:
                    counts.skipped += 1
                    if verdict is not None:
                        verdict.skipped += 1
                        verdict.skip_reason = verdict.skip_reason or (skip.message or "").strip()[:200]
                    else:
                        own.skipped += 1
                else:
                    counts.passed += 1
                    if verdict is not None:
                        verdict.passed += 1
                    else:
                        own.passed += 1
                continue
            kind = "error" if isinstance(bad, Error) else "failure"
            if kind == "error":
                counts.errors += 1
            else:
                counts.failed += 1
            nodeid = nodeid_of(classname, name)
            failure = Failure(
                session=session,
                suite=suite,
                nodeid=nodeid,
                kind=kind,
                message=(bad.message or "").strip().splitlines()[0][:300] if bad.message else "",
                excerpt=_excerpt(bad.text),
                reproduce=props.get("reproduce") or default_reproduce(session, nodeid),
                properties=props,
                impl=impl,
            )
            data.failures.append(failure)
            if verdict is not None:
                verdict.failed += 1
                verdict.first_failure = verdict.first_failure or failure
            else:
                own.failed += 1
    return data


def read_env(path: Path) -> tuple[dict | None, str]:
    """env.json, and what is wrong with it where it exists but cannot be used (empty, truncated, not an
    object); (None, "") where there is none."""
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return None, ""
    except OSError as exc:
        return None, f"cannot read: {exc.strerror or exc}"
    if not text.strip():
        return None, "empty file"
    try:
        env = json.loads(text)
    except ValueError as exc:
        return None, f"truncated or corrupt JSON: {exc}"
    return (env, "") if isinstance(env, dict) else (None, "not a JSON object")


def failure_notes(reports: Path) -> list[tuple[Path, str]]:
    """The failures-*.md files of the folder that record failures, by name, with their text: a session
    without failures writes only its header; unreadable files are passed over."""
    notes = []
    for path in sorted(reports.glob("failures-*.md")):
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        if re.search(r"^## ", text, re.M):  # a session without failures writes only its header
            notes.append((path, text))
    return notes


def _timestamp(perf: dict, path: Path) -> float:
    stamp = (perf.get("env") or {}).get("timestamp_utc")
    try:
        return datetime.datetime.fromisoformat(stamp).timestamp()
    except (TypeError, ValueError):
        return path.stat().st_mtime


def _perf_or_none(path: Path) -> dict | None:
    try:
        return load_perf(path)
    except (OSError, ValueError):
        return None


def unreadable_perf(candidates: list[Path]) -> list[str]:
    """Why each perf file that is not a whole perf report cannot be shown (records.load_perf's words)."""
    problems = []
    for path in candidates:
        try:
            load_perf(path)
        except (OSError, ValueError) as exc:
            problems.append(f"{path.parent.name}/{path.name}: {str(exc).removeprefix(str(path) + ': ')}")
    return problems


def newest_perf(perf_dir: Path) -> tuple[Path | None, dict | None, list[Path]]:
    """The newest perf JSON that is a whole perf report (records.load_perf: a truncated or corrupt one is
    passed over), by its env timestamp, else mtime; and all candidates."""
    candidates = sorted(perf_dir.glob("*.json"))
    loaded = [(p, d) for p in candidates if (d := _perf_or_none(p)) is not None]
    if not loaded:
        return None, None, candidates
    path, data = max(loaded, key=lambda pd: _timestamp(pd[1], pd[0]))
    return path, data, candidates


@dataclass
class Measured:
    """Where a set of results was measured: the GPU model, the commit and the UTC date (as the files say)."""

    gpu: str = "unknown GPU"
    commit: str = "unknown"
    date: str = "date unknown"

    def label(self) -> str:
        """'NVIDIA H200, git 6b69605, measured 2026-12-01T10:19:21+00:00': for the Markdown."""
        return f"{self.gpu}, git {self.commit[:12]}, measured {self.date}"

    def short(self) -> str:
        """'NVIDIA H200, git 6b69605, 2026-12-01': for plot titles."""
        return f"{self.gpu}, git {self.commit[:12]}, {self.date[:10]}"


def measured_kernels(perf: dict) -> Measured:
    """The kernel rows' GPU, commit and time, from the perf JSON's env block."""
    env = perf.get("env") or {}
    return Measured(
        gpu=env.get("gpu_name") or "unknown GPU",
        commit=str(env.get("git_sha") or "unknown"),
        date=env.get("timestamp_utc") or "date unknown",
    )


def measured_models(perf: dict) -> Measured:
    """The model rows' GPU, commit and date: model_config's git_sha and timestamp_utc, else the env
    block's (the model benchmark writes its own when its rows join another run's file)."""
    kernels = measured_kernels(perf)
    config = perf.get("model_config") or {}
    return Measured(
        gpu=kernels.gpu,
        commit=str(config.get("git_sha") or kernels.commit),
        date=config.get("timestamp_utc") or kernels.date,
    )


def finite_float(value) -> float | None:
    """value as a float where it is a finite int or float; None otherwise (missing, NaN, inf, a string)."""
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def row_ok(rec: dict) -> bool:
    """Whether a kernel row was measured: no error and a finite median."""
    return not rec.get("error") and finite_float(rec.get("median_ms")) is not None


def is_bandwidth(rec: dict) -> bool:
    """Whether a kernel row belongs to the bandwidth set (its shape_set, else rows x width = 2^26)."""
    if "shape_set" in rec:
        return rec["shape_set"] == "bandwidth"
    return rec["M"] == BANDWIDTH_ELEMENTS // rec["N"]


def is_small(rec: dict) -> bool:
    """Whether a kernel row belongs to the small-shape set (its shape_set, else bench.SMALL_SHAPES)."""
    if "shape_set" in rec:
        return rec["shape_set"] == "small"
    return (rec["M"], rec["N"]) in SMALL_SHAPES


def providers_in(records: list[dict]) -> list[str]:
    """The kernel rows' providers in PROVIDER_ORDER, unknown ones after it by name."""
    seen = {r["provider"] for r in records}
    return [p for p in PROVIDER_ORDER if p in seen] + sorted(seen - set(PROVIDER_ORDER))


def provider_rank(provider: str) -> int:
    """Where a provider sorts: PROVIDER_ORDER's, others after."""
    return PROVIDER_ORDER.index(provider) if provider in PROVIDER_ORDER else len(PROVIDER_ORDER)


def short_dtype(dtype: str) -> str:
    """'bfloat16' -> 'bf16' (SHORT_DTYPE); other names as they are."""
    return SHORT_DTYPE.get(dtype, dtype)


def model_variants(rows: list[dict]) -> list[str]:
    """The model rows' variants in MODEL_VARIANT_ORDER, unknown ones after it by name."""
    seen = {r.get("variant") for r in rows}
    return [v for v in MODEL_VARIANT_ORDER if v in seen] + sorted(seen - set(MODEL_VARIANT_ORDER) - {None})


def model_cases(rows: list[dict]) -> list[tuple]:
    """(model, batch, mode, compiled) in the order the run measured them."""
    cases: list[tuple] = []
    for r in rows:
        case = (r.get("model"), r.get("batch"), r.get("mode"), bool(r.get("compiled")))
        if case not in cases:
            cases.append(case)
    return cases


@dataclass
class Baseline:
    """A committed baseline: baselines/<gpu>.json, a perf JSON of one GPU model."""

    path: Path
    perf: dict


@dataclass
class CommittedVerdict:
    """A committed conformance verdict: conformance/<gpu>/junit/*.xml read as a run's, and where it ran."""

    folder: Path
    junit: JunitData
    measured: Measured

    def page(self) -> Path:
        """What a reader opens: the verdict's summary.md, else its folder."""
        summary = self.folder / "summary.md"
        return summary if summary.is_file() else self.folder


def load_baselines(baselines_dir: Path) -> list[Baseline]:
    """Every readable perf JSON under baselines/, by file name; none when the folder is absent."""
    found = []
    for path in sorted(baselines_dir.glob("*.json")):
        try:
            found.append(Baseline(path, load_perf(path)))
        except (OSError, ValueError):
            continue
    return found


def baseline_of(baselines: list[Baseline], gpu_name: str | None) -> Baseline | None:
    """The baseline of a GPU model: the one named baselines/<gpu slug>.json, as the gate finds it."""
    if not gpu_name:
        return None
    return next((b for b in baselines if b.path == baseline_path(b.path.parent, gpu_name)), None)


_DEVICE = re.compile(r"^cuda:\d+ (?P<gpu>.+?)(?: \(CUDA_VISIBLE_DEVICES=[^)]*\))?$")


_SUMMARY_ROW = re.compile(r"^\| (?P<field>git_sha|gpu_name|timestamp_utc) \| (?P<value>[^|]+?) \|$", re.M)


def junit_measured(folder: Path) -> Measured:
    """GPU, commit and date of a committed verdict: from its JUnit files (the `gpu_name`, `device` and
    `git_sha` properties, the earliest test suite timestamp), then from the summary.md beside them (its
    environment table), then the GPU from the folder's name."""
    found: dict[str, str] = {}
    stamps = []
    for path in sorted((folder / "junit").glob("*.xml")):
        try:
            root = ET.parse(path).getroot()
        except (OSError, ET.ParseError):
            continue
        for elem in root.iter():
            if elem.tag == "testsuite" and elem.get("timestamp"):
                stamps.append(elem.get("timestamp"))
            elif elem.tag == "property" and elem.get("name") in ("git_sha", "gpu_name") and elem.get("value"):
                found.setdefault(elem.get("name"), elem.get("value"))
            elif elem.tag == "property" and elem.get("name") == "device":
                match = _DEVICE.match(elem.get("value") or "")
                if match:
                    found.setdefault("gpu_name", match["gpu"])
    if stamps:
        found["timestamp_utc"] = _iso_seconds(min(stamps))
    try:
        summary = (folder / "summary.md").read_text(errors="replace")
    except OSError:
        summary = ""
    for match in _SUMMARY_ROW.finditer(summary):
        if match["value"] not in ("None", ""):
            found.setdefault(match["field"], match["value"])
    return Measured(
        gpu=found.get("gpu_name") or folder.name,
        commit=found.get("git_sha") or "unknown",
        date=found.get("timestamp_utc") or "date unknown",
    )


def _iso_seconds(stamp: str) -> str:
    """An ISO time to the second ('2026-12-01T14:05:09.70+00:00' -> '2026-12-01T14:05:09+00:00')."""
    try:
        return datetime.datetime.fromisoformat(stamp).isoformat(timespec="seconds")
    except ValueError:
        return stamp


def load_verdicts(conformance_dir: Path) -> list[CommittedVerdict]:
    """Every conformance/<gpu>/ folder that holds JUnit files, by name; none when the folder is absent."""
    verdicts = []
    for folder in sorted(p for p in conformance_dir.glob("*") if p.is_dir()):
        junit = load_junit(folder / "junit")
        if junit.files:
            verdicts.append(CommittedVerdict(folder, junit, junit_measured(folder)))
    return verdicts
