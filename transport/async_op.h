// File: transport/async_op.h
//
// `AsyncOp`: what a connection remembers of one asynchronous one-sided
// operation (Connection::PostWrite/PostRead) between its post and its end:
// the send-queue sequences of its first and last work request (RC completes
// in order, so the completion of `last_seq` ends it; kUnposted while that
// piece waits behind Soft-RoCE's in-flight cap), the addresses and keys its
// later pieces are posted with, its length for the Completion, and its
// deadline. Connections keep them in a preallocated ring of send-queue
// depth, oldest first; a plain value, no behaviour.
//
//   AsyncOp op;
//   op.handle = handle;
//   op.length = length;
//   op.deadline = deadline;
//   if (op.deadline <= now) ...  // overdue: the connection is failed (engine.h)

#ifndef RDMA_TRANSPORT_TRANSPORT_ASYNC_OP_H_
#define RDMA_TRANSPORT_TRANSPORT_ASYNC_OP_H_

#include <cstdint>

#include "transport/engine.h"
#include "verbs_shim/env.h"

namespace rdma_transport {

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
  bool is_write = false;
};

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TRANSPORT_ASYNC_OP_H_
