// The RC protocol at packet level: several messages in flight, path-MTU
// packets, go-back-N after a loss, duplicates, the retry budget in virtual
// time, and the READ depth on both sides.

#include <chrono>
#include <cstdint>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "sim/fault_injector.h"
#include "sim/pair_fixture.h"

namespace rdma_transport::sim {
namespace {

using std::chrono::microseconds;
using std::chrono::nanoseconds;

class PacketModelTest : public PairTest {
 protected:
  void Fill(Endpoint& endpoint, size_t offset, size_t length, uint8_t seed) {
    for (size_t i = 0; i < length; ++i) {
      endpoint.data()[offset + i] = static_cast<uint8_t>(seed + i * 7);
    }
  }
  bool Same(Endpoint& x, size_t x_offset, Endpoint& y, size_t y_offset,
            size_t length) {
    return std::memcmp(x.data() + x_offset, y.data() + y_offset, length) == 0;
  }
  FabricOptions Manual() {
    FabricOptions options;
    options.progress_mode = ProgressMode::kManual;
    return options;
  }
};

// 16 KiB in sixteen 1 KiB packets; the third is lost. The fourth arrives out
// of sequence and is NAKed; the requester goes back to the third at once
// (long before its 67 ms timer) and the data lands byte for byte.
TEST_F(PacketModelTest, ALostPacketMidMessageIsResentByGoBackN) {
  ASSERT_NO_FATAL_FAILURE(Connect(ConnectX6(), ConnectX6(), {}, {}, Manual()));
  Fill(*a_, 0, 16384, 3);
  ASSERT_OK(b_->PostRecv(1, 0, 16384));
  ASSERT_OK(a_->PostSend(2, IBV_WR_SEND, 0, 16384));
  // Packets leave every 44.24 ns (1024 + 82 bytes at 200 Gb/s) and arrive
  // 1 us later: two are in by 1.1 us.
  fabric_->AdvanceClock(nanoseconds(1100));
  ASSERT_OK(fabric_->faults().DropPackets(FaultTarget::Qp(b_->qp_num()), 1));
  fabric_->RunUntilIdle();
  EXPECT_EQ(PollOneRecv(*b_).byte_len, 16384u);
  EXPECT_TRUE(Same(*a_, 0, *b_, 0, 16384));
  EXPECT_EQ(PollOneSend(*a_).status, IBV_WC_SUCCESS);
  const SimCounters a = *fabric_->DeviceCounters(a_->device());
  const SimCounters b = *fabric_->DeviceCounters(b_->device());
  EXPECT_EQ(a.retransmissions, 1u);
  // 16 packets, then the 14 from the third on again.
  EXPECT_EQ(a.packets_sent, 16u + 14u);
  // The lost one and those that arrived out of sequence behind it.
  EXPECT_GE(b.packets_dropped, 2u);
  EXPECT_EQ(b.payload_bytes_delivered, 16384u);
  EXPECT_LT(fabric_->Now(), microseconds(10));
}

// A READ response packet lost: the requester drops the ones after it and,
// when its timer (timeout 8: 1.05 ms) runs out, asks for the rest again.
TEST_F(PacketModelTest, ALostReadResponseIsAskedForAgain) {
  ConnectOptions connect;
  connect.timeout = 8;
  ASSERT_NO_FATAL_FAILURE(
      Connect(ConnectX6(), ConnectX6(), {}, connect, Manual()));
  Fill(*b_, 0, 16384, 9);
  ASSERT_OK(a_->PostSend(1, IBV_WR_RDMA_READ, 0, 16384, IBV_SEND_SIGNALED, 0,
                         b_->address(0), b_->rkey()));
  // The request arrives at 1.004 us; responses leave from then on.
  fabric_->AdvanceClock(nanoseconds(2100));
  ASSERT_OK(fabric_->faults().DropPackets(FaultTarget::Qp(a_->qp_num()), 1));
  fabric_->RunUntilIdle();
  EXPECT_EQ(PollOneSend(*a_).status, IBV_WC_SUCCESS);
  EXPECT_TRUE(Same(*a_, 0, *b_, 0, 16384));
  EXPECT_GE(fabric_->Now(), nanoseconds(4096 << 8));
  EXPECT_EQ(fabric_->DeviceCounters(a_->device())->retransmissions, 1u);
  EXPECT_EQ(fabric_->DeviceCounters(a_->device())->payload_bytes_delivered,
            16384u);
}

// The network delivers a request twice: the responder acknowledges the copy
// of a SEND again and executes it once; it answers the copy of a READ again.
TEST_F(PacketModelTest, DuplicatesAreAnsweredNotExecutedTwice) {
  ASSERT_NO_FATAL_FAILURE(Connect());
  ASSERT_OK(fabric_->faults().DuplicatePackets(FaultTarget::Qp(b_->qp_num())));
  ASSERT_OK(b_->PostRecv(1, 0, 64));
  ASSERT_OK(b_->PostRecv(2, 64, 64));
  ASSERT_OK(a_->PostSend(3, IBV_WR_SEND, 0, 64));
  std::vector<ibv_wc> received = *b_->PollRecvCq();
  ASSERT_EQ(received.size(), 1u);
  EXPECT_EQ(received[0].wr_id, 1u);
  EXPECT_EQ(PollOneSend(*a_).status, IBV_WC_SUCCESS);
  // The second receive is still there for the next SEND.
  ASSERT_OK(a_->PostSend(4, IBV_WR_SEND, 0, 64));
  EXPECT_EQ(PollOneRecv(*b_).wr_id, 2u);
  EXPECT_EQ(PollOneSend(*a_).status, IBV_WC_SUCCESS);

  Fill(*b_, 4096, 2048, 5);
  const uint64_t read_before =
      fabric_->DeviceCounters(b_->device())->dma_read_bytes;
  ASSERT_OK(fabric_->faults().DuplicatePackets(FaultTarget::Qp(b_->qp_num())));
  ASSERT_OK(a_->PostSend(5, IBV_WR_RDMA_READ, 8192, 2048, IBV_SEND_SIGNALED, 0,
                         b_->address(4096), b_->rkey()));
  EXPECT_EQ(PollOneSend(*a_).status, IBV_WC_SUCCESS);
  EXPECT_TRUE(Same(*a_, 8192, *b_, 4096, 2048));
  // Read twice from b_'s memory.
  EXPECT_EQ(fabric_->DeviceCounters(b_->device())->dma_read_bytes - read_before,
            2u * 2048);
}

// Four SENDs in flight to a port that went down: the timer (timeout 10,
// 4.19 ms) runs out retry_cnt + 1 times, each time sending all four again
// from the first, then the first fails and the rest are flushed.
TEST_F(PacketModelTest, RetryExhaustionTakesTheHardwaresTime) {
  ConnectOptions connect;
  connect.timeout = 10;
  connect.retry_cnt = 3;
  ASSERT_NO_FATAL_FAILURE(Connect(ConnectX6(), ConnectX6(), {}, connect));
  ASSERT_OK(fabric_->faults().PortDown(b_->device()));
  const nanoseconds before = fabric_->Now();
  ibv_sge sges[4];
  ibv_send_wr wrs[4] = {};
  for (int i = 0; i < 4; ++i) {
    sges[i] = {a_->address(64 * i), 64, a_->lkey()};
    wrs[i].wr_id = static_cast<uint64_t>(i);
    wrs[i].sg_list = &sges[i];
    wrs[i].num_sge = 1;
    wrs[i].opcode = IBV_WR_SEND;
    wrs[i].send_flags = IBV_SEND_SIGNALED;
    wrs[i].next = i < 3 ? &wrs[i + 1] : nullptr;
  }
  ibv_send_wr* bad = nullptr;
  ASSERT_OK(verbs_->PostSend(a_->qp(), wrs, &bad));
  const std::vector<ibv_wc> done = *a_->PollSendCq();
  ASSERT_EQ(done.size(), 4u);
  EXPECT_EQ(done[0].status, IBV_WC_RETRY_EXC_ERR);
  for (int i = 1; i < 4; ++i) EXPECT_EQ(done[i].status, IBV_WC_WR_FLUSH_ERR);
  const nanoseconds timeout(4096 << 10);
  const nanoseconds took = fabric_->Now() - before;
  EXPECT_GE(took, 4 * timeout);
  EXPECT_LT(took, 4 * timeout + microseconds(1));
  const SimCounters a = *fabric_->DeviceCounters(a_->device());
  EXPECT_EQ(a.retransmissions, 3u);
  EXPECT_EQ(a.packets_sent, 4u * 4u);
}

// Requester side: with max_rd_atomic 1 the four READs go one round trip
// each; with 4 they are in flight together.
TEST_F(PacketModelTest, TheRequesterKeepsAtMostMaxRdAtomicReadsOutstanding) {
  auto run = [&](uint8_t depth) {
    ConnectOptions connect;
    connect.max_rd_atomic = depth;
    connect.max_dest_rd_atomic = 4;
    EXPECT_NO_FATAL_FAILURE(
        Connect(ConnectX6(), ConnectX6(), {}, connect, Manual()));
    for (int i = 0; i < 4; ++i) {
      EXPECT_OK(a_->PostSend(i, IBV_WR_RDMA_READ, 1024 * i, 1024,
                             IBV_SEND_SIGNALED, 0, b_->address(8192 + 1024 * i),
                             b_->rkey()));
    }
    fabric_->RunUntilIdle();
    const std::vector<ibv_wc> done = *a_->PollSendCq();
    EXPECT_EQ(done.size(), 4u);
    for (const ibv_wc& wc : done) EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    const nanoseconds took = fabric_->Now();
    TearDown();
    return took;
  };
  EXPECT_GE(run(1), microseconds(4 * 2));
  EXPECT_LT(run(4), microseconds(3));
}

// Responder side: a requester allowed 4 READs (max_rd_atomic 4) against a
// responder that takes 1 (max_dest_rd_atomic 1). The second READ arrives
// while the first is outstanding: the responder NAKs it as an invalid
// request, as the IB spec has it for a responder out of RDMA READ
// resources (NAK code Invalid Request), so the requester completes it with
// IBV_WC_REM_INV_REQ_ERR and goes to ERR, and the responder QP goes to ERR
// with IBV_EVENT_QP_REQ_ERR. (Soft-RoCE instead reuses its oldest READ
// resource and answers: rxe_resp.c check_resource() NAKs only when
// max_dest_rd_atomic is 0.)
TEST_F(PacketModelTest, AResponderRefusesReadsBeyondMaxDestRdAtomic) {
  ConnectOptions requester;
  requester.max_rd_atomic = 4;
  ConnectOptions responder;
  responder.max_dest_rd_atomic = 1;
  ASSERT_NO_FATAL_FAILURE(CreatePair(ConnectX6(), ConnectX6(), {}, Manual()));
  ASSERT_OK(a_->ConnectTo(*b_, requester));
  ASSERT_OK(b_->ConnectTo(*a_, responder));
  ASSERT_OK(a_->PostSend(1, IBV_WR_RDMA_READ, 0, 4096, IBV_SEND_SIGNALED, 0,
                         b_->address(8192), b_->rkey()));
  ASSERT_OK(a_->PostSend(2, IBV_WR_RDMA_READ, 4096, 4096, IBV_SEND_SIGNALED, 0,
                         b_->address(8192), b_->rkey()));
  fabric_->RunUntilIdle();
  const std::vector<ibv_wc> done = *a_->PollSendCq();
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(done[1].status, IBV_WC_REM_INV_REQ_ERR);
  EXPECT_EQ(QpState(*a_), IBV_QPS_ERR);
  EXPECT_EQ(QpState(*b_), IBV_QPS_ERR);
  const std::vector<ibv_async_event> events = TakeAsyncEvents(*b_);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].event_type, IBV_EVENT_QP_REQ_ERR);
}

}  // namespace
}  // namespace rdma_transport::sim
