// File: tools/tc_comparison.h
//
// What a DSCP-to-priority table does to a latency-sensitive flow sharing a
// switch port with bulk traffic, measured on the simulator in virtual time.
// Hosts: a server, a ping-pong client, and one bulk host per bulk QP. Each
// bulk QP streams WRITEs to the server, and the client ping-pongs small
// SENDs with it, so everything meets at the switch's egress port towards
// the server (sim/switch.h). The same traffic runs twice: with the switch's
// default table (every DSCP in priority 0: one class), and with the table,
// scheduling and weights given. perftest's figures (tools/latency_stats.h)
// of the ping-pong's one-way latency, and the port's per-queue counters,
// come back for each run.
//
//   TcComparisonOptions options;
//   options.ping_traffic_class = 104;          // DSCP 26, as MC_IB_TC=104
//   options.prioritised.dscp_to_priority[26] = 3;
//   absl::StatusOr<std::vector<TcRun>> runs = RunTcComparison(options);
//   std::printf("%s", FormatTcComparison(options, *runs).c_str());
//
// Deterministic: the same options give the same figures. Thread-compatible.
// Errors: kInvalidArgument for bad options; the simulator's statuses.

#ifndef RDMA_TRANSPORT_TOOLS_TC_COMPARISON_H_
#define RDMA_TRANSPORT_TOOLS_TC_COMPARISON_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sim/switch.h"
#include "tools/latency_stats.h"

namespace rdma_transport {

struct TcComparisonOptions {
  int bulk_qps = 4;
  uint32_t bulk_bytes = 64 * 1024;  // per WRITE
  int bulk_depth = 4;               // WRITEs outstanding per bulk QP
  uint8_t bulk_traffic_class = 0;
  uint8_t ping_traffic_class = 104;
  uint32_t ping_bytes = 8;
  int iterations = 1000;  // measured round trips
  int warmup = 100;       // unmeasured ones before them, bulk running
  uint32_t link_gbps = 100;
  // The second run's switch: its table, scheduling, weights, queue limit
  // (`enabled` is implied). The first run keeps all but the table.
  sim::SwitchOptions prioritised;
};

struct TcRun {
  std::string name;  // "one class" or "prioritised"
  LatencySummary latency;
  sim::SwitchPortCounters server_port;
  double bulk_gbps = 0;  // all bulk QPs together, over the measured pings
};

// Both runs, one class first.
absl::StatusOr<std::vector<TcRun>> RunTcComparison(
    const TcComparisonOptions& options);

// A banner, perftest's latency columns per run, then each run's queues.
std::string FormatTcComparison(const TcComparisonOptions& options,
                               const std::vector<TcRun>& runs);

// "26:3,46:5" sets dscp_to_priority[26] = 3 and [46] = 5 (empty: nothing).
// kInvalidArgument naming the bad entry.
absl::Status ParseDscpMap(const std::string& text, sim::SwitchOptions& options);
// "1,1,1,4,1,1,1,1": the eight weights. kInvalidArgument otherwise.
absl::Status ParseWeights(const std::string& text, sim::SwitchOptions& options);

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TOOLS_TC_COMPARISON_H_
