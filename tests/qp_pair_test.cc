// An RC QP pair brought up in one process through the transport's own
// bring-up code (Context: inline negotiation, GID choice, RESET->RTS), with
// no TCP and no Connection: the shortest path from the transport to a real
// kernel RDMA stack. Runs on every backend (test_backend.h); in CI's
// Soft-RoCE VM it is the first proof, and the traffic it makes is what the
// wire-level traffic-class check captures.
//
// Prints one "INLINE <device>: ..." line per device, for the CI log.
#include <arpa/inet.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "tests/test_backend.h"
#include "transport/config.h"
#include "transport/context.h"
#include "transport/deadline.h"
#include "verbs_shim/verbs_error.h"
#include "verbs_shim/verbs_names.h"

namespace rdma_transport {
namespace {

#define QP_ASSERT_OK(expr)                                       \
  do {                                                           \
    const absl::Status qp_status_ = (expr);                      \
    ASSERT_TRUE(qp_status_.ok()) << #expr << ": " << qp_status_; \
  } while (0)

constexpr size_t kSlot = 8192;
constexpr int kSlots = 32;

// One side: a context, a CQ, a QP, a registered buffer of kSlots slots.
struct Side {
  std::unique_ptr<Context> context;
  ibv_cq* cq = nullptr;
  NegotiatedQp qp;
  std::vector<std::byte> memory = std::vector<std::byte>(kSlot * kSlots);
  MemoryRegion region;
  uint32_t psn = 0;
};

class QpPairTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<TestBackend>> backend = MakeTestBackend();
    ASSERT_TRUE(backend.ok()) << backend.status();
    backend_ = *std::move(backend);
  }

  void TearDown() override {
    for (Side* side : {&a_, &b_}) {
      if (side->qp.qp != nullptr) {
        EXPECT_TRUE(verbs().DestroyQp(side->qp.qp).ok());
      }
      for (ibv_qp* extra : side == &a_ ? extra_qps_ : std::vector<ibv_qp*>{}) {
        EXPECT_TRUE(verbs().DestroyQp(extra).ok());
      }
      side->region.Release().IgnoreError();
      if (side->cq != nullptr) {
        EXPECT_TRUE(verbs().DestroyCq(side->cq).ok());
      }
      side->context.reset();
    }
  }

  Verbs& verbs() { return backend_->verbs(); }

  // Opens both sides with `options` over the environment and creates their
  // QPs; does not connect them.
  void Open(const TransportOptions& options = {}) {
    absl::StatusOr<TransportConfig> config = LoadTransportConfig(options);
    ASSERT_TRUE(config.ok()) << config.status();
    int index = 0;
    for (Side* side : {&a_, &b_}) {
      const std::string device =
          index++ == 0 ? backend_->client_device() : backend_->server_device();
      absl::StatusOr<std::unique_ptr<Context>> context =
          Context::Open(verbs(), device, *config);
      ASSERT_TRUE(context.ok()) << context.status();
      side->context = *std::move(context);
      absl::StatusOr<ibv_cq*> cq = verbs().CreateCq(
          side->context->device(), 4 * kSlots, nullptr, nullptr, 0);
      ASSERT_TRUE(cq.ok()) << cq.status();
      side->cq = *cq;
      RcQpCaps caps;
      caps.max_send_wr = kSlots;
      caps.max_recv_wr = kSlots;
      caps.signal_all = true;
      absl::StatusOr<NegotiatedQp> qp =
          side->context->CreateRcQp(caps, side->cq, side->cq);
      ASSERT_TRUE(qp.ok()) << qp.status();
      side->qp = *qp;
      absl::StatusOr<MemoryRegion> region =
          side->context->RegisterMemory(side->memory, kLocalWrite);
      ASSERT_TRUE(region.ok()) << region.status();
      side->region = *std::move(region);
      side->psn = 0x1000 * index;
      std::printf(
          "INLINE %s: asked %u, granted %u, usable %u (sizes tried: %s)\n",
          device.c_str(), side->qp.requested_inline, side->qp.granted_inline,
          side->qp.usable_inline,
          absl::StrJoin(side->qp.attempts, ", ").c_str());
    }
  }

