// Type 2 memory windows: a window bound to one QP answers requests arriving
// at that QP only, within the bind's range and access; the bind's own
// checks (MW_BIND on the MR, bounds, a free window, one PD) fail with
// IBV_WC_MW_BIND_ERR; local invalidate and dealloc kill the rkey; windows
// are counted in the resource and leak accounting.

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "sim/pair_fixture.h"

namespace rdma_transport::sim {
namespace {

constexpr int kWindowMrAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND;
constexpr int kReadWrite = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;

// Brings `qp` through INIT, RTR and RTS towards QP `remote_qp_num` of
// `remote_context` (what Endpoint::ConnectTo does, for a QP of our own).
absl::Status ConnectRawQp(Verbs& verbs, ibv_qp* qp, ibv_context* remote_context,
                          uint32_t remote_qp_num) {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.port_num = 1;
  attr.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | kReadWrite;
  if (absl::Status s = verbs.ModifyQp(
          qp, &attr,
          IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
      !s.ok()) {
    return s;
  }
  ibv_gid_entry gid{};
  if (absl::Status s = verbs.QueryGid(remote_context, 1, 1, &gid); !s.ok()) {
    return s;
  }
  attr = {};
  attr.qp_state = IBV_QPS_RTR;
  attr.path_mtu = IBV_MTU_1024;
  attr.dest_qp_num = remote_qp_num;
  attr.max_dest_rd_atomic = 1;
  attr.min_rnr_timer = 12;
  attr.ah_attr.port_num = 1;
  attr.ah_attr.is_global = 1;
  attr.ah_attr.grh.dgid = gid.gid;
  attr.ah_attr.grh.sgid_index = 1;
  attr.ah_attr.grh.hop_limit = 64;
  if (absl::Status s = verbs.ModifyQp(
          qp, &attr,
          IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
              IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
      !s.ok()) {
    return s;
  }
  attr = {};
  attr.qp_state = IBV_QPS_RTS;
  attr.timeout = 14;
  attr.retry_cnt = 7;
  attr.rnr_retry = 7;
  attr.max_rd_atomic = 1;
  return verbs.ModifyQp(qp, &attr,
                        IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
                            IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                            IBV_QP_MAX_QP_RD_ATOMIC);
}

class MemoryWindowTest : public PairTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(Connect());
    // b_'s buffer again, registered for binding only: its own rkey grants no
    // remote access, the windows do.
    ASSERT_OK_AND_ASSIGN(
        mr_, verbs_->RegMr(b_->pd(), b_->data(), 64 * 1024, kWindowMrAccess));
    ASSERT_OK_AND_ASSIGN(mw_, verbs_->AllocMw(b_->pd(), IBV_MW_TYPE_2));
  }
  void TearDown() override {
    if (other_ != nullptr) {
      EXPECT_OK(verbs_->DestroyQp(other_));
    }
    other_ = nullptr;
    if (c_ != nullptr) {
      EXPECT_OK(c_->Close());
    }
    c_.reset();
    if (mw_ != nullptr) {
      EXPECT_OK(verbs_->DeallocMw(mw_));
    }
    if (mr_ != nullptr) {
      EXPECT_OK(verbs_->DeregMr(mr_));
    }
    mw_ = nullptr;
    mr_ = nullptr;
    PairTest::TearDown();
  }

  // other_: a second QP on b_'s PD and CQs, connected to c_ on a third
  // device.
  void MakeOtherQp() {
    ASSERT_OK_AND_ASSIGN(std::string device, fabric_->AddDevice(ConnectX6()));
    ASSERT_OK_AND_ASSIGN(c_, Endpoint::Create(verbs_.get(), device));
    ibv_qp_init_attr init{};
    init.send_cq = b_->send_cq();
    init.recv_cq = b_->recv_cq();
    init.qp_type = IBV_QPT_RC;
    init.cap = {.max_send_wr = 4,
                .max_recv_wr = 4,
                .max_send_sge = 1,
                .max_recv_sge = 1,
                .max_inline_data = 0};
    ASSERT_OK_AND_ASSIGN(other_, verbs_->CreateQp(b_->pd(), &init));
    ASSERT_OK(ConnectRawQp(*verbs_, other_, c_->context(), c_->qp_num()));
    ASSERT_OK(ConnectRawQp(*verbs_, c_->qp(), b_->context(), other_->qp_num));
  }

  // Posts a signalled bind of mw_ on `qp` to [offset, offset + length) of
  // `mr` and returns its completion; `new_rkey` the rkey asked for.
  ibv_wc Bind(ibv_qp* qp, ibv_mr* mr, size_t offset, size_t length, int access,
              uint32_t* new_rkey = nullptr) {
    ibv_send_wr wr{};
    wr.wr_id = 77;
    wr.opcode = IBV_WR_BIND_MW;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.bind_mw.mw = mw_;
    wr.bind_mw.rkey = ibv_inc_rkey(mw_->rkey);
    wr.bind_mw.bind_info.mr = mr;
    wr.bind_mw.bind_info.addr = b_->address(offset);
    wr.bind_mw.bind_info.length = length;
    wr.bind_mw.bind_info.mw_access_flags = static_cast<unsigned int>(access);
    ibv_send_wr* bad = nullptr;
    EXPECT_OK(verbs_->PostSend(qp, &wr, &bad));
    if (new_rkey != nullptr) *new_rkey = wr.bind_mw.rkey;
    ibv_wc wc[2] = {};
    absl::StatusOr<int> count = verbs_->PollCq(b_->send_cq(), 2, wc);
    EXPECT_TRUE(count.ok() && *count == 1) << count.status();
    return wc[0];
  }

  // a_'s one-sided op of `length` bytes at b_'s `offset` with `rkey`.
  ibv_wc_status Rdma(Endpoint& from, ibv_wr_opcode opcode, size_t offset,
                     size_t length, uint32_t rkey) {
    EXPECT_OK(from.PostSend(9, opcode, 0, length, IBV_SEND_SIGNALED, 0,
                            b_->address(offset), rkey));
    absl::StatusOr<std::vector<ibv_wc>> done = from.PollSendCq();
    EXPECT_TRUE(done.ok() && done->size() == 1);
    return done.ok() && !done->empty() ? (*done)[0].status : IBV_WC_GENERAL_ERR;
  }

  ibv_mr* mr_ = nullptr;
  ibv_mw* mw_ = nullptr;
  std::unique_ptr<Endpoint> c_;
  ibv_qp* other_ = nullptr;
};

TEST_F(MemoryWindowTest, BoundWindowAnswersItsQpOnlyWithinItsRange) {
  uint32_t rkey = 0;
  const ibv_wc bound = Bind(b_->qp(), mr_, 4096, 4096, kReadWrite, &rkey);
  EXPECT_EQ(bound.status, IBV_WC_SUCCESS);
  EXPECT_EQ(bound.opcode, IBV_WC_BIND_MW);
  EXPECT_EQ(bound.wr_id, 77u);
  EXPECT_NE(rkey, mr_->rkey);

  // The bound QP's peer writes and reads through the window.
  std::memset(a_->data(), 0x5a, 64);
  EXPECT_EQ(Rdma(*a_, IBV_WR_RDMA_WRITE, 4096 + 100, 64, rkey), IBV_WC_SUCCESS);
  EXPECT_EQ(b_->data()[4096 + 100], 0x5a);
  EXPECT_EQ(b_->data()[4096 + 163], 0x5a);
  b_->data()[4096] = 0x33;
  EXPECT_EQ(Rdma(*a_, IBV_WR_RDMA_READ, 4096, 1, rkey), IBV_WC_SUCCESS);
  EXPECT_EQ(a_->data()[0], 0x33);

  // Another QP on the same PD, connected to a third device: the same rkey
  // is refused there, as if it were unknown.
  ASSERT_NO_FATAL_FAILURE(MakeOtherQp());
  EXPECT_EQ(Rdma(*c_, IBV_WR_RDMA_WRITE, 4096, 8, rkey), IBV_WC_REM_ACCESS_ERR);
  // The responder QP goes to ERR with an access error, as on hardware; the
  // bound QP is untouched.
  std::vector<ibv_async_event> events = TakeAsyncEvents(*b_);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].event_type, IBV_EVENT_QP_ACCESS_ERR);
  EXPECT_EQ(events[0].element.qp, other_);
  EXPECT_EQ(Rdma(*a_, IBV_WR_RDMA_WRITE, 4096, 8, rkey), IBV_WC_SUCCESS);

