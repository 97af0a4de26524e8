#!/usr/bin/env bash
# Our tools beside perftest on the same Soft-RoCE devices, inside the VM
# (run by run_perf.sh, or by guest_ci.sh when the binaries are present).
# Needs rdma_pingpong and rdma_bw on PATH (run_vm.sh --file).
#
#   latency, for each size of PERF_SIZES, PERF_REPEATS times, interleaved,
#   the tools of PERF_LAT_TOOLS (default "ib_send_lat ib_write_lat
#   inline_off inline_auto"):
#     ib_send_lat, ib_write_lat, rdma_pingpong --inline=off, --inline=auto
#     and, with PERF_ZERO_COPY=1, rdma_pingpong --inline=off --zero_copy
#     (tool rdma_pingpong_inline_off_zero_copy; run_perf.sh sets it, CI's
#     guest_ci.sh leaves it 0 to keep the stage's time)
#     server on rxe1 (RXE_B), client on rxe0 (RXE_A), -x <GID index>,
#     PERF_ITERATIONS round trips each, the TCP exchange across the veth
#   bandwidth at each size of PERF_BW_SIZES (default PERF_BW_SIZE, 64 KiB),
#   PERF_REPEATS times, interleaved, for each operation of PERF_BW_OPS
#   (default "send write"):
#     ib_send_bw vs rdma_bw --op=send (and, with PERF_ZERO_COPY=1, rdma_bw
#     --op=send --zero_copy --send_mode=window: tool rdma_bw_send_zero_copy,
#     the window of PostSendFrom() on an engine, --window 128 as
#     ib_send_bw's tx-depth; above the slot, 64 KiB at most, a SEND goes by
#     rendezvous, the receiver READing it; with PERF_BW_BLOCKING=1 also the
#     blocking SendFrom(), --send_mode=blocking: tool
#     rdma_bw_send_zero_copy_blocking),
#     ib_write_bw vs rdma_bw --op=write
#     (the windowed WRITE, --write_mode=window: PERF_BW_WRITE_WINDOW ops
#     outstanding, default 128 as ib_write_bw's tx-depth); with
#     PERF_BW_BLOCKING=1 also rdma_bw --write_mode=blocking after each
#     and, for each byte count of PERF_BW_IN_FLIGHT, the windowed WRITE with
#     --rdma_in_flight=N (tool rdma_bw_write_inflight_N in perf_bw.csv);
#     op "read": ib_read_bw alone (the rendezvous' READ, as a baseline)
#   PERF_BW_EXTRA: more rdma_bw flags for both ends of every bandwidth run
#     (say "--slot_bytes=1048576 --window=16": 1 MiB SENDs go eagerly).
#   variants, with PERF_VARIANTS="name:binary[:VAR=value,...] ...": after
#     each size's zero-copy run, the same run with another rdma_pingpong
#     binary (on PATH: run_perf.sh --variant copies it in) and environment,
#     both sides (a setting that starts with "--" is a flag given to that
#     binary on both sides: "noyield:rdma_pingpong:--busy_poll_yields=false");
#     tool rdma_pingpong_<name>_zero_copy in perf_latency.csv, so that
#     builds are compared within one run; with PERF_STRACE=1 each
#     is counted too, copying (column "<name>, copy").
#   PERF_LATENCY=0 leaves the latency part out, PERF_BW=0 the bandwidth.
#   profile, with PERF_PROFILE=1: ib_send_lat and rdma_pingpong --inline=off
#     --zero_copy at PERF_PROFILE_SIZE (64) B, PERF_PROFILE_ITERATIONS
#     (20000) round trips each, under a system-wide `perf record -a -g -e
#     cpu-clock` (both sides, the kernel's rxe work and the idle vCPU
#     alike); `perf report --stdio` by command and object, and by symbol,
#     into perf-raw/profile-<tool>-*.txt, the tool's own figures beside
#     them; and ib_send_lat once more under `strace -c -f` (its system
#     calls by name: perf-raw/profile-ib_send_lat-*.strace). Each sampled
#     pair has PERF_PROFILE_TIMEOUT (900 s).
#   kernel events, with PERF_EVENTS=1: ib_send_lat, rdma_pingpong
#     --inline=off --zero_copy and each PERF_VARIANTS build at
#     PERF_EVENTS_SIZE (64) B, at each round-trip count of
#     PERF_EVENTS_ITERATIONS ("1000 3000"), under a system-wide `perf record
#     -a` of scheduler, workqueue, softirq, timer, network and system-call
#     tracepoints (those the kernel has); perf_events.csv holds the counts by
#     tool, round trips, command (digits dropped: kworker/u4:1 -> kworker/u)
#     and event (a work item's function beside its workqueue events), and
#     perf_events_table.txt the events per round trip, (count at the larger
#     round-trip count - count at the smaller) / their difference, of each
#     tool side by side: what the kernel does for one round trip of each.
#     Switching tracepoints on patches the kernel's text, which QEMU's TCG
#     does not always survive: a 6.1 guest hung in soft lockups (two
#     kworkers, one per vCPU) twice, and a 7.2 guest took an int3 oops in
#     process_one_work once (the stage's retry then passed); run it apart
#     from figures that matter.
#   system calls, with PERF_STRACE=1: ib_send_lat, rdma_pingpong
#     --inline=off and (PERF_ZERO_COPY=1) --inline=off --zero_copy, both
#     sides under `strace -c -f`, at each size of PERF_STRACE_SIZES (64) and
#     each round-trip count of PERF_STRACE_ITERATIONS ("200 1000"; "2000
#     20000" with the perf counter; ours with --warmup=0). Calls per round
#     trip are the difference between the largest and the smallest count's
#     calls over the difference in round trips, so that start-up and
#     teardown cancel. Each traced run has PERF_STRACE_TIMEOUT (300 s; ours
#     also as its --timeout); the traced figures are not latencies. Ours
#     makes its system calls while it waits (busy_poll_gate.h: a look at
#     the fds on their own interval, a yield every 2^19 cycles of a
#     contended spell), so its count per round trip grows with the wait,
#     which strace itself lengthens. PERF_SYSCALL_COUNTER=perf counts with
#     `perf stat -e raw_syscalls:sys_enter` instead (in the kernel, nothing
#     stopped, so the waits keep their untraced length; totals only, under
#     the name "all").
#
# perftest silently disables inline on rxe ("Device not recognized to
# implement inline feature"), so its rows compare with our inline-off rows.
# Writes to $ARTIFACTS (/artifacts):
#   perf_latency.csv  repeat,bytes,tool,t_min_us,...,p99_9_us (one row a run)
#   perf_bw.csv       repeat,bytes,tool,iterations,bw_peak_gbps,bw_average_gbps,
#                     msg_rate_mpps,measured_at
#   perf_summary.txt  the side-by-side table, and each rdma_pingpong
#                     tool's (variants too) t_min over ib_send_lat's of the
#                     same repeat, median over the repeats (also
#                     $PERF_SUMMARY when set)
#   perf_bw_table.md  the bandwidth table of docs/performance.md: every
#                     repeat, the medians and the ratios
#   perf_strace.csv   tool,bytes,iterations,side,syscall,calls (PERF_STRACE=1;
#                     strace's own summaries in perf-raw/*.strace)
#   perf_strace_table.txt  system calls per round trip by name, each tool's
#                     client, server and both (PERF_STRACE=1)
#   perf_clocksource.txt  the guest's clocksource at the start and the end
#                     (hpet: clock_gettime is a system call, tsc: not)
#   perf-raw/         every tool's own output
# Exits 1 if any run failed (a figure is never made up from a failed run),
# 90 if the topology cannot be built.
set -euo pipefail

