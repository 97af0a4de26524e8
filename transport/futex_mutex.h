// File: transport/futex_mutex.h
//
// `FutexMutex`: a mutex of one 32-bit word. Taking and leaving it
// uncontended is one atomic instruction each, inline, with no call into
// libc; a thread that finds it held sleeps on the word (std::atomic::wait,
// a futex on Linux) and the unlock that sees sleepers wakes one. It is the
// Connection's lock: every message takes it twice (the send and the
// receive), and on the simulator's benchmark pthread_mutex_trylock and
// pthread_mutex_unlock cost about 60 instructions a pair against about 10
// for this (docs/performance.md, "Where the simulator's overhead goes").
//
// The three states are those of Drepper's "Futexes Are Tricky" (mutex 3):
// 0 free, 1 held, 2 held and maybe somebody sleeping. A locker that has to
// wait sets 2 before it sleeps, so the unlock that follows wakes it; one
// woken takes the lock in state 2 (it cannot know whether others sleep),
// which costs at most one futex wake that finds nobody.
//
// Contract: Lockable (lock, try_lock, unlock) for std::unique_lock and
// std::condition_variable_any; not recursive; unlock() only by the holder.
// Not fair: a running thread may take it before a woken one. No errors.
//
//   FutexMutex mu;
//   std::condition_variable_any cv;
//   {
//     std::unique_lock<FutexMutex> lock(mu);
//     cv.wait(lock, [&] { return ready; });
//   }

#ifndef RDMA_TRANSPORT_TRANSPORT_FUTEX_MUTEX_H_
#define RDMA_TRANSPORT_TRANSPORT_FUTEX_MUTEX_H_

#include <atomic>
#include <cstdint>

namespace rdma_transport {

class FutexMutex {
 public:
  FutexMutex() = default;
  FutexMutex(const FutexMutex&) = delete;
  FutexMutex& operator=(const FutexMutex&) = delete;

  void lock() {
    uint32_t expected = kFree;
    if (state_.compare_exchange_strong(expected, kHeld,
                                       std::memory_order_acquire,
                                       std::memory_order_relaxed)) [[likely]] {
      return;
    }
    LockContended(expected);
  }

  bool try_lock() {
    uint32_t expected = kFree;
    return state_.compare_exchange_strong(
        expected, kHeld, std::memory_order_acquire, std::memory_order_relaxed);
  }

  void unlock() {
    if (state_.exchange(kFree, std::memory_order_release) == kHeldWaiters)
        [[unlikely]] {
      WakeOne();
    }
  }

 private:
  static constexpr uint32_t kFree = 0;
  static constexpr uint32_t kHeld = 1;
  static constexpr uint32_t kHeldWaiters = 2;

  // Out of line: std::atomic::notify_one() inline made unlock() too big
  // for the compiler to inline std::unique_lock's unlock() (an out-of-line
  // call of 27 instructions a call on the message path, the simulator's
  // profile).
  [[gnu::noinline, gnu::cold]] void WakeOne() { state_.notify_one(); }

  // `seen`: the state the failed compare-exchange found (not kFree then).
  void LockContended(uint32_t seen) {
    // Announce a sleeper; if the lock was free meanwhile, it is ours (in
    // kHeldWaiters: see the file comment).
    if (seen != kHeldWaiters) {
      seen = state_.exchange(kHeldWaiters, std::memory_order_acquire);
    }
    while (seen != kFree) {
      state_.wait(kHeldWaiters, std::memory_order_relaxed);
      seen = state_.exchange(kHeldWaiters, std::memory_order_acquire);
    }
  }

  std::atomic<uint32_t> state_{kFree};
};

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TRANSPORT_FUTEX_MUTEX_H_
