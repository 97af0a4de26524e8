// File: transport/connection_one_sided.cc
//
// One-sided RDMA: Write()/Read() (each op checked against its regions, cut
// into pieces no longer than the port, the watchdog or a quarter of the cap
// on bytes in flight allow, kept in a pipeline on the send queue: at most
// max_rdma_batch work requests of the call and the cap's bytes, the next
// pieces posted as the oldest complete) and
// BindRegion() (a type 2 memory window bound to this QP, peer_region.h).

#include <algorithm>
#include <cerrno>
#include <memory>

#include "absl/strings/str_cat.h"
#include "transport/connection.h"
#include "transport/connection_internal.h"
#include "verbs_shim/verbs_error.h"

namespace rdma_transport {
namespace {

// Pieces of a Write()/Read() op when the watchdog is armed, so that every
// completion the watchdog waits for moves at most this much.
constexpr uint64_t kWatchdogPieceBytes = 1 << 20;

}  // namespace

absl::Status Connection::CheckRdmaOps(std::span<const RdmaOp> ops,
                                      bool is_write) const {
  for (size_t i = 0; i < ops.size(); ++i) {
    const RdmaOp& op = ops[i];
    // Built only for an error: the checks run on every PostWrite()'s ops.
    auto which = [&] {
      return absl::StrCat(name_, ": RDMA ", is_write ? "WRITE" : "READ", " #",
                          i, ": ");
    };
    if (op.local == nullptr || !op.local->valid()) {
      return absl::InvalidArgumentError(
          absl::StrCat(which(), "no local memory region"));
    }
    if (absl::Status status = op.local->CheckRange(op.local_offset, op.length);
        !status.ok()) {
      return absl::OutOfRangeError(
          absl::StrCat(which(), "local ", status.message()));
    }
    if (!is_write && !op.local->allows(kLocalWrite)) {
      return absl::PermissionDeniedError(absl::StrCat(
          which(),
          "the local region was registered without kLocalWrite, so "
          "the NIC may not write the data read into it"));
    }
    if (op.remote_offset > op.remote.length ||
        op.length > op.remote.length - op.remote_offset) {
      return absl::OutOfRangeError(
          absl::StrCat(which(), "remote range [", op.remote_offset, ", ",
                       op.remote_offset + op.length, ") is outside the peer's ",
                       op.remote.length, "-byte region"));
    }
  }
  return absl::OkStatus();
}

uint64_t Connection::MaxRdmaPieceLocked() const {
  // An op longer than the port's max_msg_sz (8 MiB on rxe) goes as several
  // work requests: pieces of at most this many bytes.
  // With the watchdog armed, pieces of at most kWatchdogPieceBytes, so that
  // each completion it waits for is a bounded amount of work.
  const uint64_t port_limit = context_.port_attr().max_msg_sz;
  const bool soft_roce = context_.device_attr().vendor_id == kVendorSoftRoce;
  return std::min<uint64_t>(
      std::min<uint64_t>(port_limit > 0 ? port_limit : (1ull << 31),
                         1ull << 30),
      soft_roce         ? kSoftRoceInFlightBytes
      : watchdog_armed_ ? kWatchdogPieceBytes
                        : ~uint64_t{0});
}

uint64_t Connection::RdmaInFlightCapLocked() const {
  if (options_.rdma_in_flight_bytes > 0) return options_.rdma_in_flight_bytes;
  return context_.device_attr().vendor_id == kVendorSoftRoce
             ? kSoftRoceInFlightBytes
             : ~uint64_t{0};
}

uint64_t Connection::PipelinedPieceLocked(uint64_t cap) const {
  const uint64_t max_piece = MaxRdmaPieceLocked();
  if (cap == ~uint64_t{0}) return max_piece;
  return std::min(max_piece, std::max<uint64_t>(cap / kRdmaPiecesUnderCap, 1));
}

absl::Status Connection::RdmaLocked(std::unique_lock<ConnectionLock>& lock,
                                    std::span<const RdmaOp> ops, bool is_write,
                                    RdmaChain& chain, RdmaPipeline& pipeline,
                                    uint64_t* ops_done) {
  const uint64_t cap = RdmaInFlightCapLocked();
  const uint64_t max_piece = PipelinedPieceLocked(cap);
  // A completion at least every piece under a cap (room comes back as each
  // piece is done) and every kProgressSignalBytes (the watchdog's progress).
  const uint64_t signal_bytes = std::min(kProgressSignalBytes, max_piece);
  pipeline.Clear();
  size_t op_index = 0;
  uint64_t op_offset = 0;  // bytes of ops[op_index] already posted
  uint64_t last_seq = 0;
  bool posted = false;
  while (op_index < ops.size()) {
    pipeline.Retire(sq_.completed());
    // The bytes on the NIC that a completion is still awaited for (work
    // requests past the last signalled one report nothing until somebody
    // posts again: counting them could wait for ever).
    uint64_t in_flight =
        sq_.signaled_end() > sq_.completed() ? sq_.BytesOutstanding() : 0;
    // Lay out what may go now: within the call's max_rdma_batch work
    // requests outstanding, the send queue's room and the cap.
    uint32_t ops_finished = 0;
    chain.Begin(signal_bytes);
    while (op_index < ops.size() && !chain.full() &&
           chain.size() < pipeline.room() && sq_.HasRoom(chain.size() + 1)) {
      const RdmaOp& op = ops[op_index];
      const uint64_t length = std::min(op.length - op_offset, max_piece);
      if (in_flight > 0 && length > cap - std::min(cap, in_flight)) break;
      chain.Append(
          reinterpret_cast<uint64_t>(op.local->data() + op.local_offset) +
              op_offset,
          op.local->lkey(), op.remote.address + op.remote_offset + op_offset,
          op.remote.rkey, length, is_write);
      in_flight += length;
      op_offset += length;
      if (op_offset >= op.length) {
        ++op_index;
        op_offset = 0;
        ++ops_finished;
      }
    }
    if (chain.empty()) {
      // Something signalled is outstanding (this call's pieces, or what
      // holds the room or the bytes): its completion makes room.
      const uint64_t seen = sq_.completed();
      if (absl::Status status = WaitUntilLocked(
              lock, kNoDeadline, [&] { return sq_.completed() != seen; },
              "no room for RDMA in flight");
          !status.ok()) {
        // The NIC may still hold work requests naming the caller's memory.
        QuiesceLocked(lock);
        return status;
      }
      continue;
    }
    chain.SignalLast();
    const uint32_t batch = chain.size();
    const uint64_t first_seq = sq_.posted();
    if (absl::Status status = PostSendLocked(chain.head(), batch);
        !status.ok()) {
      if (posted) QuiesceLocked(lock);
      return status;
    }
    pipeline.Posted(first_seq, batch);
    last_seq = first_seq + batch - 1;
    posted = true;
    if (ops_done != nullptr) {
      stats_.rdma_bytes += chain.bytes();
      *ops_done += ops_finished;
    }
  }
  if (!posted) return absl::OkStatus();
  if (absl::Status status = WaitForSeqLocked(lock, last_seq, kNoDeadline);
      !status.ok()) {
    QuiesceLocked(lock);
    return status;
  }
  return absl::OkStatus();
}

absl::Status Connection::Write(std::span<const RdmaOp> ops) {
  if (absl::Status status = CheckRdmaOps(ops, true); !status.ok()) {
    return status;
  }
  std::unique_lock<ConnectionLock> lock = Enter();
  CallScope call(*this, lock);
  if (absl::Status status = UsableLocked(); !status.ok()) return status;
  return RdmaLocked(lock, ops, true, rdma_chain_, rdma_pipeline_,
                    &stats_.rdma_writes);
}

absl::Status Connection::Read(std::span<const RdmaOp> ops) {
  if (absl::Status status = CheckRdmaOps(ops, false); !status.ok()) {
    return status;
  }
  std::unique_lock<ConnectionLock> lock = Enter();
  CallScope call(*this, lock);
  if (absl::Status status = UsableLocked(); !status.ok()) return status;
  return RdmaLocked(lock, ops, false, rdma_chain_, rdma_pipeline_,
                    &stats_.rdma_reads);
}

absl::StatusOr<PeerRegion> Connection::BindRegion(const MemoryRegion& region,
                                                  size_t offset, size_t length,
                                                  int access) {
  const std::string which = absl::StrCat(name_, ": BindRegion: ");
  if (access == 0 || (access & ~(kRemoteRead | kRemoteWrite)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(which, "access 0x", absl::Hex(access),
                     " is not kRemoteRead and/or kRemoteWrite"));
  }
  if (!region.valid()) {
    return absl::InvalidArgumentError(absl::StrCat(which, "no memory region"));
  }
  if (length == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(which, "a binding needs at least one byte"));
  }
  if (absl::Status status = region.CheckRange(offset, length); !status.ok()) {
    return absl::OutOfRangeError(absl::StrCat(which, status.message()));
  }
  if (!region.allows(kBindable)) {
    return absl::FailedPreconditionError(
        absl::StrCat(which,
                     "the region was registered without kBindable "
                     "(IBV_ACCESS_MW_BIND)"));
  }
  // kRemoteWrite implies local write at the verbs level.
  if ((access & kRemoteWrite) && !region.allows(kLocalWrite) &&
      !region.allows(kRemoteWrite)) {
    return absl::FailedPreconditionError(
        absl::StrCat(which,
                     "a writable binding needs a region registered with "
                     "kLocalWrite"));
  }
  constexpr unsigned int kType2 =
      IBV_DEVICE_MEM_WINDOW_TYPE_2A | IBV_DEVICE_MEM_WINDOW_TYPE_2B;
  if ((context_.device_attr().device_cap_flags & kType2) == 0) {
    return absl::UnimplementedError(absl::StrCat(
        which, "device ", context_.device_name(),
        " has no type 2 memory windows (IBV_DEVICE_MEM_WINDOW_TYPE_2A/2B "
        "not in device_cap_flags); share the region with remote() instead"));
  }

