// File: transport/send_queue_ledger.h
//
// `SendQueueLedger`: the accounting of one RC send queue, and its selective
// signalling. Every work request posted gets the next sequence number (put
// in its wr_id's value, wr_id.h). RC completes in order, so a signalled
// completion of sequence s means every work request up to s is done: room is
// `depth` minus what is posted and not yet completed. At most
// `signal_interval - 1` work requests in a row go unsignalled, so a
// completion always comes to free room. The ledger also keeps the payload
// bytes posted up to each sequence, for the bytes outstanding that a
// completion watchdog allows time for (connection_liveness.cc).
//
//   SendQueueLedger ledger;
//   ledger.Reset(/*depth=*/76, /*signal_interval=*/16);
//   if (ledger.HasRoom(n)) {
//     ledger.Stamp(first, n);  // wr_ids and IBV_SEND_SIGNALED set
//     if (verbs.PostSend(qp, first, &bad).ok()) ledger.Posted(n);
//   }
//   // per send-side completion:
//   ledger.Completed(SequenceFromWrIdValue(WrIdValue(wc.wr_id),
//                                          ledger.posted()));
//
// Not thread-safe: the owning Connection's mutex guards it. Allocates only
// in Reset(); Stamp() and the rest allocate nothing and never fail.

#ifndef RDMA_TRANSPORT_TRANSPORT_SEND_QUEUE_LEDGER_H_
#define RDMA_TRANSPORT_TRANSPORT_SEND_QUEUE_LEDGER_H_

#include <infiniband/verbs.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "transport/wr_id.h"

namespace rdma_transport {

class SendQueueLedger {
 public:
  // A queue of `depth` work requests (> 0), at most `signal_interval` - 1
  // of them unsignalled in a row (signal_interval >= 1). Forgets everything.
  void Reset(uint32_t depth, uint32_t signal_interval);

  // Gives the `count` work requests chained from `first` their sequence
  // numbers (posted() onwards) in their wr_id values, and signals those the
  // interval requires. Does not count them posted: Posted() does, after
  // ibv_post_send took them. Inline: every message is stamped, and a call
  // of its own showed in the simulator's profile.
  void Stamp(ibv_send_wr* first, uint32_t count) {
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
  // `count` more work requests are on the queue.
  void Posted(uint32_t count) {
    posted_ += count;
    // count <= depth_: the room was checked.
    posted_slot_ += count;
    if (posted_slot_ >= depth_) posted_slot_ -= depth_;
  }
  // A send-side completion of sequence `seq`: everything up to it is done.
  void Completed(uint64_t seq) { completed_ = std::max(completed_, seq + 1); }
  // Everything posted counts as completed (the QP was destroyed).
  void CompleteAll() { completed_ = posted_; }

  bool HasRoom(uint32_t wrs) const {
    return posted_ - completed_ + wrs <= depth_;
  }
  // Payload bytes of the work requests posted and not yet completed.
  uint64_t BytesOutstanding() const {
    return bytes_posted_ -
           (completed_ == 0 ? 0 : bytes_through_[(completed_ - 1) % depth_]);
  }

  uint32_t depth() const { return depth_; }
  uint32_t signal_interval() const { return signal_interval_; }
  // The sequence the next work request gets; one past the last posted.
  uint64_t posted() const { return posted_; }
  // One past the last sequence known completed.
  uint64_t completed() const { return completed_; }
  // One past the sequence of the last signalled work request: nothing is
  // awaited once completed() reaches it.
  uint64_t signaled_end() const { return signaled_end_; }
  bool Idle() const { return completed_ >= posted_; }

 private:
  uint32_t depth_ = 0;
  uint32_t signal_interval_ = 1;
  uint64_t posted_ = 0;
  uint32_t posted_slot_ = 0;  // posted_ % depth_, kept without a division
  uint64_t completed_ = 0;
  // Unsignalled work requests stamped since the last signalled one.
  uint32_t unsignaled_run_ = 0;
  uint64_t signaled_end_ = 0;
  // Payload bytes stamped up to and including each sequence (by
  // seq % depth_), and in all.
  std::vector<uint64_t> bytes_through_;
  uint64_t bytes_posted_ = 0;
};

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TRANSPORT_SEND_QUEUE_LEDGER_H_
