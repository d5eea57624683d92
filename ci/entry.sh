#!/usr/bin/env bash
# The one entry point that the GPU workflow, the container and people all call.
#
#   ci/entry.sh [pytest args...]        e.g.  ci/entry.sh -m grid_limit
#
# Runs, writing everything under reports/ (or $DYT_REPORTS):
#   1. the GPU matrix:  python -m dyt.service.gpu_matrix [pytest args]   -> junit/gpu_tests.xml, env.json, failures
#      (DYT_MATRIX=interpreter: the same suites in Triton's CPU interpreter, as `nox -s tests`, -> junit/tests.xml)
#   2. the bench:       python -m dyt bench [--compare <baseline for this GPU> --margin $DYT_MARGIN]
#   3. the report:      python -m dyt report --reports <reports>  -> summary.md, summary.html
#   and, when $GITHUB_STEP_SUMMARY is set, appends summary.md there (truncated to stay under 1 MiB).
#
# Exit code: the GPU matrix's; 2 when no GPU is visible (nothing runs) or reports/ is not writable. Bench
# and report failures are reported but do not change it, except a failed regression gate (bench run with
# --compare), which is an error unless DYT_GATE=warn, and so is a gate that could not run: a bench stopped
# early (exit 3) writes the rows it finished, marked "incomplete", and the report says so. When the
# baseline was measured with another torch, Triton or CUDA than this run's, the gate says so.
#
# SIGTERM or SIGINT (a time limit's `timeout`, `docker stop`, an Actions cancel through `docker run`'s
# signal proxy, Ctrl-C) reaches this script first, also as the container's PID 1: it passes SIGTERM on to
# the step that is running (its process group), waits for it to write what it has (pytest the JUnit XML of
# the tests that finished, the bench its rows so far), skips the bench, still writes the report, and
# exits non-zero. `docker stop` waits 10 s by default: give it more (--time 60, or --stop-timeout on run).
#
# Environment:
#   DYT_REPORTS       where reports go (default: <repo>/reports)
#   DYT_PYTHON        the interpreter (default: python, else python3); needs torch with CUDA
#   DYT_PYTEST_ARGS   pytest args as one string, used only when no arguments are given (workflow input)
#   DYT_SKIP_BENCH=1  skip the bench (a note says so)
#   DYT_GATE=warn     a failed regression gate is a warning, not an error
#   DYT_MARGIN        the gate's margin (default 0.05)
#   DYT_BENCH_ARGS    bench selection as one string (e.g. "--shapes bandwidth,small --modes fwd,bwd --graph")
#   DYT_BASELINES     another folder of baselines, searched after <reports>/baselines (the image sets it)
#   DYT_MATRIX        gpu (default) or interpreter (the CPU interpreter matrix; no bench)
#   DYT_CPU_WORKERS   xdist workers of the interpreter matrix (default auto)
#
# Works in the container and on any GPU box with torch+CUDA in the current python; no nox needed.
set -Eeuo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

REPORTS="${DYT_REPORTS:-$ROOT/reports}"
export DYT_REPORTS="$REPORTS"
MARGIN="${DYT_MARGIN:-0.05}"
MATRIX="${DYT_MATRIX:-gpu}"
SUMMARY_LIMIT=1000000 # bytes; GitHub refuses a step summary over 1 MiB

if [[ -n "${DYT_PYTHON:-}" ]]; then
  PYTHON="$DYT_PYTHON"
elif command -v python >/dev/null 2>&1; then
  PYTHON=python
else
  PYTHON=python3
fi

in_actions() { [[ "${GITHUB_ACTIONS:-}" == "true" ]]; }

step() { printf '\n==> [ci/entry.sh] %s\n' "$*"; }
note() { printf '    [ci/entry.sh] %s\n' "$*"; }
warn() {
  if in_actions; then printf '::warning title=ci/entry.sh::%s\n' "$*"; else printf 'WARNING: %s\n' "$*" >&2; fi
}
error() {
  if in_actions; then printf '::error title=ci/entry.sh::%s\n' "$*"; else printf 'ERROR: %s\n' "$*" >&2; fi
}
quoted() { printf '%q ' "$@"; }

# Each step runs in the background in its own process group, so that a signal reaches this script at once
# (bash runs a trap only between commands, and `wait` returns early for it); on_signal passes SIGTERM on to
# the whole group of the running step (pytest's xdist workers, the bench) and run_step waits for its end.
stopped=""
step_pid=""
# shellcheck disable=SC2329  # invoked by the traps below
on_signal() {
  if [[ -z "$stopped" ]]; then
    stopped="$1"
    if [[ -n "$step_pid" ]]; then kill -TERM -- "-$step_pid" 2>/dev/null || kill -TERM "$step_pid" 2>/dev/null || true; fi
  fi
}
trap 'on_signal SIGTERM' TERM
trap 'on_signal SIGINT' INT

