#include "sim/sim_env.h"

#include <poll.h>
#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <thread>

#include "sim/fabric.h"
#include "sim/sim_network.h"

namespace rdma_transport::sim {
namespace {

// A blocked waiter looks at its fds again this often in real time: a stream
// written by a thread that is still running shows up without a Notify().
constexpr auto kFdRecheck = std::chrono::milliseconds(1);
constexpr int kSpinTurnsBeforeSleep = 256;

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

int PollNow(std::span<pollfd> fds) {
  for (pollfd& fd : fds) fd.revents = 0;
  int ready = poll(fds.data(), fds.size(), 0);
  if (ready >= 0) return ready;
  if (errno == EINTR) return 0;
  for (pollfd& fd : fds) fd.revents = POLLERR;
  return static_cast<int>(fds.size());
}

std::atomic<uint64_t> next_env_id{1};
// The SimEnv (by id) the calling thread was last found to take part in.
thread_local uint64_t participant_of = 0;

std::string ThreadName(std::thread::id id) {
  std::ostringstream name;
  name << id;
  return name.str();
}

}  // namespace

SimEnv::SimEnv(Fabric* fabric, ClockMode mode)
    : fabric_(fabric),
      mode_(mode),
      id_(next_env_id.fetch_add(1)),
      creator_(std::this_thread::get_id()) {
  if (mode_ == ClockMode::kVirtual) {
    network_ = std::make_unique<SimNetwork>(this);
  }
}

SimEnv::~SimEnv() = default;

std::chrono::nanoseconds SimEnv::Elapsed() { return fabric_->Now(); }

Deadline SimEnv::Now() {
  if (mode_ == ClockMode::kWallClock) return Clock::now();
  return kVirtualEpoch +
         std::chrono::duration_cast<Clock::duration>(fabric_->Now());
}

SetupNetwork* SimEnv::setup_network() { return network_.get(); }

uint64_t SimEnv::PrepareWait() {
  return generation_.load(std::memory_order_seq_cst);
}

void SimEnv::Notify() {
  generation_.fetch_add(1, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) {
    std::lock_guard<std::mutex> lock(mu_);
    cv_.notify_all();
  }
}

void SimEnv::AddParticipant() {
  std::lock_guard<std::mutex> lock(mu_);
  ++participants_;
  ++unjoined_;
}

void SimEnv::JoinAsParticipant() {
  std::lock_guard<std::mutex> lock(mu_);
  if (unjoined_ == 0) {
    std::fprintf(stderr,
                 "sim: JoinAsParticipant() on thread %s, but no "
                 "AddParticipant() counted it before it started; start "
                 "threads with RunInThread() (verbs_shim/env_thread.h)\n",
                 ThreadName(std::this_thread::get_id()).c_str());
    std::abort();
  }
  --unjoined_;
  joined_.push_back(std::this_thread::get_id());
}

void SimEnv::RemoveParticipant() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto me =
        std::find(joined_.begin(), joined_.end(), std::this_thread::get_id());
    if (me != joined_.end()) {
      joined_.erase(me);
      if (participant_of == id_) participant_of = 0;
    } else if (unjoined_ > 0) {
      --unjoined_;  // counted, never joined (it never waited)
    } else {
      std::fprintf(stderr,
                   "sim: RemoveParticipant() on thread %s, which does not "
                   "take part in the fabric's time\n",
                   ThreadName(std::this_thread::get_id()).c_str());
      std::abort();
    }
    // News first: a waiter that looked before this thread finished (say, at
    // its `done` flag) must not count as blocked on an up-to-date token once
    // the count drops, or it would see a deadlock that is not there.
    generation_.fetch_add(1, std::memory_order_seq_cst);
    --participants_;
  }
  // The others may all be blocked now: let one of them move the clock.
  Notify();
}

size_t SimEnv::BlockedLocked() const {
  const uint64_t generation = generation_.load();
  size_t blocked = 0;
  for (const Waiter* waiter : waiters_) {
    if (waiter->token == generation) ++blocked;
  }
  return blocked;
}