  // Outside the window (inside the MR) is refused.
  EXPECT_EQ(Rdma(*a_, IBV_WR_RDMA_WRITE, 8192 - 4, 8, rkey),
            IBV_WC_REM_ACCESS_ERR);
}

TEST_F(MemoryWindowTest, AccessOfTheBindIsEnforced) {
  uint32_t rkey = 0;
  ASSERT_EQ(Bind(b_->qp(), mr_, 0, 4096, IBV_ACCESS_REMOTE_WRITE, &rkey).status,
            IBV_WC_SUCCESS);
  EXPECT_EQ(Rdma(*a_, IBV_WR_RDMA_WRITE, 0, 16, rkey), IBV_WC_SUCCESS);
  EXPECT_EQ(Rdma(*a_, IBV_WR_RDMA_READ, 0, 16, rkey), IBV_WC_REM_ACCESS_ERR);
}

TEST_F(MemoryWindowTest, TheMrsOwnRkeyGrantsNothingRemote) {
  ASSERT_EQ(Bind(b_->qp(), mr_, 0, 4096, kReadWrite).status, IBV_WC_SUCCESS);
  EXPECT_EQ(Rdma(*a_, IBV_WR_RDMA_WRITE, 0, 16, mr_->rkey),
            IBV_WC_REM_ACCESS_ERR);
}

