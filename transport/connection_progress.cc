// File: transport/connection_progress.cc
//
// The progress loop: polling the CQ and dispatching each completion
// (send-queue progress, arrivals, credits, the peer's close, failures via
// completion_status.h), waiting for progress (kBusyPoll spins, kEvent sleeps
// on the completion channel with one leader and followers), and keeping the
// CQ armed and the readiness fd true before every call returns.

#include <arpa/inet.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "transport/completion_status.h"
#include "transport/connection.h"
#include "transport/connection_internal.h"
#include "verbs_shim/verbs_error.h"

namespace rdma_transport {
namespace {

constexpr int kPollBatch = 16;
// Busy polling looks at the cycle counter once every this many empty turns
// (each turn polls the CQ once); BusyPollGate (busy_poll_gate.h) decides
// whether that look is a service turn: the clock, the fds and a yield.
constexpr uint32_t kSpinTurns = 64;

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

void Connection::DispatchCompletionLocked(const ibv_wc& wc) {
  const uint8_t kind = WrIdKind(wc.wr_id);
  const uint64_t value = WrIdValue(wc.wr_id);
  // A receive of the engine's shared queue carries the pool slot instead.
  const bool srq_recv = kind == static_cast<uint8_t>(WrKind::kSrqRecv);
  const bool send_side =
      kind != static_cast<uint8_t>(WrKind::kRecv) && !srq_recv;
  uint64_t seq = 0;
  if (send_side) {
    seq = SequenceFromWrIdValue(value, sq_.posted());
    sq_.Completed(seq);
    if (kind == static_cast<uint8_t>(WrKind::kKeepalive)) {
      keepalive_outstanding_ = false;
    }
  }
  if (wc.status != IBV_WC_SUCCESS) [[unlikely]] {
    // A shared slot given back in error (flushed) is the pool's again.
    if (srq_recv) (void)RepostLocked(static_cast<uint32_t>(value));
    // After a local close or an earlier failure, flushed work requests are
    // the expected end of everything still queued.
    if (wc.status == IBV_WC_WR_FLUSH_ERR && (closing_ || !failure_.ok())) {
      if (send_side && async_.count > 0) EndAsyncOpsLocked(seq, wc.status);
      return;
    }
    std::string detail = DescribeFailedCompletion(name_, wc);
    // A QP or CQ the device failed flushes its work: the async event, if
    // one came, is the reason to report.
    CheckAsyncEventsLocked(detail);
    // A first failure that is a flush, with no event: nothing said why.
    if (wc.status == IBV_WC_WR_FLUSH_ERR && failure_.ok()) {
      detail += UnexplainedFlushNote();
    }
    FailLocked(absl::Status(CodeForCompletion(wc.status), detail));
    if (send_side && async_.count > 0) EndAsyncOpsLocked(seq, wc.status);
    return;
  }
  ++completions_;
  if (send_side) {
    if (async_.count > 0) EndAsyncOpsLocked(seq, IBV_WC_SUCCESS);
    return;
  }

  const uint32_t slot = static_cast<uint32_t>(value);
  if (!(wc.wc_flags & IBV_WC_WITH_IMM)) {
    if (srq_recv) (void)RepostLocked(slot);
    FailLocked(absl::InternalError(absl::StrCat(
        name_, ": protocol error: a message arrived without immediate data")));
    return;
  }
  const uint32_t imm = ntohl(wc.imm_data);
  const uint32_t finished = ImmFinished(imm);
  const ImmKind imm_kind = ImmKindOf(imm);
  if ((imm & kImmReservedBits) != 0 ||
      ((finished > 0 || imm_kind == ImmKind::kRendezvous) &&
       !path_.rendezvous) ||
      finished > rendezvous_sent_ - rendezvous_finished_) [[unlikely]] {
    if (srq_recv) (void)RepostLocked(slot);
    FailLocked(absl::InternalError(absl::StrCat(
        name_, ": protocol error: immediate 0x", absl::Hex(imm),
        path_.rendezvous
            ? absl::StrCat(" (reserved bits, or ", finished,
                           " rendezvous messages finished of ",
                           rendezvous_sent_ - rendezvous_finished_,
                           " outstanding)")
            : std::string(" uses rendezvous, which the handshake did not "
                          "settle"))));
    return;
  }
  send_credits_.Return(ImmCredits(imm));
  rendezvous_finished_ += finished;
  // PostSendFrom() by rendezvous: the op ends once its message was read
  // and its request's completion was seen, whichever comes last.
  if (finished > 0 && async_.count > 0 && failure_.ok() &&
      sq_.completed() > 0) {
    EndAsyncOpsLocked(sq_.completed() - 1, IBV_WC_SUCCESS);
  }
  switch (imm_kind) {
    case ImmKind::kData:
    case ImmKind::kRendezvous:
      PushArrivalLocked(slot, wc.byte_len, imm_kind == ImmKind::kRendezvous);
      break;
    case ImmKind::kCredit:
      ++stats_.credit_messages_received;
      if (RepostLocked(slot).ok()) {
        owed_credits_.Add(1);
        if (finished > 0) credit_due_ = true;
      }
      break;
    case ImmKind::kClose:
      peer_closed_ = true;
      // Its own slot is not needed again; a shared one is the pool's.
      if (srq_recv) (void)RepostLocked(slot);
      // A rendezvous message of PostSendFrom() the peer left unread never
      // will be: as for SendFrom(), the connection fails (the flush then
      // ends the ops still in flight).
      if (async_.rendezvous_last > rendezvous_finished_ && failure_.ok()) {
        FailLocked(absl::UnavailableError(
            absl::StrCat(name_, ": the peer closed the connection with ",
                         async_.rendezvous_last - rendezvous_finished_,
                         " message(s) sent by rendezvous unread")));
      }
      break;
  }
}

bool Connection::PollOnceLocked(std::unique_lock<ConnectionLock>& lock) {
  if (cq_ == nullptr) return false;
  if (engine_attached_) {
    // The CQ is shared: the engine polls it and hands each completion to
    // its connection, this one included (EngineDispatch takes mu_).
    const uint64_t before = engine_dispatched_;
    lock.unlock();
    engine_->Progress();
    lock.lock();
    if (engine_dispatched_ == before) return false;
    service_gate_.Progressed();
    return true;
  }
  ibv_wc wcs[kPollBatch];
  absl::StatusOr<int> polled = verbs_.PollCq(cq_, kPollBatch, wcs);
  if (!polled.ok()) [[unlikely]] {
    // Callers see failure_; no progress was made. A CQ the device failed
    // says why in an async event.
    CheckAsyncEventsLocked(std::string(polled.status().message()));
    FailLocked(WithContext(polled.status(), name_));
    return false;
  }
  const int count = *polled;
  if (count == 0) return false;
  service_gate_.Progressed();  // the wait that follows starts idle anew
  for (int i = 0; i < count; ++i) HandleCompletionLocked(wcs[i]);
  // Nothing worth a message of its own (most polls): no call.
  if (CreditMessageDueLocked()) [[unlikely]] {
    MaybeReturnCreditsLocked();
  }
  // kEvent: a message this thread took off the CQ (while waiting in Send(),
  // say) is announced now, not when the thread leaves.
  if (ready_fd_ >= 0 && !ready_set_) UpdateReadinessLocked();
  NotifyLocked();
  return true;
}

void Connection::DrainCqLocked(std::unique_lock<ConnectionLock>& lock) {
  while (PollOnceLocked(lock)) {
  }
}

absl::Status Connection::WaitLocked(std::unique_lock<ConnectionLock>& lock,
                                    uint64_t token, Deadline deadline) {
  // An engine's connection busy-polls: the engine's fd is the one to sleep
  // on (engine.h).
  const bool busy =
      engine_ != nullptr || options_.progress == ProgressMode::kBusyPoll;
  // kBusyPoll: most turns only poll again (letting in a thread that waits
  // for the lock); every kSpinTurns-th reads the cycle counter, and the gate
  // says when a look is a service turn (the clock, the fds, a yield).
  uint64_t cycles = 0;
  if (busy && ++spin_turns_ >= kSpinTurns && !env_.virtual_time()) {
    cycles = env_.CycleCount();
    if (!service_gate_.Due(cycles, deadline)) spin_turns_ = 0;  // not yet
  }
  if (busy && spin_turns_ < kSpinTurns) {
    // Let in a thread that is waiting for the lock; otherwise keep it (each
    // unlock/lock pair is two atomic operations, dear under emulation) and
    // poll again at once, as perftest does: no PAUSE. Under QEMU's TCG a
    // PAUSE ends the vCPU's run of translated code and takes the global
    // lock that the other vCPUs need for interrupts and devices; one per
    // empty turn cost 5-20% of t_min and 2-10x t_typical against ib_send_lat
    // over rxe (docs/performance.md, issue 12). On hardware the poll is a
    // read of the CQ's memory, and a PAUSE (about 140 cycles on Skylake and
    // later) only delays noticing a completion.
    if (entering_.load(std::memory_order_relaxed) > 0) [[unlikely]] {
      lock.unlock();
      CpuRelax();  // a moment for the other thread to take the lock
      ++spin_pauses_;
      lock.lock();
    }
    return absl::OkStatus();
  }
  spin_turns_ = 0;
  const Deadline now = env_.Now();
  if (busy) ++stats_.service_turns;
  ServiceLocked(lock, false, false);
  CheckStalledLocked(now);
  if (!failure_.ok()) return absl::OkStatus();  // the caller sees failure_
  if (MaybeKeepaliveLocked(now)) {
    // Look again soon (its wake is now); the fds were not looked at.
    service_gate_.Serviced(cycles, now, now, false, false);
    return absl::OkStatus();
  }
  if (now >= deadline) {
    // The last look before giving up: what the device has said meanwhile.
    CheckAsyncEventsLocked();
    if (!failure_.ok()) return absl::OkStatus();
    // Before giving up in kEvent mode, consume the channel's events and arm
    // the CQ, so that a caller polling event_fd() is woken by the next
    // completion. A completion that slipped in meanwhile is progress.
    if (!busy && !event_waiter_ && cq_ != nullptr) {
      DrainChannelLocked();
      if (absl::Status status = verbs_.ReqNotifyCq(cq_, false); !status.ok()) {
        FailLocked(WithContext(status, name_));
        return absl::OkStatus();
      }
      cq_armed_ = true;
      if (PollOnceLocked(lock)) return absl::OkStatus();
    }
    return absl::DeadlineExceededError("deadline");
  }
  const Deadline wake = std::min(deadline, NextTimerLocked());

  // The fds every wait watches: the setup stream (the peer's process), the
  // device's async events, and in kEvent mode the completion channel and
  // the wakeup eventfd.
  pollfd fds[4];
  int count = 0;
  int setup_index = -1;
  int async_index = -1;
  int channel_index = -1;
  int wakeup_index = -1;
  if (setup_watched_) {
    setup_index = count;
    fds[count++] = {setup_.fd(), POLLIN, 0};
  }
  if (const int async = context_.async_fd(); async >= 0) {
    async_index = count;
    fds[count++] = {async, POLLIN, 0};
  }
  if (!busy) {
    if (event_waiter_) {
      // Another thread (the leader) sleeps on the channel; follow it.
      SleepLocked(lock, token, std::min(wake, now + kFollowerWait));
      return absl::OkStatus();
    }
    event_waiter_ = true;
    if (absl::Status status = verbs_.ReqNotifyCq(cq_, false); !status.ok()) {
      event_waiter_ = false;
      FailLocked(WithContext(status, name_));
      return absl::OkStatus();
    }
    cq_armed_ = true;
    // A completion that arrived before the CQ was armed raises no event.
    if (PollOnceLocked(lock)) {
      event_waiter_ = false;
      return absl::OkStatus();
    }
    channel_index = count;
    fds[count++] = {channel_->fd, POLLIN, 0};
    wakeup_index = count;
    fds[count++] = {wakeup_fd_, POLLIN, 0};
  }
  // A busy turn yields in a contended spell once the wait has found
  // nothing for a while, and looks at the fds when their interval is due
  // (busy_poll_gate.h): a turn that only yields passes none, so that the
  // Env makes one system call, not two; one that does neither, none.
  const bool yield = busy && service_gate_.YieldDue(cycles);
  const bool look = !busy || service_gate_.FdsDue(cycles);
  const WaitKind kind = !busy   ? WaitKind::kBlock
                        : yield ? WaitKind::kSpin
                                : WaitKind::kPeek;
  if (yield) ++stats_.service_yields;
  if (busy && look) ++stats_.service_looks;
  ++env_waiters_;
  ++wake_interest_;
  lock.unlock();
  // A yield is timed (two counter reads): one that ran nobody ends the
  // contended spell (busy_poll_gate.h, Yielded).
  const bool timed = yield && cycles != 0;
  const uint64_t wait_start = timed ? env_.CycleCount() : 0;
  const int ready = env_.Wait(
      token, {fds, look ? static_cast<size_t>(count) : size_t{0}}, wake, kind);
  const uint64_t wait_cycles = timed ? env_.CycleCount() - wait_start : 0;
  lock.lock();
  --env_waiters_;
  --wake_interest_;
  if (!busy) event_waiter_ = false;
  if (busy) {
    if (timed && ready == 0) service_gate_.Yielded(cycles, wait_cycles);
    service_gate_.Serviced(cycles, now, wake, ready > 0, look);
  }
  auto readable = [&](int index) {
    return ready > 0 && index >= 0 && fds[index].revents != 0;
  };
  if (readable(channel_index)) DrainChannelLocked();
  if (readable(wakeup_index)) {
    uint64_t value;
    (void)!read(wakeup_fd_, &value, sizeof(value));
  }
  ServiceLocked(lock, readable(setup_index), readable(async_index));
  if (!busy) NotifyLocked();
  return absl::OkStatus();
}

void Connection::DrainChannelLocked() {
  ibv_cq* cq = nullptr;
  void* cq_context = nullptr;
  while (verbs_.GetCqEvent(channel_, &cq, &cq_context).ok()) {
    verbs_.AckCqEvents(cq, 1);
    cq_armed_ = false;  // an event disarms the CQ
  }
}

void Connection::LeaveLocked(std::unique_lock<ConnectionLock>& lock) {
  if (engine_ != nullptr || options_.progress != ProgressMode::kEvent ||
      cq_ == nullptr) {
    return;
  }
  if (!cq_armed_ && failure_.ok() && !closed_) {
    if (absl::Status status = verbs_.ReqNotifyCq(cq_, false); status.ok()) {
      cq_armed_ = true;
    } else {
      FailLocked(WithContext(status, name_));
    }
    // What arrived before the CQ was armed raises no event: take it now.
    DrainCqLocked(lock);
  }
  UpdateReadinessLocked();
}

void Connection::UpdateReadinessLocked() {
  if (ready_fd_ < 0) return;
  const bool ready = arrived_count_ > 0 || !failure_.ok() || peer_closed_ ||
                     closing_ || closed_;
  if (ready == ready_set_) return;
  uint64_t value = 1;
  if (ready) {
    (void)!write(ready_fd_, &value, sizeof(value));
  } else {
    (void)!read(ready_fd_, &value, sizeof(value));
  }
  ready_set_ = ready;
}

void Connection::SleepLocked(std::unique_lock<ConnectionLock>& lock,
                             uint64_t token, Deadline until, WaitKind kind) {
  if (env_.virtual_time() || kind == WaitKind::kSpin) {
    ++env_waiters_;
    ++wake_interest_;
    lock.unlock();
    env_.Wait(token, {}, until, kind);
    lock.lock();
    --env_waiters_;
    --wake_interest_;
  } else {
    ++cv_waiters_;
    ++wake_interest_;
    cv_.wait_until(lock, until);
    --cv_waiters_;
    --wake_interest_;
  }
}

}  // namespace rdma_transport
