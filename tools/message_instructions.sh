#!/usr/bin/env bash
# Instructions the transport executes per message on the simulator, beside
# the raw verbs loop: a deterministic measure of the message path's own
# cost, with none of a timed run's noise.
#
#   tools/message_instructions.sh [--sizes "8 64 256 4096"] [--inline]
#                                 [--binary PATH] [--csv FILE]
#
# Runs transport_benchmark's BM_Overhead (client Send() + server Receive(),
# and SendFrom() + ReceiveBorrowed() for zero copy, interleaved with the raw
# post SEND / poll / poll / repost of tests/raw_qp_pair.h) under valgrind's
# callgrind, counting only inside those calls, and prints per message what
# they executed outside the simulated NIC (SimVerbs): the transport's own
# instructions against the raw loop's, the conditional branches among
# them, and the calls that code made (into SimVerbs too). The simulator's
# work stands for the provider's, which both pay alike on a real NIC.
#
# Why: over Soft-RoCE the ping-pong's gap to ib_send_lat is this user-space
# path (the raw loop on the transport's own QP matches perftest:
# docs/performance.md, issue 12), and a latency run there resolves about 2%
# of t_min; these counts are exact. Under qemu TCG, between two messages
# of the ping-pong, new code costs about 20-30 ns a conditional branch
# and 0.35 ns an instruction in a straight run, and a call and its return
# about 3x their hot cost (section 2, "What a branch costs cold"); yet
# neither 112 instructions nor 23 branches fewer a message moved t_min
# there beyond a run's resolution. The branches column counts every
# execution (a loop's too). The counts depend on the compiler: compare
# builds made by one.
#
# --inline: inline on (ConnectX-7's 236 B); default off, as perftest runs
# over rxe. --binary: a transport_benchmark already built (-c opt, not
# stripped); default: bazel build -c opt. Needs valgrind and python3
# (ci/install_deps.sh installs both). CI holds the 64 B counts to a budget:
# tools/check_instruction_budget.sh.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
sizes="8 64 256 4096"
allow_inline=0
binary=''
csv=''
while [[ $# -gt 0 ]]; do
  case $1 in
    --sizes) sizes=$2; shift ;;
    --inline) allow_inline=1 ;;
    --binary) binary=$2; shift ;;
    --csv) csv=$2; shift ;;
    -h|--help) sed -n '2,/^set /{/^#/p}' "$0"; exit 0 ;;
    *) echo "message_instructions: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
for size in $sizes; do
  case $size in
    8|64|256|4096|65536) ;;
    *) echo "message_instructions: size '$size': BM_Overhead runs 8, 64, 256, 4096 and 65536" >&2; exit 2 ;;
  esac
done
for tool in valgrind python3; do
  if ! command -v "$tool" >/dev/null; then
    echo "message_instructions: $tool not found (apt-get install $tool)" >&2
    exit 2
  fi
done
if [[ -z "$binary" ]]; then
  (cd "$root" && bazel build -c opt //transport:transport_benchmark >&2)
  binary=$root/bazel-bin/transport/transport_benchmark
fi
[[ -x "$binary" ]] || { echo "message_instructions: '$binary' is not an executable" >&2; exit 2; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
connection=rdma_transport::Connection
raw=rdma_transport::RawQpPair::Message
[[ -n "$csv" ]] && echo "bytes,path,inline,transport_own,raw_own,ratio,transport_branches,raw_branches,transport_calls,raw_calls" >"$csv"
printf '%6s  %-9s  %14s  %8s  %6s  %18s  %12s  %16s  %9s\n' bytes path "transport own" "raw own" ratio "transport branches" "raw branches" "transport calls" "raw calls"
for size in $sizes; do
  for zero_copy in 0 1; do
    if [[ $zero_copy == 1 ]]; then
      path='zero copy' calls=(SendFrom ReceiveBorrowed)
    else
      path='copy' calls=(Send Receive)
    fi
    toggles=(--toggle-collect="$raw(*")
    for call in "${calls[@]}"; do toggles+=(--toggle-collect="$connection::$call(*"); done
    out=$work/callgrind.$size.$zero_copy
    filter="BM_Overhead/size:$size/inline:$allow_inline/zero_copy:$zero_copy/serialized:0\$"
    if ! valgrind --tool=callgrind --branch-sim=yes "${toggles[@]}" --callgrind-out-file="$out" \
        "$binary" --benchmark_filter="$filter" --benchmark_min_time=0.01 \
        >"$work/log" 2>&1; then
      echo "message_instructions: callgrind failed for $filter:" >&2
      tail -20 "$work/log" >&2
      exit 1
    fi
    result=$(python3 "$here/callgrind_message_cost.py" "$out" \
      --group "transport=$connection::${calls[0]},$connection::${calls[1]}" \
      --group "raw=$raw")
    own=$(awk '$1 == "transport" {print $3}' <<<"$result")
    raw_own=$(awk '$1 == "raw" {print $3}' <<<"$result")
    made=$(awk '$1 == "transport" {print $7}' <<<"$result")
    raw_made=$(awk '$1 == "raw" {print $7}' <<<"$result")
    branches=$(awk '$1 == "transport" {print $11}' <<<"$result")
    raw_branches=$(awk '$1 == "raw" {print $11}' <<<"$result")
    ratio=$(awk -v t="$own" -v r="$raw_own" 'BEGIN {printf "%.2f", t / r}')
    printf '%6s  %-9s  %14s  %8s  %6s  %18s  %12s  %16s  %9s\n' "$size" "$path" "$own" "$raw_own" "$ratio" "$branches" "$raw_branches" "$made" "$raw_made"
    [[ -n "$csv" ]] && echo "$size,$path,$allow_inline,$own,$raw_own,$ratio,$branches,$raw_branches,$made,$raw_made" >>"$csv"
  done
done
