// Shared receive queues on the simulator: receives taken in posting order
// by whichever attached QP a message reaches, an empty SRQ answered with
// RNR NAKs (retried per rnr_retry), the limit event, flushes that leave the
// SRQ's receives to the other QPs, and the control path's refusals.

#include <arpa/inet.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "sim/pair_fixture.h"

namespace rdma_transport::sim {
namespace {

class SrqTest : public PairTest {
 protected:
  // a_ sends, b_ holds the PD the SRQ and `responders_` live on; each
  // responder's peer is one of `requesters_` (own contexts on a_'s device).
  void SetUpSrq(int pairs, uint32_t max_wr = 16,
                const ConnectOptions& connect = {}) {
    ASSERT_NO_FATAL_FAILURE(CreatePair());
    ibv_srq_init_attr init{};
    init.attr.max_wr = max_wr;
    init.attr.max_sge = 1;
    ASSERT_OK_AND_ASSIGN(srq_, verbs_->CreateSrq(b_->pd(), &init));
    for (int i = 0; i < pairs; ++i) {
      EndpointOptions responder_options;
      responder_options.share_pd_of = b_.get();
      responder_options.srq = srq_;
      ASSERT_OK_AND_ASSIGN(
          std::unique_ptr<Endpoint> responder,
          Endpoint::Create(verbs_.get(), b_->device(), responder_options));
      ASSERT_OK_AND_ASSIGN(std::unique_ptr<Endpoint> requester,
                           Endpoint::Create(verbs_.get(), a_->device()));
      ASSERT_OK(requester->ConnectTo(*responder, connect));
      ASSERT_OK(responder->ConnectTo(*requester, connect));
      responders_.push_back(std::move(responder));
      requesters_.push_back(std::move(requester));
    }
  }

  // A receive of `length` bytes of b_'s buffer at `offset` on the SRQ.
  absl::Status PostSrqRecv(uint64_t wr_id, size_t offset, size_t length) {
    ibv_sge sge{};
    sge.addr = b_->address(offset);
    sge.length = static_cast<uint32_t>(length);
    sge.lkey = b_->lkey();
    ibv_recv_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    return verbs_->PostSrqRecv(srq_, &wr, &bad);
  }

  // Sends `length` bytes of requester i's buffer, filled with `seed`.
  void Send(int i, uint64_t wr_id, size_t length, uint8_t seed) {
    std::memset(requesters_[i]->data(), seed, length);
    ASSERT_OK(requesters_[i]->PostSend(wr_id, IBV_WR_SEND_WITH_IMM, 0, length,
                                       IBV_SEND_SIGNALED, htonl(seed)));
  }

  void TearDown() override {
    responders_.clear();  // QPs first: the SRQ refuses to go before them
    requesters_.clear();
    if (srq_ != nullptr) {
      EXPECT_OK(verbs_->DestroySrq(srq_));
    }
    PairTest::TearDown();
  }

