// The Engine (transport/engine.h) on the simulator, in virtual time: many
// connections on one shared CQ driven by one thread, blocking calls on
// engine connections, asynchronous WRITE/READ with every byte checked, and a
// peer lost midway whose operations all end FAILED or OUTCOME_UNKNOWN while
// the other connections' complete.
#include "transport/engine.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
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
#include "tests/connection_test_peer.h"
#include "tests/e2e_fixture.h"
#include "tests/engine_fixture.h"
#include "transport/connection.h"

namespace rdma_transport {
namespace {

using std::chrono::seconds;

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

// The fabric in kManual: a post only queues work on the simulated NIC, and
// packets move while the engine waits (or the test advances the clock), so
// operations are really in flight when a peer dies.
class EngineInFlightTest : public EngineTest {
 protected:
  EngineInFlightTest() : EngineTest(sim::ProgressMode::kManual) {}

  enum class Death {
    // The peer's process is killed: the kernel closes its setup stream (EOF
    // without the goodbye byte) and its QP stops answering.
    kProcessExit,
    // The peer's host vanishes: its QP stops answering, nothing else; the
    // retry budget runs out.
    kHostVanished,
  };
  void KillOnePeerMidway(Death death);
};

// Lane op u (0 <= u < 2 x 320), in batches of kBatch alternately
// WRITEs and READs): WRITE k moves source[k] to the server's target[k],
// READ k the server's remote_source[k] to readback[k].
constexpr size_t kBatch = 8;
struct PlannedOp {
  bool is_write = false;
  size_t index = 0;  // k
};
PlannedOp Plan(size_t u) {
  return {(u / kBatch) % 2 == 0, (u / (2 * kBatch)) * kBatch + u % kBatch};
}

void EngineInFlightTest::KillOnePeerMidway(Death death) {
  constexpr size_t kLanes = 16;
  constexpr size_t kIndexes = 320;  // WRITEs, and READs, per lane
  constexpr size_t kUnits = 2 * kIndexes;
  constexpr size_t kTotal = kLanes * kUnits;  // 10,240
  constexpr size_t kVictim = 5;
  ASSERT_NO_FATAL_FAILURE(ConnectPairs(kLanes));
  std::vector<Lane> lanes(kLanes);
  for (size_t l = 0; l < kLanes; ++l) {
    Lane& lane = lanes[l];
    const size_t size = kIndexes * kOpSpan;
    lane.source.resize(size);
    lane.remote_source.resize(size);
    for (size_t i = 0; i < size; ++i) {
      lane.source[i] = static_cast<std::byte>((i * 7 + l * 13 + 1) & 0xff);
      lane.remote_source[i] =
          static_cast<std::byte>((i * 11 + l * 5 + 3) & 0xff);
    }
    lane.target.assign(size, std::byte{0});
    lane.readback.assign(size, std::byte{0});
    lane.source_mr = Register(0, lane.source, kLocalOnly);
    lane.target_mr = Register(1, lane.target, kRemoteWrite);
    lane.remote_source_mr = Register(1, lane.remote_source, kRemoteRead);
    lane.readback_mr = Register(0, lane.readback, kLocalWrite);
  }
  struct Record {
    size_t lane = 0;
    PlannedOp plan;
    bool ended_before_kill = false;
  };
  std::map<OpHandle, Record> ops;
  std::map<OpHandle, Completion> ended;
  std::vector<size_t> next(kLanes, 0);
  std::vector<bool> stopped(kLanes, false);
  absl::Status victim_refused;
  bool killed = false;
  Deadline kill_time{};
  Deadline victim_last_end{};
  size_t pending_writes = 0, pending_reads = 0;  // the victim's, at the kill
  Deadline last_end = env().Now();
  auto take = [&](const Completion& c) {
    last_end = env().Now();
    ASSERT_TRUE(ops.count(c.handle)) << "unknown handle " << c.handle;
    ASSERT_TRUE(ended.emplace(c.handle, c).second)
        << "handle " << c.handle << " ended twice";
    Record& record = ops[c.handle];
    record.ended_before_kill = !killed;
    if (record.lane == kVictim) victim_last_end = env().Now();
  };
  auto all_posted = [&] {
    for (size_t l = 0; l < kLanes; ++l) {
      if (!stopped[l] && next[l] < kUnits) return false;
    }
    return true;
  };
  while (!all_posted() || ended.size() < ops.size()) {
    for (size_t l = 0; l < kLanes; ++l) {
      Lane& lane = lanes[l];
      while (!stopped[l] && next[l] < kUnits) {
        RdmaOp batch[kBatch];
        const bool write = Plan(next[l]).is_write;
        for (size_t k = 0; k < kBatch; ++k) {
          const size_t at = Plan(next[l] + k).index * kOpSpan;
          const size_t length = OpLength(l, Plan(next[l] + k).index);
          batch[k] = write ? RdmaOp{&lane.source_mr, at, length,
                                    lane.target_mr.remote(), at}
                           : RdmaOp{&lane.readback_mr, at, length,
                                    lane.remote_source_mr.remote(), at};
        }
        absl::StatusOr<OpHandle> first = write ? clients_[l]->PostWrite(batch)
                                               : clients_[l]->PostRead(batch);
        if (absl::IsResourceExhausted(first.status())) break;
        if (!first.ok()) {
          // Only the victim, once its engine has noticed the death.
          ASSERT_TRUE(killed && l == kVictim)
              << "lane " << l << ": " << first.status();
          victim_refused = first.status();
          stopped[l] = true;
          break;
        }
        for (size_t k = 0; k < kBatch; ++k) {
          ops[*first + k] = {l, Plan(next[l] + k), false};
        }
        next[l] += kBatch;
      }
    }
    if (!killed && ops.size() >= kTotal / 2) {
      // Let the NIC carry part of what is queued: some of the victim's ops
      // done (not yet polled), some on the wire, the rest still queued.
      fabric_->AdvanceClock(std::chrono::microseconds(3));
      const uint32_t peer_qp = servers_[kVictim]->qp()->qp_num;
      if (death == Death::kProcessExit) {
        ConnectionTestPeer::SimulateProcessExit(*servers_[kVictim]);
      }
      ASSERT_TRUE(fabric_->faults()
                      .DropPackets(sim::FaultTarget::Qp(peer_qp), 1 << 30)
                      .ok());
      killed = true;
      kill_time = env().Now();
      for (const auto& [handle, record] : ops) {
        if (record.lane != kVictim || ended.count(handle)) continue;
        ++(record.plan.is_write ? pending_writes : pending_reads);
      }
      ASSERT_EQ(clients_[kVictim]->async_ops_in_flight(),
                pending_writes + pending_reads);
    }
    while (std::optional<Completion> c = engine_->NextCompletion()) {
      ASSERT_NO_FATAL_FAILURE(take(*c));
    }
    if (engine_->Progress() > 0) continue;
    if (ended.size() == ops.size() && all_posted()) break;
    // Lost or left pending: nothing ends while keepalives keep completing.
    ASSERT_LT(env().Now() - last_end, kStall)
        << ops.size() - ended.size() << " op(s) not ended";
    const absl::Status waited = engine_->Wait(last_end + kStall);
    ASSERT_TRUE(waited.ok() || absl::IsDeadlineExceeded(waited)) << waited;
  }

  // Nothing lost, nothing pending, nothing twice (take() checked that).
  ASSERT_TRUE(killed);
  ASSERT_EQ(ended.size(), ops.size());
  for (const auto& client : clients_) {
    EXPECT_EQ(client->async_ops_in_flight(), 0u);
  }
  EXPECT_EQ(victim_refused.code(), absl::StatusCode::kUnavailable)
      << victim_refused;
  EXPECT_EQ(clients_[kVictim]->status().code(), absl::StatusCode::kUnavailable)
      << clients_[kVictim]->status();

  size_t before = 0, completed_after = 0, failed = 0, unknown = 0;
  OpHandle last_completed = 0;
  OpHandle first_not_completed = ~OpHandle{0};
  for (const auto& [handle, c] : ended) {
    const Record& record = ops.at(handle);
    const Lane& lane = lanes[record.lane];
    const size_t at = record.plan.index * kOpSpan;
    const size_t length = OpLength(record.lane, record.plan.index);
    ASSERT_EQ(c.connection, clients_[record.lane].get());
    ASSERT_EQ(c.is_write, record.plan.is_write);
    ASSERT_EQ(c.length, length);
    if (record.lane != kVictim) {
      ASSERT_EQ(c.outcome, OpOutcome::kCompleted)
          << "lane " << record.lane << " handle " << handle << ": " << c.status;
    }
    if (c.outcome == OpOutcome::kCompleted) {
      // Every byte of every op that completed, the victim's included.
      const std::byte* got = record.plan.is_write ? lane.target.data() + at
                                                  : lane.readback.data() + at;
      const std::byte* want = record.plan.is_write
                                  ? lane.source.data() + at
                                  : lane.remote_source.data() + at;
      ASSERT_EQ(std::memcmp(got, want, length), 0)
          << "lane " << record.lane << (c.is_write ? " WRITE " : " READ ")
          << record.plan.index;
    }
    if (record.lane != kVictim) continue;
    if (c.outcome == OpOutcome::kCompleted) {
      ++(record.ended_before_kill ? before : completed_after);
      last_completed = handle;
      continue;
    }
    // What ended before the kill completed; what did not complete did so
    // because of it.
    ASSERT_FALSE(record.ended_before_kill) << handle << ": " << c.status;
    first_not_completed = std::min(first_not_completed, handle);
    EXPECT_EQ(c.status.code(), absl::StatusCode::kUnavailable) << c.status;
    // A READ changes nothing at the peer: never "unknown". A WRITE posted
    // and not acknowledged may have landed: never "failed" (none of these
    // was refused by the peer's protection checks).
    if (c.is_write) {
      ASSERT_EQ(c.outcome, OpOutcome::kOutcomeUnknown) << handle;
      ++unknown;
    } else {
      ASSERT_EQ(c.outcome, OpOutcome::kFailed) << handle;
      ++failed;
    }
  }
  // Per connection in posting order: a completed prefix, then the rest.
  EXPECT_LT(last_completed, first_not_completed);
  // Genuinely in flight: a good part of the victim's ops were posted, not
  // yet ended, when it died, and both kinds ended without completing.
  EXPECT_GT(before, 0u);
  EXPECT_GE(pending_writes + pending_reads, 32u);
  EXPECT_GT(unknown, 0u);
  EXPECT_GT(failed, 0u);
  // Those pending at the kill, and those posted after it until the engine
  // noticed, all ended; each completed (it was done before the peer died)
  // or ended FAILED / OUTCOME_UNKNOWN.
  size_t victim_ops = 0;
  for (const auto& [handle, record] : ops) victim_ops += record.lane == kVictim;
  EXPECT_EQ(before + completed_after + failed + unknown, victim_ops);
  EXPECT_LE(completed_after + failed + unknown,
            pending_writes + pending_reads + kUnits);
  EXPECT_GE(completed_after + failed + unknown, pending_writes + pending_reads);
  // How soon: at once for a process exit (its setup stream), within the
  // retry budget (~0.54 s with ack_timeout 14, 7 retries) plus the flush
  // for a host that vanished.
  EXPECT_LT(victim_last_end - kill_time, death == Death::kProcessExit
                                             ? std::chrono::milliseconds(5)
                                             : std::chrono::milliseconds(1500));
  // The 15 others did all their work.
  for (size_t l = 0; l < kLanes; ++l) {
    if (l != kVictim) {
      EXPECT_EQ(next[l], kUnits) << "lane " << l;
    }
  }
  const EngineStats stats = engine_->stats();
  EXPECT_EQ(stats.ops_posted, ops.size());
  EXPECT_EQ(stats.ops_failed, failed);
  EXPECT_EQ(stats.ops_outcome_unknown, unknown);
  EXPECT_EQ(stats.ops_completed, ops.size() - failed - unknown);
  EXPECT_GE(ops.size(), kTotal - kUnits);
  std::printf(
      "victim: %zu ops posted; %zu completed before the kill; at the kill "
      "%zu WRITEs + %zu READs in flight; after it %zu completed, %zu FAILED, "
      "%zu OUTCOME_UNKNOWN, last ended %.3f ms after the kill; %zu ops in "
      "all; the victim: %s\n",
      victim_ops, before, pending_writes, pending_reads, completed_after,
      failed, unknown,
      std::chrono::duration<double, std::milli>(victim_last_end - kill_time)
          .count(),
      ops.size(), clients_[kVictim]->status().ToString().c_str());
}

TEST_F(EngineInFlightTest, APeerProcessKilledMidwayEndsEachOfItsOpsOnce) {
  KillOnePeerMidway(Death::kProcessExit);
}

TEST_F(EngineInFlightTest, APeerHostLostMidwayEndsEachOfItsOpsOnce) {
  KillOnePeerMidway(Death::kHostVanished);
}

}  // namespace
}  // namespace rdma_transport
