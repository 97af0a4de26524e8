#!/usr/bin/env bash
# rdma_transport over Soft-RoCE, run inside the VM by run_ci_stage.sh on
# every CI run (the project's binaries come in with --file, see
# run_ci_stage.sh):
#
#   0. the environment: guest_smoke.sh (rdma-core and perftest only), so a
#      failure below can be told apart from a broken VM
#   1. rdma_devices lists the three rxe devices with the GID the transport
#      picks (which forms an address handle) and the inline size it
#      negotiates, and finds no host traffic-class override
#   2. the QP pair test (tests/qp_pair_test.cc) rxe0 <-> rxe1 across the veth,
#      under tcpdump: with MC_IB_TC=136 every RoCE packet of its connections,
#      both ways, carries IP TOS 0x88; with MC_IB_TC=96, 0x60; unset, 0x0.
#      Its INLINE lines give what rxe granted.
#   3. the end-to-end suite (tests/e2e_test.cc) over libibverbs: client on
#      rxe0, server on rxe1, TCP handshake across the veth, at
#      RDMA_TEST_SCALE percent of the iterations (every case runs)
#   4. when present, guest_perf.sh: our tools beside perftest (unless
#      SOFTROCE_PERF=0: run_ci_stage.sh runs it on its first kernel only)
#   5. when present, rxe_probe (ci/softroce/rxe_probe.c): this kernel's rxe
#      facts (dead-peer completion, SL in query_qp, max inline, max_msg_sz,
#      GID table), INFO lines, not judged
#
# Prints one PASS/FAIL/INFO line per check into /artifacts/summary.txt and
# exits 1 if any check failed.
set -euo pipefail

# shellcheck source=ci/softroce/guest_topology.sh
source "$SOFTROCE_DIR/guest_topology.sh"

out=${ARTIFACTS:-/artifacts}
summary="$out/summary.txt"
: >"$summary"
failures=0
# shellcheck source=ci/softroce/guest_lib.sh
source "$SOFTROCE_DIR/guest_lib.sh"
step_timeout=${STEP_TIMEOUT:-300}
scale=${RDMA_TEST_SCALE:-10}
export RDMA_TEST_CLIENT_DEVICE=$RXE_A RDMA_TEST_SERVER_DEVICE=$RXE_B

# --- 0. the environment -------------------------------------------------------
smoke_rc=0
SMOKE_SUMMARY="$out/smoke-summary.txt" bash "$SOFTROCE_DIR/guest_smoke.sh" \
  >"$out/smoke.log" 2>&1 || smoke_rc=$?
sed 's/^\(PASS\|FAIL\|INFO\) /\1 environment: /' "$out/smoke-summary.txt" | tee -a "$summary"
if ((smoke_rc != 0)); then
  failures=$((failures + 1))
  echo "the VM's RDMA environment itself failed (see smoke.log): results below are suspect"
fi

# --- 1. rdma_devices ------------------------------------------------------------
devices_rc=0
timeout "$step_timeout" rdma_devices >"$out/rdma_devices.txt" 2>&1 || devices_rc=$?
cat "$out/rdma_devices.txt"
listed=$(grep -c '^rxe.*vendor 0xffffff' "$out/rdma_devices.txt" || true)
inline_lines=$(grep -c '^  inline: asked' "$out/rdma_devices.txt" || true)
chosen=$(grep -c "gid *$GID_A .*<- chosen (auto)" "$out/rdma_devices.txt" || true)
if ((devices_rc == 0 && listed == 3 && inline_lines == 3 && chosen >= 1)); then
  report PASS "rdma_devices: 3 rxe devices, RoCE v2 GID $GID_A chosen, inline negotiated on each"
else
  report FAIL "rdma_devices: status $devices_rc, $listed devices, $inline_lines inline lines, chosen GID lines $chosen"
fi
grep '^  inline: asked' "$out/rdma_devices.txt" | head -1 |
  sed "s/^  inline:/INFO rdma_devices on rxe: inline/" | tee -a "$summary" || true
# Operator facts: rxe has no mlx5 traffic_class file, and its GIDs form
# address handles (the probe the GID choice makes).
no_override=$(grep -c '^  host traffic class: none (no /sys/class/infiniband/rxe[^/]*/tc/1/traffic_class)' \
  "$out/rdma_devices.txt" || true)
