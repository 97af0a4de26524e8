// The asynchronous zero-copy send (Connection::PostSendFrom on an Engine) on
// the simulator, in virtual time: a window of messages of every size class
// (empty, one byte, the inline limit, the slot, rendezvous above it) refilled
// as completions come, every byte checked by an unchanged receiver and every
// op COMPLETED in posting order; no credit is kResourceExhausted with nothing
// posted, and posting works again once the receiver drains; sends and
// PostWrite()s end in posting order, a WRITE waiting behind an unread
// rendezvous message; a peer lost or exiting with sends outstanding ends each
// once and nothing hangs; no engine is kFailedPrecondition.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "sim/fabric.h"
#include "sim/fault_injector.h"
#include "sim/sim_verbs.h"
#include "tests/connection_pair.h"
#include "tests/connection_test_peer.h"
#include "tests/e2e_fixture.h"
#include "tests/engine_client_fixture.h"
#include "tests/register_for_test.h"
#include "transport/connection.h"
#include "transport/engine.h"

namespace rdma_transport {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// The sender's memory: kWindow spans of kSpan bytes, span op % kWindow for
// op `op`, written again only once that op has ended.
constexpr size_t kWindow = 16;
constexpr size_t kSpan = (64 << 10) + 64;

std::byte PatternByte(uint64_t op, size_t i) {
  return static_cast<std::byte>((op * 131 + i * 7 + 1) & 0xff);
}

class EngineSendTest : public EngineClientFixture<> {
 protected:
  void Start(std::string_view profile = "cx7",
             sim::ProgressMode mode = sim::ProgressMode::kImmediate,
             ConnectionOptions options = {}) {
    sim::FabricOptions fabric_options;
    fabric_options.progress_mode = mode;
    ASSERT_NO_FATAL_FAILURE(StartPair(profile, options, fabric_options));
    source_.assign(kWindow * kSpan, std::byte{0});
    sink_.assign(kSpan, std::byte{0});
    source_mr_ = RegisterForTest(*contexts_[0], source_, kRemoteRead);
    sink_mr_ = RegisterForTest(*contexts_[1], sink_, kLocalWrite);
  }

  void ReleaseMemory() override {
    source_mr_ = MemoryRegion();
    sink_mr_ = MemoryRegion();
  }

  // Stamps op `op`'s span with `length` bytes of its pattern and posts it.
  absl::StatusOr<OpHandle> PostOp(uint64_t op, size_t length,
                                  Deadline deadline = kNoDeadline) {
    std::byte* span = source_.data() + (op % kWindow) * kSpan;
    for (size_t i = 0; i < length; ++i) span[i] = PatternByte(op, i);
    absl::StatusOr<OpHandle> handle = client_->PostSendFrom(
        source_mr_, (op % kWindow) * kSpan, length, deadline);
    if (handle.ok()) sent_[*handle] = {op, length};
    return handle;
  }

  // Takes every message that has arrived at the server (none waited for),
  // checking each against the next op sent; rendezvous ones are read into
  // the registered sink, the others alternately copied out and borrowed.
  void ReceiveArrived() {
    while (true) {
      absl::StatusOr<size_t> size = server_->NextMessageSize(env().Now());
      if (absl::IsDeadlineExceeded(size.status())) return;
      ASSERT_TRUE(size.ok()) << size.status();
      ASSERT_LT(received_, sent_.size()) << "a message nobody sent";
      const auto& [op, length] = std::next(sent_.begin(), received_)->second;
      ASSERT_EQ(*size, length) << "message " << received_;
      const std::byte* bytes = sink_.data();
      ReceivedMessage borrowed;
      if (length > server_->max_message_size()) {
        absl::StatusOr<size_t> n =
            server_->ReceiveInto(sink_mr_, 0, sink_.size(), env().Now());
        ASSERT_TRUE(n.ok()) << n.status();
        ASSERT_EQ(*n, length);
      } else if (received_ % 2 == 0) {
        absl::StatusOr<size_t> n = server_->Receive(sink_, env().Now());
        ASSERT_TRUE(n.ok()) << n.status();
        ASSERT_EQ(*n, length);
      } else {
        absl::StatusOr<ReceivedMessage> view =
            server_->ReceiveBorrowed(env().Now());
        ASSERT_TRUE(view.ok()) << view.status();
        borrowed = *std::move(view);
        ASSERT_EQ(borrowed.size(), length);
        bytes = borrowed.data().data();
      }
      for (size_t i = 0; i < length; ++i) {
        ASSERT_EQ(bytes[i], PatternByte(op, i))
            << "message " << received_ << " (op " << op << ", " << length
            << " bytes), byte " << i;
      }
      ++received_;
    }
  }

