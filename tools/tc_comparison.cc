#include "tools/tc_comparison.h"

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "sim/fabric.h"
#include "sim/sim_verbs.h"
#include "sim/traffic_mix.h"

namespace rdma_transport {
namespace {

absl::Status Validate(const TcComparisonOptions& options) {
  if (options.bulk_qps < 0 || options.bulk_depth < 1 ||
      options.bulk_bytes == 0 || options.ping_bytes == 0 ||
      options.iterations < 1 || options.warmup < 0 || options.link_gbps == 0) {
    return absl::InvalidArgumentError(
        "bulk_qps >= 0, bulk_depth >= 1, bulk_bytes, ping_bytes, iterations "
        "and link_gbps >= 1, warmup >= 0");
  }
  sim::SwitchOptions prioritised = options.prioritised;
  prioritised.enabled = true;
  return sim::ValidateSwitchOptions(prioritised);
}

absl::StatusOr<TcRun> RunOnce(const TcComparisonOptions& options,
                              const sim::SwitchOptions& switch_options,
                              std::string name) {
  sim::FabricOptions fabric_options;
  fabric_options.progress_mode = sim::ProgressMode::kManual;
  fabric_options.link_gbps = options.link_gbps;
  sim::Fabric fabric(fabric_options);
  sim::SimVerbs verbs(&fabric);
  absl::StatusOr<std::string> server = fabric.AddDevice(sim::ConnectX7());
  absl::StatusOr<std::string> client = fabric.AddDevice(sim::ConnectX7());
  if (!server.ok()) return server.status();
  if (!client.ok()) return client.status();
  if (absl::Status status = fabric.ConfigureSwitch(switch_options);
      !status.ok()) {
    return status;
  }
  sim::TrafficMix mix(&fabric, &verbs);
  for (int i = 0; i < options.bulk_qps; ++i) {
    absl::StatusOr<std::string> bulk = fabric.AddDevice(sim::ConnectX7());
    if (!bulk.ok()) return bulk.status();
    sim::FlowOptions flow;
    flow.traffic_class = options.bulk_traffic_class;
    flow.message_bytes = options.bulk_bytes;
    flow.depth = options.bulk_depth;
    if (absl::StatusOr<int> added = mix.AddWriteStream(*bulk, *server, flow);
        !added.ok()) {
      return added.status();
    }
  }
  sim::FlowOptions ping;
  ping.traffic_class = options.ping_traffic_class;
  ping.message_bytes = options.ping_bytes;
  if (absl::Status status = mix.AddPingPong(*client, *server, ping);
      !status.ok()) {
    return status;
  }
  auto bulk_bytes = [&] {
    uint64_t bytes = 0;
    for (int i = 0; i < options.bulk_qps; ++i) bytes += mix.bytes_written(i);
    return bytes;
  };
  if (absl::Status status =
          mix.Run([&] { return mix.pings() >= options.warmup; });
      !status.ok()) {
    return status;
  }
  const uint64_t bytes_before = bulk_bytes();
  const std::chrono::nanoseconds start = fabric.Now();
  if (absl::Status status = mix.Run(
          [&] { return mix.pings() >= options.warmup + options.iterations; });
      !status.ok()) {
    return status;
  }
  TcRun run;
  run.name = std::move(name);
  run.bulk_gbps = 8.0 * static_cast<double>(bulk_bytes() - bytes_before) /
                  static_cast<double>((fabric.Now() - start).count());
  std::vector<double> samples(mix.ping_one_way_us().begin() + options.warmup,
                              mix.ping_one_way_us().end());
  run.latency = Summarize(samples);
  absl::StatusOr<sim::SwitchPortCounters> port = fabric.SwitchCounters(*server);
  if (!port.ok()) return port.status();
  run.server_port = *port;
  if (absl::Status status = mix.Close(); !status.ok()) return status;
  return run;
}

}  // namespace

absl::StatusOr<std::vector<TcRun>> RunTcComparison(
    const TcComparisonOptions& options) {
  if (absl::Status status = Validate(options); !status.ok()) return status;
  sim::SwitchOptions prioritised = options.prioritised;
  prioritised.enabled = true;
  sim::SwitchOptions one_class = prioritised;
  one_class.dscp_to_priority = {};
  std::vector<TcRun> runs;
  for (auto [switch_options, name] :
       {std::pair{one_class, "one class"}, {prioritised, "prioritised"}}) {
    absl::StatusOr<TcRun> run = RunOnce(options, switch_options, name);
    if (!run.ok()) return run.status();
    runs.push_back(*std::move(run));
  }
  return runs;
}

std::string FormatTcComparison(const TcComparisonOptions& options,
                               const std::vector<TcRun>& runs) {
  const sim::SwitchOptions& table = options.prioritised;
  std::string mapped;
  for (int dscp = 0; dscp < sim::kDscpValues; ++dscp) {
    if (table.dscp_to_priority[dscp] == 0) continue;
    absl::StrAppend(&mapped, mapped.empty() ? "" : ",", dscp, ":",
                    table.dscp_to_priority[dscp]);
  }
  std::string out = absl::StrFormat(
      "---------------------------------------------------------------------"
      "-----------------\n"
      "        Traffic-class effect at a switch egress port (sim, virtual "
      "time)\n"
      " link             : %u Gb/s, every port\n"
      " ping-pong        : %u B SEND, traffic class %u (DSCP %u) -> "
      "priority %d\n"
      " bulk             : %d QP(s) x %u B WRITEs, %d outstanding, traffic "
      "class %u (DSCP %u) -> priority %d\n"
      " table            : %s; %s; queue limit %u B\n"
      "---------------------------------------------------------------------"
      "-----------------\n",
      options.link_gbps, options.ping_bytes, options.ping_traffic_class,
      options.ping_traffic_class >> 2,
      sim::SwitchPriority(table, options.ping_traffic_class), options.bulk_qps,
      options.bulk_bytes, options.bulk_depth, options.bulk_traffic_class,
      options.bulk_traffic_class >> 2,
      sim::SwitchPriority(table, options.bulk_traffic_class),
      mapped.empty() ? "every DSCP -> 0" : mapped,
      table.scheduling == sim::SwitchScheduling::kWeighted
          ? absl::StrCat("weighted (DWRR, ", table.quantum_bytes, " B quantum)")
          : std::string("strict priority"),
      table.queue_limit_bytes);
  absl::StrAppend(&out, absl::StrFormat("%-12s ", "config"), LatencyHeader(),
                  absl::StrFormat(" %9s\n", "bulk_Gb/s"));
  for (const TcRun& run : runs) {
    absl::StrAppend(&out, absl::StrFormat("%-12s ", run.name),
                    LatencyRow(options.ping_bytes, run.latency),
                    absl::StrFormat(" %9.1f\n", run.bulk_gbps));
  }
  for (const TcRun& run : runs) {
    absl::StrAppend(&out, "\nswitch egress to the server, ", run.name, ":\n",
                    run.server_port.ToString());
  }
  return out;
}

absl::Status ParseDscpMap(const std::string& text,
                          sim::SwitchOptions& options) {
  if (text.empty()) return absl::OkStatus();
  for (absl::string_view entry : absl::StrSplit(text, ',')) {
    std::vector<std::string> parts = absl::StrSplit(entry, ':');
    int dscp = -1;
    int priority = -1;
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &dscp) ||
        !absl::SimpleAtoi(parts[1], &priority) || dscp < 0 ||
        dscp >= sim::kDscpValues || priority < 0 ||
        priority >= sim::kSwitchPriorities) {
      return absl::InvalidArgumentError(
          absl::StrCat("dscp map entry \"", entry,
                       "\": want dscp:priority, dscp 0..63, priority 0..7"));
    }
    options.dscp_to_priority[dscp] = static_cast<uint8_t>(priority);
  }
  return absl::OkStatus();
}

absl::Status ParseWeights(const std::string& text,
                          sim::SwitchOptions& options) {
  std::vector<std::string> parts = absl::StrSplit(text, ',');
  if (parts.size() != sim::kSwitchPriorities) {
    return absl::InvalidArgumentError(
        absl::StrCat("weights \"", text, "\": want eight, one per priority"));
  }
  for (int queue = 0; queue < sim::kSwitchPriorities; ++queue) {
    uint32_t weight = 0;
    if (!absl::SimpleAtoi(parts[queue], &weight) || weight == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("weight \"", parts[queue], "\" of priority ", queue,
                       ": want an integer of at least 1"));
    }
    options.weights[queue] = weight;
  }
  return absl::OkStatus();
}

}  // namespace rdma_transport