# shellcheck source=ci/softroce/guest_topology.sh
source "$SOFTROCE_DIR/guest_topology.sh"

out=${ARTIFACTS:-/artifacts}
raw="$out/perf-raw"
mkdir -p "$raw"
read -r -a sizes <<<"${PERF_SIZES:-8 64 236 1024 4096}"
iterations=${PERF_ITERATIONS:-1000}
repeats=${PERF_REPEATS:-3}
read -r -a bw_sizes <<<"${PERF_BW_SIZES:-${PERF_BW_SIZE:-65536}}"
bw_iterations=${PERF_BW_ITERATIONS:-1000}
bw_write_window=${PERF_BW_WRITE_WINDOW:-128}
bw_blocking=${PERF_BW_BLOCKING:-0}
read -r -a bw_in_flight <<<"${PERF_BW_IN_FLIGHT:-}"
read -r -a lat_tools <<<"${PERF_LAT_TOOLS:-ib_send_lat ib_write_lat inline_off inline_auto}"
read -r -a bw_ops <<<"${PERF_BW_OPS:-send write}"
read -r -a variants <<<"${PERF_VARIANTS:-}"
zero_copy=${PERF_ZERO_COPY:-0}
latency=${PERF_LATENCY:-1}
bandwidth=${PERF_BW:-1}
strace_mode=${PERF_STRACE:-0}
read -r -a strace_sizes <<<"${PERF_STRACE_SIZES:-64}"
strace_timeout=${PERF_STRACE_TIMEOUT:-300}
syscall_counter=${PERF_SYSCALL_COUNTER:-strace}  # strace | perf
# perf stat stops nothing, so it can afford runs long enough for the
# difference to drown the start-up's thousands of calls (at 1000/3000 it
# did not: docs/performance.md); strace stops every call.
default_strace_counts='200 1000'
[[ "$syscall_counter" == perf ]] && default_strace_counts='2000 20000'
read -r -a strace_counts <<<"${PERF_STRACE_ITERATIONS:-$default_strace_counts}"
profile_mode=${PERF_PROFILE:-0}
events_mode=${PERF_EVENTS:-0}
events_size=${PERF_EVENTS_SIZE:-64}
read -r -a events_counts <<<"${PERF_EVENTS_ITERATIONS:-1000 3000}"
events_csv="$out/perf_events.csv"
events_table="$out/perf_events_table.txt"
profile_size=${PERF_PROFILE_SIZE:-64}
profile_iterations=${PERF_PROFILE_ITERATIONS:-20000}
step_timeout=${PERF_STEP_TIMEOUT:-120}
# Our tools' --timeout bounds 256 messages at a time (tools/bench_common.h):
# 256 MiB of 1 MiB SENDs take longer than its default 10 s on a loaded host,
# so each run is bounded by its step's timeout instead, as perftest's are.
tool_timeout=$step_timeout
listen_tries=100 # wait_listening: tenths of a second
lat_csv="$out/perf_latency.csv"
bw_csv="$out/perf_bw.csv"
table="$out/perf_summary.txt"
bw_table="$out/perf_bw_table.md"
strace_csv="$out/perf_strace.csv"
strace_table="$out/perf_strace_table.txt"
echo "repeat,bytes,tool,t_min_us,t_max_us,t_typical_us,t_avg_us,t_stdev_us,p99_us,p99_9_us,inline" >"$lat_csv"
echo "repeat,bytes,tool,iterations,bw_peak_gbps,bw_average_gbps,msg_rate_mpps,measured_at" >"$bw_csv"
failures=0
invalid=0 # perftest runs that printed no figures
port=19000
# shellcheck source=ci/softroce/guest_lib.sh
source "$SOFTROCE_DIR/guest_lib.sh" # wait_listening

# Runs server and client, each under its own timeout; their outputs go to
# $raw/<name>-{server,client}.txt. Status: non-zero if either failed.
run_pair() { # name, server command..., --, client command...
  local name=$1 server=() client=() rc=0 server_pid
  shift
  while [[ "$1" != -- ]]; do server+=("$1"); shift; done
  shift
  client=("$@")
  port=$((port + 1))
  server=("${server[@]//@PORT@/$port}")
  client=("${client[@]//@PORT@/$port}")
  timeout "$step_timeout" "${server[@]}" >"$raw/$name-server.txt" 2>&1 &
  server_pid=$!
  if wait_listening "$port" "$listen_tries"; then
    timeout "$step_timeout" "${client[@]}" >"$raw/$name-client.txt" 2>&1 || rc=$?
  else
    echo "server never listened on port $port" >"$raw/$name-client.txt"
    rc=1
  fi
  wait "$server_pid" || rc=$((rc ? rc : $?))
  if ((rc != 0)); then
    # perftest is the yardstick, not the code under test: a run of it that
    # fails (it does, now and then, on a loaded host) costs its figures only.
    # A failed run of our own tools is a failure.
    if [[ "$name" == ib_* ]]; then
      echo "perftest run FAILED ($rc), not counted: $name; client said:" >&2
      invalid=$((invalid + 1))
    else
      echo "FAILED ($rc): $name; client said:" >&2
      failures=$((failures + 1))
    fi
    tail -5 "$raw/$name-client.txt" >&2
    tail -5 "$raw/$name-server.txt" >&2
  fi
  return "$rc"
}

# The command that runs our ping-pong: rdma_pingpong, or a PERF_VARIANTS
# build under its environment. Sets pingpong_command.
pingpong_command_for() { # variant name ('' for rdma_pingpong itself)
  pingpong_command=(rdma_pingpong)
  [[ -z "$1" ]] && return 0
  local spec binary settings setting list=() envs=() flags=()
  for spec in ${variants[@]+"${variants[@]}"}; do
    [[ "$spec" == "$1:"* ]] || continue
    IFS=: read -r _ binary settings <<<"$spec"
    if [[ -n "$settings" ]]; then IFS=, read -r -a list <<<"$settings"; fi
    for setting in ${list[@]+"${list[@]}"}; do
      if [[ "$setting" == --* ]]; then flags+=("$setting"); else envs+=("$setting"); fi
    done
    pingpong_command=(env ${envs[@]+"${envs[@]}"} "$binary" ${flags[@]+"${flags[@]}"})
    return 0
  done
  echo "guest_perf: no PERF_VARIANTS entry named $1" >&2
  return 1
}

