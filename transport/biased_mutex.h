// File: transport/biased_mutex.h
//
// `BiasedMutex`: a mutex that belongs to the thread that uses it. The
// first thread to take it owns its *bias*: from then on that thread takes
// and leaves it with plain loads and stores, no locked instruction and no
// fence. Another thread that wants it *revokes* the bias: it marks the
// mutex, makes every running thread of the process execute a full memory
// barrier (membarrier(2), MEMBARRIER_CMD_PRIVATE_EXPEDITED), waits for the
// owner to leave if it is inside, and then either takes the bias itself
// (the first revocation: a connection accepted on one thread and used on
// another) or turns the mutex into a FutexMutex for good (the second: two
// threads really share it). So a mutex costs at most two membarrier calls
// in its life, and one used by one thread at a time costs nothing more
// than its loads and stores. A thread that only prepares the mutex's
// object for another (a connection's setup) locks with LockWithoutBias()
// and leaves the bias to the user's first lock().
//
// Why: a connection's lock is taken twice a message, and a locked
// instruction costs ~20 cycles even when nobody else wants the line; four
// a message were about 4% of a 4 KiB message on the simulator
// (docs/performance.md, "Where the simulator's overhead goes"). Most
// connections are used by one thread (a worker owns them, or an engine
// drives them); ThreadMode::kSerialized asks the caller to promise that,
// this needs no promise. The idea is the JVM's biased locking (Kawachiya,
// Koseki, Onodera, "Lock reservation", OOPSLA 2002) with the revocation's
// handshake done by an asymmetric fence, as Dice, Moir and Scherer
// ("Quickly reacquirable locks"), and folly's asymmetric barriers do.
//
// The handshake (a Dekker pair with one fence on the revoker's side only):
//
//   owner (lock)                     revoker
//   busy_ = 1                        owner_ = kRevoking      (CAS)
//   [compiler barrier]               membarrier()  -- a barrier B on every
//   owner_ == me ? enter : back off                  CPU running us
//                                    wait until busy_ == 0, then proceed
//   owner (unlock)
//   busy_ = 2 (leaving)
//   [compiler barrier]
//   r = owner_ == kRevoking
//   busy_ = 0 (release; the last access to the mutex)
//   if r: wake the revoker (by the word's address only)
//
// B falls on the owner's CPU between two of its instructions (or at its
// last context switch). If the owner's store of busy_ = 1 came before B
// it is visible after it, and the revoker waits for the owner's unlock
// (its release store of busy_ = 0, which it acquires). If it came after
// B, the owner's re-read of owner_ comes after B too and sees kRevoking,
// so the owner backs off without entering. The same pair orders the
// unlock: a revoker that saw a 1 after B sleeps on it, and the owner's
// next store to its word comes after B and is followed by a wake (its
// unlock's look at owner_ comes after B too and sees kRevoking; a back-off
// always wakes). One that saw 2 cannot tell whether the owner looked in
// time, and does not sleep on it: it yields the few instructions until 0
// (and, if the owner was preempted there, polls in futex sleeps of 50 us
// to 1 ms: the only clock in the mutex, and it decides nothing). No
// wake-up is lost, and the owner touches nothing of the mutex after its
// store of 0: the revoker may take it and destroy it at once (a connection
// closed and destroyed on another thread).
//
// Where membarrier's private expedited command is not available (kernel
// before 4.14, seccomp, valgrind), no mutex is ever biased: each is a
// FutexMutex behind one extra load.
//
// Contract: Lockable (lock, try_lock, unlock) for std::unique_lock and
// std::condition_variable_any; not recursive (a second lock() by the bias
// owner aborts; try_lock() by the holder fails); unlock() only by the
// holder. try_lock() never revokes, so a thread that only ever calls
// try_lock() may never get in while another thread owns the bias, even an
// idle one: lock() revokes. No errors: a membarrier that fails after the
// process registered for it aborts naming errno (it cannot, short of a
// kernel bug). A thread's bias is keyed by the address of a thread_local:
// a thread that reuses an exited owner's thread storage inherits its
// biases, which is safe (the exited thread is not inside, and its exit
// happens before the new thread's start through glibc's stack cache,
// which ThreadSanitizer does not see: it may report such a hand-over).
// The owner's side relies on the compiler keeping its relaxed accesses in
// program order across std::atomic_signal_fence, as every asymmetric
// fence does (folly's asymmetric_thread_fence_light is the same).
//
//   BiasedMutex mu;
//   {
//     std::unique_lock<BiasedMutex> lock(mu);  // first time: takes the bias
//   }
//   {
//     std::unique_lock<BiasedMutex> lock(mu);  // now: two stores, two loads
//   }

