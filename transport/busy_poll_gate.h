// File: transport/busy_poll_gate.h
//
// When a busy-polling wait takes its service turn: reads the clock (for its
// deadline and the connection's timers), polls the fds that report peer
// death and device events, and yields the CPU. Each of those is a system
// call (about 2 us each in a VM, where clock_gettime can be one too), so a
// wait that took one per look would cost a message more in system calls
// than the message itself (one doorbell write per send on rxe).
//
// The gate runs on the CPU's cycle counter (Env::CycleCount(), an
// instruction):
//  - The fds are due a look `interval` cycles after the last look, and
//    never sooner than `interval` after the wait last found a completion
//    (Progressed()): a completion is word from the peer's side (its process
//    posted a receive or a send, or its NIC acknowledged ours), so a
//    connection whose traffic flows needs no look to know its peer lives,
//    and one whose peer died stops finding completions and looks within
//    the interval. The interval starts at kBaseCycles (about 0.2 ms at
//    2-3 GHz) and doubles at each look that found nothing readable, up to
//    kMaxCycles (about 13 ms): a peer's death or a device event is seen
//    within that much of the last completion (a device's fatal error also
//    flushes the queues, which the next poll finds). Outside a contended
//    spell a service turn comes only when the fds are due or the wake is
//    (below). Looks on their interval alone cost 0.03 system calls a round
//    trip over rxe on a 6.1 kernel (2.03 against perftest's 2.00); with
//    the wait's progress deferring them, none (2.00).
//  - It never passes the wait's wake (its deadline or the next timer):
//    services calibrate cycles against the clock (over at least
//    kCalibrationSpan), and the next turn comes when the wake is due by the
//    counter, so deadlines and timers are seen on time, not an interval
//    late; a wait that brings a new deadline has it planned at its first
//    look. Until the counter is calibrated turns come every base interval.
//  - A gap of more than kAwayCycles between two looks means the thread was
//    descheduled (the CPU is shared: the peer may be waiting for it) or the
//    caller was away: the service turn is due at once (the clock: a
//    deadline or timer may have passed), and for the next kContendedCycles
//    (about 25 ms) the CPU counts as contended: a wait idle long enough
//    yields at its service turns (YieldDue(), below). The fds are looked
//    at only when their own interval is due (FdsDue()), gap or not: a
//    peer's death is seen within that interval as it would be without the
//    gap, and a yield is one system call where a yield and a look were two
//    (the look at once after each gap cost 0.07 calls a round trip over rxe
//    on 7.2).
//    On a CPU nobody else wants a turn does not yield: sched_yield would
//    be one more system call for nothing.
//  - A turn of a spell yields only once the wait has found nothing for
//    kYieldAfterIdleCycles (about 0.4 ms; Progressed() says it found
//    something): a reply that comes sooner (over rxe under TCG, a round
//    trip takes 0.1-0.3 ms) is neither delayed nor charged a system call
//    by a yield, and a wait that lasts longer, the one a worker runnable
//    on this CPU may be holding up, yields every base interval. Over rxe on
//    7.2 this took 0.13-0.17 system calls a round trip off 2.33, with the
//    99th percentile no worse (docs/performance.md, issue 12).
//  - A yield that gave the CPU away for less than kQuickYieldCycles
//    (Yielded()) is taken to have run nobody who needed it, so whatever took
//    the CPU away (a hypervisor running another vCPU, an interrupt) is not
//    helped by yielding, and the spell ends at once; the next gap starts
//    one again. A peer spinning on the same CPU takes its slice (a
//    millisecond or more) when yielded to, so a real contention keeps the
//    spell. Over rxe under qemu TCG (a 2-vCPU guest: two pollers and rxe's
//    kernel workers) 91% of the yields switched to another thread, most for
//    0.1-0.4 ms, and most of the rest came back in 6-26 us (4% fell on the
//    wrong side of the line); starting no spell for ~25 ms after a quick
//    yield (15a360d) saved 0.25 system calls a round trip there and doubled
//    the 99th percentile (docs/performance.md, issue 12).
//  - In a spell, a turn comes when the wait's next yield is due (it comes
//    of age, or a base interval after its last yield), the fds are due or
//    the wake is: a young wait reads no clock every base interval for a
//    yield it will not make (a spell's turns had grown the client's service
//    turns 5x on 6.1 when the idle rule came in).
//  - A gate made with `yields` false (ConnectionOptions::busy_poll_yields
//    false, and the Engine's poller, which looks at every turn) never
//    yields and keeps no spells: a gap only makes the turn due at once. Over
//    rxe on 7.2 that is perftest's 2.00 system calls a round trip and its
//    99th percentile (about 1.7x ours with yields: the yields are what let
//    rxe's kworkers in sooner than the scheduler's tick).
//  - Without a cycle counter (cycles == 0) every look is a service turn
//    that looks at the fds and yields.
//
// A value type for one waiting thread at a time; the Connection keeps one
// under its mutex. No errors: it only answers "now or not yet".
//
//   if (++turns >= kSpinTurns) {
//     turns = 0;
//     const uint64_t cycles = env.CycleCount();
//     if (gate.Due(cycles, deadline)) {
//       const Deadline now = env.Now();
//       const bool yield = gate.YieldDue(cycles);
//       const bool look = gate.FdsDue(cycles);
//       bool found = Service(now);
//       const uint64_t start = env.CycleCount();  // the wait alone is timed
//       const int ready = Wait(look ? fds : no_fds, yield);
//       if (yield && ready == 0) {
//         gate.Yielded(cycles, env.CycleCount() - start);
//       }
//       gate.Serviced(cycles, now, std::min(deadline, next_timer),
//                     found || ready > 0, look);
//     }
//   }