# One latency pair, both sides on their own rxe device: perftest's TOOL
# (ib_send_lat, ib_write_lat), or ours (rdma_pingpong, or variant:NAME) with
# FLAGS on both sides and CLIENT_FLAGS on the client. A caller may set
# wrap_server / wrap_client (local arrays) to run each side under a tracer.
lat_pair() { # name, tool, size, round trips, [flags...] [-- client flags...]
  local name=$1 tool=$2 size=$3 n=$4 flags=() client_flags=()
  shift 4
  while (($#)) && [[ "$1" != -- ]]; do flags+=("$1"); shift; done
  if (($#)); then shift; client_flags=("$@"); fi
  if [[ "$tool" == ib_* ]]; then
    # perftest's flags are fixed here; a caller's would be dropped unseen.
    if ((${#flags[@]} || ${#client_flags[@]})); then
      echo "guest_perf: lat_pair $name: $tool takes no extra flags (got: ${flags[*]} -- ${client_flags[*]})" >&2
      failures=$((failures + 1))
      return 1
    fi
    run_pair "$name" \
      ${wrap_server[@]+"${wrap_server[@]}"} \
      "$tool" -d "$RXE_B" -x "$GID_B" -s "$size" -n "$n" -F -p @PORT@ -- \
      ${wrap_client[@]+"${wrap_client[@]}"} \
      "$tool" -d "$RXE_A" -x "$GID_A" -s "$size" -n "$n" -F -p @PORT@ "$IP_B"
    return
  fi
  local variant=''
  if [[ "$tool" == variant:* ]]; then variant=${tool#variant:}; fi
  pingpong_command_for "$variant" || { failures=$((failures + 1)); return 1; }
  local common=("${pingpong_command[@]}" --backend=ibverbs --sizes="$size" ${flags[@]+"${flags[@]}"})
  run_pair "$name" \
    ${wrap_server[@]+"${wrap_server[@]}"} \
    "${common[@]}" --device="$RXE_B" --gid_index="$GID_B" --server --listen="$IP_B:@PORT@" -- \
    ${wrap_client[@]+"${wrap_client[@]}"} \
    "${common[@]}" --device="$RXE_A" --gid_index="$GID_A" --connect="$IP_B:@PORT@" \
    --iterations="$n" ${client_flags[@]+"${client_flags[@]}"}
}

# perftest latency: the line after the header holding t_typical is
#   #bytes #iterations t_min t_max t_typical t_avg t_stdev 99% 99.9%
perftest_lat() { # repeat, size, tool
  local r=$1 size=$2 tool=$3 name="$3-$2B-r$1"
  lat_pair "$name" "$tool" "$size" "$iterations" || return 0
  # Under TCG perftest now and then prints "inf" and "-nan" for every figure
  # (its cycle counter calibration failed): such a run has no figure.
  local line
  line=$(awk -v r="$r" -v tool="$tool" '/t_typical/ { getline
    if ($3 ~ /^[0-9.]+$/ && $5 ~ /^[0-9.]+$/)
      printf "%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,no\n", r, $1, tool, $3, $4, $5, $6, $7, $8, $9 }' \
    "$raw/$name-client.txt")
  if [[ -n "$line" ]]; then
    echo "$line" >>"$lat_csv"
  else
    echo "guest_perf: $name printed no figures (see $raw/$name-client.txt); not counted" >&2
    invalid=$((invalid + 1))
  fi
}

# The tool column of a zero-copy ping-pong pair (lat_pair's second argument):
# rdma_pingpong_zero_copy for ours, rdma_pingpong_<name>_zero_copy for
# variant:<name>, perftest's tools by their own name.
zero_copy_label() { # pair
  case "$1" in
    rdma_pingpong) echo rdma_pingpong_zero_copy ;;
    variant:*) echo "rdma_pingpong_${1#variant:}_zero_copy" ;;
    *) echo "$1" ;;
  esac
}

ours_lat() { # repeat, size, inline mode (off|auto), [zero_copy], [variant name]
  local r=$1 size=$2 mode=$3 tool="rdma_pingpong_inline_$3${4:+_$4}" pair=rdma_pingpong
  local name="rdma_pingpong-inline_$3${4:+_$4}-$2B-r$1"
  local flags=(--inline="$mode" --timeout="$tool_timeout")
  if [[ -n "${5:-}" ]]; then
    pair="variant:$5"
    tool=$(zero_copy_label "$pair")
    name="rdma_pingpong-$5-$2B-r$1"
  fi
  if [[ "${4:-}" == zero_copy ]]; then flags+=(--zero_copy); fi
  lat_pair "$name" "$pair" "$size" "$iterations" "${flags[@]}" -- \
    --warmup=0 --csv="$raw/$name.csv" || return 0
  # Our CSV names its columns; take them by name.
  awk -F, -v r="$r" -v tool="$tool" '
    NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
    { printf "%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s\n", r, $c["bytes"], tool,
        $c["t_min_us"], $c["t_max_us"], $c["t_typical_us"], $c["t_avg_us"],
        $c["t_stdev_us"], $c["p99_us"], $c["p99_9_us"], $c["inline"] }' \
    "$raw/$name.csv" >>"$lat_csv"
}

# perftest bandwidth (--report_gbits): the line after the header holding
# "BW average" is  #bytes #iterations BW-peak BW-average MsgRate. The client
# reports; where it prints zeros (ib_send_bw's sender does under TCG), the
# receiving server's line is taken, and the CSV says which.
perftest_bw() { # repeat, tool, size
  local r=$1 tool=$2 bw_size=$3 name="$2-$3-r$1" side line
  run_pair "$name" \
    "$tool" -d "$RXE_B" -x "$GID_B" -s "$bw_size" -n "$bw_iterations" -F --report_gbits -p @PORT@ -- \
    "$tool" -d "$RXE_A" -x "$GID_A" -s "$bw_size" -n "$bw_iterations" -F --report_gbits -p @PORT@ "$IP_B" ||
    return 0
  for side in client server; do
    line=$(awk -v r="$r" -v tool="$tool" -v side="$side" '/BW average/ { getline
      if ($4 + 0 > 0) printf "%s,%s,%s,%s,%s,%s,%s,%s\n", r, $1, tool, $2, $3, $4, $5, side }' \
      "$raw/$name-$side.txt")
    if [[ -n "$line" ]]; then
      echo "$line" >>"$bw_csv"
      return 0
    fi
  done
  echo "perftest run without figures, not counted: $name printed no bandwidth" >&2
  invalid=$((invalid + 1))
}

ours_bw() { # repeat, op (send|send_zero_copy|send_zero_copy_blocking|write|write_blocking|write_inflight_N), size
  local r=$1 op=$2 bw_size=$3 name="rdma_bw-$2-$3-r$1" mode=()
  case "$op" in
    send_zero_copy) mode=(--zero_copy --send_mode=window) ;;
    send_zero_copy_blocking) mode=(--zero_copy --send_mode=blocking) ;;
    write) mode=(--write_mode=window --write_window="$bw_write_window") ;;
    write_blocking) mode=(--write_mode=blocking) ;;
    write_inflight_*)
      mode=(--write_mode=window --write_window="$bw_write_window" --rdma_in_flight="${op#write_inflight_}") ;;
  esac
  local common=(rdma_bw --backend=ibverbs --sizes="$bw_size" --op="${op%%_*}" --timeout="$tool_timeout")
  # PERF_BW_EXTRA: split on spaces, on purpose.
  local extra=()
  if [[ -n "${PERF_BW_EXTRA:-}" ]]; then read -r -a extra <<<"$PERF_BW_EXTRA"; common+=("${extra[@]}"); fi
  run_pair "$name" \
    "${common[@]}" --device="$RXE_B" --gid_index="$GID_B" --server --listen="$IP_B:@PORT@" -- \
    "${common[@]}" --device="$RXE_A" --gid_index="$GID_A" --connect="$IP_B:@PORT@" \
    --iterations="$bw_iterations" ${mode[@]+"${mode[@]}"} --csv="$raw/$name.csv" || return 0
  awk -F, -v r="$r" -v tool="rdma_bw_$op" '
    NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
    { printf "%s,%s,%s,%s,%s,%s,%s,client\n", r, $c["bytes"], tool, $c["iterations"],
        $c["bw_peak_gbps"], $c["bw_average_gbps"], $c["msg_rate_mpps"] }' \
    "$raw/$name.csv" >>"$bw_csv"
}

