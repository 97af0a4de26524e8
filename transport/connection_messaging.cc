// File: transport/connection_messaging.cc
//
// Two-sided messaging: Send() and SendFrom() (inline, copied into a send
// slot, by scatter/gather from a registered region, or by rendezvous; one
// SEND_WITH_IMM carrying what is owed to the peer), the receives (copy out,
// lend the slot, or READ a rendezvous message into the caller's memory),
// reposting receive slots and returning credits and finished rendezvous
// reads in a message of their own (credits.h, immediate_data.h). Arrivals
// are recorded by the progress loop (connection_progress.cc).

#include <arpa/inet.h>

#include <array>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "transport/connection.h"
#include "transport/connection_internal.h"
#include "transport/deadline.h"
#include "transport/inline_size.h"
#include "transport/rendezvous_request.h"
#include "verbs_shim/verbs_error.h"

namespace rdma_transport {
namespace {

// SendFrom() copies a message of at most this many bytes into a send slot
// (as Send() does) instead of sending it by scatter/gather and waiting for
// its completion: on the simulator (transport_benchmark BM_Overhead, one
// run, medians of 3) the copy costs 1.21-1.22x raw post+poll at 8-256 B
// against 1.35-1.50x for the wait, and the wait wins from 4 KiB (1.34-1.38x
// against 1.45x; 0.92-0.97x against 1.56-1.60x at 64 KiB).
constexpr size_t kSendFromCopyBytes = 1024;

}  // namespace

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

absl::Status Connection::TooLargeError(size_t size) const {
  return absl::InvalidArgumentError(absl::StrCat(
      name_, ": message of ", size, " bytes exceeds the maximum message size ",
      send_limit_, " (the peer's receive slot) and rendezvous is off (",
      options_.rendezvous ? "the peer did not offer it"
                          : "ConnectionOptions::rendezvous is false",
      "); send larger payloads with Write()"));
}

absl::Status Connection::CheckCallerRange(const MemoryRegion& region,
                                          size_t offset, size_t length,
                                          const char* call) const {
  if (!region.valid()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name_, ": ", call, "() without a memory region"));
  }
  if (absl::Status status = region.CheckRange(offset, length); !status.ok()) {
    return absl::OutOfRangeError(
        absl::StrCat(name_, ": ", call, "(): ", status.message()));
  }
  return absl::OkStatus();
}

void Connection::MaybeReturnCreditsLocked() {
  if (!established_ || closing_ || !failure_.ok() || peer_closed_) return;
  while (CreditMessageDueLocked() && send_credits_.CanSendCreditReturn() &&
         sq_.HasRoom(1)) {
    // Receives gathering after a message (RepostsMayGather) go first, so
    // that the credit message carries theirs too.
    if (!reposts_.empty() && !PostDeferredRepostsLocked().ok()) return;
    absl::StatusOr<uint64_t> seq =
        PostControlLocked(WrKind::kSendCredit, TakeImmLocked(ImmKind::kCredit));
    if (!seq.ok()) return;
    send_credits_.Spend();
    ++stats_.credit_messages_sent;
  }
}

void Connection::RecycleSharedSlotLocked(uint32_t slot, bool peer_may_send) {
  if (RepostLocked(slot).ok() && peer_may_send) {
    owed_credits_.Add(1);
    MaybeReturnCreditsLocked();
  }
}

void Connection::PostRepostsAndCreditsLocked() {
  if (PostDeferredRepostsLocked().ok()) MaybeReturnCreditsLocked();
}

absl::Status Connection::WaitToPostMessageLocked(
    std::unique_lock<ConnectionLock>& lock, bool copy, Deadline deadline) {
  // While Soft-RoCE's in-flight cap holds one-sided ops back, a message
  // waits for them (PostSendFrom() refuses), so the peer never sees it
  // before their bytes.
  absl::Status ready = WaitUntilLocked(
      lock, deadline,
      [&] { return peer_closed_ || CanPostMessageLocked(copy); },
      "no send credit or slot");
  if (!ready.ok()) [[unlikely]] {
    if (absl::IsDeadlineExceeded(ready) && failure_.ok()) {
      return absl::DeadlineExceededError(absl::StrCat(
          ready.message(), " (", send_credits_.available(), " credits",
          async_.posted == async_.count
              ? "; the peer is not receiving)"
              : absl::StrCat("; ", async_.count - async_.posted,
                             " one-sided operation(s) ahead of it still wait "
                             "for the in-flight cap)")));
    }
    return ready;
  }
  if (peer_closed_) return PeerClosedError();
  return absl::OkStatus();
}

