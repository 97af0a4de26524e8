// The RC QP state machine: legal transitions with their required and
// optional attribute masks, illegal ones, attribute validation, and the
// record QueryQp returns.

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "sim/internal/qp_transitions.h"
#include "sim/pair_fixture.h"
#include "verbs_shim/verbs_names.h"

namespace rdma_transport::sim {
namespace {

struct Modify {
  ibv_qp_attr attr{};
  int mask = 0;
};

constexpr int kInitMask =
    IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
constexpr int kRtrMask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                         IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                         IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
constexpr int kRtsMask = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
                         IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                         IBV_QP_MAX_QP_RD_ATOMIC;

class QpStateTest : public PairTest {
 protected:
  void SetUp() override { ASSERT_NO_FATAL_FAILURE(CreatePair()); }

  Modify ToInit() {
    Modify m;
    m.attr.qp_state = IBV_QPS_INIT;
    m.attr.pkey_index = 0;
    m.attr.port_num = 1;
    m.attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    m.mask = kInitMask;
    return m;
  }
  Modify ToRtr() {
    Modify m;
    ibv_gid_entry gid{};
    EXPECT_OK(verbs_->QueryGid(b_->context(), 1, 1, &gid));
    m.attr.qp_state = IBV_QPS_RTR;
    m.attr.path_mtu = IBV_MTU_2048;
    m.attr.dest_qp_num = b_->qp_num();
    m.attr.rq_psn = 0x123456;
    m.attr.max_dest_rd_atomic = 4;
    m.attr.min_rnr_timer = 14;
    m.attr.ah_attr.port_num = 1;
    m.attr.ah_attr.sl = 3;
    m.attr.ah_attr.is_global = 1;
    m.attr.ah_attr.grh.dgid = gid.gid;
    m.attr.ah_attr.grh.sgid_index = 1;
    m.attr.ah_attr.grh.hop_limit = 17;
    m.attr.ah_attr.grh.traffic_class = 106;
    m.attr.ah_attr.grh.flow_label = 0x12345;
    m.mask = kRtrMask;
    return m;
  }
  Modify ToRts() {
    Modify m;
    m.attr.qp_state = IBV_QPS_RTS;
    m.attr.sq_psn = 0xabcdef;
    m.attr.timeout = 18;
    m.attr.retry_cnt = 6;
    m.attr.rnr_retry = 5;
    m.attr.max_rd_atomic = 8;
    m.mask = kRtsMask;
    return m;
  }
  Modify ToState(ibv_qp_state state) {
    Modify m;
    m.attr.qp_state = state;
    m.mask = IBV_QP_STATE;
    return m;
  }

  absl::Status Apply(Modify m) {
    return verbs_->ModifyQp(a_->qp(), &m.attr, m.mask);
  }

