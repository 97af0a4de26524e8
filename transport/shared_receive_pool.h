// File: transport/shared_receive_pool.h
//
// `SharedReceivePool`: an Engine's shared receive queue (ibv_srq) and the one
// registered buffer of `slots` x `slot_bytes` its receives land in. Every
// connection attached to the engine takes its receives from it instead of
// keeping a receive ring of its own.
//
//   absl::StatusOr<std::unique_ptr<SharedReceivePool>> pool =
//       SharedReceivePool::Create(context, /*slots=*/4096, /*slot_bytes=*/1024);
//   absl::Status reserved = (*pool)->Reserve(/*credits=*/4);  // at attach
//   // A completion with wr_id kind kSrqRecv names its slot in the value:
//   std::span<const std::byte> bytes = (*pool)->slot(index);
//   absl::Status reposted = (*pool)->Repost(index);  // once consumed
//
// Credits. A connection attaching reserves `recv_slots` slots of the pool
// and announces exactly that many receives to its peer in the handshake, so
// the peer holds one credit per reserved slot. The pool refuses reservations
// beyond `slots` (kResourceExhausted), so at any time
//   slots posted >= slots - sum(reserved) + messages in flight >= in flight:
// every message finds a posted receive (no RNR), and a connection whose
// application does not consume holds at most its own reservation - it can
// starve nobody else. A slot is reposted once the message in it has been
// copied out by Receive() (or dropped with its connection), before the
// credit for it goes back to the peer.
//
// Errors. Create(): kUnimplemented when the device has no SRQs (max_srq 0,
// or ibv_create_srq failing with EOPNOTSUPP/ENOSYS, errno text kept);
// kInvalidArgument for slots above max_srq_wr or a slot size outside
// 64..kMaxSlotSize; the verbs errors of ibv_reg_mr/ibv_post_srq_recv.
//
// Thread-safety: none; the engine's thread owns it (engine.h). Repost() is
// allocation-free. Ownership: the pool owns the SRQ, the buffer and its
// registration; it must be destroyed after every QP attached to its SRQ
// (ibv_destroy_srq fails with EBUSY otherwise; the destructor reports it).

#ifndef RDMA_TRANSPORT_TRANSPORT_SHARED_RECEIVE_POOL_H_
#define RDMA_TRANSPORT_TRANSPORT_SHARED_RECEIVE_POOL_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "transport/aligned_buffer.h"
#include "transport/context.h"
#include "transport/memory_region.h"

namespace rdma_transport {

class SharedReceivePool {
 public:
  static absl::StatusOr<std::unique_ptr<SharedReceivePool>> Create(
      const Context& context, uint32_t slots, uint32_t slot_bytes);

  SharedReceivePool(const SharedReceivePool&) = delete;
  SharedReceivePool& operator=(const SharedReceivePool&) = delete;
  ~SharedReceivePool();

  ibv_srq* srq() const { return srq_; }
  uint32_t slots() const { return slots_; }
  uint32_t slot_bytes() const { return slot_bytes_; }
  // Bytes allocated and registered: slots x slot_bytes, rounded up to 4 KiB.
  size_t buffer_bytes() const { return buffer_bytes_; }

  // Sets aside `credits` slots for one connection; kResourceExhausted
  // naming what is left when the pool cannot.
  absl::Status Reserve(uint32_t credits);
  void Unreserve(uint32_t credits) { reserved_ -= credits; }
  uint32_t reserved() const { return reserved_; }

  // The bytes of slot `index` (index < slots()).
  const std::byte* slot(uint32_t index) const {
    return buffer_.get() + size_t{index} * slot_bytes_;
  }
  // Posts slot `index` to the SRQ again.
  absl::Status Repost(uint32_t index);
  // Slots currently not posted (holding a message, or lost to a failed
  // repost); for tests and stats.
  uint32_t held() const { return held_; }
  void NoteConsumed() { ++held_; }

 private:
  SharedReceivePool(const Context& context, uint32_t slots,
                    uint32_t slot_bytes);
  // The receive of slot `index`: its bytes, the region's key, its wr_id.
  void FillReceive(uint32_t index, ibv_recv_wr& wr, ibv_sge& sge) const;
  // Every slot on the queue at creation, in chained posts.
  absl::Status PostAllSlots();

  const Context& context_;
  Verbs& verbs_;
  const uint32_t slots_;
  const uint32_t slot_bytes_;
  size_t buffer_bytes_ = 0;
  AlignedBuffer buffer_;
  MemoryRegion region_;
  ibv_srq* srq_ = nullptr;
  uint32_t reserved_ = 0;
  uint32_t held_ = 0;
};

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TRANSPORT_SHARED_RECEIVE_POOL_H_