absl::Status Connection::SendRendezvousLocked(
    std::unique_lock<ConnectionLock>& lock, const MemoryRegion& region,
    size_t offset, size_t length, Deadline deadline) {
  std::array<std::byte, kRendezvousRequestBytes> request;
  RemoteRegion{reinterpret_cast<uint64_t>(region.data() + offset), length,
               region.mr()->rkey}
      .Encode(request);
  // The request goes as any message does (inline where the QP has room,
  // else copied into a send slot), in order with the others.
  absl::StatusOr<uint64_t> posted =
      SendEagerLocked(lock, request.data(), kRendezvousRequestBytes, nullptr,
                      deadline, ImmKind::kRendezvous);
  if (!posted.ok()) return posted.status();
  stats_.bytes_sent += length;
  const uint64_t ordinal = ++rendezvous_sent_;
  absl::Status read = WaitUntilLocked(
      lock, deadline,
      [&] { return rendezvous_finished_ >= ordinal || peer_closed_; },
      "the peer reading a rendezvous message");
  if (read.ok() && rendezvous_finished_ < ordinal) read = PeerClosedError();
  if (read.ok()) return read;
  if (failure_.ok()) {
    // The peer may still read the memory, which the caller gets back now:
    // nothing may use the connection any more.
    FailLocked(absl::Status(
        read.code(),
        absl::StrCat(name_, ": the ", length,
                     "-byte message sent by rendezvous was not read (",
                     read.message(),
                     "); the connection fails, as the peer could still read "
                     "the sender's memory")));
  }
  // The NIC must be done serving the peer's READs before the memory goes.
  QuiesceLocked(lock);
  return failure_;
}

absl::Status Connection::Send(std::span<const std::byte> message,
                              Deadline deadline) {
  const size_t size = message.size();
  std::unique_lock<ConnectionLock> lock = Enter();
  CallScope call(*this, lock);
  // open_ stands for UsableLocked()'s checks: one load on the message path.
  if (!open_) [[unlikely]] {
    return UsableLocked();
  }
  if (!OnClockOf(deadline, made_at_)) [[unlikely]] {
    return WrongClockError(name_, deadline);
  }
  if (size <= send_limit_) [[likely]] {
    return SendEagerLocked(lock, message.data(), static_cast<uint32_t>(size),
                           nullptr, deadline)
        .status();
  }
  return SendLargeLocked(lock, message, deadline);
}

absl::Status Connection::SendLargeLocked(std::unique_lock<ConnectionLock>& lock,
                                         std::span<const std::byte> message,
                                         Deadline deadline) {
  const size_t size = message.size();
  if (!path_.rendezvous) return TooLargeError(size);
  // The NIC only reads it: registered for remote reads alone.
  absl::StatusOr<MemoryRegion> registered = context_.RegisterMemory(
      {const_cast<std::byte*>(message.data()), size}, kRemoteRead);
  if (!registered.ok()) {
    return WithContext(registered.status(),
                       absl::StrCat(name_, ": registering a ", size,
                                    "-byte message for rendezvous"));
  }
  return SendRendezvousLocked(lock, *registered, 0, size, deadline);
}

absl::Status Connection::SendFrom(const MemoryRegion& region, size_t offset,
                                  size_t length, Deadline deadline) {
  std::unique_lock<ConnectionLock> lock = Enter();
  CallScope call(*this, lock);
  if (absl::Status checked =
          CheckSendSourceLocked(region, offset, length, "SendFrom");
      !checked.ok()) [[unlikely]] {
    return checked;
  }
  if (!OnClockOf(deadline, made_at_)) [[unlikely]] {
    return WrongClockError(name_, deadline);
  }
  if (length <= rendezvous_threshold_ || !path_.rendezvous) [[likely]] {
    if (length > send_limit_) return TooLargeError(length);
    // By scatter/gather only when neither inline nor a copy goes first.
    const bool gather =
        length > kSendFromCopyBytes &&
        !ShouldSendInline(static_cast<uint32_t>(length), inline_.usable_inline);
    absl::StatusOr<uint64_t> seq = SendEagerLocked(
        lock, region.data() + offset, static_cast<uint32_t>(length),
        gather ? &region : nullptr, deadline);
    if (!seq.ok() || !gather) return seq.status();
    // Bounded by the QP's retry budget, as Write(): the NIC reads the
    // memory until the completion.
    return WaitForSeqLocked(lock, *seq, kNoDeadline);
  }
  if (!region.allows(kRemoteRead)) return RendezvousAccessError(length);
  return SendRendezvousLocked(lock, region, offset, length, deadline);
}

absl::Status Connection::RendezvousAccessError(size_t length) const {
  return absl::FailedPreconditionError(absl::StrCat(
      name_, ": a ", length,
      "-byte message goes by rendezvous (the peer reads it), but the region "
      "was registered without kRemoteRead"));
}

