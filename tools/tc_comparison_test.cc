// The traffic-class effect: a ping-pong sharing a switch egress port with
// four bulk WRITE streams has a tail 18x shorter when its DSCP is mapped to
// a higher priority than theirs (measured 40.13 vs 2.18 us one-way, P99;
// docs/simulator.md). Virtual time, deterministic: the factor asserted
// (10x) leaves room for the model to change, not for noise.

#include "tools/tc_comparison.h"

#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "sim/switch.h"
#include "transport/config.h"

namespace rdma_transport {
namespace {

TEST(TcComparisonTest, APriorityForThePingPongShortensItsTailTenfold) {
  // The class the transport gives its QPs for MC_IB_TC=104 (AF31).
  TransportOptions transport;
  transport.traffic_class = 104;
  absl::StatusOr<TransportConfig> config = LoadTransportConfig(transport);
  ASSERT_TRUE(config.ok()) << config.status();

  TcComparisonOptions options;
  options.ping_traffic_class = config->traffic_class.value_or(0);
  options.iterations = 200;
  options.warmup = 20;
  ASSERT_TRUE(ParseDscpMap("26:3", options.prioritised).ok());
  absl::StatusOr<std::vector<TcRun>> runs = RunTcComparison(options);
  ASSERT_TRUE(runs.ok()) << runs.status();
  ASSERT_EQ(runs->size(), 2u);
  const TcRun& one_class = (*runs)[0];
  const TcRun& prioritised = (*runs)[1];
  std::printf("%s", FormatTcComparison(options, *runs).c_str());

  EXPECT_GE(one_class.latency.p99_us, 10 * prioritised.latency.p99_us);
  EXPECT_GE(one_class.latency.t_typical_us,
            10 * prioritised.latency.t_typical_us);
  // Two links of 1 us and little else: it waits for one bulk packet at most.
  EXPECT_LT(prioritised.latency.p99_9_us, 2.5);
  // The bulk streams keep the port busy either way.
  EXPECT_GT(one_class.bulk_gbps, 90);
  EXPECT_GT(prioritised.bulk_gbps, 90);
  // One class: everything in queue 0. Prioritised: the ping-pong's packets
  // (and its ACKs) in queue 3, next to no depth, the bulk in queue 0.
  EXPECT_EQ(one_class.server_port.queues[3].packets, 0u);
  EXPECT_GT(one_class.server_port.queues[0].peak_bytes, 512u * 1024);
  EXPECT_GE(prioritised.server_port.queues[3].packets, 220u);
  EXPECT_LE(prioritised.server_port.queues[3].peak_packets, 2u);
  EXPECT_GT(prioritised.server_port.queues[0].peak_bytes, 512u * 1024);
  for (const TcRun& run : *runs) {
    for (const sim::SwitchQueueCounters& queue : run.server_port.queues) {
      EXPECT_EQ(queue.dropped_packets, 0u) << run.name;
    }
  }
}

TEST(TcComparisonTest, FlagsParseOrNameTheBadEntry) {
  sim::SwitchOptions options;
  ASSERT_TRUE(ParseDscpMap("26:3,46:5", options).ok());
  EXPECT_EQ(options.dscp_to_priority[26], 3);
  EXPECT_EQ(options.dscp_to_priority[46], 5);
  EXPECT_EQ(options.dscp_to_priority[0], 0);
  EXPECT_TRUE(ParseDscpMap("", options).ok());
  EXPECT_EQ(ParseDscpMap("26:8", options).message(),
            "dscp map entry \"26:8\": want dscp:priority, dscp 0..63, "
            "priority 0..7");
  EXPECT_FALSE(ParseDscpMap("64:1", options).ok());
  EXPECT_FALSE(ParseDscpMap("26", options).ok());
  ASSERT_TRUE(ParseWeights("1,1,1,4,1,1,1,1", options).ok());
  EXPECT_EQ(options.weights[3], 4u);
  EXPECT_FALSE(ParseWeights("1,1,1", options).ok());
  EXPECT_FALSE(ParseWeights("1,1,1,0,1,1,1,1", options).ok());
  TcComparisonOptions bad;
  bad.iterations = 0;
  EXPECT_EQ(RunTcComparison(bad).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace rdma_transport
