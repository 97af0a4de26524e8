#!/usr/bin/env bash
# Our tools beside perftest on Soft-RoCE: builds rdma_pingpong and rdma_bw
# (bazel -c opt), boots the CI's Soft-RoCE VM (run_ci_stage.sh -> run_vm.sh)
# with guest_perf.sh as the guest script, and copies its CSV files and table
# out of the VM's artifacts.
#
#   ci/softroce/run_perf.sh [--out-dir DIR] [--repeats N] [--iterations N]
#                           [--sizes "8 64 236 1024 4096"]
#                           [--lat-tools "ib_send_lat inline_off"] [--bw-iterations N]
#                           [--bw-sizes "4096 65536"] [--bw-ops "send write"]
#                           [--write-window N] [--bw-blocking] [--bw-extra "FLAGS"]
#                           [--in-flight "1048576 ..."] [--no-zero-copy]
#                           [--bw-only] [--no-bw] [--strace] [--strace-only]
#                           [--strace-sizes "64"] [--strace-iterations "200 1000"]
#                           [--syscalls-by strace|perf]
#                           [--profile] [--profile-only] [--profile-size N]
#                           [--events] [--events-only]
#                           [--variant NAME=BINARY[:VAR=value,...]]...
#                           [--kernel-args "tsc=reliable"] [--update-docs]
#
# DIR (default .cache/softroce-perf in the checkout) receives
# perf_latency.csv, perf_bw.csv, perf_summary.txt, perf_bw_table.md (the
# bandwidth table, with the host's load during the run) and perf_load.txt
# (/proc/loadavg every 5 s); DIR/vm holds every artifact of the VM (each
# tool's raw output under perf-raw/, console log). --lat-tools picks the
# latency runs (ib_send_lat, ib_write_lat, inline_off, inline_auto: all
# four by default), --bw-ops the bandwidth operations (send, write, read:
# ib_read_bw alone; send and write by default); --bw-only skips the latency
# runs, --no-bw the bandwidth runs;
# --bw-blocking adds rdma_bw
# --write_mode=blocking rows (and, with zero copy, --send_mode=blocking);
# --bw-extra adds rdma_bw flags to both ends of every bandwidth run; --in-flight adds windowed WRITE runs with
# --rdma_in_flight=N (perf_bw.csv). Zero copy is measured beside the copying
# mode unless --no-zero-copy: rdma_pingpong --inline=off --zero_copy in the
# latency runs, rdma_bw --op=send --zero_copy (the PostSendFrom() window)
# after each SEND. --strace adds
# the system-call count (guest_perf.sh's PERF_STRACE=1: ib_send_lat and
# rdma_pingpong, copy and zero copy, both sides under strace -c -f, at each
# size of --strace-sizes, 64 B by default, and each round-trip count of
# --strace-iterations, two counts whose difference gives calls per round
# trip) into perf_strace.csv and perf_strace_table.txt; --strace-only runs
# that alone; --syscalls-by perf counts with perf stat (raw_syscalls
# tracepoint: nothing stopped, totals only; --strace-iterations then
# defaults to "2000 20000") instead of strace. --profile
# adds guest_perf.sh's PERF_PROFILE=1 (ib_send_lat and rdma_pingpong
# --zero_copy at 64 B, or --profile-size N, under a system-wide perf
# record -g -e cpu-clock; reports in vm/<suite>/perf-raw/profile-*.txt),
# --profile-only runs that alone. --events adds guest_perf.sh's PERF_EVENTS=1 (scheduler, workqueue,
# softirq, timer, network and system-call tracepoints counted system-wide
# per round trip at 64 B: ib_send_lat, rdma_pingpong --zero_copy and each
# variant, side by side in perf_events_table.txt), --events-only that
# alone. --variant (repeatable) runs another rdma_pingpong build, with its
# own environment and flags (settings that start with "--"), after each
# zero-copy latency run (tool rdma_pingpong_NAME_zero_copy in
# perf_latency.csv), and in the system-call
# count beside ours, copying. --kernel-args ARGS adds to the guest kernel's
# command line (run_vm.sh: "tsc=reliable" keeps the guest's clocksource on
# the TSC for the whole run, so that clock reads stay out of the counts). --update-docs puts perf_bw_table.md and the load into
# docs/performance.md between its rxe-bw-table markers (perf_docs_table.sh),
# so the table there is this run's, not typed in. With several
# $SOFTROCE_KERNELS the first kernel's files are copied to DIR, the others
# stay in DIR/vm/<suite>/. Plot the latency CSV with
# docs/plots/plot_latency.py. Exit status is run_ci_stage.sh's (0 pass,
# 1..89 a failed run, 90 VM infrastructure, 91 timeout; see
# docs/soft-roce.md). $SOFTROCE_TIMEOUT bounds the VM (default here 1500 s).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)

