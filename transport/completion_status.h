// File: transport/completion_status.h
//
// What the device's reports mean to a Connection: the absl::StatusCode a
// failed completion becomes (kUnavailable when the peer is unreachable or
// gone, kPermissionDenied for protection and access errors,
// kInvalidArgument for length errors, kInternal otherwise), the words that
// name it, and the words for an asynchronous event.
//
//   std::string detail = DescribeFailedCompletion(name_, wc);
//   FailLocked(absl::Status(CodeForCompletion(wc.status), detail));
//
// Internal to //transport:transport. Stateless and thread-safe.

#ifndef RDMA_TRANSPORT_TRANSPORT_COMPLETION_STATUS_H_
#define RDMA_TRANSPORT_TRANSPORT_COMPLETION_STATUS_H_

#include <string>

#include "absl/status/status.h"
#include "verbs_shim/verbs.h"

namespace rdma_transport {

absl::StatusCode CodeForCompletion(ibv_wc_status status);

// "<name>: <operation> completion failed: <status> (<description>), vendor
// error 0x<hex>", and "; the peer is unreachable or gone" after a retry
// exhaustion. The operation comes from the wr_id's kind (wr_id.h).
std::string DescribeFailedCompletion(const std::string& name, const ibv_wc& wc);

// Appended to a flush that is a connection's first failure when no async
// event explains it either (Linux 6.1's rxe fails a QP that way, with only a
// kernel WARNING to show: docs/soft-roce.md).
std::string UnexplainedFlushNote();

// What an asynchronous event (an ibv_event_type) says happened: "the QP
// failed", "the port went down", ...
const char* AsyncEventMeaning(int type);

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TRANSPORT_COMPLETION_STATUS_H_
