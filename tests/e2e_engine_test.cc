// The end-to-end suite's cases for the Engine and the asynchronous API
// (transport/engine.h), in the same binaries as e2e_test.cc: on the
// simulator and over libibverbs (Soft-RoCE in CI's VM). Several connections
// on one engine with blocking calls, PostWrite()/PostRead() batches checked
// byte for byte, the engine's fd in the caller's epoll set, a dead peer's
// operations each ended once, back-pressure from a full send queue, and a
// batch's deadline failing a connection to a peer that stopped answering,
// and one engine over both devices.
// Every wait is bounded by a deadline from the backend's clock (virtual on
// the simulator), of 30 s without progress: enough for a loaded VM, and it
// grows with the work since each completion restarts it.
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "sim/fabric.h"
#include "tests/connection_pair.h"
#include "tests/e2e_fixture.h"
#include "tests/register_for_test.h"
#include "transport/connection.h"
#include "transport/engine.h"
#include "verbs_shim/verbs_error.h"

namespace rdma_transport {
namespace {

using std::chrono::seconds;

// One connection's memory for the asynchronous cases.
struct Lane {
  std::vector<std::byte> source, target, readback;
  MemoryRegion source_mr, target_mr, readback_mr;
};
constexpr size_t kSpan = 4096;  // op k: up to kSpan bytes at k * kSpan

class EngineEndToEndTest : public EndToEndTest {
 protected:
  void TearDown() override {
    pairs_.clear();  // connections before their engine
    engine_.reset();
    EndToEndTest::TearDown();
  }

  // An engine on the client's context and `n` pairs whose client side is on
  // it (the server sides on CQs of their own).
  void ConnectOnEngine(int n, ConnectionOptions options = {}) {
    OpenContexts();
    absl::StatusOr<std::unique_ptr<Engine>> engine =
        Engine::Create(client_context());
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = *std::move(engine);
    ConnectionOptions client_options = options;
    client_options.engine = engine_.get();
    for (int i = 0; i < n; ++i) {
      absl::StatusOr<ConnectionPair> pair =
          ConnectPair(client_options, options, TestListenerOptions());
      ASSERT_TRUE(pair.ok()) << pair.status();
      pairs_.push_back(*std::move(pair));
    }
  }

  // Takes every finished operation, progressing and waiting, until
  // `ended` has `count` entries; each handle must end once. Fails when no
  // operation ends for 30 s (other completions, keepalives, do not count).
  void DriveUntil(std::map<OpHandle, Completion>& ended, size_t count) {
    Deadline last_end = env().Now();
    while (true) {
      while (std::optional<Completion> c = engine_->NextCompletion()) {
        ASSERT_TRUE(ended.emplace(c->handle, *c).second)
            << "handle " << c->handle << " ended twice";
        last_end = env().Now();
      }
      if (ended.size() >= count) return;
      ASSERT_LT(env().Now() - last_end, seconds(30))
          << count - ended.size() << " op(s) not ended";
      if (engine_->Progress() > 0) continue;
      const absl::Status waited = engine_->Wait(last_end + seconds(30));
      ASSERT_TRUE(waited.ok() || absl::IsDeadlineExceeded(waited)) << waited;
    }
  }

  // A lane of `ops` spans: a source on the client filled with
  // FillMessage(stream, op), a target the peer may read and write, and a
  // readback on the client for READs. Held by pointer: the regions cover
  // the vectors, which must not move.
  std::unique_ptr<Lane> MakeLane(size_t ops, uint64_t stream) {
    auto b = std::make_unique<Lane>();
    b->source.resize(ops * kSpan);
    b->target.resize(ops * kSpan);
    b->readback.resize(ops * kSpan);
    for (size_t op = 0; op < ops; ++op) {
      FillMessage(stream, op, {b->source.data() + op * kSpan, kSpan});
    }
    b->source_mr = RegisterForTest(client_context(), b->source, kLocalOnly);
    b->target_mr = RegisterForTest(server_context(), b->target,
                                   kRemoteRead | kRemoteWrite);
    b->readback_mr =
        RegisterForTest(client_context(), b->readback, kLocalWrite);
    return b;
  }

