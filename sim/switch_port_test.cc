// SwitchPort (sim/internal/switch_port.h) on its own: which queue goes
// next, the byte limit, the counters.

#include "sim/internal/switch_port.h"

#include <array>
#include <vector>

#include "gtest/gtest.h"
#include "sim/switch.h"

namespace rdma_transport::sim::internal {
namespace {

constexpr uint64_t kNoLimit = ~uint64_t{0};

TEST(SwitchPortTest, StrictPriorityServesTheHighestQueueFirst) {
  SwitchPort<int> port;
  SwitchOptions options;
  ASSERT_TRUE(port.Enqueue(0, 1, 100, kNoLimit));
  ASSERT_TRUE(port.Enqueue(3, 2, 100, kNoLimit));
  ASSERT_TRUE(port.Enqueue(0, 3, 100, kNoLimit));
  ASSERT_TRUE(port.Enqueue(7, 4, 100, kNoLimit));
  ASSERT_TRUE(port.Enqueue(3, 5, 100, kNoLimit));
  std::vector<int> order;
  while (!port.empty()) order.push_back(port.Dequeue(options).packet);
  EXPECT_EQ(order, (std::vector<int>{4, 2, 5, 1, 3}));
}

TEST(SwitchPortTest, StrictPriorityStarvesLowerQueuesWhileHigherOnesHoldAny) {
  SwitchPort<int> port;
  SwitchOptions options;
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(port.Enqueue(0, 0, 1000, kNoLimit));
  int high_sent = 0;
  // Every time the port picks, a high-priority packet is waiting.
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(port.Enqueue(5, 5, 1000, kNoLimit));
    EXPECT_EQ(port.Dequeue(options).packet, 5);
    ++high_sent;
  }
  EXPECT_EQ(high_sent, 100);
  EXPECT_EQ(port.packets(), 10u);  // Not one low-priority packet went.
}

TEST(SwitchPortTest, WeightedRoundRobinSharesBytesByWeight) {
  SwitchPort<int> port;
  SwitchOptions options;
  options.scheduling = SwitchScheduling::kWeighted;
  options.weights = {1, 3, 1, 1, 1, 1, 1, 1};
  options.quantum_bytes = 1000;
  // Queue 0 sends small packets, queue 1 large ones: the share is of bytes.
  for (int i = 0; i < 4000; ++i) ASSERT_TRUE(port.Enqueue(0, 0, 250, kNoLimit));
  for (int i = 0; i < 1000; ++i) {
    ASSERT_TRUE(port.Enqueue(1, 1, 1000, kNoLimit));
  }
  std::array<uint64_t, 2> bytes{};
  for (int i = 0; i < 2000; ++i) {
    const SwitchPort<int>::Entry entry = port.Dequeue(options);
    bytes[entry.packet] += entry.bytes;
  }
  const double share = static_cast<double>(bytes[1]) / (bytes[0] + bytes[1]);
  EXPECT_NEAR(share, 0.75, 0.01) << bytes[0] << " vs " << bytes[1];
}

TEST(SwitchPortTest, WeightedRoundRobinGivesAnIdleQueuesShareToTheOthers) {
  SwitchPort<int> port;
  SwitchOptions options;
  options.scheduling = SwitchScheduling::kWeighted;
  options.weights = {1, 1, 1, 1, 1, 1, 1, 8};
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(port.Enqueue(0, i, 4096, kNoLimit));
  for (int i = 0; i < 5; ++i) EXPECT_EQ(port.Dequeue(options).packet, i);
  EXPECT_TRUE(port.empty());
}

TEST(SwitchPortTest, AQueueAtItsLimitDropsAtItsTailAndCountsIt) {
  SwitchPort<int> port;
  SwitchOptions options;
  EXPECT_TRUE(port.Enqueue(2, 1, 1000, 2500));
  EXPECT_TRUE(port.Enqueue(2, 2, 1000, 2500));
  EXPECT_FALSE(port.Enqueue(2, 3, 1000, 2500));  // 3000 > 2500
  EXPECT_TRUE(port.Enqueue(2, 4, 500, 2500));    // 2500 fits exactly
  EXPECT_TRUE(port.Enqueue(4, 5, 1000, 2500));   // another queue's own limit
  EXPECT_EQ(port.depth_bytes(2), 2500u);
  EXPECT_EQ(port.Dequeue(options).packet, 5);
  EXPECT_EQ(port.Dequeue(options).packet, 1);
  EXPECT_TRUE(port.Enqueue(2, 6, 1000, 2500));  // room again

  const SwitchQueueCounters& q2 = port.counters().queues[2];
  EXPECT_EQ(q2.packets, 4u);
  EXPECT_EQ(q2.bytes, 3500u);
  EXPECT_EQ(q2.dropped_packets, 1u);
  EXPECT_EQ(q2.dropped_bytes, 1000u);
  EXPECT_EQ(q2.peak_bytes, 2500u);
  EXPECT_EQ(q2.peak_packets, 3u);
  EXPECT_EQ(port.counters().queues[4].packets, 1u);
  EXPECT_EQ(port.counters().ToString(),
            "q2 packets=4 bytes=3500 dropped=1 peak_bytes=2500 "
            "peak_packets=3\n"
            "q4 packets=1 bytes=1000 dropped=0 peak_bytes=1000 "
            "peak_packets=1\n");
}

TEST(SwitchPortTest, OptionsAreValidated) {
  SwitchOptions options;
  EXPECT_TRUE(ValidateSwitchOptions(options).ok());
  options.dscp_to_priority[46] = 8;
  EXPECT_EQ(ValidateSwitchOptions(options).code(),
            absl::StatusCode::kInvalidArgument);
  options.dscp_to_priority[46] = 7;
  options.scheduling = SwitchScheduling::kWeighted;
  options.weights[3] = 0;
  EXPECT_EQ(ValidateSwitchOptions(options).message(),
            "weights[3] is 0: weights are at least 1");
  options.weights[3] = 1;
  options.queue_limit_bytes = 0;
  EXPECT_EQ(ValidateSwitchOptions(options).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SwitchPriority(options, 104), 0);  // DSCP 26, unmapped
  options.dscp_to_priority[26] = 3;
  EXPECT_EQ(SwitchPriority(options, 104), 3);
  EXPECT_EQ(SwitchPriority(options, 105), 3);  // ECN bits ignored
}

}  // namespace
}  // namespace rdma_transport::sim::internal
