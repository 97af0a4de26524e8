// A busy-polling wait's service turns, driven through the Connection
// (busy_poll_gate_test.cc tests the gate alone): on a scripted cycle counter
// and clock, a Receive() that waits for a message that never comes shows
// which turns yield the CPU, which look at the fds, and how a yield's length
// (timed around Env::Wait) keeps or ends a contended spell. The connection
// pair is made on the simulator's virtual clock; the wait under test runs on
// the scripted one (virtual_time() false: the real clock's path), where
// every read of the counter is a step of the script.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "sim/fabric.h"
#include "sim/sim_verbs.h"
#include "tests/sim_pair_fixture.h"
#include "transport/busy_poll_gate.h"
#include "transport/connection.h"
#include "transport/connection_options.h"
#include "verbs_shim/env.h"
#include "verbs_shim/verbs_wrapper.h"

namespace rdma_transport {
namespace {

// The simulator's Env until Script(); from then on a real-clock Env
// (virtual_time() false) whose counter and clock the test drives: each
// CycleCount() read advances the counter `step` cycles (the read numbered
// by GoAwayAt() by a gap instead: the thread was descheduled), Now() follows
// the counter at kCyclesPerNs, and a yielding Wait (kSpin) takes `yield`
// cycles and finds nothing. Every scripted Wait is recorded. Unscript()
// hands back to the simulator, Now() going on from where the script left
// it; a later Script() goes on with the counter, advanced by the time that
// passed meanwhile. Test-only; one thread.
class ScriptedCycleEnv : public Env {
 public:
  static constexpr uint64_t kCyclesPerNs = 2;

  struct WaitRecord {
    uint64_t cycles;  // the counter when the wait began, since Script()
    WaitKind kind;
    size_t fds;
  };

  explicit ScriptedCycleEnv(Env& sim) : sim_(sim) {}

  void Script(uint64_t step, uint64_t yield) {
    start_ = Now();
    if (stopped_ != Deadline{}) cycles_ += CyclesIn(start_ - stopped_);
    script_base_ = cycles_;
    scripted_ = true;
    step_ = step;
    yield_ = yield;
  }
  // The `read`-th read of the counter from now on (the next is 1) comes
  // `gap` cycles after the one before.
  void GoAwayAt(uint64_t read, uint64_t gap) {
    away_read_ = reads_ + read;
    gap_ = gap;
  }
  void Unscript() {
    if (!scripted_) return;
    stopped_ = Now();
    offset_ += stopped_ - (sim_.Now() + offset_);
    scripted_ = false;
  }

  // The counter now, since the first Script().
  uint64_t cycles() const { return cycles_ - kStart; }
  const std::vector<WaitRecord>& waits() const { return waits_; }

  Deadline Now() override {
    if (!scripted_) return sim_.Now() + offset_;
    return start_ +
           std::chrono::nanoseconds((cycles_ - script_base_) / kCyclesPerNs);
  }
  bool virtual_time() const override {
    return !scripted_ && sim_.virtual_time();
  }
  uint64_t CycleCount() override {
    if (!scripted_) return sim_.CycleCount();
    ++reads_;
    cycles_ += reads_ == away_read_ ? gap_ : step_;
    return cycles_;
  }
  uint64_t PrepareWait() override { return scripted_ ? 0 : sim_.PrepareWait(); }
  int Wait(uint64_t token, std::span<pollfd> fds, Deadline wake,
           WaitKind kind) override {
    if (!scripted_) {
      return sim_.Wait(token, fds, wake == kNoDeadline ? wake : wake - offset_,
                       kind);
    }
    waits_.push_back({cycles_ - kStart, kind, fds.size()});
    if (kind == WaitKind::kSpin) cycles_ += yield_;
    if (kind == WaitKind::kBlock && wake > Now())
      cycles_ += CyclesIn(wake - Now());
    return 0;
  }
  void Notify() override { sim_.Notify(); }
  void AddParticipant() override { sim_.AddParticipant(); }
  void JoinAsParticipant() override { sim_.JoinAsParticipant(); }
  void RemoveParticipant() override { sim_.RemoveParticipant(); }
  SetupNetwork* setup_network() override { return sim_.setup_network(); }

 private:
  static constexpr uint64_t kStart = uint64_t{1} << 40;
  static uint64_t CyclesIn(Clock::duration span) {
    return static_cast<uint64_t>(
               std::chrono::duration_cast<std::chrono::nanoseconds>(span)
                   .count()) *
           kCyclesPerNs;
  }

