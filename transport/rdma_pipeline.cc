// File: transport/rdma_pipeline.cc

#include "transport/rdma_pipeline.h"

#include <algorithm>
#include <cassert>

namespace rdma_transport {

void RdmaPipeline::Reset(uint32_t max_wrs) {
  max_wrs_ = std::max<uint32_t>(max_wrs, 1);
  posts_.assign(max_wrs_, Post{});
  Clear();
}

void RdmaPipeline::Clear() {
  head_ = 0;
  count_ = 0;
  outstanding_ = 0;
}

void RdmaPipeline::Posted(uint64_t first_seq, uint32_t wrs) {
  assert(wrs >= 1 && wrs <= room());
  assert(count_ < posts_.size());
  size_t at = head_ + count_;
  if (at >= posts_.size()) at -= posts_.size();
  posts_[at] = Post{first_seq, wrs, 0};
  ++count_;
  outstanding_ += wrs;
}

void RdmaPipeline::Retire(uint64_t completed) {
  while (count_ > 0) {
    Post& post = posts_[head_];
    const uint64_t end = post.first_seq + post.wrs;
    const uint64_t retired_to = post.first_seq + post.retired;
    if (completed <= retired_to) return;
    const uint64_t done_to = std::min(completed, end);
    outstanding_ -= static_cast<uint32_t>(done_to - retired_to);
    post.retired = static_cast<uint32_t>(done_to - post.first_seq);
    if (done_to < end) return;
    if (++head_ == posts_.size()) head_ = 0;
    --count_;
  }
}

}  // namespace rdma_transport
