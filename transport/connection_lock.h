// File: transport/connection_lock.h
//
// `ConnectionLock`: the Connection's lock, in one of the two thread modes of
// ConnectionOptions::thread_mode.
//
//   kShared      a FutexMutex (futex_mutex.h): one atomic instruction to
//                take and one to leave when nobody else wants it; threads
//                that meet on it wait for each other.
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
// take and leave the lock) are about 4% of a 4 KiB message on the
// simulator's benchmark (docs/performance.md, "Where the simulator's
// overhead goes"): kSerialized is for the thread that owns its
// connections, as UCX's UCS_THREAD_MODE_SERIALIZED or an ibv_td.
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

#include "transport/connection_options.h"
#include "transport/futex_mutex.h"

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

  bool serialized() const { return serialized_; }

 private:
  [[noreturn]] static void Overlapped();

  const bool serialized_;
  // kSerialized: a call is inside. Relaxed: the caller's own
  // synchronisation orders its calls; this only catches a broken promise.
  std::atomic<bool> busy_{false};
  FutexMutex shared_;
};

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TRANSPORT_CONNECTION_LOCK_H_