  // One turn of the engine: Progress(), or a Wait() in virtual time when it
  // had nothing; the completions go to `ended_`, each handle once.
  void Turn() {
    if (engine_->Progress() == 0 && engine_->completions_ready() == 0) {
      const absl::Status waited = engine_->Wait(env().DeadlineIn(seconds(1)));
      ASSERT_TRUE(waited.ok() || absl::IsDeadlineExceeded(waited)) << waited;
    }
    while (std::optional<Completion> c = engine_->NextCompletion()) {
      ASSERT_TRUE(ended_.emplace(c->handle, *c).second)
          << "handle " << c->handle << " ended twice";
      order_.push_back(c->handle);
    }
  }

  // Turns (and receives, when `receive`) until `done()`; fails the test
  // after 30 s of virtual time.
  template <typename Done>
  void DriveUntil(Done done, bool receive = true) {
    const Deadline give_up = env().DeadlineIn(seconds(30));
    while (!done()) {
      ASSERT_LT(env().Now(), give_up)
          << "stalled: " << ended_.size() << " of " << sent_.size()
          << " ops ended, " << received_ << " messages received";
      if (receive) {
        ASSERT_NO_FATAL_FAILURE(ReceiveArrived());
      }
      ASSERT_NO_FATAL_FAILURE(Turn());
    }
  }

  // Every op ended COMPLETED, in posting (handle) order.
  void ExpectAllCompletedInOrder() {
    ASSERT_EQ(order_.size(), ended_.size());
    for (size_t i = 0; i < order_.size(); ++i) {
      const Completion& c = ended_.at(order_[i]);
      EXPECT_EQ(c.outcome, OpOutcome::kCompleted) << c.status;
      EXPECT_TRUE(c.status.ok()) << c.status;
      if (i > 0) {
        EXPECT_LT(order_[i - 1], order_[i]) << "out of order";
      }
    }
  }