# --- System calls per round trip (PERF_STRACE=1) ------------------------------
# One traced pair: both sides under strace -c -f, its summary in
# $raw/<name>-{client,server}.strace, each syscall's count in $strace_csv.
strace_run() { # tool (ib_send_lat|rdma_pingpong_copy|rdma_pingpong_zero_copy|variant:NAME, copying), size, round trips
  local tool=$1 size=$2 n=$3 name="ib_send_lat-strace-$2B-n$3" side pair=rdma_pingpong
  if [[ "$tool" == variant:* ]]; then
    name="rdma_pingpong-strace-${tool#variant:}-$2B-n$3" pair=$tool
  elif [[ "$tool" != ib_send_lat ]]; then
    name="rdma_pingpong-strace-${tool#rdma_pingpong_}-$2B-n$3"
  fi
  # Traced start-up is slower: longer limits for this pair (run_pair reads them).
  local step_timeout=$strace_timeout listen_tries=600
  local trace=(strace -c -f -o)
  # perf stat counts in the kernel (a tracepoint counter, inherited by every
  # thread and child) and stops nothing, so the waits keep their length.
  if [[ "$syscall_counter" == perf ]]; then
    trace=(perf stat -x ',' -e raw_syscalls:sys_enter -o)
  fi
  local wrap_server=("${trace[@]}" "$raw/$name-server.strace")
  local wrap_client=("${trace[@]}" "$raw/$name-client.strace")
  if [[ "$tool" == ib_send_lat ]]; then
    lat_pair "$name" ib_send_lat "$size" "$n" || return 0
  else
    # --timeout bounds 256 round trips at a time (tools/bench_common.h):
    # traced, one of ours takes tens of milliseconds on a loaded host, as
    # each wait's system calls stop for strace.
    local flags=(--inline=off --timeout="$strace_timeout")
    if [[ "$tool" == *zero_copy ]]; then flags+=(--zero_copy); fi
    lat_pair "$name" "$pair" "$size" "$n" "${flags[@]}" -- --warmup=0 || return 0
  fi
  # strace -c: "% time  seconds  usecs/call  calls  [errors]  syscall", then
  # a "total" line; perf stat -x,: "<count>,,raw_syscalls:sys_enter,...", all
  # calls under one name ("all").
  for side in client server; do
    awk -v tool="$tool" -v size="$size" -v n="$n" -v side="$side" '
      /raw_syscalls:sys_enter/ { split($0, f, ","); if (f[1] ~ /^[0-9]+$/)
        printf "%s,%s,%s,%s,all,%s\n", tool, size, n, side, f[1]; next }
      $1 ~ /^[0-9.]+$/ && NF >= 5 && $NF != "total" {
        printf "%s,%s,%s,%s,%s,%s\n", tool, size, n, side, $NF, $4 }' \
      "$raw/$name-$side.strace" >>"$strace_csv"
  done
}

# --- Where the time goes (PERF_PROFILE=1) --------------------------------------
# One pair under a system-wide sampling profile: $raw/profile-<tool>.data,
# reports beside it.
profile_run() { # tool (ib_send_lat|rdma_pingpong_zero_copy)
  local tool=$1 name="profile-$1-${profile_size}B" recorder
  # Sampled, 20000 round trips outlast 300 s on a loaded host.
  local step_timeout=${PERF_PROFILE_TIMEOUT:-900} listen_tries=600
  perf record -a -g -e cpu-clock -o "$raw/$name.data" -- sleep 100000 \
    >"$raw/$name.record.txt" 2>&1 &
  recorder=$!
  sleep 2 # perf attaches to every CPU
  if [[ "$tool" == ib_send_lat ]]; then
    lat_pair "$name" ib_send_lat "$profile_size" "$profile_iterations" || true
  else
    lat_pair "$name" rdma_pingpong "$profile_size" "$profile_iterations" \
      --inline=off --zero_copy --timeout="$step_timeout" -- --warmup=100 || true
  fi
  # perf record's child is the sleep: stop that; perf writes its file and exits.
  pkill -INT -P "$recorder" sleep 2>/dev/null || true
  kill -INT "$recorder" 2>/dev/null || true
  wait "$recorder" 2>/dev/null || true
  local report=(perf report -i "$raw/$name.data" --stdio --no-children)
  "${report[@]}" --sort comm,dso -g none >"$raw/$name-by-dso.txt" 2>&1 || true
  "${report[@]}" --sort comm,dso,sym -g none --percent-limit 0.3 >"$raw/$name-by-sym.txt" 2>&1 || true
  "${report[@]}" --sort comm,sym -g caller,0.5,callee --percent-limit 2 >"$raw/$name-callgraph.txt" 2>&1 || true
  echo "guest_perf: profile of $tool:"
  grep -v '^#' "$raw/$name-by-dso.txt" | grep . | head -25
}

