# shellcheck shell=bash
# Helpers shared by the guest scripts (guest_smoke.sh, guest_ci.sh): packet
# capture on veth0 and the IP TOS census of a capture. Source after
# guest_topology.sh; uses $out (the artifact directory) and $IP_A / $IP_B.

capture_pid=''
capture_name=''
# The capture's filter: the RoCE traffic (UDP/4791) and the filler datagrams
# stop_capture sends to the discard port to flush the capture ring.
capture_filter='udp and (port 4791 or port 9)'
start_capture() { # name: tcpdump on veth0 ($capture_filter) into $out/<name>.pcap
  local name=$1
  capture_name=$name
  # Buffered capture with a large ring: --immediate-mode wakes tcpdump per
  # packet, and under TCG it then loses packets ("dropped by kernel").
  # shellcheck disable=SC2086 # the filter is one argument per word
  tcpdump -i veth0 -n -U -B 16384 -Z root -w "$out/$name.pcap" $capture_filter \
    2>"$out/$name.tcpdump.txt" &
  capture_pid=$!
  for _ in {1..100}; do
    grep -q 'listening on' "$out/$name.tcpdump.txt" && return 0
    sleep 0.1
  done
  echo "tcpdump did not start:" >&2
  cat "$out/$name.tcpdump.txt" >&2
  return 1
}

# Prints the last "<count>" tcpdump reported for statistic <what> ("captured",
# "received by filter", "dropped by kernel") in capture <name>'s log, or "?".
capture_stat() { # name, what
  local n
  n=$(grep -o "[0-9]* packets\? $2" "$out/$1.tcpdump.txt" | tail -1 | cut -d' ' -f1)
  echo "${n:-?}"
}

# Sends <count> filler datagrams of 1400 bytes from $IP_A to the discard port
# of $IP_B across veth0 (policy routing takes them over the veth; nothing
# listens, the kernel answers with ICMP, which the filter does not take).
send_fillers() { # count
  local filler i
  filler=$(printf '%1400s' '')
  for ((i = 0; i < $1; i++)); do
    printf '%s' "$filler" >"/dev/udp/$IP_B/9" 2>/dev/null || return 1
  done
}

# The count of packets the capture's filter had taken when stop_capture saw
# it quiet ('' when it never did): the run's traffic, all of which the pcap
# must hold; and how many filler datagrams it sent to flush the ring.
capture_quiet_seen=''
capture_fillers=0

stop_capture() {
  # tcpdump reads the capture ring a block (256 KiB) at a time: a block
  # reaches it when it fills or when the kernel's block timer (1 s) retires
  # it, and a block still unread at SIGINT is lost. So ask tcpdump for its
  # counts (SIGUSR1) every 0.5 s until the filter has taken nothing new since
  # the last answer and every packet it took is written (or dropped by the
  # kernel, which judge_tos fails), and only then stop it.
  #
  # If the counts stand still for three answers with packets taken but not
  # written, the kernel is not retiring the ring's open block (7.2 held two of
  # a run's packets there for a whole minute): from then on send 64 filler
  # datagrams of 1400 bytes (about a third of a block) at each answer until
  # tcpdump has written (or the kernel dropped) as many packets as the filter
  # had taken before the first filler. The ring is in order, so those are all
  # of the run's; filler left in the ring at the stop is lost harmlessly. The
  # filler is in the pcap, on its own port, and the census leaves it out.
  #
  # A packet that still arrives after the quiet point (rxe may send a late
  # retransmission or ACK a second after the run) can sit unread at SIGINT:
  # judge_tos counts it as late, not as a loss of the run's. The bound (60 s)
  # is for a tcpdump that stopped reading, which the judge then reports as an
  # incomplete capture.
  local try captured seen dropped last='' last_captured='' still=0 fill_from=''
  capture_quiet_seen=''
  capture_fillers=0
  for ((try = 0; try < 120; try++)); do
    kill -USR1 "$capture_pid" 2>/dev/null || break
    sleep 0.5
    captured=$(capture_stat "$capture_name" captured)
    seen=$(capture_stat "$capture_name" 'received by filter')
    dropped=$(capture_stat "$capture_name" 'dropped by kernel')
    if [[ "$captured $seen $dropped" =~ ^[0-9]+\ [0-9]+\ [0-9]+$ ]]; then
      # Linux counts a packet the kernel dropped as received by the filter too.
      if [[ -n "$fill_from" ]]; then
        if ((captured + dropped >= fill_from)); then
          capture_quiet_seen=$fill_from
          break
        fi
      elif ((captured + dropped == seen)); then
        if [[ "$seen" == "$last" ]]; then
          capture_quiet_seen=$seen
          break
        fi
        still=0
      elif [[ "$seen" == "$last" && "$captured" == "$last_captured" ]]; then
        still=$((still + 1))
        ((still < 2)) || fill_from=$seen
      else
        still=0
      fi
      if [[ -n "$fill_from" ]] && ((capture_fillers < 4096)) && send_fillers 64; then
        capture_fillers=$((capture_fillers + 64))
      fi
    fi
    last=$seen
    last_captured=$captured
  done
  kill -INT "$capture_pid" 2>/dev/null || true
  # tcpdump ends at once on SIGINT; one that does not must not hold the VM
  # until its bound: after ${CAPTURE_STOP_WAIT:-30} s it is killed.
  local tenths state
  for ((tenths = 0; tenths < ${CAPTURE_STOP_WAIT:-30} * 10; tenths++)); do
    state=Z
    read -r _ _ state _ <"/proc/$capture_pid/stat" 2>/dev/null || true
    [[ "$state" == Z ]] && break # gone, or exited and not yet reaped
    sleep 0.1
  done
  if [[ "$state" != Z ]]; then
    echo "stop_capture: the capture (pid $capture_pid) still ran ${CAPTURE_STOP_WAIT:-30} s after SIGINT; killed" >&2
    kill -KILL "$capture_pid" 2>/dev/null || true
  fi
  wait "$capture_pid" 2>/dev/null || true
}

