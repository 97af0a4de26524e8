#!/usr/bin/env bash
# Our tools beside perftest on the same Soft-RoCE devices, inside the VM
# (run by run_perf.sh, or by guest_ci.sh when the binaries are present).
# Needs rdma_pingpong and rdma_bw on PATH (run_vm.sh --file).
#
#   latency, for each size of PERF_SIZES, PERF_REPEATS times, interleaved:
#     ib_send_lat, ib_write_lat, rdma_pingpong --inline=off, --inline=auto
#     server on rxe1 (RXE_B), client on rxe0 (RXE_A), -x <GID index>,
#     PERF_ITERATIONS round trips each, the TCP exchange across the veth
#   bandwidth at each size of PERF_BW_SIZES (default PERF_BW_SIZE, 64 KiB),
#   PERF_REPEATS times, interleaved:
#     ib_send_bw vs rdma_bw --op=send, ib_write_bw vs rdma_bw --op=write
#     (the windowed WRITE, --write_mode=window: PERF_BW_WRITE_WINDOW ops
#     outstanding, default 128 as ib_write_bw's tx-depth); with
#     PERF_BW_BLOCKING=1 also rdma_bw --write_mode=blocking after each
#     and, for each byte count of PERF_BW_IN_FLIGHT, the windowed WRITE with
#     --rdma_in_flight=N (tool rdma_bw_write_inflight_N in perf_bw.csv)
#   PERF_LATENCY=0 leaves the latency part out (bandwidth only).
#
# perftest silently disables inline on rxe ("Device not recognized to
# implement inline feature"), so its rows compare with our inline-off rows.
# Writes to $ARTIFACTS (/artifacts):
#   perf_latency.csv  repeat,bytes,tool,t_min_us,...,p99_9_us (one row a run)
#   perf_bw.csv       repeat,bytes,tool,iterations,bw_peak_gbps,bw_average_gbps,
#                     msg_rate_mpps,measured_at
#   perf_summary.txt  the side-by-side table (also $PERF_SUMMARY when set)
#   perf_bw_table.md  the bandwidth table of docs/performance.md: every
#                     repeat, the medians and the ratios
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
latency=${PERF_LATENCY:-1}
step_timeout=${PERF_STEP_TIMEOUT:-120}
lat_csv="$out/perf_latency.csv"
bw_csv="$out/perf_bw.csv"
table="$out/perf_summary.txt"
bw_table="$out/perf_bw_table.md"
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
  if wait_listening "$port"; then
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

# perftest latency: the line after the header holding t_typical is
#   #bytes #iterations t_min t_max t_typical t_avg t_stdev 99% 99.9%
perftest_lat() { # repeat, size, tool
  local r=$1 size=$2 tool=$3 name="$3-$2B-r$1"
  run_pair "$name" \
    "$tool" -d "$RXE_B" -x "$GID_B" -s "$size" -n "$iterations" -F -p @PORT@ -- \
    "$tool" -d "$RXE_A" -x "$GID_A" -s "$size" -n "$iterations" -F -p @PORT@ "$IP_B" || return 0
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

ours_lat() { # repeat, size, inline mode (off|auto)
  local r=$1 size=$2 mode=$3 name="rdma_pingpong-inline_$3-$2B-r$1"
  local common=(rdma_pingpong --backend=ibverbs --sizes="$size" --inline="$mode")
  run_pair "$name" \
    "${common[@]}" --device="$RXE_B" --gid_index="$GID_B" --server --listen="$IP_B:@PORT@" -- \
    "${common[@]}" --device="$RXE_A" --gid_index="$GID_A" --connect="$IP_B:@PORT@" \
    --iterations="$iterations" --warmup=0 --csv="$raw/$name.csv" || return 0
  # Our CSV names its columns; take them by name.
  awk -F, -v r="$r" -v tool="rdma_pingpong_inline_$mode" '
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

ours_bw() { # repeat, op (send|write|write_blocking|write_inflight_N), size
  local r=$1 op=$2 bw_size=$3 name="rdma_bw-$2-$3-r$1" mode=()
  case "$op" in
    write) mode=(--write_mode=window --write_window="$bw_write_window") ;;
    write_blocking) mode=(--write_mode=blocking) ;;
    write_inflight_*)
      mode=(--write_mode=window --write_window="$bw_write_window" --rdma_in_flight="${op#write_inflight_}") ;;
  esac
  local common=(rdma_bw --backend=ibverbs --sizes="$bw_size" --op="${op%%_*}")
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

