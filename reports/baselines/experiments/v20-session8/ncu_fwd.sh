#!/usr/bin/env bash
# Session 8: Nsight Compute counters of the bf16 forward (every dyt_fwd_kernel launch of ncu_fwd.py, two per
# width): METRICS below, or with SECTIONS="WarpStateStats ..." those sections instead.
set -u
cd "$(dirname "$0")"
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)
[ -n "$NCU" ] || { echo "no ncu on this machine"; exit 0; }
METRICS=sm__warps_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active
METRICS=$METRICS,dram__throughput.avg.pct_of_peak_sustained_elapsed,l1tex__t_sector_hit_rate.pct
METRICS=$METRICS,lts__t_sector_hit_rate.pct,lts__t_requests_srcunit_tex_op_read.sum,gpu__time_duration.sum
METRICS=$METRICS,launch__registers_per_thread,launch__occupancy_limit_registers
if [ -n "${SECTIONS:-}" ]; then
    WHAT=(); for s in $SECTIONS; do WHAT+=(--section "$s"); done
else
    WHAT=(--metrics "$METRICS")
fi
"$NCU" --kernel-name dyt_fwd_kernel "${WHAT[@]}" python ncu_fwd.py "$@" 2>&1 | grep -v "^==PROF==" | tail -n 400
