// Faults scheduled at a virtual time (KillDeviceAt, PortDownAt, PortUpAt):
// a transfer in progress meets them mid-way at exactly the same point in
// both progress modes.

#include <chrono>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "sim/fault_injector.h"
#include "sim/pair_fixture.h"

namespace rdma_transport::sim {
namespace {

using std::chrono::microseconds;
using std::chrono::nanoseconds;

// The transfer: 16 signalled 16 KiB RDMA WRITEs posted as one chain, all in
// flight at once (the send window is far larger), back to back on 100 Gb/s
// links: 1.4 us each (sixteen 1 KiB packets and their headers), 22 us in
// all, so a fault at 10 us meets it mid-way.
constexpr int kWrites = 16;
constexpr uint32_t kWriteBytes = 16 * 1024;
// timeout 1: the transport timer, 8.192 us after the last progress.
constexpr nanoseconds kTimeout{8192};

class ScheduledFaultsTest : public PairTest,
                            public ::testing::WithParamInterface<ProgressMode> {
 protected:
  void SetUp() override {
    ConnectOptions connect;
    connect.timeout = 1;
    connect.retry_cnt = 2;
    FabricOptions options;
    options.progress_mode = GetParam();
    options.link_gbps = 100;
    ASSERT_NO_FATAL_FAILURE(
        Connect(ConnectX6(), ConnectX6(), {}, connect, options));
  }

  bool manual() const { return GetParam() == ProgressMode::kManual; }
  FaultInjector& faults() { return fabric_->faults(); }

  // Posts the transfer in one PostSend call (in kImmediate, the call runs
  // all of it, and any fault scheduled meanwhile).
  void PostTransfer() {
    ibv_sge sges[kWrites];
    ibv_send_wr wrs[kWrites] = {};
    for (int i = 0; i < kWrites; ++i) {
      sges[i] = {a_->address(0), kWriteBytes, a_->lkey()};
      wrs[i].wr_id = static_cast<uint64_t>(i);
      wrs[i].sg_list = &sges[i];
      wrs[i].num_sge = 1;
      wrs[i].opcode = IBV_WR_RDMA_WRITE;
      wrs[i].send_flags = IBV_SEND_SIGNALED;
      wrs[i].wr.rdma.remote_addr = b_->address(0);
      wrs[i].wr.rdma.rkey = b_->rkey();
      wrs[i].next = i + 1 < kWrites ? &wrs[i + 1] : nullptr;
    }
    ibv_send_wr* bad = nullptr;
    ASSERT_OK(verbs_->PostSend(a_->qp(), wrs, &bad));
  }

  // Runs to the end in kManual (kImmediate is there already).
  void Finish() {
    if (manual()) fabric_->RunUntilIdle();
    EXPECT_EQ(fabric_->PendingEvents(), 0u);
  }

  // Checks a_'s send completions, in wr_id order: some successes, then (if
  // fewer than all) one IBV_WC_RETRY_EXC_ERR and flushes for the rest.
  // Returns the successes.
  int SendCompletions() {
    const std::vector<ibv_wc> done = *a_->PollSendCq();
    EXPECT_EQ(done.size(), static_cast<size_t>(kWrites));
    int succeeded = 0;
    while (succeeded < static_cast<int>(done.size()) &&
           done[succeeded].status == IBV_WC_SUCCESS) {
      ++succeeded;
    }
    for (int i = 0; i < static_cast<int>(done.size()); ++i) {
      EXPECT_EQ(done[i].wr_id, static_cast<uint64_t>(i));
      const ibv_wc_status expected = i < succeeded    ? IBV_WC_SUCCESS
                                     : i == succeeded ? IBV_WC_RETRY_EXC_ERR
                                                      : IBV_WC_WR_FLUSH_ERR;
      EXPECT_EQ(done[i].status, expected) << "wr_id " << i;
    }
    return succeeded;
  }
};

TEST_P(ScheduledFaultsTest, KillDeviceAtKillsMidTransfer) {
  const nanoseconds at = microseconds(10);
  ASSERT_OK(faults().KillDeviceAt(b_->device(), at));
  EXPECT_EQ(fabric_->PendingEvents(), 1u);
  EXPECT_EQ(fabric_->Now(), nanoseconds(0));  // Nothing ran yet.
  EXPECT_EQ(QpState(*b_), IBV_QPS_RTS);
  ASSERT_NO_FATAL_FAILURE(PostTransfer());

  if (manual()) {
    fabric_->AdvanceClock(at - nanoseconds(1));
    EXPECT_EQ(QpState(*b_), IBV_QPS_RTS);
    EXPECT_EQ(PortState(*b_), IBV_PORT_ACTIVE);
    EXPECT_TRUE(TakeAsyncEvents(*b_).empty());
    fabric_->AdvanceClock(nanoseconds(1));
    EXPECT_EQ(fabric_->Now(), at);
    EXPECT_EQ(QpState(*b_), IBV_QPS_ERR);
    EXPECT_EQ(PortState(*b_), IBV_PORT_DOWN);
  }
  ASSERT_NO_FATAL_FAILURE(Finish());

  // The WRITEs acknowledged before 10 us succeeded (about 6 of them); the
  // next found b_ dead, was sent again twice (go-back-N from its first
  // unacknowledged packet) and failed when the third timer ran out.
  const int succeeded = SendCompletions();
  EXPECT_GT(succeeded, 4);
  EXPECT_LT(succeeded, 8);
  EXPECT_GE(fabric_->Now(), at + 3 * kTimeout);
  EXPECT_LT(fabric_->Now(), at + 3 * kTimeout + microseconds(15));
  EXPECT_EQ(fabric_->DeviceCounters(a_->device())->retransmissions, 2u);
  const uint64_t delivered =
      fabric_->DeviceCounters(b_->device())->payload_bytes_delivered;
  EXPECT_GE(delivered, uint64_t{kWriteBytes} * succeeded);
  EXPECT_LT(delivered, uint64_t{kWriteBytes} * kWrites);

  std::vector<ibv_async_event> events = TakeAsyncEvents(*b_);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].event_type, IBV_EVENT_QP_FATAL);
  EXPECT_EQ(events[0].element.qp, b_->qp());
  EXPECT_EQ(events[1].event_type, IBV_EVENT_DEVICE_FATAL);
  EXPECT_TRUE(TakeAsyncEvents(*a_).empty());
  EXPECT_EQ(fabric_->Counters().total_async_events(), 2u);
}