#ifndef RDMA_TRANSPORT_TRANSPORT_BUSY_POLL_GATE_H_
#define RDMA_TRANSPORT_TRANSPORT_BUSY_POLL_GATE_H_

#include <algorithm>
#include <chrono>
#include <cstdint>

#include "verbs_shim/env.h"

namespace rdma_transport {

class BusyPollGate {
 public:
  // `yields`: whether the poller yields in a contended spell (false: the
  // gate keeps none).
  explicit BusyPollGate(bool yields = true) : yields_(yields) {}

  static constexpr uint64_t kBaseCycles = uint64_t{1} << 19;
  static constexpr uint64_t kMaxCycles = uint64_t{1} << 25;
  static constexpr uint64_t kAwayCycles = uint64_t{1} << 21;
  static constexpr uint64_t kContendedCycles = uint64_t{1} << 26;
  // About 26 us at 2.5 GHz: a yield that ran nobody takes under 1 us on
  // hardware, 6-50 us in a qemu TCG guest; one that ran another thread
  // there took 0.1-0.4 ms.
  static constexpr uint64_t kQuickYieldCycles = uint64_t{1} << 16;
  // About 0.4 ms at 2.5 GHz: how long a wait finds nothing before its
  // turns in a spell yield.
  static constexpr uint64_t kYieldAfterIdleCycles = uint64_t{1} << 20;
  static constexpr std::chrono::microseconds kCalibrationSpan{500};

  // Whether the service turn is due at `cycles` (Env::CycleCount() now) for a
  // wait whose deadline is `deadline` (a deadline that changed since the
  // last turn is planned for here, not an interval later).
  bool Due(uint64_t cycles, Deadline deadline) {
    if (cycles == 0) return true;
    const bool first = last_look_ == 0;
    if (idle_since_ == 0) {
      // The first Due() since the wait found a completion: the fds wait
      // for their interval from here (not at the very first, which looks).
      idle_since_ = cycles;
      const uint64_t later = cycles + interval_;
      if (!first && static_cast<int64_t>(later - fds_next_) > 0) {
        fds_next_ = later;
      }
    }
    const uint64_t gap = cycles - last_look_;
    last_look_ = cycles;
    if (first) return true;
    if (gap > kAwayCycles) {
      if (yields_) contended_until_ = cycles + kContendedCycles;
      return true;
    }
    if (deadline != deadline_) {
      deadline_ = deadline;
      deadline_planned_ = ToCycles(deadline, &deadline_cycles_);
    }
    return static_cast<int64_t>(cycles - next_) >= 0 ||
           (deadline_planned_ &&
            static_cast<int64_t>(cycles - deadline_cycles_) >= 0);
  }

  // Whether the service turn at `cycles` is to look at the fds: when their
  // interval is due (counted from the last look, and from the wait's last
  // completion). Without a counter (0), always.
  bool FdsDue(uint64_t cycles) const {
    return cycles == 0 || static_cast<int64_t>(cycles - fds_next_) >= 0;
  }

  // Records the service turn taken at `cycles`, whose clock read `now`:
  // `wake` is when the wait must look again (its deadline or the next
  // timer), `looked` whether it looked at the fds (FdsDue()) and `found`
  // whether that look found one readable (false without a look).
  void Serviced(uint64_t cycles, Deadline now, Deadline wake, bool found,
                bool looked = true) {
    if (cycles == 0) return;
    Calibrate(cycles, now);
    if (looked) {
      interval_ = found ? kBaseCycles : std::min(interval_ * 2, kMaxCycles);
      fds_next_ = cycles + interval_;
    }
    // When the fds are due (a spell that ended at this turn leaves them due
    // sooner than interval_), and in a spell when the wait's next yield is:
    // as it comes of age, or a base interval after a yield.
    const int64_t fds_in =
        std::max<int64_t>(static_cast<int64_t>(fds_next_ - cycles), 0);
    uint64_t step = static_cast<uint64_t>(fds_in);
    if (contended(cycles)) {
      const int64_t of_age =
          static_cast<int64_t>(idle_since_ + kYieldAfterIdleCycles - cycles);
      const int64_t yield_in =
          of_age > 0 ? of_age : static_cast<int64_t>(kBaseCycles);
      step = static_cast<uint64_t>(std::min(fds_in, yield_in));
    }
    if (cycles_per_ns_ > 0) {
      const double wake_cycles =
          std::chrono::duration<double, std::nano>(wake - now).count() *
          cycles_per_ns_;
      if (wake_cycles < static_cast<double>(step)) {
        step = static_cast<uint64_t>(std::max(0.0, wake_cycles));
      }
    } else {
      step = kBaseCycles;
    }
    next_ = cycles + step;
  }

