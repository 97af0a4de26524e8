// File: transport/async_op.h
//
// `AsyncOp`: what a connection remembers of one asynchronous operation
// (Connection::PostWrite/PostRead, one-sided; PostSendFrom, a message)
// between its post and its end: its kind, the send-queue sequences of its
// first and last work request (RC completes in order, so the completion of
// `last_seq` ends it; kUnposted while that piece waits behind Soft-RoCE's
// in-flight cap), the addresses and keys its later pieces are posted with,
// its length for the Completion, its deadline, and for a message sent by
// rendezvous the ordinal the peer's "finished" count must reach before it
// ends; a plain value, no behaviour. `AsyncOpRing`: a connection's
// ops, oldest first, in a ring of send-queue depth allocated once at setup,
// with how far posting them has got (the in-flight cap may hold the newest
// back). Not thread-safe: the owning Connection's mutex guards both.
//
//   AsyncOp op;
//   op.handle = handle;
//   op.length = length;
//   op.deadline = deadline;
//   if (op.deadline <= now) ...  // overdue: the connection is failed (engine.h)
//
//   AsyncOpRing ring;
//   ring.Reset(sq_depth);
//   ring.At(ring.count) = op;  // the newest, when ring.count < capacity()
//   ++ring.count;
//   ... ring.At(0) is the oldest; ring.PopOldest() when it has ended

#ifndef RDMA_TRANSPORT_TRANSPORT_ASYNC_OP_H_
#define RDMA_TRANSPORT_TRANSPORT_ASYNC_OP_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "transport/engine.h"
#include "verbs_shim/env.h"

namespace rdma_transport {

// A SEND is posted whole when accepted (one work request, never queued).
enum class AsyncOpKind : uint8_t { kWrite, kRead, kSend };

struct AsyncOp {
  static constexpr uint64_t kUnposted = ~uint64_t{0};
  OpHandle handle = 0;
  uint64_t first_seq = kUnposted;
  uint64_t last_seq = kUnposted;
  uint64_t length = 0;
  uint64_t local_addr = 0;
  uint64_t remote_addr = 0;
  uint32_t lkey = 0;
  uint32_t rkey = 0;
  // The batch's deadline on the Env's clock; kNoDeadline: none.
  Deadline deadline = kNoDeadline;
  // kSend by rendezvous: the request's ordinal among the rendezvous
  // messages sent (Connection::rendezvous_sent_); 0: none.
  uint64_t rendezvous_ordinal = 0;
  AsyncOpKind kind = AsyncOpKind::kWrite;
};

struct AsyncOpRing {
  // Room for `capacity` ops (> 0); forgets everything.
  void Reset(size_t capacity) {
    *this = AsyncOpRing{};
    ops.assign(capacity, {});
  }
  size_t capacity() const { return ops.size(); }
  // The op `index` places after the oldest (0: the oldest).
  AsyncOp& At(size_t index) { return ops[(head + index) % ops.size()]; }
  const AsyncOp& At(size_t index) const {
    return ops[(head + index) % ops.size()];
  }
  void PopOldest() {
    head = (head + 1) % ops.size();
    --count;
  }

  std::vector<AsyncOp> ops;
  size_t head = 0;
  size_t count = 0;  // ops posted and not yet ended (queued ones too)
  // The first `posted` ops from the oldest have every piece posted; of the
  // next, `post_offset` bytes are. (A kSend op is accepted only when
  // nothing waits, so it is counted posted at once.) `queued_wrs`: work
  // requests of accepted ops not posted yet (counted against send queue
  // room, at most the queue's depth of them).
  size_t posted = 0;
  uint64_t post_offset = 0;
  uint64_t queued_wrs = 0;
  Deadline deadline = kNoDeadline;  // a lower bound of the ops' deadlines
  // The newest rendezvous ordinal of a kSend op (0: none): while the peer's
  // finished count is below it, a rendezvous op waits for the peer.
  uint64_t rendezvous_last = 0;
  bool error_seen = false;  // a send completion in error came
  bool quiescing = false;   // the QP was moved to ERR for them
  Deadline flush_deadline;
};

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TRANSPORT_ASYNC_OP_H_
