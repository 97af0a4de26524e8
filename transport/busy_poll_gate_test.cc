#include "transport/busy_poll_gate.h"

#include <chrono>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace rdma_transport {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;

// A spinning thread on a 2.5 GHz counter: it looks every `look` of time and
// takes the service turn whenever the gate says so, with nothing to find
// unless told.
class SpinningThread {
 public:
  static constexpr double kCyclesPerNs = 2.5;

  explicit SpinningThread(BusyPollGate& gate) : gate_(gate) {}

  uint64_t cycles() const {
    return kStart + static_cast<uint64_t>(
                        std::chrono::duration_cast<std::chrono::nanoseconds>(
                            now_ - Deadline{})
                            .count() *
                        kCyclesPerNs);
  }
  Deadline now() const { return now_; }

  // Looks every `look` until `span` has passed; returns the times (since
  // the start) of the service turns taken, for a wait whose deadline is
  // `deadline` on a connection whose next timer is `timer`. A turn yields
  // when the gate says (YieldDue) and looks at the fds when they are due,
  // as WaitLocked does; looks() and yields() count since the last Spin().
  // The thread finds no completion (Progress() says it did).
  std::vector<microseconds> Spin(Clock::duration span, Deadline deadline,
                                 Deadline timer = kNoDeadline,
                                 microseconds look = microseconds(10)) {
    std::vector<microseconds> turns;
    looks_ = 0;
    yields_ = 0;
    const Deadline end = now_ + span;
    while (now_ < end) {
      now_ += look;
      const uint64_t turn = cycles();
      if (gate_.Due(turn, deadline)) {
        turns.push_back(
            std::chrono::duration_cast<microseconds>(now_ - Deadline{}));
        const bool yield = gate_.YieldDue(turn);
        const bool looked = gate_.FdsDue(turn);
        const bool found = looked && found_;
        looks_ += looked ? 1 : 0;
        yields_ += yield ? 1 : 0;
        const Deadline turn_now = now_;
        if (yield && yield_cycles_ > 0 && !found) {
          // The yield takes its time: the thread is back that much later.
          now_ += std::chrono::nanoseconds(static_cast<int64_t>(
              static_cast<double>(yield_cycles_) / kCyclesPerNs));
          gate_.Yielded(turn, yield_cycles_);
        }
        gate_.Serviced(turn, turn_now, std::min(deadline, timer), found,
                       looked);
      }
    }
    return turns;
  }
  int looks() const { return looks_; }
  int yields() const { return yields_; }
  void Skip(Clock::duration away) { now_ += away; }
  // A poll found a completion: the next wait starts idle anew.
  void Progress() { gate_.Progressed(); }
  // Spins until the turns have spread to the maximum, is away for 2 ms
  // (a spell is due), and from then on reports yields of `yield_cycles`.
  void SettleThenGoAway(uint64_t yield_cycles) {
    Spin(std::chrono::milliseconds(50), kNoDeadline);
    Skip(std::chrono::milliseconds(2));
    yield_cycles_ = yield_cycles;
  }
  void set_found(bool found) { found_ = found; }
  // A turn that yields reports it took `cycles` (0: not reported).
  void set_yield_cycles(uint64_t cycles) { yield_cycles_ = cycles; }

 private:
  static constexpr uint64_t kStart = uint64_t{1} << 40;
  BusyPollGate& gate_;
  Deadline now_ = Deadline{} + std::chrono::seconds(100);
  bool found_ = false;
  uint64_t yield_cycles_ = 0;
  int looks_ = 0;
  int yields_ = 0;
};

TEST(BusyPollGateTest, WithoutACycleCounterEveryLookIsAServiceTurn) {
  BusyPollGate gate;
  for (int i = 0; i < 5; ++i) {
    EXPECT_TRUE(gate.Due(0, kNoDeadline));
    EXPECT_TRUE(gate.contended(0));  // yields
    EXPECT_TRUE(gate.FdsDue(0));     // and looks at the fds
    gate.Serviced(0, Deadline{} + milliseconds(i), kNoDeadline, false);
  }
  EXPECT_FALSE(gate.calibrated());
}

