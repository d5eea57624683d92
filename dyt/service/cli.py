"""The command line of `python -m dyt` (and the `dyt` script): bench, report, gate, tune, native, env, and
--version.

Each subcommand imports what it needs when it runs: report must work without triton and gate without
torch, on a machine that only holds the result files.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys

# What `python -m dyt report` imports from the report extra (pyproject.toml's [report]).
REPORT_MODULES = ("junitparser", "matplotlib", "markdown")
COMMANDS = ("bench", "report", "gate", "tune", "conformance", "native", "env")
DESCRIPTION = f"DyT kernels and their test-suite service: {', '.join(COMMANDS)}."


def _missing(modules: tuple[str, ...]) -> list[str]:
    missing = []
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    return missing


def _parser() -> argparse.ArgumentParser:
    import dyt

    parser = argparse.ArgumentParser(prog="dyt", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"%(prog)s {dyt.__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    from dyt.service import bench, report

    bench_parser = sub.add_parser(
        "bench",
        help="measure dyt beside its peers against the copy ceiling (needs CUDA)",
        description="Exit 0 measured and written; 1 with --compare on a regression; 2 on bad arguments or "
        "no CUDA; 3 stopped early (SIGTERM, Ctrl-C, --time-limit), the rows finished written; 74 when the "
        "perf JSON cannot be written (full disk, read-only), the rows saved in the temporary folder the "
        "message names.",
    )
    bench.add_arguments(bench_parser)
    report_parser = sub.add_parser(
        "report",
        help="turn a reports folder into summary.md/.html and plots",
        description="Exit 0 with summary.md's path; 2 without the report extra; 74 when the folder cannot "
        "be written (full disk, read-only), the files there untouched. Unreadable inputs (truncated JUnit, "
        "perf JSON or env.json) are named in the summary, not fatal.",
    )
    report.add_arguments(report_parser)

    gate = sub.add_parser(
        "gate",
        help="compare a perf JSON with a baseline (file-only, no GPU)",
        description="Exit 1 when a dyt row's ratio to ceiling drops more than --margin below the baseline; "
        "2 on unreadable input (missing, empty, truncated or corrupt: one line names the file); 3 with "
        "--strict when the GPU models differ or no rows match.",
    )
    gate.add_argument("current", help="perf JSON of this run")
    gate.add_argument("baseline", help="perf JSON of the baseline (same GPU model)")
    gate.add_argument("--margin", type=float, default=0.05, help="allowed absolute drop in ratio to ceiling")
    gate.add_argument("--strict", action="store_true", help="a different GPU model or no common rows fails")
    gate.add_argument("--model-margin", type=float, default=0.10,
                      help="allowed absolute drop in a model row's dyt speedup")  # fmt: skip

    sub.add_parser("tune", help="the launch-config tuner (dyt.tune); arguments pass through", add_help=False)
    sub.add_parser("conformance", help="the contract's checks on any DyT implementation, and the merge "
                   "of runners' verdicts (dyt.conformance.runner); arguments pass through",
                   add_help=False)  # fmt: skip

    native = sub.add_parser("native", help="build the native host path ahead of the first CUDA call, or say "
                            "where it stands")  # fmt: skip
    native.add_argument("action", choices=("build", "status"))

    env = sub.add_parser("env", help="print the environment manifest as JSON")
    env.add_argument("--out", help="also write it to this file")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "tune":  # the tuner owns its own arguments
        try:
            from dyt.service import tune
        except ImportError as exc:
            print(f"tune: the tuner is not available ({exc})", file=sys.stderr)
            return 2
        return int(tune.main(argv[1:]) or 0)
    if argv and argv[0] == "conformance":  # the runner owns its own arguments
        from dyt.conformance import runner

        return runner.main(argv[1:])
    args = _parser().parse_args(argv)
    if args.command == "bench":  # the suite's own module runs it: kernels (bench), models, fp8
        suite = getattr(args, "suite", "kernels")
        if suite == "models":
            from dyt.service import model_bench

            return model_bench.main(args)
        if suite == "fp8":
            from dyt.service import fp8_bench

            return fp8_bench.main(args)
        from dyt.service import bench

        return bench.main(args)
    if args.command == "report":
        missing = _missing(REPORT_MODULES)
        if missing:
            print(f"python -m dyt report needs the report extra (missing: {', '.join(missing)}): "
                  "pip install 'dyt-kernels[report]', or pip install -e '.[report]' in a checkout",
                  file=sys.stderr)  # fmt: skip
            return 2
        from dyt.service import report

        return report.main(args)
    if args.command == "gate":
        from dyt.service.gate import gate_files

        return gate_files(args.current, args.baseline, margin=args.margin, strict=args.strict,
                          model_margin=args.model_margin)  # fmt: skip
    if args.command == "native":
        from dyt import native

        if args.action == "build":
            try:
                print(native.build(verbose=True))
            except Exception as exc:  # noqa: BLE001 - the build's own message says why
                print(f"native build failed: {type(exc).__name__}: {exc}", file=sys.stderr)
                return 1
            return 0
        library = native.build_directory() / "dyt_native.so"
        built = "built" if library.exists() else "not built yet (the first CUDA call builds it)"
        print(f"{library}: {built}; DYT_NATIVE={'on' if native.enabled_by_env() else 'off'}")
        return 0
    if args.command == "env":
        from dyt.service.env import collect_env, write_env

        manifest = write_env(args.out) if args.out else collect_env()
        print(json.dumps(manifest, indent=2, sort_keys=True))
        return 0
    raise AssertionError(f"unhandled command {args.command}")


if __name__ == "__main__":
    sys.exit(main())
