// The Engine (transport/engine.h) on the simulator, in virtual time: many
// connections on one shared CQ driven by one thread, blocking calls on
// engine connections, asynchronous WRITE/READ with every byte checked, and a
// peer lost midway whose operations all end FAILED or OUTCOME_UNKNOWN while
// the other connections' complete.
#include "transport/engine.h"

#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "sim/fabric.h"
#include "sim/fault_injector.h"
#include "sim/sim_verbs.h"
#include "tests/connection_pair.h"
#include "tests/e2e_fixture.h"
#include "transport/connection.h"

namespace rdma_transport {
namespace {

using std::chrono::seconds;

class EngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fabric_ = std::make_unique<sim::Fabric>();
    verbs_ = std::make_unique<sim::SimVerbs>(fabric_.get());
    E2E_ASSERT_OK(OpenTwoSimContextsWithEngine(*fabric_, *verbs_, "cx7",
                                               devices_, contexts_, engine_));
  }

  void TearDown() override {
    clients_.clear();
    servers_.clear();
    engine_.reset();
    contexts_.clear();
    if (fabric_ != nullptr) {
      EXPECT_EQ(LeakReportText(*fabric_), "");
    }
  }

  // `n` pairs: clients on the engine, servers on their own CQs.
  void ConnectPairs(int n, ConnectionOptions options = {}) {
    ConnectionOptions client_options = options;
    client_options.engine = engine_.get();
    for (int i = 0; i < n; ++i) {
      DialResult dial = DialWith(*contexts_[0], *contexts_[1], client_options,
                                 options, ListenerOptions{});
      ASSERT_TRUE(dial.client.ok()) << dial.client.status();
      ASSERT_TRUE(dial.server.ok()) << dial.server.status();
      clients_.push_back(*std::move(dial.client));
      servers_.push_back(*std::move(dial.server));
    }
  }

  MemoryRegion Register(int side, std::vector<std::byte>& memory, int access) {
    absl::StatusOr<MemoryRegion> region =
        contexts_[side]->RegisterMemory(memory, access);
    EXPECT_TRUE(region.ok()) << region.status();
    return region.ok() ? *std::move(region) : MemoryRegion();
  }

  // Progresses the engine until `done()`, handing each completion to
  // `on_completion`; fails the test if nothing happens for 10 s (virtual).
  template <typename Done, typename OnCompletion>
  void Drive(Done done, OnCompletion on_completion) {
    while (true) {
      while (std::optional<Completion> c = engine_->NextCompletion()) {
        on_completion(*c);
      }
      if (done()) return;
      if (engine_->Progress() > 0) continue;
      const absl::Status waited = engine_->Wait(env().DeadlineIn(seconds(10)));
      ASSERT_TRUE(waited.ok()) << waited;
    }
  }

  Env& env() { return fabric_->env(); }

  std::unique_ptr<sim::Fabric> fabric_;
  std::unique_ptr<sim::SimVerbs> verbs_;
  std::vector<std::string> devices_;
  std::vector<std::unique_ptr<Context>> contexts_;
  std::unique_ptr<Engine> engine_;
  std::vector<std::unique_ptr<Connection>> clients_;
  std::vector<std::unique_ptr<Connection>> servers_;
};

TEST_F(EngineTest, ConnectionsShareTheEnginesCqAndBlockingCallsStillWork) {
  constexpr int kPairs = 8;
  ASSERT_NO_FATAL_FAILURE(ConnectPairs(kPairs));
  EXPECT_EQ(engine_->stats().connections, static_cast<uint32_t>(kPairs));
  for (const auto& client : clients_) {
    EXPECT_EQ(client->event_fd(), -1);  // the engine's fd serves it
  }
  // Round robin: every client sends, every server receives and answers,
  // every client receives; the clients' waits drive the shared CQ.
  std::vector<std::byte> message(512);
  std::vector<std::byte> buffer(4096);
  for (uint64_t seq = 0; seq < 200; ++seq) {
    for (int i = 0; i < kPairs; ++i) {
      const size_t length = MessageLength(i, seq, 4096);
      message.resize(length);
      FillMessage(i, seq, message);
      E2E_ASSERT_OK(clients_[i]->Send(message, env().DeadlineIn(seconds(5))));
    }
    for (int i = 0; i < kPairs; ++i) {
      absl::StatusOr<size_t> n =
          servers_[i]->Receive(buffer, env().DeadlineIn(seconds(5)));
      ASSERT_TRUE(n.ok()) << n.status();
      ASSERT_EQ(CheckMessage(i, seq, {buffer.data(), *n}), "");
      E2E_ASSERT_OK(servers_[i]->Send({buffer.data(), *n}));
    }
    for (int i = 0; i < kPairs; ++i) {
      absl::StatusOr<size_t> n =
          clients_[i]->Receive(buffer, env().DeadlineIn(seconds(5)));
      ASSERT_TRUE(n.ok()) << n.status();
      ASSERT_EQ(CheckMessage(i, seq, {buffer.data(), *n}), "");
    }
  }
  EXPECT_GT(engine_->stats().completions, 0u);
  EXPECT_EQ(engine_->stats().stale_completions, 0u);
  for (auto& client : clients_) E2E_ASSERT_OK(client->Close());
}