TEST_P(ScheduledFaultsTest, PortDownAtLosesTheRestOfTheTransfer) {
  const nanoseconds at = microseconds(10);
  ASSERT_OK(faults().PortDownAt(b_->device(), at));
  ASSERT_NO_FATAL_FAILURE(PostTransfer());
  if (manual()) {
    fabric_->AdvanceClock(at - nanoseconds(1));
    EXPECT_EQ(PortState(*b_), IBV_PORT_ACTIVE);
    fabric_->AdvanceClock(nanoseconds(1));
    EXPECT_EQ(PortState(*b_), IBV_PORT_DOWN);
  }
  ASSERT_NO_FATAL_FAILURE(Finish());

  const int succeeded = SendCompletions();
  EXPECT_GT(succeeded, 4);
  EXPECT_LT(succeeded, 8);
  EXPECT_GE(fabric_->Now(), microseconds(10) + 3 * kTimeout);
  EXPECT_GT(fabric_->DeviceCounters(b_->device())->packets_dropped, 3u);
  EXPECT_EQ(PortState(*b_), IBV_PORT_DOWN);
  EXPECT_EQ(QpState(*b_), IBV_QPS_RTS);  // Only the requester failed.
  std::vector<ibv_async_event> events = TakeAsyncEvents(*b_);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].event_type, IBV_EVENT_PORT_ERR);
  EXPECT_EQ(events[0].element.port_num, 1);
}

