#!/usr/bin/env bash
# Session 9: Nsight Compute counters of ncu_probe.py's forward variants (two launches each): memory requests
# and sectors at L1 and L2, and the stall reasons per issued instruction.
set -u
cd "$(dirname "$0")"
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)
[ -n "$NCU" ] || { echo "no ncu on this machine"; exit 0; }
M=gpu__time_duration.sum,launch__registers_per_thread,dram__bytes_read.sum,dram__bytes_write.sum
M=$M,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum
M=$M,l1tex__t_sectors_pipe_lsu_mem_global_op_ld_lookup_hit.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_global_op_ld.sum
M=$M,l1tex__data_pipe_lsu_wavefronts_mem_global_op_ld.sum,lts__t_requests_srcunit_tex_op_read.sum
M=$M,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum
M=$M,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active
M=$M,regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio
"$NCU" --kernel-name regex:"dyt_fwd_kernel|fwd_probe" --metrics "$M" python ncu_probe.py "$@" 2>&1 \
    | grep -v "^==PROF==" | tail -n 600
