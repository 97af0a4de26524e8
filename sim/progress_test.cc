// Progress and time: manual stepping, the virtual clock, when payloads are
// read, and the RNR paths.

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "sim/pair_fixture.h"

namespace rdma_transport::sim {
namespace {

using std::chrono::microseconds;
using std::chrono::nanoseconds;

FabricOptions Manual() {
  FabricOptions options;
  options.progress_mode = ProgressMode::kManual;
  return options;
}

class ProgressTest : public PairTest {
 protected:
  void ConnectManual(const EndpointOptions& endpoint = {},
                     const ConnectOptions& connect = {}) {
    ASSERT_NO_FATAL_FAILURE(
        Connect(ConnectX6(), ConnectX6(), endpoint, connect, Manual()));
  }
};

TEST_F(ProgressTest, ManualModeMovesOnlyWhenStepped) {
  ASSERT_NO_FATAL_FAILURE(ConnectManual());
  ASSERT_OK(b_->PostRecv(1, 0, 64));
  ASSERT_OK(a_->PostSend(2, IBV_WR_SEND, 0, 0));
  EXPECT_EQ(fabric_->PendingEvents(), 1u);
  EXPECT_TRUE(b_->PollRecvCq()->empty());

  ASSERT_TRUE(fabric_->Step());  // a_ transmits.
  EXPECT_EQ(fabric_->Now(), nanoseconds(0));
  EXPECT_TRUE(b_->PollRecvCq()->empty());
  // The request arrives 1 us after its headers (82 bytes at 200 Gb/s,
  // 3.28 ns) left.
  ASSERT_TRUE(fabric_->Step());
  EXPECT_EQ(fabric_->Now(), microseconds(1) + nanoseconds(4));
  EXPECT_EQ(b_->PollRecvCq()->size(), 1u);
  EXPECT_TRUE(a_->PollSendCq()->empty());
  ASSERT_TRUE(fabric_->Step());  // The ACK arrives.
  EXPECT_EQ(fabric_->Now(), microseconds(2) + nanoseconds(8));
  EXPECT_EQ(a_->PollSendCq()->size(), 1u);
  EXPECT_FALSE(fabric_->Step());
}

TEST_F(ProgressTest, AdvanceClockRunsWhatIsDue) {
  ASSERT_NO_FATAL_FAILURE(ConnectManual());
  ASSERT_OK(b_->PostRecv(1, 0, 4096));
  // 4000 bytes in four 1 KiB packets with 82 bytes of headers each
  // serialise at 200 Gb/s in 173.12 ns; the last arrives at 1174 ns.
  ASSERT_OK(a_->PostSend(2, IBV_WR_SEND, 0, 4000));
  fabric_->AdvanceClock(nanoseconds(1173));
  EXPECT_TRUE(b_->PollRecvCq()->empty());
  fabric_->AdvanceClock(nanoseconds(1));
  EXPECT_EQ(fabric_->Now(), nanoseconds(1174));
  EXPECT_EQ(b_->PollRecvCq()->size(), 1u);
  fabric_->AdvanceClock(microseconds(5));
  EXPECT_EQ(a_->PollSendCq()->size(), 1u);
  EXPECT_EQ(fabric_->Now(), nanoseconds(6174));
}

TEST_F(ProgressTest, InlinePayloadIsCopiedAtPostOthersAtTransmission) {
  EndpointOptions options;
  options.cap.max_inline_data = 64;
  ASSERT_NO_FATAL_FAILURE(ConnectManual(options));
  ASSERT_OK(b_->PostRecv(1, 0, 64));
  ASSERT_OK(b_->PostRecv(2, 64, 64));

  std::memcpy(a_->data(), "AAAA", 4);
  ASSERT_OK(
      a_->PostSend(10, IBV_WR_SEND, 0, 4, IBV_SEND_SIGNALED | IBV_SEND_INLINE));
  std::memcpy(a_->data(), "BBBB", 4);  // Too late for the inline send.
  std::memcpy(a_->data() + 100, "CCCC", 4);
  ASSERT_OK(a_->PostSend(11, IBV_WR_SEND, 100, 4));
  std::memcpy(a_->data() + 100, "DDDD", 4);  // In time: not yet transmitted.
  fabric_->RunUntilIdle();

  EXPECT_EQ(std::string(reinterpret_cast<char*>(b_->data()), 4), "AAAA");
  EXPECT_EQ(std::string(reinterpret_cast<char*>(b_->data()) + 64, 4), "DDDD");
  const SimCounters counters = *fabric_->DeviceCounters(a_->device());
  EXPECT_EQ(counters.inline_sends, 1u);
  EXPECT_EQ(counters.send_wrs_posted, 2u);
  EXPECT_EQ(counters.dma_read_bytes, 4u);  // The inline send read nothing.
  EXPECT_EQ(a_->PollSendCq()->size(), 2u);
}

TEST_F(ProgressTest, SwitchingToImmediateRunsPendingWork) {
  ASSERT_NO_FATAL_FAILURE(ConnectManual());
  ASSERT_OK(b_->PostRecv(1, 0, 64));
  ASSERT_OK(a_->PostSend(2, IBV_WR_SEND, 0, 8));
  fabric_->set_progress_mode(ProgressMode::kImmediate);
  EXPECT_EQ(fabric_->PendingEvents(), 0u);
  EXPECT_EQ(a_->PollSendCq()->size(), 1u);
}

TEST_F(ProgressTest, FiniteRnrRetryEndsInRnrRetryExceeded) {
  ConnectOptions connect;
  connect.rnr_retry = 3;
  connect.min_rnr_timer = 1;  // 10 us.
  ASSERT_NO_FATAL_FAILURE(Connect(ConnectX6(), ConnectX6(), {}, connect));
  const nanoseconds before = fabric_->Now();
  ASSERT_OK(a_->PostSend(1, IBV_WR_SEND, 0, 8));
  ASSERT_OK(a_->PostSend(2, IBV_WR_SEND, 0, 8));
  const std::vector<ibv_wc> sent = *a_->PollSendCq();
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[0].status, IBV_WC_RNR_RETRY_EXC_ERR);
  EXPECT_EQ(sent[1].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(QpState(*a_), IBV_QPS_ERR);
  EXPECT_EQ(QpState(*b_), IBV_QPS_RTS);  // RNR is no error at the responder.
  const SimCounters counters = *fabric_->DeviceCounters(a_->device());
  EXPECT_EQ(counters.rnr_naks, 4u);
  EXPECT_EQ(counters.retransmissions, 3u);
  // Four round trips of 2 us (and 8 ns of headers), three RNR waits of
  // 10 us.
  EXPECT_EQ(fabric_->Now() - before,
            microseconds(4 * 2 + 3 * 10) + nanoseconds(4 * 8));
}

TEST_F(ProgressTest, InfiniteRnrRetryWaitsForAReceive) {
  ASSERT_NO_FATAL_FAILURE(Connect());  // rnr_retry 7.
  std::memcpy(a_->data(), "late", 4);
  ASSERT_OK(a_->PostSend(1, IBV_WR_SEND, 0, 4));
  ASSERT_OK(a_->PostSend(2, IBV_WR_SEND, 0, 4));
  // Nothing completes, nothing is left to run: the requester waits.
  EXPECT_TRUE(a_->PollSendCq()->empty());
  EXPECT_EQ(fabric_->PendingEvents(), 0u);
  EXPECT_EQ(QpState(*a_), IBV_QPS_RTS);

  ASSERT_OK(b_->PostRecv(10, 0, 64));
  EXPECT_EQ(PollOneRecv(*b_).wr_id, 10u);
  EXPECT_EQ(std::memcmp(b_->data(), "late", 4), 0);
  EXPECT_EQ(PollOneSend(*a_).wr_id, 1u);
  // The second send waits again, in order, for the next receive.
  ASSERT_OK(b_->PostRecv(11, 64, 64));
  EXPECT_EQ(PollOneRecv(*b_).wr_id, 11u);
  EXPECT_EQ(PollOneSend(*a_).wr_id, 2u);
  EXPECT_EQ(fabric_->DeviceCounters(a_->device())->rnr_naks, 2u);
}

TEST_F(ProgressTest, InfiniteRnrResumesNoEarlierThanTheRnrTimer) {
  ConnectOptions connect;
  connect.min_rnr_timer = 14;  // 1.28 ms.
  ASSERT_NO_FATAL_FAILURE(ConnectManual({}, connect));
  ASSERT_OK(a_->PostSend(1, IBV_WR_SEND, 0, 4));
  fabric_->RunUntilIdle();
  // RNR NAK received (a round trip and its headers).
  EXPECT_EQ(fabric_->Now(), microseconds(2) + nanoseconds(8));
  ASSERT_OK(b_->PostRecv(10, 0, 64));
  EXPECT_TRUE(b_->PollRecvCq()->empty());  // Manual: nothing moved yet.
  fabric_->RunUntilIdle();
  EXPECT_EQ(PollOneRecv(*b_).wr_id, 10u);
  // Retried 1280 us after the NAK, answered a round trip later.
  EXPECT_EQ(fabric_->Now(), microseconds(2 + 1280 + 2) + nanoseconds(16));
  EXPECT_EQ(PollOneSend(*a_).status, IBV_WC_SUCCESS);
}

TEST_F(ProgressTest, ResetResponderReleasesAWaitingRequester) {
  ConnectOptions connect;
  connect.retry_cnt = 1;
  ASSERT_NO_FATAL_FAILURE(Connect(ConnectX6(), ConnectX6(), {}, connect));
  ASSERT_OK(a_->PostSend(1, IBV_WR_SEND, 0, 4));
  EXPECT_TRUE(a_->PollSendCq()->empty());
  ibv_qp_attr reset{};
  reset.qp_state = IBV_QPS_RESET;
  ASSERT_OK(verbs_->ModifyQp(b_->qp(), &reset, IBV_QP_STATE));
  // The retry finds no QP ready to receive: transport retries, then failure.
  EXPECT_EQ(PollOneSend(*a_).status, IBV_WC_RETRY_EXC_ERR);
}

// The same scenario twice gives the same clock and counters.
TEST(DeterminismTest, SameScenarioSameResult) {
  auto run = []() {
    Fabric fabric;
    SimVerbs verbs(&fabric);
    auto a = *Endpoint::Create(&verbs, *fabric.AddDevice(ConnectX6()));
    auto b = *Endpoint::Create(&verbs, *fabric.AddDevice(IntelE810()));
    ConnectOptions connect;
    connect.timeout = 8;
    EXPECT_OK(a->ConnectTo(*b, connect));
    EXPECT_OK(b->ConnectTo(*a, connect));
    EXPECT_OK(fabric.faults().DropPackets(FaultTarget::Qp(b->qp_num()), 3));
    EXPECT_OK(fabric.faults().DelayDelivery(FaultTarget::Qp(a->qp_num()),
                                            microseconds(3)));
    for (int i = 0; i < 10; ++i) {
      EXPECT_OK(b->PostRecv(i, i * 100, 100));
      EXPECT_OK(a->PostSend(i, IBV_WR_SEND, 0, 100));
    }
    EXPECT_EQ(a->PollSendCq()->size(), 10u);
    return std::make_pair(fabric.Now(), fabric.Counters().ToString());
  };
  const auto first = run();
  const auto second = run();
  EXPECT_EQ(first.first, second.first);
  EXPECT_EQ(first.second, second.second);
  EXPECT_GT(first.first, microseconds(100));
}

}  // namespace
}  // namespace rdma_transport::sim