TEST(BusyPollGateTest, IdleTurnsSpreadOutToTheMaximum) {
  BusyPollGate gate;
  SpinningThread thread(gate);
  const std::vector<microseconds> turns =
      thread.Spin(milliseconds(100), kNoDeadline);
  ASSERT_GE(turns.size(), 10u);
  EXPECT_TRUE(gate.calibrated());
  // The first look serves; the gaps then grow to the maximum and stay.
  const double max_us =
      BusyPollGate::kMaxCycles / SpinningThread::kCyclesPerNs / 1000;
  microseconds previous_gap{0};
  for (size_t i = 1; i < turns.size(); ++i) {
    const microseconds gap = turns[i] - turns[i - 1];
    EXPECT_GE(gap.count() + 10, previous_gap.count()) << "turn " << i;
    EXPECT_LE(gap.count(), max_us + 10) << "turn " << i;
    previous_gap = gap;
  }
  EXPECT_GE(previous_gap.count(), max_us - 10);
  // 100 ms at ~13 ms apart once grown: about a dozen turns, not 10,000
  // looks.
  EXPECT_LE(turns.size(), 20u);
  EXPECT_EQ(gate.interval(), BusyPollGate::kMaxCycles);
}

TEST(BusyPollGateTest, ATurnThatFindsSomethingFallsBackToTheBase) {
  BusyPollGate gate;
  SpinningThread thread(gate);
  thread.Spin(milliseconds(50), kNoDeadline);
  ASSERT_EQ(gate.interval(), BusyPollGate::kMaxCycles);
  thread.set_found(true);
  const std::vector<microseconds> turns =
      thread.Spin(milliseconds(10), kNoDeadline);
  EXPECT_EQ(gate.interval(), BusyPollGate::kBaseCycles);
  // Once found, turns come every base interval (~210 us) again.
  ASSERT_GE(turns.size(), 3u);
  const double base_us =
      BusyPollGate::kBaseCycles / SpinningThread::kCyclesPerNs / 1000;
  EXPECT_LE((turns.back() - turns[turns.size() - 2]).count(), base_us + 10);
}

TEST(BusyPollGateTest, ADeadlineIsSeenWhenItFallsDueNotAnIntervalLater) {
  BusyPollGate gate;
  SpinningThread thread(gate);
  thread.Spin(milliseconds(50), kNoDeadline);  // grown and calibrated
  ASSERT_TRUE(gate.calibrated());
  // Just after a service turn that planned the next one ~13 ms ahead, a
  // new wait comes with a deadline 1.5 ms ahead.
  while (thread.Spin(microseconds(10), kNoDeadline).empty()) {
  }
  const Deadline deadline = thread.now() + microseconds(1500);
  const std::vector<microseconds> turns =
      thread.Spin(milliseconds(20), deadline);
  // Some turn lands within one look (10 us) after the deadline, although
  // the interval alone would have passed it by up to 13 ms.
  bool seen = false;
  const auto deadline_us =
      std::chrono::duration_cast<microseconds>(deadline - Deadline{});
  for (microseconds t : turns) {
    if (t >= deadline_us && t <= deadline_us + microseconds(20)) seen = true;
  }
  EXPECT_TRUE(seen);
}

TEST(BusyPollGateTest, ATimerIsSeenWhenItFallsDue) {
  BusyPollGate gate;
  SpinningThread thread(gate);
  thread.Spin(milliseconds(50), kNoDeadline);
  // A timer the last service turn knew of (a keepalive, say), 5 ms ahead;
  // the wait itself has no deadline.
  const Deadline timer = thread.now() + milliseconds(5);
  const std::vector<microseconds> turns =
      thread.Spin(milliseconds(20), kNoDeadline, timer);
  const auto timer_us =
      std::chrono::duration_cast<microseconds>(timer - Deadline{});
  bool seen = false;
  for (microseconds t : turns) {
    if (t >= timer_us && t <= timer_us + microseconds(20)) seen = true;
  }
  EXPECT_TRUE(seen);
}

TEST(BusyPollGateTest, UntilCalibratedTheBaseIntervalHolds) {
  BusyPollGate gate;
  SpinningThread thread(gate);
  // Under 500 us of turns: not calibrated, so neither the growth nor a wake
  // can be planned by the counter; turns come every base interval.
  const std::vector<microseconds> turns =
      thread.Spin(microseconds(450), kNoDeadline);
  EXPECT_FALSE(gate.calibrated());
  ASSERT_GE(turns.size(), 2u);
  const double base_us =
      BusyPollGate::kBaseCycles / SpinningThread::kCyclesPerNs / 1000;
  EXPECT_LE((turns[1] - turns[0]).count(), base_us + 10);
}