TEST_F(EngineTest, PostWriteWithoutAnEngineIsAPreconditionFailure) {
  DialResult dial = Dial(*contexts_[0], *contexts_[1], ConnectionOptions{});
  ASSERT_TRUE(dial.client.ok()) << dial.client.status();
  std::vector<std::byte> memory(64);
  MemoryRegion local = Register(0, memory, kLocalWrite);
  RdmaOp op{&local, 0, 8, local.remote(), 0};
  EXPECT_EQ((*dial.client)->PostWrite({&op, 1}).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

// One connection's memory: what the client writes from, the server's
// target, and where the client reads it back into.
struct Lane {
  std::vector<std::byte> source, target, readback;
  MemoryRegion source_mr, target_mr, readback_mr;
};

constexpr size_t kOpSpan = 512;

size_t OpLength(size_t lane, size_t op) {
  return 1 + (lane * 131 + op * 37) % kOpSpan;
}

// The async workload: `ops_per_lane` WRITEs then as many READs of the same
// ranges on each of `lanes` connections, posted in batches round robin.
// `before_post(lane, op)` may act (kill a peer) before an op is posted.
struct AsyncRun {
  std::map<OpHandle, std::pair<size_t, size_t>> ops;  // handle -> (lane, op)
  std::map<OpHandle, Completion> ended;
};

TEST_F(EngineTest, TenThousandAsyncWritesAndReadsOverSixteenConnections) {
  constexpr size_t kLanes = 16;
  constexpr size_t kOpsPerLane = 320;  // x2 (WRITE + READ) x16 = 10,240
  ASSERT_NO_FATAL_FAILURE(ConnectPairs(kLanes));
  std::vector<Lane> lanes(kLanes);
  for (size_t l = 0; l < kLanes; ++l) {
    Lane& lane = lanes[l];
    lane.source.resize(kOpsPerLane * kOpSpan);
    lane.target.assign(kOpsPerLane * kOpSpan, std::byte{0});
    lane.readback.assign(kOpsPerLane * kOpSpan, std::byte{0});
    for (size_t i = 0; i < lane.source.size(); ++i) {
      lane.source[i] = static_cast<std::byte>((i * 7 + l * 13 + 1) & 0xff);
    }
    lane.source_mr = Register(0, lane.source, kLocalOnly);
    lane.target_mr = Register(1, lane.target, kRemoteRead | kRemoteWrite);
    lane.readback_mr = Register(0, lane.readback, kLocalWrite);
  }
  AsyncRun run;
  for (int phase = 0; phase < 2; ++phase) {
    const bool write = phase == 0;
    std::vector<size_t> next(kLanes, 0);
    size_t posted = 0;
    size_t rejected = 0;
    while (posted < kLanes * kOpsPerLane) {
      for (size_t l = 0; l < kLanes; ++l) {
        Lane& lane = lanes[l];
        RdmaOp batch[16];
        size_t count = 0;
        for (; count < 16 && next[l] + count < kOpsPerLane; ++count) {
          const size_t op = next[l] + count;
          batch[count] = {write ? &lane.source_mr : &lane.readback_mr,
                          op * kOpSpan, OpLength(l, op),
                          lane.target_mr.remote(), op * kOpSpan};
        }
        if (count == 0) continue;
        absl::StatusOr<OpHandle> first =
            write ? clients_[l]->PostWrite({batch, count})
                  : clients_[l]->PostRead({batch, count});
        if (absl::IsResourceExhausted(first.status())) {
          ++rejected;
          continue;
        }
        ASSERT_TRUE(first.ok()) << first.status();
        for (size_t k = 0; k < count; ++k) {
          run.ops[*first + k] = {l, next[l] + k};
        }
        next[l] += count;
        posted += count;
      }
      // Back-pressure: progress until something ended.
      while (engine_->Progress() > 0) {
      }
      while (std::optional<Completion> c = engine_->NextCompletion()) {
        ASSERT_TRUE(run.ended.emplace(c->handle, *c).second);
      }
      if (rejected > 0) (void)engine_->Wait(env().DeadlineIn(seconds(1)));
    }
    ASSERT_NO_FATAL_FAILURE(
        Drive([&] { return run.ended.size() == run.ops.size(); },
              [&](const Completion& c) {
                ASSERT_TRUE(run.ended.emplace(c.handle, c).second);
              }));
  }
  ASSERT_EQ(run.ops.size(), 2 * kLanes * kOpsPerLane);
  for (const auto& [handle, c] : run.ended) {
    ASSERT_EQ(c.outcome, OpOutcome::kCompleted) << c.status;
    const auto [l, op] = run.ops.at(handle);
    EXPECT_EQ(c.connection, clients_[l].get());
    EXPECT_EQ(c.length, OpLength(l, op));
  }
  for (size_t l = 0; l < kLanes; ++l) {
    const Lane& lane = lanes[l];
    for (size_t op = 0; op < kOpsPerLane; ++op) {
      const size_t at = op * kOpSpan;
      const size_t length = OpLength(l, op);
      ASSERT_EQ(
          std::memcmp(lane.target.data() + at, lane.source.data() + at, length),
          0)
          << "lane " << l << " op " << op << " WRITE";
      ASSERT_EQ(std::memcmp(lane.readback.data() + at, lane.source.data() + at,
                            length),
                0)
          << "lane " << l << " op " << op << " READ";
    }
  }
  const EngineStats stats = engine_->stats();
  EXPECT_EQ(stats.ops_completed, 2 * kLanes * kOpsPerLane);
  EXPECT_EQ(stats.stale_completions, 0u);
  for (auto& client : clients_) EXPECT_EQ(client->async_ops_in_flight(), 0u);
}

TEST_F(EngineTest, APeerLostMidwayEndsEachOfItsOpsFailedOrUnknown) {
  constexpr size_t kLanes = 16;
  constexpr size_t kOpsPerLane = 64;
  constexpr size_t kVictim = 5;
  ASSERT_NO_FATAL_FAILURE(ConnectPairs(kLanes));
  std::vector<Lane> lanes(kLanes);
  for (size_t l = 0; l < kLanes; ++l) {
    Lane& lane = lanes[l];
    lane.source.assign(kOpsPerLane * kOpSpan, static_cast<std::byte>(l + 1));
    lane.target.assign(kOpsPerLane * kOpSpan, std::byte{0});
    lane.readback.assign(kOpsPerLane * kOpSpan, std::byte{0});
    lane.source_mr = Register(0, lane.source, kLocalOnly);
    lane.target_mr = Register(1, lane.target, kRemoteRead | kRemoteWrite);
    lane.readback_mr = Register(0, lane.readback, kLocalWrite);
  }
  AsyncRun run;
  auto post = [&](size_t l, size_t op, bool write) {
    Lane& lane = lanes[l];
    RdmaOp one = {write ? &lane.source_mr : &lane.readback_mr, op * kOpSpan,
                  OpLength(l, op), lane.target_mr.remote(), op * kOpSpan};
    absl::StatusOr<OpHandle> handle = write ? clients_[l]->PostWrite({&one, 1})
                                            : clients_[l]->PostRead({&one, 1});
    if (handle.ok()) run.ops[*handle] = {l, op};
    return handle.status();
  };
  // Half of each lane's WRITEs, then the victim's peer vanishes (every
  // packet to its QP lost), then the rest, and READs of everything on the
  // other lanes.
  for (size_t op = 0; op < kOpsPerLane / 2; ++op) {
    for (size_t l = 0; l < kLanes; ++l) E2E_ASSERT_OK(post(l, op, true));
  }
  ASSERT_TRUE(
      fabric_->faults()
          .DropPackets(sim::FaultTarget::Qp(servers_[kVictim]->qp()->qp_num),
                       1 << 30)
          .ok());
  const OpHandle handles_before_kill = run.ops.rbegin()->first + 1;
  // The victim's second half as one batch: its first op exhausts the retry
  // budget, the rest are flushed behind it.
  {
    Lane& lane = lanes[kVictim];
    std::vector<RdmaOp> batch;
    for (size_t op = kOpsPerLane / 2; op < kOpsPerLane; ++op) {
      batch.push_back({&lane.source_mr, op * kOpSpan, OpLength(kVictim, op),
                       lane.target_mr.remote(), op * kOpSpan});
    }
    absl::StatusOr<OpHandle> first = clients_[kVictim]->PostWrite(batch);
    ASSERT_TRUE(first.ok()) << first.status();
    for (size_t k = 0; k < batch.size(); ++k) {
      run.ops[*first + k] = {kVictim, kOpsPerLane / 2 + k};
    }
  }
  for (size_t op = kOpsPerLane / 2; op < kOpsPerLane; ++op) {
    for (size_t l = 0; l < kLanes; ++l) {
      if (l != kVictim) E2E_ASSERT_OK(post(l, op, true));
    }
    while (engine_->Progress() > 0) {
    }
  }
  ASSERT_NO_FATAL_FAILURE(Drive(
      [&] {
        return run.ended.size() == run.ops.size() &&
               clients_[kVictim]->async_ops_in_flight() == 0;
      },
      [&](const Completion& c) {
        ASSERT_TRUE(run.ended.emplace(c.handle, c).second) << "ended twice";
      }));
  // The failed connection refuses new work with its failure.
  EXPECT_EQ(post(kVictim, 0, false).code(), absl::StatusCode::kUnavailable);
  for (size_t l = 0; l < kLanes; ++l) {
    if (l == kVictim) continue;
    for (size_t op = 0; op < kOpsPerLane; ++op)
      E2E_ASSERT_OK(post(l, op, false));
  }
  ASSERT_NO_FATAL_FAILURE(Drive(
      [&] { return run.ended.size() == run.ops.size(); },
      [&](const Completion& c) {
        ASSERT_TRUE(run.ended.emplace(c.handle, c).second) << "ended twice";
      }));

  size_t victim_completed = 0, victim_failed = 0, victim_unknown = 0;
  for (const auto& [handle, c] : run.ended) {
    const auto [l, op] = run.ops.at(handle);
    if (l != kVictim) {
      ASSERT_EQ(c.outcome, OpOutcome::kCompleted)
          << "lane " << l << " op " << op << ": " << c.status;
      continue;
    }
    switch (c.outcome) {
      case OpOutcome::kCompleted:
        // Only what went out before the peer was lost.
        EXPECT_LT(handle, handles_before_kill);
        ++victim_completed;
        break;
      case OpOutcome::kFailed:
        ++victim_failed;
        break;
      case OpOutcome::kOutcomeUnknown:
        EXPECT_TRUE(c.is_write);
        EXPECT_EQ(c.status.code(), absl::StatusCode::kUnavailable) << c.status;
        ++victim_unknown;
        break;
    }
  }
  // Every victim op ended once (none lost, none pending); those posted
  // after the peer was lost ended FAILED or OUTCOME_UNKNOWN (above).
  EXPECT_EQ(victim_completed + victim_failed + victim_unknown, kOpsPerLane);
  // On the simulator's immediate fabric the first half completed when posted.
  EXPECT_EQ(victim_completed, kOpsPerLane / 2);
  EXPECT_EQ(victim_unknown, kOpsPerLane / 2);
  EXPECT_EQ(clients_[kVictim]->async_ops_in_flight(), 0u);
  EXPECT_EQ(clients_[kVictim]->status().code(), absl::StatusCode::kUnavailable);
  for (size_t l = 0; l < kLanes; ++l) {
    if (l == kVictim) continue;
    const Lane& lane = lanes[l];
    for (size_t op = 0; op < kOpsPerLane; ++op) {
      const size_t at = op * kOpSpan;
      ASSERT_EQ(std::memcmp(lane.readback.data() + at, lane.source.data() + at,
                            OpLength(l, op)),
                0)
          << "lane " << l << " op " << op;
    }
  }
}

}  // namespace
}  // namespace rdma_transport