out_dir="$repo/.cache/softroce-perf"
envs=()
variants=() variant_files=()
zero_copy=1
update_docs=0
while (($#)); do
  case "$1" in
    --out-dir) out_dir=${2:?}; shift 2 ;;
    --repeats) envs+=(--env "PERF_REPEATS=${2:?}"); shift 2 ;;
    --iterations) envs+=(--env "PERF_ITERATIONS=${2:?}"); shift 2 ;;
    --sizes) envs+=(--env "PERF_SIZES=${2:?}"); shift 2 ;;
    --bw-iterations) envs+=(--env "PERF_BW_ITERATIONS=${2:?}"); shift 2 ;;
    --bw-sizes) envs+=(--env "PERF_BW_SIZES=${2:?}"); shift 2 ;;
    --write-window) envs+=(--env "PERF_BW_WRITE_WINDOW=${2:?}"); shift 2 ;;
    --bw-blocking) envs+=(--env "PERF_BW_BLOCKING=1"); shift ;;
    --bw-extra) envs+=(--env "PERF_BW_EXTRA=${2:?}"); shift 2 ;;
    --in-flight) envs+=(--env "PERF_BW_IN_FLIGHT=${2:?}"); shift 2 ;;
    --lat-tools) envs+=(--env "PERF_LAT_TOOLS=${2:?}"); shift 2 ;;
    --bw-ops) envs+=(--env "PERF_BW_OPS=${2:?}"); shift 2 ;;
    --no-zero-copy) zero_copy=0; shift ;;
    --bw-only) envs+=(--env "PERF_LATENCY=0"); shift ;;
    --no-bw) envs+=(--env "PERF_BW=0"); shift ;;
    --strace) envs+=(--env "PERF_STRACE=1"); shift ;;
    --strace-only) envs+=(--env "PERF_STRACE=1" --env "PERF_LATENCY=0" --env "PERF_BW=0"); shift ;;
    --strace-sizes) envs+=(--env "PERF_STRACE_SIZES=${2:?}"); shift 2 ;;
    --strace-iterations) envs+=(--env "PERF_STRACE_ITERATIONS=${2:?}"); shift 2 ;;
    --syscalls-by) envs+=(--env "PERF_SYSCALL_COUNTER=${2:?}"); shift 2 ;;
    --variant)
      # NAME=BINARY[:VAR=value,...]: another rdma_pingpong build, in the guest
      # as rdma_pingpong_NAME (guest_perf.sh PERF_VARIANTS); a setting that
      # starts with "--" is a flag for it ("--busy_poll_yields=false").
      spec=${2:?}; vname=${spec%%=*}; rest=${spec#*=}; vbin=${rest%%:*}
      venv=''; if [[ "$rest" == *:* ]]; then venv=${rest#*:}; fi
      variant_files+=(--file "$(cd "$(dirname "$vbin")" && pwd)/$(basename "$vbin"):/usr/local/bin/rdma_pingpong_$vname")
      variants+=("$vname:rdma_pingpong_$vname${venv:+:$venv}"); shift 2 ;;
    --profile) envs+=(--env "PERF_PROFILE=1"); shift ;;
    --profile-only) envs+=(--env "PERF_PROFILE=1" --env "PERF_LATENCY=0" --env "PERF_BW=0"); shift ;;
    --profile-size) envs+=(--env "PERF_PROFILE_SIZE=${2:?}"); shift 2 ;;
    --events) envs+=(--env "PERF_EVENTS=1"); shift ;;
    --events-only) envs+=(--env "PERF_EVENTS=1" --env "PERF_LATENCY=0" --env "PERF_BW=0"); shift ;;
    --kernel-args) export SOFTROCE_KERNEL_ARGS=${2:?}; shift 2 ;;
    --update-docs) update_docs=1; shift ;;
    -h|--help) sed -n "2,$(grep -m1 -n 'SOFTROCE_TIMEOUT bounds the VM' "$0" | cut -d: -f1)p" "$0"; exit 0 ;;
    *) echo "run_perf: unknown argument: $1 (see --help)" >&2; exit 93 ;;
  esac
