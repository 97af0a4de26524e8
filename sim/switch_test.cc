// The fabric's switch (sim/switch.h) end to end: WRITE streams from two
// hosts to a third contend at the switch's egress port towards it, where
// their traffic classes pick their queues.

#include "sim/switch.h"

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>

#include "gtest/gtest.h"
#include "sim/fabric.h"
#include "sim/sim_testing.h"
#include "sim/sim_verbs.h"
#include "sim/test_macros.h"
#include "sim/traffic_mix.h"

namespace rdma_transport::sim {
namespace {

constexpr uint8_t kHighClass = 104;  // DSCP 26
constexpr uint8_t kHighPriority = 5;

class SwitchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    FabricOptions options;
    options.progress_mode = ProgressMode::kManual;
    options.link_gbps = 100;
    fabric_ = std::make_unique<Fabric>(options);
    verbs_ = std::make_unique<SimVerbs>(fabric_.get());
    a_ = *fabric_->AddDevice(ConnectX7());
    b_ = *fabric_->AddDevice(ConnectX7());
    server_ = *fabric_->AddDevice(ConnectX7());
    mix_ = std::make_unique<TrafficMix>(fabric_.get(), verbs_.get());
  }

  void TearDown() override {
    EXPECT_OK(mix_->Close());
    fabric_->RunUntilIdle();
    EXPECT_TRUE(fabric_->LeakReport().empty());
  }

  static SwitchOptions Prioritised(SwitchScheduling scheduling) {
    SwitchOptions options;
    options.enabled = true;
    options.scheduling = scheduling;
    options.dscp_to_priority[kHighClass >> 2] = kHighPriority;
    return options;
  }

  // A stream from each sender to the server, `messages` WRITEs each (0:
  // for as long as Run() lasts): the first with kHighClass.
  void AddTwoStreams(int messages = 0) {
    FlowOptions high;
    high.traffic_class = kHighClass;
    high.messages = messages;
    FlowOptions low;
    low.messages = messages;
    ASSERT_EQ(*mix_->AddWriteStream(a_, server_, high), 0);
    ASSERT_EQ(*mix_->AddWriteStream(b_, server_, low), 1);
  }

  std::unique_ptr<Fabric> fabric_;
  std::unique_ptr<SimVerbs> verbs_;
  std::string a_;
  std::string b_;
  std::string server_;
  std::unique_ptr<TrafficMix> mix_;
};