TEST_F(MemoryWindowTest, LocalInvalidateKillsTheRkey) {
  uint32_t rkey = 0;
  ASSERT_EQ(Bind(b_->qp(), mr_, 0, 4096, kReadWrite, &rkey).status,
            IBV_WC_SUCCESS);
  EXPECT_EQ(Rdma(*a_, IBV_WR_RDMA_WRITE, 0, 16, rkey), IBV_WC_SUCCESS);
  // A bound MR cannot be deregistered (EINVAL, as rxe).
  EXPECT_ERRNO(verbs_->DeregMr(mr_), EINVAL);
  ibv_send_wr wr{};
  wr.wr_id = 5;
  wr.opcode = IBV_WR_LOCAL_INV;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.invalidate_rkey = rkey;
  ibv_send_wr* bad = nullptr;
  ASSERT_OK(verbs_->PostSend(b_->qp(), &wr, &bad));
  const ibv_wc invalidated = PollOneSend(*b_);
  EXPECT_EQ(invalidated.status, IBV_WC_SUCCESS);
  EXPECT_EQ(invalidated.opcode, IBV_WC_LOCAL_INV);
  EXPECT_EQ(Rdma(*a_, IBV_WR_RDMA_WRITE, 0, 16, rkey), IBV_WC_REM_ACCESS_ERR);
}

