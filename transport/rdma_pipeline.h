// File: transport/rdma_pipeline.h
//
// `RdmaPipeline`: the posts of one blocking RDMA call (Write(), Read(), the
// rendezvous READ of a receive) still on the send queue, so that the call
// keeps at most `max_wrs` of its own work requests there while other
// callers' work requests come and go beside them. Each post is a chain of
// consecutive sequence numbers (send_queue_ledger.h stamps a chain at
// once); RC completes in order, so everything below the ledger's
// completed() is done, and Retire() forgets it.
//
//   pipeline.Reset(max_rdma_batch);         // once: the only allocation
//   pipeline.Clear();                       // per call
//   pipeline.Retire(sq.completed());
//   if (pipeline.room() > 0) { ... post n <= room() ...
//     pipeline.Posted(first_seq, n); }
//
// Not thread-safe (the owning Connection's mutex guards it). Posted() with
// more than room() work requests, or none, is a caller bug (assert).

#ifndef RDMA_TRANSPORT_TRANSPORT_RDMA_PIPELINE_H_
#define RDMA_TRANSPORT_TRANSPORT_RDMA_PIPELINE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace rdma_transport {

class RdmaPipeline {
 public:
  // Heap bytes per work request of Reset()'s max_wrs (Connection::Footprint).
  static constexpr size_t kBytesPerWr = 16;

  // Room for `max_wrs` (>= 1) work requests outstanding; forgets everything.
  void Reset(uint32_t max_wrs);
  // Forgets every post (a new call; the last one's work requests are done).
  void Clear();
  // A post of `wrs` work requests, sequences first_seq .. first_seq+wrs-1.
  void Posted(uint64_t first_seq, uint32_t wrs);
  // Every sequence below `completed` has completed.
  void Retire(uint64_t completed);

  // This call's work requests posted and not yet known completed.
  uint32_t outstanding() const { return outstanding_; }
  // How many more it may post now.
  uint32_t room() const { return max_wrs_ - outstanding_; }
  bool idle() const { return outstanding_ == 0; }

 private:
  struct Post {
    uint64_t first_seq = 0;
    uint32_t wrs = 0;
    uint32_t retired = 0;  // of them, known completed
  };
  // Posts with work requests outstanding, oldest first: a ring of max_wrs_
  // entries (each holds at least one outstanding work request).
  std::vector<Post> posts_;
  static_assert(sizeof(Post) == kBytesPerWr);
  size_t head_ = 0;
  size_t count_ = 0;
  uint32_t max_wrs_ = 0;
  uint32_t outstanding_ = 0;
};

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TRANSPORT_RDMA_PIPELINE_H_
