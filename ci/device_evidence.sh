#!/usr/bin/env bash
# The GPU evidence of a commit, on a GPU machine without nox or network, in steps that fit separate calls:
#
#   DYT_GIT_SHA=<sha7> DYT_STEPS=matrix bash ci/device_evidence.sh
#   DYT_GIT_SHA=<sha7> DYT_STEPS=bench DYT_BENCH_ARGS="--shapes bandwidth ..." bash ci/device_evidence.sh
#   DYT_GIT_SHA=<sha7> DYT_STEPS=bench,models DYT_BENCH_ARGS="--shapes small,model,mixed --append ..." ...
#
# Steps (DYT_STEPS, default matrix,bench,models): matrix = the GPU matrix on every visible GPU through
# ci/entry.sh (one xdist worker each); conformance = tests/test_conformance.py for each implementation in
# DYT_IMPLS (default eager,compile,liger; not a default step), on DYT_CONFORMANCE_WORKERS xdist workers
# (default one per GPU; Liger-Kernel compiles per shape, ~11 s a test); bench = `python -m dyt bench
# $DYT_BENCH_ARGS`, gated against reports/baselines/<gpu>.json; models = `python -m dyt bench --suite
# models $DYT_MODELS_ARGS`. The report follows, and reports/ is tarred into $OUT/reports.tgz. Wheels in
# .whl/ (junitparser, liger-kernel) are installed first. DYT_TUNE=1 first rewrites dyt/tables/sm90.json
# with `python -m dyt tune` on GPU 0. Time limits: DYT_MATRIX_S, DYT_CONFORMANCE_S (each
# implementation), DYT_BENCH_S, DYT_MODELS_S, DYT_TUNE_S (a bench or model run stopped by one keeps its
# rows).
set -uo pipefail
OUT="${OUT:-/tmp/out}"
mkdir -p "$OUT" reports/perf
if compgen -G ".whl/*.whl" >/dev/null; then
  pip install -q --no-deps --target /tmp/site .whl/*.whl 2>&1 | grep -v WARNING
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 MPLBACKEND=Agg
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.mem --format=csv >reports/gpu.txt

if [ "${DYT_TUNE:-0}" = 1 ]; then
  start=$SECONDS
  CUDA_VISIBLE_DEVICES=0 timeout "${DYT_TUNE_S:-300}" python3 -m dyt tune \
    --budget-s "$((${DYT_TUNE_S:-300} - 30))" >reports/tune.log 2>&1
  echo "tune rc=$? in $((SECONDS - start)) s"
  cp dyt/tables/sm90.json reports/
fi

has_step() { [[ ",${DYT_STEPS:-matrix,bench,models}," == *",$1,"* ]]; }

if has_step matrix; then
  start=$SECONDS
  DYT_SKIP_BENCH=1 timeout "${DYT_MATRIX_S:-300}" bash ci/entry.sh -q --durations=20 >reports/entry.log 2>&1
  echo "matrix (ci/entry.sh) rc=$? in $((SECONDS - start)) s"
  grep -E "passed|failed" reports/entry.log | tail -n 2
  grep -E "^FAILED" reports/entry.log | head -n 20
fi

if has_step conformance; then
  # The conformance suite for each implementation in DYT_IMPLS (its verdict, one JUnit file each; dyt's
  # own run is the matrix step's).
  IFS=, read -r -a impls <<<"${DYT_IMPLS:-eager,compile,liger}"
  for impl in "${impls[@]}"; do
    start=$SECONDS
    DYT_SESSION=gpu_tests DYT_REPORTS="$PWD/reports" timeout "${DYT_CONFORMANCE_S:-240}" \
      python3 -m dyt.service.gpu_matrix tests/test_conformance.py --impl "$impl" -q \
      ${DYT_CONFORMANCE_WORKERS:+-n "$DYT_CONFORMANCE_WORKERS"} \
      --junitxml="reports/junit/gpu_tests-${impl//[^A-Za-z0-9_.]/_}.xml" \
      >"reports/conformance-${impl//[^A-Za-z0-9_.]/_}.log" 2>&1
    echo "conformance --impl $impl rc=$? in $((SECONDS - start)) s"
    tail -n 1 "reports/conformance-${impl//[^A-Za-z0-9_.]/_}.log"
  done
fi

if has_step bench; then
  default_bench="--providers dyt,eager,compile,liger --shapes bandwidth,small,model,mixed --dtypes bf16,fp32 --modes fwd,bwd"
  read -r -a bench_args <<<"${DYT_BENCH_ARGS:-$default_bench}"
  gpu="$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)"
  baseline="$(python3 -c 'import sys; from dyt.service.records import baseline_path; print(baseline_path(sys.argv[1], sys.argv[2]))' reports/baselines "$gpu")"
  [ -f "$baseline" ] && bench_args+=(--compare "$baseline")
  start=$SECONDS
  timeout "${DYT_BENCH_S:-330}" python3 -m dyt bench "${bench_args[@]}" >reports/bench.log 2>&1
  echo "bench rc=$? in $((SECONDS - start)) s: python -m dyt bench ${bench_args[*]}"
  tr '\r' '\n' <reports/bench.log | grep -v '^bench:' | grep -v "^REGRESSION" | tail -n 4
  grep -E "^(REGRESSION|FAIL|OK)" reports/bench.log | head -n 20
fi

if has_step models; then
  read -r -a model_args <<<"${DYT_MODELS_ARGS:-}"
  start=$SECONDS
  timeout "${DYT_MODELS_S:-450}" python3 -m dyt bench --suite models "${model_args[@]}" >reports/models.log 2>&1
  echo "models rc=$? in $((SECONDS - start)) s: python -m dyt bench --suite models ${model_args[*]}"
  tr '\r' '\n' <reports/models.log | grep -vE '^(bench|models):' | tail -n 40
fi

python3 -m dyt report --reports reports >reports/report.log 2>&1
echo "report rc=$?"
tar czf "$OUT/reports.tgz" reports
ls -la "$OUT"