# run_step CMD...: runs CMD as its own process group and returns its exit code, through signals.
run_step() {
  local rc=0
  set -m
  "$@" &
  step_pid=$!
  set +m
  while true; do
    rc=0
    wait "$step_pid" || rc=$?
    if ! kill -0 "$step_pid" 2>/dev/null; then break; fi
  done
  step_pid=""
  return "$rc"
}

# pytest args: the command line, else DYT_PYTEST_ARGS split on whitespace (a workflow_dispatch input).
args=("$@")
if [[ ${#args[@]} -eq 0 && -n "${DYT_PYTEST_ARGS:-}" ]]; then
  read -r -a args <<<"$DYT_PYTEST_ARGS"
fi

step "reports go to $REPORTS"
if ! mkdir -p "$REPORTS/junit" "$REPORTS/perf" 2>/dev/null || ! touch "$REPORTS/.entry-write-test" 2>/dev/null; then
  error "cannot write to $REPORTS as uid $(id -u): give the container your uid" \
    "(docker run --user \"\$(id -u):\$(id -g)\" ...) or make the folder writable"
  exit 2
fi
rm -f "$REPORTS/.entry-write-test"

case "$MATRIX" in
  gpu | interpreter) ;;
  *)
    error "DYT_MATRIX=$MATRIX: expected gpu or interpreter"
    exit 2
    ;;
esac
if [[ "$MATRIX" == "gpu" ]]; then
  gpus="$("$PYTHON" -c 'import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)' 2>/dev/null || echo 0)"
  if [[ "$gpus" == "0" || -z "$gpus" ]]; then
    error "no CUDA GPU is visible (torch.cuda.is_available() is False): in a container, run it with" \
      "--gpus all (the NVIDIA container toolkit); without a GPU, DYT_MATRIX=interpreter runs the suites" \
      "in Triton's CPU interpreter"
    exit 2
  fi
fi

# 1. The matrix. Its exit code is this script's exit code.
if [[ "$MATRIX" == "interpreter" ]]; then
  session=tests
  matrix_cmd=(env DYT_SESSION=tests TRITON_INTERPRET=1 "$PYTHON" -m pytest "--junitxml=$REPORTS/junit/tests.xml"
    -o junit_suite_name=tests -n "${DYT_CPU_WORKERS:-auto}" --dist worksteal ${args[@]+"${args[@]}"})
  step "1/3 interpreter matrix (DYT_MATRIX=interpreter): $(quoted "${matrix_cmd[@]}")"
else
  session=gpu_tests
  matrix_cmd=(env DYT_SESSION=gpu_tests TRITON_INTERPRET=0 "$PYTHON" -m dyt.service.gpu_matrix ${args[@]+"${args[@]}"})
  step "1/3 GPU matrix: $PYTHON -m dyt.service.gpu_matrix $(quoted ${args[@]+"${args[@]}"})"
fi
matrix_rc=0
run_step "${matrix_cmd[@]}" || matrix_rc=$?
if [[ $matrix_rc -eq 0 ]]; then
  note "matrix passed"
else
  error "matrix failed (exit $matrix_rc); see $REPORTS/failures-$session.md and $REPORTS/junit/$session.xml"
fi

# 2. The bench, gated against a committed baseline of this GPU when there is one.
gate_failed=0
gate_rc=0
if [[ "${DYT_SKIP_BENCH:-0}" == "1" ]]; then
  step "2/3 bench: skipped (DYT_SKIP_BENCH=1)"
elif [[ -n "$stopped" ]]; then
  step "2/3 bench: skipped (stopped by $stopped during the matrix)"
elif [[ "$MATRIX" == "interpreter" ]]; then
  step "2/3 bench: skipped (DYT_MATRIX=interpreter: the bench measures a GPU)"
else
  gpu_name="$("$PYTHON" -c 'import torch; print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")' 2>/dev/null || true)"
  baseline=""
  if [[ -n "$gpu_name" ]]; then
    # The one current baseline of this GPU model: <baselines>/<gpu slug>.json (dyt.service.records).
    baseline="$("$PYTHON" - "$gpu_name" "$REPORTS/baselines" "${DYT_BASELINES:-}" <<'PY' || true
import sys

from dyt.service.records import baseline_path

for folder in filter(None, sys.argv[2:]):
    path = baseline_path(folder, sys.argv[1].strip())
    if path.is_file():
        print(path)
        break
PY
)"
  fi
  read -r -a bench_selection <<< "${DYT_BENCH_ARGS:-}"
  bench_cmd=("$PYTHON" -m dyt bench "${bench_selection[@]}")
  if [[ -n "$baseline" ]]; then
    bench_cmd+=(--compare "$baseline" --margin "$MARGIN")
    step "2/3 bench with regression gate against $baseline (margin $MARGIN): $(quoted "${bench_cmd[@]}")"
    # The gate compares this run with a baseline measured with some toolchain: say when it is another one.
    toolchain="$("$PYTHON" - "$baseline" <<'PY' || true
