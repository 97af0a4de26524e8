#!/usr/bin/env bash
# Our tools beside perftest on Soft-RoCE: builds rdma_pingpong and rdma_bw
# (bazel -c opt), boots the CI's Soft-RoCE VM (run_ci_stage.sh -> run_vm.sh)
# with guest_perf.sh as the guest script, and copies its CSV files and table
# out of the VM's artifacts.
#
#   ci/softroce/run_perf.sh [--out-dir DIR] [--repeats N] [--iterations N]
#                           [--sizes "8 64 236 1024 4096"] [--bw-iterations N]
#
# DIR (default .cache/softroce-perf in the checkout) receives
# perf_latency.csv, perf_bw.csv and perf_summary.txt; DIR/vm holds every
# artifact of the VM (DIR/vm/<suite>/: each tool's raw output under
# perf-raw/, console log); the kernel is the first of $SOFTROCE_KERNELS
# (default bookworm, Debian 12's).
# Plot the latency CSV with docs/plots/plot_latency.py. Exit status is
# run_ci_stage.sh's (0 pass, 1..89 a failed run, 90 VM infrastructure,
# 91 timeout; see docs/soft-roce.md). $SOFTROCE_TIMEOUT bounds the VM
# (default here 1500 s).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)

out_dir="$repo/.cache/softroce-perf"
envs=()
while (($#)); do
  case "$1" in
    --out-dir) out_dir=${2:?}; shift 2 ;;
    --repeats) envs+=(--env "PERF_REPEATS=${2:?}"); shift 2 ;;
    --iterations) envs+=(--env "PERF_ITERATIONS=${2:?}"); shift 2 ;;
    --sizes) envs+=(--env "PERF_SIZES=${2:?}"); shift 2 ;;
    --bw-iterations) envs+=(--env "PERF_BW_ITERATIONS=${2:?}"); shift 2 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "run_perf: unknown argument: $1 (see --help)" >&2; exit 93 ;;
  esac
done
mkdir -p "$out_dir"
out_dir=$(cd "$out_dir" && pwd)
rm -rf "$out_dir/vm" "$out_dir"/perf_*.csv "$out_dir/perf_summary.txt"

echo "==== run_perf: build (bazel -c opt)"
(cd "$repo" && bazel build -c opt //tools:rdma_pingpong //tools:rdma_bw) ||
  { echo "run_perf: FAILED to build the tools"; exit 1; }
# bazel-bin follows the last build's configuration: ask for -c opt's.
bin_dir=$(cd "$repo" && bazel info -c opt bazel-bin 2>/dev/null)

status=0
# One kernel (run_ci_stage.sh runs each of SOFTROCE_KERNELS): the first.
kernel=${SOFTROCE_KERNELS:-bookworm}
kernel=${kernel%% *}
SOFTROCE_KERNELS=$kernel SOFTROCE_GUEST=smoke SOFTROCE_TIMEOUT=${SOFTROCE_TIMEOUT:-1500} \
  "$here/run_ci_stage.sh" --out-dir "$out_dir/vm" \
  --file "$bin_dir/tools/rdma_pingpong:/usr/local/bin/rdma_pingpong" \
  --file "$bin_dir/tools/rdma_bw:/usr/local/bin/rdma_bw" \
  ${envs[@]+"${envs[@]}"} --guest-script "$here/guest_perf.sh" || status=$?

for file in perf_latency.csv perf_bw.csv perf_summary.txt; do
  if [[ -f "$out_dir/vm/$kernel/$file" ]]; then cp "$out_dir/vm/$kernel/$file" "$out_dir/"; fi
done
echo
echo "==== run_perf: results in $out_dir"
if [[ -f "$out_dir/perf_summary.txt" ]]; then cat "$out_dir/perf_summary.txt"; fi
exit "$status"