# --- What the kernel does per round trip (PERF_EVENTS=1) ----------------------
# The tracepoints asked for; those this kernel lacks are left out (events_probe).
events_wanted=(sched:sched_switch sched:sched_wakeup sched:sched_waking
  workqueue:workqueue_queue_work workqueue:workqueue_execute_start
  irq:softirq_raise irq:softirq_entry irq:irq_handler_entry
  timer:timer_start timer:timer_expire_entry timer:hrtimer_start timer:hrtimer_expire_entry
  net:net_dev_xmit net:netif_receive_skb net:netif_rx
  raw_syscalls:sys_enter)
events_have=()
events_probe() {
  local event
  grep -q ' /sys/kernel/tracing ' /proc/mounts ||
    mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true
  # Looked up in tracefs, not tried with perf: every enabling patches the
  # kernel's text (static keys), and under TCG that has hung a guest
  # (below); the tracepoints are switched on once per recorded run only.
  for event in "${events_wanted[@]}"; do
    if [[ -e "/sys/kernel/tracing/events/${event%%:*}/${event#*:}/id" ]]; then events_have+=("$event"); fi
  done
  echo "guest_perf: kernel events counted: ${events_have[*]:-none}"
  ((${#events_have[@]}))
}

# One pair under `perf record -a` of the events; its counts by command,
# event and work function appended to $events_csv.
events_run() { # pair (ib_send_lat|rdma_pingpong|variant:NAME; ours zero-copy), round trips
  local pair=$1 n=$2 tool recorder args=() event
  tool=$(zero_copy_label "$pair")
  local name="events-$tool-${events_size}B-$n"
  # perf's own system calls (it writes what it records) would be most of
  # the file: the filter leaves them out. The shell execs perf, so $$ is
  # perf's pid.
  for event in "${events_have[@]}"; do
    args+=(-e "$event")
    if [[ "$event" == raw_syscalls:* ]]; then args+=(--filter 'common_pid != @SELF@'); fi
  done
  # perf starts with its events off and says when they are on (attaching
  # 16 tracepoints on every CPU took over 2 s under TCG: a run begun after
  # a fixed sleep lost most of its events).
  local ctl="$raw/$name.ctl" ack="$raw/$name.ack" reply=''
  rm -f "$ctl" "$ack" && mkfifo "$ctl" "$ack"
  # shellcheck disable=SC2016 # $$ is the inner shell's
  sh -c 'for a in "$@"; do shift; set -- "$@" "$(printf %s "$a" | sed "s/@SELF@/$$/")"; done; exec perf record "$@"' \
    perf -D -1 --control "fifo:$ctl,$ack" -a "${args[@]}" -o "$raw/$name.data" -- sleep 100000 \
    >"$raw/$name.record.txt" 2>&1 &
  recorder=$!
  exec {ctl_fd}<>"$ctl" {ack_fd}<>"$ack"
  echo enable >&"$ctl_fd"
  read -r -t 120 reply <&"$ack_fd" || true
  exec {ctl_fd}>&- {ack_fd}>&-
  rm -f "$ctl" "$ack"
  if [[ "$reply" != ack* ]]; then
    echo "guest_perf: perf record never enabled its events for $name (see $raw/$name.record.txt)" >&2
    failures=$((failures + 1))
    kill -INT "$recorder" 2>/dev/null || true
    wait "$recorder" 2>/dev/null || true
    return 0
  fi
  local ok=1
  if [[ "$pair" == ib_* ]]; then
    lat_pair "$name" "$pair" "$events_size" "$n" || ok=0
  else
    lat_pair "$name" "$pair" "$events_size" "$n" --inline=off --zero_copy --timeout="$tool_timeout" -- \
      --warmup=0 || ok=0
  fi
  pkill -INT -P "$recorder" sleep 2>/dev/null || true
  kill -INT "$recorder" 2>/dev/null || true
  wait "$recorder" 2>/dev/null || true
  if ((!ok)); then return 0; fi # run_pair counted the failure
  # perf script: "comm event: fields"; a workqueue event names its function.
  perf script -i "$raw/$name.data" -F comm,event,trace 2>/dev/null |
    awk -v tool="$tool" -v n="$n" '
      { comm = $1; event = ""; fn = ""
        for (i = 2; i <= NF; i++) if ($i ~ /:$/) { event = $i; sub(/:$/, "", event); break }
        if (event == "") next
        for (j = i + 1; j <= NF; j++) {
          if ($j ~ /^function=/) { fn = substr($j, 10); break }
          if ($j == "function" && j < NF) { fn = $(j + 1); break }
        }
        # kworker/u8:1-rxe_wq and kworker/u8:1+rxe_wq (busy) are one kind.
        if (comm ~ /^kworker/) sub(/[-+].*$/, "", comm)
        gsub(/[0-9]+/, "", comm); gsub(/[:\/]+$/, "", comm)
        key = comm "," event "," fn; c[key]++ }
      END { for (k in c) printf "%s,%s,%s,%d\n", tool, n, k, c[k] }' >>"$events_csv" || {
    echo "guest_perf: perf script could not read $raw/$name.data (see $raw/$name.record.txt)" >&2
    failures=$((failures + 1))
  }
  # The VM's artifacts live in its memory; the counts are what is kept.
  rm -f "$raw/$name.data"
}

# Events per round trip: (count at the larger count - at the smaller) / the
# difference, by event and command, each tool a column.
events_summary() {
  awk -F, -v counts="${events_counts[*]}" -v size="$events_size" '
    NR > 1 { c[$1, $2, $3, $4, $5] += $6; key[$4 "," $3 "," $5] = 1
      if (!($1 in seen)) { seen[$1] = 1; tools[++nt] = $1 } }
    END {
      m = split(counts, k, " "); lo = k[1] + 0; hi = lo
      for (i = 2; i <= m; i++) { if (k[i] + 0 < lo) lo = k[i] + 0; if (k[i] + 0 > hi) hi = k[i] + 0 }
      if (hi == lo) { print "events: PERF_EVENTS_ITERATIONS needs two different counts"; exit }
      printf "Kernel events per round trip at %d B (system-wide perf record, both sides and the kernel):\n", size
      printf "(count at %d round trips - count at %d) / %d, by event, command and work function\n", hi, lo, hi - lo
      printf "%-62s", "event / command / function"
      for (t = 1; t <= nt; t++) {
        label = tools[t]; sub(/^rdma_pingpong_/, "", label); sub(/_zero_copy$/, "", label)
        if (label == "zero_copy") label = "ours"
        printf " %14s", substr(label, 1, 14)
      }
      printf "\n"
      n = 0
      for (kk in key) rows[++n] = kk
      for (i = 2; i <= n; i++) { v = rows[i]; for (j = i - 1; j >= 1 && rows[j] > v; j--) rows[j + 1] = rows[j]; rows[j + 1] = v }
      for (i = 1; i <= n; i++) {
        split(rows[i], f, ","); line = sprintf("%-62s", substr(f[1] " / " f[2] (f[3] != "" ? " / " f[3] : ""), 1, 62)); shown = 0
        for (t = 1; t <= nt; t++) {
          v = (c[tools[t], hi, f[2], f[1], f[3]] - c[tools[t], lo, f[2], f[1], f[3]]) / (hi - lo)
          if (v >= 0.05 || v <= -0.05) shown = 1
          line = line sprintf(" %14.2f", v)
        }
        if (shown) print line
        for (t = 1; t <= nt; t++) tot[tools[t], f[1]] += c[tools[t], hi, f[2], f[1], f[3]] - c[tools[t], lo, f[2], f[1], f[3]]
        ev[f[1]] = 1
      }
      printf "totals by event:\n"
      for (x in ev) {
        line = sprintf("%-62s", x); for (t = 1; t <= nt; t++) line = line sprintf(" %14.2f", tot[tools[t], x] / (hi - lo)); print line
      }
    }' "$events_csv"
}

# Per size, per syscall: calls per round trip of each tool's client, server
# and both, from the smallest and the largest round-trip count.
strace_summary() {
  local counter='strace -c -f'
  if [[ "$syscall_counter" == perf ]]; then counter='perf stat -e raw_syscalls:sys_enter'; fi
  local variant names=''
  for variant in ${variants[@]+"${variants[@]}"}; do names+=" ${variant%%:*}"; done
  awk -F, -v counts="${strace_counts[*]}" -v counter="$counter" -v variants="$names" '
    function isort(a, n,   i, j, t) {
      for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
    }
    NR > 1 {
      c[$1, $2, $3, $4, $5] += $6; t[$1, $2, $3, $4] += $6; ran[$1, $2, $3] = 1
      if (!($2 in size)) { size[$2] = 1; sizes[++ns] = $2 + 0 }
      if (!($5 in name)) { name[$5] = 1; names[++nn] = $5 }
    }
    function per(tool, s, side, key,   a, b) {
      if (!((tool, s, lo) in ran) || !((tool, s, hi) in ran)) return "n/a"
      if (side == "both") return sprintf("%.2f", (per(tool, s, "client", key) + per(tool, s, "server", key)))
      if (key == "") { a = t[tool, s, lo, side]; b = t[tool, s, hi, side] }
      else { a = c[tool, s, lo, side, key]; b = c[tool, s, hi, side, key] }
      return sprintf("%.2f", (b - a) / (hi - lo))
    }
    END {
      m = split(counts, k, " "); lo = k[1] + 0; hi = k[1] + 0
      for (i = 2; i <= m; i++) { if (k[i] + 0 < lo) lo = k[i] + 0; if (k[i] + 0 > hi) hi = k[i] + 0 }
      if (hi == lo) { print "strace: PERF_STRACE_ITERATIONS needs two different counts"; exit }
      nt = split("ib_send_lat rdma_pingpong_copy rdma_pingpong_zero_copy", tools, " ")
      split("ib_send_lat|ours, copy|ours, zero copy", titles, "|")
      nv = split(variants, vs, " ")
      for (v = 1; v <= nv; v++) { tools[++nt] = "variant:" vs[v]; titles[nt] = vs[v] ", copy" }
      isort(sizes, ns); isort(names, nn)
      for (i = 1; i <= ns; i++) {
        s = sizes[i]
        printf "System calls per round trip at %d B, inline off (%s on both sides):\n", s, counter
        printf "(calls at %d round trips - calls at %d) / %d; n/a: a traced run failed or did not run\n", hi, lo, hi - lo
        printf "%-18s", ""
        for (j = 1; j <= nt; j++) printf " | %-29s", titles[j]
        printf "\n%-18s", "syscall"
        for (j = 1; j <= nt; j++) printf " | %9s %9s %9s", "client", "server", "both"
        printf "\n"
        for (q = 1; q <= nn; q++) {
          shown = 0
          for (j = 1; j <= nt; j++) { v = per(tools[j], s, "both", names[q]); if (v != "n/a" && v != "0.00" && v != "-0.00") shown = 1 }
          if (!shown) continue
          printf "%-18s", names[q]
          for (j = 1; j <= nt; j++)
            printf " | %9s %9s %9s", per(tools[j], s, "client", names[q]), per(tools[j], s, "server", names[q]), per(tools[j], s, "both", names[q])
          printf "\n"
        }
        printf "%-18s", "total"
        for (j = 1; j <= nt; j++) printf " | %9s %9s %9s", per(tools[j], s, "client", ""), per(tools[j], s, "server", ""), per(tools[j], s, "both", "")
        printf "\n"
        for (j = 1; j <= nt; j++) {
          if (!((tools[j], s, lo) in ran)) continue
          printf "  %s, all calls of client + server: %d at %d round trips, %d at %d\n", titles[j],
            t[tools[j], s, lo, "client"] + t[tools[j], s, lo, "server"], lo,
            t[tools[j], s, hi, "client"] + t[tools[j], s, hi, "server"], hi
        }
        printf "\n"
      }
    }' "$strace_csv"
}

echo "guest_perf: sizes ${sizes[*]}, $iterations iterations, $repeats repeats; bandwidth at ${bw_sizes[*]} B x $bw_iterations (${bw_ops[*]}); zero copy $zero_copy"
# hpet makes clock_gettime a system call (docs/performance.md), tsc does
# not; under TCG the kernel may switch from tsc to hpet during the run.
clocksource() {
  echo "guest_perf: clocksource $1: $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null || echo unknown)" |
    tee -a "$out/perf_clocksource.txt"
}
clocksource "at the start"
SECONDS=0
for ((r = 1; r <= repeats * latency; r++)); do
  for size in "${sizes[@]}"; do
    for tool in "${lat_tools[@]}"; do
      case "$tool" in
        ib_send_lat | ib_write_lat) perftest_lat "$r" "$size" "$tool" ;;
        inline_off | inline_auto) ours_lat "$r" "$size" "${tool#inline_}" ;;
        *) echo "guest_perf: unknown tool in PERF_LAT_TOOLS: $tool" >&2; failures=$((failures + 1)) ;;
      esac
    done
    if ((zero_copy)); then ours_lat "$r" "$size" off zero_copy; fi
    for variant in ${variants[@]+"${variants[@]}"}; do
      ours_lat "$r" "$size" off zero_copy "${variant%%:*}"
    done
  done
  echo "guest_perf: latency repeat $r done after ${SECONDS}s"
