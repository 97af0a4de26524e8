# shellcheck shell=bash
# Soft-RoCE topology inside the VM; guest scripts source it first:
#
#   source "$SOFTROCE_DIR/guest_topology.sh"
#
#     veth0 10.10.0.1/24  <== veth pair ==>  veth1 10.10.0.2/24
#     rxe0 (RXE_A)                           rxe1 (RXE_B)
#
#     dummy0 10.10.1.1/24, rxe_lo (RXE_LO): single-host tests, rxe loops back itself
#
# RoCE v2 between rxe0 and rxe1 really crosses the veth: tcpdump -i veth0 sees
# UDP/4791. Both veth ends stay in the initial network namespace: rxe in
# Debian's 6.1/6.12 kernels is initial-namespace only (an rxe whose netdev was
# moved to another namespace fails at its first send with
# IBV_WC_LOC_QP_OP_ERR). With both addresses local, the receiving end would
# drop the packets as martians (source address is ours), and the QP would
# retry forever, hence accept_local=1 and rp_filter=0 everywhere.
#
# Policy routing (on unless SOFTROCE_POLICY_ROUTING=0) also sends locally
# generated IP traffic between the two addresses over the veth instead of lo:
# TCP handshakes, and rdma_cm address resolution, which then picks rxe0 for a
# connection to 10.10.0.2 instead of looping back on rxe1.
#
# Exports RXE_A RXE_B RXE_LO, IP_A IP_B IP_LO, GID_A GID_B GID_LO (index of
# each device's RoCE v2 IPv4 GID, 1 on rxe) and defines softroce_gid_index.
# Exits the sourcing script with status 90 when the topology cannot be built:
# run_vm.sh reports that as an infrastructure failure, not a test failure.

export RXE_A=rxe0 RXE_B=rxe1 RXE_LO=rxe_lo
export IP_A=10.10.0.1 IP_B=10.10.0.2 IP_LO=10.10.1.1

_topology_fail() {
  echo "guest_topology: INFRASTRUCTURE FAILURE: $*" >&2
  ip -br addr >&2 || true
  rdma link >&2 || true
  exit 90
}

# Prints the index of the RoCE v2 GID of rxe device $1 that maps IPv4 address
# $2. The table has 1024 entries: read them with one grep, not one fork each.
softroce_gid_index() {
  local dev=$1 ip=$2 want gids path index a b c d
  IFS=. read -r a b c d <<<"$ip"
  want=$(printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' "$a" "$b" "$c" "$d")
  gids=/sys/class/infiniband/$dev/ports/1/gids
  while IFS=: read -r path _; do
    index=${path##*/}
    if [[ "$(cat "/sys/class/infiniband/$dev/ports/1/gid_attrs/types/$index" 2>/dev/null)" == "RoCE v2" ]]; then
      echo "$index"
      return 0
    fi
  done < <(grep -H -x -- "$want" "$gids"/* 2>/dev/null)
  return 1
}

# Waits until rxe device $1 is ACTIVE and has a RoCE v2 GID for $2; prints it.
# Up to 30 s: usually at once, but under TCG on a loaded host the netdev
# events that add the GID can lag by seconds.
_topology_wait_gid() {
  local dev=$1 ip=$2 index
  for _ in {1..300}; do
    if [[ "$(cat "/sys/class/infiniband/$dev/ports/1/state" 2>/dev/null)" == *ACTIVE* ]] &&
      index=$(softroce_gid_index "$dev" "$ip"); then
      echo "$index"
      return 0
    fi
    sleep 0.1
  done
  return 1
}

_topology_sysctls() {
  local conf
  for conf in all default "$@"; do
    sysctl -qw "net.ipv4.conf.$conf.accept_local=1" "net.ipv4.conf.$conf.rp_filter=0" ||
      _topology_fail "sysctl on $conf failed"
  done
}

_topology_policy_routing() {
  # Output lookups (iif lo) to the peer address use a table that leaves by our
  # own veth end; packets arriving on the other end still hit the local table,
  # moved from priority 0 to below these rules.
  if ! {
    ip route add "$IP_B/32" dev veth0 src "$IP_A" table 100 &&
      ip route add "$IP_A/32" dev veth1 src "$IP_B" table 101 &&
      ip rule add pref 100 iif lo to "$IP_B" lookup 100 &&
      ip rule add pref 101 iif lo to "$IP_A" lookup 101 &&
      ip rule add pref 1000 lookup local &&
      ip rule del pref 0 lookup local
  }; then
    _topology_fail "policy routing setup failed"
  fi
}

_topology_setup() {
  _topology_sysctls
  # The veth pair is the fabric, and RoCE fabrics are lossless. With the
  # default backlog of 1000 packets, a loaded TCG guest dropped the READ
  # responder's bursts (rxe1 send_err +596..+1534 per ten 16 MiB READ tests),
  # each answered by an RNR NAK in the middle of a READ response, the path
  # on which 6.1's completer can fail a QP with only flushes and one kernel
  # WARNING to show (docs/soft-roce.md). 16384 took those drops to 0 in the
  # same VM.
  sysctl -qw net.core.netdev_max_backlog=16384 || _topology_fail "sysctl netdev_max_backlog failed"
  ip link add veth0 type veth peer name veth1 || _topology_fail "cannot create the veth pair"
  ip link add dummy0 type dummy || _topology_fail "cannot create dummy0"
  _topology_sysctls veth0 veth1 dummy0
  if ! {
    ip addr add "$IP_A/24" dev veth0 && ip addr add "$IP_B/24" dev veth1 &&
      ip addr add "$IP_LO/24" dev dummy0 &&
      ip link set veth0 up && ip link set veth1 up && ip link set dummy0 up
  }; then
    _topology_fail "cannot address or raise the netdevs"
  fi
  if [[ "${SOFTROCE_POLICY_ROUTING:-1}" != 0 ]]; then _topology_policy_routing; fi

  if ! {
    rdma link add "$RXE_A" type rxe netdev veth0 && rdma link add "$RXE_B" type rxe netdev veth1 &&
      rdma link add "$RXE_LO" type rxe netdev dummy0
  }; then
    _topology_fail "rdma link add failed (is crc32_generic loaded?)"
  fi

  GID_A=$(_topology_wait_gid "$RXE_A" "$IP_A") || _topology_fail "$RXE_A has no RoCE v2 GID for $IP_A"
  GID_B=$(_topology_wait_gid "$RXE_B" "$IP_B") || _topology_fail "$RXE_B has no RoCE v2 GID for $IP_B"
  GID_LO=$(_topology_wait_gid "$RXE_LO" "$IP_LO") || _topology_fail "$RXE_LO has no RoCE v2 GID for $IP_LO"
  export GID_A GID_B GID_LO
  echo "guest_topology: $RXE_A@veth0 $IP_A gid $GID_A <-> $RXE_B@veth1 $IP_B gid $GID_B;" \
    "$RXE_LO@dummy0 $IP_LO gid $GID_LO"
}

# Sourcing twice is harmless.
if [[ -e /sys/class/infiniband/$RXE_A ]]; then
  GID_A=$(softroce_gid_index "$RXE_A" "$IP_A") GID_B=$(softroce_gid_index "$RXE_B" "$IP_B")
  GID_LO=$(softroce_gid_index "$RXE_LO" "$IP_LO")
  export GID_A GID_B GID_LO
else
  _topology_setup
fi