  // Records that the yield of the service turn taken at `turn` (its Due()
  // cycles) took `took` cycles: if that was quick, nobody else wanted the
  // CPU, and the contended spell ends (turns come on the fds' interval
  // again from this turn's Serviced() on). A slow one ran another thread:
  // the time it took is no gap (which would make the fds due at once and
  // cost a poll with every yield where a peer's slice outlasts
  // kAwayCycles), though one that long renews the spell as a gap would.
  // Call before Serviced().
  void Yielded(uint64_t turn, uint64_t took) {
    if (took < kQuickYieldCycles) {
      contended_until_ = turn;
      return;
    }
    const uint64_t end = turn + took;
    if (static_cast<int64_t>(end - last_look_) > 0) last_look_ = end;
    if (took > kAwayCycles) contended_until_ = end + kContendedCycles;
  }

  // Records that the poller found something (a completion): the wait that
  // follows counts its idle time from its first Due(). Inline, a store.
  void Progressed() { idle_since_ = 0; }

  // Whether the service turn at `cycles` yields the CPU: in a contended
  // spell, once the wait has found nothing for kYieldAfterIdleCycles (the
  // time since the first Due() after Progressed()). Without a counter (0),
  // always; for a gate that never yields, never.
  bool YieldDue(uint64_t cycles) const {
    return contended(cycles) &&
           (cycles == 0 || cycles - idle_since_ >= kYieldAfterIdleCycles);
  }

  // Whether the thread was descheduled within the last kContendedCycles
  // before `cycles` and no yield since came back quickly: service turns
  // then come every base interval and may yield (YieldDue()). Without a
  // counter (0), always; for a gate that never yields, never.
  bool contended(uint64_t cycles) const {
    return yields_ &&
           (cycles == 0 || static_cast<int64_t>(contended_until_ - cycles) > 0);
  }

  // The fds' interval: cycles from one look at them to the next outside a
  // contended spell (for tests and statistics).
  uint64_t interval() const { return interval_; }
  bool calibrated() const { return cycles_per_ns_ > 0; }

 private:
  void Calibrate(uint64_t cycles, Deadline now) {
    if (calibration_cycles_ == 0) {
      calibration_cycles_ = cycles;
      calibration_time_ = now;
      return;
    }
    const auto span = now - calibration_time_;
    if (span < kCalibrationSpan) return;
    const double rate =
        static_cast<double>(cycles - calibration_cycles_) /
        static_cast<double>(
            std::chrono::duration_cast<std::chrono::nanoseconds>(span).count());
    // A counter that went backwards or runs at an implausible rate (below
    // 10 MHz, above 100 GHz) is not a clock to plan by.
    cycles_per_ns_ = rate >= 0.01 && rate <= 100 ? rate : 0;
    calibration_cycles_ = cycles;
    calibration_time_ = now;
  }

  // The counter's value at `when`, if calibrated and within an hour.
  bool ToCycles(Deadline when, uint64_t* cycles) const {
    if (cycles_per_ns_ <= 0) return false;
    const double ns =
        std::chrono::duration<double, std::nano>(when - calibration_time_)
            .count();
    if (ns > 3.6e12) return false;
    *cycles = calibration_cycles_ +
              static_cast<uint64_t>(std::max(0.0, ns) * cycles_per_ns_);
    return true;
  }

  bool yields_;
  uint64_t last_look_ = 0;  // cycles at the previous Due()
  uint64_t next_ = 0;       // cycles at which the next turn is due
  uint64_t interval_ = kBaseCycles;
  uint64_t fds_next_ = 0;         // cycles at which the fds are due a look
  uint64_t contended_until_ = 0;  // cycles: yield until then
  uint64_t idle_since_ = 0;  // cycles at the first Due() since Progressed()
  Deadline deadline_{};      // the deadline of the last Due()
  bool deadline_planned_ = false;  // deadline_cycles_ holds it
  uint64_t deadline_cycles_ = 0;
  uint64_t calibration_cycles_ = 0;
  Deadline calibration_time_{};
  double cycles_per_ns_ = 0;
};

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TRANSPORT_BUSY_POLL_GATE_H_