  ibv_srq* srq_ = nullptr;
  std::vector<std::unique_ptr<Endpoint>> responders_;
  std::vector<std::unique_ptr<Endpoint>> requesters_;
};

TEST_F(SrqTest, ReceivesAreTakenInPostingOrderWhicheverQpAMessageReaches) {
  ASSERT_NO_FATAL_FAILURE(SetUpSrq(3));
  for (uint64_t i = 0; i < 4; ++i)
    ASSERT_OK(PostSrqRecv(100 + i, i * 256, 256));
  const int order[] = {2, 0, 1, 2};
  for (int k = 0; k < 4; ++k) {
    ASSERT_NO_FATAL_FAILURE(
        Send(order[k], k, 100 + k, static_cast<uint8_t>(0x40 + k)));
    fabric_->RunUntilIdle();
    const ibv_wc wc = PollOneRecv(*responders_[order[k]]);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.wr_id, 100u + k) << "receive " << k;
    EXPECT_EQ(wc.qp_num, responders_[order[k]]->qp_num());
    EXPECT_EQ(wc.byte_len, 100u + k);
    EXPECT_EQ(ntohl(wc.imm_data), 0x40u + k);
    const std::vector<uint8_t> expected(100 + k,
                                        static_cast<uint8_t>(0x40 + k));
    EXPECT_EQ(
        std::memcmp(b_->data() + k * 256, expected.data(), expected.size()), 0);
  }
  // The QP itself has no receive queue.
  EXPECT_EQ(responders_[0]->cap().max_recv_wr, 0u);
  EXPECT_EQ(VerbsErrno(responders_[0]->PostRecv(1, 0, 64)), EINVAL);
}

TEST_F(SrqTest, AMessageKeepsTheReceiveItsFirstPacketClaimed) {
  // QP 0's message is six 1024-byte packets, QP 1's one packet; both leave
  // one port, taking turns, so QP 1's message arrives between QP 0's first
  // and last packet. The receive QP 0's first packet took stays its own.
  ASSERT_NO_FATAL_FAILURE(SetUpSrq(2));
  fabric_->set_progress_mode(ProgressMode::kManual);  // both posted first
  ASSERT_OK(PostSrqRecv(100, 0, 8192));
  ASSERT_OK(PostSrqRecv(101, 8192, 8192));
  ASSERT_NO_FATAL_FAILURE(Send(0, 1, 6000, 0x51));
  ASSERT_NO_FATAL_FAILURE(Send(1, 2, 100, 0x52));
  fabric_->RunUntilIdle();
  const ibv_wc first = PollOneRecv(*responders_[0]);
  const ibv_wc second = PollOneRecv(*responders_[1]);
  EXPECT_EQ(first.status, IBV_WC_SUCCESS);
  EXPECT_EQ(first.wr_id, 100u);
  EXPECT_EQ(first.byte_len, 6000u);
  EXPECT_EQ(second.status, IBV_WC_SUCCESS);
  EXPECT_EQ(second.wr_id, 101u);
  EXPECT_EQ(second.byte_len, 100u);
  const std::vector<uint8_t> long_message(6000, 0x51);
  const std::vector<uint8_t> short_message(100, 0x52);
  EXPECT_EQ(std::memcmp(b_->data(), long_message.data(), 6000), 0);
  EXPECT_EQ(std::memcmp(b_->data() + 8192, short_message.data(), 100), 0);
}

TEST_F(SrqTest, AnEmptySrqRnrNaksUntilAReceiveIsPosted) {
  ASSERT_NO_FATAL_FAILURE(SetUpSrq(2));  // rnr_retry 7: retry forever
  ASSERT_NO_FATAL_FAILURE(Send(1, 7, 64, 0x11));
  fabric_->RunUntilIdle();
  EXPECT_GT(fabric_->DeviceCounters(a_->device())->rnr_naks, 0u);
  ASSERT_OK_AND_ASSIGN(std::vector<ibv_wc> none, responders_[1]->PollRecvCq());
  EXPECT_TRUE(none.empty());
  // A receive posted to the SRQ wakes the requester waiting on any QP of it.
  ASSERT_OK(PostSrqRecv(55, 0, 64));
  fabric_->RunUntilIdle();
  const ibv_wc wc = PollOneRecv(*responders_[1]);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.wr_id, 55u);
  EXPECT_EQ(PollOneSend(*requesters_[1]).status, IBV_WC_SUCCESS);
}

TEST_F(SrqTest, AnEmptySrqExhaustsAFiniteRnrRetry) {
  ConnectOptions connect;
  connect.rnr_retry = 2;
  ASSERT_NO_FATAL_FAILURE(SetUpSrq(1, 16, connect));
  ASSERT_NO_FATAL_FAILURE(Send(0, 9, 8, 0x22));
  fabric_->RunUntilIdle();
  EXPECT_EQ(fabric_->DeviceCounters(a_->device())->rnr_naks, 3u);
  const ibv_wc wc = PollOneSend(*requesters_[0]);
  EXPECT_EQ(wc.status, IBV_WC_RNR_RETRY_EXC_ERR);
}

TEST_F(SrqTest, TheLimitEventFiresOnceWhenFewerThanTheLimitArePosted) {
  ASSERT_NO_FATAL_FAILURE(SetUpSrq(1));
  for (uint64_t i = 0; i < 3; ++i) ASSERT_OK(PostSrqRecv(i, i * 64, 64));
  ibv_srq_attr attr{};
  attr.srq_limit = 2;
  ASSERT_OK(verbs_->ModifySrq(srq_, &attr, IBV_SRQ_LIMIT));
  ASSERT_NO_FATAL_FAILURE(Send(0, 1, 8, 1));  // 2 left: not below 2
  fabric_->RunUntilIdle();
  EXPECT_TRUE(TakeAsyncEvents(*b_).empty());
  ASSERT_NO_FATAL_FAILURE(Send(0, 2, 8, 2));  // 1 left
  fabric_->RunUntilIdle();
  std::vector<ibv_async_event> events = TakeAsyncEvents(*b_);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].event_type, IBV_EVENT_SRQ_LIMIT_REACHED);
  EXPECT_EQ(events[0].element.srq, srq_);
  ASSERT_NO_FATAL_FAILURE(Send(0, 3, 8, 3));  // disarmed: no second event
  fabric_->RunUntilIdle();
  EXPECT_TRUE(TakeAsyncEvents(*b_).empty());
  attr.srq_limit = 17;
  EXPECT_EQ(VerbsErrno(verbs_->ModifySrq(srq_, &attr, IBV_SRQ_LIMIT)), EINVAL);
}

