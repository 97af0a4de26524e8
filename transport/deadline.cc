#include "transport/deadline.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace rdma_transport {

absl::Status WrongClockError(std::string_view who, Deadline deadline) {
  if (deadline < kVirtualEpoch) {
    return absl::InvalidArgumentError(absl::StrCat(
        std::string(who),
        ": the deadline is on the real clock (DeadlineIn(), Env::Real()), but "
        "this runs on a simulated fabric's virtual clock, on which it lies "
        "before time began; take deadlines from the Env it runs on: "
        "context.env().DeadlineIn(...) (fabric.env() is the same Env)"));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      std::string(who),
      ": the deadline is on a simulated fabric's virtual clock, but this runs "
      "on the real clock, which would not reach it for 146 years; take "
      "deadlines from the Env it runs on: context.env().DeadlineIn(...) (on "
      "real devices DeadlineIn(...) is the same)"));
}

}  // namespace rdma_transport
