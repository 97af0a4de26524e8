// File: transport/async_op.h
//
// `AsyncOp`: what a connection remembers of one asynchronous one-sided
// operation (Connection::PostWrite/PostRead) between its post and its end:
// the send-queue sequences of its first and last work request (RC completes
// in order, so the completion of `last_seq` ends it), its length for the
// Completion, and its deadline. Connections keep them in a preallocated ring
// of send-queue depth, oldest first; a plain value, no behaviour.
//
//   AsyncOp op = {handle, first_seq, last_seq, length, deadline, is_write};
//   if (op.deadline <= now) ...  // overdue: the connection is failed (engine.h)

#ifndef RDMA_TRANSPORT_TRANSPORT_ASYNC_OP_H_
#define RDMA_TRANSPORT_TRANSPORT_ASYNC_OP_H_

#include <cstdint>

#include "transport/engine.h"
#include "verbs_shim/env.h"

namespace rdma_transport {

struct AsyncOp {
  OpHandle handle = 0;
  uint64_t first_seq = 0;
  uint64_t last_seq = 0;
  uint64_t length = 0;
  // The batch's deadline on the Env's clock; kNoDeadline: none.
  Deadline deadline = kNoDeadline;
  bool is_write = false;
};

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TRANSPORT_ASYNC_OP_H_
