#include "sim/switch.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace rdma_transport::sim {

absl::Status ValidateSwitchOptions(const SwitchOptions& options) {
  for (int dscp = 0; dscp < kDscpValues; ++dscp) {
    if (options.dscp_to_priority[dscp] >= kSwitchPriorities) {
      return absl::InvalidArgumentError(absl::StrCat(
          "dscp_to_priority[", dscp, "] is ", options.dscp_to_priority[dscp],
          ": priorities are 0..7"));
    }
  }
  if (options.scheduling == SwitchScheduling::kWeighted) {
    for (int queue = 0; queue < kSwitchPriorities; ++queue) {
      if (options.weights[queue] == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("weights[", queue, "] is 0: weights are at least 1"));
      }
    }
    if (options.quantum_bytes == 0) {
      return absl::InvalidArgumentError("quantum_bytes must be at least 1");
    }
  }
  if (options.queue_limit_bytes == 0) {
    return absl::InvalidArgumentError("queue_limit_bytes must be at least 1");
  }
  return absl::OkStatus();
}

std::string SwitchPortCounters::ToString() const {
  std::string out;
  for (int queue = 0; queue < kSwitchPriorities; ++queue) {
    const SwitchQueueCounters& q = queues[queue];
    if (q.packets == 0 && q.dropped_packets == 0) continue;
    absl::StrAppend(&out, "q", queue, " packets=", q.packets,
                    " bytes=", q.bytes, " dropped=", q.dropped_packets,
                    " peak_bytes=", q.peak_bytes,
                    " peak_packets=", q.peak_packets, "\n");
  }
  return out;
}

}  // namespace rdma_transport::sim
