// Every error path: completion errors and the flushes they cause, post-time
// refusals, CQ overflow, unknown handles, unroutable and out-of-sequence
// traffic.

#include <cerrno>
#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "sim/pair_fixture.h"

namespace rdma_transport::sim {
namespace {

using ErrorPathTest = PairTest;

std::vector<std::pair<uint64_t, ibv_wc_status>> Summary(
    const std::vector<ibv_wc>& completions) {
  std::vector<std::pair<uint64_t, ibv_wc_status>> summary;
  for (const ibv_wc& wc : completions) summary.push_back({wc.wr_id, wc.status});
  return summary;
}

using Summaries = std::vector<std::pair<uint64_t, ibv_wc_status>>;

// Takes one async event from `endpoint`'s context and acknowledges it.
ibv_async_event TakeAsyncEvent(Endpoint& endpoint) {
  ibv_async_event event{};
  EXPECT_OK(endpoint.verbs()->GetAsyncEvent(endpoint.context(), &event));
  ibv_async_event copy = event;
  endpoint.verbs()->AckAsyncEvent(&event);
  return copy;
}

TEST_F(ErrorPathTest, ReceiveTooShortFailsBothSidesAndFlushes) {
  ASSERT_NO_FATAL_FAILURE(Connect());
  ASSERT_OK(b_->PostRecv(1, 0, 10));
  ASSERT_OK(b_->PostRecv(2, 100, 100));
  ASSERT_OK(a_->PostSend(10, IBV_WR_SEND, 0, 100));
  ASSERT_OK(a_->PostSend(11, IBV_WR_SEND, 0, 5, /*flags=*/0));  // Unsignalled.

  EXPECT_EQ(Summary(*b_->PollRecvCq()),
            (Summaries{{1, IBV_WC_LOC_LEN_ERR}, {2, IBV_WC_WR_FLUSH_ERR}}));
  // Flushed WRs complete even when unsignalled.
  EXPECT_EQ(Summary(*a_->PollSendCq()), (Summaries{{10, IBV_WC_REM_INV_REQ_ERR},
                                                   {11, IBV_WC_WR_FLUSH_ERR}}));
  EXPECT_EQ(QpState(*a_), IBV_QPS_ERR);
  EXPECT_EQ(QpState(*b_), IBV_QPS_ERR);
  EXPECT_EQ(a_->qp()->state, IBV_QPS_ERR);
}

TEST_F(ErrorPathTest, BadLkeyIsALocalProtectionError) {
  ASSERT_NO_FATAL_FAILURE(Connect());
  ASSERT_OK(b_->PostRecv(1, 0, 100));
  ibv_sge sge{a_->address(0), 10, a_->lkey() + 1000};
  ibv_send_wr wr{};
  wr.wr_id = 7;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  ibv_send_wr* bad = nullptr;
  ASSERT_OK(verbs_->PostSend(a_->qp(), &wr, &bad));  // Unsignalled, still.
  EXPECT_EQ(Summary(*a_->PollSendCq()), (Summaries{{7, IBV_WC_LOC_PROT_ERR}}));
  EXPECT_EQ(QpState(*a_), IBV_QPS_ERR);
  // Nothing was sent: the responder is untouched.
  EXPECT_EQ(QpState(*b_), IBV_QPS_RTS);
  EXPECT_TRUE(b_->PollRecvCq()->empty());
}

TEST_F(ErrorPathTest, GatherBeyondTheRegionIsALocalProtectionError) {
  EndpointOptions options;
  options.buffer_bytes = 4096;
  ASSERT_NO_FATAL_FAILURE(Connect(ConnectX6(), ConnectX6(), options));
  ASSERT_OK(b_->PostRecv(1, 0, 100));
  ASSERT_OK(a_->PostSend(7, IBV_WR_SEND, 4090, 10));  // 6 bytes too far.
  EXPECT_EQ(Summary(*a_->PollSendCq()), (Summaries{{7, IBV_WC_LOC_PROT_ERR}}));
}

TEST_F(ErrorPathTest, BadRkeyIsARemoteAccessErrorOnBothQps) {
  ASSERT_NO_FATAL_FAILURE(Connect());
  ASSERT_OK(b_->PostRecv(1, 0, 100));
  ASSERT_OK(a_->PostSend(7, IBV_WR_RDMA_WRITE, 0, 10, IBV_SEND_SIGNALED, 0,
                         b_->address(0), b_->rkey() ^ 0x5a5a));
  EXPECT_EQ(Summary(*a_->PollSendCq()),
            (Summaries{{7, IBV_WC_REM_ACCESS_ERR}}));
  EXPECT_EQ(QpState(*a_), IBV_QPS_ERR);
  // The responder's QP went to ERR too (class C error): its receive flushed,
  // and with no CQE to say why, an async event does.
  EXPECT_EQ(QpState(*b_), IBV_QPS_ERR);
  EXPECT_EQ(Summary(*b_->PollRecvCq()), (Summaries{{1, IBV_WC_WR_FLUSH_ERR}}));
  const ibv_async_event event = TakeAsyncEvent(*b_);
  EXPECT_EQ(event.event_type, IBV_EVENT_QP_ACCESS_ERR);
  EXPECT_EQ(event.element.qp, b_->qp());
}

TEST_F(ErrorPathTest, RemoteRangeAndRegionAccessAreChecked) {
  struct Case {
    const char* what;
    ibv_wr_opcode opcode;
    int region_access;
    int64_t offset;  // From the start of b_'s region.
    ibv_wc_status expected;
  };
  const int local_only = IBV_ACCESS_LOCAL_WRITE;
  const int all =
      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  const Case cases[] = {
      {"write past the end", IBV_WR_RDMA_WRITE, all, 4096 - 5,
       IBV_WC_REM_ACCESS_ERR},
      {"write before the start", IBV_WR_RDMA_WRITE, all, -1,
       IBV_WC_REM_ACCESS_ERR},
      {"write without REMOTE_WRITE", IBV_WR_RDMA_WRITE, local_only, 0,
       IBV_WC_REM_ACCESS_ERR},
      {"read without REMOTE_READ", IBV_WR_RDMA_READ,
       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, 0,
       IBV_WC_REM_ACCESS_ERR},
      {"read past the end", IBV_WR_RDMA_READ, all, 4090, IBV_WC_REM_ACCESS_ERR},
      {"write in bounds", IBV_WR_RDMA_WRITE, all, 4096 - 10, IBV_WC_SUCCESS},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    ASSERT_NO_FATAL_FAILURE(Connect());
    // A second, 4 KiB region in the middle of b_'s buffer.
    ASSERT_OK_AND_ASSIGN(
        ibv_mr * region,
        verbs_->RegMr(b_->pd(), b_->data() + 8192, 4096, c.region_access));
    const uint64_t target = b_->address(8192) + c.offset;
    ASSERT_OK(a_->PostSend(1, c.opcode, 0, 10, IBV_SEND_SIGNALED, 0, target,
                           region->rkey));
    EXPECT_EQ(Summary(*a_->PollSendCq()), (Summaries{{1, c.expected}}));
    if (c.expected != IBV_WC_SUCCESS) {
      EXPECT_EQ(TakeAsyncEvent(*b_).event_type, IBV_EVENT_QP_ACCESS_ERR);
    }
    ASSERT_OK(verbs_->DeregMr(region));
    TearDown();
  }
}

TEST_F(ErrorPathTest, QpWithoutRemoteAccessRefusesRdma) {
  ConnectOptions options;
  options.qp_access = IBV_ACCESS_LOCAL_WRITE;
  ASSERT_NO_FATAL_FAILURE(Connect(ConnectX6(), ConnectX6(), {}, options));
  ASSERT_OK(a_->PostSend(1, IBV_WR_RDMA_WRITE, 0, 10, IBV_SEND_SIGNALED, 0,
                         b_->address(0), b_->rkey()));
  EXPECT_EQ(Summary(*a_->PollSendCq()),
            (Summaries{{1, IBV_WC_REM_INV_REQ_ERR}}));
  EXPECT_EQ(TakeAsyncEvent(*b_).event_type, IBV_EVENT_QP_REQ_ERR);
}

TEST_F(ErrorPathTest, ReadNeedsResponderReadResources) {
  ConnectOptions options;
  options.max_dest_rd_atomic = 0;
  ASSERT_NO_FATAL_FAILURE(Connect(ConnectX6(), ConnectX6(), {}, options));
  ASSERT_OK(a_->PostSend(1, IBV_WR_RDMA_READ, 0, 10, IBV_SEND_SIGNALED, 0,
                         b_->address(0), b_->rkey()));
  EXPECT_EQ(Summary(*a_->PollSendCq()),
            (Summaries{{1, IBV_WC_REM_INV_REQ_ERR}}));
  EXPECT_EQ(TakeAsyncEvent(*b_).event_type, IBV_EVENT_QP_REQ_ERR);
}

TEST_F(ErrorPathTest, BadReceiveBufferIsARemoteOperationalError) {
  ASSERT_NO_FATAL_FAILURE(Connect());
  ibv_sge sge{b_->address(0), 100, b_->lkey() + 77};
  ibv_recv_wr recv{};
  recv.wr_id = 3;
  recv.sg_list = &sge;
  recv.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  ASSERT_OK(verbs_->PostRecv(b_->qp(), &recv, &bad));
  ASSERT_OK(a_->PostSend(4, IBV_WR_SEND, 0, 10));
  EXPECT_EQ(Summary(*b_->PollRecvCq()), (Summaries{{3, IBV_WC_LOC_PROT_ERR}}));
  EXPECT_EQ(Summary(*a_->PollSendCq()), (Summaries{{4, IBV_WC_REM_OP_ERR}}));
}

TEST_F(ErrorPathTest, ReceiveIntoReadOnlyRegionIsRefused) {
  ASSERT_NO_FATAL_FAILURE(Connect());
  ASSERT_OK_AND_ASSIGN(ibv_mr * read_only,
                       verbs_->RegMr(b_->pd(), b_->data(), 4096, 0));
  ibv_sge sge{b_->address(0), 100, read_only->lkey};
  ibv_recv_wr recv{};
  recv.wr_id = 3;
  recv.sg_list = &sge;
  recv.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  ASSERT_OK(verbs_->PostRecv(b_->qp(), &recv, &bad));
  ASSERT_OK(a_->PostSend(4, IBV_WR_SEND, 0, 10));
  EXPECT_EQ(Summary(*b_->PollRecvCq()), (Summaries{{3, IBV_WC_LOC_PROT_ERR}}));
  ASSERT_OK(verbs_->DeregMr(read_only));
}

TEST_F(ErrorPathTest, PostingToAQpInErrorFlushes) {
  ASSERT_NO_FATAL_FAILURE(Connect());
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;
  ASSERT_OK(verbs_->ModifyQp(a_->qp(), &attr, IBV_QP_STATE));
  ASSERT_OK(a_->PostSend(1, IBV_WR_SEND, 0, 10, /*flags=*/0));
  ASSERT_OK(a_->PostRecv(2, 0, 10));
  EXPECT_EQ(Summary(*a_->PollSendCq()), (Summaries{{1, IBV_WC_WR_FLUSH_ERR}}));
  EXPECT_EQ(Summary(*a_->PollRecvCq()), (Summaries{{2, IBV_WC_WR_FLUSH_ERR}}));
}

TEST_F(ErrorPathTest, ModifyToErrorFlushesOutstandingWork) {
  ASSERT_NO_FATAL_FAILURE(Connect());
  ASSERT_OK(b_->PostRecv(1, 0, 10));
  ASSERT_OK(b_->PostRecv(2, 0, 10));
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;
  ASSERT_OK(verbs_->ModifyQp(b_->qp(), &attr, IBV_QP_STATE));
  EXPECT_EQ(Summary(*b_->PollRecvCq()),
            (Summaries{{1, IBV_WC_WR_FLUSH_ERR}, {2, IBV_WC_WR_FLUSH_ERR}}));
}

TEST_F(ErrorPathTest, PostingBeforeTheQpIsReadyFails) {
  ASSERT_NO_FATAL_FAILURE(CreatePair());
  // RESET: neither queue accepts work.
  EXPECT_ERRNO(a_->PostSend(1, IBV_WR_SEND, 0, 10), EINVAL);
  EXPECT_ERRNO(a_->PostRecv(1, 0, 10), EINVAL);
  // INIT: receives yes, sends no.
  ASSERT_OK(a_->ModifyToInit());
  EXPECT_OK(a_->PostRecv(1, 0, 10));
  EXPECT_ERRNO(a_->PostSend(1, IBV_WR_SEND, 0, 10), EINVAL);
  // RTR: still no sends.
  ASSERT_OK(a_->ModifyToRtr(*b_));
  EXPECT_ERRNO(a_->PostSend(1, IBV_WR_SEND, 0, 10), EINVAL);
  ASSERT_OK(a_->ModifyToRts());
  ASSERT_OK(b_->ConnectTo(*a_));
  // RTS: the send goes, and meets the receive posted in INIT.
  ASSERT_OK(b_->PostSend(9, IBV_WR_SEND, 0, 10));
  EXPECT_EQ(Summary(*a_->PollRecvCq()), (Summaries{{1, IBV_WC_SUCCESS}}));
}

TEST_F(ErrorPathTest, BadWrPointsAtTheFirstRefusedRequest) {
  ASSERT_NO_FATAL_FAILURE(Connect());
  ASSERT_OK(b_->PostRecv(1, 0, 100));
  ibv_sge sges[8];
  for (auto& sge : sges) sge = {a_->address(0), 1, a_->lkey()};
  ibv_send_wr wrs[3] = {};
  for (int i = 0; i < 3; ++i) {
    wrs[i].wr_id = 100 + i;
    wrs[i].sg_list = sges;
    wrs[i].num_sge = 1;
    wrs[i].opcode = IBV_WR_SEND;
    wrs[i].send_flags = IBV_SEND_SIGNALED;
    wrs[i].next = i < 2 ? &wrs[i + 1] : nullptr;
  }
  wrs[1].num_sge = 8;  // Above max_send_sge 4.
  ibv_send_wr* bad = nullptr;
  // mlx5 says ENOMEM for too many SGEs.
  EXPECT_ERRNO(verbs_->PostSend(a_->qp(), wrs, &bad), ENOMEM);
  EXPECT_EQ(bad, &wrs[1]);
  // The first one was posted and went.
  EXPECT_EQ(Summary(*a_->PollSendCq()), (Summaries{{100, IBV_WC_SUCCESS}}));
}

TEST_F(ErrorPathTest, PostLimitErrnoFollowsTheProvider) {
  struct Case {
    DeviceProfile (*profile)();
    int error;
  };
  for (const Case& c : {Case{ConnectX6, ENOMEM}, Case{IntelE810, EINVAL},
                        Case{SoftRoce, EINVAL}}) {
    EndpointOptions options;
    options.cap.max_inline_data = 64;
    ASSERT_NO_FATAL_FAILURE(Connect(c.profile(), c.profile(), options));
    SCOPED_TRACE(a_->device());
    const uint32_t granted = a_->cap().max_inline_data;
    // Inline longer than granted.
    EXPECT_ERRNO(a_->PostSend(1, IBV_WR_SEND, 0, granted + 1,
                              IBV_SEND_SIGNALED | IBV_SEND_INLINE),
                 c.error);
    // Exactly the grant is fine.
    ASSERT_OK(b_->PostRecv(1, 0, 1024));
    EXPECT_OK(a_->PostSend(2, IBV_WR_SEND, 0, granted,
                           IBV_SEND_SIGNALED | IBV_SEND_INLINE));
    EXPECT_EQ(Summary(*a_->PollSendCq()), (Summaries{{2, IBV_WC_SUCCESS}}));
    // Too many receive SGEs: EINVAL everywhere.
    ibv_sge sges[8] = {};
    ibv_recv_wr recv{};
    recv.sg_list = sges;
    recv.num_sge = static_cast<int>(a_->cap().max_recv_sge) + 1;
    ibv_recv_wr* bad = nullptr;
    EXPECT_ERRNO(verbs_->PostRecv(a_->qp(), &recv, &bad), EINVAL);
    TearDown();
  }
}

TEST_F(ErrorPathTest, InlineReadIsRefused) {
  ASSERT_NO_FATAL_FAILURE(Connect());
  EXPECT_ERRNO(a_->PostSend(1, IBV_WR_RDMA_READ, 0, 8,
                            IBV_SEND_SIGNALED | IBV_SEND_INLINE, 0,
                            b_->address(0), b_->rkey()),
               EINVAL);
}

TEST_F(ErrorPathTest, UnsimulatedOpcodesAreRefused) {
  ASSERT_NO_FATAL_FAILURE(Connect());
  for (ibv_wr_opcode opcode :
       {IBV_WR_ATOMIC_CMP_AND_SWP, IBV_WR_ATOMIC_FETCH_AND_ADD,
        IBV_WR_LOCAL_INV, IBV_WR_BIND_MW, IBV_WR_SEND_WITH_INV}) {
    EXPECT_ERRNO(a_->PostSend(1, opcode, 0, 8), EINVAL) << opcode;
  }
}

TEST_F(ErrorPathTest, SendQueueSlotsAreReclaimedByPolling) {
  EndpointOptions options;
  options.cap.max_send_wr = 4;  // E810 grants depths exactly.
  ASSERT_NO_FATAL_FAILURE(Connect(IntelE810(), IntelE810(), options));
  for (int i = 0; i < 8; ++i) ASSERT_OK(b_->PostRecv(i, 0, 64));
  // Three unsignalled and one signalled: all four complete on the wire...
  for (int i = 0; i < 3; ++i) ASSERT_OK(a_->PostSend(i, IBV_WR_SEND, 0, 8, 0));
  ASSERT_OK(a_->PostSend(3, IBV_WR_SEND, 0, 8, IBV_SEND_SIGNALED));
  EXPECT_EQ(b_->PollRecvCq()->size(), 4u);
  // ...but their slots are the application's until it polls a completion.
  EXPECT_ERRNO(a_->PostSend(4, IBV_WR_SEND, 0, 8), ENOMEM);
  EXPECT_EQ(Summary(*a_->PollSendCq()), (Summaries{{3, IBV_WC_SUCCESS}}));
  for (int i = 4; i < 8; ++i) ASSERT_OK(a_->PostSend(i, IBV_WR_SEND, 0, 8));
  EXPECT_EQ(a_->PollSendCq()->size(), 4u);
}

TEST_F(ErrorPathTest, ReceiveQueueFullIsEnomem) {
  EndpointOptions options;
  options.cap.max_recv_wr = 2;
  ASSERT_NO_FATAL_FAILURE(Connect(IntelE810(), IntelE810(), options));
  ASSERT_OK(b_->PostRecv(1, 0, 64));
  ASSERT_OK(b_->PostRecv(2, 0, 64));
  EXPECT_ERRNO(b_->PostRecv(3, 0, 64), ENOMEM);
  // A consumed receive frees its slot only once its completion is polled.
  ASSERT_OK(a_->PostSend(1, IBV_WR_SEND, 0, 8));
  EXPECT_ERRNO(b_->PostRecv(3, 0, 64), ENOMEM);
  EXPECT_EQ(b_->PollRecvCq()->size(), 1u);
  EXPECT_OK(b_->PostRecv(3, 0, 64));
}

TEST_F(ErrorPathTest, CqOverflowIsAnErrorNotASilentDrop) {
  EndpointOptions options;
  options.cqe = 4;
  ASSERT_NO_FATAL_FAILURE(Connect(IntelE810(), IntelE810(), options));
  for (int i = 0; i < 5; ++i) {
    ASSERT_OK(a_->PostSend(i, IBV_WR_RDMA_WRITE, 0, 8, IBV_SEND_SIGNALED, 0,
                           b_->address(0), b_->rkey()));
  }
  ibv_wc wc[8];
  EXPECT_ERRNO(verbs_->PollCq(a_->send_cq(), 8, wc), EOVERFLOW);
  const ibv_async_event event = TakeAsyncEvent(*a_);
  EXPECT_EQ(event.event_type, IBV_EVENT_CQ_ERR);
  EXPECT_EQ(event.element.cq, a_->send_cq());
  const SimCounters counters = *fabric_->DeviceCounters(a_->device());
  EXPECT_EQ(counters.cq_overruns, 1u);
  EXPECT_EQ(counters.completions_lost, 1u);
  EXPECT_EQ(counters.completions(IBV_WC_SUCCESS), 4u);
}

TEST_F(ErrorPathTest, UnknownAndDestroyedHandlesAreEinval) {
  ASSERT_NO_FATAL_FAILURE(Connect());
  int not_a_handle = 0;
  auto* fake_qp = reinterpret_cast<ibv_qp*>(&not_a_handle);
  auto* fake_cq = reinterpret_cast<ibv_cq*>(&not_a_handle);
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  ibv_wc wc;
  ibv_send_wr send{};
  ibv_send_wr* bad_send = nullptr;
  ibv_recv_wr recv{};
  ibv_recv_wr* bad_recv = nullptr;
  EXPECT_ERRNO(verbs_->PostSend(fake_qp, &send, &bad_send), EINVAL);
  EXPECT_EQ(bad_send, &send);
  EXPECT_ERRNO(verbs_->PostRecv(nullptr, &recv, &bad_recv), EINVAL);
  EXPECT_ERRNO(verbs_->ModifyQp(fake_qp, &attr, IBV_QP_STATE), EINVAL);
  EXPECT_ERRNO(verbs_->QueryQp(fake_qp, &attr, 0, &init), EINVAL);
  EXPECT_ERRNO(verbs_->DestroyQp(nullptr), EINVAL);
  EXPECT_ERRNO(verbs_->PollCq(fake_cq, 1, &wc), EINVAL);
  EXPECT_ERRNO(verbs_->ReqNotifyCq(nullptr, false), EINVAL);
  EXPECT_ERRNO(verbs_->DestroyCq(fake_cq), EINVAL);
  EXPECT_ERRNO(verbs_->AllocPd(reinterpret_cast<ibv_context*>(&not_a_handle)),
               EINVAL);
  EXPECT_ERRNO(verbs_->DeallocPd(nullptr), EINVAL);
  EXPECT_ERRNO(verbs_->DeregMr(reinterpret_cast<ibv_mr*>(&not_a_handle)),
               EINVAL);
  EXPECT_ERRNO(verbs_->DestroyCompChannel(nullptr), EINVAL);
  EXPECT_ERRNO(verbs_->CloseDevice(nullptr), EINVAL);
  verbs_->AckCqEvents(fake_cq, 1);  // Ignored, as void calls must.

  // A destroyed QP is unknown from then on.
  ibv_qp* qp = a_->qp();
  ASSERT_OK(a_->Close());
  EXPECT_ERRNO(verbs_->PostSend(qp, &send, &bad_send), EINVAL);
  EXPECT_ERRNO(verbs_->QueryQp(qp, &attr, 0, &init), EINVAL);
  EXPECT_ERRNO(verbs_->DestroyQp(qp), EINVAL);
}

TEST_F(ErrorPathTest, HandlesOfAnotherFabricAreUnknown) {
  ASSERT_NO_FATAL_FAILURE(Connect());
  Fabric other;
  SimVerbs other_verbs(&other);
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  EXPECT_ERRNO(other_verbs.QueryQp(a_->qp(), &attr, 0, &init), EINVAL);
}

TEST_F(ErrorPathTest, NoRouteEndsInRetryExceeded) {
  ASSERT_NO_FATAL_FAILURE(CreatePair());
  ASSERT_OK(a_->ModifyToInit());
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_RTR;
  attr.path_mtu = IBV_MTU_1024;
  attr.dest_qp_num = 0x4242;
  attr.min_rnr_timer = 12;
  attr.max_dest_rd_atomic = 1;
  attr.ah_attr.port_num = 1;
  attr.ah_attr.is_global = 1;
  attr.ah_attr.grh.sgid_index = 1;
  attr.ah_attr.grh.dgid.raw[10] = 0xff;
  attr.ah_attr.grh.dgid.raw[11] = 0xff;
  attr.ah_attr.grh.dgid.raw[12] = 192;  // 192.0.2.1: nobody.
  attr.ah_attr.grh.dgid.raw[15] = 1;
  ASSERT_OK(verbs_->ModifyQp(
      a_->qp(), &attr,
      IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
          IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER));
  ConnectOptions options;
  options.retry_cnt = 3;
  options.timeout = 10;  // 4.096 us * 2^10 = 4.19 ms.
  ASSERT_OK(a_->ModifyToRts(options));
  const auto before = fabric_->Now();
  ASSERT_OK(a_->PostSend(1, IBV_WR_SEND, 0, 8));
  EXPECT_EQ(Summary(*a_->PollSendCq()), (Summaries{{1, IBV_WC_RETRY_EXC_ERR}}));
  const SimCounters counters = *fabric_->DeviceCounters(a_->device());
  EXPECT_EQ(counters.packets_sent, 4u);  // One try and three retries.
  EXPECT_EQ(counters.retransmissions, 3u);
  EXPECT_EQ(counters.packets_dropped, 4u);
  // The timer runs from when each try left the port (4 ns of headers at
  // 200 Gb/s): 4 x (4 + 4194304) ns, as on hardware (no round trip added).
  EXPECT_EQ(fabric_->Now() - before,
            std::chrono::nanoseconds(4 * (4194304 + 4)));
}

TEST_F(ErrorPathTest, DestroyedPeerQpEndsInRetryExceeded) {
  ConnectOptions options;
  options.retry_cnt = 2;
  ASSERT_NO_FATAL_FAILURE(Connect(ConnectX6(), ConnectX6(), {}, options));
  ASSERT_OK(verbs_->DestroyQp(b_->qp()));
  ASSERT_OK(a_->PostSend(1, IBV_WR_SEND, 0, 8));
  EXPECT_EQ(Summary(*a_->PollSendCq()), (Summaries{{1, IBV_WC_RETRY_EXC_ERR}}));
  EXPECT_ERRNO(b_->Close(), EINVAL);  // The QP is already gone...
  EXPECT_OK(b_->Close());             // ...and the rest was closed anyway.
}

TEST_F(ErrorPathTest, PsnAheadOfTheResponderIsDiscarded) {
  ConnectOptions requester;
  requester.sq_psn = 100;  // b_ expects 0.
  requester.retry_cnt = 1;
  ASSERT_NO_FATAL_FAILURE(CreatePair());
  ASSERT_OK(a_->ConnectTo(*b_, requester));
  ASSERT_OK(b_->ConnectTo(*a_));
  ASSERT_OK(b_->PostRecv(1, 0, 64));
  ASSERT_OK(a_->PostSend(1, IBV_WR_SEND, 0, 8));
  EXPECT_EQ(Summary(*a_->PollSendCq()), (Summaries{{1, IBV_WC_RETRY_EXC_ERR}}));
  EXPECT_TRUE(b_->PollRecvCq()->empty());
}

TEST_F(ErrorPathTest, PsnBehindTheResponderIsAcknowledgedButLost) {
  // The hazard of mismatched PSNs on real NICs too: the responder takes the
  // message for a duplicate, acknowledges it and drops it.
  ConnectOptions responder;
  responder.rq_psn = 100;  // a_ starts at 0.
  ASSERT_NO_FATAL_FAILURE(CreatePair());
  ASSERT_OK(a_->ConnectTo(*b_));
  ASSERT_OK(b_->ConnectTo(*a_, responder));
  ASSERT_OK(b_->PostRecv(1, 0, 64));
  ASSERT_OK(a_->PostSend(1, IBV_WR_SEND, 0, 8));
  EXPECT_EQ(Summary(*a_->PollSendCq()), (Summaries{{1, IBV_WC_SUCCESS}}));
  EXPECT_TRUE(b_->PollRecvCq()->empty());
}

TEST_F(ErrorPathTest, MessageAboveMaxMsgSizeIsALocalLengthError) {
  EndpointOptions options;
  options.buffer_bytes = (8 << 20) + 4096;  // rxe's max_msg_sz is 8 MiB.
  ASSERT_NO_FATAL_FAILURE(Connect(SoftRoce(), SoftRoce(), options));
  ASSERT_OK(a_->PostSend(1, IBV_WR_RDMA_WRITE, 0, (8 << 20) + 1,
                         IBV_SEND_SIGNALED, 0, b_->address(0), b_->rkey()));
  EXPECT_EQ(Summary(*a_->PollSendCq()), (Summaries{{1, IBV_WC_LOC_LEN_ERR}}));
}

}  // namespace
}  // namespace rdma_transport::sim
