// File: transport/connection_async.cc
//
// Asynchronous one-sided operations on a connection with an engine
// (engine.h): PostWrite()/PostRead() record each op in a ring of the send
// queue's depth slots and post its pieces at once or, past Soft-RoCE's cap on
// bytes in flight, as completions make room (PostQueuedAsyncLocked, from
// dispatch); each op's first and last send-queue sequence are noted as they go
// out. Send-queue completions end them in order (RC completes in order, and
// each op's last work request is signalled), and after a failure the QP is
// moved to ERR so that every op still in flight ends with its flush. Also the
// engine's side of the connection: dispatch, liveness service and the
// operations' deadlines.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "transport/connection.h"
#include "transport/connection_internal.h"
#include "transport/deadline.h"
#include "transport/inline_size.h"
#include "transport/qp_bringup.h"
#include "verbs_shim/verbs_error.h"

namespace rdma_transport {
namespace {

// Whether a WRITE whose first work request failed with `status` is known
// not to have changed the peer's memory: the responder refused it, or our
// own NIC did before sending it.
bool RefusedBeforeEffect(ibv_wc_status status) {
  switch (status) {
    case IBV_WC_REM_ACCESS_ERR:
    case IBV_WC_REM_INV_REQ_ERR:
    case IBV_WC_LOC_PROT_ERR:
    case IBV_WC_LOC_LEN_ERR:
    case IBV_WC_LOC_QP_OP_ERR:
      return true;
    default:
      return false;
  }
}

// "WRITE", "READ", "SEND" or "SEND (rendezvous)", for messages.
const char* AsyncOpName(const AsyncOp& op) {
  switch (op.kind) {
    case AsyncOpKind::kWrite:
      return "WRITE";
    case AsyncOpKind::kRead:
      return "READ";
    case AsyncOpKind::kSend:
      break;
  }
  return op.rendezvous_ordinal > 0 ? "SEND (rendezvous)" : "SEND";
}

// The Completion that ends `op`, posted on `connection`.
Completion EndOf(const AsyncOp& op, const Connection* connection,
                 OpOutcome outcome, absl::Status status) {
  Completion done;
  done.handle = op.handle;
  done.connection = connection;
  done.outcome = outcome;
  done.status = std::move(status);
  done.is_write = op.kind == AsyncOpKind::kWrite;
  done.is_send = op.kind == AsyncOpKind::kSend;
  done.length = op.length;
  return done;
}

}  // namespace

absl::Status Connection::NoEngineError() const {
  return absl::FailedPreconditionError(
      absl::StrCat(name_,
                   ": PostWrite()/PostRead()/PostSendFrom() need a "
                   "connection made with ConnectionOptions::engine"));
}

absl::StatusOr<OpHandle> Connection::PostWrite(std::span<const RdmaOp> ops,
                                               Deadline deadline) {
  if (engine_ == nullptr) return NoEngineError();
  if (absl::Status status = CheckRdmaOps(ops, true); !status.ok()) {
    return status;
  }
  std::unique_lock<ConnectionLock> lock = Enter();
  CallScope call(*this, lock);
  return PostAsyncLocked(ops, true, deadline);
}

absl::StatusOr<OpHandle> Connection::PostRead(std::span<const RdmaOp> ops,
                                              Deadline deadline) {
  if (engine_ == nullptr) return NoEngineError();
  if (absl::Status status = CheckRdmaOps(ops, false); !status.ok()) {
    return status;
  }
  std::unique_lock<ConnectionLock> lock = Enter();
  CallScope call(*this, lock);
  return PostAsyncLocked(ops, false, deadline);
}

size_t Connection::async_ops_in_flight() const {
  std::unique_lock<ConnectionLock> lock = Enter();
  return async_.count;
}

size_t Connection::async_ops_queued() const {
  std::unique_lock<ConnectionLock> lock = Enter();
  return async_.count - async_.posted;
}

absl::StatusOr<OpHandle> Connection::PostAsyncLocked(
    std::span<const RdmaOp> ops, bool is_write, Deadline deadline) {
  if (absl::Status status = UsableLocked(); !status.ok()) return status;
  if (!OnClockOf(deadline, made_at_)) [[unlikely]] {
    return WrongClockError(name_, deadline);
  }
  if (peer_closed_) return PeerClosedError();
  if (ops.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name_, ": no operations to post"));
  }
  const uint64_t max_piece = PipelinedPieceLocked(RdmaInFlightCapLocked());
  uint64_t wrs = 0;
  for (const RdmaOp& op : ops) {
    wrs += op.length == 0 ? 1 : (op.length + max_piece - 1) / max_piece;
  }
  // Queued work requests hold their room (`queued_wrs` counts them
  // exactly), so that a window of ops gets back-pressure here rather than a
  // queue that grows. A batch of more work requests than the send queue can
  // ever hold is accepted when it is one op (a 64 MiB op is 1,024 pieces
  // on rxe), no other op waits to be posted and the queue has room for one;
  // it goes out piece by piece, and until most of it has, nothing else is
  // accepted. A batch of several ops that large is refused: post fewer.
  const uint64_t queued = std::min<uint64_t>(async_.queued_wrs, sq_.depth());
  const uint64_t sq_used = sq_.posted() - sq_.completed() + queued;
  const uint64_t sq_free = sq_used < sq_.depth() ? sq_.depth() - sq_used : 0;
  const bool oversized = wrs + kControlReserve > sq_.depth();
  const bool one_oversized_op = oversized && ops.size() == 1;
  const uint64_t charged =
      one_oversized_op && async_.posted == async_.count ? 1 : wrs;
  if (charged + kControlReserve > sq_free ||
      async_.count + ops.size() > async_.capacity() ||
      !engine_->HasOpRoom(static_cast<uint32_t>(ops.size()))) {
    return absl::ResourceExhaustedError(absl::StrCat(
        name_, ": no room for ", ops.size(), " operation(s) (", wrs,
        " work requests; the send queue has ", sq_free, " of ", sq_.depth(),
        " entries free, ", kControlReserve, " kept for control messages; ",
        async_.count, " operation(s) in flight, ", async_.count - async_.posted,
        " of them queued); ",
        oversized && !one_oversized_op
            ? "more than the send queue ever holds: post fewer operations "
              "at a time"
            : "progress the engine and post again"));
  }

  const OpHandle first = engine_->ReserveOps(static_cast<uint32_t>(ops.size()));
  for (size_t i = 0; i < ops.size(); ++i) {
    const RdmaOp& op = ops[i];
    AsyncOp& slot = async_.At(async_.count);
    slot = {};
    slot.handle = first + i;
    slot.length = op.length;
    slot.local_addr =
        reinterpret_cast<uint64_t>(op.local->data() + op.local_offset);
    slot.lkey = op.local->lkey();
    slot.remote_addr = op.remote.address + op.remote_offset;
    slot.rkey = op.remote.rkey;
    slot.deadline = deadline;
    slot.kind = is_write ? AsyncOpKind::kWrite : AsyncOpKind::kRead;
    ++async_.count;
  }
  // No clock read: the engine's service turns compare (engine.h).
  async_.deadline = std::min(async_.deadline, deadline);
  async_.queued_wrs += wrs;
  PostQueuedAsyncLocked();
  return first;
}

