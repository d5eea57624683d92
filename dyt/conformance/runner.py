"""`python -m dyt conformance`: the checks on one implementation, and the merge of several runners' verdicts.

    python -m dyt conformance --impl NAME [--out DIR] [--params ROLE=NAME,...] [--unsupported CAP,...]
                              [--select TEST]... [--seed N] [--workers N] [--summary FILE] [-- PYTEST ARGS]
    python -m dyt conformance merge DIR [DIR ...] --out OUT [--summary FILE]
    python -m dyt conformance publish [--impls dyt,eager,paper,compile,liger] [--out reports/conformance]

The first runs pytest with the plugin over the installed checks (`-p dyt.conformance --pyargs
dyt.conformance.checks`) in a child process whose configuration is its own (an empty pytest.ini in DIR:
the caller's project's conftest and addopts do not apply), and writes to DIR (default
reports/conformance-<impl>): junit.xml and dyt.conformance.verdict's files. Where no CUDA GPU is visible and
TRITON_INTERPRET is unset, the child runs Triton kernels in Triton's CPU interpreter (TRITON_INTERPRET=1).
Exit code: pytest's (0 every case passed or was not supported; 1 a check failed; 2-5 the run itself failed).

The second writes OUT/summary.md and summary.html: one table per GPU model from the verdict.json files
under the DIRs (exit 2 where there is none). --summary FILE appends the verdict (the merged table) to FILE:
GitHub's job summary ($GITHUB_STEP_SUMMARY) in the composite action and the reusable workflow.

The third refreshes the committed verdicts of this machine's GPU model (or CPU): each implementation run
in turn (one whose library does not import here is left out, and said so), then
reports/conformance/<gpu>/summary.md, junit/<impl>.xml and verdicts/<impl>.json (verdict.publish).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import pathlib
import re
import subprocess
import sys


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m dyt conformance", description=__doc__.split("\n\n")[0])
    parser.add_argument("--impl", required=True, help="dyt, eager, paper, liger, liger_module, "
                        "compile[:NAME], or module:attr (a function, an autograd.Function or an nn.Module "
                        "class)")  # fmt: skip
    parser.add_argument(
        "--out", help="folder for junit.xml and the verdict (default reports/conformance-<impl>)"
    )
    parser.add_argument(
        "--params", help="an nn.Module's parameter names by role: alpha=...,gamma=...,beta=..."
    )
    parser.add_argument("--unsupported", help="capabilities it does not support, comma-separated")
    parser.add_argument(
        "--select", action="append", default=[], help="run only this check (test name); repeatable"
    )
    parser.add_argument("--seed", type=int, help="the run's seed (DYT_SEED; default: fresh)")
    parser.add_argument("--workers", help="pytest-xdist workers (-n), where pytest-xdist is installed")
    parser.add_argument("--timeout", type=int, default=900, help="seconds a check may take (pytest-timeout)")
    parser.add_argument("--summary", help="append verdict.md to this file (e.g. $GITHUB_STEP_SUMMARY)")
    parser.add_argument("pytest_args", nargs=argparse.REMAINDER, help="after --: passed to pytest")
    return parser


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.]+", "_", name)


def _has(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _gpu_visible() -> bool:
    import torch

    return torch.cuda.is_available()


def command(args: argparse.Namespace, out: pathlib.Path) -> list[str]:
    """The child pytest's command line."""
    cmd = [sys.executable, "-m", "pytest", "-c", str(out / "pytest.ini"), "--rootdir", str(out),
           "-p", "no:cacheprovider", "-p", "dyt.conformance", "--pyargs", "dyt.conformance.checks",
           "--dyt-impl", args.impl, "--dyt-out", str(out), f"--junitxml={out / 'junit.xml'}",
           "-o", f"junit_suite_name=conformance-{_slug(args.impl)}", "-q", "-rfE"]  # fmt: skip
    for option, value in (("--dyt-params", args.params), ("--dyt-unsupported", args.unsupported)):
        if value:
            cmd += [option, value]
    for name in args.select:
        cmd += ["--dyt-select", name]
    if args.workers and _has("xdist"):
        cmd += ["-n", str(args.workers)]  # pytest-xdist and pytest-timeout load as installed plugins
    if _has("pytest_timeout"):
        cmd += ["--timeout", str(args.timeout), "--timeout-method", "thread"]
    rest = args.pytest_args[1:] if args.pytest_args[:1] == ["--"] else args.pytest_args
    return cmd + rest