wait_listening() { # tcp port, [tries 0.1 s apart, default 100]
  local try
  for ((try = 0; try < ${2:-100}; try++)); do
    ss -Hltn "sport = :$1" | grep -q . && return 0
    sleep 0.1
  done
  return 1
}

# Prints "<packets> <with tos> <forward> <reverse> <fillers> <tos histogram>"
# for a capture: RoCE packets in each direction between IP_A and IP_B, how
# many carry TOS $2, and stop_capture's filler datagrams (to port 9), which
# the other counts leave out.
tos_counts() { # pcap, tos (e.g. 0x88)
  tcpdump -n -v -t -r "$1" 2>/dev/null | awk -v tos="$2" -v a="$IP_A" -v b="$IP_B" '
    /^IP \(tos / { t = $3; sub(",", "", t); next }
    / > / && t != "" {
      dst = $3; sub(":$", "", dst); k = split(dst, d, ".")
      if (d[k] == "9") { fill++; t = ""; next }
      n++; hist[t]++; if (t == tos) ok++
      split($1, src, "."); s = src[1] "." src[2] "." src[3] "." src[4]
      if (s == a) fwd++; else if (s == b) rev++
      t = ""
    }
    END {
      h = ""; for (k in hist) h = h k "=" hist[k] " "
      printf "%d %d %d %d %d %s\n", n, ok, fwd, rev, fill, h
    }'
}


# Prints "<matched by filter> <dropped by kernel>" for capture <name>: a
# check needs the whole connection, so a capture that lost packets must fail
# it visibly rather than pass on a sample.
capture_loss() { # name
  echo "$(capture_stat "$1" 'received by filter') $(capture_stat "$1" 'dropped by kernel')"
}

# Reports the traffic-class check of capture <name> (stopped by
# stop_capture): PASS when the run passed (<run_ok> 1), the capture is
# complete (the kernel dropped nothing and the pcap holds every packet the
# filter took up to the point the capture went quiet, filler included), it
# holds at least <min_packets> RoCE packets, both directions, and every one
# carries IP TOS <tos>. <run> describes the run and leads the line.
judge_tos() { # label, name, tos, min_packets, run_ok (0|1), run
  local label=$1 name=$2 tos=$3 min=$4 run_ok=$5 run=$6
  local packets with fwd rev fillers hist seen dropped late='' flushed=''
  read -r packets with fwd rev fillers hist < <(tos_counts "$out/$name.pcap" "$tos")
  read -r seen dropped < <(capture_loss "$name")
  # Filler the filter took but tcpdump never wrote is not a late packet.
  local written=$((packets + fillers)) unread_fillers=$((capture_fillers > fillers ? capture_fillers - fillers : 0))
  local detail="$with/$packets RoCE packets with IP TOS $tos ($fwd $IP_A->$IP_B, $rev back; TOS seen: ${hist:-none})"
  if [[ -n "$capture_quiet_seen" && "$seen" =~ ^[0-9]+$ ]] && ((seen > written + unread_fillers)); then
    late=" ($((seen - written - unread_fillers)) matched after the capture went quiet at $capture_quiet_seen, left unread at its stop)"
  fi
  if ((capture_fillers > 0)); then
    flushed=" (the kernel held the capture's last block: flushed with $capture_fillers filler datagrams, $fillers in the pcap)"
  fi
  if ((!run_ok)); then
    report FAIL "$label: $run; $detail"
  elif [[ "$dropped" != 0 || -z "$capture_quiet_seen" ]] || ((written < capture_quiet_seen)); then
    local quiet="never quiet"
    [[ -n "$capture_quiet_seen" ]] && quiet="$capture_quiet_seen when quiet"
    report FAIL "$label: capture incomplete ($seen matched, $quiet, $packets captured, $fillers filler, $dropped dropped); $run; $detail$flushed"
  elif ((packets >= min && with == packets && fwd > 0 && rev > 0)); then
    report PASS "$label: $run; $detail$flushed$late"
  else
    report FAIL "$label: $run; $detail$flushed$late"
  fi
}

summary=${summary:-$out/summary.txt}
failures=${failures:-0}
report() { # PASS|FAIL|INFO, text
  if [[ "$1" == FAIL ]]; then failures=$((failures + 1)); fi
  printf '%-4s %s\n' "$1" "$2" | tee -a "$summary"
}

# Prints "<tests run> <passed>" from a gtest log.
gtest_counts() {
  local ran passed
  ran=$(grep -o '^\[==========\] [0-9]* tests\? from' "$1" | tail -1 | awk '{print $2}')
  passed=$(grep -o '^\[  PASSED  \] [0-9]*' "$1" | tail -1 | awk '{print $4}')
  echo "${ran:-0} ${passed:-0}"
}

# The end-to-end suite over libibverbs (client on $RXE_A, server on $RXE_B,
# the handshake across the veth) at $scale percent, reported as one check.
run_e2e_suite() { # label, log name
  local label=$1 name=$2 rc=0 ran passed failed_tests
  rxe_counters "$RXE_A" >"$out/$RXE_A.counters-before"
  rxe_counters "$RXE_B" >"$out/$RXE_B.counters-before"
  # E2E_GTEST_ARGS (e.g. "--gtest_filter=*16MiB* --gtest_repeat=5") narrows
  # the run when investigating one case.
  # shellcheck disable=SC2086 # word splitting of the extra arguments wanted
  RDMA_TEST_SCALE=$scale RDMA_TEST_LISTEN="$IP_B:0" timeout "$step_timeout" e2e_ibverbs_test \
    --gtest_output="xml:$out/$name.xml" ${E2E_GTEST_ARGS:-} >"$out/$name.log" 2>&1 || rc=$?
  cat "$out/$name.log"
  read -r ran passed < <(gtest_counts "$out/$name.log")
  failed_tests=$(grep '^\[  FAILED  \] [A-Za-z]' "$out/$name.log" | sort -u | awk '{print $4}' | paste -sd' ' - || true)
  if ((rc == 0 && ran > 0 && passed == ran)); then
    report PASS "$label ($RXE_A client, $RXE_B server, RDMA_TEST_SCALE=$scale%): $passed/$ran tests passed"
  else
    report FAIL "$label: $passed/$ran tests passed (status $rc)${failed_tests:+; failed: $failed_tests}"
    rxe_diagnostics
  fi
}

# Both devices' hw counters as "name=value" lines (lifespan, the sampling
# period, left out), for rxe_diagnostics' differences.
rxe_counters() { # device
  local dir=/sys/class/infiniband/$1/ports/1/hw_counters file
  [[ -d "$dir" ]] || return 0
  for file in "$dir"/*; do
    [[ "${file##*/}" == lifespan ]] && continue
    echo "${file##*/}=$(cat "$file" 2>/dev/null || echo 0)"
  done
}

# After a failure over rxe: what the kernel saw, on the console (CI keeps
# only that), since a provider may fail a QP without telling the process.
# The counters are what the run added ($out/<dev>.counters-before, written by
# run_e2e_suite before it), else totals since boot.
rxe_diagnostics() {
  local dev added
  for dev in "$RXE_A" "$RXE_B"; do
    if [[ ! -d "/sys/class/infiniband/$dev/ports/1/hw_counters" ]]; then
      report INFO "rxe counters $dev: no hw_counters"
      continue
    fi
    added=$(rxe_counters "$dev" | awk -F= -v before="$out/$dev.counters-before" '
      BEGIN { while ((getline line < before) > 0) { split(line, kv, "="); was[kv[1]] = kv[2] } }
      $2 - was[$1] != 0 { printf "%s%s+%d", sep, $1, $2 - was[$1]; sep = " " }')
    report INFO "rxe counters $dev, added by the run: ${added:-none}"
  done
  report INFO "kernel log: $(dmesg | grep -c 'Failed sending' || true) 'Failed sending' lines; other rxe lines and warnings follow"
  dmesg | grep -E 'rxe|WARNING|RIP:|Call Trace' | grep -v -e 'Failed sending' -e 'set active' -e 'added ' | tail -25 || true
}
