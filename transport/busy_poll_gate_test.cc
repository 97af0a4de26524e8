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
  // `deadline` on a connection whose next timer is `timer`.
  std::vector<microseconds> Spin(Clock::duration span, Deadline deadline,
                                 Deadline timer = kNoDeadline,
                                 microseconds look = microseconds(10)) {
    std::vector<microseconds> turns;
    const Deadline end = now_ + span;
    while (now_ < end) {
      now_ += look;
      if (gate_.Due(cycles(), deadline)) {
        turns.push_back(
            std::chrono::duration_cast<microseconds>(now_ - Deadline{}));
        if (yield_cycles_ > 0 && !found_ && gate_.contended(cycles())) {
          gate_.Yielded(yield_cycles_);
        }
        gate_.Serviced(cycles(), now_, std::min(deadline, timer), found_);
      }
    }
    return turns;
  }
  void Skip(Clock::duration away) { now_ += away; }
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
};

TEST(BusyPollGateTest, WithoutACycleCounterEveryLookIsAServiceTurn) {
  BusyPollGate gate;
  for (int i = 0; i < 5; ++i) {
    EXPECT_TRUE(gate.Due(0, kNoDeadline));
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
  // 100 ms at ~3.4 ms apart once grown: a few dozen turns, not 10,000 looks.
  EXPECT_LE(turns.size(), 45u);
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
  // Just after a service turn that planned the next one ~3.4 ms ahead, a
  // new wait comes with a deadline 1.5 ms ahead.
  while (thread.Spin(microseconds(10), kNoDeadline).empty()) {
  }
  const Deadline deadline = thread.now() + microseconds(1500);
  const std::vector<microseconds> turns =
      thread.Spin(milliseconds(20), deadline);
  // Some turn lands within one look (10 us) after the deadline, although
  // the interval alone would have passed it by up to 3.4 ms.
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
  // Descheduled for 2 ms (more than kAwayCycles): the next look serves,
  // whatever the interval said.
  thread.Skip(milliseconds(2));
  const std::vector<microseconds> after =
      thread.Spin(microseconds(10), kNoDeadline);
  EXPECT_EQ(after.size(), 1u);
  EXPECT_EQ(gate.interval(), BusyPollGate::kBaseCycles);
  EXPECT_TRUE(gate.contended(thread.cycles()));
}

TEST(BusyPollGateTest, AContendedCpuIsYieldedEveryBaseIntervalForAWhile) {
  BusyPollGate gate;
  SpinningThread thread(gate);
  thread.Spin(milliseconds(50), kNoDeadline);
  EXPECT_FALSE(gate.contended(thread.cycles())) << "nobody took the CPU";
  thread.Skip(milliseconds(2));  // descheduled
  // For the next ~27 ms (kContendedCycles at 2.5 GHz) turns come every
  // base interval (~210 us), each one yielding; then they spread out again.
  const std::vector<microseconds> contended =
      thread.Spin(milliseconds(20), kNoDeadline);
  EXPECT_TRUE(gate.contended(thread.cycles()));
  EXPECT_GE(contended.size(), 90u);
  EXPECT_EQ(gate.interval(), BusyPollGate::kBaseCycles);
  thread.Spin(milliseconds(60), kNoDeadline);
  EXPECT_FALSE(gate.contended(thread.cycles()));
  EXPECT_EQ(gate.interval(), BusyPollGate::kMaxCycles);
}

// The vCPU lost its CPU to the hypervisor, say: the first turn yields,
// the yield comes straight back (nobody else wanted this CPU), and the
// turns spread out again at once instead of yielding every base interval.
TEST(BusyPollGateTest, AYieldThatRanNobodyEndsTheContendedSpell) {
  BusyPollGate gate;
  SpinningThread thread(gate);
  thread.SettleThenGoAway(BusyPollGate::kQuickYieldCycles / 4);
  const std::vector<microseconds> turns =
      thread.Spin(milliseconds(20), kNoDeadline);
  EXPECT_FALSE(gate.contended(thread.cycles()));
  // 0.2 + 0.4 + 0.8 + 1.7 + 3.4 ms ...: about 9 turns in 20 ms, where a
  // contended spell takes about 95.
  EXPECT_LE(turns.size(), 12u);
  EXPECT_EQ(gate.interval(), BusyPollGate::kMaxCycles);
  // Away again within ~27 ms of that yield: no turn at once, no spell.
  thread.Skip(milliseconds(2));
  const std::vector<microseconds> after_gap =
      thread.Spin(microseconds(500), kNoDeadline);
  EXPECT_TRUE(after_gap.empty());
  EXPECT_FALSE(gate.contended(thread.cycles()));
  EXPECT_EQ(gate.interval(), BusyPollGate::kMaxCycles);
  // Later, a gap serves at once and yields again: the CPU may be wanted
  // by then.
  thread.Spin(milliseconds(30), kNoDeadline);
  thread.Skip(milliseconds(2));
  thread.set_yield_cycles(0);  // not reported: the spell goes on
  const std::vector<microseconds> later =
      thread.Spin(microseconds(10), kNoDeadline);
  EXPECT_EQ(later.size(), 1u);
  EXPECT_TRUE(gate.contended(thread.cycles()));
}

// Away with no spell to start (a quick yield shortly before) and the
// interval at its maximum: a deadline planned on the counter is still seen
// at the first look after it, where the same gate without one takes no
// turn.
TEST(BusyPollGateTest, AQuietGapStillSeesTheDeadline) {
  auto run = [](bool with_deadline) {
    BusyPollGate gate;
    SpinningThread thread(gate);
    thread.SettleThenGoAway(BusyPollGate::kQuickYieldCycles / 4);
    thread.Spin(milliseconds(10), kNoDeadline);  // the quick yield, growth
    EXPECT_EQ(gate.interval(), BusyPollGate::kMaxCycles);
    // Just after a turn: the next is ~3.4 ms away.
    for (int i = 0;
         i < 1000 && thread.Spin(microseconds(10), kNoDeadline).empty(); ++i) {
    }
    const Deadline deadline =
        with_deadline ? thread.now() + milliseconds(1) : kNoDeadline;
    EXPECT_TRUE(thread.Spin(microseconds(10), deadline).empty());  // planned
    thread.Skip(milliseconds(1));  // away (over kAwayCycles) past it
    return thread.Spin(microseconds(10), deadline).size();
  };
  EXPECT_EQ(run(true), 1u);
  EXPECT_EQ(run(false), 0u);
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
  EXPECT_GE(turns.size(), 90u);
  EXPECT_EQ(gate.interval(), BusyPollGate::kBaseCycles);
  // And a gap after it starts a spell at once: no quiet window was opened.
  thread.Skip(milliseconds(2));
  EXPECT_EQ(thread.Spin(microseconds(10), kNoDeadline).size(), 1u);
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