  std::vector<std::byte> source_, sink_;
  MemoryRegion source_mr_, sink_mr_;
  // handle -> (op, length) of every send posted, in posting order.
  std::map<OpHandle, std::pair<uint64_t, size_t>> sent_;
  size_t received_ = 0;
  std::map<OpHandle, Completion> ended_;
  std::vector<OpHandle> order_;  // handles in the order they ended
};

// The sizes of the window: every path a message can take.
std::vector<size_t> MixedSizes(const Connection& c, bool rendezvous) {
  const size_t slot = c.max_message_size();
  std::vector<size_t> sizes = {
      0, 1, c.usable_inline(), c.usable_inline() + 1, 1024, slot, 7, slot - 1};
  if (rendezvous) {
    sizes.push_back(slot + 1);
    sizes.push_back(kSpan);
  }
  return sizes;
}

class EngineSendWindowTest
    : public EngineSendTest,
      public ::testing::WithParamInterface<std::tuple<std::string, bool>> {};

TEST_P(EngineSendWindowTest, AWindowOfMixedSizesArrivesInOrderByteExact) {
  const auto& [profile, rendezvous] = GetParam();
  ConnectionOptions options;
  options.rendezvous = rendezvous;
  ASSERT_NO_FATAL_FAILURE(
      Start(profile, sim::ProgressMode::kImmediate, options));
  ASSERT_EQ(client_->path().rendezvous, rendezvous);
  const std::vector<size_t> sizes = MixedSizes(*client_, rendezvous);
  const uint64_t kOps = 25 * sizes.size() + 3;
  uint64_t posted = 0;
  size_t refused = 0, most_outstanding = 0;
  uint64_t bytes = 0;
  const Deadline start = env().Now();
  while (order_.size() < kOps) {
    // Refill the window; a refusal (no credit yet) waits for a turn.
    while (posted < kOps && posted - order_.size() < kWindow) {
      const size_t length = sizes[posted % sizes.size()];
      absl::StatusOr<OpHandle> handle = PostOp(posted, length);
      if (absl::IsResourceExhausted(handle.status())) {
        ++refused;
        break;
      }
      ASSERT_TRUE(handle.ok()) << handle.status();
      ++posted;
      bytes += length;
      most_outstanding =
          std::max(most_outstanding, client_->async_ops_in_flight());
    }
    ASSERT_NO_FATAL_FAILURE(ReceiveArrived());
    ASSERT_NO_FATAL_FAILURE(Turn());
  }
  ASSERT_NO_FATAL_FAILURE(DriveUntil([&] { return received_ == kOps; }, true));
  ASSERT_NO_FATAL_FAILURE(ExpectAllCompletedInOrder());
  // Each send is signalled and ends at its own completion: no op waited
  // for a later one's, or for the keepalive probe a second of idling sends.
  EXPECT_LT(env().Now() - start, milliseconds(50));
  for (const auto& [handle, c] : ended_) {
    EXPECT_TRUE(c.is_send);
    EXPECT_FALSE(c.is_write);
    EXPECT_EQ(c.length, sent_.at(handle).second);
  }
  EXPECT_EQ(most_outstanding, kWindow) << "the window was never full";
  EXPECT_EQ(refused, 0u) << "64 credits never run out for a window of 16";
  EXPECT_EQ(client_->async_ops_in_flight(), 0u);
  const ConnectionStats stats = client_->stats();
  EXPECT_EQ(stats.messages_sent, kOps);
  EXPECT_EQ(stats.bytes_sent, bytes);
  EXPECT_EQ(stats.rendezvous_sent, rendezvous ? 2 * (kOps / sizes.size()) : 0);
  EXPECT_EQ(engine_->stats().ops_completed, kOps);
  E2E_ASSERT_OK(client_->Close(env().DeadlineIn(seconds(5))));
}

INSTANTIATE_TEST_SUITE_P(ProfilesAndRendezvous, EngineSendWindowTest,
                         ::testing::Combine(::testing::Values("cx7", "rxe"),
                                            ::testing::Bool()),
                         [](const auto& info) {
                           return std::get<0>(info.param) +
                                  (std::get<1>(info.param) ? "_rendezvous"
                                                           : "_eager");
                         });

TEST_F(EngineSendTest, NoCreditIsResourceExhaustedUntilTheReceiverDrains) {
  ConnectionOptions options;
  options.recv_slots = 8;  // 8 credits: 6 for data, 2 in reserve
  ASSERT_NO_FATAL_FAILURE(Start("cx7", sim::ProgressMode::kImmediate, options));
  uint64_t op = 0;
  for (; op < 6; ++op) {
    absl::StatusOr<OpHandle> handle = PostOp(op, 100 + op);
    ASSERT_TRUE(handle.ok()) << "op " << op << ": " << handle.status();
  }
  // Nothing the engine does gives credit back while nobody receives.
  ASSERT_NO_FATAL_FAILURE(DriveUntil([&] { return ended_.size() == 6; },
                                     /*receive=*/false));
  absl::StatusOr<OpHandle> refused = PostOp(op, 100);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted)
      << refused.status();
  EXPECT_NE(refused.status().message().find("credit"), std::string::npos)
      << refused.status();
  EXPECT_EQ(client_->stats().messages_sent, 6u);  // nothing was posted
  EXPECT_EQ(client_->async_ops_in_flight(), 0u);
  // The receiver drains; its credits come back and posting works again.
  ASSERT_NO_FATAL_FAILURE(ReceiveArrived());
  EXPECT_EQ(received_, 6u);
  absl::StatusOr<OpHandle> again = absl::UnknownError("not yet posted");
  ASSERT_NO_FATAL_FAILURE(DriveUntil(
      [&] {
        again = PostOp(op, 100);
        return !absl::IsResourceExhausted(again.status());
      },
      /*receive=*/false));
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_NO_FATAL_FAILURE(
      DriveUntil([&] { return ended_.size() == 7 && received_ == 7; }, true));
  ASSERT_NO_FATAL_FAILURE(ExpectAllCompletedInOrder());
}

