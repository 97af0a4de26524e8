// File: transport/rdma_chain.cc

#include "transport/rdma_chain.h"

#include <algorithm>
#include <cassert>

#include "transport/inline_size.h"
#include "transport/wr_id.h"

namespace rdma_transport {

void RdmaChain::Reset(uint32_t max_wrs, uint32_t engine_slot,
                      uint32_t usable_inline) {
  wrs_.assign(max_wrs, ibv_send_wr{});
  sges_.assign(max_wrs, ibv_sge{});
  engine_slot_ = engine_slot;
  usable_inline_ = usable_inline;
  Begin(1);
}

void RdmaChain::Begin(uint64_t signal_bytes) {
  size_ = 0;
  bytes_ = 0;
  signal_bytes_ = std::max<uint64_t>(signal_bytes, 1);
  unsignaled_bytes_ = 0;
}

ibv_send_wr& RdmaChain::Append(uint64_t local_addr, uint32_t lkey,
                               uint64_t remote_addr, uint32_t rkey,
                               uint64_t length, bool is_write) {
  assert(!full());
  ibv_sge& sge = sges_[size_];
  sge.addr = local_addr;
  sge.length = static_cast<uint32_t>(length);
  sge.lkey = lkey;
  ibv_send_wr& wr = wrs_[size_];
  wr = ibv_send_wr{};
  wr.wr_id =
      MakeWrId(is_write ? WrKind::kWrite : WrKind::kRead, engine_slot_, 0);
  wr.opcode = is_write ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_READ;
  wr.sg_list = &sge;
  wr.num_sge = length > 0 ? 1 : 0;
  wr.wr.rdma.remote_addr = remote_addr;
  wr.wr.rdma.rkey = rkey;
  if (is_write &&
      ShouldSendInline(static_cast<uint32_t>(length), usable_inline_)) {
    wr.send_flags |= IBV_SEND_INLINE;
  }
  unsignaled_bytes_ += length;
  if (unsignaled_bytes_ >= signal_bytes_) {
    wr.send_flags |= IBV_SEND_SIGNALED;
    unsignaled_bytes_ = 0;
  }
  if (size_ > 0) wrs_[size_ - 1].next = &wr;
  ++size_;
  bytes_ += length;
  return wr;
}

void RdmaChain::SignalLast() {
  if (size_ == 0) return;
  wrs_[size_ - 1].send_flags |= IBV_SEND_SIGNALED;
  unsignaled_bytes_ = 0;
}

}  // namespace rdma_transport