  // Brings a_'s QP to `state` along the legal path.
  void BringTo(ibv_qp_state state) {
    const std::vector<Modify> path = {ToInit(), ToRtr(), ToRts()};
    for (const Modify& step : path) {
      if (a_->qp()->state == state) return;
      ASSERT_OK(Apply(step));
    }
    if (state == IBV_QPS_SQD || state == IBV_QPS_ERR) {
      ASSERT_OK(Apply(ToState(state)));
    }
    ASSERT_EQ(a_->qp()->state, state);
  }
};

TEST_F(QpStateTest, LegalPathWithExactlyTheRequiredMasks) {
  EXPECT_EQ(a_->qp()->state, IBV_QPS_RESET);
  ASSERT_OK(Apply(ToInit()));
  EXPECT_EQ(a_->qp()->state, IBV_QPS_INIT);
  EXPECT_EQ(QpState(*a_), IBV_QPS_INIT);
  ASSERT_OK(Apply(ToRtr()));
  EXPECT_EQ(a_->qp()->state, IBV_QPS_RTR);
  ASSERT_OK(Apply(ToRts()));
  EXPECT_EQ(a_->qp()->state, IBV_QPS_RTS);
  EXPECT_EQ(QpState(*a_), IBV_QPS_RTS);
}

TEST_F(QpStateTest, EveryRequiredAttributeIsRequired) {
  struct Step {
    ibv_qp_state from;
    Modify modify;
  };
  const Step steps[] = {{IBV_QPS_RESET, ToInit()},
                        {IBV_QPS_INIT, ToRtr()},
                        {IBV_QPS_RTR, ToRts()}};
  for (const Step& step : steps) {
    BringTo(step.from);
    for (int bit = 1; bit <= IBV_QP_RATE_LIMIT; bit <<= 1) {
      if (bit == IBV_QP_STATE || (step.modify.mask & bit) == 0) continue;
      Modify missing = step.modify;
      missing.mask &= ~bit;
      EXPECT_ERRNO(Apply(missing), EINVAL)
          << QpStateName(step.from) << " without "
          << internal::QpAttrMaskNames(bit);
      EXPECT_EQ(a_->qp()->state, step.from);
    }
  }
}

TEST_F(QpStateTest, AttributesATransitionDoesNotTakeAreRefused) {
  Modify init = ToInit();
  init.mask |= IBV_QP_TIMEOUT;
  EXPECT_ERRNO(Apply(init), EINVAL);
  init.mask = kInitMask | IBV_QP_CAP;
  EXPECT_ERRNO(Apply(init), EINVAL);
  ASSERT_OK(Apply(ToInit()));

  Modify rtr = ToRtr();
  rtr.mask |= IBV_QP_SQ_PSN;
  EXPECT_ERRNO(Apply(rtr), EINVAL);
  rtr = ToRtr();
  rtr.mask |= IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX;  // Both optional.
  ASSERT_OK(Apply(rtr));

  Modify rts = ToRts();
  rts.mask |= IBV_QP_DEST_QPN;
  EXPECT_ERRNO(Apply(rts), EINVAL);
  rts = ToRts();
  rts.mask |= IBV_QP_MIN_RNR_TIMER;  // Optional.
  EXPECT_OK(Apply(rts));
}

TEST_F(QpStateTest, IllegalTransitionsAreEinval) {
  struct Case {
    ibv_qp_state from;
    ibv_qp_state to;
  };
  const Case cases[] = {
      {IBV_QPS_RESET, IBV_QPS_RTR}, {IBV_QPS_RESET, IBV_QPS_RTS},
      {IBV_QPS_RESET, IBV_QPS_SQD}, {IBV_QPS_RESET, IBV_QPS_SQE},
      {IBV_QPS_INIT, IBV_QPS_RTS},  {IBV_QPS_INIT, IBV_QPS_SQD},
      {IBV_QPS_RTR, IBV_QPS_INIT},  {IBV_QPS_RTR, IBV_QPS_RTR},
      {IBV_QPS_RTR, IBV_QPS_SQD},   {IBV_QPS_RTS, IBV_QPS_INIT},
      {IBV_QPS_RTS, IBV_QPS_RTR},   {IBV_QPS_RTS, IBV_QPS_SQE},
      {IBV_QPS_SQD, IBV_QPS_INIT},  {IBV_QPS_ERR, IBV_QPS_INIT},
      {IBV_QPS_ERR, IBV_QPS_RTS},
  };
  for (const Case& c : cases) {
    ASSERT_OK(Apply(ToState(IBV_QPS_RESET)));
    BringTo(c.from);
    // Give every attribute any legal transition could want: the move itself
    // is what is refused.
    Modify m;
    m.attr = ToRtr().attr;
    m.attr.qp_state = c.to;
    m.mask = IBV_QP_STATE;
    EXPECT_ERRNO(Apply(m), EINVAL)
        << QpStateName(c.from) << "->" << QpStateName(c.to);
    EXPECT_EQ(a_->qp()->state, c.from);
  }
  // Garbage in an enum field, as C callers can leave it.
  Modify bogus = ToState(IBV_QPS_RTS);
  const int garbage = 42;
  std::memcpy(&bogus.attr.qp_state, &garbage, sizeof(garbage));
  EXPECT_ERRNO(Apply(bogus), EINVAL);
}

TEST_F(QpStateTest, AnyStateMayBeResetOrErrored) {
  for (ibv_qp_state from : {IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPS_RTR,
                            IBV_QPS_RTS, IBV_QPS_SQD, IBV_QPS_ERR}) {
    for (ibv_qp_state to : {IBV_QPS_ERR, IBV_QPS_RESET}) {
      ASSERT_OK(Apply(ToState(IBV_QPS_RESET)));
      BringTo(from);
      EXPECT_OK(Apply(ToState(to)))
          << QpStateName(from) << "->" << QpStateName(to);
      EXPECT_EQ(a_->qp()->state, to);
    }
  }
  // Nothing but the state goes with them.
  BringTo(IBV_QPS_RTS);
  Modify err = ToState(IBV_QPS_ERR);
  err.mask |= IBV_QP_TIMEOUT;
  EXPECT_ERRNO(Apply(err), EINVAL);
}

TEST_F(QpStateTest, QueryQpReturnsEveryAttributeSet) {
  BringTo(IBV_QPS_RTS);
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  ASSERT_OK(verbs_->QueryQp(a_->qp(), &attr, IBV_QP_STATE, &init));
  const Modify rtr = ToRtr();
  EXPECT_EQ(attr.qp_state, IBV_QPS_RTS);
  EXPECT_EQ(
      attr.qp_access_flags,
      static_cast<unsigned>(IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ));
  EXPECT_EQ(attr.pkey_index, 0);
  EXPECT_EQ(attr.port_num, 1);
  EXPECT_EQ(attr.path_mtu, IBV_MTU_2048);
  EXPECT_EQ(attr.dest_qp_num, b_->qp_num());
  EXPECT_EQ(attr.rq_psn, 0x123456u);
  EXPECT_EQ(attr.sq_psn, 0xabcdefu);
  EXPECT_EQ(attr.max_dest_rd_atomic, 4);
  EXPECT_EQ(attr.max_rd_atomic, 8);
  EXPECT_EQ(attr.min_rnr_timer, 14);
  EXPECT_EQ(attr.timeout, 18);
  EXPECT_EQ(attr.retry_cnt, 6);
  EXPECT_EQ(attr.rnr_retry, 5);
  EXPECT_EQ(attr.ah_attr.sl, 3);
  EXPECT_EQ(attr.ah_attr.port_num, 1);
  EXPECT_EQ(attr.ah_attr.is_global, 1);
  EXPECT_EQ(attr.ah_attr.grh.sgid_index, 1);
  EXPECT_EQ(attr.ah_attr.grh.hop_limit, 17);
  EXPECT_EQ(attr.ah_attr.grh.traffic_class, 106);
  EXPECT_EQ(attr.ah_attr.grh.flow_label, 0x12345u);
  EXPECT_EQ(
      std::memcmp(attr.ah_attr.grh.dgid.raw, rtr.attr.ah_attr.grh.dgid.raw, 16),
      0);
  EXPECT_EQ(attr.cap.max_send_wr, a_->cap().max_send_wr);
  EXPECT_EQ(attr.cap.max_inline_data, a_->cap().max_inline_data);

  EXPECT_EQ(init.qp_type, IBV_QPT_RC);
  EXPECT_EQ(init.send_cq, a_->send_cq());
  EXPECT_EQ(init.recv_cq, a_->recv_cq());
  EXPECT_EQ(init.cap.max_recv_wr, a_->cap().max_recv_wr);
  EXPECT_EQ(init.sq_sig_all, 0);
}

TEST_F(QpStateTest, AttributeValuesAreValidated) {
  ASSERT_OK(Apply(ToInit()));
  auto rtr_with = [this](auto change) {
    Modify m = ToRtr();
    change(m.attr);
    return Apply(m);
  };
  EXPECT_ERRNO(rtr_with([](ibv_qp_attr& a) { a.min_rnr_timer = 32; }), EINVAL);
  EXPECT_ERRNO(rtr_with([](ibv_qp_attr& a) { a.dest_qp_num = 1 << 24; }),
               EINVAL);
  EXPECT_ERRNO(rtr_with([](ibv_qp_attr& a) { a.max_dest_rd_atomic = 17; }),
               EINVAL);
  EXPECT_ERRNO(rtr_with([](ibv_qp_attr& a) {
                 const int garbage = 9;
                 std::memcpy(&a.path_mtu, &garbage, sizeof(garbage));
               }),
               EINVAL);
  EXPECT_ERRNO(rtr_with([](ibv_qp_attr& a) { a.ah_attr.is_global = 0; }),
               EINVAL);
  EXPECT_ERRNO(rtr_with([](ibv_qp_attr& a) { a.ah_attr.grh.sgid_index = 5; }),
               EINVAL);
  EXPECT_ERRNO(rtr_with([](ibv_qp_attr& a) { a.ah_attr.port_num = 0; }),
               EINVAL);
  EXPECT_EQ(a_->qp()->state, IBV_QPS_INIT);
  ASSERT_OK(Apply(ToRtr()));

  auto rts_with = [this](auto change) {
    Modify m = ToRts();
    change(m.attr);
    return Apply(m);
  };
  EXPECT_ERRNO(rts_with([](ibv_qp_attr& a) { a.timeout = 32; }), EINVAL);
  EXPECT_ERRNO(rts_with([](ibv_qp_attr& a) { a.retry_cnt = 8; }), EINVAL);
  EXPECT_ERRNO(rts_with([](ibv_qp_attr& a) { a.rnr_retry = 8; }), EINVAL);
  EXPECT_ERRNO(rts_with([](ibv_qp_attr& a) { a.max_rd_atomic = 17; }), EINVAL);
  EXPECT_EQ(a_->qp()->state, IBV_QPS_RTR);

  ASSERT_OK(Apply(ToState(IBV_QPS_RESET)));
  Modify init = ToInit();
  init.attr.port_num = 2;
  EXPECT_ERRNO(Apply(init), EINVAL);
  init = ToInit();
  init.attr.pkey_index = 128;  // ConnectX-6: 128 P_Keys.
  EXPECT_ERRNO(Apply(init), EINVAL);
}

TEST_F(QpStateTest, PathMtuAboveTheActiveMtuIsRefused) {
  TearDown();
  ASSERT_NO_FATAL_FAILURE(CreatePair(SoftRoce(), SoftRoce()));  // MTU 1024.
  ASSERT_OK(Apply(ToInit()));
  Modify rtr = ToRtr();  // 2048.
  EXPECT_ERRNO(Apply(rtr), EINVAL);
  rtr.attr.path_mtu = IBV_MTU_1024;
  EXPECT_OK(Apply(rtr));
}

TEST_F(QpStateTest, CurrentStateMustMatchWhenGiven) {
  BringTo(IBV_QPS_RTR);
  Modify rts = ToRts();
  rts.mask |= IBV_QP_CUR_STATE;
  rts.attr.cur_qp_state = IBV_QPS_INIT;
  EXPECT_ERRNO(Apply(rts), EINVAL);
  rts.attr.cur_qp_state = IBV_QPS_RTR;
  EXPECT_OK(Apply(rts));
}

TEST_F(QpStateTest, ModifyWithoutStateChangesAttributesInPlace) {
  ASSERT_OK(Apply(ToInit()));
  Modify access;
  access.attr.qp_access_flags = IBV_ACCESS_LOCAL_WRITE;
  access.mask = IBV_QP_ACCESS_FLAGS;
  ASSERT_OK(Apply(access));  // INIT -> INIT.
  BringTo(IBV_QPS_RTS);
  Modify rnr;
  rnr.attr.min_rnr_timer = 3;
  rnr.mask = IBV_QP_MIN_RNR_TIMER;
  ASSERT_OK(Apply(rnr));  // RTS -> RTS.
  Modify timeout;
  timeout.attr.timeout = 3;
  timeout.mask = IBV_QP_TIMEOUT;
  EXPECT_ERRNO(Apply(timeout), EINVAL);  // Not modifiable in RTS.
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  ASSERT_OK(verbs_->QueryQp(a_->qp(), &attr, 0, &init));
  EXPECT_EQ(attr.qp_state, IBV_QPS_RTS);
  EXPECT_EQ(attr.min_rnr_timer, 3);
  EXPECT_EQ(attr.timeout, 18);
}

TEST_F(QpStateTest, SqdHoldsNewSendsUntilRts) {
  TearDown();
  ASSERT_NO_FATAL_FAILURE(Connect());
  ASSERT_OK(b_->PostRecv(1, 0, 64));
  ASSERT_OK(Apply(ToState(IBV_QPS_SQD)));
  ASSERT_OK(a_->PostSend(2, IBV_WR_SEND, 0, 8));
  EXPECT_TRUE(a_->PollSendCq()->empty());
  EXPECT_TRUE(b_->PollRecvCq()->empty());
  ASSERT_OK(Apply(ToState(IBV_QPS_RTS)));
  EXPECT_EQ(PollOneSend(*a_).status, IBV_WC_SUCCESS);
  EXPECT_EQ(PollOneRecv(*b_).status, IBV_WC_SUCCESS);
}

TEST_F(QpStateTest, ResetDiscardsWorkAndItsCompletions) {
  TearDown();
  ASSERT_NO_FATAL_FAILURE(Connect());
  ASSERT_OK(b_->PostRecv(1, 0, 64));
  ASSERT_OK(b_->PostRecv(2, 0, 64));
  ASSERT_OK(a_->PostSend(3, IBV_WR_SEND, 0, 8));  // Completes on both sides.
  ibv_qp_attr reset{};
  reset.qp_state = IBV_QPS_RESET;
  ASSERT_OK(verbs_->ModifyQp(b_->qp(), &reset, IBV_QP_STATE));
  ASSERT_OK(verbs_->ModifyQp(a_->qp(), &reset, IBV_QP_STATE));
  // No flush, and the completions of the reset QPs are gone (as libmlx5
  // cleans the CQ of a QP it resets).
  EXPECT_TRUE(b_->PollRecvCq()->empty());
  EXPECT_TRUE(a_->PollSendCq()->empty());

  // Both can be brought up again and talk.
  ConnectOptions options;
  options.sq_psn = 1000;
  options.rq_psn = 1000;
  ASSERT_OK(a_->ConnectTo(*b_, options));
  ASSERT_OK(b_->ConnectTo(*a_, options));
  ASSERT_OK(b_->PostRecv(4, 0, 64));
  ASSERT_OK(a_->PostSend(5, IBV_WR_SEND, 0, 8));
  EXPECT_EQ(PollOneRecv(*b_).wr_id, 4u);
  EXPECT_EQ(PollOneSend(*a_).wr_id, 5u);
}

}  // namespace
}  // namespace rdma_transport::sim
