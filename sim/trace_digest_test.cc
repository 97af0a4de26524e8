// Fabric::TraceDigest() and EventsRun(): the same scenario gives the same
// digest on every fabric; any difference in what happened gives another.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "sim/fabric.h"
#include "sim/fault_injector.h"
#include "sim/internal/trace.h"
#include "sim/sim_testing.h"
#include "sim/sim_verbs.h"
#include "sim/test_macros.h"

namespace rdma_transport::sim {
namespace {

using internal::Trace;
using internal::TraceRecord;
using internal::TraceWord;
using std::chrono::microseconds;
using std::chrono::nanoseconds;

// The mixing itself (sim/internal/trace.h).

TEST(TraceTest, EveryRecordMovesTheDigestEvenAllZero) {
  Trace trace;
  const uint64_t empty = trace.digest();
  trace.Record(TraceRecord::kPacketLost, 0);
  const uint64_t one = trace.digest();
  trace.Record(TraceRecord::kPacketLost, 0);
  EXPECT_NE(empty, one);
  EXPECT_NE(one, trace.digest());
}

TEST(TraceTest, OrderKindAndPositionMatter) {
  auto digest = [](auto&& record) {
    Trace trace;
    record(trace);
    return trace.digest();
  };
  const uint64_t ab = digest([](Trace& t) {
    t.Record(TraceRecord::kEvent, 1, 2);
    t.Record(TraceRecord::kEvent, 3, 4);
  });
  const uint64_t ba = digest([](Trace& t) {
    t.Record(TraceRecord::kEvent, 3, 4);
    t.Record(TraceRecord::kEvent, 1, 2);
  });
  const uint64_t swapped_words = digest([](Trace& t) {
    t.Record(TraceRecord::kEvent, 2, 1);
    t.Record(TraceRecord::kEvent, 3, 4);
  });
  const uint64_t other_kind = digest([](Trace& t) {
    t.Record(TraceRecord::kCompletion, 1, 2);
    t.Record(TraceRecord::kEvent, 3, 4);
  });
  EXPECT_NE(ab, ba);
  EXPECT_NE(ab, swapped_words);
  EXPECT_NE(ab, other_kind);
}

TEST(TraceTest, AOneBitChangeInAnyWordChangesTheDigest) {
  auto digest = [](int word, int bit) {
    Trace trace;
    for (int record = 0; record < 3; ++record) {
      uint64_t words[4] = {100, 200, 300, 400};
      if (record == 1 && word >= 0) words[word] ^= uint64_t{1} << bit;
      trace.Record(TraceRecord::kEvent, words[0], words[1], words[2], words[3]);
    }
    return trace.digest();
  };
  const uint64_t reference = digest(-1, 0);
  for (int word = 0; word < 4; ++word) {
    for (int bit = 0; bit < 64; ++bit) {
      EXPECT_NE(digest(word, bit), reference) << word << " " << bit;
    }
  }
  EXPECT_EQ(TraceWord(1, 2), (uint64_t{2} << 32) | 1);
}

// The fabric's digest.

struct ScenarioRun {
  uint64_t digest = 0;
  uint64_t events = 0;
  SimCounters counters;
};

struct Variation {
  ProgressMode mode = ProgressMode::kImmediate;
  nanoseconds link_latency{1000};
  int extra_drops = 0;        // Requests to the responder lost.
  bool port_flap = false;     // PortDown + PortUp of the responder first.
  bool kill_mid_way = false;  // KillDeviceAt(responder, 9 us).
  uint64_t first_wr_id = 0;   // Of the sends.
};

// Two devices, one RC connection, a mixed workload (SENDs, a WRITE with
// immediate, a READ): 11 successful completions when nothing goes wrong.
ScenarioRun RunScenario(const Variation& variation) {
  FabricOptions options;
  options.progress_mode = variation.mode;
  options.link_latency = variation.link_latency;
  Fabric fabric(options);
  SimVerbs verbs(&fabric);
  const std::string a_name = *fabric.AddDevice(ConnectX6());
  const std::string b_name = *fabric.AddDevice(IntelE810());
  std::unique_ptr<Endpoint> a = *Endpoint::Create(&verbs, a_name);
  std::unique_ptr<Endpoint> b = *Endpoint::Create(&verbs, b_name);
  ConnectOptions connect;
  connect.timeout = 1;
  connect.retry_cnt = 3;
  EXPECT_OK(a->ConnectTo(*b, connect));
  EXPECT_OK(b->ConnectTo(*a, connect));
  if (variation.port_flap) {
    EXPECT_OK(fabric.faults().PortDown(b_name));
    EXPECT_OK(fabric.faults().PortUp(b_name));
  }
  if (variation.extra_drops > 0) {
    EXPECT_OK(fabric.faults().DropPackets(FaultTarget::Qp(b->qp_num()),
                                          variation.extra_drops));
  }
  if (variation.kill_mid_way) {
    EXPECT_OK(fabric.faults().KillDeviceAt(b_name, nanoseconds(1050)));
  }
  // Four SENDs and the WRITE_WITH_IMM consume five receives.
  for (int i = 0; i < 5; ++i) {
    EXPECT_OK(b->PostRecv(100 + i, 256 * i, 256));
  }
  // In kImmediate each post runs to quiescence; in kManual the whole
  // workload runs in RunUntilIdle.
  for (int i = 0; i < 4; ++i) {
    EXPECT_OK(a->PostSend(variation.first_wr_id + i, IBV_WR_SEND, 64 * i, 64));
  }
  EXPECT_OK(a->PostSend(variation.first_wr_id + 4, IBV_WR_RDMA_WRITE_WITH_IMM,
                        0, 4096, IBV_SEND_SIGNALED, 7, b->address(8192),
                        b->rkey()));
  EXPECT_OK(a->PostSend(variation.first_wr_id + 5, IBV_WR_RDMA_READ, 16384,
                        1024, IBV_SEND_SIGNALED, 0, b->address(0), b->rkey()));
  fabric.RunUntilIdle();
  EXPECT_OK(a->PollSendCq().status());
  EXPECT_OK(b->PollRecvCq().status());
  ScenarioRun run;
  run.digest = fabric.TraceDigest();
  run.events = fabric.EventsRun();
  run.counters = fabric.Counters();
  // Closing runs nothing: async events never taken go with their objects.
  EXPECT_OK(a->Close());
  EXPECT_OK(b->Close());
  EXPECT_TRUE(fabric.LeakReport().empty());
  return run;
}

TEST(TraceDigestTest, AFreshFabricHasRunNothing) {
  Fabric one;
  Fabric two;
  EXPECT_EQ(one.EventsRun(), 0u);
  EXPECT_EQ(one.TraceDigest(), two.TraceDigest());
}

TEST(TraceDigestTest, TheSameScenarioGivesTheSameDigest) {
  const ScenarioRun first = RunScenario({});
  const ScenarioRun second = RunScenario({});
  // 6 one-packet messages: transmit, arrive, response; 6 more transmits
  // find nothing left to send.
  EXPECT_EQ(first.events, 24u);
  EXPECT_EQ(first.events, second.events);
  EXPECT_EQ(first.digest, second.digest);
  EXPECT_EQ(first.counters.completions(IBV_WC_SUCCESS), 11u);
  EXPECT_NE(first.digest, Fabric().TraceDigest());
}

TEST(TraceDigestTest, OneMoreLostPacketChangesTheDigest) {
  const ScenarioRun clean = RunScenario({});
  Variation lossy;
  lossy.extra_drops = 1;
  const ScenarioRun one_drop = RunScenario(lossy);
  lossy.extra_drops = 2;
  const ScenarioRun two_drops = RunScenario(lossy);
  // Same outcome for the application (the retransmission succeeds)...
  EXPECT_EQ(one_drop.counters.completions(IBV_WC_SUCCESS), 11u);
  EXPECT_EQ(one_drop.counters.packets_dropped, 1u);
  // ...but not the same run.
  EXPECT_NE(clean.digest, one_drop.digest);
  EXPECT_NE(one_drop.digest, two_drops.digest);
  EXPECT_NE(clean.digest, two_drops.digest);
  // And the lossy run replays too.
  EXPECT_EQ(RunScenario(lossy).digest, two_drops.digest);
}

TEST(TraceDigestTest, TimingIsPartOfTheDigest) {
  Variation slower;
  slower.link_latency = nanoseconds(1001);
  const ScenarioRun clean = RunScenario({});
  const ScenarioRun slow = RunScenario(slower);
  EXPECT_EQ(clean.events, slow.events);  // The same events, a bit later.
  EXPECT_NE(clean.digest, slow.digest);
}

TEST(TraceDigestTest, CompletionsArePartOfTheDigest) {
  Variation other_ids;
  other_ids.first_wr_id = 1000;
  const ScenarioRun clean = RunScenario({});
  const ScenarioRun renamed = RunScenario(other_ids);
  // The same events at the same times; only the completions' wr_id differ.
  EXPECT_EQ(clean.events, renamed.events);
  EXPECT_NE(clean.digest, renamed.digest);
}

TEST(TraceDigestTest, AsyncEventsArePartOfTheDigest) {
  Variation flap;
  flap.port_flap = true;
  const ScenarioRun clean = RunScenario({});
  const ScenarioRun flapped = RunScenario(flap);
  EXPECT_EQ(flapped.counters.total_async_events(), 2u);
  EXPECT_EQ(clean.events, flapped.events);  // No event ran for them.
  EXPECT_NE(clean.digest, flapped.digest);
  EXPECT_EQ(RunScenario(flap).digest, flapped.digest);
}

TEST(TraceDigestTest, AScheduledKillReplaysInBothProgressModes) {
  Variation kill;
  kill.kill_mid_way = true;
  kill.mode = ProgressMode::kManual;
  const ScenarioRun manual = RunScenario(kill);
  const ScenarioRun manual_again = RunScenario(kill);
  EXPECT_EQ(manual.digest, manual_again.digest);
  EXPECT_EQ(manual.counters.async_events(IBV_EVENT_DEVICE_FATAL), 1u);
  // Pipelined, the four SENDs were acknowledged by 1.05 us; the 4 KiB
  // WRITE_WITH_IMM behind them was not: b died as its packets arrived.
  EXPECT_EQ(manual.counters.completions(IBV_WC_RETRY_EXC_ERR), 1u);
  EXPECT_EQ(manual.counters.completions(IBV_WC_SUCCESS), 8u);

  kill.mode = ProgressMode::kImmediate;
  const ScenarioRun immediate = RunScenario(kill);
  EXPECT_EQ(immediate.digest, RunScenario(kill).digest);
  EXPECT_EQ(immediate.counters.async_events(IBV_EVENT_DEVICE_FATAL), 1u);
  // In kImmediate the first PostSend ran the fabric on to the kill, so only
  // the first SEND got through: a different (and as reproducible) run.
  EXPECT_EQ(immediate.counters.completions(IBV_WC_RETRY_EXC_ERR), 1u);
  EXPECT_NE(immediate.digest, manual.digest);
}

}  // namespace
}  // namespace rdma_transport::sim
