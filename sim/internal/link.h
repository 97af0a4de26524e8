// File: sim/internal/link.h
//
// The links between simulated ports. Every device has one port with one
// egress link of the rate its profile's active width and speed give
// (ibv_port_attr: 4x EDR is 4 lanes of 25 Gb/s, 100 Gb/s), unless
// FabricOptions::link_gbps overrides every port's rate. Packets leaving a
// port queue behind the ones before them, first come first served, whatever
// QP or direction (requests, ACKs, READ responses) they belong to: the port
// is busy for (headers + payload) * 8 / rate per packet, so the QPs of a
// port share its bandwidth, and a packet arrives after its queueing, its
// serialisation and the link latency. FabricCore::SendOnWireLocked (link.cc)
// applies it; these are the pure parts.

#ifndef RDMA_TRANSPORT_SIM_INTERNAL_LINK_H_
#define RDMA_TRANSPORT_SIM_INTERNAL_LINK_H_

#include <infiniband/verbs.h>

#include <cstdint>

#include "sim/device_profile.h"

namespace rdma_transport::sim::internal {

// The data rate of a port of `profile`, in Mb/s: lanes (active_width:
// 1 = 1x, 2 = 4x, 4 = 8x, 8 = 12x, 16 = 2x) times the lane rate
// (active_speed: 1 SDR 2.5, 2 DDR 5, 4 QDR 10, 8 FDR10 10, 16 FDR 14,
// 32 EDR 25, 64 HDR 50, 128 NDR 100 Gb/s). Unknown codes count
// as one lane of 25 Gb/s.
uint64_t LinkRateMbps(const DeviceProfile& profile);

// What a packet carries besides its payload on the wire.
enum PacketHeader : uint32_t {
  kRethHeader = 16,  // RDMA extended header: a WRITE's first, a READ request
  kAethHeader = 4,   // ACK extended header: ACKs, NAKs, READ responses
  kImmHeader = 4,    // Immediate data
};

// The bytes of a packet's framing on a port of `link_layer`: RoCE v2 is
// Ethernet (preamble 8, header 14, FCS 4, inter-frame gap 12), IPv4 20,
// UDP 8, BTH 12, ICRC 4; InfiniBand is LRH 8, BTH 12, ICRC 4, VCRC 2.
uint32_t BaseHeaderBytes(uint8_t link_layer);

}  // namespace rdma_transport::sim::internal

#endif  // RDMA_TRANSPORT_SIM_INTERNAL_LINK_H_
