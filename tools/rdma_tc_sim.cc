// rdma_tc_sim: what a switch's DSCP-to-priority table does to a small-message
// ping-pong sharing an egress port with bulk WRITEs, on the simulator in
// virtual time (tools/tc_comparison.h). Prints perftest's latency columns
// for the same traffic with one class and with the table, then the port's
// per-queue counters.
//
//   rdma_tc_sim                                   # DSCP 26 -> priority 3
//   rdma_tc_sim --dscp_map=26:3,46:5 --bulk_qps=8
//   rdma_tc_sim --scheduling=weighted --weights=1,1,1,4,1,1,1,1
//   MC_IB_TC=184 rdma_tc_sim --ping_tc=-1 --dscp_map=46:5
//
// The ping-pong's traffic class is resolved as the transport resolves
// MC_IB_TC (transport/config.h). Exit status 0 on success, 1 on a failed
// run, 2 on bad flags.
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tools/tc_comparison.h"
#include "transport/config.h"

ABSL_FLAG(std::string, dscp_map, "26:3",
          "the switch's table, dscp:priority,...; unlisted DSCPs -> 0");
ABSL_FLAG(std::string, scheduling, "strict", "strict | weighted (DWRR)");
ABSL_FLAG(std::string, weights, "1,1,1,1,1,1,1,1",
          "weighted: the eight priorities' weights");
ABSL_FLAG(uint32_t, quantum_bytes, 4096, "weighted: bytes per weight a round");
ABSL_FLAG(uint64_t, queue_limit_bytes, uint64_t{2} << 20,
          "each queue's buffer; beyond it, tail drop");
ABSL_FLAG(int32_t, bulk_qps, 4, "bulk WRITE QPs, each from its own host");
ABSL_FLAG(uint32_t, bulk_bytes, 64 * 1024, "bytes per bulk WRITE");
ABSL_FLAG(int32_t, bulk_depth, 4, "WRITEs outstanding per bulk QP");
ABSL_FLAG(int32_t, bulk_tc, 0, "the bulk QPs' traffic class");
ABSL_FLAG(int32_t, ping_tc, 104,
          "the ping-pong's traffic class; -1: MC_IB_TC, as the transport");
ABSL_FLAG(uint32_t, ping_bytes, 8, "ping-pong message size");
ABSL_FLAG(int32_t, iterations, 1000, "measured round trips (perftest -n)");
ABSL_FLAG(int32_t, warmup, 100, "unmeasured round trips before them");
ABSL_FLAG(uint32_t, link_gbps, 100, "every port's link rate");

namespace rdma_transport {
namespace {

absl::StatusOr<TcComparisonOptions> OptionsFromFlags() {
  TcComparisonOptions options;
  sim::SwitchOptions& table = options.prioritised;
  if (absl::Status status = ParseDscpMap(absl::GetFlag(FLAGS_dscp_map), table);
      !status.ok()) {
    return status;
  }
  const std::string scheduling = absl::GetFlag(FLAGS_scheduling);
  if (scheduling == "weighted") {
    table.scheduling = sim::SwitchScheduling::kWeighted;
  } else if (scheduling != "strict") {
    return absl::InvalidArgumentError(
        "--scheduling: want strict or weighted, got " + scheduling);
  }
  if (absl::Status status = ParseWeights(absl::GetFlag(FLAGS_weights), table);
      !status.ok()) {
    return status;
  }
  table.quantum_bytes = absl::GetFlag(FLAGS_quantum_bytes);
  table.queue_limit_bytes = absl::GetFlag(FLAGS_queue_limit_bytes);
  const int bulk_tc = absl::GetFlag(FLAGS_bulk_tc);
  if (bulk_tc < 0 || bulk_tc > 255) {
    return absl::InvalidArgumentError("--bulk_tc: want 0..255");
  }
  options.bulk_traffic_class = static_cast<uint8_t>(bulk_tc);
  // The transport's own resolution: a value set in code wins over MC_IB_TC;
  // unset (-1 here) reads MC_IB_TC; neither leaves the system default, 0.
  TransportOptions transport;
  if (absl::GetFlag(FLAGS_ping_tc) != -1) {
    transport.traffic_class = absl::GetFlag(FLAGS_ping_tc);
  }
  absl::StatusOr<TransportConfig> config = LoadTransportConfig(transport);
  if (!config.ok()) return config.status();
  options.ping_traffic_class = config->traffic_class.value_or(0);
  options.bulk_qps = absl::GetFlag(FLAGS_bulk_qps);
  options.bulk_bytes = absl::GetFlag(FLAGS_bulk_bytes);
  options.bulk_depth = absl::GetFlag(FLAGS_bulk_depth);
  options.ping_bytes = absl::GetFlag(FLAGS_ping_bytes);
  options.iterations = absl::GetFlag(FLAGS_iterations);
  options.warmup = absl::GetFlag(FLAGS_warmup);
  options.link_gbps = absl::GetFlag(FLAGS_link_gbps);
  return options;
}

}  // namespace
}  // namespace rdma_transport

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "rdma_tc_sim: a ping-pong's latency beside bulk WRITEs at one switch "
      "port, with one traffic class and with a DSCP-to-priority table "
      "(simulated, virtual time)");
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  if (positional.size() > 1) {
    std::fprintf(stderr, "rdma_tc_sim: unexpected argument %s\n",
                 positional[1]);
    return 2;
  }
  absl::StatusOr<rdma_transport::TcComparisonOptions> options =
      rdma_transport::OptionsFromFlags();
  if (!options.ok()) {
    std::fprintf(stderr, "rdma_tc_sim: %s\n",
                 options.status().ToString().c_str());
    return 2;
  }
  absl::StatusOr<std::vector<rdma_transport::TcRun>> runs =
      rdma_transport::RunTcComparison(*options);
  if (!runs.ok()) {
    std::fprintf(stderr, "rdma_tc_sim: %s\n", runs.status().ToString().c_str());
    return runs.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  std::printf("%s",
              rdma_transport::FormatTcComparison(*options, *runs).c_str());
  return 0;
}
