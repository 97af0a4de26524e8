// File: transport/connection.cc
//
// The Connection itself: construction and destruction, the lock every call
// takes (Enter), and the state every call checks (status, stats, failure).
// The class contract is in connection.h; each other part of the class lives
// in a file of its own (docs/architecture.md, "Where things live").

#include "transport/connection.h"

#include <cstdlib>
#include <random>

#include "absl/strings/str_cat.h"
#include "transport/connection_internal.h"

namespace rdma_transport {

std::unique_lock<std::mutex> Connection::Enter() const {
  // Uncontended: one atomic operation, as a plain lock.
  std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
  if (lock.owns_lock()) [[likely]]
    return lock;
  entering_.fetch_add(1, std::memory_order_relaxed);
  lock.lock();
  entering_.fetch_sub(1, std::memory_order_relaxed);
  return lock;
}

Connection::Connection(const Context& context, const ConnectionOptions& options,
                       std::string name)
    : verbs_(context.verbs()),
      env_(context.env()),
      engine_(options.engine),
      srq_pool_(options.engine != nullptr ? options.engine->pool() : nullptr),
      owed_credits_(options.credit_batch != 0 ? options.credit_batch
                                              : options.recv_slots / 2),
      context_(context),
      options_(options),
      name_(std::move(name)) {
  std::random_device random;
  psn_ = random() & 0xffffff;
}

Connection::~Connection() {
  if (!closed_) (void)Close(env_.Now());
}

int Connection::event_fd() const { return epoll_fd_; }

absl::Status Connection::status() const {
  std::unique_lock<std::mutex> lock = Enter();
  return UsableLocked();
}

ConnectionStats Connection::stats() const {
  std::unique_lock<std::mutex> lock = Enter();
  ConnectionStats stats = stats_;
  stats.send_credits = send_credits_.available();
  stats.rendezvous_sent = rendezvous_sent_;
  stats.watchdog_armed = watchdog_armed_;
  return stats;
}

absl::Status Connection::UsableLocked() const {
  if (!failure_.ok()) return failure_;
  if (closed_ || closing_) {
    return absl::FailedPreconditionError(
        absl::StrCat(name_, ": connection is closed"));
  }
  if (!established_) {
    return absl::FailedPreconditionError(
        absl::StrCat(name_, ": connection is not established"));
  }
  return absl::OkStatus();
}

void Connection::FailLocked(absl::Status status) {
  // Only news wakes the waiters: a wait that fails again and again (a CQ in
  // error, polled while quiescing) must not keep the Env's clock from moving.
  if (!failure_.ok()) return;
  failure_ = std::move(status);
  NotifyLocked();
}

void Connection::NotifyLocked() {
  // Both sides of cv_ hold mu_: no waiter counted means none to wake (and
  // no cache line of cv_ read per dispatched completion).
  if (cv_waiters_ > 0) cv_.notify_all();
  // The same for the Env's waiters (an atomic operation on a shared line
  // per call saved): a thread of this connection counts itself in
  // env_waiters_ under mu_ before it waits, after its token. kEvent keeps
  // notifying: a thread may wait on event_fd() through the Env.
  if (env_waiters_ > 0 || ready_fd_ >= 0) env_.Notify();
}

absl::Status Connection::PeerClosedError() const {
  return absl::UnavailableError(
      absl::StrCat(name_, ": the peer closed the connection"));
}

}  // namespace rdma_transport