def run(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    out = pathlib.Path(args.out or f"reports/conformance-{_slug(args.impl)}").resolve()
    out.mkdir(parents=True, exist_ok=True)
    # This run's own configuration, none of the caller's; xunit1: each case's properties in the JUnit XML.
    (out / "pytest.ini").write_text("[pytest]\njunit_family = xunit1\n")
    env = dict(os.environ)
    if args.seed is not None:
        env["DYT_SEED"] = str(args.seed)
    if "TRITON_INTERPRET" not in env and _has("triton") and not _gpu_visible():
        env["TRITON_INTERPRET"] = "1"
    cmd = command(args, out)
    print(f"dyt conformance: {args.impl} -> {out}", flush=True)
    code = subprocess.call(cmd, cwd=out, env=env)
    verdict = out / "verdict.md"
    if verdict.exists():
        print(f"dyt conformance: verdict {verdict} (exit {code})")
        _append(args.summary, verdict)
    return code


def _append(summary: str | None, page: pathlib.Path) -> None:
    if summary:
        with open(summary, "a") as f:
            f.write(page.read_text() + "\n")


def merge(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m dyt conformance merge")
    parser.add_argument("folders", nargs="+", help="runners' output folders (their verdict.json files)")
    parser.add_argument("--out", required=True, help="where summary.md and the runners' files go")
    parser.add_argument("--summary", help="append summary.md to this file (e.g. $GITHUB_STEP_SUMMARY)")
    args = parser.parse_args(argv)
    from dyt.conformance import verdict

    try:
        path = verdict.merge(args.folders, args.out)
    except ValueError as exc:
        print(f"dyt conformance merge: {exc}", file=sys.stderr)
        return 2
    print(f"dyt conformance merge: {path}")
    _append(args.summary, path)
    return 0


PUBLISHED = ("dyt", "eager", "paper", "compile", "liger")


def publish(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m dyt conformance publish")
    parser.add_argument("--impls", default=",".join(PUBLISHED), help="comma-separated implementation names")
    parser.add_argument("--out", default="reports/conformance", help="the committed verdicts' folder")
    parser.add_argument("--seed", type=int, help="the runs' seed (DYT_SEED; default: fresh)")
    args = parser.parse_args(argv)
    import tempfile

    from dyt.conformance import implementations, verdict

    runs = []
    with tempfile.TemporaryDirectory(prefix="dyt-conformance-") as scratch:
        for name in filter(None, args.impls.split(",")):
            try:
                implementations.resolve(name)
            except implementations.ImplementationError as exc:
                print(f"dyt conformance publish: {name} left out: {exc}", file=sys.stderr)
                continue
            folder = pathlib.Path(scratch) / _slug(name)
            code = run(["--impl", name, "--out", str(folder),
                        *(["--seed", str(args.seed)] if args.seed is not None else [])])  # fmt: skip
            if code not in (0, 1):
                print(f"dyt conformance publish: {name}: the run failed (exit {code})", file=sys.stderr)
                return code
            runs += verdict.read_runs([folder])
        if not runs:
            print("dyt conformance publish: no implementation ran", file=sys.stderr)
            return 2
        for path in verdict.publish(runs, args.out):
            print(f"dyt conformance publish: {path}")
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["merge"]:
        return merge(argv[1:])
    if argv[:1] == ["publish"]:
        return publish(argv[1:])
    return run(argv)