#ifndef RDMA_TRANSPORT_TRANSPORT_BIASED_MUTEX_H_
#define RDMA_TRANSPORT_TRANSPORT_BIASED_MUTEX_H_

#include <atomic>
#include <cstdint>

#include "transport/futex_mutex.h"

namespace rdma_transport {

class BiasedMutex {
 public:
  // `allow_bias` false: a FutexMutex from the start (tests; a caller that
  // knows its threads share the mutex).
  explicit BiasedMutex(bool allow_bias = true)
      : owner_(allow_bias && BiasingAvailable() ? kUnowned : kRevoked) {}
  BiasedMutex(const BiasedMutex&) = delete;
  BiasedMutex& operator=(const BiasedMutex&) = delete;

  // The first load acquires: a thread that finds kRevoked goes straight
  // to the FutexMutex and must see the last biased owner's writes, which
  // the revoker's release of kRevoked passes on (a plain load on x86).
  void lock() {
    const uintptr_t owner = owner_.load(std::memory_order_acquire);
    if ((owner & ~kSecondBias) == ThisThread()) [[likely]] {
      // Only we write our word: 1 is a lock() inside our own hold, which
      // would let a revoker in at the inner unlock().
      if (HoldingBias(owner)) [[unlikely]]
        Recursive();
      if (EnterBiased(owner)) [[likely]]
        return;
    } else if (owner == kRevoked) {
      fallback_.lock();
      return;
    }
    LockSlow();
  }

  bool try_lock() {
    const uintptr_t owner = owner_.load(std::memory_order_acquire);
    if ((owner & ~kSecondBias) == ThisThread()) [[likely]] {
      return !HoldingBias(owner) && EnterBiased(owner);
    }
    if (owner == kRevoked) return fallback_.try_lock();
    // Unowned: claim it, if the FutexMutex is free. Otherwise another
    // thread's bias or a revocation under way: try_lock() never revokes.
    return owner == kUnowned && ClaimUnowned(/*wait=*/false) &&
           EnterBiased(ThisThread());
  }

  // Takes it without taking the bias: for a thread that uses the mutex
  // before its real user does (a connection's setup, on the thread that
  // dials or accepts), so that the user's first lock() takes the bias
  // rather than revoking the setup thread's. While nobody owns the bias
  // the FutexMutex excludes, and a bias is claimed only under it.
  void LockWithoutBias();

  void unlock() {
    // The holder came in through the bias unless the mutex is unowned or
    // revoked for good, when the FutexMutex excludes (a claim and a
    // revocation wait for the holder to leave, so owner_ is still what
    // the holder found, or kRevoking).
    const uintptr_t owner = owner_.load(std::memory_order_relaxed);
    if (owner > kRevoking) [[likely]] {
      LeaveBiased(owner);
      return;
    }
    if (owner == kRevoking) {
      LeaveDuringRevocation();
      return;
    }
    fallback_.unlock();  // kUnowned or kRevoked
  }

  // For tests and diagnostics: a snapshot, from any thread.
  enum class State { kUnowned, kBiased, kRevoked };
  State state() const;
  bool biased_to_this_thread() const {
    return (owner_.load(std::memory_order_relaxed) & ~kSecondBias) ==
           ThisThread();
  }

  // Whether this process can bias mutexes (membarrier's private expedited
  // command, registered once per process on the first call).
  static bool BiasingAvailable();