TEST_F(MemoryWindowTest, RebindAfterInvalidateChangesTheKey) {
  uint32_t first = 0;
  ASSERT_EQ(Bind(b_->qp(), mr_, 0, 4096, kReadWrite, &first).status,
            IBV_WC_SUCCESS);
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_LOCAL_INV;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.invalidate_rkey = first;
  ibv_send_wr* bad = nullptr;
  ASSERT_OK(verbs_->PostSend(b_->qp(), &wr, &bad));
  ASSERT_EQ(PollOneSend(*b_).status, IBV_WC_SUCCESS);
  // The caller keeps ibv_mw::rkey current, as with libibverbs.
  mw_->rkey = first;
  uint32_t second = 0;
  ASSERT_EQ(Bind(b_->qp(), mr_, 0, 4096, kReadWrite, &second).status,
            IBV_WC_SUCCESS);
  EXPECT_NE(second, first);
  EXPECT_EQ(Rdma(*a_, IBV_WR_RDMA_WRITE, 0, 16, second), IBV_WC_SUCCESS);
  EXPECT_EQ(Rdma(*a_, IBV_WR_RDMA_WRITE, 0, 16, first), IBV_WC_REM_ACCESS_ERR);
}

TEST_F(MemoryWindowTest, DeallocKillsTheRkey) {
  uint32_t rkey = 0;
  ASSERT_EQ(Bind(b_->qp(), mr_, 0, 4096, kReadWrite, &rkey).status,
            IBV_WC_SUCCESS);
  ASSERT_OK(verbs_->DeallocMw(mw_));
  mw_ = nullptr;
  EXPECT_EQ(Rdma(*a_, IBV_WR_RDMA_WRITE, 0, 16, rkey), IBV_WC_REM_ACCESS_ERR);
}

TEST_F(MemoryWindowTest, DestroyingTheQpLeavesTheWindowDeadUntilDealloc) {
  ASSERT_NO_FATAL_FAILURE(MakeOtherQp());
  uint32_t rkey = 0;
  ASSERT_EQ(Bind(other_, mr_, 0, 4096, kReadWrite, &rkey).status,
            IBV_WC_SUCCESS);
  EXPECT_EQ(Rdma(*c_, IBV_WR_RDMA_WRITE, 0, 16, rkey), IBV_WC_SUCCESS);
  // Not usable from the pair's QP, which it is not bound to.
  ASSERT_OK(verbs_->DestroyQp(other_));
  other_ = nullptr;
  // The window keeps the MR bound (rxe holds the dead QP until dealloc),
  // and answers no QP.
  EXPECT_ERRNO(verbs_->DeregMr(mr_), EINVAL);
  EXPECT_EQ(Rdma(*a_, IBV_WR_RDMA_WRITE, 0, 16, rkey), IBV_WC_REM_ACCESS_ERR);
  ASSERT_OK(verbs_->DeallocMw(mw_));
  mw_ = nullptr;
  ASSERT_OK(verbs_->DeregMr(mr_));
  mr_ = nullptr;
}

struct BindFailure {
  const char* what;
  int mr_access;
  size_t offset;
  size_t length;
  int window_access;
};

TEST_F(MemoryWindowTest, InvalidBindsFailWithMwBindErrAndTheQpErrs) {
  const BindFailure cases[] = {
      {"MR without MW_BIND", IBV_ACCESS_LOCAL_WRITE, 0, 4096, kReadWrite},
      {"past the end of the MR", kWindowMrAccess, 60 * 1024, 8192, kReadWrite},
      {"zero length", kWindowMrAccess, 0, 0, kReadWrite},
      {"writable window on a read-only MR", IBV_ACCESS_MW_BIND, 0, 4096,
       IBV_ACCESS_REMOTE_WRITE},
      {"zero-based (not simulated)", kWindowMrAccess, 0, 4096,
       IBV_ACCESS_REMOTE_READ | IBV_ACCESS_ZERO_BASED},
  };
  for (const BindFailure& c : cases) {
    SCOPED_TRACE(c.what);
    ASSERT_OK_AND_ASSIGN(ibv_mr * mr, verbs_->RegMr(b_->pd(), b_->data(),
                                                    64 * 1024, c.mr_access));
    const ibv_wc wc = Bind(b_->qp(), mr, c.offset, c.length, c.window_access);
    EXPECT_EQ(wc.status, IBV_WC_MW_BIND_ERR);
    ibv_qp_attr attr{};
    ibv_qp_init_attr init{};
    ASSERT_OK(verbs_->QueryQp(b_->qp(), &attr, IBV_QP_STATE, &init));
    EXPECT_EQ(attr.qp_state, IBV_QPS_ERR);
    ASSERT_OK(verbs_->DeregMr(mr));
    TearDown();
    SetUp();
  }
}

