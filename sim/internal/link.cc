#include "sim/internal/link.h"

#include <algorithm>
#include <cstdint>

#include "sim/internal/fabric_core.h"

namespace rdma_transport::sim::internal {
namespace {

// A packet's bytes on the wire: payload and every header.
uint32_t WireBytes(const Device& from, const Event& packet,
                   uint32_t header_bytes) {
  return packet.payload_bytes + BaseHeaderBytes(from.profile.link_layer) +
         header_bytes;
}

}  // namespace

uint64_t LinkRateMbps(const DeviceProfile& profile) {
  uint64_t lanes = 1;
  switch (profile.active_width) {
    case 2:
      lanes = 4;
      break;
    case 4:
      lanes = 8;
      break;
    case 8:
      lanes = 12;
      break;
    case 16:
      lanes = 2;
      break;
    default:
      lanes = 1;
  }
  uint64_t lane_mbps = 25000;
  switch (profile.active_speed) {
    case 1:
      lane_mbps = 2500;
      break;
    case 2:
      lane_mbps = 5000;
      break;
    case 4:
    case 8:
      lane_mbps = 10000;
      break;
    case 16:
      lane_mbps = 14000;
      break;
    case 32:
      lane_mbps = 25000;
      break;
    case 64:
      lane_mbps = 50000;
      break;
    case 128:
      lane_mbps = 100000;
      break;
    default:
      break;
  }
  return lanes * lane_mbps;
}

uint32_t BaseHeaderBytes(uint8_t link_layer) {
  if (link_layer == IBV_LINK_LAYER_INFINIBAND) return 8 + 12 + 4 + 2;
  return 8 + 14 + 4 + 12 + 20 + 8 + 12 + 4;
}

Nanos FabricCore::ReserveEgressLocked(Device& from, uint8_t traffic_class,
                                      const Event& packet,
                                      uint32_t header_bytes) {
  const uint64_t bytes = WireBytes(from, packet, header_bytes);
  // Picoseconds: bits * 10^6 / (Mb/s).
  const int64_t serialisation_ps = static_cast<int64_t>(
      bytes * 8 * 1000000 / std::max<uint64_t>(1, from.link_mbps));
  const int64_t start_ps =
      std::max<int64_t>(now.count() * 1000, from.egress_free_ps);
  from.egress_free_ps = start_ps + serialisation_ps;
  ++from.counters.packets_sent;
  ++from.counters.packets_by_traffic_class[traffic_class];
  from.counters.wire_bytes_sent += bytes;
  return Nanos((from.egress_free_ps + 999) / 1000);
}

Nanos FabricCore::SendOnWireLocked(Device& from, uint8_t traffic_class,
                                   Event packet, uint32_t header_bytes,
                                   Nanos extra_delay) {
  const Nanos left =
      ReserveEgressLocked(from, traffic_class, packet, header_bytes);
  packet.time = left + options.link_latency + extra_delay;
  if (switch_options.enabled) {
    SendToSwitchLocked(packet, traffic_class,
                       WireBytes(from, packet, header_bytes), packet.time);
  } else {
    ScheduleLocked(packet);
  }
  return left;
}

}  // namespace rdma_transport::sim::internal
