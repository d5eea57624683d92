#!/usr/bin/env bash
# One call on a lent GPU machine: the GPU matrix (one worker per GPU), the host-overhead probe, optionally
# the tuner (DYT_TUNE=1, rewrites dyt/tables/sm90.json), the full bench and the report; everything tarred
# into $OUT/reports.tgz (the device tool returns few files). DYT_BENCH_ARGS holds extra bench arguments.
set -uo pipefail
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 MPLBACKEND=Agg
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT" reports
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.mem --format=csv > reports/gpu.txt
start=$SECONDS
timeout "${DYT_TEST_BUDGET:-330}" python3 -m dyt.gpu_matrix -q --durations=12 > reports/gpu_tests.log 2>&1
echo "gpu_tests rc=$? in $((SECONDS - start)) s"; tail -n 8 reports/gpu_tests.log
start=$SECONDS
timeout 90 python3 ci/host_overhead.py > reports/host_overhead.log 2>&1; echo "host probe rc=$?"
if [ "${DYT_TUNE:-0}" = 1 ]; then
  CUDA_VISIBLE_DEVICES=0 timeout "${DYT_TUNE_BUDGET:-200}" python3 -m dyt tune --budget-s "$(( ${DYT_TUNE_BUDGET:-200} - 30 ))" > reports/tune.log 2>&1
  echo "tune rc=$?"; cp dyt/tables/sm90.json reports/ 2>/dev/null
fi
read -r -a bench_args <<< "${DYT_BENCH_ARGS:-}"
CUDA_VISIBLE_DEVICES=0 timeout "${DYT_BENCH_BUDGET:-300}" python3 -m dyt bench "${bench_args[@]}" > reports/bench.log 2>&1
echo "bench rc=$? in $((SECONDS - start)) s"; tr '\r' '\n' < reports/bench.log | grep -v '^bench:' | tail -n 4
python3 -m dyt report --reports reports > reports/report.log 2>&1; echo "report rc=$?"
tar czf "$OUT/reports.tgz" reports; ls -la "$OUT"