  std::unique_ptr<Engine> engine_;
  std::vector<ConnectionPair> pairs_;
};

// One engine over both devices (engine.h, "Several devices"): a connection
// from each device to the other with its dialling end on the engine (the
// accepting ends on CQs of their own), driven by one loop: the peers'
// messages found through ReadyConnection(), answers sent back, then WRITEs
// and READs on both, checked byte for byte. Over rxe, two CQs of two
// devices behind one fd.
TEST_F(EngineEndToEndTest, OneEngineDrivesConnectionsOnBothDevices) {
  OpenContexts();
  absl::StatusOr<std::unique_ptr<Engine>> engine =
      Engine::Create({&client_context(), &server_context()});
  ASSERT_TRUE(engine.ok()) << engine.status();
  engine_ = *std::move(engine);
  ConnectionOptions on_engine;
  on_engine.engine = engine_.get();
  // pairs_[d]: dialled from device d (0: the client's context).
  Context* devices[2] = {&client_context(), &server_context()};
  for (int d = 0; d < 2; ++d) {
    DialResult dial =
        DialWith(*devices[d], *devices[1 - d], on_engine, ConnectionOptions{},
                 TestListenerOptions(), ListenAddress());
    ASSERT_TRUE(dial.client.ok()) << dial.client.status();
    ASSERT_TRUE(dial.server.ok()) << dial.server.status();
    pairs_.push_back({*std::move(dial.client), *std::move(dial.server)});
  }
  EXPECT_EQ(engine_->stats().devices, 2u);
  EXPECT_EQ(engine_->stats().connections, 2u);

  std::vector<std::byte> message(4096);
  std::vector<std::byte> buffer(4096);
  const int messages = Scaled(200);
  // The first messages: no more than the engine ends' credits (16) before
  // they receive; each answer below lets the next one go.
  const int first = std::min(messages, 8);
  for (int d = 0; d < 2; ++d) {
    for (int seq = 0; seq < first; ++seq) {
      const size_t length = MessageLength(d, seq, 4096);
      FillMessage(d, seq, {message.data(), length});
      E2E_ASSERT_OK(
          pairs_[d].server->Send({message.data(), length}, In(seconds(30))));
    }
  }
  int received[2] = {0, 0};
  int sent[2] = {first, first};
  Deadline last = env().Now();
  while (received[0] < messages || received[1] < messages) {
    ASSERT_LT(env().Now() - last, seconds(30))
        << received[0] << " and " << received[1] << " of " << messages;
    if (engine_->Progress() == 0 && engine_->connections_ready() == 0) {
      const absl::Status waited = engine_->Wait(last + seconds(30));
      ASSERT_TRUE(waited.ok() || absl::IsDeadlineExceeded(waited)) << waited;
    }
    while (Connection* ready = engine_->ReadyConnection()) {
      const int d = ready == pairs_[0].client.get()   ? 0
                    : ready == pairs_[1].client.get() ? 1
                                                      : -1;
      ASSERT_GE(d, 0) << "a connection not dialled here is ready";
      absl::StatusOr<size_t> n = ready->Receive(buffer, kNoWait);
      ASSERT_TRUE(n.ok()) << n.status();
      ASSERT_EQ(CheckMessage(d, received[d], {buffer.data(), *n}), "")
          << "device " << d << ", message " << received[d];
      ++received[d];
      last = env().Now();
      // Its answer, and the peer's next message (the peer's own CQ).
      E2E_ASSERT_OK(ready->Send({buffer.data(), *n}, In(seconds(30))));
      absl::StatusOr<size_t> echo =
          pairs_[d].server->Receive(message, In(seconds(30)));
      ASSERT_TRUE(echo.ok()) << echo.status();
      ASSERT_EQ(CheckMessage(d, received[d] - 1, {message.data(), *echo}), "");
      if (sent[d] < messages) {
        const size_t length = MessageLength(d, sent[d], 4096);
        FillMessage(d, sent[d], {message.data(), length});
        E2E_ASSERT_OK(
            pairs_[d].server->Send({message.data(), length}, In(seconds(30))));
        ++sent[d];
      }
    }
  }

  // WRITEs, then READs of what was written, from each engine end to the
  // memory of its peer on the other device.
  constexpr size_t kOps = 16;
  std::vector<std::byte> source[2], target[2], readback[2];
  MemoryRegion source_mr[2], target_mr[2], readback_mr[2];
  for (int d = 0; d < 2; ++d) {
    source[d].resize(kOps * kSpan);
    target[d].assign(kOps * kSpan, std::byte{0});
    readback[d].assign(kOps * kSpan, std::byte{0});
    for (size_t op = 0; op < kOps; ++op) {
      FillMessage(100 + d, op, {source[d].data() + op * kSpan, kSpan});
    }
    source_mr[d] = RegisterForTest(*devices[d], source[d], kLocalOnly);
    target_mr[d] =
        RegisterForTest(*devices[1 - d], target[d], kRemoteRead | kRemoteWrite);
    readback_mr[d] = RegisterForTest(*devices[d], readback[d], kLocalWrite);
  }
  for (bool write : {true, false}) {
    std::map<OpHandle, Completion> ended;
    std::map<OpHandle, int> posted;
    for (int d = 0; d < 2; ++d) {
      std::vector<RdmaOp> ops;
      for (size_t op = 0; op < kOps; ++op) {
        ops.push_back({write ? &source_mr[d] : &readback_mr[d], op * kSpan,
                       kSpan, target_mr[d].remote(), op * kSpan});
      }
      absl::StatusOr<OpHandle> first = write ? pairs_[d].client->PostWrite(ops)
                                             : pairs_[d].client->PostRead(ops);
      ASSERT_TRUE(first.ok()) << first.status();
      for (size_t op = 0; op < kOps; ++op) posted[*first + op] = d;
    }
    ASSERT_NO_FATAL_FAILURE(DriveUntil(ended, posted.size()));
    for (const auto& [handle, done] : ended) {
      ASSERT_EQ(posted.count(handle), 1u) << "op " << handle;
      EXPECT_EQ(done.outcome, OpOutcome::kCompleted) << done.status;
      EXPECT_EQ(done.connection, pairs_[posted[handle]].client.get());
    }
  }
  for (int d = 0; d < 2; ++d) {
    EXPECT_EQ(target[d], source[d]) << "device " << d;
    EXPECT_EQ(readback[d], source[d]) << "device " << d;
  }
}

TEST_F(EngineEndToEndTest, SeveralConnectionsOnOneEngineSendAndReceive) {
  constexpr int kPairs = 4;
  ASSERT_NO_FATAL_FAILURE(ConnectOnEngine(kPairs));
  EXPECT_EQ(engine_->stats().connections, static_cast<uint32_t>(kPairs));
  std::vector<std::byte> message(4096);
  std::vector<std::byte> buffer(4096);
  const int rounds = Scaled(500);
  for (int seq = 0; seq < rounds; ++seq) {
    for (int i = 0; i < kPairs; ++i) {
      const size_t length = MessageLength(i, seq, 4096);
      FillMessage(i, seq, {message.data(), length});
      E2E_ASSERT_OK(
          pairs_[i].client->Send({message.data(), length}, In(seconds(30))));
    }
    for (int i = 0; i < kPairs; ++i) {
      absl::StatusOr<size_t> n =
          pairs_[i].server->Receive(buffer, In(seconds(30)));
      ASSERT_TRUE(n.ok()) << n.status();
      ASSERT_EQ(CheckMessage(i, seq, {buffer.data(), *n}), "");
      E2E_ASSERT_OK(
          pairs_[i].server->Send({buffer.data(), *n}, In(seconds(30))));
    }
    for (int i = 0; i < kPairs; ++i) {
      absl::StatusOr<size_t> n =
          pairs_[i].client->Receive(buffer, In(seconds(30)));
      ASSERT_TRUE(n.ok()) << n.status();
      ASSERT_EQ(CheckMessage(i, seq, {buffer.data(), *n}), "");
    }
  }
  const EngineStats stats = engine_->stats();
  // The clients' completions (a receive each at least) went through the
  // shared CQ, none astray.
  EXPECT_GE(stats.completions, static_cast<uint64_t>(kPairs * rounds));
  EXPECT_EQ(stats.stale_completions, 0u);
  for (ConnectionPair& pair : pairs_) {
    EXPECT_EQ(pair.client->stats().messages_received,
              static_cast<uint64_t>(rounds));
    E2E_ASSERT_OK(pair.client->Close(In(seconds(30))));
  }
}

size_t OpLength(size_t lane, size_t op) {
  return MessageLength(100 + lane, op, kSpan - 1) + 1;
}

TEST_F(EngineEndToEndTest, AsyncWriteAndReadBatchesAreByteExact) {
  constexpr size_t kPairs = 4;
  constexpr size_t kBatch = 8;
  // At most this many ops of a lane in flight: 4 lanes x 16 x 4 KiB stays
  // within the 256 KiB Soft-RoCE keeps in flight (connection.h).
  constexpr size_t kWindow = 16;
  const size_t ops = static_cast<size_t>(Scaled(2048)) / kBatch * kBatch +
                     kBatch;  // a whole number of batches
  ASSERT_NO_FATAL_FAILURE(ConnectOnEngine(kPairs));
  std::vector<std::unique_ptr<Lane>> lanes;
  for (size_t l = 0; l < kPairs; ++l) lanes.push_back(MakeLane(ops, 100 + l));
  std::map<OpHandle, Completion> ended;
  std::map<OpHandle, std::pair<size_t, size_t>> posted;  // (lane, op)
  for (const bool write : {true, false}) {
    std::vector<size_t> next(kPairs, 0);
    std::vector<size_t> in_flight_base(kPairs, 0);
    size_t done = 0;
    while (done < kPairs) {
      done = 0;
      for (size_t l = 0; l < kPairs; ++l) {
        if (next[l] == ops) {
          ++done;
          continue;
        }
        if (pairs_[l].client->async_ops_in_flight() + kBatch > kWindow) {
          continue;
        }
        Lane& lane = *lanes[l];
        RdmaOp batch[kBatch];
        for (size_t k = 0; k < kBatch; ++k) {
          const size_t op = next[l] + k;
          batch[k] = {write ? &lane.source_mr : &lane.readback_mr, op * kSpan,
                      OpLength(l, op), lane.target_mr.remote(), op * kSpan};
        }
        absl::StatusOr<OpHandle> first =
            write ? pairs_[l].client->PostWrite(batch)
                  : pairs_[l].client->PostRead(batch);
        ASSERT_TRUE(first.ok()) << "lane " << l << ": " << first.status();
        for (size_t k = 0; k < kBatch; ++k) {
          posted[*first + k] = {l, next[l] + k};
        }
        next[l] += kBatch;
      }
      // Something must end before the windows open again.
      const size_t want = std::min(posted.size(), ended.size() + 1);
      ASSERT_NO_FATAL_FAILURE(DriveUntil(ended, want));
    }
    // WRITEs all done before the READs of the same ranges.
    ASSERT_NO_FATAL_FAILURE(DriveUntil(ended, posted.size()));
  }
  ASSERT_EQ(ended.size(), 2 * kPairs * ops);
  for (const auto& [handle, c] : ended) {
    const auto [l, op] = posted.at(handle);
    ASSERT_EQ(c.outcome, OpOutcome::kCompleted)
        << "lane " << l << " op " << op << ": " << c.status;
    ASSERT_EQ(c.connection, pairs_[l].client.get());
    ASSERT_EQ(c.length, OpLength(l, op));
  }
  for (size_t l = 0; l < kPairs; ++l) {
    const Lane& lane = *lanes[l];
    for (size_t op = 0; op < ops; ++op) {
      const size_t at = op * kSpan;
      ASSERT_EQ(std::memcmp(lane.target.data() + at, lane.source.data() + at,
                            OpLength(l, op)),
                0)
          << "lane " << l << " WRITE " << op;
      ASSERT_EQ(std::memcmp(lane.readback.data() + at, lane.source.data() + at,
                            OpLength(l, op)),
                0)
          << "lane " << l << " READ " << op;
    }
    EXPECT_EQ(pairs_[l].client->stats().rdma_writes, ops);
    EXPECT_EQ(pairs_[l].client->stats().rdma_reads, ops);
  }
  EXPECT_EQ(engine_->stats().ops_completed, 2 * kPairs * ops);
}

TEST_F(EngineEndToEndTest, EngineFdInTheCallersEpollSet) {
  ASSERT_NO_FATAL_FAILURE(ConnectOnEngine(1));
  Connection& client = *pairs_[0].client;
  std::vector<std::byte> source(kSpan), target(kSpan), readback(kSpan);
  FillMessage(31, 0, source);
  MemoryRegion source_mr =
      RegisterForTest(client_context(), source, kLocalOnly);
  MemoryRegion target_mr =
      RegisterForTest(server_context(), target, kRemoteRead | kRemoteWrite);
  MemoryRegion readback_mr =
      RegisterForTest(client_context(), readback, kLocalWrite);
  const int epoll = epoll_create1(EPOLL_CLOEXEC);
  ASSERT_GE(epoll, 0);
  epoll_event event = {};
  event.events = EPOLLIN;
  ASSERT_EQ(epoll_ctl(epoll, EPOLL_CTL_ADD, engine_->fd(), &event), 0);
  // The simulator raises the completion event inside the post; real NICs
  // within the round trip.
  const int timeout_ms = backend().fabric() != nullptr ? 0 : 30000;
  const int rounds = Scaled(100);
  for (int i = 0; i < rounds; ++i) {
    // Nothing in flight: a wait of zero arms the CQ and finds nothing, and
    // the fd is not readable.
    EXPECT_TRUE(absl::IsDeadlineExceeded(engine_->Wait(env().Now())));
    epoll_event ready = {};
    ASSERT_EQ(epoll_wait(epoll, &ready, 1, 0), 0) << "round " << i;
    const bool write = i % 2 == 0;
    const size_t length = OpLength(0, i);
    RdmaOp op = {write ? &source_mr : &readback_mr, 0, length,
                 target_mr.remote(), 0};
    absl::StatusOr<OpHandle> handle =
        write ? client.PostWrite({&op, 1}) : client.PostRead({&op, 1});
    ASSERT_TRUE(handle.ok()) << handle.status();
    // The fd says when to look.
    ASSERT_EQ(epoll_wait(epoll, &ready, 1, timeout_ms), 1)
        << "round " << i << ": the engine's fd never became readable";
    std::optional<Completion> done;
    for (int turn = 0; turn < 1000000 && !done; ++turn) {
      engine_->Progress();
      done = engine_->NextCompletion();
    }
    ASSERT_TRUE(done.has_value()) << "readable, yet no completion";
    EXPECT_EQ(done->handle, *handle);
    ASSERT_EQ(done->outcome, OpOutcome::kCompleted) << done->status;
    ASSERT_EQ(std::memcmp(write ? target.data() : readback.data(),
                          source.data(), length),
              0)
        << "round " << i;
  }
  ::close(epoll);
}

TEST_F(EngineEndToEndTest, APeersDeathEndsEachOfItsOpsOnceFailedOrUnknown) {
  ASSERT_NO_FATAL_FAILURE(ConnectOnEngine(1));
  Connection& client = *pairs_[0].client;
  constexpr size_t kOps = 64;
  constexpr size_t kBatch = 8;
  std::unique_ptr<Lane> lane = MakeLane(kOps, 41);
  auto& [source, target, readback, source_mr, target_mr, readback_mr] = *lane;
  std::map<OpHandle, Completion> ended;
  std::map<OpHandle, bool> posted;  // handle -> posted after the kill
  auto post = [&](size_t first_op, bool write, bool after_kill) {
    RdmaOp batch[kBatch];
    for (size_t k = 0; k < kBatch; ++k) {
      const size_t at = (first_op + k) * kSpan;
      batch[k] = {write ? &source_mr : &readback_mr, at,
                  OpLength(0, first_op + k), target_mr.remote(), at};
    }
    absl::StatusOr<OpHandle> first =
        write ? client.PostWrite(batch) : client.PostRead(batch);
    if (first.ok()) {
      for (size_t k = 0; k < kBatch; ++k) posted[*first + k] = after_kill;
    }
    return first.status();
  };
  // Half the ranges written and read back while the peer lives.
  for (size_t op = 0; op < kOps / 2; op += kBatch) {
    E2E_ASSERT_OK(post(op, true, false));
  }
  ASSERT_NO_FATAL_FAILURE(DriveUntil(ended, posted.size()));
  for (size_t op = 0; op < kOps / 2; op += kBatch) {
    E2E_ASSERT_OK(post(op, false, false));
  }
  // The peer vanishes with these in flight (as far as a fast NIC lets them
  // be), and more are posted before the engine has noticed.
  E2E_ASSERT_OK(backend().KillPeer(*pairs_[0].server));
  const Deadline killed = env().Now();
  absl::Status refused;
  for (size_t op = kOps / 2; op < kOps && refused.ok(); op += kBatch) {
    refused = post(op, (op / kBatch) % 2 == 0, true);
  }
  ASSERT_NO_FATAL_FAILURE(DriveUntil(ended, posted.size()));
  // Noticed within the retry budget or the completion watchdog, not hung.
  EXPECT_LT(env().Now() - killed, seconds(30));
  EXPECT_EQ(client.async_ops_in_flight(), 0u);
  EXPECT_EQ(client.status().code(), absl::StatusCode::kUnavailable)
      << client.status();
  EXPECT_EQ(post(0, true, true).code(), absl::StatusCode::kUnavailable);
  if (!refused.ok()) {
    EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable) << refused;
  }
  size_t completed = 0, failed = 0, unknown = 0;
  bool failure_seen = false;
  for (const auto& [handle, c] : ended) {
    const bool after_kill = posted.at(handle);
    switch (c.outcome) {
      case OpOutcome::kCompleted:
        // In posting order: nothing completes after one that did not.
        EXPECT_FALSE(failure_seen) << "handle " << handle;
        EXPECT_FALSE(after_kill) << "handle " << handle << " reached a dead "
                                 << "peer";
        ++completed;
        continue;
      case OpOutcome::kFailed:
        ++failed;
        break;
      case OpOutcome::kOutcomeUnknown:
        // Only a WRITE may have changed the peer's memory unseen.
        EXPECT_TRUE(c.is_write) << "handle " << handle;
        ++unknown;
        break;
    }
    failure_seen = true;
    EXPECT_EQ(c.status.code(), absl::StatusCode::kUnavailable) << c.status;
  }
  EXPECT_EQ(completed + failed + unknown, posted.size());
  EXPECT_GE(completed, kOps / 2);  // the first WRITEs, before the kill
  EXPECT_GT(failed + unknown, 0u);
  EXPECT_EQ(engine_->stats().ops_failed, failed);
  EXPECT_EQ(engine_->stats().ops_outcome_unknown, unknown);
  // What completed before the kill did land.
  for (size_t op = 0; op < kOps / 2; ++op) {
    ASSERT_EQ(std::memcmp(target.data() + op * kSpan,
                          source.data() + op * kSpan, OpLength(0, op)),
              0)
        << "WRITE " << op;
  }
}

TEST_F(EngineEndToEndTest, AFullSendQueueRefusesPostsWithResourceExhausted) {
  ConnectionOptions options;
  options.send_slots = 8;
  options.max_rdma_batch = 8;
  ASSERT_NO_FATAL_FAILURE(ConnectOnEngine(1, options));
  Connection& client = *pairs_[0].client;
  constexpr size_t kMaxOps = 1024;
  std::vector<std::byte> source(kMaxOps * 64), target(kMaxOps * 64);
  FillMessage(51, 0, source);
  MemoryRegion source_mr =
      RegisterForTest(client_context(), source, kLocalOnly);
  MemoryRegion target_mr =
      RegisterForTest(server_context(), target, kRemoteWrite);
  std::map<OpHandle, Completion> ended;
  std::map<OpHandle, size_t> posted;  // handle -> op
  auto post_one = [&](size_t op) {
    RdmaOp one = {&source_mr, op * 64, 64, target_mr.remote(), op * 64};
    absl::StatusOr<OpHandle> handle = client.PostWrite({&one, 1});
    if (handle.ok()) posted[*handle] = op;
    return handle.status();
  };
  // Nobody drives the engine: completions stay on the CQ and the send
  // queue fills, whatever the NIC has done meanwhile.
  absl::Status refused;
  size_t accepted = 0;
  while (accepted < kMaxOps && (refused = post_one(accepted)).ok()) ++accepted;
  ASSERT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
  EXPECT_NE(refused.message().find("send queue"), std::string::npos) << refused;
  // The send queue is send_slots + max_rdma_batch + a few: far below 1024.
  EXPECT_GE(accepted, 8u);
  EXPECT_LE(accepted, 32u);
  EXPECT_EQ(client.async_ops_in_flight(), accepted);
  EXPECT_TRUE(client.status().ok()) << client.status();  // only back-pressure
  // Refused again while nothing was taken; then the engine makes room.
  EXPECT_EQ(post_one(accepted).code(), absl::StatusCode::kResourceExhausted);
  ASSERT_NO_FATAL_FAILURE(DriveUntil(ended, posted.size()));
  E2E_ASSERT_OK(post_one(accepted));
  // Then more than a queue's worth, posting again after each refusal.
  size_t next = accepted + 1;
  size_t refusals = 0;
  while (next < 4 * accepted) {
    absl::Status status = post_one(next);
    if (absl::IsResourceExhausted(status)) {
      ++refusals;
      ASSERT_NO_FATAL_FAILURE(DriveUntil(ended, ended.size() + 1));
      continue;
    }
    E2E_ASSERT_OK(status);
    ++next;
  }
  ASSERT_NO_FATAL_FAILURE(DriveUntil(ended, posted.size()));
  EXPECT_GT(refusals, 0u);
  EXPECT_EQ(posted.size(), next);
  for (const auto& [handle, c] : ended) {
    ASSERT_EQ(c.outcome, OpOutcome::kCompleted) << c.status;
    const size_t op = posted.at(handle);
    ASSERT_EQ(std::memcmp(target.data() + op * 64, source.data() + op * 64, 64),
              0)
        << "op " << op;
  }
}

// Per-batch deadlines (engine.h, "Deadlines") over a peer that stops
// answering: a batch due in 100 ms fails its connection with
// kDeadlineExceeded naming its first overdue handle, well before the QP's
// retry budget (4.096 us x 2^14 x 8 = 0.54 s by default; Soft-RoCE's
// completion watchdog, 2 s) could, and every op in flight ends once:
// WRITEs OUTCOME_UNKNOWN, READs FAILED.
TEST_F(EngineEndToEndTest, AnOverdueBatchFailsItsConnectionBeforeTheRetries) {
  ASSERT_NO_FATAL_FAILURE(ConnectOnEngine(1));
  if (sim::Fabric* fabric = backend().fabric()) {
    // In kImmediate a post runs the fabric to quiescence, retries to a dead
    // peer included, before the engine could look at a deadline; a NIC
    // works while the caller waits, as kManual has it.
    fabric->set_progress_mode(sim::ProgressMode::kManual);
  }
  Connection& client = *pairs_[0].client;
  constexpr size_t kOps = 16;
  std::unique_ptr<Lane> lane = MakeLane(kOps, 61);
  auto& [source, target, readback, source_mr, target_mr, readback_mr] = *lane;
  auto batch_of = [&](size_t first, bool write) {
    std::vector<RdmaOp> batch;
    for (size_t op = first; op < first + 4; ++op) {
      batch.push_back({write ? &source_mr : &readback_mr, op * kSpan,
                       OpLength(0, op), target_mr.remote(), op * kSpan});
    }
    return batch;
  };
  std::map<OpHandle, Completion> ended;
  // A batch with a deadline that is met: nothing happens to it.
  absl::StatusOr<OpHandle> in_time =
      client.PostWrite(batch_of(0, true), env().DeadlineIn(seconds(30)));
  E2E_ASSERT_OK(in_time.status());
  ASSERT_NO_FATAL_FAILURE(DriveUntil(ended, 4));
  for (const auto& [handle, c] : ended) {
    ASSERT_EQ(c.outcome, OpOutcome::kCompleted) << c.status;
  }
  E2E_ASSERT_OK(backend().KillPeer(*pairs_[0].server));
  const Deadline posted_at = env().Now();
  const Deadline due = posted_at + std::chrono::milliseconds(100);
  absl::StatusOr<OpHandle> writes = client.PostWrite(batch_of(4, true), due);
  E2E_ASSERT_OK(writes.status());
  absl::StatusOr<OpHandle> reads = client.PostRead(batch_of(8, false), due);
  E2E_ASSERT_OK(reads.status());
  ASSERT_NO_FATAL_FAILURE(DriveUntil(ended, 12));
  const Deadline noticed = env().Now();
  EXPECT_EQ(client.status().code(), absl::StatusCode::kDeadlineExceeded)
      << client.status();
  const std::string named = absl::StrCat("handle ", *writes, ",");
  EXPECT_NE(client.status().message().find(named), std::string::npos)
      << client.status();
  // At the deadline, not at the end of the retries: well inside 0.54 s
  // even on a loaded TCG guest (the engine's Wait() wakes for it).
  EXPECT_GE(noticed, due);
  EXPECT_LT(noticed - posted_at, std::chrono::milliseconds(450));
  for (OpHandle h = *writes; h < *reads + 4; ++h) {
    const Completion& c = ended.at(h);
    EXPECT_EQ(c.status.code(), absl::StatusCode::kDeadlineExceeded)
        << "handle " << h << ": " << c.status;
    EXPECT_EQ(c.outcome,
              c.is_write ? OpOutcome::kOutcomeUnknown : OpOutcome::kFailed)
        << "handle " << h;
  }
  EXPECT_EQ(client.async_ops_in_flight(), 0u);
  EXPECT_EQ(client.PostWrite(batch_of(12, true)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
}

}  // namespace
}  // namespace rdma_transport
