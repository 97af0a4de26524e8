// File: transport/connection_lock.h
//
// `ConnectionLock`: the Connection's lock, in one of the two thread modes of
// ConnectionOptions::thread_mode.
//
//   kShared      a BiasedMutex (biased_mutex.h): the thread that uses the
//                connection owns the lock's bias and takes and leaves it
//                with plain loads and stores; a second thread revokes the
//                bias (a membarrier(2) call), once to take it over (a
//                connection accepted on one thread and used on another),
//                and a second time to make the lock a FutexMutex for good
//                (one atomic instruction to take, one to leave) when
//                threads really share the connection.
//   kSerialized  the caller has promised that no two calls overlap, so
//                nothing is excluded: taking and leaving are a plain load
//                and store of a busy flag (no locked instruction, no
//                barrier). A lock() that finds the flag set is two calls at
//                once, a broken promise: the process aborts with a message
//                naming the thread mode rather than corrupt the connection.
//                The check is best effort (two threads can both see the
//                flag clear); ThreadSanitizer reports every overlap.
//
// Four locked instructions a message (the send and the receive call each
// take and leave the lock) were about 4% of a 4 KiB message on the
// simulator's benchmark (docs/performance.md, "Where the simulator's
// overhead goes"). The bias removes them for a connection one thread uses
// at a time, with no promise asked; kSerialized is for connections that
// move between threads all the time (a bias would be revoked for good on
// the second move), as UCX's UCS_THREAD_MODE_SERIALIZED or an ibv_td.
//
// Contract: Lockable (lock, try_lock, unlock) for std::unique_lock and
// std::condition_variable_any; not recursive; unlock() only by the holder.
// The mode is fixed at construction. No errors (the overlap aborts).
//
//   ConnectionLock mu(ThreadMode::kSerialized);
//   {
//     std::unique_lock<ConnectionLock> lock(mu);  // two plain stores
//   }

#ifndef RDMA_TRANSPORT_TRANSPORT_CONNECTION_LOCK_H_
#define RDMA_TRANSPORT_TRANSPORT_CONNECTION_LOCK_H_

#include <atomic>

#include "transport/biased_mutex.h"
#include "transport/connection_options.h"

namespace rdma_transport {

class ConnectionLock {
 public:
  explicit ConnectionLock(ThreadMode mode)
      : serialized_(mode == ThreadMode::kSerialized) {}
  ConnectionLock(const ConnectionLock&) = delete;
  ConnectionLock& operator=(const ConnectionLock&) = delete;

  void lock() {
    if (serialized_) {
      if (busy_.load(std::memory_order_relaxed)) [[unlikely]]
        Overlapped();
      busy_.store(true, std::memory_order_relaxed);
      return;
    }
    shared_.lock();
  }

  // kSerialized: false while held (Connection::Enter() then calls lock(),
  // which aborts).
  bool try_lock() {
    if (serialized_) {
      if (busy_.load(std::memory_order_relaxed)) return false;
      busy_.store(true, std::memory_order_relaxed);
      return true;
    }
    return shared_.try_lock();
  }

  void unlock() {
    if (serialized_) {
      busy_.store(false, std::memory_order_relaxed);
      return;
    }
    shared_.unlock();
  }

  // For a connection's setup, on the thread that dials or accepts before
  // the connection is handed to its user: kShared's lock is taken without
  // its bias, which the user's first call takes (biased_mutex.h).
  void LockForSetup() {
    if (serialized_) {
      lock();
      return;
    }
    shared_.LockWithoutBias();
  }

  bool serialized() const { return serialized_; }
  // kShared's lock, for tests and diagnostics (its state() and bias).
  const BiasedMutex& shared() const { return shared_; }

 private:
  [[noreturn]] static void Overlapped();

  const bool serialized_;
  // kSerialized: a call is inside. Relaxed: the caller's own
  // synchronisation orders its calls; this only catches a broken promise.
  std::atomic<bool> busy_{false};
  BiasedMutex shared_;
};

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TRANSPORT_CONNECTION_LOCK_H_