void Connection::PostQueuedAsyncLocked() {
  const uint64_t cap = RdmaInFlightCapLocked();
  // Under a cap, pieces of a quarter of it, as Write()'s: several on the
  // wire, the next posted as the oldest completes.
  const uint64_t max_piece = PipelinedPieceLocked(cap);
  // Under a cap, a completion every quarter of it, so that room comes back
  // in steps while the rest is still on the wire.
  const uint64_t signal_bytes =
      std::clamp<uint64_t>(cap / 4, 1, kProgressSignalBytes);
  while (async_.posted < async_.count && failure_.ok() &&
         inline_.qp != nullptr) {
    // The bytes on the NIC that a completion is still awaited for, as
    // Write() counts them: unsignalled work requests past the last
    // signalled one (copied or inline messages) report nothing until
    // somebody posts again, so counting them could hold this op for ever.
    uint64_t in_flight =
        sq_.signaled_end() > sq_.completed() ? sq_.BytesOutstanding() : 0;
    size_t index = async_.posted;
    uint64_t offset = async_.post_offset;
    async_chain_.Begin(signal_bytes);
    while (!async_chain_.full() && index < async_.count) {
      AsyncOp& op = async_.At(index);
      if (op.kind == AsyncOpKind::kSend) {
        // Posted whole when it was accepted, which PostSendFrom() does only
        // once nothing waits here; kept for safety.
        ++index;
        continue;
      }
      const uint64_t length = std::min(op.length - offset, max_piece);
      if ((in_flight > 0 && in_flight + length > cap) ||
          !sq_.HasRoom(async_chain_.size() + 1 + kControlReserve)) {
        break;  // a completion of what is in flight makes room
      }
      const uint64_t seq = sq_.posted() + async_chain_.size();
      async_chain_.Append(op.local_addr + offset, op.lkey,
                          op.remote_addr + offset, op.rkey, length,
                          op.kind == AsyncOpKind::kWrite);
      if (offset == 0) op.first_seq = seq;
      in_flight += length;
      offset += length;
      if (offset >= op.length) {
        // Each op's last work request is signalled: its completion ends it.
        op.last_seq = seq;
        async_chain_.SignalLast();
        ++index;
        offset = 0;
      }
    }
    if (async_chain_.empty()) {
      async_.posted = index;  // past the sends only, if anything
      return;
    }
    // The last of every post is signalled: with ops still waiting, its
    // completion is what posts them.
    async_chain_.SignalLast();
    const uint32_t batch = async_chain_.size();
    if (absl::Status status = PostSendLocked(async_chain_.head(), batch);
        !status.ok()) {
      // The connection has failed (PostSendLocked said so). Ops none of
      // whose work requests were posted end FAILED now, newest first off
      // the tail; the rest end with their completions or the flush.
      while (async_.count > async_.posted) {
        AsyncOp& last = async_.At(async_.count - 1);
        if (last.first_seq < sq_.posted()) break;
        --async_.count;
        engine_->Finish(EndOf(last, this, OpOutcome::kFailed, status));
      }
      // The async ring is FIFO, so the engine's queue gets these before the
      // older ones: handles, not positions, name ops.
      async_.queued_wrs = 0;
      async_.post_offset = 0;
      AdvanceAsyncAfterFailureLocked(env_.Now());
      return;
    }
    async_.queued_wrs -= std::min<uint64_t>(async_.queued_wrs, batch);
    async_.posted = index;
    async_.post_offset = offset;
    stats_.rdma_bytes += async_chain_.bytes();
  }
}