 private:
  friend class BiasedMutexTestPeer;

  // owner_ holds the owning thread's token, with kSecondBias set once the
  // bias moved (the first revocation), or one of these. Tokens are even
  // and far above them.
  static constexpr uintptr_t kUnowned = 0;
  static constexpr uintptr_t kRevoked = 1;
  static constexpr uintptr_t kRevoking = 2;
  static constexpr uintptr_t kSecondBias = 1;
  // A busy_ word's value while its owner's unlock() runs.
  static constexpr uint32_t kLeaving = 2;

  // This thread's token: the address of a 2-byte-aligned thread_local,
  // constant-initialised (no guard, no TLS wrapper call).
  static uintptr_t ThisThread() {
    static thread_local const uint16_t tag = 0;
    return reinterpret_cast<uintptr_t>(&tag);
  }

  // Whether this thread, the owner of bias `owner`, is inside: only the
  // owner writes its word.
  bool HoldingBias(uintptr_t owner) const {
    return busy_[owner & kSecondBias].load(std::memory_order_relaxed) != 0;
  }

  // The owner's way in (the file comment's handshake), `owner` its token
  // as loaded, not inside already. False: a revocation began and we
  // backed off.
  bool EnterBiased(uintptr_t owner) {
    std::atomic<uint32_t>& busy = busy_[owner & kSecondBias];
    busy.store(1, std::memory_order_relaxed);
    // The store before the load in program order; the revoker's
    // membarrier is what orders them on the CPU.
    std::atomic_signal_fence(std::memory_order_seq_cst);
    if (owner_.load(std::memory_order_relaxed) == owner) [[likely]] {
      return true;
    }
    BackOff(busy);
    return false;
  }

  // The owner's way out (the file comment's handshake), `owner` its token
  // as loaded at the start of unlock(): a revocation may have begun since.
  void LeaveBiased(uintptr_t owner) {
    std::atomic<uint32_t>& busy = busy_[owner & kSecondBias];
    busy.store(kLeaving, std::memory_order_relaxed);
    // The load after the store in program order (the handshake, as in
    // EnterBiased()): a revoker that saw our 1 sleeps, and must be woken.
    std::atomic_signal_fence(std::memory_order_seq_cst);
    const bool revoking = owner_.load(std::memory_order_relaxed) == kRevoking;
    // The last access to the mutex: once the revoker sees 0 it may take
    // the mutex and destroy it (the wake needs the word's address only).
    const void* word = &busy;
    busy.store(0, std::memory_order_release);
    if (revoking) [[unlikely]]
      WakeRevoker(word);
  }

  [[noreturn]] static void Recursive();
  static void BackOff(std::atomic<uint32_t>& busy);
  // Wakes a revoker asleep on the busy word at `word` (futex(2), which
  // touches no user memory: the mutex may be gone already).
  static void WakeRevoker(const void* word);
  // Makes this thread the owner of an unowned mutex, under the FutexMutex
  // (`wait` false: only if the FutexMutex is free). False: somebody else
  // claimed it first, or (`wait` false) the FutexMutex was held.
  bool ClaimUnowned(bool wait);
  void LockSlow();
  void LeaveDuringRevocation();
  // Ends the revocation this thread began (its CAS of `from` to
  // kRevoking): waits for the owner to leave (asleep while it is inside;
  // yielding, then in bounded sleeps, while it is leaving), then takes the
  // bias itself (true, the first revocation) or revokes it for good
  // (false).
  bool FinishRevocation(uintptr_t from);

  std::atomic<uintptr_t> owner_;
  // busy_[b]: 1 while the owner of bias b (0 the first, 1 the second) is
  // inside, kLeaving while its unlock() looks for a revoker, else 0;
  // written only by that owner. One word each: a first owner
  // that read its token just before the revocation may still store to
  // its word after the second owner came in, and must not touch the
  // second owner's.
  std::atomic<uint32_t> busy_[2] = {0, 0};
  FutexMutex fallback_;
};

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TRANSPORT_BIASED_MUTEX_H_
