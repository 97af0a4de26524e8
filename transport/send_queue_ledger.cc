// File: transport/send_queue_ledger.cc

#include "transport/send_queue_ledger.h"

#include "transport/wr_id.h"

namespace rdma_transport {

void SendQueueLedger::Reset(uint32_t depth, uint32_t signal_interval) {
  depth_ = depth;
  signal_interval_ = std::max<uint32_t>(signal_interval, 1);
  posted_ = 0;
  posted_slot_ = 0;
  completed_ = 0;
  unsignaled_run_ = 0;
  signaled_end_ = 0;
  bytes_through_.assign(depth, 0);
  bytes_posted_ = 0;
}

void SendQueueLedger::Stamp(ibv_send_wr* first, uint32_t count) {
  ibv_send_wr* wr = first;
  uint32_t slot = posted_slot_;
  for (uint32_t i = 0; i < count; ++i, wr = wr->next) {
    const uint64_t seq = posted_ + i;
    wr->wr_id = WithWrIdValue(wr->wr_id, seq);
    if (!(wr->send_flags & IBV_SEND_SIGNALED) &&
        unsignaled_run_ + 1 >= signal_interval_) {
      wr->send_flags |= IBV_SEND_SIGNALED;
    }
    if (wr->send_flags & IBV_SEND_SIGNALED) {
      unsignaled_run_ = 0;
      signaled_end_ = seq + 1;
    } else {
      ++unsignaled_run_;
    }
    for (int s = 0; s < wr->num_sge; ++s) {
      bytes_posted_ += wr->sg_list[s].length;
    }
    bytes_through_[slot] = bytes_posted_;
    if (++slot == depth_) slot = 0;
  }
}

}  // namespace rdma_transport