done
for ((r = 1; r <= repeats * bandwidth; r++)); do
  for size in "${bw_sizes[@]}"; do
    for op in "${bw_ops[@]}"; do
      case "$op" in
        send)
          perftest_bw "$r" ib_send_bw "$size"
          ours_bw "$r" send "$size"
          if ((zero_copy)); then ours_bw "$r" send_zero_copy "$size"; fi
          if ((zero_copy && bw_blocking)); then ours_bw "$r" send_zero_copy_blocking "$size"; fi
          ;;
        write)
          perftest_bw "$r" ib_write_bw "$size"
          ours_bw "$r" write "$size"
          if ((bw_blocking)); then ours_bw "$r" write_blocking "$size"; fi
          for n in ${bw_in_flight[@]+"${bw_in_flight[@]}"}; do ours_bw "$r" "write_inflight_$n" "$size"; done
          ;;
        read) perftest_bw "$r" ib_read_bw "$size" ;; # the rendezvous' own operation: perftest's only
        *) echo "guest_perf: unknown operation in PERF_BW_OPS: $op" >&2; failures=$((failures + 1)) ;;
      esac
    done
  done
  echo "guest_perf: bandwidth repeat $r done after ${SECONDS}s"
done
echo "guest_perf: bandwidth done after ${SECONDS}s"
if ((strace_mode)); then
  echo "tool,bytes,iterations,side,syscall,calls" >"$strace_csv"
  if [[ "$syscall_counter" == perf ]]; then
    # perf finds the tracepoint through tracefs.
    grep -q ' /sys/kernel/tracing ' /proc/mounts ||
      mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true
  fi
  if [[ "$syscall_counter" != strace && "$syscall_counter" != perf ]]; then
    echo "guest_perf: PERF_SYSCALL_COUNTER=$syscall_counter: want strace or perf" >&2
    failures=$((failures + 1))
  elif ! command -v "$syscall_counter" >/dev/null; then
    echo "guest_perf: PERF_STRACE=1 but no $syscall_counter in the guest (install it on the host: build_initramfs.sh takes it from there)" >&2
    failures=$((failures + 1))
  elif [[ "$syscall_counter" == perf ]] && ! perf stat -e raw_syscalls:sys_enter -o /dev/null true 2>"$raw/perf-probe.txt"; then
    echo "guest_perf: perf cannot count raw_syscalls:sys_enter here: $(head -3 "$raw/perf-probe.txt")" >&2
    failures=$((failures + 1))
  else
    for size in "${strace_sizes[@]}"; do
      for n in "${strace_counts[@]}"; do
        strace_run ib_send_lat "$size" "$n"
        strace_run rdma_pingpong_copy "$size" "$n"
        if ((zero_copy)); then strace_run rdma_pingpong_zero_copy "$size" "$n"; fi
        for variant in ${variants[@]+"${variants[@]}"}; do strace_run "variant:${variant%%:*}" "$size" "$n"; done
      done
    done
    strace_summary | tee "$strace_table"
  fi
  echo "guest_perf: system call counts done after ${SECONDS}s"
