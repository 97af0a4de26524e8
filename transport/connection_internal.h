// File: transport/connection_internal.h
//
// What the Connection's own .cc files share and nothing else may include:
// how a call is counted and left (CallScope), the one wait loop every wait
// goes through (WaitUntilLocked), how one message is posted
// (SendEagerLocked and PostMessageLocked: Send(), SendFrom(),
// PostSendFrom(); PostSendFastLocked, the posting itself), and the
// constants of more than one file.
// Internal to //transport:transport; the class contract is in connection.h.

#ifndef RDMA_TRANSPORT_TRANSPORT_CONNECTION_INTERNAL_H_
#define RDMA_TRANSPORT_TRANSPORT_CONNECTION_INTERNAL_H_

#include <arpa/inet.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "transport/connection.h"
#include "transport/inline_size.h"
#include "transport/wr_id.h"

namespace rdma_transport {

// How long a follower waits on the condition variable before looking again.
inline constexpr auto kFollowerWait = std::chrono::milliseconds(50);
// What Close() writes on the setup stream before closing it: a peer that
// reads EOF without it knows this process is gone.
inline constexpr uint8_t kGoodbyeByte = 'G';
// Send-queue entries PostWrite()/PostRead()/PostSendFrom() leave for credit
// returns, the keepalive probe and the close message.
inline constexpr uint32_t kControlReserve = 2;

// Inline: every call of the message path takes and leaves the lock once,
// and a function call of its own for either showed in the profile.
[[gnu::always_inline]] inline std::unique_lock<ConnectionLock>
Connection::Enter() const {
  // Uncontended: the biased lock's loads and stores (no atomic
  // instruction) for the thread that owns its bias, one atomic operation
  // once it is shared (connection_lock.h).
  std::unique_lock<ConnectionLock> lock(mu_, std::try_to_lock);
  if (lock.owns_lock()) [[likely]]
    return lock;
  entering_.fetch_add(1, std::memory_order_relaxed);
  lock.lock();
  entering_.fetch_sub(1, std::memory_order_relaxed);
  return lock;
}

// The lock for setup (connection_lock.h, LockForSetup()): the thread that
// dials or accepts must not take the bias the user's thread will want.
inline std::unique_lock<ConnectionLock> Connection::EnterForSetup() {
  mu_.LockForSetup();
  return std::unique_lock<ConnectionLock>(mu_, std::adopt_lock);
}

inline void Connection::NotifyLocked() {
  if (wake_interest_ == 0) [[likely]]
    return;
  // Both sides of cv_ hold mu_: no waiter counted means none to wake (and
  // no cache line of cv_ read per dispatched completion).
  if (cv_waiters_ > 0) cv_.notify_all();
  // The same for the Env's waiters (an atomic operation on a shared line
  // per call saved): a thread of this connection counts itself in
  // env_waiters_ under mu_ before it waits, after its token. kEvent keeps
  // notifying: a thread may wait on event_fd() through the Env.
  if (env_waiters_ > 0 || ready_fd_ >= 0) env_.Notify();
}

// Counts a call in flight for Close() to wait on, and ends it with
// LeaveLocked() (kEvent: the CQ re-armed, the readiness fd up to date).
class Connection::CallScope {
 public:
  CallScope(Connection& connection, std::unique_lock<ConnectionLock>& lock)
      : connection_(connection), lock_(lock) {
    ++connection_.active_calls_;
  }
  ~CallScope() {
    if (connection_.event_mode_ && lock_.owns_lock()) {
      connection_.LeaveLocked(lock_);
    }
    if (--connection_.active_calls_ == 0) connection_.NotifyLocked();
  }