void Connection::EndAsyncOpLocked(OpOutcome outcome, absl::Status status) {
  AsyncOp& op = async_.At(0);
  Completion done = EndOf(op, this, outcome, std::move(status));
  // A message was counted sent when it was posted.
  if (outcome == OpOutcome::kCompleted && op.kind != AsyncOpKind::kSend) {
    ++(op.kind == AsyncOpKind::kWrite ? stats_.rdma_writes : stats_.rdma_reads);
  }
  async_.PopOldest();
  if (async_.posted > 0) {
    --async_.posted;
  } else {
    async_.post_offset = 0;  // it ended before all of it went out
  }
  engine_->Finish(std::move(done));
}

void Connection::EndAsyncOpsLocked(uint64_t seq, ibv_wc_status status) {
  const bool ok = status == IBV_WC_SUCCESS;
  while (async_.count > 0) {
    const AsyncOp& op = async_.At(0);
    if (op.first_seq > seq) break;
    // A rendezvous message is done with when the peer has read it, which
    // its "finished" count says (it may come before the request's
    // completion is seen, or long after).
    const bool read = op.rendezvous_ordinal <= rendezvous_finished_;
    if (ok) {
      if (op.last_seq > seq || !read) break;
      EndAsyncOpLocked(OpOutcome::kCompleted, absl::OkStatus());
      continue;
    }
    if (op.last_seq < seq && !async_.error_seen && read) {
      // RC: an error on `seq` means everything before it succeeded.
      EndAsyncOpLocked(OpOutcome::kCompleted, absl::OkStatus());
      continue;
    }
    OpOutcome outcome = OpOutcome::kFailed;
    if (op.kind != AsyncOpKind::kRead) {
      const bool refused = !async_.error_seen && op.first_seq == seq &&
                           RefusedBeforeEffect(status);
      if (!refused) outcome = OpOutcome::kOutcomeUnknown;
    }
    EndAsyncOpLocked(outcome, !failure_.ok()
                                  ? failure_
                                  : absl::UnavailableError(absl::StrCat(
                                        name_, ": operation failed")));
  }
  if (!ok) async_.error_seen = true;
}

void Connection::EndAllAsyncOpsLocked(const absl::Status& why) {
  async_.queued_wrs = 0;
  while (async_.count > 0) {
    const AsyncOp& op = async_.At(0);
    // A WRITE none of whose pieces went out cannot have changed anything;
    // a SEND always went out (at its post).
    const bool maybe_written =
        op.kind != AsyncOpKind::kRead && op.first_seq != AsyncOp::kUnposted;
    EndAsyncOpLocked(
        maybe_written ? OpOutcome::kOutcomeUnknown : OpOutcome::kFailed, why);
  }
}

