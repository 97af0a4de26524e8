#!/usr/bin/env bash
# rdma_bw --virtual_time on the simulator: SEND and windowed RDMA WRITE at
# 64 KiB reach at least 90% of the simulated link's rate in virtual time
# (issue: "a fabric faithful enough to show bandwidth"; docs/simulator.md),
# from the tool's own CSV; and the flag is refused where it means nothing.
#
#   tools/rdma_bw_virtual_time_test.sh path/to/rdma_bw
set -uo pipefail
bw=${1:?usage: rdma_bw_virtual_time_test.sh RDMA_BW}
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/tools/cli_expect.sh"

csv="${TEST_TMPDIR:-/tmp}/rdma_bw_virtual_time.csv"
expect "64 KiB in virtual time" 0 "% of the 400 Gb/s link" -- \
  "$bw" --self --virtual_time --sizes=65536 --iterations=500 --warmup=100 \
  --csv="$csv"
# Columns by name: the CSV's header says which is which.
ratios=$(awk -F, '
  NR == 1 { for (i = 1; i <= NF; ++i) col[$i] = i; next }
  { printf "%s %.4f\n", $col["op"], $col["bw_average_gbps"] / $col["link_gbps"] }
' "$csv")
echo "$ratios"
for op in send write; do
  ratio=$(awk -v op="$op" '$1 == op { print $2 }' <<<"$ratios")
  if [[ -z "$ratio" ]]; then
    echo "FAIL no $op row in $csv"
    failures=$((failures + 1))
  elif awk -v r="$ratio" 'BEGIN { exit !(r >= 0.90 && r <= 1.0) }'; then
    echo "ok   $op at 64 KiB: $ratio of the link"
  else
    echo "FAIL $op at 64 KiB: $ratio of the link, want 0.90..1.00"
    failures=$((failures + 1))
  fi
done

expect "the simulator itself needs --self" 2 "runs both ends with --self" -- \
  "$bw" --server --virtual_time
expect "virtual time needs the simulator" 2 "needs --backend=sim and --self" -- \
  "$bw" --backend=ibverbs --self --virtual_time
finish