done
envs+=(--env "PERF_ZERO_COPY=$zero_copy")
if ((${#variants[@]})); then envs+=(--env "PERF_VARIANTS=${variants[*]}"); fi
mkdir -p "$out_dir"
out_dir=$(cd "$out_dir" && pwd)
rm -rf "$out_dir/vm" "$out_dir"/perf_*.csv "$out_dir"/perf_*.txt "$out_dir"/perf_*.md

echo "==== run_perf: build (bazel -c opt)"
(cd "$repo" && bazel build -c opt //tools:rdma_pingpong //tools:rdma_bw) ||
  { echo "run_perf: FAILED to build the tools"; exit 1; }
# bazel-bin follows the last build's configuration: ask for -c opt's.
bin_dir=$(cd "$repo" && bazel info -c opt bazel-bin 2>/dev/null)

# The host is shared: its load while the VM runs goes with the figures.
(while :; do
  echo "$(date -u +%H:%M:%S) $(cut -d' ' -f1-4 /proc/loadavg)"
  sleep 5
done) >"$out_dir/perf_load.txt" &
sampler=$!
trap 'kill "$sampler" 2>/dev/null || true' EXIT

status=0
SOFTROCE_GUEST=smoke SOFTROCE_TIMEOUT=${SOFTROCE_TIMEOUT:-1500} \
  "$here/run_ci_stage.sh" --out-dir "$out_dir/vm" \
  --file "$bin_dir/tools/rdma_pingpong:/usr/local/bin/rdma_pingpong" \
  --file "$bin_dir/tools/rdma_bw:/usr/local/bin/rdma_bw" \
  ${variant_files[@]+"${variant_files[@]}"} \
  ${envs[@]+"${envs[@]}"} --guest-script "$here/guest_perf.sh" || status=$?

kill "$sampler" 2>/dev/null || true
# The VM's artifacts are per kernel (vm/<suite>/): the first kernel's
# figures are the run's; the others stay where they are.
read -r first _ <<<"${SOFTROCE_KERNELS:-bookworm}"
for file in perf_latency.csv perf_bw.csv perf_summary.txt perf_bw_table.md \
  perf_strace.csv perf_strace_table.txt perf_events.csv perf_events_table.txt perf_clocksource.txt; do
  for src in "$out_dir/vm/$first/$file" "$out_dir/vm/$file"; do
    if [[ -f "$src" ]]; then cp "$src" "$out_dir/"; break; fi
  done
done
if ((update_docs)); then "$here/perf_docs_table.sh" "$out_dir" || status=1; fi
echo
echo "==== run_perf: results in $out_dir"
if [[ -f "$out_dir/perf_summary.txt" ]]; then cat "$out_dir/perf_summary.txt"; fi
if [[ -f "$out_dir/perf_strace_table.txt" ]]; then cat "$out_dir/perf_strace_table.txt"; fi
exit "$status"