void Connection::ReleaseBorrowed(uint32_t slot) {
  // Not a call Close() waits for (no CallScope): it never lets go of mu_,
  // and giving a slot back wakes nobody on this side.
  std::unique_lock<ConnectionLock> lock = Enter();
  ReleaseViewSlotLocked(slot);
  // kEvent: a failed repost makes the readiness fd readable.
  if (event_mode_) LeaveLocked(lock);
}

absl::StatusOr<size_t> Connection::ReadRendezvousLocked(
    std::unique_lock<ConnectionLock>& lock, const ReceiveTarget& target,
    const RemoteRegion& request, uint32_t slot) {
  const size_t length = request.length;
  // The memory to read into: the caller's region, or its buffer registered
  // for this message (deregistered when this returns: after the READ
  // completed or the QP was flushed).
  MemoryRegion registered;
  const MemoryRegion* local = target.region;
  size_t local_offset = target.region_offset;
  if (local == nullptr) {
    absl::StatusOr<MemoryRegion> buffer =
        context_.RegisterMemory({target.data, length}, kLocalWrite);
    if (!buffer.ok()) {
      return WithContext(buffer.status(),
                         absl::StrCat(name_, ": registering a ", length,
                                      "-byte buffer for a rendezvous message "
                                      "(it stays queued)"));
    }
    registered = *std::move(buffer);
    local = &registered;
    local_offset = 0;
  } else if (!local->allows(kLocalWrite)) {
    return absl::PermissionDeniedError(absl::StrCat(
        name_, ": the next message (", length,
        " bytes) came by rendezvous and is read into the region, which was "
        "registered without kLocalWrite; it stays queued"));
  }
  PopArrivalLocked();
  if (!rendezvous_chain_ready_) {
    rendezvous_pipeline_.Reset(options_.max_rdma_batch);
    rendezvous_chain_.Reset(options_.max_rdma_batch, engine_slot_,
                            inline_.usable_inline);
    rendezvous_chain_ready_ = true;
  }
  const RdmaOp read{local, local_offset, length, request, 0};
  absl::Status status = RdmaLocked(lock, {&read, 1}, false, rendezvous_chain_,
                                   rendezvous_pipeline_, nullptr);
  // The request's slot is done with either way.
  RecycleSlotLocked(slot);
  if (!status.ok()) return status;
  ++finished_owed_;
  MaybeReturnCreditsLocked();
  ++stats_.messages_received;
  ++stats_.rendezvous_received;
  stats_.bytes_received += length;
  return length;
}

absl::Status Connection::TooSmallError(size_t size, size_t capacity) const {
  return absl::InvalidArgumentError(absl::StrCat(
      name_, ": the next message has ", size, " bytes but the buffer holds ",
      capacity, "; it stays queued"));
}

absl::StatusOr<size_t> Connection::ReceiveRendezvousLocked(
    std::unique_lock<ConnectionLock>& lock, const ReceiveTarget& target) {
  using Mode = ReceiveTarget::Mode;
  const Arrival arrival = arrived_[arrived_head_];
  // A rendezvous request stands for the message it names.
  absl::StatusOr<RemoteRegion> request = DecodeRendezvousRequest(
      {RecvSlotLocked(arrival.slot), size_t{arrival.length}});
  if (!request.ok()) {
    FailLocked(absl::InternalError(
        absl::StrCat(name_, ": protocol error: ", request.status().message())));
    return failure_;
  }
  const size_t size = request->length;
  if (target.mode == Mode::kPeek) return size;
  if (target.mode == Mode::kBorrow) {
    return absl::FailedPreconditionError(absl::StrCat(
        name_, ": the next message (", size,
        " bytes) came by rendezvous and has no slot to lend: receive "
        "it with Receive() or ReceiveInto(); it stays queued"));
  }
  if (size > target.capacity) return TooSmallError(size, target.capacity);
  if (!failure_.ok()) return failure_;  // nothing left to read it with
  return ReadRendezvousLocked(lock, target, *request, arrival.slot);
}