void SimEnv::CheckParticipant() {
  std::lock_guard<std::mutex> lock(mu_);
  const std::thread::id me = std::this_thread::get_id();
  if (me == creator_ ||
      std::find(joined_.begin(), joined_.end(), me) != joined_.end()) {
    participant_of = id_;
    return;
  }
  std::fprintf(
      stderr,
      "sim: thread %s waits on the simulated fabric's virtual clock without "
      "taking part in its time, so virtual time would move under it (%d "
      "participant(s): the thread that made the fabric and %zu joined, %d "
      "counted but not yet joined). Start threads that use a simulated "
      "fabric with RunInThread(env, fn) (verbs_shim/env_thread.h), not "
      "std::thread or std::async; or count them with AddParticipant() and "
      "JoinAsParticipant()\n",
      ThreadName(me).c_str(), participants_.load(), joined_.size(), unjoined_);
  std::abort();
}

int SimEnv::Wait(uint64_t token, std::span<pollfd> fds, Deadline wake,
                 WaitKind kind) {
  if (mode_ == ClockMode::kWallClock) {
    return Env::Real().Wait(token, fds, wake, kind);
  }
  if (participant_of != id_) [[unlikely]] {
    CheckParticipant();
  }
  if (!OnClockOf(wake, kVirtualEpoch)) [[unlikely]] {
    std::fprintf(stderr,
                 "sim: Env::Wait() on the simulated fabric's virtual clock "
                 "was given a wake time on the real clock (DeadlineIn(), "
                 "Env::Real()), which lies before the virtual epoch; take it "
                 "from this Env: env.DeadlineIn()\n");
    std::abort();
  }
  // Another participant is usually about to produce what this one waits
  // for: look again for a while before sleeping (time cannot move while
  // this thread spins, as it is not blocked yet).
  if (fds.empty() && participants_ > 1) {
    for (int turn = 0; turn < kSpinTurnsBeforeSleep; ++turn) {
      if (generation_.load(std::memory_order_acquire) != token) return 0;
      if (turn % 16 == 15) {
        sched_yield();
      } else {
        CpuRelax();
      }
    }
  }
  std::unique_lock<std::mutex> lock(mu_);
  Waiter me{token, fds, wake};
  waiters_.push_back(&me);
  sleepers_.fetch_add(1);
  int result = 0;
  while (true) {
    if (!fds.empty() && (result = PollNow(fds)) > 0) break;
    if (generation_.load() != token) break;
    if (Now() >= wake) break;
    if (BlockedLocked() >= static_cast<size_t>(participants_.load())) {
      AdvanceLocked(lock);
      continue;
    }
    cv_.wait_for(lock, kFdRecheck);
  }
  sleepers_.fetch_sub(1);
  waiters_.erase(std::find(waiters_.begin(), waiters_.end(), &me));
  return result;
}

void SimEnv::AdvanceLocked(std::unique_lock<std::mutex>& lock) {
  // A readable fd is news for its waiter, not a reason to move the clock.
  for (Waiter* waiter : waiters_) {
    if (!waiter->fds.empty() && PollNow(waiter->fds) > 0) {
      generation_.fetch_add(1);
      cv_.notify_all();
      return;
    }
  }
  Deadline target = kNoDeadline;
  for (const Waiter* waiter : waiters_) target = std::min(target, waiter->wake);
  const std::chrono::nanoseconds now = fabric_->Now();
  std::chrono::nanoseconds step;
  const std::optional<std::chrono::nanoseconds> next_event =
      fabric_->NextEventTime();
  if (target == kNoDeadline && !next_event.has_value()) {
    std::fprintf(stderr,
                 "sim: deadlock at virtual time %.9f s: all %d participating "
                 "thread(s) wait with no deadline and the fabric has nothing "
                 "to do\n",
                 now.count() / 1e9, participants_.load());
    std::abort();
  }
  step = target == kNoDeadline
             ? std::chrono::nanoseconds::max()
             : std::max(std::chrono::nanoseconds(0),
                        std::chrono::duration_cast<std::chrono::nanoseconds>(
                            target - kVirtualEpoch) -
                            now);
  if (next_event.has_value()) {
    step = std::min(step,
                    std::max(std::chrono::nanoseconds(0), *next_event - now));
  }
  if (now + step > time_limit_) {
    std::fprintf(stderr,
                 "sim: virtual time would pass its limit of %.3f s (now %.9f "
                 "s, %d participant(s) waiting): the scenario never ends\n",
                 time_limit_.count() / 1e9, now.count() / 1e9,
                 participants_.load());
    std::abort();
  }
  fabric_->AdvanceClockQuietly(step);
  advances_.fetch_add(1);
  generation_.fetch_add(1);
  cv_.notify_all();
}

}  // namespace rdma_transport::sim