  std::unique_lock<ConnectionLock> lock = Enter();
  CallScope call(*this, lock);
  if (absl::Status status = UsableLocked(); !status.ok()) return status;
  if (absl::Status status = WaitUntilLocked(
          lock, kNoDeadline, [&] { return sq_.HasRoom(1); },
          "no send queue room");
      !status.ok()) {
    return status;
  }
  absl::StatusOr<ibv_mw*> mw = verbs_.AllocMw(context_.pd(), IBV_MW_TYPE_2);
  if (!mw.ok()) {
    if (VerbsErrno(mw.status()) == EOPNOTSUPP) {
      return absl::UnimplementedError(
          absl::StrCat(which, "device ", context_.device_name(),
                       " refuses memory windows: ", mw.status().message()));
    }
    return WithContext(mw.status(), which);
  }
  auto window = std::make_shared<BoundWindow>(&verbs_, *mw);
  std::byte* start = region.data() + offset;
  ibv_send_wr wr = {};
  wr.wr_id = MakeWrId(WrKind::kBind, engine_slot_, 0);
  wr.opcode = IBV_WR_BIND_MW;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.bind_mw.mw = *mw;
  wr.bind_mw.rkey = ibv_inc_rkey((*mw)->rkey);
  wr.bind_mw.bind_info.mr = region.mr();
  wr.bind_mw.bind_info.addr = reinterpret_cast<uint64_t>(start);
  wr.bind_mw.bind_info.length = length;
  wr.bind_mw.bind_info.mw_access_flags =
      (access & kRemoteRead ? IBV_ACCESS_REMOTE_READ : 0) |
      (access & kRemoteWrite ? IBV_ACCESS_REMOTE_WRITE : 0);
  const uint64_t seq = sq_.posted();
  if (absl::Status status = PostSendLocked(&wr, 1); !status.ok()) {
    QuiesceLocked(lock);
    return status;
  }
  if (absl::Status status = WaitForSeqLocked(lock, seq, kNoDeadline);
      !status.ok()) {
    QuiesceLocked(lock);
    return status;  // `window` deallocates the window
  }
  // libibverbs leaves ibv_mw::rkey to the caller after a bind.
  (*mw)->rkey = wr.bind_mw.rkey;
  std::erase_if(windows_, [](const std::shared_ptr<BoundWindow>& w) {
    return !w->bound();
  });
  windows_.push_back(window);
  ++stats_.regions_bound;
  return PeerRegion(
      std::move(window),
      RemoteRegion{reinterpret_cast<uint64_t>(start), length, wr.bind_mw.rkey});
}

}  // namespace rdma_transport
