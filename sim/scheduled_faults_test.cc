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

// The transfer: eight signalled 16 KiB RDMA WRITEs posted as one chain. Each
// takes 2.31 us out (1 us latency + 1.31 us at 100 Gb/s) and 1 us for the
// ACK, so WRITE k (from 0) is transmitted at 3.31 k us; the fourth leaves at
// 9.93 us and would arrive at 12.24 us.
constexpr int kWrites = 8;
constexpr uint32_t kWriteBytes = 16 * 1024;
constexpr nanoseconds kPerWrite{3310};
// timeout 1: a retransmission 2.31 + 1 + 8.192 us after a transmission.
constexpr nanoseconds kRetryPeriod{11502};

class ScheduledFaultsTest : public PairTest,
                            public ::testing::WithParamInterface<ProgressMode> {
 protected:
  void SetUp() override {
    ConnectOptions connect;
    connect.timeout = 1;
    connect.retry_cnt = 2;
    FabricOptions options;
    options.progress_mode = GetParam();
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

  // Checks a_'s send completions: `succeeded` successes, then (if fewer than
  // all) one IBV_WC_RETRY_EXC_ERR and flushes for the rest, in wr_id order.
  void ExpectSendCompletions(int succeeded) {
    const std::vector<ibv_wc> done = *a_->PollSendCq();
    ASSERT_EQ(done.size(), static_cast<size_t>(kWrites));
    for (int i = 0; i < kWrites; ++i) {
      EXPECT_EQ(done[i].wr_id, static_cast<uint64_t>(i));
      const ibv_wc_status expected = i < succeeded    ? IBV_WC_SUCCESS
                                     : i == succeeded ? IBV_WC_RETRY_EXC_ERR
                                                      : IBV_WC_WR_FLUSH_ERR;
      EXPECT_EQ(done[i].status, expected) << "wr_id " << i;
    }
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

  // Three WRITEs were acknowledged before 10 us; the fourth (sent at
  // 9.93 us) found b_ dead, was retransmitted twice and failed when the
  // third timer ran out.
  ASSERT_NO_FATAL_FAILURE(ExpectSendCompletions(3));
  EXPECT_EQ(fabric_->Now(), 3 * kPerWrite + 3 * kRetryPeriod);
  EXPECT_EQ(fabric_->DeviceCounters(a_->device())->retransmissions, 2u);
  EXPECT_EQ(fabric_->DeviceCounters(b_->device())->packets_dropped, 3u);
  EXPECT_EQ(fabric_->DeviceCounters(b_->device())->payload_bytes_delivered,
            3u * kWriteBytes);

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

  ASSERT_NO_FATAL_FAILURE(ExpectSendCompletions(3));
  EXPECT_EQ(fabric_->Now(), 3 * kPerWrite + 3 * kRetryPeriod);
  EXPECT_EQ(fabric_->DeviceCounters(b_->device())->packets_dropped, 3u);
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

  // The fourth WRITE's one retransmission (at 21.432 us) gets through; the
  // last four follow.
  ASSERT_NO_FATAL_FAILURE(ExpectSendCompletions(kWrites));
  EXPECT_EQ(fabric_->Now(), 3 * kPerWrite + kRetryPeriod + 5 * kPerWrite);
  EXPECT_EQ(fabric_->DeviceCounters(a_->device())->retransmissions, 1u);
  EXPECT_EQ(fabric_->DeviceCounters(b_->device())->packets_dropped, 1u);
  EXPECT_EQ(fabric_->DeviceCounters(b_->device())->payload_bytes_delivered,
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
  ASSERT_NO_FATAL_FAILURE(ExpectSendCompletions(kWrites));
  EXPECT_EQ(fabric_->Now(), kWrites * kPerWrite);
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