TEST_F(SrqTest, AQpInErrorLeavesTheSrqsReceivesToTheOthers) {
  ASSERT_NO_FATAL_FAILURE(SetUpSrq(2));
  for (uint64_t i = 0; i < 2; ++i) ASSERT_OK(PostSrqRecv(i, i * 64, 64));
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;
  ASSERT_OK(verbs_->ModifyQp(responders_[0]->qp(), &attr, IBV_QP_STATE));
  fabric_->RunUntilIdle();
  ASSERT_OK_AND_ASSIGN(std::vector<ibv_wc> flushed,
                       responders_[0]->PollRecvCq());
  EXPECT_TRUE(flushed.empty());  // nothing of the SRQ's was flushed
  ASSERT_NO_FATAL_FAILURE(Send(1, 1, 8, 5));
  fabric_->RunUntilIdle();
  EXPECT_EQ(PollOneRecv(*responders_[1]).wr_id, 0u);
}

TEST_F(SrqTest, FullSrqAndDestroyWithQpsAttachedAreRefused) {
  ASSERT_NO_FATAL_FAILURE(SetUpSrq(1, 2));
  ASSERT_OK(PostSrqRecv(1, 0, 64));
  ASSERT_OK(PostSrqRecv(2, 64, 64));
  EXPECT_EQ(VerbsErrno(PostSrqRecv(3, 128, 64)), ENOMEM);
  // Consumed but not yet polled still holds its slot.
  ASSERT_NO_FATAL_FAILURE(Send(0, 1, 8, 1));
  fabric_->RunUntilIdle();
  EXPECT_EQ(VerbsErrno(PostSrqRecv(3, 128, 64)), ENOMEM);
  PollOneRecv(*responders_[0]);
  EXPECT_OK(PostSrqRecv(3, 128, 64));

  const absl::Status busy = verbs_->DestroySrq(srq_);
  EXPECT_EQ(VerbsErrno(busy), EBUSY) << busy;
  EXPECT_EQ(VerbsErrno(verbs_->DeallocPd(b_->pd())), EBUSY);
  responders_.clear();
  EXPECT_OK(verbs_->DestroySrq(srq_));
  srq_ = nullptr;
}

TEST_F(SrqTest, ProfilesWithoutSrqsRefuseToCreateOne) {
  ASSERT_NO_FATAL_FAILURE(CreatePair(IntelE810(), AlibabaErdma()));
  for (Endpoint* endpoint : {a_.get(), b_.get()}) {
    ibv_device_attr device{};
    ASSERT_OK(verbs_->QueryDevice(endpoint->context(), &device));
    EXPECT_EQ(device.max_srq, 0);
    ibv_srq_init_attr init{};
    init.attr.max_wr = 4;
    init.attr.max_sge = 1;
    absl::StatusOr<ibv_srq*> srq = verbs_->CreateSrq(endpoint->pd(), &init);
    EXPECT_EQ(VerbsErrno(srq.status()), EOPNOTSUPP) << srq.status();
  }
  ibv_device_attr device{};
  ibv_srq_init_attr too_big{};
  too_big.attr.max_wr = 1u << 20;
  too_big.attr.max_sge = 1;
  Fabric fabric;
  SimVerbs verbs(&fabric);
  ASSERT_OK_AND_ASSIGN(std::string name, fabric.AddDevice(SoftRoce()));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Endpoint> rxe,
                       Endpoint::Create(&verbs, name));
  ASSERT_OK(verbs.QueryDevice(rxe->context(), &device));
  EXPECT_GT(device.max_srq, 0);
  EXPECT_EQ(VerbsErrno(verbs.CreateSrq(rxe->pd(), &too_big).status()), EINVAL);
}

}  // namespace
}  // namespace rdma_transport::sim
