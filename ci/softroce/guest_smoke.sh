#!/usr/bin/env bash
# Soft-RoCE smoke test, run inside the VM by run_ci_stage.sh on every CI run.
# Proves the stage end to end with rdma-core and perftest only:
#
#   1. devices: rxe0, rxe1 and rxe_lo are listed, ACTIVE, vendor 0xffffff,
#      active MTU 1024 (1500-byte netdevs), RoCE v2 GID for their IPv4 address
#   2. traffic class on the wire: ib_send_lat rxe0 -> rxe1 across the veth
#      with --tclass=136 while tcpdump captures UDP/4791 on veth0; every RoCE
#      packet, both directions, must carry IP TOS 0x88; once more with
#      --tclass=96 (TOS 0x60) and once without --tclass (TOS 0x0)
#   3. rdma_cm across the veth: rping 10.10.0.2 crosses veth0 (policy routing)
#   4. single host: ib_write_bw on rxe_lo against itself
#
# Prints one PASS/FAIL line per check, writes them to /artifacts/summary.txt
# with the raw outputs and captures beside it, and exits 1 if any check
# failed (90 when the topology itself cannot be built).
set -euo pipefail

# shellcheck source=ci/softroce/guest_topology.sh
source "$SOFTROCE_DIR/guest_topology.sh"

out=${ARTIFACTS:-/artifacts}
summary=${SMOKE_SUMMARY:-$out/summary.txt}
: >"$summary"
failures=0
# shellcheck source=ci/softroce/guest_lib.sh
source "$SOFTROCE_DIR/guest_lib.sh"
step_timeout=120 # a hung QP fails its check instead of running into the VM timeout


# --- 1. devices --------------------------------------------------------------
ibv_devices >"$out/ibv_devices.txt" 2>&1 || true
cat "$out/ibv_devices.txt"
for pair in "$RXE_A:veth0:$GID_A" "$RXE_B:veth1:$GID_B" "$RXE_LO:dummy0:$GID_LO"; do
  IFS=: read -r dev netdev gid <<<"$pair"
  info="$out/ibv_devinfo-$dev.txt"
  ibv_devinfo -v -d "$dev" >"$info" 2>&1 || true
  vendor=$(awk '$1 == "vendor_id:" { print $2; exit }' "$info")
  state=$(awk '$1 == "state:" { print $2; exit }' "$info")
  mtu=$(awk '$1 == "active_mtu:" { print $2; exit }' "$info")
  gid_value=$(cat "/sys/class/infiniband/$dev/ports/1/gids/$gid")
  detail="$dev on $netdev: vendor_id $vendor, $state, active_mtu $mtu, gid[$gid] $gid_value"
  if grep -qw "$dev" "$out/ibv_devices.txt" && [[ "$vendor" == 0xffffff && "$state" == PORT_ACTIVE && "$mtu" == 1024 ]]; then
    report PASS "device $detail"
  else
    report FAIL "device $detail (want listed, 0xffffff, PORT_ACTIVE, 1024)"
  fi
done