echo "guest_perf: sizes ${sizes[*]}, $iterations iterations, $repeats repeats; bandwidth at ${bw_sizes[*]} B x $bw_iterations"
SECONDS=0
for ((r = 1; r <= repeats * latency; r++)); do
  for size in "${sizes[@]}"; do
    perftest_lat "$r" "$size" ib_send_lat
    perftest_lat "$r" "$size" ib_write_lat
    ours_lat "$r" "$size" off
    ours_lat "$r" "$size" auto
  done
  echo "guest_perf: latency repeat $r done after ${SECONDS}s"
done
for ((r = 1; r <= repeats; r++)); do
  for size in "${bw_sizes[@]}"; do
    perftest_bw "$r" ib_send_bw "$size"
    ours_bw "$r" send "$size"
    perftest_bw "$r" ib_write_bw "$size"
    ours_bw "$r" write "$size"
    if ((bw_blocking)); then ours_bw "$r" write_blocking "$size"; fi
    for n in ${bw_in_flight[@]+"${bw_in_flight[@]}"}; do ours_bw "$r" "write_inflight_$n" "$size"; done
  done
  echo "guest_perf: bandwidth repeat $r done after ${SECONDS}s"
done
echo "guest_perf: bandwidth done after ${SECONDS}s"

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
      size[$2] = 1
    }
    FILENAME ~ /bw/ && FNR > 1 && $2 == bsize { b[$3] = b[$3] " " $6 }
    END {
      printf "One-way latency, us, rxe0 -> rxe1 across the veth, qemu TCG, %d interleaved repeats.\n", repeats
      printf "t_min: best of the repeats / median of the repeats [min-max]; t_typ: median over the repeats of t_typical.\n"
      printf "Ratios: of the best t_min and of the median t_min. perftest disables inline on rxe: compare it with inline off.\n"
      printf "%5s | %-31s %-6s | %-31s %-6s | %-11s | %-31s %-7s %-11s | %-12s\n", "bytes",
        "ours t_min, inline off", "t_typ", "ib_send_lat t_min", "t_typ", "ratio b/m", "ours t_min, inline on", "inline", "on/off b/m", "ib_write_lat"
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
        printf "%5d | %-31s %-6s | %-31s %-6s | %-11s | %-31s %-7s %-11s | %-12s\n", s,
          off_s, off_t, pt_s, pt_t,
          (pt > 0 && off > 0 ? sprintf("%.2f/%.2f", off_b / pt_b, off / pt) : "n/a"),
          on_s, went[s], (off > 0 && on > 0 ? sprintf("%.2f/%.2f", on_b / off_b, on / off) : "n/a"), wt_s
      }
      printf "\nBandwidth at %s B, Gb/s average: median of %d repeats [min-max]\n", bsize, repeats
      split("ib_send_bw rdma_bw_send ib_write_bw rdma_bw_write", tools, " ")
      for (i = 1; i <= 4; i++) {
        t = tools[i]
        if (t in b) { m = median(b[t]); med[t] = m; printf "  %-14s %8.3f [%.3f-%.3f]\n", t, m, lo[0], hi[0] }
        else printf "  %-14s      n/a\n", t
      }
      if (med["ib_send_bw"] > 0 && med["rdma_bw_send"] > 0) printf "  rdma_bw send / ib_send_bw:   %.2fx\n", med["rdma_bw_send"] / med["ib_send_bw"]
      if (med["ib_write_bw"] > 0 && med["rdma_bw_write"] > 0) printf "  rdma_bw write / ib_write_bw: %.2fx\n", med["rdma_bw_write"] / med["ib_write_bw"]
    }' bsize="${bw_sizes[-1]}" "$lat_csv" bsize="${bw_sizes[-1]}" "$bw_csv"
}

summarize | tee "$table"
"$SOFTROCE_DIR/guest_bw_table.sh" "$bw_csv" "$bw_write_window" | tee "$bw_table"
if [[ -n "${PERF_SUMMARY:-}" ]]; then cp "$table" "$PERF_SUMMARY"; fi
echo "guest_perf: finished in ${SECONDS}s with $failures failed run(s), $invalid perftest run(s) without figures"
if ((failures)); then exit 1; fi
