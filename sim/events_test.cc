// Completion channels and async events: real eventfds that poll(2) sees,
// arming, solicited-only events, non-blocking reads, acknowledgement.

#include <fcntl.h>
#include <poll.h>

#include <cerrno>
#include <string>

#include "gtest/gtest.h"
#include "sim/pair_fixture.h"

namespace rdma_transport::sim {
namespace {

bool Readable(int fd) {
  pollfd entry{fd, POLLIN, 0};
  return poll(&entry, 1, /*timeout=*/0) == 1 && (entry.revents & POLLIN);
}

void MakeNonBlocking(int fd) {
  const int flags = fcntl(fd, F_GETFL);
  ASSERT_EQ(fcntl(fd, F_SETFL, flags | O_NONBLOCK), 0);
}

class EventsTest : public PairTest {
 protected:
  void SetUp() override {
    EndpointOptions options;
    options.with_completion_channel = true;
    ASSERT_NO_FATAL_FAILURE(Connect(ConnectX6(), ConnectX6(), options));
    ASSERT_NO_FATAL_FAILURE(MakeNonBlocking(b_->channel()->fd));
    ASSERT_NO_FATAL_FAILURE(MakeNonBlocking(b_->context()->async_fd));
  }
};

TEST_F(EventsTest, ArmedCqMakesTheChannelReadable) {
  EXPECT_FALSE(Readable(b_->channel()->fd));
  ASSERT_OK(verbs_->ReqNotifyCq(b_->recv_cq(), /*solicited_only=*/false));
  ASSERT_OK(b_->PostRecv(1, 0, 64));
  EXPECT_FALSE(Readable(b_->channel()->fd));  // Posting is no completion.
  ASSERT_OK(a_->PostSend(2, IBV_WR_SEND, 0, 8));
  EXPECT_TRUE(Readable(b_->channel()->fd));

  ibv_cq* cq = nullptr;
  void* cq_context = nullptr;
  ASSERT_OK(verbs_->GetCqEvent(b_->channel(), &cq, &cq_context));
  EXPECT_EQ(cq, b_->recv_cq());
  EXPECT_EQ(cq_context, b_.get());
  EXPECT_FALSE(Readable(b_->channel()->fd));
  verbs_->AckCqEvents(cq, 1);
  EXPECT_EQ(PollOneRecv(*b_).wr_id, 1u);
}

TEST_F(EventsTest, UnarmedCqRaisesNothing) {
  ASSERT_OK(b_->PostRecv(1, 0, 64));
  ASSERT_OK(a_->PostSend(2, IBV_WR_SEND, 0, 8));
  EXPECT_FALSE(Readable(b_->channel()->fd));
  ibv_cq* cq = nullptr;
  void* cq_context = nullptr;
  EXPECT_ERRNO(verbs_->GetCqEvent(b_->channel(), &cq, &cq_context), EAGAIN);
}

TEST_F(EventsTest, OneArmOneEvent) {
  ASSERT_OK(verbs_->ReqNotifyCq(b_->recv_cq(), false));
  ASSERT_OK(b_->PostRecv(1, 0, 64));
  ASSERT_OK(b_->PostRecv(2, 0, 64));
  ASSERT_OK(a_->PostSend(3, IBV_WR_SEND, 0, 8));
  ASSERT_OK(a_->PostSend(4, IBV_WR_SEND, 0, 8));
  ibv_cq* cq = nullptr;
  void* cq_context = nullptr;
  ASSERT_OK(verbs_->GetCqEvent(b_->channel(), &cq, &cq_context));
  EXPECT_ERRNO(verbs_->GetCqEvent(b_->channel(), &cq, &cq_context), EAGAIN);
  verbs_->AckCqEvents(cq, 1);
  EXPECT_EQ(b_->PollRecvCq()->size(), 2u);
}

TEST_F(EventsTest, SolicitedOnlyWaitsForASolicitedCompletion) {
  ASSERT_OK(verbs_->ReqNotifyCq(b_->recv_cq(), /*solicited_only=*/true));
  ASSERT_OK(b_->PostRecv(1, 0, 64));
  ASSERT_OK(b_->PostRecv(2, 0, 64));
  ASSERT_OK(a_->PostSend(3, IBV_WR_SEND, 0, 8));
  EXPECT_FALSE(Readable(b_->channel()->fd));
  ASSERT_OK(a_->PostSend(4, IBV_WR_SEND, 0, 8,
                         IBV_SEND_SIGNALED | IBV_SEND_SOLICITED));
  EXPECT_TRUE(Readable(b_->channel()->fd));
  ibv_cq* cq = nullptr;
  void* cq_context = nullptr;
  ASSERT_OK(verbs_->GetCqEvent(b_->channel(), &cq, &cq_context));
  verbs_->AckCqEvents(cq, 1);
}

TEST_F(EventsTest, DestroyingACqWithUnacknowledgedEventsIsEbusy) {
  ASSERT_OK(verbs_->ReqNotifyCq(b_->recv_cq(), false));
  ASSERT_OK(b_->PostRecv(1, 0, 64));
  ASSERT_OK(a_->PostSend(2, IBV_WR_SEND, 0, 8));
  ibv_cq* cq = nullptr;
  void* cq_context = nullptr;
  ASSERT_OK(verbs_->GetCqEvent(b_->channel(), &cq, &cq_context));
  ASSERT_OK(verbs_->DestroyQp(b_->qp()));
  EXPECT_ERRNO(verbs_->DestroyCq(b_->recv_cq()), EBUSY);
  verbs_->AckCqEvents(cq, 1);
  EXPECT_ERRNO(b_->Close(), EINVAL);  // The QP was destroyed above.
}

TEST_F(EventsTest, PendingEventsOfADestroyedCqAreDropped) {
  ASSERT_OK(verbs_->ReqNotifyCq(b_->recv_cq(), false));
  ASSERT_OK(b_->PostRecv(1, 0, 64));
  ASSERT_OK(a_->PostSend(2, IBV_WR_SEND, 0, 8));
  EXPECT_TRUE(Readable(b_->channel()->fd));
  // Never taken: destroying the CQ is allowed and the event goes with it.
  ASSERT_OK(verbs_->DestroyQp(b_->qp()));
  ASSERT_OK(verbs_->DestroyCq(b_->recv_cq()));
  ibv_cq* cq = nullptr;
  void* cq_context = nullptr;
  EXPECT_ERRNO(verbs_->GetCqEvent(b_->channel(), &cq, &cq_context), EAGAIN);
  EXPECT_ERRNO(b_->Close(), EINVAL);
}

TEST_F(EventsTest, AsyncEventsAreReadableOnTheContextFd) {
  EXPECT_FALSE(Readable(b_->context()->async_fd));
  ibv_async_event event{};
  EXPECT_ERRNO(verbs_->GetAsyncEvent(b_->context(), &event), EAGAIN);
  // A bad rkey moves b_'s QP to ERR with IBV_EVENT_QP_ACCESS_ERR.
  ASSERT_OK(a_->PostSend(1, IBV_WR_RDMA_WRITE, 0, 8, IBV_SEND_SIGNALED, 0,
                         b_->address(0), 0xbad));
  EXPECT_TRUE(Readable(b_->context()->async_fd));
  ASSERT_OK(verbs_->GetAsyncEvent(b_->context(), &event));
  EXPECT_EQ(event.event_type, IBV_EVENT_QP_ACCESS_ERR);
  EXPECT_EQ(event.element.qp, b_->qp());
  EXPECT_FALSE(Readable(b_->context()->async_fd));
  // Not yet acknowledged: the QP cannot be destroyed (libibverbs would
  // block).
  EXPECT_ERRNO(verbs_->DestroyQp(b_->qp()), EBUSY);
  verbs_->AckAsyncEvent(&event);
  EXPECT_EQ(b_->qp()->events_completed, 1u);
}

TEST_F(EventsTest, RearmingAfterEachEventGivesOneEventPerBurst) {
  for (int round = 0; round < 3; ++round) {
    ASSERT_OK(verbs_->ReqNotifyCq(b_->recv_cq(), false));
    ASSERT_OK(b_->PostRecv(round, 0, 64));
    ASSERT_OK(a_->PostSend(round, IBV_WR_SEND, 0, 8));
    ibv_cq* cq = nullptr;
    void* cq_context = nullptr;
    ASSERT_OK(verbs_->GetCqEvent(b_->channel(), &cq, &cq_context));
    EXPECT_EQ(PollOneRecv(*b_).wr_id, static_cast<uint64_t>(round));
    verbs_->AckCqEvents(cq, 1);
  }
  EXPECT_EQ(b_->recv_cq()->comp_events_completed, 3u);
}

}  // namespace
}  // namespace rdma_transport::sim
