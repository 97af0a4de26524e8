// File: transport/send_queue_ledger.cc

#include "transport/send_queue_ledger.h"

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

}  // namespace rdma_transport