TEST(BusyPollGateTest, AThreadThatWasAwayServesAtOnceAndOftenAgain) {
  BusyPollGate gate;
  SpinningThread thread(gate);
  thread.Spin(milliseconds(50), kNoDeadline);
  ASSERT_EQ(gate.interval(), BusyPollGate::kMaxCycles);
  // Just after a turn (which looked), descheduled for 2 ms (more than
  // kAwayCycles): the next look serves, whatever the interval said, and
  // yields (the wait has been idle long); the fds wait for their own
  // interval (~13 ms here).
  while (thread.Spin(microseconds(10), kNoDeadline).empty()) {
  }
  ASSERT_EQ(thread.looks(), 1);
  thread.Skip(milliseconds(2));
  const std::vector<microseconds> after =
      thread.Spin(microseconds(10), kNoDeadline);
  EXPECT_EQ(after.size(), 1u);
  EXPECT_EQ(thread.looks(), 0);
  EXPECT_EQ(thread.yields(), 1);
  EXPECT_TRUE(gate.contended(thread.cycles()));
}

// A spell's turn yields only once the wait has found nothing for
// kYieldAfterIdleCycles (~420 us here): a wait that found something and
// is answered within that neither waits for a yield nor pays for one.
TEST(BusyPollGateTest, AWaitYieldsOnlyOnceItHasBeenIdleForAWhile) {
  BusyPollGate gate;
  SpinningThread thread(gate);
  thread.SettleThenGoAway(BusyPollGate::kQuickYieldCycles * 2);
  ASSERT_EQ(thread.Spin(microseconds(10), kNoDeadline).size(), 1u);
  ASSERT_EQ(thread.yields(), 1);  // idle for 50 ms: yields at once
  ASSERT_TRUE(gate.contended(thread.cycles()));
  const double idle_us =
      BusyPollGate::kYieldAfterIdleCycles / SpinningThread::kCyclesPerNs / 1000;
  for (int wait = 0; wait < 3; ++wait) {
    thread.Progress();  // a completion; the next wait begins
    // Its turns come every base interval (~210 us) but the first ones,
    // within ~420 us of its start, do not yield.
    const std::vector<microseconds> early = thread.Spin(
        microseconds(static_cast<int64_t>(idle_us) - 20), kNoDeadline);
    EXPECT_GE(early.size(), 1u) << "wait " << wait;
    EXPECT_EQ(thread.yields(), 0) << "wait " << wait;
    // From then on each turn yields (but one that fell just before the
    // line).
    const std::vector<microseconds> later =
        thread.Spin(milliseconds(1), kNoDeadline);
    EXPECT_GE(thread.yields(), 2) << "wait " << wait;
    EXPECT_GE(thread.yields() + 1, static_cast<int>(later.size()))
        << "wait " << wait;
  }
  EXPECT_TRUE(gate.contended(thread.cycles()));
}

// In a spell a young wait takes no service turn for a yield it will not
// make: after the one planned before its completion came, its next turn
// comes as it comes of age (~420 us here). Twenty waits answered in 380 us
// take about a turn each, where a turn every base interval (~210 us) took
// two.
TEST(BusyPollGateTest, AYoungWaitInASpellTakesNoTurnUntilItComesOfAge) {
  BusyPollGate gate;
  SpinningThread thread(gate);
  thread.SettleThenGoAway(BusyPollGate::kQuickYieldCycles * 2);
  ASSERT_EQ(thread.Spin(microseconds(10), kNoDeadline).size(), 1u);
  ASSERT_EQ(thread.yields(), 1);
  ASSERT_TRUE(gate.contended(thread.cycles()));
  size_t turns = 0;
  for (int wait = 0; wait < 20; ++wait) {
    thread.Progress();
    turns += thread.Spin(microseconds(380), kNoDeadline).size();
    EXPECT_EQ(thread.yields(), 0) << "wait " << wait;
  }
  ASSERT_TRUE(gate.contended(thread.cycles()));
  EXPECT_LE(turns, 21u);
  // A wait that stays idle: no turn until it comes of age, then one that
  // yields.
  const int64_t idle_us =
      static_cast<int64_t>(BusyPollGate::kYieldAfterIdleCycles /
                           SpinningThread::kCyclesPerNs / 1000);
  thread.Progress();
  EXPECT_LE(thread.Spin(microseconds(idle_us - 20), kNoDeadline).size(), 1u);
  EXPECT_EQ(thread.yields(), 0);
  EXPECT_EQ(thread.Spin(microseconds(40), kNoDeadline).size(), 1u);
  EXPECT_EQ(thread.yields(), 1);
}

