// File: transport/connection_close.cc
//
// Closing: Close() (the goodbye byte on the setup stream, the close message
// after everything posted, waiting for calls still inside) and the teardown
// that releases windows, QP, CQ, channel, rings and fds in that order.

#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "transport/connection.h"
#include "transport/connection_internal.h"
#include "transport/deadline.h"
#include "transport/qp_bringup.h"

namespace rdma_transport {

absl::Status Connection::Close(Deadline deadline) {
  std::unique_lock<ConnectionLock> lock = Enter();
  if (closed_) return absl::OkStatus();
  // Refused while the connection is still open: a wait refusing it later
  // would close without telling the peer.
  if (!OnClockOf(deadline, made_at_)) return WrongClockError(name_, deadline);
  if (closing_) {
    return absl::FailedPreconditionError(
        absl::StrCat(name_, ": Close() is already running"));
  }
  closing_ = true;
  open_ = false;
  if (wakeup_fd_ >= 0) {
    uint64_t one = 1;
    (void)!write(wakeup_fd_, &one, sizeof(one));
  }
  NotifyLocked();
  UpdateReadinessLocked();
  // Tell the peer's process this is a close, not a death; the close
  // message (below) is what ends its Receive().
  if (setup_.valid()) {
    const uint8_t goodbye = kGoodbyeByte;
    (void)!::send(setup_.fd(), &goodbye, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
  }

  absl::Status result;
  // A connection whose handshake never finished (the Listener gives it up)
  // has nobody to tell: the peer may not even have its QP up.
  if (established_ && handshake_done_ && failure_.ok() && !peer_closed_) {
    // The close message needs a credit and a send queue entry, and goes
    // after every piece of the asynchronous ops accepted (some may wait for
    // the in-flight cap) and once the peer has read every message
    // PostSendFrom() sent by rendezvous. A failure meanwhile leaves nothing
    // to tell: the close itself still succeeds.
    absl::Status ready = WaitUntilLocked(
        lock, deadline,
        [&] {
          return send_credits_.CanSendClose() && sq_.HasRoom(1) &&
                 async_.posted == async_.count &&
                 async_.rendezvous_last <= rendezvous_finished_;
        },
        "close: no credit to tell the peer, asynchronous operations still "
        "queued, or a rendezvous message still unread");
    if (absl::IsDeadlineExceeded(ready) && failure_.ok()) result = ready;
    if (ready.ok() && !reposts_.empty()) {
      ready = PostDeferredRepostsLocked();
    }
    if (ready.ok()) {
      absl::StatusOr<uint64_t> seq =
          PostControlLocked(WrKind::kClose, TakeImmLocked(ImmKind::kClose));
      if (seq.ok()) {
        send_credits_.Spend();
        // Its completion means everything posted before it completed too.
        result = WaitForSeqLocked(lock, *seq, deadline);
        // A peer that closed at the same time may be gone already.
        if (!result.ok() && peer_closed_) result = absl::OkStatus();
      } else {
        result = seq.status();
      }
    }
  }
  // Let calls still inside (a Receive on another thread) leave first.
  while (active_calls_ > 0) {
    SleepLocked(lock, env_.PrepareWait(), env_.DeadlineIn(kFollowerWait));
  }
  TearDownLocked();
  closed_ = true;
  return result;
}

void Connection::ReturnHeldSlotsLocked() {
  if (srq_pool_ == nullptr) return;
  while (arrived_count_ > 0) {
    (void)srq_pool_->Repost(arrived_[arrived_head_].slot);
    PopArrivalLocked();
  }
}

void Connection::TearDownLocked() {
  auto report = [this](const absl::Status& status) {
    if (!status.ok()) {
      std::fprintf(stderr, "rdma_transport: %s: closing: %s\n", name_.c_str(),
                   status.ToString().c_str());
    }
  };
  // No async event reaches this connection from here on.
  if (registered_) {
    context_.UnregisterListener(this);
    registered_ = false;
  }
  // No window outlives the connection: dead before the QP goes.
  for (const std::shared_ptr<BoundWindow>& window : windows_) {
    report(window->Release());
  }
  windows_.clear();
  if (inline_.qp != nullptr) {
    if (srq_pool_ != nullptr && engine_attached_) {
      // Destroying the QP would clean its receive completions out of the
      // CQ and with them the shared slots they hold: stop it consuming
      // (ERR) and let the engine take and repost what is queued first.
      report(ModifyQpToError(verbs_, inline_.qp));
      engine_->DrainForDetach(engine_slot_);
    }
    report(verbs_.DestroyQp(inline_.qp));
    inline_.qp = nullptr;
  }
  ReturnHeldSlotsLocked();
  // Whatever is still in flight ends now: the QP that carried it is gone.
  if (async_.count > 0) {
    EndAllAsyncOpsLocked(!failure_.ok()
                             ? failure_
                             : absl::FailedPreconditionError(absl::StrCat(
                                   name_, ": the connection was closed")));
  }
  if (cq_ != nullptr) {
    if (engine_ == nullptr) report(verbs_.DestroyCq(cq_));
    cq_ = nullptr;
  }
  if (channel_ != nullptr) {
    report(verbs_.DestroyCompChannel(channel_));
    channel_ = nullptr;
  }
  report(send_ring_.Release());
  report(recv_ring_.Release());
  report(probe_slot_.Release());
  for (int* fd : {&wakeup_fd_, &ready_fd_, &epoll_fd_}) {
    if (*fd >= 0) {
      ::close(*fd);
      *fd = -1;
    }
  }
  if (engine_attached_) {
    engine_->Detach(engine_slot_);
    engine_attached_ = false;
  }
  setup_watched_ = false;
  setup_.Close();
}

}  // namespace rdma_transport
