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

Connection::Connection(const Context& context, const ConnectionOptions& options,
                       std::string name)
    : verbs_(context.verbs()),
      env_(context.env()),
      engine_(options.engine),
      srq_pool_(options.engine != nullptr ? options.engine->pool(context)
                                          : nullptr),
      event_mode_(options.engine == nullptr &&
                  options.progress == ProgressMode::kEvent),
      mu_(options.thread_mode),
      owed_credits_(options.credit_batch != 0 ? options.credit_batch
                                              : options.recv_slots / 2),
      context_(context),
      options_(options),
      name_(std::move(name)),
      made_at_(env_.Now()),
      service_gate_(options.busy_poll_yields) {
  std::random_device random;
  psn_ = random() & 0xffffff;
}

Connection::~Connection() {
  if (!closed_) (void)Close(env_.Now());
}

int Connection::event_fd() const { return epoll_fd_; }

absl::Status Connection::status() const {
  std::unique_lock<ConnectionLock> lock = Enter();
  return UsableLocked();
}

ConnectionStats Connection::stats() const {
  std::unique_lock<ConnectionLock> lock = Enter();
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
  open_ = false;
  NotifyLocked();
}

absl::Status Connection::PeerClosedError() const {
  return absl::UnavailableError(
      absl::StrCat(name_, ": the peer closed the connection"));
}

}  // namespace rdma_transport
