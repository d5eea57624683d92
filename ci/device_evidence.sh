#!/usr/bin/env bash
# The GPU evidence of a commit in one command, on a GPU machine without nox or network: the GPU matrix on
# every visible GPU through ci/entry.sh (one xdist worker each), then the bench alone on GPU 0, then the
# report; everything tarred into $OUT/reports.tgz.
#
#   DYT_GIT_SHA=<sha7> bash ci/device_evidence.sh          (wheels of junitparser, liger-kernel in .whl/)
#
# Environment: DYT_TUNE=1 first rewrites dyt/tables/sm90.json with `python -m dyt tune` on GPU 0;
# DYT_BENCH_ARGS replaces the bench selection; DYT_MATRIX_S / DYT_BENCH_S / DYT_TUNE_S are time limits;
# DYT_MATRIX_GPUS runs the matrix on those GPUs beside the bench (see below); DYT_SKIP_MATRIX=1 runs the
# bench alone.
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

matrix() {
  local start=$SECONDS
  DYT_SKIP_BENCH=1 timeout "${DYT_MATRIX_S:-300}" bash ci/entry.sh -q --durations=20 >reports/entry.log 2>&1
  echo "matrix (ci/entry.sh) rc=$? in $((SECONDS - start)) s"
  grep -E "passed|failed" reports/entry.log | tail -n 2
  grep -E "^FAILED" reports/entry.log | head -n 20
}

# DYT_MATRIX_GPUS=1 (say) runs the matrix on those GPUs while the bench runs on GPU 0; by default the
# matrix takes every GPU first and the bench follows.
if [ "${DYT_SKIP_MATRIX:-0}" = 1 ]; then
  echo "matrix skipped (DYT_SKIP_MATRIX=1)"
elif [ -n "${DYT_MATRIX_GPUS:-}" ]; then
  CUDA_VISIBLE_DEVICES="$DYT_MATRIX_GPUS" matrix >reports/matrix.out 2>&1 &
else
  matrix
fi

default_bench="--providers dyt,eager,liger --shapes bandwidth,small,model,mixed --dtypes bf16,fp32 --modes fwd,bwd"
read -r -a bench_args <<<"${DYT_BENCH_ARGS:-$default_bench}"
start=$SECONDS
CUDA_VISIBLE_DEVICES=0 timeout "${DYT_BENCH_S:-330}" python3 -m dyt bench "${bench_args[@]}" >reports/bench.log 2>&1
echo "bench rc=$? in $((SECONDS - start)) s"
tr '\r' '\n' <reports/bench.log | grep -v '^bench:' | tail -n 3
wait
[ -f reports/matrix.out ] && cat reports/matrix.out

python3 -m dyt report --reports reports >reports/report.log 2>&1
echo "report rc=$?"
tar czf "$OUT/reports.tgz" reports
ls -la "$OUT"
