// Fault injection: control-path refusals, failed completions, lost and late
// packets, peer death.

#include "sim/fault_injector.h"

#include <cerrno>
#include <chrono>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "sim/pair_fixture.h"

namespace rdma_transport::sim {
namespace {

using std::chrono::microseconds;
using std::chrono::nanoseconds;

class FaultInjectorTest : public PairTest {
 protected:
  FaultInjector& faults() { return fabric_->faults(); }

  // A QP on `pd`/`cq` asking for `inline_size` inline bytes.
  absl::StatusOr<ibv_qp*> CreateQp(Endpoint& endpoint, uint32_t inline_size) {
    ibv_qp_init_attr init{};
    init.send_cq = endpoint.send_cq();
    init.recv_cq = endpoint.recv_cq();
    init.qp_type = IBV_QPT_RC;
    init.cap = {.max_send_wr = 4,
                .max_recv_wr = 4,
                .max_send_sge = 1,
                .max_recv_sge = 1,
                .max_inline_data = inline_size};
    return verbs_->CreateQp(endpoint.pd(), &init);
  }
};

TEST_F(FaultInjectorTest, RefuseCreateQpWhenInlineAboveALimit) {
  ASSERT_NO_FATAL_FAILURE(CreatePair());
  faults().RefuseCreateQpAboveInline(64, EINVAL);
  EXPECT_ERRNO(CreateQp(*a_, 65), EINVAL);
  EXPECT_ERRNO(CreateQp(*a_, 128), EINVAL);  // Every time by default.
  ASSERT_OK_AND_ASSIGN(ibv_qp * qp, CreateQp(*a_, 64));
  ASSERT_OK(verbs_->DestroyQp(qp));
  faults().Clear();
  ASSERT_OK_AND_ASSIGN(qp, CreateQp(*a_, 128));
  ASSERT_OK(verbs_->DestroyQp(qp));
}

TEST_F(FaultInjectorTest, RefuseCreateQpCountsDownAndFiltersByDevice) {
  ASSERT_NO_FATAL_FAILURE(CreatePair());
  faults().RefuseCreateQp(ENOMEM, /*times=*/2, b_->device());
  ASSERT_OK_AND_ASSIGN(ibv_qp * on_a, CreateQp(*a_, 0));  // Other device.
  EXPECT_ERRNO(CreateQp(*b_, 0), ENOMEM);
  EXPECT_ERRNO(CreateQp(*b_, 0), ENOMEM);
  ASSERT_OK_AND_ASSIGN(ibv_qp * on_b, CreateQp(*b_, 0));
  ASSERT_OK(verbs_->DestroyQp(on_a));
  ASSERT_OK(verbs_->DestroyQp(on_b));
}

TEST_F(FaultInjectorTest, FailRegMrAndCreateCq) {
  ASSERT_NO_FATAL_FAILURE(CreatePair());
  faults().FailRegMr(ENOMEM);
  std::vector<uint8_t> memory(4096);
  EXPECT_ERRNO(verbs_->RegMr(a_->pd(), memory.data(), memory.size(),
                             IBV_ACCESS_LOCAL_WRITE),
               ENOMEM);
  ASSERT_OK_AND_ASSIGN(ibv_mr * mr,
                       verbs_->RegMr(a_->pd(), memory.data(), memory.size(),
                                     IBV_ACCESS_LOCAL_WRITE));
  ASSERT_OK(verbs_->DeregMr(mr));

  faults().FailCreateCq(EINVAL, kEveryTime);
  EXPECT_ERRNO(verbs_->CreateCq(a_->context(), 8, nullptr, nullptr, 0), EINVAL);
  EXPECT_ERRNO(verbs_->CreateCq(b_->context(), 8, nullptr, nullptr, 0), EINVAL);
  faults().Clear();
  ASSERT_OK_AND_ASSIGN(ibv_cq * cq,
                       verbs_->CreateCq(a_->context(), 8, nullptr, nullptr, 0));
  ASSERT_OK(verbs_->DestroyCq(cq));
}

TEST_F(FaultInjectorTest, FailModifyQpAtAChosenTransition) {
  ASSERT_NO_FATAL_FAILURE(CreatePair());
  faults().FailModifyQp(IBV_QPS_INIT, IBV_QPS_RTR, ETIMEDOUT);
  ASSERT_OK(a_->ModifyToInit());
  EXPECT_ERRNO(a_->ModifyToRtr(*b_), ETIMEDOUT);
  EXPECT_EQ(a_->qp()->state, IBV_QPS_INIT);
  ASSERT_OK(a_->ModifyToRtr(*b_));  // Fired once.
  EXPECT_EQ(a_->qp()->state, IBV_QPS_RTR);
}

TEST_F(FaultInjectorTest, FailedCompletionMovesTheQpToErrorAndFlushes) {
  ASSERT_NO_FATAL_FAILURE(Connect());
  ASSERT_OK(faults().FailCompletions(FaultTarget::Qp(a_->qp_num()),
                                     IBV_WC_GENERAL_ERR));
  ASSERT_OK(b_->PostRecv(1, 0, 64));
  ASSERT_OK(a_->PostRecv(2, 0, 64));
  ASSERT_OK(a_->PostSend(10, IBV_WR_SEND, 0, 8));
  ASSERT_OK(a_->PostSend(11, IBV_WR_SEND, 0, 8));
  const std::vector<ibv_wc> sent = *a_->PollSendCq();
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[0].wr_id, 10u);
  EXPECT_EQ(sent[0].status, IBV_WC_GENERAL_ERR);
  EXPECT_EQ(sent[1].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(PollOneRecv(*a_).status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(QpState(*a_), IBV_QPS_ERR);
  EXPECT_TRUE(b_->PollRecvCq()->empty());  // Nothing was transmitted.
}

TEST_F(FaultInjectorTest, FailCompletionsByDevice) {
  ASSERT_NO_FATAL_FAILURE(Connect());
  ASSERT_OK(faults().FailCompletions(FaultTarget::Device(a_->device()),
                                     IBV_WC_RETRY_EXC_ERR, 1));
  ASSERT_OK(a_->PostSend(10, IBV_WR_RDMA_WRITE, 0, 8, IBV_SEND_SIGNALED, 0,
                         b_->address(0), b_->rkey()));
  EXPECT_EQ(PollOneSend(*a_).status, IBV_WC_RETRY_EXC_ERR);
}

TEST_F(FaultInjectorTest, BadFaultRequestsAreRefused) {
  ASSERT_NO_FATAL_FAILURE(CreatePair());
  EXPECT_EQ(
      faults().FailCompletions(FaultTarget::AnyQp(), IBV_WC_SUCCESS).code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(faults().DropPackets(FaultTarget::Device("no_such_device")).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(faults().KillDevice("no_such_device").code(),
            absl::StatusCode::kNotFound);
}

TEST_F(FaultInjectorTest, DroppedRequestsAreRetransmitted) {
  ASSERT_NO_FATAL_FAILURE(Connect());
  ASSERT_OK(faults().DropPackets(FaultTarget::Qp(b_->qp_num()), 2));
  ASSERT_OK(b_->PostRecv(1, 0, 64));
  ASSERT_OK(a_->PostSend(2, IBV_WR_SEND, 0, 8));
  EXPECT_EQ(PollOneSend(*a_).status, IBV_WC_SUCCESS);
  EXPECT_EQ(PollOneRecv(*b_).status, IBV_WC_SUCCESS);
  EXPECT_EQ(fabric_->DeviceCounters(a_->device())->retransmissions, 2u);
  EXPECT_EQ(fabric_->DeviceCounters(b_->device())->packets_dropped, 2u);
}

TEST_F(FaultInjectorTest, LostAcknowledgementDoesNotDeliverTwice) {
  ASSERT_NO_FATAL_FAILURE(Connect());
  // The ACK to a_ is lost: a_ retransmits, b_ sees a duplicate PSN,
  // acknowledges it again and does not consume a second receive.
  ASSERT_OK(faults().DropPackets(FaultTarget::Qp(a_->qp_num()), 1));
  ASSERT_OK(b_->PostRecv(1, 0, 64));
  ASSERT_OK(b_->PostRecv(2, 64, 64));
  a_->data()[0] = 'x';
  ASSERT_OK(a_->PostSend(10, IBV_WR_SEND, 0, 1));
  EXPECT_EQ(PollOneSend(*a_).status, IBV_WC_SUCCESS);
  EXPECT_EQ(PollOneRecv(*b_).wr_id, 1u);
  a_->data()[0] = 'y';
  ASSERT_OK(a_->PostSend(11, IBV_WR_SEND, 0, 1));
  EXPECT_EQ(PollOneRecv(*b_).wr_id, 2u);
  EXPECT_EQ(b_->data()[64], 'y');
  EXPECT_EQ(fabric_->DeviceCounters(a_->device())->retransmissions, 1u);
}

TEST_F(FaultInjectorTest, LostReadResponseIsReadAgain) {
  ASSERT_NO_FATAL_FAILURE(Connect());
  b_->data()[100] = 42;
  ASSERT_OK(faults().DropPackets(FaultTarget::Qp(a_->qp_num()), 1));
  ASSERT_OK(a_->PostSend(1, IBV_WR_RDMA_READ, 0, 1, IBV_SEND_SIGNALED, 0,
                         b_->address(100), b_->rkey()));
  EXPECT_EQ(PollOneSend(*a_).status, IBV_WC_SUCCESS);
  EXPECT_EQ(a_->data()[0], 42);
}

TEST_F(FaultInjectorTest, TooManyDropsExhaustTheRetries) {
  ConnectOptions connect;
  connect.retry_cnt = 2;
  ASSERT_NO_FATAL_FAILURE(Connect(ConnectX6(), ConnectX6(), {}, connect));
  ASSERT_OK(faults().DropPackets(FaultTarget::Qp(b_->qp_num()), 3));
  ASSERT_OK(b_->PostRecv(1, 0, 64));
  ASSERT_OK(a_->PostSend(2, IBV_WR_SEND, 0, 8));
  EXPECT_EQ(PollOneSend(*a_).status, IBV_WC_RETRY_EXC_ERR);
  EXPECT_TRUE(b_->PollRecvCq()->empty());
}

TEST_F(FaultInjectorTest, DelayedDeliveryTakesVirtualTime) {
  FabricOptions manual;
  manual.progress_mode = ProgressMode::kManual;
  ASSERT_NO_FATAL_FAILURE(Connect(ConnectX6(), ConnectX6(), {}, {}, manual));
  ASSERT_OK(
      faults().DelayDelivery(FaultTarget::Qp(b_->qp_num()), microseconds(50)));
  ASSERT_OK(b_->PostRecv(1, 0, 64));
  ASSERT_OK(a_->PostSend(2, IBV_WR_SEND, 0, 0));
  // The request leaves in 4 ns (its headers at 200 Gb/s) and takes the 1 us
  // link and the 50 us delay; the ACK 4 ns and 1 us back.
  fabric_->AdvanceClock(microseconds(51));
  EXPECT_TRUE(b_->PollRecvCq()->empty());
  fabric_->AdvanceClock(nanoseconds(4));
  EXPECT_EQ(b_->PollRecvCq()->size(), 1u);
  fabric_->RunUntilIdle();
  EXPECT_EQ(fabric_->Now(), microseconds(52) + nanoseconds(8));
  EXPECT_EQ(a_->PollSendCq()->size(), 1u);

  // A zero delay clears it.
  ASSERT_OK(
      faults().DelayDelivery(FaultTarget::Qp(b_->qp_num()), microseconds(0)));
  ASSERT_OK(b_->PostRecv(3, 0, 64));
  ASSERT_OK(a_->PostSend(4, IBV_WR_SEND, 0, 0));
  fabric_->RunUntilIdle();
  EXPECT_EQ(fabric_->Now(), microseconds(54) + nanoseconds(16));
}

TEST_F(FaultInjectorTest, DelayBeyondTheTimeoutCausesHarmlessDuplicates) {
  ConnectOptions connect;
  connect.timeout = 1;  // 8.192 us.
  ASSERT_NO_FATAL_FAILURE(Connect(ConnectX6(), ConnectX6(), {}, connect));
  ASSERT_OK(
      faults().DelayDelivery(FaultTarget::Qp(b_->qp_num()), microseconds(20)));
  ASSERT_OK(b_->PostRecv(1, 0, 64));
  ASSERT_OK(b_->PostRecv(2, 0, 64));
  ASSERT_OK(a_->PostSend(10, IBV_WR_SEND, 0, 8));
  EXPECT_EQ(PollOneSend(*a_).status, IBV_WC_SUCCESS);
  EXPECT_EQ(PollOneRecv(*b_).wr_id, 1u);  // Once, not once per copy.
  EXPECT_GE(fabric_->DeviceCounters(a_->device())->retransmissions, 1u);
}

TEST_F(FaultInjectorTest, KilledPeerMeansRetryExceededAtTheSender) {
  ConnectOptions connect;
  connect.retry_cnt = 3;
  ASSERT_NO_FATAL_FAILURE(Connect(ConnectX6(), ConnectX6(), {}, connect));
  ASSERT_OK(b_->PostRecv(1, 0, 64));
  ASSERT_OK(faults().KillDevice(b_->device()));

  // The dead device's QP went to ERR and flushed its work.
  EXPECT_EQ(QpState(*b_), IBV_QPS_ERR);
  EXPECT_EQ(PollOneRecv(*b_).status, IBV_WC_WR_FLUSH_ERR);
  ibv_async_event event{};
  ASSERT_OK(verbs_->GetAsyncEvent(b_->context(), &event));
  EXPECT_EQ(event.event_type, IBV_EVENT_QP_FATAL);
  EXPECT_EQ(event.element.qp, b_->qp());
  verbs_->AckAsyncEvent(&event);
  ASSERT_OK(verbs_->GetAsyncEvent(b_->context(), &event));
  EXPECT_EQ(event.event_type, IBV_EVENT_DEVICE_FATAL);
  verbs_->AckAsyncEvent(&event);
  ibv_port_attr port{};
  ASSERT_OK(verbs_->QueryPort(b_->context(), 1, &port));
  EXPECT_EQ(port.state, IBV_PORT_DOWN);

  // Its peer learns by timing out.
  ASSERT_OK(a_->PostSend(2, IBV_WR_SEND, 0, 8));
  EXPECT_EQ(PollOneSend(*a_).status, IBV_WC_RETRY_EXC_ERR);
  EXPECT_EQ(fabric_->DeviceCounters(a_->device())->retransmissions, 3u);

  // Nothing new comes up on a dead device.
  EXPECT_ERRNO(CreateQp(*b_, 0), EIO);
}

TEST_F(FaultInjectorTest, RevivedDeviceServesNewQps) {
  ASSERT_NO_FATAL_FAILURE(Connect());
  ASSERT_OK(faults().KillDevice(b_->device()));
  ASSERT_OK(faults().ReviveDevice(b_->device()));
  EXPECT_EQ(QpState(*b_), IBV_QPS_ERR);  // Old QPs stay dead.
  ibv_async_event event{};
  for (int i = 0; i < 2; ++i) {
    ASSERT_OK(verbs_->GetAsyncEvent(b_->context(), &event));
    verbs_->AckAsyncEvent(&event);
  }
  // New endpoints on both devices connect and talk.
  auto c = *Endpoint::Create(verbs_.get(), a_->device());
  auto d = *Endpoint::Create(verbs_.get(), b_->device());
  ASSERT_OK(c->ConnectTo(*d));
  ASSERT_OK(d->ConnectTo(*c));
  ASSERT_OK(d->PostRecv(1, 0, 64));
  ASSERT_OK(c->PostSend(2, IBV_WR_SEND, 0, 8));
  EXPECT_EQ(PollOneRecv(*d).status, IBV_WC_SUCCESS);
  ASSERT_OK(c->Close());
  ASSERT_OK(d->Close());
}

TEST_F(FaultInjectorTest, KilledDeviceRefusesToBringQpsUp) {
  ASSERT_NO_FATAL_FAILURE(CreatePair());
  ASSERT_OK(faults().KillDevice(a_->device()));
  EXPECT_ERRNO(a_->ModifyToInit(), EIO);
  ibv_async_event event{};
  ASSERT_OK(verbs_->GetAsyncEvent(a_->context(), &event));
  EXPECT_EQ(event.event_type, IBV_EVENT_DEVICE_FATAL);  // No QP was up.
  verbs_->AckAsyncEvent(&event);
}

}  // namespace
}  // namespace rdma_transport::sim