  Env& sim_;
  bool scripted_ = false;
  Clock::duration offset_{};
  Deadline start_{};          // Now() at Script()
  Deadline stopped_{};        // Now() at the last Unscript()
  uint64_t script_base_ = 0;  // the counter at Script()
  uint64_t cycles_ = kStart;
  uint64_t reads_ = 0;
  uint64_t step_ = 0;
  uint64_t yield_ = 0;
  uint64_t away_read_ = 0;
  uint64_t gap_ = 0;
  std::vector<WaitRecord> waits_;
};

// The simulator's verbs with the scripted Env as theirs (Verbs::env()), so
// that the Contexts and Connections made on them run on it.
class ScriptedCycleVerbs : public VerbsWrapper {
 public:
  explicit ScriptedCycleVerbs(Verbs* target)
      : VerbsWrapper(target), env_(target->env()) {}
  Env& env() override { return env_; }
  ScriptedCycleEnv& scripted() { return env_; }

 private:
  ScriptedCycleEnv env_;
};

constexpr uint64_t kStep = uint64_t{1} << 14;  // a read every ~8 us
// ~3.8 ms into the wait, just after a look at the fds (at 2^24 + 2^23 +
// 2^22 + 2^21 + 2^20 + kStep cycles; the next one is 2^23 after it).
constexpr uint64_t kAwayRead = 460;
constexpr uint64_t kGap = uint64_t{1} << 22;         // away for ~2 ms
constexpr uint64_t kSlowYield = uint64_t{1} << 18;   // ran another thread
constexpr uint64_t kQuickYield = uint64_t{1} << 12;  // ran nobody
constexpr std::chrono::milliseconds kWaitFor{50};

class BusyPollWaitTest : public SimPairTest<ScriptedCycleVerbs> {
 protected:
  ScriptedCycleEnv& scripted() { return verbs_.scripted(); }

  // Scripts the counter (kStep a read, yields of `yield` cycles, away for
  // kGap at read kAwayRead if `go_away`), connects with
  // ConnectionOptions::busy_poll_yields `busy_poll_yields`, then waits kWaitFor
  // in a Receive() for a message that never comes; the scripted waits are in
  // scripted().waits(), the yields counted in yields_.
  void WaitForNothing(uint64_t yield, bool go_away,
                      bool busy_poll_yields = true) {
    ConnectionOptions options;
    options.progress = ProgressMode::kBusyPoll;
    options.busy_poll_yields = busy_poll_yields;
    ASSERT_NO_FATAL_FAILURE(Connect(options));
    const ConnectionStats before = client_->stats();
    scripted().Script(kStep, yield);
    if (go_away) scripted().GoAwayAt(kAwayRead, kGap);
    const Deadline deadline = scripted().Now() + kWaitFor;
    std::byte buffer[64];
    const absl::StatusOr<size_t> got = client_->Receive(buffer, deadline);
    ASSERT_EQ(got.status().code(), absl::StatusCode::kDeadlineExceeded)
        << got.status();
    // Seen when due (the gate plans the deadline on the counter), not a
    // fds' interval (up to ~17 ms here) later.
    EXPECT_LT(scripted().Now() - deadline, std::chrono::microseconds(50));
    const ConnectionStats after = client_->stats();
    yields_ = after.service_yields - before.service_yields;
    turns_ = after.service_turns - before.service_turns;
    looks_ = after.service_looks - before.service_looks;
  }

  void TearDown() override {
    scripted().Unscript();
    SimPairTest::TearDown();
  }

  // The counter at the read that came back from being away.
  static uint64_t Away() { return (kAwayRead - 1) * kStep + kGap; }