 private:
  Connection& connection_;
  std::unique_lock<ConnectionLock>& lock_;
};

// Always inline: every message is posted through it, and the frame of
// PostSendLocked() (saving the registers the stamping loop uses) was 28
// instructions a message; the refusal is out of line.
[[gnu::always_inline]] inline absl::Status Connection::PostSendFastLocked(
    ibv_send_wr* first, uint32_t count) {
  sq_.Stamp(first, count);
  ibv_send_wr* bad = nullptr;
  absl::Status status = verbs_.PostSend(inline_.qp, first, &bad);
  if (status.ok()) [[likely]] {
    sq_.Posted(count);
    return status;
  }
  return PostSendFailedLocked(first, bad, std::move(status));
}

// Always inline: Send()/SendFrom() post every message through it, and a
// call of its own showed as one more step on the message path (the
// compiler left it out of line when only asked).
[[gnu::always_inline]] inline absl::StatusOr<uint64_t>
Connection::PostMessageLocked(const std::byte* data, uint32_t size,
                              const MemoryRegion* from, bool send_inline,
                              ImmKind kind, bool signal) {
  const bool copy = !send_inline && from == nullptr;
  // The receives Receive() emptied go back after the message where the lag
  // of their credits is harmless (credits.h, RepostsMayFollow), so that the
  // message does not wait for a PostRecv: over rxe under qemu TCG that
  // PostRecv was 0.46-0.74 us of the 1.9 us from a ping's arrival to the
  // echo's post (docs/performance.md, issue 12). Otherwise before it, and
  // the message carries their credits.
  if (!reposts_.empty() && !owed_credits_.RepostsMayFollow(reposts_.count())) {
    if (absl::Status status = PostDeferredRepostsLocked(); !status.ok()) {
      return status;
    }
  }
  // The work request stays a member, zeroed once: only what differs per
  // message is written (zeroing 128 bytes with `rep stos` per message, then
  // reading them back in the provider, cost more than the rest of Send()).
  ibv_send_wr& wr = message_wr_;
  ibv_sge& sge = message_sge_;
  wr.wr_id = MakeWrId(WrKind::kSendData, engine_slot_, 0);
  wr.opcode = IBV_WR_SEND_WITH_IMM;
  wr.sg_list = &sge;
  wr.num_sge = size > 0 ? 1 : 0;
  wr.send_flags = 0;
  sge.addr = reinterpret_cast<uint64_t>(data);
  sge.length = size;
  sge.lkey = from != nullptr ? from->lkey() : 0;
  uint32_t slot = 0;
  if (send_inline) {
    sge.lkey = 0;  // inline data is copied by the CPU; no key is used
    wr.send_flags = IBV_SEND_INLINE;
  } else if (copy) {
    slot = next_send_slot_;
    std::byte* destination = send_ring_.data() + size_t{slot} * slot_size_;
    if (size > 0) std::memcpy(destination, data, size);
    sge.addr = reinterpret_cast<uint64_t>(destination);
    sge.lkey = send_ring_.lkey();
  } else {
    // From the caller's memory: its completion says when it may be reused.
    wr.send_flags = IBV_SEND_SIGNALED;
  }
  if (signal) wr.send_flags |= IBV_SEND_SIGNALED;
  wr.imm_data = htonl(TakeImmLocked(kind));
  const uint64_t seq = sq_.posted();
  if (absl::Status status = PostSendFastLocked(&wr, 1); !status.ok()) {
    return status;
  }
  send_credits_.Spend();
  if (copy) {
    send_slot_seq_[slot] = seq + 1;
    if (++next_send_slot_ == send_slot_seq_.size()) next_send_slot_ = 0;
  }
  // A rendezvous request counts as the message it stands for (below).
  ++stats_.messages_sent;
  if (kind == ImmKind::kData) {
    stats_.bytes_sent += size;
    if (send_inline) ++stats_.inline_sends;
  }
  // Reposts that followed it go out once enough have gathered (credits.h,
  // RepostsMayGather): one PostRecv per 8 round trips of a ping-pong on the
  // default ring; or now if no receive came since the message before, so
  // that a side which has stopped receiving does not keep them (and their
  // credits) from the peer. A failed repost fails the connection; the
  // message went out.
  if (!reposts_.empty() &&
      (!reposts_.TakeAddedSinceAsked() ||
       !owed_credits_.RepostsMayGather(reposts_.count()))) {
    (void)PostDeferredRepostsLocked();
  }
  return seq;
}

inline bool Connection::CanPostMessageLocked(bool copy) const {
  return send_credits_.CanSendData() && sq_.HasRoom(1) &&
         async_.posted == async_.count &&
         (!copy || send_slot_seq_[next_send_slot_] <= sq_.completed());
}

// Always inline: Send() and SendFrom() post through it, and its frame
// showed in the simulator's profile (27 instructions a message at 4 KiB);
// a message that must wait calls WaitToPostMessageLocked().
[[gnu::always_inline]] inline absl::StatusOr<uint64_t>
Connection::SendEagerLocked(std::unique_lock<ConnectionLock>& lock,
                            const std::byte* data, uint32_t size,
                            const MemoryRegion* from, Deadline deadline,
                            ImmKind kind) {
  const bool send_inline = ShouldSendInline(size, inline_.usable_inline);
  const bool copy = !send_inline && from == nullptr;
  if (!failure_.ok() || peer_closed_ || !CanPostMessageLocked(copy))
      [[unlikely]] {
    if (absl::Status ready = WaitToPostMessageLocked(lock, copy, deadline);
        !ready.ok()) {
      return ready;
    }
  }
  return PostMessageLocked(data, size, from, send_inline, kind, false);
}

inline absl::Status Connection::CheckSendSourceLocked(
    const MemoryRegion& region, size_t offset, size_t length,
    const char* call) const {
  if (!open_) [[unlikely]] {
    return UsableLocked();
  }
  if (!region.Holds(offset, length)) [[unlikely]] {
    return CheckCallerRange(region, offset, length, call);
  }
  return absl::OkStatus();
}

// Inline: every message passes here twice (its send completion and its
// arrival), and the call of the full dispatch showed in the simulator's
// profile. Handles a successful data send with no asynchronous op waiting
// on it, and a data message into the own ring that carries only credits;
// DispatchCompletionLocked() everything else.
inline void Connection::HandleCompletionLocked(const ibv_wc& wc) {
  if (wc.status == IBV_WC_SUCCESS) [[likely]] {
    const uint8_t kind = WrIdKind(wc.wr_id);
    if (kind == static_cast<uint8_t>(WrKind::kSendData) && async_.count == 0) {
      sq_.Completed(SequenceFromWrIdValue(WrIdValue(wc.wr_id), sq_.posted()));
      ++completions_;
      return;
    }
    if (kind == static_cast<uint8_t>(WrKind::kRecv) &&
        (wc.wc_flags & IBV_WC_WITH_IMM)) {
      const uint32_t imm = ntohl(wc.imm_data);
      if (ImmIsPlainData(imm)) {
        ++completions_;
        send_credits_.Return(ImmCredits(imm));
        PushArrivalLocked(static_cast<uint32_t>(WrIdValue(wc.wr_id)),
                          wc.byte_len, false);
        return;
      }
    }
  }
  DispatchCompletionLocked(wc);
}

inline void Connection::PushArrivalLocked(uint32_t slot, uint32_t length,
                                          bool rendezvous) {
  // No division on this path: the ring wraps by comparison.
  size_t tail = arrived_head_ + arrived_count_;
  if (tail >= arrived_.size()) tail -= arrived_.size();
  Arrival& arrival = arrived_[tail];
  arrival.slot = slot;
  arrival.length = length;
  arrival.rendezvous = rendezvous;
  ++arrived_count_;
  if (engine_attached_) engine_->NoteArrival(engine_slot_);
}

// Inline, as PushArrivalLocked(): every message received passes here.
inline void Connection::PopArrivalLocked() {
  if (++arrived_head_ == arrived_.size()) arrived_head_ = 0;
  --arrived_count_;
  if (engine_attached_) engine_->NoteReceived(engine_slot_, arrived_count_ > 0);
}

// Inline: every message received passes here, and most only join the
// deferred reposts.
inline void Connection::RecycleSlotLocked(uint32_t slot) {
  // A shared slot goes back to the engine's pool whatever became of this
  // connection; a slot of its own only while the peer may use it.
  // (A slot is only ever recycled once established_.)
  const bool peer_may_send = open_ && !peer_closed_;
  if (srq_pool_ != nullptr) [[unlikely]] {
    RecycleSharedSlotLocked(slot, peer_may_send);
    return;
  }
  if (!peer_may_send) [[unlikely]]
    return;
  // Posted with the others once their credits are worth announcing
  // (receive_reposts.h).
  reposts_.Add(slot);
  if (reposts_.full() || owed_credits_.WorthAMessageWith(reposts_.count())) {
    PostRepostsAndCreditsLocked();
  }
}

inline bool Connection::CreditMessageDueLocked() const {
  // The reposts still gathering count with what is owed: a credit
  // message's slot is owed at once, beside them, and the two may reach the
  // batch where neither alone does (the peer may then hold too few credits
  // to send the data this side waits for).
  return owed_credits_.WorthAMessageWith(reposts_.count()) ||
         finished_owed_ > 0 || (credit_due_ && owed_credits_.owed() > 0);
}

inline uint32_t Connection::TakeImmLocked(ImmKind kind) {
  const uint32_t finished = std::min(finished_owed_, kMaxFinishedPerImm);
  finished_owed_ -= finished;
  if (owed_credits_.owed() <= kMaxCreditsPerImm) credit_due_ = false;
  return EncodeImm(kind, owed_credits_.Take(), finished);
}

inline void Connection::ReleaseViewSlotLocked(uint32_t slot) {
  --stats_.views_held;
  RecycleSlotLocked(slot);
}

// Most waits end at the first poll, so the token (a virtual call into the
// Env) is taken only after a poll found nothing, and a second poll then
// looks again: whatever arrives after that look changes the token.
inline bool Connection::PollOrPrepareWaitLocked(
    std::unique_lock<ConnectionLock>& lock, uint64_t& token) {
  if (PollOnceLocked(lock)) return true;
  token = env_.PrepareWait();
  return PollOnceLocked(lock);
}

// Always inline: the message path waits through it for every completion,
// and out of line its frame cost about as much as the check it makes.
template <typename Ready>
[[gnu::always_inline]] inline absl::Status Connection::WaitUntilLocked(
    std::unique_lock<ConnectionLock>& lock, Deadline deadline, Ready ready,
    const char* waiting_for) {
  while (true) {
    if (!failure_.ok()) return failure_;
    if (ready()) return absl::OkStatus();
    uint64_t token;
    if (PollOrPrepareWaitLocked(lock, token)) continue;
    if (!WaitLocked(lock, token, deadline).ok()) {
      return absl::DeadlineExceededError(
          absl::StrCat(name_, ": ", waiting_for, " before the deadline"));
    }
  }
}

// Always inline: a zero-copy send above 1 KiB waits here for its
// completion, and out of line its frame was 29 instructions a message.
[[gnu::always_inline]] inline absl::Status Connection::WaitForSeqLocked(
    std::unique_lock<ConnectionLock>& lock, uint64_t seq, Deadline deadline) {
  return WaitUntilLocked(
      lock, deadline, [&] { return sq_.completed() > seq; },
      "work request not completed");
}

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TRANSPORT_CONNECTION_INTERNAL_H_
