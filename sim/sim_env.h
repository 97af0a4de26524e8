// File: sim/sim_env.h
//
// `SimEnv` is the Env (verbs_shim/env.h) of a simulated Fabric: the
// transport's clock, waits and setup channel, driven by the fabric. Get it
// from `fabric.env()`; SimVerbs hands it to the transport (Verbs::env()), so
// a Context opened on simulated devices runs on it with no further wiring.
//
//   Fabric fabric;                                  // ClockMode::kVirtual
//   SimVerbs verbs(&fabric);
//   // ... Context::Open(verbs, ...), Listener, Connect ...
//   Env& env = fabric.env();
//   absl::StatusOr<size_t> n =
//       connection->Receive(buffer, env.DeadlineIn(std::chrono::seconds(5)));
//   // nothing sent: kDeadlineExceeded at exactly 5 s of virtual time, at once
//
// ClockMode::kVirtual (the default). Now() is the fabric's virtual clock
// (kVirtualEpoch + Fabric::Now(): verbs_shim/env.h says why a virtual clock
// starts there, and how a deadline from the real clock is told from one of
// this clock and refused). Virtual time moves only when every
// participating thread is blocked in Wait() with nothing new to look at; it
// then jumps to the earliest of their wake times and the fabric's next
// pending event, running the fabric's events up to it. A scenario driven by
// one thread is therefore a deterministic function of its inputs, and a
// five-second timeout costs no real time. Threads beyond the one that made
// the fabric take part through AddParticipant()/RemoveParticipant()
// (RunInThread(), verbs_shim/env_thread.h); a thread blocked anywhere but in
// Wait() (a plain std::future::get, a TCP read) stops the clock. A thread
// that waits in Wait() without taking part (a plain std::thread or
// std::async) would let time move under it: SimEnv aborts naming
// RunInThread instead, as it does for a wake time on the real clock.
// Connection setup runs over an in-memory SetupNetwork: Listen("host:0")
// picks a port, Connect() finds the listener by its address string, and the
// streams are AF_UNIX socket pairs (bytes arrive as they are written). When
// every participant waits forever with nothing pending, the scenario is
// deadlocked: SimEnv prints every waiter and aborts, instead of hanging.
// Likewise when virtual time passes `time_limit` (default 24 h).
//
// ClockMode::kWallClock. Now() is the steady clock, Wait() is poll(2), and
// setup runs over real TCP: for tests that need real sockets (floods of
// them) or real threads racing. The fabric keeps its own virtual clock for
// wire timing, as before there was a SimEnv.
//
// Thread-safety: every method may be called from any thread. Owned by its
// Fabric; lock order: the SimEnv's lock before the fabric's.

#ifndef RDMA_TRANSPORT_SIM_SIM_ENV_H_
#define RDMA_TRANSPORT_SIM_SIM_ENV_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "verbs_shim/env.h"

namespace rdma_transport::sim {

class Fabric;
class SimNetwork;

enum class ClockMode { kVirtual, kWallClock };

class SimEnv final : public Env {
 public:
  SimEnv(Fabric* fabric, ClockMode mode);
  ~SimEnv() override;

  ClockMode mode() const { return mode_; }
  Deadline Now() override;
  bool virtual_time() const override { return mode_ == ClockMode::kVirtual; }
  uint64_t PrepareWait() override;
  int Wait(uint64_t token, std::span<pollfd> fds, Deadline wake,
           WaitKind kind) override;
  void Notify() override;
  void AddParticipant() override;
  void JoinAsParticipant() override;
  void RemoveParticipant() override;
  SetupNetwork* setup_network() override;

  // Virtual time since the fabric was made, as Fabric::Now().
  std::chrono::nanoseconds Elapsed();
  void set_time_limit(std::chrono::nanoseconds limit) { time_limit_ = limit; }
  // How often virtual time has jumped, for tests and reports.
  uint64_t advances() const { return advances_.load(); }

 private:
  struct Waiter {
    uint64_t token;
    std::span<pollfd> fds;
    Deadline wake;
  };
  // Every participant is blocked on an up-to-date token: find news (a
  // readable fd) or move the clock. Requires mu_.
  void AdvanceLocked(std::unique_lock<std::mutex>& lock);
  size_t BlockedLocked() const;
  // Aborts, saying why, unless the calling thread takes part in this
  // clock's time; remembered per thread, so a participant pays it once.
  void CheckParticipant();

  Fabric* const fabric_;
  const ClockMode mode_;
  std::unique_ptr<SimNetwork> network_;
  std::chrono::nanoseconds time_limit_ = std::chrono::hours(24);

  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> sleepers_{0};
  std::atomic<int> participants_{1};
  std::vector<Waiter*> waiters_;
  std::atomic<uint64_t> advances_{0};
  // Who takes part: the thread that made the clock, the threads that
  // joined, and how many counted by AddParticipant() have not joined yet.
  const uint64_t id_;  // unique per SimEnv, for the per-thread memo
  const std::thread::id creator_;
  std::vector<std::thread::id> joined_;
  int unjoined_ = 0;
};

}  // namespace rdma_transport::sim

#endif  // RDMA_TRANSPORT_SIM_SIM_ENV_H_