TEST_P(ScheduledFaultsTest, PortUpAtInTimeLetsTheTransferFinish) {
  ASSERT_OK(faults().PortDownAt(b_->device(), microseconds(10)));
  ASSERT_OK(faults().PortUpAt(b_->device(), microseconds(20)));
  ASSERT_NO_FATAL_FAILURE(PostTransfer());
  if (manual()) {
    fabric_->AdvanceClock(microseconds(15));
    EXPECT_EQ(PortState(*b_), IBV_PORT_DOWN);
    fabric_->AdvanceClock(microseconds(5));
    EXPECT_EQ(PortState(*b_), IBV_PORT_ACTIVE);
  }
  ASSERT_NO_FATAL_FAILURE(Finish());

  // What was lost between 10 and 20 us is sent again from the first
  // unacknowledged packet when the timer runs out after the port is back;
  // every WRITE succeeds.
  EXPECT_EQ(SendCompletions(), kWrites);
  EXPECT_GT(fabric_->Now(), microseconds(20));
  EXPECT_GE(fabric_->DeviceCounters(a_->device())->retransmissions, 1u);
  EXPECT_GT(fabric_->DeviceCounters(b_->device())->packets_dropped, 1u);
  EXPECT_GE(fabric_->DeviceCounters(b_->device())->payload_bytes_delivered,
            kWrites * kWriteBytes);
  std::vector<ibv_async_event> events = TakeAsyncEvents(*b_);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].event_type, IBV_EVENT_PORT_ERR);
  EXPECT_EQ(events[1].event_type, IBV_EVENT_PORT_ACTIVE);
}

TEST_P(ScheduledFaultsTest, ClearCancelsScheduledFaults) {
  ASSERT_OK(faults().KillDeviceAt(b_->device(), microseconds(5)));
  ASSERT_OK(faults().PortDownAt(a_->device(), microseconds(6)));
  EXPECT_EQ(fabric_->PendingEvents(), 2u);
  faults().Clear();
  EXPECT_EQ(fabric_->PendingEvents(), 0u);
  ASSERT_NO_FATAL_FAILURE(PostTransfer());
  ASSERT_NO_FATAL_FAILURE(Finish());
  EXPECT_EQ(SendCompletions(), kWrites);
  // Pipelined: the data's serialisation plus one round trip.
  EXPECT_LT(fabric_->Now(), microseconds(26));
  EXPECT_EQ(fabric_->DeviceCounters(a_->device())->retransmissions, 0u);
  EXPECT_TRUE(TakeAsyncEvents(*a_).empty());
  EXPECT_TRUE(TakeAsyncEvents(*b_).empty());
}

TEST_P(ScheduledFaultsTest, FaultsAtTheSameTimeRunInTheOrderScheduled) {
  ASSERT_OK(faults().PortDownAt(b_->device(), microseconds(3)));
  ASSERT_OK(faults().PortUpAt(b_->device(), microseconds(3)));
  ASSERT_OK(faults().PortDownAt(b_->device(), microseconds(3)));
  fabric_->RunUntilIdle();
  EXPECT_EQ(fabric_->Now(), microseconds(3));
  std::vector<ibv_async_event> events = TakeAsyncEvents(*b_);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].event_type, IBV_EVENT_PORT_ERR);
  EXPECT_EQ(events[1].event_type, IBV_EVENT_PORT_ACTIVE);
  EXPECT_EQ(events[2].event_type, IBV_EVENT_PORT_ERR);
  EXPECT_EQ(PortState(*b_), IBV_PORT_DOWN);
}

TEST_P(ScheduledFaultsTest, BadSchedulesAreRefused) {
  fabric_->AdvanceClock(microseconds(5));
  EXPECT_EQ(faults().KillDeviceAt(b_->device(), microseconds(4)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(faults().PortDownAt("no_such_device", microseconds(6)).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(faults().PortUpAt("no_such_device", microseconds(6)).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(fabric_->PendingEvents(), 0u);
  // Now itself is not the past.
  ASSERT_OK(faults().PortDownAt(b_->device(), microseconds(5)));
  fabric_->RunUntilIdle();
  EXPECT_EQ(PortState(*b_), IBV_PORT_DOWN);
  EXPECT_EQ(fabric_->Now(), microseconds(5));
}

INSTANTIATE_TEST_SUITE_P(BothModes, ScheduledFaultsTest,
                         ::testing::Values(ProgressMode::kImmediate,
                                           ProgressMode::kManual),
                         [](const auto& info) {
                           return info.param == ProgressMode::kImmediate
                                      ? std::string("Immediate")
                                      : std::string("Manual");
                         });

}  // namespace
}  // namespace rdma_transport::sim