TEST_F(MemoryWindowTest, BindingABoundWindowFails) {
  ASSERT_EQ(Bind(b_->qp(), mr_, 0, 4096, kReadWrite).status, IBV_WC_SUCCESS);
  EXPECT_EQ(Bind(b_->qp(), mr_, 0, 4096, kReadWrite).status,
            IBV_WC_MW_BIND_ERR);
}

TEST_F(MemoryWindowTest, MalformedBindsAreRefusedAtPost) {
  ibv_sge sge{b_->address(0), 8, b_->lkey()};
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_BIND_MW;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.bind_mw.mw = mw_;
  wr.bind_mw.bind_info.mr = mr_;
  wr.bind_mw.bind_info.length = 8;
  ibv_send_wr* bad = nullptr;
  EXPECT_ERRNO(verbs_->PostSend(b_->qp(), &wr, &bad), EINVAL);
  EXPECT_EQ(bad, &wr);
  wr.num_sge = 0;
  wr.bind_mw.bind_info.mr = nullptr;
  EXPECT_ERRNO(verbs_->PostSend(b_->qp(), &wr, &bad), EINVAL);
}

TEST_F(MemoryWindowTest, WindowsAreCountedAndMustGoBeforeThePd) {
  bool listed = false;
  for (const LiveObject& object : fabric_->LeakReport()) {
    listed |= object.kind == "mw" && object.handle == mw_->handle;
  }
  EXPECT_TRUE(listed);
  ibv_device_attr attr{};
  ASSERT_OK(verbs_->QueryDevice(b_->context(), &attr));
  EXPECT_NE(attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B, 0u);
  EXPECT_GT(attr.max_mw, 0);
  EXPECT_ERRNO(verbs_->DeallocPd(b_->pd()), EBUSY);
  EXPECT_ERRNO(verbs_->AllocMw(b_->pd(), IBV_MW_TYPE_1), EOPNOTSUPP);
}

TEST(MemoryWindowProfileTest, EveryStockProfileSaysWhetherItHasWindows) {
  struct Expected {
    DeviceProfile profile;
    bool windows;
  };
  const Expected profiles[] = {{ConnectX6(), true},     {ConnectX7(), true},
                               {IntelE810(), true},     {IntelX722(), true},
                               {AlibabaErdma(), false}, {SoftRoce(), true}};
  for (const Expected& e : profiles) {
    SCOPED_TRACE(e.profile.model);
    Fabric fabric;
    SimVerbs verbs(&fabric);
    ASSERT_OK_AND_ASSIGN(std::string name, fabric.AddDevice(e.profile));
    ASSERT_OK_AND_ASSIGN(ibv_context * context, verbs.OpenDevice(name));
    ibv_device_attr attr{};
    ASSERT_OK(verbs.QueryDevice(context, &attr));
    EXPECT_EQ((attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B) != 0,
              e.windows);
    ASSERT_OK_AND_ASSIGN(ibv_pd * pd, verbs.AllocPd(context));
    absl::StatusOr<ibv_mw*> mw = verbs.AllocMw(pd, IBV_MW_TYPE_2);
    EXPECT_EQ(mw.ok(), e.windows) << mw.status();
    if (mw.ok()) {
      ASSERT_OK(verbs.DeallocMw(*mw));
    } else {
      EXPECT_EQ(VerbsErrno(mw.status()), EOPNOTSUPP);
    }
    ASSERT_OK(verbs.DeallocPd(pd));
    ASSERT_OK(verbs.CloseDevice(context));
    EXPECT_TRUE(fabric.LeakReport().empty());
  }
}

}  // namespace
}  // namespace rdma_transport::sim
