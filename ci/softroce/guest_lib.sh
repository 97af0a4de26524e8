# shellcheck shell=bash
# Helpers shared by the guest scripts (guest_smoke.sh, guest_ci.sh): packet
# capture on veth0 and the IP TOS census of a capture. Source after
# guest_topology.sh; uses $out (the artifact directory) and $IP_A / $IP_B.

capture_pid=''
capture_name=''
start_capture() { # name: tcpdump on veth0, UDP/4791, into $out/<name>.pcap
  local name=$1
  capture_name=$name
  # Buffered capture with a large ring: --immediate-mode wakes tcpdump per
  # packet, and under TCG it then loses packets ("dropped by kernel").
  tcpdump -i veth0 -n -U -B 16384 -Z root -w "$out/$name.pcap" udp port 4791 \
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

# The count of packets the capture's filter had taken when stop_capture saw
# it quiet ('' when it never did): the run's traffic, all of which the pcap
# must hold.
capture_quiet_seen=''

stop_capture() {
  # Packets sit in a capture ring block until it fills or its timeout retires
  # it, and a block still unread at SIGINT is lost: so ask tcpdump for its
  # counts (SIGUSR1) every 0.5 s until the filter has taken nothing new since
  # the last answer and every packet it took is written (or dropped by the
  # kernel, which judge_tos fails), and only then stop it. A packet that
  # still arrives after that quiet point (rxe may send a late retransmission
  # or ACK a second after the run) can sit unread in the ring at SIGINT:
  # judge_tos counts it as late, not as a loss of the run's. A loaded guest
  # only makes this take longer; the bound (60 s) is for a tcpdump that
  # stopped reading, which the judge then reports as an incomplete capture.
  local try captured seen dropped last=''
  capture_quiet_seen=''
  for ((try = 0; try < 120; try++)); do
    kill -USR1 "$capture_pid" 2>/dev/null || break
    sleep 0.5
    captured=$(capture_stat "$capture_name" captured)
    seen=$(capture_stat "$capture_name" 'received by filter')
    dropped=$(capture_stat "$capture_name" 'dropped by kernel')
    # Linux counts a packet the kernel dropped as received by the filter too.
    if [[ "$captured $seen $dropped" =~ ^[0-9]+\ [0-9]+\ [0-9]+$ && "$seen" == "$last" ]] &&
      ((captured + dropped == seen)); then
      capture_quiet_seen=$seen
      break
    fi
    last=$seen
  done
  kill -INT "$capture_pid" 2>/dev/null || true
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

# Prints "<packets> <with tos> <forward> <reverse> <tos histogram>" for a capture:
# packets in each direction between IP_A and IP_B and how many carry TOS $2.
tos_counts() { # pcap, tos (e.g. 0x88)
  tcpdump -n -v -t -r "$1" 2>/dev/null | awk -v tos="$2" -v a="$IP_A" -v b="$IP_B" '
    /^IP \(tos / { t = $3; sub(",", "", t); next }
    / > / && t != "" {
      n++; hist[t]++; if (t == tos) ok++
      split($1, src, "."); s = src[1] "." src[2] "." src[3] "." src[4]
      if (s == a) fwd++; else if (s == b) rev++
      t = ""
    }
    END {
      h = ""; for (k in hist) h = h k "=" hist[k] " "
      printf "%d %d %d %d %s\n", n, ok, fwd, rev, h
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
# filter took up to the point the capture went quiet), it holds at least
# <min_packets> packets, both directions, and every one carries IP TOS <tos>.
# <run> describes the run and leads the line.
judge_tos() { # label, name, tos, min_packets, run_ok (0|1), run
  local label=$1 name=$2 tos=$3 min=$4 run_ok=$5 run=$6
  local packets with fwd rev hist seen dropped late=''
  read -r packets with fwd rev hist < <(tos_counts "$out/$name.pcap" "$tos")
  read -r seen dropped < <(capture_loss "$name")
  local detail="$with/$packets RoCE packets with IP TOS $tos ($fwd $IP_A->$IP_B, $rev back; TOS seen: ${hist:-none})"
  if [[ -n "$capture_quiet_seen" && "$seen" =~ ^[0-9]+$ ]] && ((seen > packets)); then
    late=" ($((seen - packets)) matched after the capture went quiet at $capture_quiet_seen, left unread at its stop)"
  fi
  if ((!run_ok)); then
    report FAIL "$label: $run; $detail"
  elif [[ "$dropped" != 0 || -z "$capture_quiet_seen" ]] || ((packets < capture_quiet_seen)); then
    local quiet="never quiet"
    [[ -n "$capture_quiet_seen" ]] && quiet="$capture_quiet_seen when quiet"
    report FAIL "$label: capture incomplete ($seen matched, $quiet, $packets captured, $dropped dropped); $run; $detail"
  elif ((packets >= min && with == packets && fwd > 0 && rev > 0)); then
    report PASS "$label: $run; $detail$late"
  else
    report FAIL "$label: $run; $detail$late"
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
  fi
}