import importlib.metadata as md
import importlib.util
import json
import pathlib
import re
import sys


def version(name):
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


def torch_cuda():
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    text = (pathlib.Path(next(iter(spec.submodule_search_locations))) / "version.py").read_text()
    match = re.search(r"^cuda\s*[:=].*?['\"]([\d.]+)['\"]", text, re.M)
    return match.group(1) if match else None


base = json.loads(pathlib.Path(sys.argv[1]).read_text()).get("env", {})
here = {"torch": version("torch"), "triton": version("triton"), "cuda": torch_cuda()}
if not any(base.get(k) for k in here):
    print("the baseline records no toolchain (torch, triton, CUDA): the gate cannot tell whether it matches")
elif any(base.get(k) != v for k, v in here.items()):
    def show(env):
        return ", ".join(f"{k} {env.get(k) or '?'}" for k in here)

    print(f"the baseline was measured with {show(base)}; this run has {show(here)}:"
          " the gate compares different toolchains")
PY
)"
    if [[ -n "$toolchain" ]]; then
      warn "$toolchain"
      if [[ -n "${GITHUB_STEP_SUMMARY:-}" ]]; then
        printf '> **Regression gate:** %s.\n\n' "$toolchain" >>"$GITHUB_STEP_SUMMARY"
      fi
    fi
  else
    step "2/3 bench: $(quoted "${bench_cmd[@]}")"
    note "no baseline in $REPORTS/baselines${DYT_BASELINES:+ or $DYT_BASELINES} for GPU '${gpu_name:-none visible}': no regression gate"
  fi
  bench_rc=0
  run_step "${bench_cmd[@]}" || bench_rc=$?
  if [[ $bench_rc -eq 3 ]]; then  # dyt.service.run_control.STOPPED: SIGTERM or Ctrl-C; the rows so far are written
    what="bench stopped early (exit 3): its rows so far are in $REPORTS/perf/ (\"incomplete\")"
    if [[ -n "$baseline" ]]; then
      gate_failed=1
      gate_rc=$bench_rc
      if [[ "${DYT_GATE:-error}" == "warn" ]]; then
        warn "$what; the regression gate against $baseline did not run; DYT_GATE=warn keeps it a warning"
      else
        error "$what; the regression gate against $baseline did not run (set DYT_GATE=warn to only warn)"
      fi
    else
      warn "$what; the exit code stays the GPU matrix's"
    fi
  elif [[ $bench_rc -ne 0 && -n "$baseline" ]]; then
    gate_failed=1
    gate_rc=$bench_rc
    if [[ "${DYT_GATE:-error}" == "warn" ]]; then
      warn "bench regression gate failed (exit $bench_rc) against $baseline; DYT_GATE=warn keeps it a warning"
    else
      error "bench regression gate failed (exit $bench_rc) against $baseline (set DYT_GATE=warn to only warn)"
    fi
  elif [[ $bench_rc -ne 0 ]]; then
    warn "bench failed (exit $bench_rc); the exit code stays the GPU matrix's"
  else
    note "bench done: $REPORTS/perf/"
  fi
fi

# 3. The report: summary.md and summary.html.
step "3/3 report: $PYTHON -m dyt report --reports $REPORTS"
report_rc=0
"$PYTHON" -m dyt report --reports "$REPORTS" </dev/null || report_rc=$?
if [[ $report_rc -ne 0 ]]; then
  warn "report failed (exit $report_rc); the exit code stays the GPU matrix's"
fi

if [[ -n "${GITHUB_STEP_SUMMARY:-}" ]]; then
  step "job summary: $REPORTS/summary.md -> \$GITHUB_STEP_SUMMARY"
  if [[ -f "$REPORTS/summary.md" ]]; then
    size=$(wc -c <"$REPORTS/summary.md")
    head -c "$SUMMARY_LIMIT" "$REPORTS/summary.md" >>"$GITHUB_STEP_SUMMARY"
    if [[ $size -gt $SUMMARY_LIMIT ]]; then
      printf '\n\n_Summary truncated at %s of %s bytes: the whole summary is in the reports artifact._\n' \
        "$SUMMARY_LIMIT" "$size" >>"$GITHUB_STEP_SUMMARY"
    fi
  else
    printf '## DyT GPU matrix\n\nNo summary.md was written (report exit %s); matrix exit %s.\n' \
      "$report_rc" "$matrix_rc" >>"$GITHUB_STEP_SUMMARY"
  fi
fi

rc=$matrix_rc
if [[ $rc -eq 0 && $gate_failed -eq 1 && "${DYT_GATE:-error}" != "warn" ]]; then
  rc=$gate_rc
fi
if [[ -n "$stopped" ]]; then
  error "stopped by $stopped (a time limit, docker stop or a cancel): the reports hold what finished before it"
  if [[ $rc -eq 0 ]]; then rc=143; fi
fi
step "done: matrix exit $matrix_rc, exit $rc (reports in $REPORTS)"
exit "$rc"