TEST_F(EngineSendTest, SendsAndWritesEndInPostingOrderBehindARendezvous) {
  ASSERT_NO_FATAL_FAILURE(Start("rxe"));  // the in-flight cap queues WRITEs
  std::vector<std::byte> write_source(8 * kSpan), write_target(8 * kSpan);
  for (size_t i = 0; i < write_source.size(); ++i) {
    write_source[i] = PatternByte(1000 + i / kSpan, i);
  }
  MemoryRegion write_source_mr =
      RegisterForTest(*contexts_[0], write_source, kLocalOnly);
  MemoryRegion write_target_mr =
      RegisterForTest(*contexts_[1], write_target, kRemoteWrite);
  const size_t big = client_->max_message_size() + 1;  // rendezvous
  std::vector<OpHandle> posted;
  std::map<OpHandle, bool> is_write;
  auto write = [&](size_t k) {
    const RdmaOp op{&write_source_mr, k * kSpan, kSpan,
                    write_target_mr.remote(), k * kSpan};
    absl::StatusOr<OpHandle> handle = client_->PostWrite({&op, 1});
    ASSERT_TRUE(handle.ok()) << handle.status();
    posted.push_back(*handle);
    is_write[*handle] = true;
  };
  // A send goes on the wire behind the WRITEs posted before it: while some
  // wait for the cap it is refused, and is posted again as they go out.
  size_t refused_behind_writes = 0;
  auto send = [&](uint64_t op, size_t length) {
    absl::StatusOr<OpHandle> handle = PostOp(op, length);
    while (absl::IsResourceExhausted(handle.status()) &&
           client_->async_ops_queued() > 0) {
      ++refused_behind_writes;
      ASSERT_NO_FATAL_FAILURE(Turn());
      handle = PostOp(op, length);
    }
    ASSERT_TRUE(handle.ok()) << handle.status();
    posted.push_back(*handle);
    is_write[*handle] = false;
  };
  // WRITEs past the 256 KiB cap wait in the connection; the send behind
  // them waits until they have all gone out, and ends after them.
  for (size_t k = 0; k < 6; ++k) ASSERT_NO_FATAL_FAILURE(write(k));
  ASSERT_GT(client_->async_ops_queued(), 0u);
  ASSERT_NO_FATAL_FAILURE(send(0, 64));
  EXPECT_GT(refused_behind_writes, 0u);
  ASSERT_NO_FATAL_FAILURE(send(1, big));
  // Behind the unread rendezvous message: a WRITE and a small send.
  ASSERT_NO_FATAL_FAILURE(write(6));
  ASSERT_NO_FATAL_FAILURE(send(2, 3000));
  // Nobody receives: everything before the rendezvous message ends, it
  // and what follows wait for the peer to read it.
  ASSERT_NO_FATAL_FAILURE(DriveUntil([&] { return ended_.size() >= 7; },
                                     /*receive=*/false));
  for (int i = 0; i < 20; ++i) ASSERT_NO_FATAL_FAILURE(Turn());
  EXPECT_EQ(ended_.size(), 7u);
  EXPECT_EQ(client_->async_ops_in_flight(), 3u);
  ASSERT_NO_FATAL_FAILURE(DriveUntil(
      [&] { return ended_.size() == posted.size() && received_ == 3; }));
  ASSERT_NO_FATAL_FAILURE(ExpectAllCompletedInOrder());
  EXPECT_EQ(order_, posted);
  for (const auto& [handle, c] : ended_) {
    EXPECT_EQ(c.is_write, is_write.at(handle));
    EXPECT_EQ(c.is_send, !is_write.at(handle));
  }
  EXPECT_EQ(std::memcmp(write_target.data(), write_source.data(), 7 * kSpan),
            0);
  E2E_ASSERT_OK(client_->Close(env().DeadlineIn(seconds(5))));
}