// A connection whose traffic flows needs no look at the fds to know its
// peer lives: they are due only once the wait has found no completion for
// their interval (~13 ms here). A completion every 100 us for 100 ms makes
// no look; when they stop, the look comes an interval after the last.
TEST(BusyPollGateTest, CompletionsPutOffTheLookAtTheFds) {
  BusyPollGate gate;
  SpinningThread thread(gate);
  thread.Spin(milliseconds(50), kNoDeadline);
  ASSERT_EQ(gate.interval(), BusyPollGate::kMaxCycles);
  int looks = 0;
  for (int i = 0; i < 1000; ++i) {
    thread.Progress();
    thread.Spin(microseconds(100), kNoDeadline);
    looks += thread.looks();
  }
  EXPECT_EQ(looks, 0);
  thread.Progress();
  const microseconds last =
      std::chrono::duration_cast<microseconds>(thread.now() - Deadline{});
  const std::vector<microseconds> turns =
      thread.Spin(milliseconds(20), kNoDeadline);
  EXPECT_EQ(thread.looks(), 1);
  ASSERT_FALSE(turns.empty());
  const double max_us =
      BusyPollGate::kMaxCycles / SpinningThread::kCyclesPerNs / 1000;
  EXPECT_NEAR(static_cast<double>((turns.back() - last).count()), max_us, 20);
}

TEST(BusyPollGateTest, AContendedCpuIsYieldedEveryBaseIntervalForAWhile) {
  BusyPollGate gate;
  SpinningThread thread(gate);
  thread.Spin(milliseconds(50), kNoDeadline);
  EXPECT_FALSE(gate.contended(thread.cycles())) << "nobody took the CPU";
  EXPECT_EQ(thread.yields(), 0);
  thread.Skip(milliseconds(2));  // descheduled
  // For the next ~27 ms (kContendedCycles at 2.5 GHz) turns come every
  // base interval (~210 us), each one yielding; then they spread out again.
  const std::vector<microseconds> contended =
      thread.Spin(milliseconds(20), kNoDeadline);
  EXPECT_TRUE(gate.contended(thread.cycles()));
  EXPECT_GE(contended.size(), 90u);
  EXPECT_EQ(thread.yields(), static_cast<int>(contended.size()));
  thread.Spin(milliseconds(10), kNoDeadline);
  EXPECT_FALSE(gate.contended(thread.cycles()));
  // The fds' interval went on growing meanwhile: turns ~13 ms apart.
  EXPECT_LE(thread.Spin(milliseconds(20), kNoDeadline).size(), 3u);
  EXPECT_EQ(thread.yields(), 0);
}

// A turn of a spell looks at the fds only when their interval is due
// (~13 ms: it had grown), not at each of the ~95 yields nor at once after
// the gap; one that finds something readable brings the looks back to
// every base interval.
TEST(BusyPollGateTest, ASpellLooksAtTheFdsOnTheirOwnInterval) {
  BusyPollGate gate;
  SpinningThread thread(gate);
  thread.Spin(milliseconds(50), kNoDeadline);
  thread.Skip(milliseconds(2));
  EXPECT_GE(thread.Spin(milliseconds(10), kNoDeadline).size(), 45u);
  EXPECT_LE(thread.looks(), 1);
  EXPECT_EQ(gate.interval(), BusyPollGate::kMaxCycles);
  thread.set_found(true);
  thread.Spin(milliseconds(14), kNoDeadline);  // past a look ~13 ms apart
  EXPECT_GE(thread.looks(), 2);  // it found something; the next ones too
  EXPECT_EQ(gate.interval(), BusyPollGate::kBaseCycles);
  EXPECT_TRUE(gate.contended(thread.cycles()));
  const std::vector<microseconds> turns =
      thread.Spin(milliseconds(2), kNoDeadline);
  EXPECT_EQ(thread.looks(), static_cast<int>(turns.size()));
}

