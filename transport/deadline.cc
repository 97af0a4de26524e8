#include "transport/deadline.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace rdma_transport {

absl::Status WrongClockError(std::string_view who, Deadline deadline) {
  constexpr const char* kReal = "the real clock (DeadlineIn(), Env::Real())";
  constexpr const char* kVirtual = "a simulated fabric's virtual clock";
  const bool real = deadline < kVirtualEpoch;
  return absl::InvalidArgumentError(absl::StrCat(
      std::string(who), ": the deadline is on ", real ? kReal : kVirtual,
      ", but this runs on ", real ? kVirtual : "the real clock",
      real ? ", on which it lies before time began"
           : ", which would not reach it for 146 years",
      "; take deadlines from the Env it runs on: "
      "context.env().DeadlineIn(...) (",
      real ? "fabric.env() is the same Env)"
           : "on real devices DeadlineIn(...) is the same)"));
}

}  // namespace rdma_transport