// Always inline: each receive call is an instance of its own, in which
// the target's mode is a constant (the simulator's profile counted the
// mode's tests and the frame of one shared function on every message).
[[gnu::always_inline]] inline absl::StatusOr<size_t> Connection::ReceiveMessage(
    const ReceiveTarget& target, Deadline deadline) {
  using Mode = ReceiveTarget::Mode;
  // A copy the compiler sees is never written: `target` itself goes out of
  // line (the rendezvous path), after which its mode was read again and
  // tested at each use instead of folded.
  const Mode mode = target.mode;
  std::unique_lock<ConnectionLock> lock = Enter();
  CallScope call(*this, lock);
  // ReceiveBorrowed(&view): the slot the view holds goes back first, under
  // the same lock.
  if (mode == Mode::kBorrow && target.borrowed->connection_ == this) {
    const uint32_t held = target.borrowed->slot_;
    target.borrowed->connection_ = nullptr;
    target.borrowed->data_ = {};
    ReleaseViewSlotLocked(held);
  }
  if (!OnClockOf(deadline, made_at_)) [[unlikely]] {
    return WrongClockError(name_, deadline);
  }
  while (true) {
    // Messages that arrived intact are delivered even after the connection
    // failed (a credit return racing with the peer's close, say): they are
    // in our memory, in order, and the sender was told they were sent.
    if (!open_ && (closed_ || closing_ || !established_)) [[unlikely]] {
      return UsableLocked();
    }
    if (arrived_count_ > 0) {
      const Arrival arrival = arrived_[arrived_head_];
      if (arrival.rendezvous) [[unlikely]] {
        return ReceiveRendezvousLocked(lock, target);
      }
      const uint32_t slot = arrival.slot;
      const uint32_t length = arrival.length;
      if (mode == Mode::kPeek) return size_t{length};
      if (mode == Mode::kCopy && length > target.capacity) [[unlikely]] {
        return TooSmallError(length, target.capacity);
      }
      PopArrivalLocked();
      ++stats_.messages_received;
      stats_.bytes_received += length;
      if (mode == Mode::kBorrow) {
        ++stats_.views_held;
        // The view holds nothing here: ReceiveBorrowed() released it.
        ReceivedMessage& view = *target.borrowed;
        view.connection_ = this;
        view.slot_ = slot;
        view.data_ = {RecvSlotLocked(slot), size_t{length}};
        return size_t{length};
      }
      if (length > 0) std::memcpy(target.data, RecvSlotLocked(slot), length);
      RecycleSlotLocked(slot);
      return size_t{length};
    }
    if (peer_closed_) [[unlikely]] {
      return PeerClosedError();
    }
    if (!failure_.ok()) [[unlikely]] {
      // Completions of messages that arrived before the failure may still be
      // in the CQ.
      if (PollOnceLocked(lock)) continue;
      return failure_;
    }
    if (deadline == kNoWait) {
      // What is there only (connection.h, "Not waiting"): a connection of
      // its own empties its CQ; an engine's holds what Progress() gave it.
      if (!engine_attached_ && PollOnceLocked(lock)) continue;
      return NoMessageWaitingError();
    }
    uint64_t token;
    if (PollOrPrepareWaitLocked(lock, token)) continue;
    if (!WaitLocked(lock, token, deadline).ok()) {
      return absl::DeadlineExceededError(
          absl::StrCat(name_, ": no message before the deadline"));
    }
  }
}

absl::Status Connection::NoMessageWaitingError() const {
  return absl::DeadlineExceededError(
      absl::StrCat(name_, ": no message waiting (kNoWait)"));
}

absl::StatusOr<size_t> Connection::Receive(std::span<std::byte> buffer,
                                           Deadline deadline) {
  ReceiveTarget target;
  target.data = buffer.data();
  target.capacity = buffer.size();
  return ReceiveMessage(target, deadline);
}

absl::StatusOr<size_t> Connection::ReceiveInto(const MemoryRegion& region,
                                               size_t offset, size_t capacity,
                                               Deadline deadline) {
  if (absl::Status status =
          CheckCallerRange(region, offset, capacity, "ReceiveInto");
      !status.ok()) {
    return status;
  }
  ReceiveTarget target;
  target.data = region.data() + offset;
  target.capacity = capacity;
  target.region = &region;
  target.region_offset = offset;
  return ReceiveMessage(target, deadline);
}

absl::StatusOr<ReceivedMessage> Connection::ReceiveBorrowed(Deadline deadline) {
  ReceivedMessage message;
  ReceiveTarget target;
  target.mode = ReceiveTarget::Mode::kBorrow;
  target.borrowed = &message;
  absl::StatusOr<size_t> length = ReceiveMessage(target, deadline);
  if (!length.ok()) return length.status();
  return message;
}

absl::Status Connection::ReceiveBorrowed(ReceivedMessage* message,
                                         Deadline deadline) {
  // Another connection's view: its own lock, not ours.
  if (message->connection_ != this) message->Release();
  ReceiveTarget target;
  target.mode = ReceiveTarget::Mode::kBorrow;
  target.borrowed = message;
  return ReceiveMessage(target, deadline).status();
}

absl::StatusOr<size_t> Connection::NextMessageSize(Deadline deadline) {
  ReceiveTarget target;
  target.mode = ReceiveTarget::Mode::kPeek;
  return ReceiveMessage(target, deadline);
}

}  // namespace rdma_transport