probed=$(grep -c '^    why: GID [0-9]* chosen: .* that forms an address handle' "$out/rdma_devices.txt" || true)
if ((no_override == 3 && probed == 3)); then
  report PASS "rdma_devices: no host traffic-class override on rxe, every chosen GID forms an address handle"
else
  report FAIL "rdma_devices: $no_override 'no override' lines, $probed address-handle-probed GIDs (want 3 each)"
fi

# --- 2. the QP pair test, with the traffic class on the wire ------------------
qp_pair() { # label, MC_IB_TC value ('' = unset), expected TOS, gtest filter
  local label=$1 tc=$2 tos=$3 filter=$4 name="qp_pair-$1" rc=0
  start_capture "$name" || { report FAIL "$label: tcpdump did not start"; return; }
  if [[ -n "$tc" ]]; then
    MC_IB_TC=$tc timeout "$step_timeout" qp_pair_ibverbs_test --gtest_filter="$filter" \
      >"$out/$name.log" 2>&1 || rc=$?
  else
    env -u MC_IB_TC timeout "$step_timeout" qp_pair_ibverbs_test --gtest_filter="$filter" \
      >"$out/$name.log" 2>&1 || rc=$?
  fi
  stop_capture
  cat "$out/$name.log"
  local ran passed run_ok=1
  read -r ran passed < <(gtest_counts "$out/$name.log")
  if ((rc != 0 || passed != ran || ran == 0)); then run_ok=0; fi
  judge_tos "QP pair, MC_IB_TC=${tc:-unset}" "$name" "$tos" 1 "$run_ok" \
    "$passed/$ran tests passed (status $rc)"
}
qp_pair tc136 136 0x88 '*'
grep '^INLINE\|^MOVED' "$out/qp_pair-tc136.log" | sort -u | sed 's/^/INFO /' | tee -a "$summary" || true
qp_pair tc96 96 0x60 '*BringsUp*'
qp_pair unset '' 0x0 '*BringsUp*'

# --- 3. the end-to-end suite ---------------------------------------------------
run_e2e_suite "e2e suite over rxe" e2e_ibverbs

# --- 4. performance beside perftest ----------------------------------------------
if [[ "${SOFTROCE_PERF:-1}" != 0 && -f "$SOFTROCE_DIR/guest_perf.sh" ]] && command -v rdma_pingpong >/dev/null; then
  perf_rc=0
  PERF_SUMMARY="$out/perf-summary.txt" bash "$SOFTROCE_DIR/guest_perf.sh" \
    >"$out/perf.log" 2>&1 || perf_rc=$?
  cat "$out/perf.log"
  if ((perf_rc == 0)); then
    report INFO "performance beside perftest: see perf.log and the CSV files (not judged)"
  else
    report FAIL "performance run failed (status $perf_rc), see perf.log"
  fi
fi

# --- 5. this kernel's rxe facts ----------------------------------------------------
if command -v rxe_probe >/dev/null; then
  probe_rc=0
  timeout "$step_timeout" rxe_probe "$RXE_A" "$GID_A" "$RXE_B" "$GID_B" >"$out/rxe_probe.txt" 2>&1 ||
    probe_rc=$?
  cat "$out/rxe_probe.txt"
  sed -n "s/^PROBE /INFO rxe $(uname -r): /p" "$out/rxe_probe.txt" | tee -a "$summary"
  # What rxe0 did meanwhile: retransmissions vs. retry-exhausted completions.
  rdma statistic show link "$RXE_A/1" >"$out/rxe_probe-counters.txt" 2>&1 || true
  counters=$(tr ' ' '\n' <"$out/rxe_probe-counters.txt" | paste - - 2>/dev/null |
    awk '$1 == "completer_retry_err" || $1 == "retry_exceeded_err" || $1 == "rcvd_seq_err" { printf "%s %s, ", $1, $2 }')
  report INFO "rxe $(uname -r): $RXE_A counters after the probe: ${counters%, }"
  ((probe_rc == 0)) || report INFO "rxe_probe exited with status $probe_rc (see rxe_probe.txt)"
fi

echo "=== rdma_transport over Soft-RoCE: summary"
cat "$summary"
if ((failures)); then
  echo "SOFTROCE CI: FAIL ($failures failed checks)"
  exit 1
fi
echo "SOFTROCE CI: PASS"
