// File: transport/busy_poll_gate.h
//
// When a busy-polling wait takes its service turn: reads the clock (for its
// deadline and the connection's timers), polls the fds that report peer
// death and device events, and yields the CPU. Each of those is a system
// call (about 2 us each in a VM, where clock_gettime can be one too), so a
// wait that took one per look would cost a message more in system calls
// than the message itself (one doorbell write per send on rxe).
//
// The gate runs on the CPU's cycle counter, an instruction:
//  - A service turn is due `interval` cycles after the last one. The
//    interval starts at kBaseCycles (about 0.2 ms at 2-3 GHz) and doubles
//    at each service turn that found nothing (no fd readable), up to
//    kMaxCycles (about 3 ms): a healthy connection under steady traffic
//    makes one service turn per hundreds of messages.
//  - It never passes the wait's wake (its deadline or the next timer):
//    services calibrate cycles against the clock (over at least
//    kCalibrationSpan), and the next turn comes when the wake is due by the
//    counter, so deadlines and timers are seen on time, not an interval
//    late; a wait that brings a new deadline has it planned at its first
//    look. Until the counter is calibrated the interval stays at the base.
//  - A gap of more than kAwayCycles between two looks means the thread was
//    descheduled (the CPU is shared: the peer may be waiting for it) or the
//    caller was away: the service turn is due at once, and for the next
//    kContendedCycles (about 25 ms) the CPU counts as contended: the
//    interval stays at the base and every service turn yields (contended()),
//    as every one did before the gate. On a CPU nobody else wants a turn
//    does not yield: sched_yield would be one more system call for nothing.
//  - A yield that gave the CPU away for less than kQuickYieldCycles
//    (Yielded()) is taken to have run nobody who needed it, so whatever took
//    the CPU away (a hypervisor running another vCPU, an interrupt, a
//    kernel worker that has finished) is not helped by yielding, and the
//    spell ends at once; and for the next kContendedCycles a gap starts
//    none (no turn at once, no fall back to the base interval: the
//    deadline and the timers are planned on the counter, which went on
//    counting). A peer spinning on the same CPU takes its slice (a
//    millisecond or more) when yielded to, so a real contention keeps the
//    spell; one that begins within those ~25 ms of a quick yield is met at
//    the first gap after them. Over rxe under qemu TCG the vCPUs lost the
//    CPU often enough to keep every turn yielding: 0.6-0.8 yields and as
//    many fd polls a round trip on each side, where ib_send_lat makes none
//    (docs/performance.md, issue 12).
//  - Without a cycle counter (cycles == 0) every look is a service turn.
//
// A value type for one waiting thread at a time; the Connection keeps one
// under its mutex. No errors: it only answers "now or not yet".
//
//   if (++turns >= kSpinTurns) {
//     turns = 0;
//     const uint64_t cycles = CycleCount();
//     if (gate.Due(cycles, deadline)) {
//       const Deadline now = env.Now();
//       const bool yield = gate.contended(cycles);
//       bool found = Service(now);
//       if (yield) {
//         const uint64_t start = CycleCount();  // the wait alone is timed
//         found |= PollFdsAndYield();
//         if (!found) gate.Yielded(CycleCount() - start);
//       }
//       gate.Serviced(cycles, now, std::min(deadline, next_timer), found);
//     }
//   }

#ifndef RDMA_TRANSPORT_TRANSPORT_BUSY_POLL_GATE_H_
#define RDMA_TRANSPORT_TRANSPORT_BUSY_POLL_GATE_H_

#include <algorithm>
#include <chrono>
#include <cstdint>

#include "verbs_shim/env.h"

namespace rdma_transport {

// The CPU's cycle counter (an instruction, never a system call); 0 where
// there is none.
inline uint64_t CycleCount() {
#if defined(__x86_64__) || defined(__i386__)
  return __builtin_ia32_rdtsc();
#else
  return 0;
#endif
}

class BusyPollGate {
 public:
  static constexpr uint64_t kBaseCycles = uint64_t{1} << 19;
  static constexpr uint64_t kMaxCycles = uint64_t{1} << 23;
  static constexpr uint64_t kAwayCycles = uint64_t{1} << 21;
  static constexpr uint64_t kContendedCycles = uint64_t{1} << 26;
  // About 26 us at 2.5 GHz: a poll and a yield that ran nobody take 1 us
  // on hardware, 4-5 us in a qemu TCG guest (2 us a system call).
  static constexpr uint64_t kQuickYieldCycles = uint64_t{1} << 16;
  static constexpr std::chrono::microseconds kCalibrationSpan{500};

  // Whether the service turn is due at `cycles` (CycleCount() now) for a
  // wait whose deadline is `deadline` (a deadline that changed since the
  // last turn is planned for here, not an interval later).
  bool Due(uint64_t cycles, Deadline deadline) {
    if (cycles == 0) return true;
    const uint64_t gap = cycles - last_look_;
    const bool first = last_look_ == 0;
    last_look_ = cycles;
    if (first) return true;
    if (gap > kAwayCycles && static_cast<int64_t>(cycles - quiet_until_) >= 0) {
      interval_ = kBaseCycles;
      contended_until_ = cycles + kContendedCycles;
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

  // Records the service turn taken at `cycles`, whose clock read `now`:
  // `wake` is when the wait must look again (its deadline or the next
  // timer), `found` whether the turn found anything to do.
  void Serviced(uint64_t cycles, Deadline now, Deadline wake, bool found) {
    if (cycles == 0) return;
    Calibrate(cycles, now);
    interval_ = found || contended(cycles)
                    ? kBaseCycles
                    : std::min(interval_ * 2, kMaxCycles);
    uint64_t step = kBaseCycles;
    if (cycles_per_ns_ > 0) {
      const double wake_cycles =
          std::chrono::duration<double, std::nano>(wake - now).count() *
          cycles_per_ns_;
      step = wake_cycles < static_cast<double>(interval_)
                 ? static_cast<uint64_t>(std::max(0.0, wake_cycles))
                 : interval_;
    }
    next_ = cycles + step;
  }

  // Records that a service turn's yield (with its fd poll) took `cycles`:
  // if that was quick, nobody else wanted the CPU: the contended spell ends
  // (the interval may grow again from this turn's Serviced() on) and gaps
  // start none for kContendedCycles. Call before Serviced().
  void Yielded(uint64_t cycles) {
    if (cycles >= kQuickYieldCycles) return;
    contended_until_ = last_look_;
    quiet_until_ = last_look_ + kContendedCycles;
  }

  // Whether the thread was descheduled within the last kContendedCycles
  // before `cycles` (outside the quiet window of a quick yield) and no
  // yield since came back quickly: a service turn then yields the CPU.
  // Without a counter (0), always.
  bool contended(uint64_t cycles) const {
    return cycles == 0 || static_cast<int64_t>(contended_until_ - cycles) > 0;
  }

  // Cycles until the next service turn (for tests and statistics).
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

  uint64_t last_look_ = 0;  // cycles at the previous Due()
  uint64_t next_ = 0;       // cycles at which the next turn is due
  uint64_t interval_ = kBaseCycles;
  uint64_t contended_until_ = 0;   // cycles: yield until then
  uint64_t quiet_until_ = 0;       // cycles: a gap starts no spell until then
  Deadline deadline_{};            // the deadline of the last Due()
  bool deadline_planned_ = false;  // deadline_cycles_ holds it
  uint64_t deadline_cycles_ = 0;
  uint64_t calibration_cycles_ = 0;
  Deadline calibration_time_{};
  double cycles_per_ns_ = 0;
};

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TRANSPORT_BUSY_POLL_GATE_H_