  uint64_t yields_ = 0;
  uint64_t turns_ = 0;
  uint64_t looks_ = 0;
};

int CountKind(const std::vector<ScriptedCycleEnv::WaitRecord>& waits,
              WaitKind kind) {
  int count = 0;
  for (const auto& wait : waits) count += wait.kind == kind ? 1 : 0;
  return count;
}

// A healthy wait on a CPU of its own: its service turns spread out (the
// fds' interval doubling to ~17 ms here), none yields, and all but the one
// before the counter is calibrated (a base interval after the first) look
// at the fds: a few system calls in 50 ms, not one per poll.
TEST_F(BusyPollWaitTest, AnUndisturbedWaitLooksRarelyAndNeverYields) {
  ASSERT_NO_FATAL_FAILURE(WaitForNothing(kSlowYield, /*go_away=*/false));
  const auto& waits = scripted().waits();
  ASSERT_GE(waits.size(), 3u);
  EXPECT_LE(waits.size(), 10u);
  int looks = 0;
  for (const auto& wait : waits) {
    EXPECT_EQ(wait.kind, WaitKind::kPeek);
    looks += wait.fds > 0 ? 1 : 0;
  }
  EXPECT_GE(looks + 1, static_cast<int>(waits.size()));
  EXPECT_GT(waits.front().fds, 0u);
  EXPECT_GT(waits.back().fds, 0u);
  EXPECT_EQ(yields_, 0u);
  EXPECT_EQ(looks_, static_cast<uint64_t>(looks));
  EXPECT_GE(turns_, waits.size());
}

// Back from being descheduled, the wait counts the CPU as contended for
// ~33 ms (2^26 cycles): a turn every base interval that yields (kSpin), and
// that looks at the fds only when their own interval is due; a yield that
// ran another thread keeps the spell. After it, turns neither yield nor
// come often. (Before the gap, one turn of the first two does not look:
// the counter was not yet calibrated.)
TEST_F(BusyPollWaitTest, AContendedSpellYieldsWithoutLookingAtTheFds) {
  ASSERT_NO_FATAL_FAILURE(WaitForNothing(kSlowYield, /*go_away=*/true));
  const auto& waits = scripted().waits();
  size_t i = 0;
  int before = 0;
  for (; i < waits.size() && waits[i].cycles < Away(); ++i, ++before) {
    EXPECT_EQ(waits[i].kind, WaitKind::kPeek) << "wait " << i;
    if (i != 1) {
      EXPECT_GT(waits[i].fds, 0u) << "wait " << i;
    }
  }
  EXPECT_GE(before, 2);
  ASSERT_LT(i, waits.size());
  // The turn after the gap yields at once (the wait has been idle for
  // long); the fds were looked at ~2 ms before and wait for their interval.
  EXPECT_EQ(waits[i].kind, WaitKind::kSpin);
  EXPECT_EQ(waits[i].fds, 0u);
  int spins = 0;
  int spins_looking = 0;
  uint64_t last_spin = 0;
  for (; i < waits.size() && waits[i].kind == WaitKind::kSpin; ++i) {
    ++spins;
    spins_looking += waits[i].fds > 0 ? 1 : 0;
    last_spin = waits[i].cycles;
  }
  // A turn every 2^19 cycles (the yield's 2^18 within it): 128 in 2^26.
  EXPECT_GE(spins, 100);
  EXPECT_LE(spins, 130);
  EXPECT_GE(spins_looking, 2);
  EXPECT_LE(spins_looking, 8) << "a spell's yields look only when due";
  EXPECT_LT(last_spin, Away() + BusyPollGate::kContendedCycles + kStep);
  EXPECT_GT(last_spin, Away() + BusyPollGate::kContendedCycles -
                           BusyPollGate::kBaseCycles - kSlowYield - kStep);
  const int after = static_cast<int>(waits.size() - i);
  EXPECT_GE(after, 1);
  int looks_after = 0;
  for (; i < waits.size(); ++i) {
    EXPECT_EQ(waits[i].kind, WaitKind::kPeek) << "wait " << i;
    looks_after += waits[i].fds > 0 ? 1 : 0;
  }
  EXPECT_GE(looks_after, 1);
  EXPECT_LE(after, 4);
  EXPECT_EQ(yields_, static_cast<uint64_t>(spins));
  EXPECT_EQ(CountKind(waits, WaitKind::kSpin), spins);
}

// ConnectionOptions::busy_poll_yields false: back from being descheduled
// the wait takes a turn at once (the clock) but starts no spell: no yield,
// and the turns stay on the fds' interval, as perftest's loop would.
TEST_F(BusyPollWaitTest, AWaitThatMayNotYieldNeverDoes) {
  ASSERT_NO_FATAL_FAILURE(WaitForNothing(kSlowYield, /*go_away=*/true,
                                         /*busy_poll_yields=*/false));
  const auto& waits = scripted().waits();
  EXPECT_EQ(CountKind(waits, WaitKind::kSpin), 0);
  EXPECT_EQ(yields_, 0u);
  size_t i = 0;
  while (i < waits.size() && waits[i].cycles < Away()) ++i;
  ASSERT_LT(i, waits.size());
  EXPECT_LT(waits[i].cycles, Away() + 2 * kStep) << "a turn at once";
  EXPECT_LE(waits.size() - i, 5u) << "no turn every base interval";
  EXPECT_LE(waits.size(), 14u);
}

// A yield that comes back at once ran nobody who needed the CPU (whatever
// took it away is not helped by yielding): the spell ends after it.
TEST_F(BusyPollWaitTest, AQuickYieldEndsTheSpell) {
  ASSERT_NO_FATAL_FAILURE(WaitForNothing(kQuickYield, /*go_away=*/true));
  const auto& waits = scripted().waits();
  ASSERT_EQ(CountKind(waits, WaitKind::kSpin), 1);
  EXPECT_EQ(yields_, 1u);
  size_t spin = 0;
  while (waits[spin].kind != WaitKind::kSpin) ++spin;
  EXPECT_GE(waits[spin].cycles, Away());
  EXPECT_LE(waits.size(), 14u) << "no turn every base interval after it";
  EXPECT_EQ(CountKind(waits, WaitKind::kBlock), 0);
}

// In a contended spell a wait that has just begun (its receive before
// found a message) does not yield until it has found nothing for
// kYieldAfterIdleCycles: a reply due sooner is not held up by a yield, nor
// costs one. A wait that stays idle then yields every turn.
TEST_F(BusyPollWaitTest, ANewWaitYieldsOnlyOnceItHasBeenIdleForAWhile) {
  ConnectionOptions options;
  options.progress = ProgressMode::kBusyPoll;
  ASSERT_NO_FATAL_FAILURE(Connect(options));
  std::byte buffer[64];
  // A spell: away early in a wait that times out.
  scripted().Script(kStep, kSlowYield);
  scripted().GoAwayAt(2, kGap);
  EXPECT_EQ(
      client_->Receive(buffer, scripted().Now() + std::chrono::milliseconds(5))
          .status()
          .code(),
      absl::StatusCode::kDeadlineExceeded);
  ASSERT_GT(CountKind(scripted().waits(), WaitKind::kSpin), 0);
  // On the simulator's clock the server's message reaches the client's CQ.
  scripted().Unscript();
  const std::byte ping[8] = {};
  ASSERT_TRUE(
      server_->Send(ping, scripted().DeadlineIn(std::chrono::seconds(1))).ok());
  scripted().SleepUntil(scripted().Now() + std::chrono::microseconds(200));
  // Scripted again, the spell still on: the receive finds it at once.
  scripted().Script(kStep, kSlowYield);
  absl::StatusOr<size_t> got =
      client_->Receive(buffer, scripted().Now() + std::chrono::milliseconds(1));
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(*got, sizeof(ping));
  // The next wait.
  const size_t first = scripted().waits().size();
  const uint64_t begun = scripted().cycles();
  EXPECT_EQ(
      client_->Receive(buffer, scripted().Now() + std::chrono::milliseconds(3))
          .status()
          .code(),
      absl::StatusCode::kDeadlineExceeded);
  const auto& waits = scripted().waits();
  ASSERT_GT(waits.size(), first);
  EXPECT_EQ(waits[first].kind, WaitKind::kPeek) << "a young wait";
  size_t spin = first;
  while (spin < waits.size() && waits[spin].kind != WaitKind::kSpin) ++spin;
  ASSERT_LT(spin, waits.size()) << "an idle wait in a spell yields";
  // Idle counts from the wait's first read of the counter (kStep after it
  // began); turns come every base interval.
  EXPECT_GE(waits[spin].cycles - begun,
            BusyPollGate::kYieldAfterIdleCycles + kStep);
  EXPECT_LT(waits[spin].cycles - begun, BusyPollGate::kYieldAfterIdleCycles +
                                            BusyPollGate::kBaseCycles +
                                            2 * kStep);
  for (size_t i = spin; i < waits.size(); ++i) {
    EXPECT_EQ(waits[i].kind, WaitKind::kSpin) << "wait " << i;
  }
  EXPECT_GE(waits.size() - spin, 3u);
}

}  // namespace
}  // namespace rdma_transport
