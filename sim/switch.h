// File: sim/switch.h
//
// The fabric's optional switch: what `Fabric::ConfigureSwitch` takes and
// what `Fabric::SwitchCounters` returns. With the switch enabled every packet
// crosses it: it leaves its sender's port as before (link.h), reaches the
// switch after `link_latency`, waits in one of eight priority queues of the
// switch's egress port towards its destination, and leaves that port at the
// destination port's link rate, arriving `link_latency` later. Packets from
// many senders to one destination contend at that egress (the incast point
// where traffic classes matter), so a latency-sensitive flow can be put ahead
// of bulk traffic by its traffic class, as a data-centre switch does:
//
//   priority = dscp_to_priority[traffic_class >> 2]   (DSCP, 0..63 -> 0..7)
//
// The default table maps every DSCP to priority 0, as a switch with no QoS
// configured. Each egress port serves its queues by strict priority (7
// first; a lower queue goes only when every higher one is empty) or by
// deficit weighted round robin over bytes (queue q sends up to weights[q] *
// quantum_bytes per round, so busy queues share the port in proportion to
// their weights). A queue holding queue_limit_bytes drops the packets that
// would exceed it (tail drop); RC recovers them by go-back-N as on a lossy
// Ethernet fabric. No PFC, no ECN, no buffer shared across ports
// (docs/simulator.md, "Departures from hardware").
//
//   SwitchOptions options;
//   options.enabled = true;
//   options.dscp_to_priority[26] = 3;  // traffic class 104 (AF31)
//   ASSERT_TRUE(fabric.ConfigureSwitch(options).ok());
//   // ... traffic ...
//   SwitchPortCounters port = *fabric.SwitchCounters(server_device);
//   EXPECT_EQ(port.queues[3].dropped_packets, 0u);
//
// Plain data; thread-compatible.

#ifndef RDMA_TRANSPORT_SIM_SWITCH_H_
#define RDMA_TRANSPORT_SIM_SWITCH_H_

#include <array>
#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace rdma_transport::sim {

inline constexpr int kSwitchPriorities = 8;
inline constexpr int kDscpValues = 64;

enum class SwitchScheduling {
  kStrictPriority,  // The highest non-empty queue always goes first.
  kWeighted,        // Deficit weighted round robin over bytes.
};

struct SwitchOptions {
  // Off: packets go straight from port to port (the fabric as without it).
  bool enabled = false;
  // DSCP (traffic class >> 2) to priority 0..7; all 0 by default.
  std::array<uint8_t, kDscpValues> dscp_to_priority{};
  SwitchScheduling scheduling = SwitchScheduling::kStrictPriority;
  // kWeighted: each queue's share, at least 1.
  std::array<uint32_t, kSwitchPriorities> weights = {1, 1, 1, 1, 1, 1, 1, 1};
  // kWeighted: the bytes a queue of weight 1 may send per round, at least 1.
  uint32_t quantum_bytes = 4096;
  // Per queue and egress port: a packet that would take the queue beyond
  // this many bytes (payload and headers) is dropped. At least 1.
  uint64_t queue_limit_bytes = uint64_t{2} << 20;
};

// kInvalidArgument naming the first bad field; OkStatus otherwise.
absl::Status ValidateSwitchOptions(const SwitchOptions& options);

// The queue a packet of `traffic_class` goes to.
inline int SwitchPriority(const SwitchOptions& options, uint8_t traffic_class) {
  return options.dscp_to_priority[traffic_class >> 2];
}

// One priority queue of one switch egress port.
struct SwitchQueueCounters {
  uint64_t packets = 0;  // Accepted into the queue (all of them forwarded).
  uint64_t bytes = 0;    // Their wire bytes, headers included.
  uint64_t dropped_packets = 0;  // Tail drops.
  uint64_t dropped_bytes = 0;
  uint64_t peak_bytes = 0;  // The most it ever held.
  uint64_t peak_packets = 0;
};

// The switch's egress port towards one device.
struct SwitchPortCounters {
  std::array<SwitchQueueCounters, kSwitchPriorities> queues{};
  // One line per queue that saw traffic: "q3 packets=... bytes=...
  // dropped=... peak_bytes=... peak_packets=...".
  std::string ToString() const;
};

}  // namespace rdma_transport::sim

#endif  // RDMA_TRANSPORT_SIM_SWITCH_H_