fi

if ((profile_mode)); then
  if ! command -v perf >/dev/null; then
    echo "guest_perf: PERF_PROFILE=1 but no perf in the guest (install it on the host: build_initramfs.sh takes it from there)" >&2
    failures=$((failures + 1))
  else
    echo 0 >/proc/sys/kernel/kptr_restrict 2>/dev/null || true
    echo -1 >/proc/sys/kernel/perf_event_paranoid 2>/dev/null || true
    profile_run ib_send_lat
    profile_run rdma_pingpong_zero_copy
    if command -v strace >/dev/null; then
      name="profile-ib_send_lat-${profile_size}B-strace"
      step_timeout=$strace_timeout run_pair "$name" \
        strace -c -f -o "$raw/$name-server.strace" \
        ib_send_lat -d "$RXE_B" -x "$GID_B" -s "$profile_size" -n 2000 -F -p @PORT@ -- \
        strace -c -f -o "$raw/$name-client.strace" \
        ib_send_lat -d "$RXE_A" -x "$GID_A" -s "$profile_size" -n 2000 -F -p @PORT@ "$IP_B" || true
      cat "$raw/$name-client.strace" || true
    fi
  fi
  echo "guest_perf: profiles done after ${SECONDS}s"
fi

if ((events_mode)); then
  echo "tool,iterations,command,event,function,count" >"$events_csv"
  if ! command -v perf >/dev/null; then
    echo "guest_perf: PERF_EVENTS=1 but no perf in the guest (install it on the host: build_initramfs.sh takes it from there)" >&2
    failures=$((failures + 1))
  elif ! events_probe; then
    echo "guest_perf: PERF_EVENTS=1 but perf can count none of the tracepoints here" >&2
    failures=$((failures + 1))
  else
    echo -1 >/proc/sys/kernel/perf_event_paranoid 2>/dev/null || true
    events_pairs=(ib_send_lat rdma_pingpong)
    for variant in ${variants[@]+"${variants[@]}"}; do events_pairs+=("variant:${variant%%:*}"); done
    for n in "${events_counts[@]}"; do
      for pair in "${events_pairs[@]}"; do events_run "$pair" "$n"; done
    done
    events_summary | tee "$events_table"
  fi
  echo "guest_perf: kernel events done after ${SECONDS}s"
fi

