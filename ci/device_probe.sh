#!/usr/bin/env bash
# One call on a lent GPU machine (no nox there): the GPU matrix, optionally the tuner, then the bench,
# each bounded in time, everything copied under $OUT. Usage: bash ci/device_probe.sh [tune] [bench-args...]
set -uo pipefail
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
start=$SECONDS
timeout "${DYT_TEST_BUDGET:-300}" python3 -m dyt.gpu_matrix -q -x --durations=15 ${DYT_TEST_ARGS:-} 2>&1 | tail -n 60 > "$OUT/tests.log"
echo "tests rc=${PIPESTATUS[0]} in $((SECONDS - start)) s"; tail -n 25 "$OUT/tests.log"
cp reports/junit/gpu_tests.xml reports/env.json reports/failures-gpu_tests.md "$OUT/" 2>/dev/null
if [ "${1:-}" = tune ]; then
  shift
  timeout "${DYT_TUNE_BUDGET:-200}" python3 -m dyt tune --budget-s "$(( ${DYT_TUNE_BUDGET:-200} - 30 ))" > "$OUT/tune.log" 2>&1
  echo "tune rc=$?"; grep -v "^  skip" "$OUT/tune.log" | tail -n 40; cp dyt/tables/sm90.json "$OUT/" 2>/dev/null
fi
if [ "$#" -gt 0 ]; then
  timeout "${DYT_BENCH_BUDGET:-200}" python3 -m dyt bench "$@" > "$OUT/bench.log" 2>&1
  echo "bench rc=$?"; tail -n 40 "$OUT/bench.log"; cp reports/perf/*.json "$OUT/" 2>/dev/null
fi
