#!/bin/bash
# rdma_devices on a simulated NIC: the host traffic-class override line and
# warning, the GID choice's why line, the address-range filter, and bad
# input refused with a message naming what was wrong.
#   bazel test //tools:rdma_devices_test
set -u
devices="$1"
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/tools/cli_expect.sh"

tc_file='/sys/class/infiniband/sim_cx7_0/tc/1/traffic_class'
expect "override shown" 0 \
  "host traffic class: 106, from $tc_file \(\"Global tclass=106\"\): the wire carries 106, not MC_IB_TC=136" \
  -- env MC_IB_TC=136 "$devices" --sim=cx7 --sim_tc_override=106
expect "override warned" 0 \
  "rdma_transport: warning: sim_cx7_0 port 1: $tc_file holds \"Global tclass=106\".*overriding MC_IB_TC=136" \
  -- env MC_IB_TC=136 "$devices" --sim=cx7 --sim_tc_override=106
expect "no override: empty file" 0 "host traffic class: none \($tc_file sets no global tclass\)" \
  -- env -u MC_IB_TC "$devices" --sim=cx7
expect "no override: no file" 0 \
  "host traffic class: none \(no /sys/class/infiniband/sim_rxe_0/tc/1/traffic_class\)" \
  -- "$devices" --sim=rxe
expect "no warning without an override" 0 "^  traffic class: 136 \(MC_IB_TC\)" \
  -- env MC_IB_TC=136 "$devices" --sim=cx7
expect "ACK timeout by default" 0 "path MTU limit [0-9]+, ACK timeout 14 \(67 ms, MC_IB_TIMEOUT\)" \
  -- "$devices" --sim=cx7
expect "ACK timeout from MC_IB_TIMEOUT" 0 "ACK timeout 18 \(1.07 s, MC_IB_TIMEOUT\)" \
  -- env MC_IB_TIMEOUT=18 "$devices" --sim=cx7
expect "bad MC_IB_TIMEOUT refused" 2 "MC_IB_TIMEOUT=\"0\" is invalid: expected an integer 1..31" \
  -- env MC_IB_TIMEOUT=0 "$devices" --sim=cx7
if env MC_IB_TC=136 "$devices" --sim=cx7 2>&1 | grep -q warning; then
  echo "FAIL a warning without an override"; failures=$((failures + 1))
else
  echo "ok   no warning line without an override"
fi
expect "why line" 0 \
  "why: GID 1 chosen: the first RoCE v2 IPv4 entry of sim_cx7_0 port 1 that forms an address handle" \
  -- "$devices" --sim=cx7
expect "erdma cannot be probed" 0 "address handle not probed: the provider has none" \
  -- "$devices" --sim=erdma
expect "subnet matches" 0 "GID 1 chosen: the first RoCE v2 IPv4 entry in RDMA_TRANSPORT_GID_SUBNET=10.0.0.0/24" \
  -- env RDMA_TRANSPORT_GID_SUBNET=10.0.0.0/24 "$devices" --sim=cx7
expect "subnet excludes all" 1 "1=::ffff:10.0.0.1 \(RoCE v2\): skipped, outside RDMA_TRANSPORT_GID_SUBNET=10.9.0.0/16" \
  -- env RDMA_TRANSPORT_GID_SUBNET=10.9.0.0/16 "$devices" --sim=cx7
expect "bad subnet" 2 'RDMA_TRANSPORT_GID_SUBNET="10.9.0.1/16" is invalid: .*did you mean 10.9.0.0/16\?' \
  -- env RDMA_TRANSPORT_GID_SUBNET=10.9.0.1/16 "$devices" --sim=cx7
expect "bad override value" 2 "--sim_tc_override=256: want an integer 0..255" \
  -- "$devices" --sim=cx7 --sim_tc_override=256
expect "override without --sim" 2 "--sim_tc_override needs --sim" \
  -- "$devices" --sim_tc_override=106
expect "unknown profile" 2 "--sim=cx99: .*known: cx6" -- "$devices" --sim=cx99
expect "unknown argument" 2 'unknown argument "--bogus"' -- "$devices" --bogus

finish