# --- 2. traffic class on the wire -------------------------------------------
port=18515
tos_check() { # label, tclass ('' = unset), expected tos
  local label=$1 tclass=$2 tos=$3 args=() server_pid rc=0
  local iterations=1000 size=64
  if [[ -n "$tclass" ]]; then args+=("--tclass=$tclass"); fi
  port=$((port + 1))
  local name="ib_send_lat-$label"
  start_capture "$name" || { report FAIL "$label: tcpdump did not start"; return; }
  timeout "$step_timeout" ib_send_lat -d "$RXE_B" -x "$GID_B" -s "$size" -n "$iterations" -F -p "$port" \
    "${args[@]}" >"$out/$name-server.txt" 2>&1 &
  server_pid=$!
  if wait_listening "$port"; then
    timeout "$step_timeout" ib_send_lat -d "$RXE_A" -x "$GID_A" -s "$size" -n "$iterations" -F -p "$port" \
      "${args[@]}" "$IP_B" >"$out/$name-client.txt" 2>&1 || rc=$?
  else
    rc=1
    echo "server never listened on $port" >>"$out/$name-client.txt"
  fi
  wait "$server_pid" || rc=$((rc ? rc : $?))
  stop_capture
  tcpdump -n -v -r "$out/$name.pcap" >"$out/$name.tcpdump-decoded.txt" 2>/dev/null || true

  echo "--- $name (client; server output in $name-server.txt)"
  cat "$out/$name-client.txt"
  local latency
  # perftest prints: #bytes #iterations t_min t_max t_typical t_avg t_stdev 99% 99.9%
  latency=$(awk '/t_typical/ { getline; printf "t_min %s us, t_typical %s us, t_avg %s us, 99.9%% %s us", $3, $5, $6, $9 }' \
    "$out/$name-client.txt")
  # The run's own packets: each side sends $iterations SENDs and ACKs every
  # one it receives, so the pcap holds at least 4 x $iterations.
  local run_ok=1 run="tclass ${tclass:-unset}"
  if ((rc != 0)); then
    run_ok=0
    run+=", ib_send_lat failed (status $rc)"
  fi
  judge_tos "TOS $label" "$name" "$tos" "$((4 * iterations))" "$run_ok" "$run"
  [[ -z "$latency" ]] || report INFO "ib_send_lat $label ${size}B x$iterations $RXE_A->$RXE_B: $latency"
  if grep -q 'Device not recognized to implement inline feature' "$out/$name-client.txt"; then
    report INFO "perftest on rxe: \"Device not recognized to implement inline feature\" (inline disabled by perftest)"
  fi
}
tos_check tc136 136 0x88
tos_check tc96 96 0x60
tos_check unset '' 0x0

# --- 3. rdma_cm across the veth ------------------------------------------------
start_capture rping || report FAIL "rping: tcpdump did not start"
rping_rc=0
timeout "$step_timeout" rping -s -a "$IP_B" -p 7174 -C 10 -v >"$out/rping-server.txt" 2>&1 &
rping_server=$!
# The rping server listens through rdma_cm, not on a TCP port.
for _ in {1..100}; do
  rdma resource show cm_id 2>/dev/null | grep -q LISTEN && break
  sleep 0.1
done
timeout "$step_timeout" rping -c -a "$IP_B" -p 7174 -C 10 -v >"$out/rping-client.txt" 2>&1 || rping_rc=$?
wait "$rping_server" || rping_rc=$((rping_rc ? rping_rc : $?))
stop_capture
read -r packets _ fwd rev _ _ < <(tos_counts "$out/rping.pcap" 0x0)
if ((rping_rc == 0 && fwd > 0 && rev > 0)); then
  report PASS "rdma_cm: rping $IP_A -> $IP_B, 10 pings, $packets RoCE packets crossed veth0 ($fwd out, $rev back)"
else
  report FAIL "rdma_cm: rping status $rping_rc, $packets RoCE packets on veth0 ($fwd out, $rev back)"
fi

# --- 4. single host on rxe_lo --------------------------------------------------
port=$((port + 1))
bw_rc=0
timeout "$step_timeout" ib_write_bw -d "$RXE_LO" -x "$GID_LO" -s 4096 -n 2000 -F -p "$port" \
  >"$out/ib_write_bw-rxe_lo-server.txt" 2>&1 &
bw_server=$!
if wait_listening "$port"; then
  timeout "$step_timeout" ib_write_bw -d "$RXE_LO" -x "$GID_LO" -s 4096 -n 2000 -F -p "$port" "$IP_LO" \
    >"$out/ib_write_bw-rxe_lo-client.txt" 2>&1 || bw_rc=$?
else
  bw_rc=1
fi
wait "$bw_server" || bw_rc=$((bw_rc ? bw_rc : $?))
cat "$out/ib_write_bw-rxe_lo-client.txt"
# perftest prints: #bytes #iterations BW peak[MB/sec] BW average[MB/sec] MsgRate[Mpps]
bw=$(awk '/BW average/ { getline; printf "%s MB/s average", $4 }' "$out/ib_write_bw-rxe_lo-client.txt")
if ((bw_rc == 0)) && [[ -n "$bw" ]]; then
  report PASS "single host: ib_write_bw $RXE_LO -> $RXE_LO 4096B x2000: $bw"
else
  report FAIL "single host: ib_write_bw on $RXE_LO failed (status $bw_rc)"
fi

echo "=== Soft-RoCE smoke summary"
cat "$summary"
if ((failures)); then
  echo "SMOKE: FAIL ($failures failed checks)"
  exit 1
fi
echo "SMOKE: PASS"
