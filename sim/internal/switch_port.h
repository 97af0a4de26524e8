// File: sim/internal/switch_port.h
//
// `SwitchPort<Packet>` is one egress port of the fabric's switch
// (sim/switch.h): eight FIFO queues, one per priority, each with a byte
// limit (tail drop), the scheduler that picks which queue sends next (strict
// priority or deficit weighted round robin over bytes, Shreedhar and
// Varghese, SIGCOMM 1995), and the queues' counters. It holds packets and
// picks among them; the time a packet takes on the wire is the caller's
// (FabricCore, switch.cc). A template over the packet so that it is tested
// on its own (sim/switch_port_test.cc).
//
//   SwitchPort<Event> port;
//   if (!port.Enqueue(priority, packet, wire_bytes, limit)) { /* dropped */ }
//   while (!port.empty()) Transmit(port.Dequeue(options));
//
// Thread-compatible (FabricCore keeps its ports under its lock). Enqueue
// cannot fail but by dropping, which it counts; Dequeue requires !empty().

#ifndef RDMA_TRANSPORT_SIM_INTERNAL_SWITCH_PORT_H_
#define RDMA_TRANSPORT_SIM_INTERNAL_SWITCH_PORT_H_

#include <algorithm>
#include <array>
#include <cstdint>
#include <deque>
#include <utility>

#include "sim/switch.h"

namespace rdma_transport::sim::internal {

template <typename Packet>
class SwitchPort {
 public:
  struct Entry {
    Packet packet;
    uint32_t bytes = 0;  // On the wire, headers included.
  };

  // Appends `packet` to queue `priority` (0..7) unless that would take the
  // queue beyond `limit_bytes`: then drops it, counts the drop and returns
  // false.
  bool Enqueue(int priority, Packet packet, uint32_t bytes,
               uint64_t limit_bytes) {
    SwitchQueueCounters& counters = counters_.queues[priority];
    if (depth_bytes_[priority] + bytes > limit_bytes) {
      ++counters.dropped_packets;
      counters.dropped_bytes += bytes;
      return false;
    }
    queues_[priority].push_back(Entry{std::move(packet), bytes});
    depth_bytes_[priority] += bytes;
    ++packets_;
    ++counters.packets;
    counters.bytes += bytes;
    counters.peak_bytes = std::max(counters.peak_bytes, depth_bytes_[priority]);
    counters.peak_packets =
        std::max<uint64_t>(counters.peak_packets, queues_[priority].size());
    return true;
  }

  bool empty() const { return packets_ == 0; }
  uint64_t packets() const { return packets_; }
  uint64_t depth_bytes(int priority) const { return depth_bytes_[priority]; }

  // The next packet to send under `options.scheduling`. Requires !empty().
  Entry Dequeue(const SwitchOptions& options) {
    const int queue = options.scheduling == SwitchScheduling::kWeighted
                          ? PickWeighted(options)
                          : PickStrict();
    Entry entry = std::move(queues_[queue].front());
    queues_[queue].pop_front();
    depth_bytes_[queue] -= entry.bytes;
    --packets_;
    return entry;
  }

  const SwitchPortCounters& counters() const { return counters_; }

  // When the port's link is busy until (picoseconds of virtual time), and
  // whether a packet is on it now; the caller's bookkeeping.
  int64_t free_ps = 0;
  bool busy = false;

 private:
  int PickStrict() const {
    for (int queue = kSwitchPriorities - 1; queue > 0; --queue) {
      if (!queues_[queue].empty()) return queue;
    }
    return 0;
  }

  // DWRR, one packet at a time: the queue under the round's pointer gets
  // its quantum when the pointer arrives, sends while its head fits in its
  // deficit, then the pointer moves on; an empty queue keeps no deficit.
  // Ends: some queue is non-empty and every visit adds at least one byte.
  int PickWeighted(const SwitchOptions& options) {
    while (true) {
      std::deque<Entry>& queue = queues_[round_];
      if (queue.empty()) {
        deficit_[round_] = 0;
      } else {
        if (fresh_visit_) {
          deficit_[round_] +=
              uint64_t{options.weights[round_]} * options.quantum_bytes;
          fresh_visit_ = false;
        }
        if (queue.front().bytes <= deficit_[round_]) {
          deficit_[round_] -= queue.front().bytes;
          return round_;
        }
      }
      round_ = (round_ + 1) % kSwitchPriorities;
      fresh_visit_ = true;
    }
  }

  std::array<std::deque<Entry>, kSwitchPriorities> queues_;
  std::array<uint64_t, kSwitchPriorities> depth_bytes_{};
  uint64_t packets_ = 0;
  std::array<uint64_t, kSwitchPriorities> deficit_{};
  int round_ = 0;
  bool fresh_visit_ = true;
  SwitchPortCounters counters_;
};

}  // namespace rdma_transport::sim::internal

#endif  // RDMA_TRANSPORT_SIM_INTERNAL_SWITCH_PORT_H_
