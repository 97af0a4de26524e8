// File: transport/connection_async_send.cc
//
// PostSendFrom(): the asynchronous zero-copy send of a connection with an
// engine. One message is posted at once - inline, or by scatter/gather from
// the caller's region, or for a long one a rendezvous request naming it -
// through the path Send()/SendFrom() use (PostMessageLocked, signalled), and
// recorded as an AsyncOp of kind kSend in the ring of the asynchronous
// one-sided ops (connection_async.cc), which ends every op in posting order:
// a SEND at its send completion, a rendezvous one once the peer's
// "finished" count has reached it as well (connection_progress.cc). Never
// waits: what is missing now (a credit, one-sided ops ahead of it still
// held by the in-flight cap, send-queue room, an op slot, a send slot for a
// request that cannot go inline) is kResourceExhausted.

#include <algorithm>
#include <array>
#include <cstddef>

#include "absl/strings/str_cat.h"
#include "transport/connection.h"
#include "transport/connection_internal.h"
#include "transport/deadline.h"
#include "transport/inline_size.h"
#include "transport/rendezvous_request.h"

namespace rdma_transport {

absl::Status Connection::SendRoomLocked(bool copy) const {
  // Room as PostWrite() counts it: the work requests of queued one-sided
  // ops hold theirs.
  const uint64_t sq_used = sq_.posted() - sq_.completed() + async_.queued_wrs;
  const uint64_t sq_free = sq_used < sq_.depth() ? sq_.depth() - sq_used : 0;
  const char* missing = nullptr;
  if (!send_credits_.CanSendData()) {
    missing =
        "no send credit (the peer has not returned any: it is not "
        "receiving)";
  } else if (async_.posted < async_.count) {
    missing =
        "one-sided operations posted before it still wait for the in-flight "
        "cap (a message goes on the wire after them)";
  } else if (1 + kControlReserve > sq_free) {
    missing = "no send queue room";
  } else if (async_.count >= async_.capacity()) {
    missing = "every operation slot of the connection is in flight";
  } else if (!engine_->HasOpRoom(1)) {
    missing = "the engine's max_async_ops operations are outstanding";
  } else if (copy && send_slot_seq_[next_send_slot_] > sq_.completed()) {
    missing = "no free send slot for the rendezvous request";
  }
  if (missing == nullptr) [[likely]]
    return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      name_, ": PostSendFrom(): ", missing, " (", send_credits_.available(),
      " credits, 2 of them kept in reserve; ", sq_free, " of ", sq_.depth(),
      " send queue entries free, ", kControlReserve,
      " kept for control messages; ", async_.count,
      " operation(s) in flight); progress the engine and post again"));
}

absl::StatusOr<OpHandle> Connection::PostSendFrom(const MemoryRegion& region,
                                                  size_t offset, size_t length,
                                                  Deadline deadline) {
  if (engine_ == nullptr) [[unlikely]]
    return NoEngineError();
  std::unique_lock<ConnectionLock> lock = Enter();
  CallScope call(*this, lock);
  if (absl::Status checked =
          CheckSendSourceLocked(region, offset, length, "PostSendFrom");
      !checked.ok()) [[unlikely]] {
    return checked;
  }
  if (peer_closed_) [[unlikely]]
    return PeerClosedError();
  if (!OnClockOf(deadline, made_at_)) [[unlikely]] {
    return WrongClockError(name_, deadline);
  }
  absl::StatusOr<uint64_t> seq;
  uint64_t ordinal = 0;
  if (length <= rendezvous_threshold_ || !path_.rendezvous) [[likely]] {
    if (length > send_limit_) return TooLargeError(length);
    const uint32_t size = static_cast<uint32_t>(length);
    const bool send_inline = ShouldSendInline(size, inline_.usable_inline);
    if (absl::Status room = SendRoomLocked(false); !room.ok()) [[unlikely]] {
      return room;
    }
    // Never copied into a send slot: SendFrom() copies up to 1 KiB only to
    // spare itself the wait for the completion, and nothing waits here.
    seq = PostMessageLocked(region.data() + offset, size,
                            send_inline ? nullptr : &region, send_inline,
                            ImmKind::kData, /*signal=*/true);
  } else {
    if (!region.allows(kRemoteRead)) return RendezvousAccessError(length);
    // The request is copied at the post (inline, or into a send slot), so
    // it may live on the stack.
    std::array<std::byte, kRendezvousRequestBytes> request;
    RemoteRegion{reinterpret_cast<uint64_t>(region.data() + offset), length,
                 region.mr()->rkey}
        .Encode(request);
    const bool send_inline =
        ShouldSendInline(kRendezvousRequestBytes, inline_.usable_inline);
    if (absl::Status room = SendRoomLocked(!send_inline); !room.ok()) {
      return room;
    }
    seq = PostMessageLocked(request.data(), kRendezvousRequestBytes, nullptr,
                            send_inline, ImmKind::kRendezvous,
                            /*signal=*/true);
    if (seq.ok()) {
      stats_.bytes_sent += length;  // the request counts as its message
      ordinal = ++rendezvous_sent_;
      async_.rendezvous_last = ordinal;
    }
  }
  if (!seq.ok()) [[unlikely]] {
    // Nothing was posted and the connection has failed (PostSendLocked or
    // the receives' repost said so): end what is in flight as after any
    // failure.
    if (async_.count > 0) AdvanceAsyncAfterFailureLocked(env_.Now());
    return seq.status();
  }

  // Already on the send queue, behind every op before it (SendRoomLocked
  // refused while one-sided ops waited for the in-flight cap). No clock
  // read: the engine's service turns compare.
  const bool all_posted = async_.posted == async_.count;
  AsyncOp& op = async_.At(async_.count);
  op = {};
  op.handle = engine_->ReserveOps(1);
  op.first_seq = *seq;
  op.last_seq = *seq;
  op.length = length;
  op.deadline = deadline;
  op.rendezvous_ordinal = ordinal;
  op.kind = AsyncOpKind::kSend;
  ++async_.count;
  if (all_posted) ++async_.posted;
  async_.deadline = std::min(async_.deadline, deadline);
  return op.handle;
}

}  // namespace rdma_transport