TEST_F(SwitchTest, IsOffByDefaultAndCountsNothing) {
  AddTwoStreams();
  ASSERT_OK(mix_->Run([&] { return mix_->completed(0) >= 8; }));
  const SwitchPortCounters port = *fabric_->SwitchCounters(server_);
  EXPECT_EQ(port.ToString(), "");
  EXPECT_EQ(fabric_->SwitchCounters("nothing").status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(SwitchTest, RefusesBadOptionsAndChangesWhilePacketsAreInIt) {
  SwitchOptions options = Prioritised(SwitchScheduling::kStrictPriority);
  options.dscp_to_priority[0] = 9;
  EXPECT_EQ(fabric_->ConfigureSwitch(options).code(),
            absl::StatusCode::kInvalidArgument);
  options.dscp_to_priority[0] = 0;
  ASSERT_OK(fabric_->ConfigureSwitch(options));
  AddTwoStreams();
  ASSERT_OK(mix_->Run([&] { return mix_->completed(0) >= 1; }));
  EXPECT_EQ(fabric_->ConfigureSwitch(options).code(),
            absl::StatusCode::kFailedPrecondition);
  // Idle again: reconfiguring empties the counters; switching it off leaves
  // none to read.
  ASSERT_OK(mix_->Close());
  fabric_->RunUntilIdle();
  EXPECT_NE(fabric_->SwitchCounters(server_)->ToString(), "");
  ASSERT_OK(fabric_->ConfigureSwitch(options));
  EXPECT_EQ(fabric_->SwitchCounters(server_)->ToString(), "");
  ASSERT_OK(fabric_->ConfigureSwitch(SwitchOptions{}));
  EXPECT_EQ(fabric_->SwitchCounters(server_)->queues[0].packets, 0u);
}

// While the high class has packets queued, the low one sends none: by the
// time the high stream has written its 64 WRITEs, the low one has written
// only what went before the high queue filled; then it has the port.
TEST_F(SwitchTest, StrictPriorityStarvesTheLowerClass) {
  ASSERT_OK(
      fabric_->ConfigureSwitch(Prioritised(SwitchScheduling::kStrictPriority)));
  AddTwoStreams(/*messages=*/64);
  ASSERT_OK(mix_->Run([&] { return mix_->completed(0) >= 64; }));
  EXPECT_LE(mix_->completed(1), 2);
  const SwitchPortCounters port = *fabric_->SwitchCounters(server_);
  EXPECT_EQ(port.queues[kHighPriority].packets, 64u * 16);  // none lost
  EXPECT_GT(port.queues[0].peak_bytes, 3u * 64 * 1024);     // all of it waiting
  EXPECT_EQ(port.queues[0].dropped_packets, 0u);
  ASSERT_OK(mix_->Run([&] { return mix_->completed(1) >= 64; }));
}

// Weights 3:1 give the high class three quarters of the port's bytes.
TEST_F(SwitchTest, WeightedSchedulingSharesThePortByWeight) {
  SwitchOptions options = Prioritised(SwitchScheduling::kWeighted);
  options.weights[kHighPriority] = 3;
  ASSERT_OK(fabric_->ConfigureSwitch(options));
  AddTwoStreams();
  ASSERT_OK(mix_->Run([&] { return mix_->completed(0) >= 96; }));
  EXPECT_GE(mix_->completed(1), 28);
  EXPECT_LE(mix_->completed(1), 36);
}

// One class, a queue of 128 KiB, two senders of four 64 KiB WRITEs each in
// flight: the queue overflows, packets are dropped at its tail, and RC's
// go-back-N delivers every WRITE anyway.
TEST_F(SwitchTest, TailDropsAreCountedAndRecoveredByRc) {
  SwitchOptions options;
  options.enabled = true;
  options.queue_limit_bytes = 128 * 1024;
  ASSERT_OK(fabric_->ConfigureSwitch(options));
  AddTwoStreams(/*messages=*/32);
  ASSERT_OK(mix_->Run(
      [&] { return mix_->completed(0) >= 32 && mix_->completed(1) >= 32; }));
  const SwitchPortCounters port = *fabric_->SwitchCounters(server_);
  EXPECT_GT(port.queues[0].dropped_packets, 0u);
  EXPECT_LE(port.queues[0].peak_bytes, 128u * 1024);
  const SimCounters server = *fabric_->DeviceCounters(server_);
  EXPECT_GE(server.packets_dropped, port.queues[0].dropped_packets);
  EXPECT_GT(fabric_->Counters().retransmissions, 0u);
  std::printf("tail drops: %s", port.ToString().c_str());
}

// The switch adds a link's latency and a packet's serialisation to every
// hop; the same run twice gives the same trace.
TEST_F(SwitchTest, AddsOneHopAndIsDeterministic) {
  auto run = [](bool with_switch) {
    FabricOptions options;
    options.progress_mode = ProgressMode::kManual;
    options.link_gbps = 100;
    Fabric fabric(options);
    SimVerbs verbs(&fabric);
    const std::string client = *fabric.AddDevice(ConnectX7());
    const std::string server = *fabric.AddDevice(ConnectX7());
    SwitchOptions switch_options;
    switch_options.enabled = with_switch;
    EXPECT_OK(fabric.ConfigureSwitch(switch_options));
    TrafficMix mix(&fabric, &verbs);
    FlowOptions ping;
    ping.message_bytes = 8;
    EXPECT_OK(mix.AddPingPong(client, server, ping));
    EXPECT_OK(mix.Run([&] { return mix.pings() >= 4; }));
    EXPECT_OK(mix.Close());
    return std::make_pair(mix.ping_one_way_us().back(), fabric.TraceDigest());
  };
  const auto [direct_us, direct_digest] = run(false);
  const auto [switched_us, switched_digest] = run(true);
  // 8 bytes and 86 of headers at 100 Gb/s: 7.52 ns; and 1 us of latency.
  EXPECT_NEAR(switched_us - direct_us, 1.0075, 0.002);
  EXPECT_NE(direct_digest, switched_digest);
  EXPECT_EQ(run(true).second, switched_digest);
  EXPECT_EQ(run(false).second, direct_digest);
}

}  // namespace
}  // namespace rdma_transport::sim
