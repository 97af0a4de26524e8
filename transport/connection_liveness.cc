// File: transport/connection_liveness.cc
//
// Liveness: noticing a peer gone in every wait. Keepalive probes after
// keepalive_interval idle, the completion watchdog (armed on Soft-RoCE), the
// setup stream's EOF without a goodbye, the device's async events, and
// Check(). Which fires first decides the Status (connection.h).

#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "absl/strings/str_cat.h"
#include "transport/completion_status.h"
#include "transport/connection.h"
#include "transport/connection_internal.h"
#include "transport/deadline.h"
#include "verbs_shim/verbs_names.h"

namespace rdma_transport {
namespace {

constexpr uint64_t kNotWatching = ~uint64_t{0};

}  // namespace

void Connection::OnAsyncEvent(ibv_event_type type) {
  int expected = 0;
  async_event_.compare_exchange_strong(expected, static_cast<int>(type) + 1);
  if (wakeup_fd_ >= 0) {
    uint64_t one = 1;
    (void)!write(wakeup_fd_, &one, sizeof(one));
  }
  env_.Notify();
}

void Connection::NoteActivityLocked(Deadline now) {
  if (completions_ != activity_seen_) {
    activity_seen_ = completions_;
    last_activity_ = now;
  }
}

Clock::duration Connection::WatchdogBudgetLocked() const {
  // Time for the bytes outstanding at the floor rate, on top of the base.
  const uint64_t outstanding = sq_.BytesOutstanding();
  return completion_timeout_ +
         std::chrono::duration_cast<Clock::duration>(
             std::chrono::duration<double>(
                 static_cast<double>(outstanding) /
                 static_cast<double>(kWatchdogFloorBytesPerSecond)));
}

void Connection::CheckStalledLocked(Deadline now) {
  if (!watchdog_armed_ || !failure_.ok() || inline_.qp == nullptr) return;
  if (sq_.signaled_end() <= sq_.completed()) {  // nothing signalled outstanding
    watchdog_seen_ = kNotWatching;
    return;
  }
  // Measured from the first look after the queue became busy or last moved,
  // so the clock is read only when somebody waits.
  if (sq_.completed() != watchdog_seen_) {
    watchdog_seen_ = sq_.completed();
    send_progress_time_ = now;
    return;
  }
  const Clock::duration stalled = now - send_progress_time_;
  const Clock::duration budget = WatchdogBudgetLocked();
  if (stalled <= budget) return;
  FailLocked(absl::UnavailableError(absl::StrCat(
      name_, ": no completion for ",
      std::chrono::duration_cast<std::chrono::milliseconds>(stalled).count(),
      " ms (budget ",
      std::chrono::duration_cast<std::chrono::milliseconds>(budget).count(),
      " ms) with ", sq_.signaled_end() - sq_.completed(),
      " work request(s) outstanding; the peer is unreachable or gone (the "
      "provider did not report it)")));
}

Deadline Connection::NextTimerLocked() const {
  Deadline wake = kNoDeadline;
  if (options_.keepalive_interval.count() > 0 && !keepalive_outstanding_) {
    wake = std::min(wake, last_activity_ + options_.keepalive_interval);
  }
  if (watchdog_armed_ && sq_.signaled_end() > sq_.completed()) {
    if (watchdog_seen_ == sq_.completed()) {
      wake = std::min(wake, send_progress_time_ + WatchdogBudgetLocked() +
                                std::chrono::milliseconds(1));
    }
  }
  return wake;
}

bool Connection::MaybeKeepaliveLocked(Deadline now) {
  if (options_.keepalive_interval.count() <= 0 || keepalive_outstanding_ ||
      !sq_.HasRoom(1) || !established_ || inline_.qp == nullptr) {
    return false;
  }
  NoteActivityLocked(now);
  if (now - last_activity_ < options_.keepalive_interval) return false;
  if (!PostControlLocked(WrKind::kKeepalive, 0).ok()) return false;
  keepalive_outstanding_ = true;
  ++stats_.keepalives;
  last_activity_ = now;
  return true;
}

void Connection::ReadSetupStreamLocked(std::unique_lock<ConnectionLock>& lock) {
  if (!setup_watched_) return;
  uint8_t bytes[16];
  while (true) {
    const ssize_t n = ::recv(setup_.fd(), bytes, sizeof(bytes), MSG_DONTWAIT);
    if (n > 0) {
      for (ssize_t i = 0; i < n; ++i) {
        if (bytes[i] == kGoodbyeByte) peer_goodbye_ = true;
      }
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    break;  // EOF or reset
  }
  setup_watched_ = false;
  if (epoll_fd_ >= 0) {
    (void)epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, setup_.fd(), nullptr);
  }
  if (engine_attached_) engine_->WatchSetupStream(engine_slot_, -1);
  if (peer_goodbye_) return;  // a Close(): its close message says the rest
  // What arrived before the peer died is still delivered.
  DrainCqLocked(lock);
  if (!peer_closed_) {
    FailLocked(absl::UnavailableError(absl::StrCat(
        name_,
        ": the peer's process is gone (its setup connection closed without "
        "a goodbye)")));
  }
}

void Connection::CheckAsyncEventsLocked(std::string_view symptom) {
  context_.PollAsyncEvents();
  NoteAsyncEventLocked(symptom);
}

void Connection::NoteAsyncEventLocked(std::string_view symptom) {
  if (const int event = async_event_.load(std::memory_order_acquire);
      event != 0 && failure_.ok()) {
    FailLocked(absl::UnavailableError(absl::StrCat(
        name_, ": ", AsyncEventName(static_cast<ibv_event_type>(event - 1)),
        " (", AsyncEventMeaning(event - 1), ")",
        symptom.empty() ? "" : "; then ", std::string(symptom))));
  }
}

void Connection::ServiceLocked(std::unique_lock<ConnectionLock>& lock,
                               bool setup_readable, bool async_readable) {
  if (async_readable) context_.PollAsyncEvents();
  NoteAsyncEventLocked();
  if (setup_readable) ReadSetupStreamLocked(lock);
}

absl::Status Connection::Check(Deadline deadline) {
  std::unique_lock<ConnectionLock> lock = Enter();
  CallScope call(*this, lock);
  if (absl::Status status = UsableLocked(); !status.ok()) return status;
  if (peer_closed_) return PeerClosedError();
  // Before the probe goes: a wait refusing the clock after it would leave
  // the probe outstanding.
  if (!OnClockOf(deadline, made_at_)) return WrongClockError(name_, deadline);
  if (absl::Status status = WaitUntilLocked(
          lock, deadline, [&] { return sq_.HasRoom(1); },
          "liveness check could not be posted");
      !status.ok()) {
    return status;
  }
  absl::StatusOr<uint64_t> seq = PostControlLocked(WrKind::kKeepalive, 0);
  if (!seq.ok()) return seq.status();
  keepalive_outstanding_ = true;
  ++stats_.keepalives;
  return WaitForSeqLocked(lock, *seq, deadline);
}

}  // namespace rdma_transport
