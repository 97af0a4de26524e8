// File: transport/biased_mutex.cc
//
// BiasedMutex's slow paths: taking an unowned bias, revoking another
// thread's, and the asymmetric barrier (biased_mutex.h).

#include "transport/biased_mutex.h"

#include <linux/futex.h>
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace rdma_transport {
namespace {

// The revoker's steps while an owner sits in the middle of its unlock():
// yields first (it is a few instructions from done), then futex sleeps of
// 50 us doubling to 1 ms (it was preempted there).
constexpr int kLeavingYields = 64;
constexpr long kFirstLeavingPauseNs = 50'000;
constexpr long kLastLeavingPauseNs = 1'000'000;

// Sleeps while the 32-bit word at `word` holds `expected`: until a wake,
// a signal, or `timeout` (nullptr: none). The caller looks again either way.
void FutexWait(const void* word, uint32_t expected, const timespec* timeout) {
  syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, expected, timeout, nullptr, 0);
}

long Membarrier(int command) { return syscall(__NR_membarrier, command, 0, 0); }

// Every running thread of this process executes a full barrier before
// this returns (threads not running pass one when they are scheduled).
void HeavyBarrier() {
  if (Membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0) [[likely]]
    return;
  // Registered in BiasingAvailable() before any mutex was biased: only a
  // kernel bug gets here, and without the barrier no revocation is safe.
  std::fprintf(stderr,
               "rdma_transport: membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) "
               "failed after registration: %s; cannot revoke a BiasedMutex\n",
               std::strerror(errno));
  std::abort();
}

}  // namespace

bool BiasedMutex::BiasingAvailable() {
  static const bool available = [] {
    const long commands = Membarrier(MEMBARRIER_CMD_QUERY);
    if (commands < 0 || (commands & MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0) {
      return false;
    }
    return Membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0;
  }();
  return available;
}

BiasedMutex::State BiasedMutex::state() const {
  const uintptr_t owner = owner_.load(std::memory_order_acquire);
  if (owner == kUnowned) return State::kUnowned;
  if (owner == kRevoked) return State::kRevoked;
  return State::kBiased;  // a revocation under way counts as biased still
}

void BiasedMutex::Recursive() {
  std::fprintf(stderr,
               "rdma_transport: a BiasedMutex locked again by the thread "
               "that holds it (it is not recursive)\n");
  std::abort();
}

void BiasedMutex::WakeRevoker(const void* word) {
  // FUTEX_WAKE reads no user memory (the mutex may be gone by now), and
  // the kernel orders our store before its look for sleepers (the
  // smp_mb() of futex_wake() that pairs with the waiter's).
  syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}

void BiasedMutex::BackOff(std::atomic<uint32_t>& busy) {
  const void* word = &busy;
  busy.store(0, std::memory_order_release);
  WakeRevoker(word);  // the revoker may have seen our 1
}

void BiasedMutex::LeaveDuringRevocation() {
  // A holder that finds kRevoking cannot tell from owner_ which bias it
  // holds, but its own word can: while the first bias is being revoked
  // nobody has ever owned the second (its word is 0), and the second's
  // owner inside has its word at 1. One store: after it the revoker may
  // go on, take the mutex, and even destroy it (the wake that follows
  // uses only the word's address, as FutexMutex's unlock does).
  BackOff(busy_[busy_[1].load(std::memory_order_relaxed) != 0 ? 1 : 0]);
}

bool BiasedMutex::FinishRevocation(uintptr_t from) {
  HeavyBarrier();
  std::atomic<uint32_t>& busy = busy_[from & kSecondBias];
  int leaving_turns = 0;
  long pause_ns = kFirstLeavingPauseNs;
  for (uint32_t seen; (seen = busy.load(std::memory_order_acquire)) != 0;) {
    if (seen != kLeaving) {
      // Inside: it wakes us when it leaves (the header's handshake).
      FutexWait(&busy, seen, nullptr);
      continue;
    }
    // Leaving: its unlock() may have looked at owner_ before our barrier
    // and will store its 0 without a wake. A few instructions to go,
    // unless it was preempted there: then sleep in bounded steps (woken
    // early if it did see us), never on a wake that may not come.
    if (++leaving_turns <= kLeavingYields) {
      std::this_thread::yield();
      continue;
    }
    const timespec pause = {0, pause_ns};
    FutexWait(&busy, kLeaving, &pause);
    pause_ns = std::min(2 * pause_ns, kLastLeavingPauseNs);
  }
  const bool take_bias = (from & kSecondBias) == 0;
  owner_.store(take_bias ? ThisThread() | kSecondBias : kRevoked,
               std::memory_order_release);
  owner_.notify_all();
  return take_bias;
}

void BiasedMutex::LockSlow() {
  const uintptr_t me = ThisThread();
  while (true) {
    uintptr_t owner = owner_.load(std::memory_order_acquire);
    if (owner == kRevoked) {
      fallback_.lock();
      return;
    }
    if (owner == kRevoking) {
      owner_.wait(kRevoking, std::memory_order_acquire);
      continue;
    }
    if ((owner & ~kSecondBias) == me) {  // ours; we backed off before
      if (EnterBiased(owner)) return;
      continue;
    }
    if (owner == kUnowned) {
      if (ClaimUnowned(/*wait=*/true) && EnterBiased(me)) return;
      continue;
    }
    // Another thread's bias.
    if (!owner_.compare_exchange_strong(owner, kRevoking,
                                        std::memory_order_acq_rel)) {
      continue;
    }
    if (!FinishRevocation(owner)) {
      fallback_.lock();
      return;
    }
    if (EnterBiased(me | kSecondBias)) return;
  }
}

bool BiasedMutex::ClaimUnowned(bool wait) {
  // Under the FutexMutex: a LockWithoutBias() holder is inside it.
  if (wait) {
    fallback_.lock();
  } else if (!fallback_.try_lock()) {
    return false;
  }
  uintptr_t expected = kUnowned;
  const bool claimed = owner_.compare_exchange_strong(
      expected, ThisThread(), std::memory_order_acq_rel);
  fallback_.unlock();
  return claimed;
}

void BiasedMutex::LockWithoutBias() {
  if (owner_.load(std::memory_order_acquire) == kUnowned) {
    fallback_.lock();
    // Nobody can claim the bias while we hold the FutexMutex.
    if (owner_.load(std::memory_order_acquire) == kUnowned) return;
    fallback_.unlock();
  }
  lock();
}

}  // namespace rdma_transport