  void ConnectBoth() {
    QP_ASSERT_OK(a_.context->ConnectRcQp(
        a_.qp.qp, a_.psn, b_.context->Endpoint(b_.qp.qp, b_.psn)));
    QP_ASSERT_OK(b_.context->ConnectRcQp(
        b_.qp.qp, b_.psn, a_.context->Endpoint(a_.qp.qp, a_.psn)));
  }

  void PostRecv(Side& side, uint64_t slot) {
    ibv_sge sge{reinterpret_cast<uint64_t>(side.memory.data() + slot * kSlot),
                static_cast<uint32_t>(kSlot), side.region.lkey()};
    ibv_recv_wr wr = {};
    wr.wr_id = slot;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    QP_ASSERT_OK(verbs().PostRecv(side.qp.qp, &wr, &bad));
  }

  // Sends `length` bytes from `from` slot 0; inline when it fits. Returns
  // whether it went inline. The source is overwritten right after an inline
  // post: the receiver must still see the original bytes.
  bool Send(Side& from, size_t length, uint32_t imm, std::byte fill) {
    std::byte* source = from.memory.data();
    std::memset(source, static_cast<int>(fill), length);
    const bool send_inline =
        ShouldSendInline(static_cast<uint32_t>(length), from.qp.usable_inline);
    ibv_sge sge{reinterpret_cast<uint64_t>(source),
                static_cast<uint32_t>(length), from.region.lkey()};
    ibv_send_wr wr = {};
    wr.wr_id = imm;
    wr.opcode = IBV_WR_SEND_WITH_IMM;
    wr.imm_data = htonl(imm);
    wr.sg_list = &sge;
    wr.num_sge = length > 0 ? 1 : 0;
    wr.send_flags = IBV_SEND_SIGNALED | (send_inline ? IBV_SEND_INLINE : 0);
    ibv_send_wr* bad = nullptr;
    absl::Status status = verbs().PostSend(from.qp.qp, &wr, &bad);
    EXPECT_TRUE(status.ok()) << status;
    if (send_inline) std::memset(source, 0xEE, length);
    return send_inline;
  }

  // Polls `side`'s CQ until one completion, for at most `limit`.
  ibv_wc PollOne(Side& side,
                 std::chrono::seconds limit = std::chrono::seconds(10)) {
    ibv_wc wc = {};
    const Deadline deadline = DeadlineIn(limit);
    while (Clock::now() < deadline) {
      absl::StatusOr<int> n = verbs().PollCq(side.cq, 1, &wc);
      EXPECT_TRUE(n.ok()) << n.status();
      if (!n.ok() || *n == 1) return wc;
    }
    ADD_FAILURE() << "no completion within " << limit.count() << " s";
    wc.status = IBV_WC_GENERAL_ERR;
    return wc;
  }

  void ExchangeAndCheck(Side& from, Side& to, size_t length, uint32_t imm,
                        std::byte fill, int* inline_count) {
    PostRecv(to, imm % kSlots);
    if (Send(from, length, imm, fill)) ++*inline_count;
    ibv_wc sent = PollOne(from);
    ASSERT_EQ(sent.status, IBV_WC_SUCCESS)
        << WcStatusName(sent.status) << " sending " << length << " bytes";
    ASSERT_EQ(sent.wr_id, imm);
    ibv_wc received = PollOne(to);
    ASSERT_EQ(received.status, IBV_WC_SUCCESS) << WcStatusName(received.status);
    EXPECT_EQ(received.opcode, IBV_WC_RECV);
    EXPECT_TRUE(received.wc_flags & IBV_WC_WITH_IMM);
    EXPECT_EQ(ntohl(received.imm_data), imm);
    ASSERT_EQ(received.byte_len, length);
    const std::byte* data = to.memory.data() + (imm % kSlots) * kSlot;
    for (size_t i = 0; i < length; ++i) {
      ASSERT_EQ(data[i], fill)
          << "byte " << i << " of a " << length << "-byte message";
    }
  }

