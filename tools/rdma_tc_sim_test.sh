#!/bin/bash
# rdma_tc_sim's command line: every flag listed by --help, bad input refused
# by name with exit 2 before anything runs, and a short run's rows.
#   bazel test //tools:rdma_tc_sim_test
set -u
tc="$1"
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/tools/cli_expect.sh"

for flag in dscp_map scheduling weights quantum_bytes queue_limit_bytes \
    bulk_qps bulk_bytes bulk_depth bulk_tc ping_tc ping_bytes iterations \
    warmup link_gbps; do
  expect "--help lists --$flag" nonzero "--$flag " -- "$tc" --help
done
expect "bad dscp map" 2 'dscp map entry "26:8"' -- "$tc" --dscp_map=26:8
expect "bad scheduling" 2 "want strict or weighted, got fair" -- "$tc" --scheduling=fair
expect "bad weights" 2 "want eight, one per priority" -- "$tc" --weights=1,2
expect "bad bulk class" 2 "--bulk_tc: want 0..255" -- "$tc" --bulk_tc=256
expect "bad MC_IB_TC" 2 "MC_IB_TC" -- env MC_IB_TC=af31 "$tc" --ping_tc=-1
expect "no iterations" 2 "iterations" -- "$tc" --iterations=0
expect "positional argument" 2 "unexpected argument stray" -- "$tc" stray
expect "MC_IB_TC as the transport reads it" 0 "traffic class 184 \(DSCP 46\) -> priority 5" \
  -- env MC_IB_TC=184 "$tc" --ping_tc=-1 --dscp_map=46:5 --iterations=10 --warmup=1 --bulk_qps=1
expect "a short run's rows" 0 "^prioritised +8 +10 " \
  -- "$tc" --iterations=10 --warmup=1 --bulk_qps=2
finish
