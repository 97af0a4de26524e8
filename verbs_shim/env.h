// File: verbs_shim/env.h
//
// `Env` is everything the transport needs from its surroundings besides the
// verbs themselves: the time, the way to wait, and the channel connection
// setup runs over. It is LevelDB's `Env` applied to time and waiting: the
// transport never reads a clock, sleeps or polls a file descriptor except
// through it, so the same code runs on the real clock (`Env::Real()`, what
// libibverbs' backend hands out) and on a simulated fabric's virtual clock
// (sim/sim_env.h), where waiting for a deadline advances the fabric instead
// of sleeping and a whole scenario runs deterministically.
//
//   Env& env = verbs.env();
//   const Deadline deadline = env.DeadlineIn(std::chrono::seconds(1));
//   while (!work_available()) {
//     const uint64_t token = env.PrepareWait();   // before the last look
//     if (work_available()) break;
//     pollfd fds[] = {{fd, POLLIN, 0}};
//     if (env.Wait(token, fds, deadline, WaitKind::kBlock) == 0 &&
//         env.Now() >= deadline) {
//       return absl::DeadlineExceededError("no work before the deadline");
//     }
//   }
//
// The waiting protocol is an event count. A waiter takes a token with
// PrepareWait(), looks for work, and only then calls Wait(token, ...). Wait
// returns when one of `fds` is readable (their revents are set and the count
// is returned), when `wake` has passed (0), and, on a virtual clock, when
// Notify() was called after the token was taken (0), so a waiter whose work
// is produced by another thread's verbs call never misses it. Anything that
// may end another thread's wait without making one of its fds readable
// (handing over a lock-protected result, a completion moved into a queue)
// calls Notify(). On the real clock Notify() costs nothing and Wait() is
// poll(2) (kBlock) or poll(2) with a zero timeout plus sched_yield (kSpin,
// for busy pollers) or without it (kPeek, for a busy poller that has not
// been descheduled lately: a yield would only cost a system call).
//
// Threads on a virtual clock. Virtual time moves only when every
// participating thread is blocked in Wait() and nothing has happened since
// each looked: then the clock jumps to the earliest wake time (or fabric
// event) of all of them. The thread that created the clock participates; a
// thread started to take part must be counted with AddParticipant() before
// it starts, call JoinAsParticipant() first thing and RemoveParticipant()
// when it ends (RunInThread() in verbs_shim/env_thread.h does all three);
// waiting for it must go through Wait(). A thread that waits without taking
// part would let time move under it: a virtual clock aborts naming
// RunInThread instead. All three are no-ops on the real clock.
//
// Thread-safety: every method may be called from any thread.
// Ownership: Env::Real() lives for the whole process; other Envs are owned by
// whoever made them (the simulated Fabric) and must outlive their users.

#ifndef RDMA_TRANSPORT_VERBS_SHIM_ENV_H_
#define RDMA_TRANSPORT_VERBS_SHIM_ENV_H_

#include <poll.h>

#include <chrono>
#include <cstdint>
#include <span>

namespace rdma_transport {

using Clock = std::chrono::steady_clock;
// A point on an Env's clock (Env::Real(): the steady clock).
using Deadline = Clock::time_point;
inline constexpr Deadline kNoDeadline = Deadline::max();
// Do not wait: a call given kNoWait takes what is there and returns at once
// (each call says what it looks at); a deadline already past, without a
// clock read to tell. Like kNoDeadline, it belongs to every clock.
inline constexpr Deadline kNoWait = Deadline::min();

// Both kinds of clock give steady_clock time points, so a deadline's type
// cannot say which clock it came from; its value does. A virtual clock
// (sim/sim_env.h) counts from kVirtualEpoch, 2^62 ns (146 years) past the
// steady clock's zero, which the steady clock (time since boot) never
// reaches, and a scenario never runs 146 years. So a deadline and the time
// of the Env it is given to are on one clock exactly when both lie on the
// same side of kVirtualEpoch; kNoDeadline and kNoWait belong to every clock.
// The transport's calls refuse a deadline from the other clock, which would
// otherwise pass at once or never (transport/deadline.h), and Wait() aborts
// on such a wake time.
inline constexpr Deadline kVirtualEpoch =
    Deadline(std::chrono::nanoseconds(int64_t{1} << 62));

// Whether `deadline` is on the clock that `now` was read from.
constexpr bool OnClockOf(Deadline deadline, Deadline now) {
  return deadline == kNoDeadline || deadline == kNoWait ||
         (deadline >= kVirtualEpoch) == (now >= kVirtualEpoch);
}

class SetupNetwork;

enum class WaitKind {
  kBlock,  // sleep until an fd is readable, `wake` passes or (virtual) news
  kSpin,   // a busy poller's turn: look at the fds, give up the CPU once
  kPeek,   // a busy poller's turn on a CPU it has to itself: the fds only
};

class Env {
 public:
  Env() = default;
  Env(const Env&) = delete;
  Env& operator=(const Env&) = delete;
  virtual ~Env() = default;

  // The process-wide real environment: steady clock, poll(2), TCP.
  static Env& Real();

  virtual Deadline Now() = 0;
  // The CPU's cycle counter, by which a busy poller paces the turns on
  // which it reads Now() and waits (transport/busy_poll_gate.h): an
  // instruction (rdtsc), never a system call; 0 where the CPU has none. Not
  // a clock: its rate is learnt against Now(). Never read on a virtual
  // clock; a test's Env may script it to drive a busy poller's pacing.
  virtual uint64_t CycleCount() {
#if defined(__x86_64__) || defined(__i386__)
    return __builtin_ia32_rdtsc();
#else
    return 0;
#endif
  }
  // Now() + timeout, saturating at kNoDeadline.
  Deadline DeadlineIn(Clock::duration timeout);
  // True when time is simulated: no wait costs real time.
  virtual bool virtual_time() const { return false; }

  // Waits until `deadline` (a virtual clock: until every participant waits
  // and time has moved there).
  void SleepUntil(Deadline deadline);

  virtual uint64_t PrepareWait() { return 0; }
  // See the file comment. `fds` may be empty. Returns the number of readable
  // fds (revents set), or 0 when woken otherwise. Never fails: a poll(2)
  // error other than EINTR marks every fd POLLERR and returns their count.
  // A `wake` from another clock (OnClockOf) is a bug that would sleep
  // forever or not at all: the process aborts with a message saying so.
  virtual int Wait(uint64_t token, std::span<pollfd> fds, Deadline wake,
                   WaitKind kind) = 0;
  virtual void Notify() {}

  // AddParticipant() on the starting thread, before the new one starts;
  // JoinAsParticipant() on the new thread, before it uses the Env;
  // RemoveParticipant() on it when it ends.
  virtual void AddParticipant() {}
  virtual void JoinAsParticipant() {}
  virtual void RemoveParticipant() {}

  // The channel connection setup runs over; nullptr: real TCP.
  virtual SetupNetwork* setup_network() { return nullptr; }
};

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_VERBS_SHIM_ENV_H_
