// File: transport/connection_messaging.cc
//
// Two-sided messaging: Send() (inline or copied into a send slot, one
// SEND_WITH_IMM carrying the credits owed), Receive() (copy out, repost,
// owe a credit), reposting receive slots and returning credits in a message
// of their own (credits.h, immediate_data.h). Arrivals are recorded by the
// progress loop (connection_progress.cc).

#include <arpa/inet.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "transport/connection.h"
#include "transport/connection_internal.h"
#include "transport/inline_size.h"
#include "verbs_shim/verbs_error.h"

namespace rdma_transport {

const std::byte* Connection::RecvSlotLocked(uint32_t slot) const {
  if (srq_pool_ != nullptr) return srq_pool_->slot(slot);
  return recv_ring_.data() + size_t{slot} * slot_size_;
}

absl::Status Connection::RepostLocked(uint32_t slot) {
  if (srq_pool_ != nullptr) {
    absl::Status status = srq_pool_->Repost(slot);
    if (!status.ok()) [[unlikely]] {
      status = WithContext(status, name_);
      FailLocked(status);
    }
    return status;
  }
  ReceiveReposts one;
  one.Add(slot);
  return PostOwnReceivesLocked(one);
}

absl::Status Connection::PostOwnReceivesLocked(ReceiveReposts& slots) {
  absl::Status status = slots.Post(
      verbs_, inline_.qp, reinterpret_cast<uint64_t>(recv_ring_.data()),
      slot_size_, recv_ring_.lkey(), engine_slot_);
  if (!status.ok()) [[unlikely]] {
    status = WithContext(status, absl::StrCat(name_, ": reposting receives"));
    FailLocked(status);
  }
  return status;
}

absl::Status Connection::PostDeferredRepostsLocked() {
  const uint32_t count = reposts_.count();
  absl::Status status = PostOwnReceivesLocked(reposts_);
  if (status.ok()) owed_credits_.Add(count);
  return status;
}

void Connection::MaybeReturnCreditsLocked() {
  if (!established_ || closing_ || !failure_.ok() || peer_closed_) return;
  while (owed_credits_.WorthAMessage() && send_credits_.CanSendCreditReturn() &&
         sq_.HasRoom(1)) {
    const uint32_t credits = owed_credits_.Take();
    absl::StatusOr<uint64_t> seq = PostControlLocked(
        WrKind::kSendCredit, EncodeImm(ImmKind::kCredit, credits));
    if (!seq.ok()) return;
    send_credits_.Spend();
    ++stats_.credit_messages_sent;
  }
}

absl::Status Connection::Send(std::span<const std::byte> message,
                              Deadline deadline) {
  const size_t size = message.size();
  std::unique_lock<std::mutex> lock = Enter();
  CallScope call(*this, lock);
  if (absl::Status status = UsableLocked(); !status.ok()) return status;
  if (size > send_limit_) [[unlikely]] {
    return absl::InvalidArgumentError(
        absl::StrCat(name_, ": message of ", size,
                     " bytes exceeds the maximum message size ", send_limit_,
                     " (the peer's receive slot); send larger payloads with "
                     "Write()"));
  }
  const bool send_inline =
      ShouldSendInline(static_cast<uint32_t>(size), inline_.usable_inline);
  absl::Status ready = WaitUntilLocked(
      lock, deadline,
      [&] {
        return peer_closed_ ||
               (send_credits_.CanSendData() && sq_.HasRoom(1) &&
                (send_inline ||
                 send_slot_seq_[next_send_slot_] <= sq_.completed()));
      },
      "no send credit or slot");
  if (absl::IsDeadlineExceeded(ready) && failure_.ok()) {
    return absl::DeadlineExceededError(
        absl::StrCat(ready.message(), " (", send_credits_.available(),
                     " credits; the peer is not receiving)"));
  }
  if (!ready.ok()) return ready;
  if (peer_closed_) return PeerClosedError();

  ibv_sge sge;
  ibv_send_wr wr = {};
  wr.wr_id = MakeWrId(WrKind::kSendData, engine_slot_, 0);
  wr.opcode = IBV_WR_SEND_WITH_IMM;
  // The credits it carries include the receives still waiting to be posted.
  if (!reposts_.empty()) {
    if (absl::Status status = PostDeferredRepostsLocked(); !status.ok()) {
      return status;
    }
  }
  wr.imm_data = htonl(EncodeImm(ImmKind::kData, owed_credits_.Take()));
  wr.sg_list = &sge;
  wr.num_sge = size > 0 ? 1 : 0;
  uint32_t slot = 0;
  if (send_inline) {
    sge.addr = reinterpret_cast<uint64_t>(message.data());
    sge.length = static_cast<uint32_t>(size);
    sge.lkey = 0;  // inline data is copied by the CPU; no key is used
    wr.send_flags = IBV_SEND_INLINE;
  } else {
    slot = next_send_slot_;
    std::byte* destination = send_ring_.data() + size_t{slot} * slot_size_;
    if (size > 0) std::memcpy(destination, message.data(), size);
    sge.addr = reinterpret_cast<uint64_t>(destination);
    sge.length = static_cast<uint32_t>(size);
    sge.lkey = send_ring_.lkey();
  }
  const uint64_t seq = sq_.posted();
  if (absl::Status status = PostSendLocked(&wr, 1); !status.ok()) {
    return status;
  }
  send_credits_.Spend();
  if (!send_inline) {
    send_slot_seq_[slot] = seq + 1;
    next_send_slot_ = (next_send_slot_ + 1) % send_slot_seq_.size();
  }
  ++stats_.messages_sent;
  stats_.bytes_sent += size;
  if (send_inline) ++stats_.inline_sends;
  return absl::OkStatus();
}

absl::StatusOr<size_t> Connection::Receive(std::span<std::byte> buffer,
                                           Deadline deadline) {
  std::unique_lock<std::mutex> lock = Enter();
  CallScope call(*this, lock);
  while (true) {
    // Messages that arrived intact are delivered even after the connection
    // failed (a credit return racing with the peer's close, say): they are
    // in our memory, in order, and the sender was told they were sent.
    if (closed_ || closing_ || !established_) return UsableLocked();
    if (arrived_count_ > 0) {
      const auto [slot, length] = arrived_[arrived_head_];
      if (length > buffer.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat(name_, ": the next message has ", length,
                         " bytes but the buffer holds ", buffer.size(),
                         "; it stays queued"));
      }
      arrived_head_ = (arrived_head_ + 1) % arrived_.size();
      --arrived_count_;
      if (length > 0) std::memcpy(buffer.data(), RecvSlotLocked(slot), length);
      // A shared slot goes back to the engine's pool whatever became of
      // this connection; a slot of its own only while the peer may use it.
      const bool peer_may_send = failure_.ok() && !peer_closed_;
      if (srq_pool_ != nullptr) {
        if (RepostLocked(slot).ok() && peer_may_send) {
          owed_credits_.Add(1);
          MaybeReturnCreditsLocked();
        }
      } else if (peer_may_send) {
        // Posted with the others once their credits are worth announcing
        // (receive_reposts.h).
        reposts_.Add(slot);
        if ((reposts_.full() ||
             owed_credits_.WorthAMessageWith(reposts_.count())) &&
            PostDeferredRepostsLocked().ok()) {
          MaybeReturnCreditsLocked();
        }
      }
      ++stats_.messages_received;
      stats_.bytes_received += length;
      return size_t{length};
    }
    if (peer_closed_) return PeerClosedError();
    if (!failure_.ok()) {
      // Completions of messages that arrived before the failure may still be
      // in the CQ.
      if (PollOnceLocked(lock)) continue;
      return failure_;
    }
    const uint64_t token = env_.PrepareWait();
    if (PollOnceLocked(lock)) continue;
    if (!WaitLocked(lock, token, deadline).ok()) {
      return absl::DeadlineExceededError(
          absl::StrCat(name_, ": no message before the deadline"));
    }
  }
}

}  // namespace rdma_transport
