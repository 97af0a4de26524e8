#include "transport/deadline.h"

#include <climits>

namespace rdma_transport {

int PollTimeoutMs(Deadline deadline) {
  if (deadline == kNoDeadline) return -1;
  const Clock::duration left = deadline - Clock::now();
  if (left <= Clock::duration::zero()) return 0;
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  return ms > INT_MAX ? INT_MAX : static_cast<int>(ms);
}

}  // namespace rdma_transport
