// A window of asynchronous operations (Connection::PostWrite/PostRead on an
// Engine) refilled as completions come, as rdma_bw --write_mode=window and
// perftest's tx-depth do, on the simulator with the Soft-RoCE device profile
// and with ConnectX-7's: on rxe at most kSoftRoceInFlightBytes of the send
// queue is ever on the NIC (the rest waits in the connection and goes out as
// completions are dispatched), elsewhere the whole window is; every byte
// lands, every op ends once and in order; a blocking Write() beside them
// leaves both intact; Close() posts after what waits; a failure ends what
// never went out FAILED. Virtual time, nothing timed.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "sim/fabric.h"
#include "sim/fault_injector.h"
#include "sim/sim_verbs.h"
#include "tests/connection_pair.h"
#include "tests/e2e_fixture.h"
#include "tests/engine_client_fixture.h"
#include "tests/register_for_test.h"
#include "transport/connection.h"
#include "transport/engine.h"

namespace rdma_transport {
namespace {

using std::chrono::seconds;

constexpr size_t kOpBytes = 64 << 10;
constexpr size_t kSlots = 32;

std::byte PatternByte(uint64_t op, size_t i) {
  return static_cast<std::byte>((op * 131 + i * 7 + 1) & 0xff);
}

class EngineWindowTest
    : public EngineClientFixture<::testing::TestWithParam<std::string>> {
 protected:
  void SetUp() override {
    ConnectionOptions options;
    options.send_slots = kSlots;
    ASSERT_NO_FATAL_FAILURE(StartPair(GetParam(), options));
    source_.resize(kSlots * kOpBytes);
    target_.assign(kSlots * kOpBytes, std::byte{0});
    source_mr_ = Register(0, source_, kLocalWrite);
    target_mr_ = Register(1, target_, kRemoteRead | kRemoteWrite);
    posted_before_ = WrsPosted();
  }

  void ReleaseMemory() override {
    source_mr_ = MemoryRegion();
    target_mr_ = MemoryRegion();
  }

  MemoryRegion Register(int side, std::vector<std::byte>& memory, int access) {
    return RegisterForTest(*contexts_[side], memory, access);
  }

  bool soft_roce() const { return GetParam() == "rxe"; }

  // Send work requests the client's NIC has accepted since SetUp().
  uint64_t WrsPosted() const {
    absl::StatusOr<sim::SimCounters> counters =
        fabric_->DeviceCounters(devices_[0]);
    EXPECT_TRUE(counters.ok()) << counters.status();
    return counters.ok() ? counters->send_wrs_posted - posted_before_ : 0;
  }

  // Op `op` of the stream: local slot op % kSlots to the same remote slot.
  RdmaOp SlotOp(uint64_t op) const {
    const size_t at = (op % kSlots) * kOpBytes;
    return {&source_mr_, at, kOpBytes, target_mr_.remote(), at};
  }
  void StampSlot(uint64_t op) {
    std::byte* slot = source_.data() + (op % kSlots) * kOpBytes;
    for (size_t i = 0; i < kOpBytes; ++i) slot[i] = PatternByte(op, i);
  }

  // Stamps every slot and posts one WRITE per slot, all in one PostWrite().
  void PostEverySlot(OpHandle* first) {
    std::vector<RdmaOp> ops;
    for (uint64_t op = 0; op < kSlots; ++op) {
      StampSlot(op);
      ops.push_back(SlotOp(op));
    }
    absl::StatusOr<OpHandle> posted = client_->PostWrite(ops);
    ASSERT_TRUE(posted.ok()) << posted.status();
    *first = *posted;
  }

  // One turn of the engine: a Progress(), or a Wait() (virtual time) when
  // it had nothing and nothing is ready.
  void Turn(std::chrono::seconds wait = seconds(10)) {
    if (engine_->Progress() == 0 && engine_->completions_ready() == 0) {
      E2E_ASSERT_OK(engine_->Wait(env().DeadlineIn(wait)));
    }
  }
  // Drives the engine until the `count` ops from `first` have ended, each
  // COMPLETED and in order.
  void ExpectCompletedInOrder(OpHandle first, size_t count) {
    size_t ended = 0;
    while (ended < count) {
      ASSERT_NO_FATAL_FAILURE(Turn());
      while (std::optional<Completion> c = engine_->NextCompletion()) {
        ASSERT_EQ(c->outcome, OpOutcome::kCompleted) << c->status;
        ASSERT_EQ(c->handle, first + ended) << "out of order";
        ++ended;
      }
    }
  }

  std::vector<std::byte> source_, target_;
  MemoryRegion source_mr_, target_mr_;
  uint64_t posted_before_ = 0;
};

// The NIC may hold this many of the window's 64 KiB WRITEs at once.
size_t OnTheNic(bool soft_roce) {
  return soft_roce ? kSoftRoceInFlightBytes / kOpBytes : kSlots;
}

TEST_P(EngineWindowTest, AWindowRefilledAsOpsCompleteStaysUnderTheCap) {
  constexpr uint64_t kOps = 10 * kSlots + 7;
  uint64_t posted = 0, ended = 0;
  size_t most_on_nic = 0, most_queued = 0;
  OpHandle next_handle = 0;
  // Every point the test looks: what the NIC holds is what it accepted
  // less what the engine has ended (each op is one signalled WRITE).
  auto look = [&] {
    const uint64_t on_nic = WrsPosted() - engine_->stats().ops_completed;
    most_on_nic = std::max<size_t>(most_on_nic, on_nic);
    most_queued = std::max(most_queued, client_->async_ops_queued());
    ASSERT_LE(on_nic, OnTheNic(soft_roce())) << "after " << posted << " posts";
  };
  while (ended < kOps) {
    // Refill every free slot, one PostWrite each, as rdma_bw does.
    while (posted < kOps && posted - ended < kSlots) {
      StampSlot(posted);
      const RdmaOp op = SlotOp(posted);
      absl::StatusOr<OpHandle> handle = client_->PostWrite({&op, 1});
      ASSERT_TRUE(handle.ok()) << handle.status();
      if (posted == 0) next_handle = *handle;
      ASSERT_EQ(*handle, next_handle + posted);
      ++posted;
      ASSERT_NO_FATAL_FAILURE(look());
    }
    ASSERT_NO_FATAL_FAILURE(Turn());
    ASSERT_NO_FATAL_FAILURE(look());
    while (std::optional<Completion> c = engine_->NextCompletion()) {
      ASSERT_EQ(c->outcome, OpOutcome::kCompleted) << c->status;
      ASSERT_EQ(c->handle, next_handle + ended) << "out of order";
      ASSERT_EQ(c->length, kOpBytes);
      ++ended;
    }
  }
  // On rxe the cap, not the window, bounded the NIC, and it was used in
  // full; elsewhere the whole window went out at once.
  EXPECT_EQ(most_on_nic, OnTheNic(soft_roce()));
  if (soft_roce()) {
    EXPECT_EQ(most_queued, kSlots - OnTheNic(true));
  } else {
    EXPECT_EQ(most_queued, 0u);
  }
  EXPECT_EQ(WrsPosted(), kOps);
  EXPECT_EQ(client_->async_ops_in_flight(), 0u);
  EXPECT_EQ(client_->stats().rdma_writes, kOps);
  // Each slot holds the last op that wrote it.
  for (size_t slot = 0; slot < kSlots; ++slot) {
    const uint64_t last = slot + kSlots * ((kOps - 1 - slot) / kSlots);
    for (size_t i = 0; i < kOpBytes; ++i) {
      ASSERT_EQ(target_[slot * kOpBytes + i], PatternByte(last, i))
          << "slot " << slot << " byte " << i;
    }
  }
  E2E_ASSERT_OK(client_->Close(env().DeadlineIn(seconds(5))));
}

TEST_P(EngineWindowTest, ALongReadGoesOutPieceByPieceBehindTheCap) {
  // One READ of the whole 2 MiB target, then three small ones behind it.
  for (size_t i = 0; i < target_.size(); ++i) target_[i] = PatternByte(9, i);
  std::vector<RdmaOp> ops = {
      {&source_mr_, 0, target_.size(), target_mr_.remote(), 0}};
  for (size_t k = 0; k < 3; ++k) {
    ops.push_back({&source_mr_, k * 100, 100, target_mr_.remote(), k * 100});
  }
  absl::StatusOr<OpHandle> first = client_->PostRead(ops);
  ASSERT_TRUE(first.ok()) << first.status();
  // rxe: pieces of a quarter of the cap, four on the NIC; the rest wait.
  constexpr uint64_t kPiece = kSoftRoceInFlightBytes / kRdmaPiecesUnderCap;
  const uint64_t pieces = soft_roce() ? target_.size() / kPiece : 1;
  EXPECT_EQ(WrsPosted(), soft_roce() ? kRdmaPiecesUnderCap : ops.size());
  EXPECT_EQ(client_->async_ops_queued(), soft_roce() ? ops.size() : 0u);
  // The first pieces' completions are what post the next.
  ASSERT_GT(engine_->Progress(), 0);
  if (soft_roce()) {
    EXPECT_GT(WrsPosted(), kRdmaPiecesUnderCap);
    EXPECT_LE(WrsPosted(), 2 * kRdmaPiecesUnderCap);
  }
  ASSERT_NO_FATAL_FAILURE(ExpectCompletedInOrder(*first, ops.size()));
  EXPECT_EQ(WrsPosted(), pieces + 3);
  for (size_t i = 0; i < source_.size(); ++i) {
    ASSERT_EQ(source_[i], PatternByte(9, i)) << "byte " << i;
  }
  E2E_ASSERT_OK(client_->Close(env().DeadlineIn(seconds(5))));
}

// An op of more pieces than the send queue has entries (8 MiB: 128 pieces
// of 64 KiB on rxe) is accepted when nothing else waits, and while it waits
// another op is refused; it lands whole.
TEST_P(EngineWindowTest, AnOpLongerThanTheSendQueueGoesOutPieceByPiece) {
  std::vector<std::byte> big(8 << 20), big_target(8 << 20);
  for (size_t i = 0; i < big.size(); ++i) big[i] = PatternByte(5, i);
  MemoryRegion big_mr = Register(0, big, kLocalOnly);
  MemoryRegion big_target_mr = Register(1, big_target, kRemoteWrite);
  const RdmaOp op{&big_mr, 0, big.size(), big_target_mr.remote(), 0};
  if (soft_roce()) {
    // Two such ops in one batch: never, and the refusal says so.
    const RdmaOp two[] = {op, op};
    absl::StatusOr<OpHandle> both = client_->PostWrite(two);
    ASSERT_TRUE(absl::IsResourceExhausted(both.status())) << both.status();
    EXPECT_NE(both.status().message().find("post fewer"), std::string::npos)
        << both.status();
  }
  absl::StatusOr<OpHandle> first = client_->PostWrite({&op, 1});
  ASSERT_TRUE(first.ok()) << first.status();
  const RdmaOp small = SlotOp(0);
  absl::StatusOr<OpHandle> second = client_->PostWrite({&small, 1});
  if (soft_roce()) {
    EXPECT_TRUE(absl::IsResourceExhausted(second.status())) << second.status();
    EXPECT_EQ(client_->async_ops_queued(), 1u);
    // A 1 MiB op (16 pieces) is refused as long as the pieces still waiting
    // fill the send queue (docs/resources.md: depth send_slots +
    // max_rdma_batch + 4; 2 entries kept for control messages).
    constexpr uint64_t kPiece = kSoftRoceInFlightBytes / kRdmaPiecesUnderCap;
    const uint64_t depth = kSlots + ConnectionOptions{}.max_rdma_batch + 4;
    const uint64_t pieces = big.size() / kPiece;
    const RdmaOp again{&big_mr, 0, 1 << 20, big_target_mr.remote(), 0};
    int refusals = 0;
    for (int turn = 0; turn < 200; ++turn) {
      ASSERT_NO_FATAL_FAILURE(Turn());
      const uint64_t waiting = pieces - WrsPosted();
      if (waiting + (1 << 20) / kPiece + 2 <= depth) break;
      absl::StatusOr<OpHandle> refused = client_->PostWrite({&again, 1});
      ASSERT_TRUE(absl::IsResourceExhausted(refused.status()))
          << "turn " << turn << ", " << waiting
          << " pieces waiting: " << refused.status();
      ++refusals;
    }
    EXPECT_GT(refusals, 0);
  } else {
    ASSERT_TRUE(second.ok()) << second.status();
  }
  ASSERT_NO_FATAL_FAILURE(ExpectCompletedInOrder(*first, soft_roce() ? 1 : 2));
  if (soft_roce()) {
    EXPECT_EQ(WrsPosted(),
              big.size() / (kSoftRoceInFlightBytes / kRdmaPiecesUnderCap));
  }
  EXPECT_EQ(std::memcmp(big_target.data(), big.data(), big.size()), 0);
  E2E_ASSERT_OK(client_->Close(env().DeadlineIn(seconds(5))));
}

// RC's order holds on every device: a message posted after WRITEs reaches
// the peer after their bytes. On rxe, where the cap holds most of the
// window back, PostSendFrom() is refused meanwhile and Send() waits.
TEST_P(EngineWindowTest, AMessageAfterQueuedWritesArrivesAfterTheirBytes) {
  OpHandle first = 0;
  ASSERT_NO_FATAL_FAILURE(PostEverySlot(&first));
  std::vector<std::byte> note(64, std::byte{0x4e});
  MemoryRegion note_mr = Register(0, note, kLocalOnly);
  absl::StatusOr<OpHandle> posted = client_->PostSendFrom(note_mr, 0, 64);
  if (soft_roce()) {
    ASSERT_TRUE(absl::IsResourceExhausted(posted.status())) << posted.status();
    EXPECT_NE(posted.status().message().find("in-flight cap"),
              std::string::npos)
        << posted.status();
    E2E_ASSERT_OK(client_->Send(note, env().DeadlineIn(seconds(10))));
    EXPECT_EQ(client_->async_ops_queued(), 0u);
  } else {
    ASSERT_TRUE(posted.ok()) << posted.status();
  }
  std::vector<std::byte> got(64);
  absl::StatusOr<size_t> n =
      server_->Receive(got, env().DeadlineIn(seconds(10)));
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 64u);
  // Every WRITE posted before the message has landed.
  EXPECT_EQ(std::memcmp(target_.data(), source_.data(), target_.size()), 0);
  ASSERT_NO_FATAL_FAILURE(
      ExpectCompletedInOrder(first, soft_roce() ? kSlots : kSlots + 1));
  E2E_ASSERT_OK(client_->Close(env().DeadlineIn(seconds(5))));
}

TEST_P(EngineWindowTest, CloseGoesAfterEveryQueuedPiece) {
  OpHandle first = 0;
  ASSERT_NO_FATAL_FAILURE(PostEverySlot(&first));
  EXPECT_EQ(client_->async_ops_queued(), kSlots - OnTheNic(soft_roce()) + 0u);
  // Close() drives the engine until what waits has gone out and completed.
  E2E_ASSERT_OK(client_->Close(env().DeadlineIn(seconds(10))));
  size_t ended = 0;
  while (std::optional<Completion> c = engine_->NextCompletion()) {
    EXPECT_EQ(c->outcome, OpOutcome::kCompleted) << c->status;
    EXPECT_EQ(c->handle, first + ended);
    ++ended;
  }
  EXPECT_EQ(ended, kSlots);
  EXPECT_EQ(std::memcmp(target_.data(), source_.data(), target_.size()), 0);
}

TEST_P(EngineWindowTest, ABlockingWriteBesideQueuedOpsLeavesBothIntact) {
  OpHandle first = 0;
  ASSERT_NO_FATAL_FAILURE(PostEverySlot(&first));
  // Write() lays out its own chains while its waits drive the engine,
  // which posts the queued ops' pieces meanwhile.
  std::vector<std::byte> more(8 * kOpBytes), more_target(8 * kOpBytes);
  for (size_t i = 0; i < more.size(); ++i) more[i] = PatternByte(77, i);
  MemoryRegion more_mr = Register(0, more, kLocalOnly);
  MemoryRegion more_target_mr = Register(1, more_target, kRemoteWrite);
  std::vector<RdmaOp> blocking;
  for (size_t k = 0; k < 8; ++k) {
    blocking.push_back({&more_mr, k * kOpBytes, kOpBytes,
                        more_target_mr.remote(), k * kOpBytes});
  }
  E2E_ASSERT_OK(client_->Write(blocking));
  ASSERT_NO_FATAL_FAILURE(ExpectCompletedInOrder(first, kSlots));
  EXPECT_EQ(std::memcmp(more_target.data(), more.data(), more.size()), 0);
  EXPECT_EQ(std::memcmp(target_.data(), source_.data(), target_.size()), 0);
  EXPECT_EQ(client_->stats().rdma_writes, kSlots + 8);
  E2E_ASSERT_OK(client_->Close(env().DeadlineIn(seconds(5))));
}

TEST_P(EngineWindowTest, APeerLostEndsWhatNeverWentOutFailed) {
  ASSERT_TRUE(
      fabric_->faults()
          .DropPackets(sim::FaultTarget::Qp(server_->qp()->qp_num), 1 << 30)
          .ok());
  OpHandle first = 0;
  ASSERT_NO_FATAL_FAILURE(PostEverySlot(&first));
  size_t failed = 0, unknown = 0, ended = 0;
  while (ended < kSlots) {
    ASSERT_NO_FATAL_FAILURE(Turn(seconds(30)));
    while (std::optional<Completion> c = engine_->NextCompletion()) {
      ASSERT_NE(c->outcome, OpOutcome::kCompleted) << "the peer is gone";
      EXPECT_FALSE(c->status.ok());
      (c->outcome == OpOutcome::kFailed ? failed : unknown) += 1;
      ++ended;
    }
  }
  // What was on the NIC may have landed; what waited behind the cap never
  // went out.
  EXPECT_EQ(unknown, OnTheNic(soft_roce()));
  EXPECT_EQ(failed, kSlots - OnTheNic(soft_roce()));
  EXPECT_EQ(WrsPosted(), OnTheNic(soft_roce()));
  EXPECT_EQ(client_->async_ops_in_flight(), 0u);
  EXPECT_FALSE(client_->status().ok());
}

// Copied messages go unsignalled: their bytes stay on the send queue's
// books until something signalled behind them completes. A WRITE queued
// behind them must not count them against the cap (nothing would ever
// report them), or it waits for ever and a Send() behind it with it.
class EngineWindowUnsignalledTest
    : public EngineClientFixture<::testing::Test> {
 protected:
  void ReleaseMemory() override {
    source_mr_ = MemoryRegion();
    target_mr_ = MemoryRegion();
  }
  std::vector<std::byte> source_, target_;
  MemoryRegion source_mr_, target_mr_;
};

TEST_F(EngineWindowUnsignalledTest, AWriteBehindCopiedMessagesGoesOutAtOnce) {
  ConnectionOptions options;
  options.max_message_size = 64 << 10;
  options.keepalive_interval = std::chrono::milliseconds(0);  // no probe
  ASSERT_NO_FATAL_FAILURE(StartPair("rxe", options));
  source_.assign(64 << 10, std::byte{0x33});
  target_.assign(64 << 10, std::byte{0});
  source_mr_ = RegisterForTest(*contexts_[0], source_, kLocalOnly);
  target_mr_ = RegisterForTest(*contexts_[1], target_, kRemoteWrite);
  // 256 KiB of copied messages: the whole cap, unsignalled.
  for (int i = 0; i < 4; ++i) {
    E2E_ASSERT_OK(client_->Send(source_, env().DeadlineIn(seconds(5))));
  }
  const RdmaOp op{&source_mr_, 0, source_.size(), target_mr_.remote(), 0};
  absl::StatusOr<OpHandle> write = client_->PostWrite({&op, 1});
  ASSERT_TRUE(write.ok()) << write.status();
  EXPECT_EQ(client_->async_ops_queued(), 0u);
  // A message behind it goes out too, and promptly (virtual time).
  const Deadline before = env().Now();
  E2E_ASSERT_OK(client_->Send(std::span(source_).first(64),
                              env().DeadlineIn(seconds(5))));
  EXPECT_LT(env().Now() - before, std::chrono::milliseconds(10));
  std::vector<std::byte> got(64 << 10);
  for (int i = 0; i < 5; ++i) {
    absl::StatusOr<size_t> n =
        server_->Receive(got, env().DeadlineIn(seconds(5)));
    ASSERT_TRUE(n.ok()) << n.status();
  }
  EXPECT_EQ(target_, source_);
  E2E_ASSERT_OK(client_->Close(env().DeadlineIn(seconds(5))));
}

INSTANTIATE_TEST_SUITE_P(Profiles, EngineWindowTest,
                         ::testing::Values("rxe", "cx7"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace rdma_transport