  std::unique_ptr<TestBackend> backend_;
  Side a_;
  Side b_;
  std::vector<ibv_qp*> extra_qps_;
};

TEST_F(QpPairTest, BringsUpAPairAndMovesBytesInlineAndNot) {
  ASSERT_NO_FATAL_FAILURE(Open());
  ASSERT_NO_FATAL_FAILURE(ConnectBoth());
  const uint32_t usable = a_.qp.usable_inline;
  ASSERT_GT(usable, 0u) << "the device granted no inline data";
  const std::vector<size_t> sizes = {0,          1,    16,   usable - 1, usable,
                                     usable + 1, 1024, 4096, kSlot};
  int inline_count = 0;
  uint32_t imm = 1;
  for (size_t length : sizes) {
    ExchangeAndCheck(a_, b_, length, imm, static_cast<std::byte>(imm),
                     &inline_count);
    ++imm;
    ExchangeAndCheck(b_, a_, length, imm, static_cast<std::byte>(imm),
                     &inline_count);
    ++imm;
  }
  // 0, 1, 16, usable-1 and usable fit, both ways.
  EXPECT_EQ(inline_count, 10);
  std::printf("MOVED %zu sizes both ways, %d sends inline\n", sizes.size(),
              inline_count);
}

TEST_F(QpPairTest, SecondQpStartsAtTheCachedInlineSize) {
  ASSERT_NO_FATAL_FAILURE(Open());
  RcQpCaps caps;
  absl::StatusOr<NegotiatedQp> second =
      a_.context->CreateRcQp(caps, a_.cq, a_.cq);
  ASSERT_TRUE(second.ok()) << second.status();
  extra_qps_.push_back(second->qp);
  EXPECT_EQ(second->attempts.size(), 1u);
  EXPECT_EQ(second->requested_inline, a_.qp.requested_inline);
  EXPECT_EQ(second->usable_inline, a_.qp.usable_inline);
}

TEST_F(QpPairTest, AskingTooMuchStepsDownToWhatTheProviderGrants) {
  TransportOptions options;
  options.max_inline = 1024;  // more than rxe (512) or mlx5 (828) grant
  ASSERT_NO_FATAL_FAILURE(Open(options));
  const std::vector<uint32_t>& attempts = a_.qp.attempts;
  ASSERT_GE(attempts.size(), 2u) << "the device accepted 1024 inline bytes";
  EXPECT_EQ(attempts.front(), 1024u);
  for (size_t i = 1; i < attempts.size(); ++i) {
    EXPECT_EQ(attempts[i], attempts[i - 1] - 16);
  }
  EXPECT_GE(a_.qp.granted_inline, a_.qp.requested_inline);
  ASSERT_NO_FATAL_FAILURE(ConnectBoth());
  int inline_count = 0;
  ExchangeAndCheck(a_, b_, a_.qp.usable_inline, 7, std::byte{0x5a},
                   &inline_count);
  EXPECT_EQ(inline_count, 1);
}

TEST_F(QpPairTest, InlineOffMeansNoInlineSends) {
  TransportOptions options;
  options.max_inline = 0;
  ASSERT_NO_FATAL_FAILURE(Open(options));
  EXPECT_EQ(a_.qp.usable_inline, 0u);
  EXPECT_EQ(a_.qp.attempts, std::vector<uint32_t>{0});
  ASSERT_NO_FATAL_FAILURE(ConnectBoth());
  int inline_count = 0;
  ExchangeAndCheck(a_, b_, 8, 9, std::byte{0x11}, &inline_count);
  EXPECT_EQ(inline_count, 0);
}

}  // namespace
}  // namespace rdma_transport
