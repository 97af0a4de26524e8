#include "verbs_shim/verbs_error.h"

#include <cerrno>
#include <cstring>
#include <string>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace rdma_transport {
namespace {

constexpr char kErrnoPayloadUrl[] = "type.rdma_transport/verbs_errno";

absl::StatusCode CodeForErrno(int error) {
  switch (error) {
    case EINVAL:
    case ERANGE:
      return absl::StatusCode::kInvalidArgument;
    case ENOMEM:
    case ENOSPC:
    case ENOBUFS:
      return absl::StatusCode::kResourceExhausted;
    case EBUSY:
    case EEXIST:
      return absl::StatusCode::kFailedPrecondition;
    case ENOENT:
    case ENODEV:
    case ENXIO:
    case ENODATA:
      return absl::StatusCode::kNotFound;
    case EOPNOTSUPP:
    case ENOSYS:
      return absl::StatusCode::kUnimplemented;
    case EPERM:
    case EACCES:
      return absl::StatusCode::kPermissionDenied;
    case ETIMEDOUT:
      return absl::StatusCode::kDeadlineExceeded;
    case EAGAIN:
    case ECONNRESET:
    case ECONNREFUSED:
    case EPIPE:
    case ENETDOWN:
    case ENETUNREACH:
      return absl::StatusCode::kUnavailable;
    default:
      return absl::StatusCode::kInternal;
  }
}

}  // namespace

absl::Status VerbsError(std::string_view call, int error,
                        std::string_view detail) {
  if (error <= 0) error = EIO;
  char buffer[128];
  // GNU strerror_r returns the message (not always in `buffer`).
  const char* text = strerror_r(error, buffer, sizeof(buffer));
  std::string message = absl::StrCat(std::string(call), " failed: ", text,
                                     " (errno ", error, ")");
  if (!detail.empty()) absl::StrAppend(&message, "; ", std::string(detail));
  absl::Status status(CodeForErrno(error), message);
  status.SetPayload(kErrnoPayloadUrl, absl::Cord(absl::StrCat(error)));
  return status;
}

int VerbsErrno(const absl::Status& status) {
  if (status.ok()) return 0;
  auto payload = status.GetPayload(kErrnoPayloadUrl);
  if (!payload.has_value()) return 0;
  int error = 0;
  if (!absl::SimpleAtoi(std::string(*payload), &error)) return 0;
  return error;
}

absl::Status WithContext(const absl::Status& status, std::string_view context) {
  if (status.ok()) return status;
  absl::Status annotated(status.code(), absl::StrCat(std::string(context), ": ",
                                                     status.message()));
  status.ForEachPayload([&](absl::string_view url, const absl::Cord& payload) {
    annotated.SetPayload(url, payload);
  });
  return annotated;
}

}  // namespace rdma_transport
