// File: sim/counters.h
//
// `SimCounters` is a snapshot of what the simulated NICs did, per device
// (Fabric::DeviceCounters) or summed over the fabric (Fabric::Counters()).
// Plain data, copied out under the fabric's lock; thread-compatible.
//
// A "packet" here is one transmission of one message (a request, an
// acknowledgement or an RDMA READ response): the simulator does not split
// messages into MTU-sized packets on the wire, although PSNs advance by the
// MTU-sized packet count as on a real NIC.

#ifndef RDMA_TRANSPORT_SIM_COUNTERS_H_
#define RDMA_TRANSPORT_SIM_COUNTERS_H_

#include <infiniband/verbs.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace rdma_transport::sim {

// ibv_wc_status values run from IBV_WC_SUCCESS to IBV_WC_TM_RNDV_INCOMPLETE.
inline constexpr size_t kWcStatusCount = IBV_WC_TM_RNDV_INCOMPLETE + 1;
// ibv_event_type values run from IBV_EVENT_CQ_ERR to IBV_EVENT_WQ_FATAL.
inline constexpr size_t kAsyncEventTypeCount = IBV_EVENT_WQ_FATAL + 1;

struct SimCounters {
  // Work requests accepted by PostSend / PostRecv.
  uint64_t send_wrs_posted = 0;
  uint64_t recv_wrs_posted = 0;
  // Calls of PostSend, and of PostRecv and PostSrqRecv, each with its chain
  // of work requests (a doorbell each on a NIC, and on the simulator a
  // lock of the fabric): how well a caller batches its posts.
  uint64_t post_send_calls = 0;
  uint64_t post_recv_calls = 0;
  // Of the send WRs, those posted with IBV_SEND_INLINE (payload copied at
  // post time; the NIC reads no host memory for them).
  uint64_t inline_sends = 0;
  // Payload bytes placed in host memory by the NIC: received SENDs, RDMA
  // WRITE targets and RDMA READ results, counted at the device whose memory
  // was written.
  uint64_t payload_bytes_delivered = 0;
  // Host memory the NIC read (DMA) to transmit: gathered SEND/WRITE payloads
  // (again on every retransmission) and the source of RDMA READ responses.
  // Zero for inline sends: that is where their latency gain comes from.
  uint64_t dma_read_bytes = 0;
  // Request, acknowledgement and READ-response transmissions put on the wire
  // by this device, retransmissions included.
  uint64_t packets_sent = 0;
  // The bytes of those packets on the wire: payload and headers (link.h).
  uint64_t wire_bytes_sent = 0;
  // Packets lost: injected drops, packets to a dead device or to no QP, or to
  // a QP not ready to receive, out-of-sequence PSNs, and tail drops at the
  // switch's egress port towards the device (sim/switch.h). Counted at the
  // device where the packet died (the sender's when nothing matched its
  // route).
  uint64_t packets_dropped = 0;
  // Of packets_sent, by the traffic class in their GRH (the IP ToS byte on
  // RoCE v2) as the packet left: the sending QP's ah_attr.grh.traffic_class,
  // or the device's host override when it has one
  // (DeviceProfile::traffic_class_override), which wins as on mlx5.
  std::array<uint64_t, 256> packets_by_traffic_class{};
  // Go-back-N rewinds: after a transport timeout, a sequence NAK or an RNR
  // NAK, the requester sends again from the oldest unacknowledged PSN.
  uint64_t retransmissions = 0;
  // RNR NAKs this device received as a requester.
  uint64_t rnr_naks = 0;
  // CQs that overflowed, and completions lost because their CQ had.
  uint64_t cq_overruns = 0;
  uint64_t completions_lost = 0;
  // Verbs objects created on this device, ever (the leak report lists those
  // still alive): memory registrations and the bytes they cover, QPs.
  uint64_t memory_registrations = 0;
  uint64_t bytes_registered = 0;
  uint64_t qps_created = 0;
  // Completions written to this device's CQs, by ibv_wc_status.
  std::array<uint64_t, kWcStatusCount> completions_by_status{};
  // Async events queued on this device's contexts, by ibv_event_type: one
  // per context an event went to (a port event on a device with two open
  // contexts counts two), whether or not GetAsyncEvent took it.
  std::array<uint64_t, kAsyncEventTypeCount> async_events_by_type{};

  uint64_t completions(ibv_wc_status status) const {
    return static_cast<size_t>(status) < kWcStatusCount
               ? completions_by_status[status]
               : 0;
  }
  uint64_t total_completions() const;
  uint64_t packets_with_traffic_class(uint8_t traffic_class) const {
    return packets_by_traffic_class[traffic_class];
  }
  uint64_t async_events(ibv_event_type type) const {
    return static_cast<size_t>(type) < kAsyncEventTypeCount
               ? async_events_by_type[type]
               : 0;
  }
  uint64_t total_async_events() const;

  SimCounters& operator+=(const SimCounters& other);

  // One "name=value" per non-zero counter, for logs and failure messages.
  std::string ToString() const;
};

}  // namespace rdma_transport::sim

#endif  // RDMA_TRANSPORT_SIM_COUNTERS_H_
