// File: transport/connection_internal.h
//
// What the Connection's own .cc files share and nothing else may include:
// how a call is counted and left (CallScope), the one wait loop every wait
// goes through (WaitUntilLocked), how one message is posted
// (PostMessageLocked: Send(), SendFrom(), PostSendFrom()), and the
// constants of more than one file.
// Internal to //transport:transport; the class contract is in connection.h.

#ifndef RDMA_TRANSPORT_TRANSPORT_CONNECTION_INTERNAL_H_
#define RDMA_TRANSPORT_TRANSPORT_CONNECTION_INTERNAL_H_

#include <arpa/inet.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <mutex>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "transport/connection.h"

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
inline std::unique_lock<std::mutex> Connection::Enter() const {
  // Uncontended: one atomic operation, as a plain lock.
  std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
  if (lock.owns_lock()) [[likely]]
    return lock;
  entering_.fetch_add(1, std::memory_order_relaxed);
  lock.lock();
  entering_.fetch_sub(1, std::memory_order_relaxed);
  return lock;
}

inline void Connection::NotifyLocked() {
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
  CallScope(Connection& connection, std::unique_lock<std::mutex>& lock)
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
  std::unique_lock<std::mutex>& lock_;
};

// Inline: Send()/SendFrom() post every message through it, and a call of
// its own showed as one more step on the message path.
inline absl::StatusOr<uint64_t> Connection::PostMessageLocked(
    const std::byte* data, uint32_t size, const MemoryRegion* from,
    bool send_inline, ImmKind kind, bool signal) {
  const bool copy = !send_inline && from == nullptr;
  // The credits it carries include the receives still waiting to be posted.
  if (!reposts_.empty()) {
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
  if (absl::Status status = PostSendLocked(&wr, 1); !status.ok()) {
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
  return seq;
}

inline absl::Status Connection::CheckSendSourceLocked(
    const MemoryRegion& region, size_t offset, size_t length,
    const char* call) const {
  if (!failure_.ok() || closed_ || closing_ || !established_) [[unlikely]] {
    return UsableLocked();
  }
  if (!region.Holds(offset, length)) [[unlikely]] {
    return CheckCallerRange(region, offset, length, call);
  }
  return absl::OkStatus();
}

inline void Connection::ReleaseViewSlotLocked(uint32_t slot) {
  --stats_.views_held;
  RecycleSlotLocked(slot);
}

template <typename Ready>
absl::Status Connection::WaitUntilLocked(std::unique_lock<std::mutex>& lock,
                                         Deadline deadline, Ready ready,
                                         const char* waiting_for) {
  while (true) {
    if (!failure_.ok()) return failure_;
    if (ready()) return absl::OkStatus();
    const uint64_t token = env_.PrepareWait();
    if (PollOnceLocked(lock)) continue;
    if (!WaitLocked(lock, token, deadline).ok()) {
      return absl::DeadlineExceededError(
          absl::StrCat(name_, ": ", waiting_for, " before the deadline"));
    }
  }
}

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TRANSPORT_CONNECTION_INTERNAL_H_