# --- The table: per size, the median over repeats of each run's figure, and
# the range [min-max] over repeats. -------------------------------------------
summarize() {
  awk -F, -v repeats="$repeats" '
    function median(list,   n, a, i, j, t) {
      n = split(list, a, " ")
      for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] + 0 > t + 0; j--) a[j + 1] = a[j]; a[j + 1] = t }
      lo[0] = a[1]; hi[0] = a[n]
      return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    function stat(key,   m) {
      if (!(key in v)) { s_med = "n/a"; s_best = "n/a"; s_rng = ""; lo[0] = 0; return 0 }
      m = median(v[key]); s_med = sprintf("%.2f", m); s_best = sprintf("%.2f", lo[0])
      s_rng = sprintf("%.2f-%.2f", lo[0], hi[0]); return m
    }
    FILENAME ~ /latency/ && FNR > 1 {
      k = $2 SUBSEP $3; v[k "min"] = v[k "min"] " " $4; v[k "typ"] = v[k "typ"] " " $6
      if ($3 == "rdma_pingpong_inline_auto") went[$2] = $11
      if ($3 == "rdma_pingpong_inline_off_zero_copy") zc_rows = 1
      size[$2] = 1; run[$2 SUBSEP $3 SUBSEP $1] = $4
      if ($3 ~ /^rdma_pingpong/ && !($3 in ours)) { ours[$3] = 1; ours_list[++ours_n] = $3 }
    }
    FILENAME ~ /bw/ && FNR > 1 && $2 == bsize { b[$3] = b[$3] " " $6 }
    END {
      printf "One-way latency, us, rxe0 -> rxe1 across the veth, qemu TCG, %d interleaved repeats.\n", repeats
      printf "t_min: best of the repeats / median of the repeats [min-max]; t_typ: median over the repeats of t_typical.\n"
      printf "Ratios: of the best t_min and of the median t_min. perftest disables inline on rxe: compare it with inline off.\n"
      if (zc_rows) printf "Zero copy: rdma_pingpong --inline=off --zero_copy; its ratio is to ib_send_lat.\n"
      printf "%5s | %-31s %-6s | %-31s %-6s | %-11s | %-31s %-7s %-11s | %-12s", "bytes",
        "ours t_min, inline off", "t_typ", "ib_send_lat t_min", "t_typ", "ratio b/m", "ours t_min, inline on", "inline", "on/off b/m", "ib_write_lat"
      if (zc_rows) printf " | %-31s %-6s %-11s", "ours t_min, zero copy", "t_typ", "ratio b/m"
      printf "\n"
      n = 0; for (s in size) sorted[++n] = s + 0
      for (i = 2; i <= n; i++) { t = sorted[i]; for (j = i - 1; j >= 1 && sorted[j] > t; j--) sorted[j + 1] = sorted[j]; sorted[j + 1] = t }
      for (i = 1; i <= n; i++) {
        s = sorted[i]
        off = stat(s SUBSEP "rdma_pingpong_inline_off" "min"); off_b = lo[0]; off_s = s_best " / " s_med " [" s_rng "]"
        stat(s SUBSEP "rdma_pingpong_inline_off" "typ"); off_t = s_med
        pt = stat(s SUBSEP "ib_send_lat" "min"); pt_b = lo[0]; pt_s = s_best " / " s_med " [" s_rng "]"
        stat(s SUBSEP "ib_send_lat" "typ"); pt_t = s_med
        on = stat(s SUBSEP "rdma_pingpong_inline_auto" "min"); on_b = lo[0]; on_s = s_best " / " s_med " [" s_rng "]"
        wt = stat(s SUBSEP "ib_write_lat" "min"); wt_s = s_best " / " s_med
        printf "%5d | %-31s %-6s | %-31s %-6s | %-11s | %-31s %-7s %-11s | %-12s", s,
          off_s, off_t, pt_s, pt_t,
          (pt > 0 && off > 0 ? sprintf("%.2f/%.2f", off_b / pt_b, off / pt) : "n/a"),
          on_s, went[s], (off > 0 && on > 0 ? sprintf("%.2f/%.2f", on_b / off_b, on / off) : "n/a"), wt_s
        if (zc_rows) {
          zc = stat(s SUBSEP "rdma_pingpong_inline_off_zero_copy" "min"); zc_b = lo[0]; zc_s = s_best " / " s_med " [" s_rng "]"
          stat(s SUBSEP "rdma_pingpong_inline_off_zero_copy" "typ"); zc_t = s_med
          printf " | %-31s %-6s %-11s", zc_s, zc_t, (pt > 0 && zc > 0 ? sprintf("%.2f/%.2f", zc_b / pt_b, zc / pt) : "n/a")
        }
        printf "\n"
      }
      # Paired: a run over the ib_send_lat run of its own repeat and size,
      # seconds apart, so that the host drifting between repeats (seen:
      # ib_send_lat 13% slower in the first 3 repeats of 8 than in the
      # last 5, at 4096 B) does not favour the tool that got the fast ones.
      if (ours_n > 0) {
        printf "\nPaired t_min ratio: each repeat'"'"'s run over ib_send_lat'"'"'s run of the same repeat and size; median of the repeats [min-max].\n"
        printf "%-40s", "tool"
        for (i = 1; i <= n; i++) printf " | %19d", sorted[i]
        printf "\n"
        for (t = 1; t <= ours_n; t++) {
          printf "%-40s", ours_list[t]
          for (i = 1; i <= n; i++) {
            list = ""
            for (rep = 1; rep <= repeats; rep++) {
              a = sorted[i] SUBSEP ours_list[t] SUBSEP rep; p = sorted[i] SUBSEP "ib_send_lat" SUBSEP rep
              if ((a in run) && (p in run) && run[p] > 0) list = list " " sprintf("%.4f", run[a] / run[p])
            }
            if (list == "") { printf " | %19s", "n/a"; continue }
            m = median(list)
            printf " | %5.3f [%5.3f-%5.3f]", m, lo[0], hi[0]
          }
          printf "\n"
        }
      }
      printf "\nBandwidth at %s B, Gb/s average: median of %d repeats [min-max]\n", bsize, repeats
      split("ib_send_bw rdma_bw_send rdma_bw_send_zero_copy rdma_bw_send_zero_copy_blocking ib_write_bw rdma_bw_write", tools, " ")
      for (i = 1; i <= 6; i++) {
        t = tools[i]
        if (t in b) { m = median(b[t]); med[t] = m; printf "  %-31s %8.3f [%.3f-%.3f]\n", t, m, lo[0], hi[0] }
        else if (t != "rdma_bw_send_zero_copy_blocking") printf "  %-31s      n/a\n", t
      }
      if (med["ib_send_bw"] > 0 && med["rdma_bw_send"] > 0) printf "  rdma_bw send / ib_send_bw:   %.2fx\n", med["rdma_bw_send"] / med["ib_send_bw"]
      if (med["ib_send_bw"] > 0 && med["rdma_bw_send_zero_copy"] > 0) printf "  rdma_bw send zero copy (window) / ib_send_bw: %.2fx\n", med["rdma_bw_send_zero_copy"] / med["ib_send_bw"]
      if (med["ib_send_bw"] > 0 && med["rdma_bw_send_zero_copy_blocking"] > 0) printf "  rdma_bw send zero copy (blocking) / ib_send_bw: %.2fx\n", med["rdma_bw_send_zero_copy_blocking"] / med["ib_send_bw"]
      if (med["ib_write_bw"] > 0 && med["rdma_bw_write"] > 0) printf "  rdma_bw write / ib_write_bw: %.2fx\n", med["rdma_bw_write"] / med["ib_write_bw"]
    }' bsize="${bw_sizes[-1]}" "$lat_csv" bsize="${bw_sizes[-1]}" "$bw_csv"
}

clocksource "at the end"
summarize | tee "$table"
"$SOFTROCE_DIR/guest_bw_table.sh" "$bw_csv" "$bw_write_window" | tee "$bw_table"
if [[ -n "${PERF_SUMMARY:-}" ]]; then cp "$table" "$PERF_SUMMARY"; fi
echo "guest_perf: finished in ${SECONDS}s with $failures failed run(s), $invalid perftest run(s) without figures"
if ((failures)); then exit 1; fi