// The peer's host vanishes (every packet to its QP lost) with sends of
// every kind outstanding: each ends once, OUTCOME_UNKNOWN (a SEND is always
// posted), within the retry budget; those before it COMPLETED.
TEST_F(EngineSendTest, APeerLostEndsEachOutstandingSendOnce) {
  ASSERT_NO_FATAL_FAILURE(Start("cx7", sim::ProgressMode::kManual));
  const std::vector<size_t> sizes = MixedSizes(*client_, true);
  for (uint64_t op = 0; op < 4; ++op) {
    ASSERT_TRUE(PostOp(op, sizes[op]).ok());
  }
  ASSERT_NO_FATAL_FAILURE(DriveUntil([&] { return ended_.size() == 4; }));
  ASSERT_TRUE(
      fabric_->faults()
          .DropPackets(sim::FaultTarget::Qp(server_->qp()->qp_num), 1 << 30)
          .ok());
  const Deadline lost = env().Now();
  for (uint64_t op = 4; op < 4 + kWindow; ++op) {
    absl::StatusOr<OpHandle> handle = PostOp(op, sizes[op % sizes.size()]);
    ASSERT_TRUE(handle.ok()) << "op " << op << ": " << handle.status();
  }
  ASSERT_NO_FATAL_FAILURE(
      DriveUntil([&] { return ended_.size() == sent_.size(); }, false));
  EXPECT_LT(env().Now() - lost, seconds(10));
  size_t i = 0;
  for (const auto& [handle, c] : ended_) {
    if (i++ < 4) {
      EXPECT_EQ(c.outcome, OpOutcome::kCompleted) << c.status;
      continue;
    }
    EXPECT_EQ(c.outcome, OpOutcome::kOutcomeUnknown)
        << "handle " << handle << ": " << c.status;
    EXPECT_EQ(c.status.code(), absl::StatusCode::kUnavailable) << c.status;
  }
  EXPECT_EQ(client_->async_ops_in_flight(), 0u);
  EXPECT_EQ(client_->status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(PostOp(99, 1).status().code(), absl::StatusCode::kUnavailable);
  // Nothing more comes out, whatever the engine does later.
  for (int k = 0; k < 10; ++k) ASSERT_NO_FATAL_FAILURE(Turn());
  EXPECT_EQ(ended_.size(), sent_.size());
}

// The peer's process exits with a rendezvous message unread: the eager
// sends before it complete (its QP still acknowledges them), it and the
// send behind it end OUTCOME_UNKNOWN when the connection fails.
TEST_F(EngineSendTest, APeerExitingLeavesTheUnreadRendezvousUnknown) {
  ASSERT_NO_FATAL_FAILURE(Start("cx7", sim::ProgressMode::kManual));
  const size_t big = client_->max_message_size() + 1;
  ASSERT_TRUE(PostOp(0, 10).ok());
  ASSERT_TRUE(PostOp(1, 2000).ok());
  ASSERT_TRUE(PostOp(2, big).ok());
  ASSERT_TRUE(PostOp(3, 20).ok());
  ASSERT_NO_FATAL_FAILURE(
      DriveUntil([&] { return ended_.size() >= 2; }, false));
  // The request's completion came, the read does not: it waits, and the
  // send behind it with it.
  for (int i = 0; i < 20; ++i) ASSERT_NO_FATAL_FAILURE(Turn());
  EXPECT_EQ(ended_.size(), 2u);
  EXPECT_EQ(client_->async_ops_in_flight(), 2u);
  ConnectionTestPeer::SimulateProcessExit(*server_);
  ASSERT_NO_FATAL_FAILURE(
      DriveUntil([&] { return ended_.size() == 4; }, false));
  EXPECT_EQ(order_,
            (std::vector<OpHandle>{std::next(sent_.begin(), 0)->first,
                                   std::next(sent_.begin(), 1)->first,
                                   std::next(sent_.begin(), 2)->first,
                                   std::next(sent_.begin(), 3)->first}));
  EXPECT_EQ(ended_.at(order_[0]).outcome, OpOutcome::kCompleted);
  EXPECT_EQ(ended_.at(order_[1]).outcome, OpOutcome::kCompleted);
  EXPECT_EQ(ended_.at(order_[2]).outcome, OpOutcome::kOutcomeUnknown);
  EXPECT_EQ(ended_.at(order_[3]).outcome, OpOutcome::kOutcomeUnknown);
  EXPECT_EQ(ended_.at(order_[2]).status.code(), absl::StatusCode::kUnavailable)
      << ended_.at(order_[2]).status;
}

TEST_F(EngineSendTest, AnUnreadRendezvousPastItsDeadlineFailsTheConnection) {
  ASSERT_NO_FATAL_FAILURE(Start());
  const Deadline deadline = env().DeadlineIn(milliseconds(5));
  ASSERT_TRUE(PostOp(0, 100, deadline).ok());
  ASSERT_TRUE(PostOp(1, client_->max_message_size() + 1, deadline).ok());
  ASSERT_NO_FATAL_FAILURE(
      DriveUntil([&] { return ended_.size() == 2; }, false));
  EXPECT_EQ(ended_.at(order_[0]).outcome, OpOutcome::kCompleted);
  const Completion& late = ended_.at(order_[1]);
  EXPECT_EQ(late.outcome, OpOutcome::kOutcomeUnknown);
  EXPECT_EQ(late.status.code(), absl::StatusCode::kDeadlineExceeded)
      << late.status;
  EXPECT_NE(late.status.message().find("SEND (rendezvous)"), std::string::npos)
      << late.status;
  EXPECT_EQ(client_->status().code(), absl::StatusCode::kDeadlineExceeded);
}

TEST_F(EngineSendTest, BadCallsAreRefusedWithNothingPosted) {
  ASSERT_NO_FATAL_FAILURE(Start());
  EXPECT_EQ(
      client_->PostSendFrom(source_mr_, source_.size(), 1).status().code(),
      absl::StatusCode::kOutOfRange);
  EXPECT_EQ(client_->PostSendFrom(MemoryRegion(), 0, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  // A rendezvous message needs kRemoteRead on its region.
  std::vector<std::byte> local(2 * kSpan);
  MemoryRegion local_mr = RegisterForTest(*contexts_[0], local, kLocalOnly);
  EXPECT_EQ(client_->PostSendFrom(local_mr, 0, kSpan).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(client_->PostSendFrom(local_mr, 0, 64).ok());  // eager: fine
  EXPECT_EQ(client_->stats().messages_sent, 1u);

  // Without an engine.
  DialResult dial = Dial(*contexts_[0], *contexts_[1], ConnectionOptions{});
  ASSERT_TRUE(dial.client.ok()) << dial.client.status();
  absl::StatusOr<OpHandle> no_engine =
      (*dial.client)->PostSendFrom(source_mr_, 0, 64);
  EXPECT_EQ(no_engine.status().code(), absl::StatusCode::kFailedPrecondition)
      << no_engine.status();
  EXPECT_NE(no_engine.status().message().find("engine"), std::string::npos);
  ASSERT_NO_FATAL_FAILURE(
      DriveUntil([&] { return ended_.size() == 1; }, false));
  (*dial.client).reset();
  (*dial.server).reset();
  local_mr = MemoryRegion();
}

}  // namespace
}  // namespace rdma_transport