// The vCPU lost its CPU to the hypervisor, say: the first turn yields,
// the yield comes straight back (nobody else wanted this CPU), and the
// turns spread out again at once instead of yielding every base interval.
// The next gap starts a spell again: the CPU may be wanted by then.
TEST(BusyPollGateTest, AYieldThatRanNobodyEndsTheContendedSpell) {
  BusyPollGate gate;
  SpinningThread thread(gate);
  thread.SettleThenGoAway(BusyPollGate::kQuickYieldCycles / 4);
  const std::vector<microseconds> turns =
      thread.Spin(milliseconds(20), kNoDeadline);
  EXPECT_FALSE(gate.contended(thread.cycles()));
  // The turn after the gap, then one every ~13 ms: 2 or 3 in 20 ms,
  // where a contended spell takes about 95.
  EXPECT_LE(turns.size(), 3u);
  EXPECT_EQ(thread.yields(), 1);
  // Away again: a turn at once, which yields (and ends the spell again).
  thread.Skip(milliseconds(2));
  EXPECT_EQ(thread.Spin(microseconds(10), kNoDeadline).size(), 1u);
  EXPECT_EQ(thread.yields(), 1);
  EXPECT_FALSE(gate.contended(thread.cycles()));
  thread.Skip(milliseconds(2));
  thread.set_yield_cycles(0);  // not reported: the spell goes on
  EXPECT_EQ(thread.Spin(microseconds(10), kNoDeadline).size(), 1u);
  EXPECT_TRUE(gate.contended(thread.cycles()));
}

// A peer on the same CPU runs when yielded to: the yield takes long
// (here 2^16 cycles, the first that counts as slow), and the spell goes on:
// turns every base interval, each contended.
TEST(BusyPollGateTest, AYieldThatRanAnotherThreadKeepsTheSpell) {
  BusyPollGate gate;
  SpinningThread thread(gate);
  thread.SettleThenGoAway(BusyPollGate::kQuickYieldCycles);
  const std::vector<microseconds> turns =
      thread.Spin(milliseconds(20), kNoDeadline);
  EXPECT_TRUE(gate.contended(thread.cycles()));
  EXPECT_GE(turns.size(), 80u);  // every ~210 us + the yield's 26 us
  EXPECT_EQ(thread.yields(), static_cast<int>(turns.size()));
}

// A peer spinning on the same CPU takes a slice longer than kAwayCycles
// (here ~1.7 ms) at each yield: the time a yield took is no gap, so the
// fds stay on their own interval (a look every ~13 ms, not one with every
// yield), and the spell is renewed from each such yield's end: it outlasts
// the ~27 ms a gap alone gives.
TEST(BusyPollGateTest, YieldsLongerThanAGapLookAtTheFdsOnTheirInterval) {
  BusyPollGate gate;
  SpinningThread thread(gate);
  thread.SettleThenGoAway(BusyPollGate::kAwayCycles * 2);
  const std::vector<microseconds> turns =
      thread.Spin(milliseconds(40), kNoDeadline);
  EXPECT_GE(turns.size(), 15u);  // every ~0.2 + 1.7 ms
  EXPECT_EQ(thread.yields(), static_cast<int>(turns.size()));
  EXPECT_LE(thread.looks(), 4);
  EXPECT_TRUE(gate.contended(thread.cycles()));
}

// A gate that never yields (the Engine's poller; a connection with
// busy_poll_yields false): a gap makes the turn due at once (the clock: a
// deadline may have passed) but starts no spell, so the turns do not come
// every base interval for nothing.
TEST(BusyPollGateTest, AGateThatNeverYieldsKeepsNoSpell) {
  BusyPollGate gate(/*yields=*/false);
  SpinningThread thread(gate);
  thread.Spin(milliseconds(50), kNoDeadline);
  thread.Skip(milliseconds(2));
  EXPECT_EQ(thread.Spin(microseconds(10), kNoDeadline).size(), 1u);
  EXPECT_FALSE(gate.contended(thread.cycles()));
  EXPECT_EQ(thread.yields(), 0);
  EXPECT_LE(thread.Spin(milliseconds(20), kNoDeadline).size(), 3u);
  EXPECT_EQ(gate.interval(), BusyPollGate::kMaxCycles);
}

TEST(BusyPollGateTest, ACounterAtAnImplausibleRateIsNotPlannedBy) {
  BusyPollGate gate;
  // The counter runs at 1,000 GHz: every look is "away", so every look
  // serves, and the calibration sees a rate no CPU has.
  uint64_t cycles = 1000;
  Deadline now = Deadline{} + std::chrono::seconds(1);
  for (int i = 0; i < 100; ++i) {
    cycles += uint64_t{100} * 1000 * 1000;
    now += microseconds(100);
    if (gate.Due(cycles, kNoDeadline)) {
      gate.Serviced(cycles, now, kNoDeadline, false);
    }
  }
  EXPECT_FALSE(gate.calibrated());
}

}  // namespace
}  // namespace rdma_transport