void Connection::AdvanceAsyncAfterFailureLocked(Deadline now) {
  if (failure_.ok() || async_.count == 0) return;
  if (!async_.quiescing) {
    async_.quiescing = true;
    async_.flush_deadline = now + kFlushWait;
    // Every op's last work request is signalled, so each gets its flush.
    if (inline_.qp != nullptr) (void)ModifyQpToError(verbs_, inline_.qp);
    return;
  }
  if (sq_.Idle()) {
    EndAllAsyncOpsLocked(failure_);
    return;
  }
  if (now < async_.flush_deadline) return;
  // The provider did not flush in time: destroying the QP guarantees the
  // NIC no longer touches the memory (as QuiesceLocked does).
  std::fprintf(stderr,
               "rdma_transport: %s: %zu asynchronous operation(s) not flushed "
               "within %lld ms of the failure; destroying the QP\n",
               name_.c_str(), async_.count,
               static_cast<long long>(kFlushWait.count()));
  if (registered_) {
    context_.UnregisterListener(this);
    registered_ = false;
  }
  if (inline_.qp != nullptr) {
    (void)verbs_.DestroyQp(inline_.qp);
    inline_.qp = nullptr;
  }
  sq_.CompleteAll();
  EndAllAsyncOpsLocked(failure_);
}

void Connection::CheckAsyncDeadlinesLocked(Deadline now) {
  if (async_.count == 0) {
    async_.deadline = kNoDeadline;
    return;
  }
  if (now < async_.deadline) return;
  // async_.deadline is only a lower bound (ops that ended keep it there):
  // look for an op really overdue, and make the bound exact if none is.
  Deadline earliest = kNoDeadline;
  for (size_t i = 0; i < async_.count; ++i) {
    const AsyncOp& op = async_.At(i);
    if (op.deadline > now) {
      earliest = std::min(earliest, op.deadline);
      continue;
    }
    // An RC operation cannot be cancelled but by failing its QP: the flush
    // then ends this op and every other in flight (AdvanceAsync...).
    const auto late = std::chrono::duration_cast<std::chrono::microseconds>(
        now - op.deadline);
    FailLocked(absl::DeadlineExceededError(absl::StrCat(
        name_, ": asynchronous ", AsyncOpName(op), " (handle ", op.handle, ", ",
        op.length, " bytes) not done by its deadline (seen ", late.count(),
        " us after it); the connection was failed to end it")));
    async_.deadline = kNoDeadline;
    AdvanceAsyncAfterFailureLocked(now);
    return;
  }
  async_.deadline = earliest;
}

void Connection::EngineDispatch(std::span<const ibv_wc> wcs) {
  std::unique_lock<ConnectionLock> lock = Enter();
  for (const ibv_wc& wc : wcs) HandleCompletionLocked(wc);
  engine_dispatched_ += wcs.size();
  if (async_.posted < async_.count) PostQueuedAsyncLocked();
  MaybeReturnCreditsLocked();
  if (!failure_.ok() && async_.count > 0) {
    AdvanceAsyncAfterFailureLocked(env_.Now());
  }
  NotifyLocked();
}

Deadline Connection::EngineService(Deadline now, bool setup_readable) {
  std::unique_lock<ConnectionLock> lock = Enter();
  if (closed_ || !established_) return kNoDeadline;
  // Inside a blocking call of this connection (which drives the engine),
  // its own wait does all of this.
  if (active_calls_ > 0) return kNoDeadline;
  ServiceLocked(lock, setup_readable, false);
  CheckStalledLocked(now);
  if (failure_.ok()) CheckAsyncDeadlinesLocked(now);
  if (failure_.ok()) (void)MaybeKeepaliveLocked(now);
  Deadline wake = failure_.ok() ? NextTimerLocked() : kNoDeadline;
  if (failure_.ok() && async_.count > 0) {
    wake = std::min(wake, async_.deadline);
  }
  if (!failure_.ok() && async_.count > 0) {
    AdvanceAsyncAfterFailureLocked(now);
    if (async_.count > 0) wake = std::min(wake, async_.flush_deadline);
  }
  return wake;
}

void Connection::EngineFail(const absl::Status& status) {
  std::unique_lock<ConnectionLock> lock = Enter();
  if (closed_) return;
  FailLocked(WithContext(status, name_));
  if (async_.count > 0) AdvanceAsyncAfterFailureLocked(env_.Now());
}

}  // namespace rdma_transport
