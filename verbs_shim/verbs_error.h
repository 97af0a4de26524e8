// File: verbs_shim/verbs_error.h
//
// Turning a verbs errno into an `absl::Status` without losing it.
//
//   return VerbsError("ibv_create_qp", errno);
//   // -> INVALID_ARGUMENT: "ibv_create_qp failed: Invalid argument (errno 22)"
//
//   if (VerbsErrno(status) == EINVAL) {
//     // ... ask for less ...
//   }
//
// The canonical code follows the errno (EINVAL -> kInvalidArgument, ENOMEM ->
// kResourceExhausted, EBUSY -> kFailedPrecondition, ETIMEDOUT ->
// kDeadlineExceeded, EOPNOTSUPP -> kUnimplemented, ...), the message carries
// the errno text, and the errno itself rides along as a payload so policy code
// can test the exact value. All functions are thread-safe.

#ifndef RDMA_TRANSPORT_VERBS_SHIM_VERBS_ERROR_H_
#define RDMA_TRANSPORT_VERBS_SHIM_VERBS_ERROR_H_

#include <string_view>

#include "absl/status/status.h"

namespace rdma_transport {

// A status for `call` failing with `error` (an errno value, positive). An
// `error` of 0 (a verbs call that failed without setting errno) is reported
// as EIO. `detail`, when not empty, is appended to the message.
absl::Status VerbsError(std::string_view call, int error,
                        std::string_view detail = {});

// The errno carried by a status from VerbsError(), or 0 for any other status.
int VerbsErrno(const absl::Status& status);

// `status` with "<context>: " put before its message; code and payloads (the
// errno among them) are kept. An OK status is returned unchanged.
absl::Status WithContext(const absl::Status& status, std::string_view context);

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_VERBS_SHIM_VERBS_ERROR_H_
