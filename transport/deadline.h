// File: transport/deadline.h
//
// Deadlines for calls that wait: a point on the steady clock. Plain values,
// thread-safe.
//
//   absl::StatusOr<size_t> n = connection.Receive(buffer,
//   DeadlineIn(std::chrono::seconds(5)));

#ifndef RDMA_TRANSPORT_TRANSPORT_DEADLINE_H_
#define RDMA_TRANSPORT_TRANSPORT_DEADLINE_H_

#include <chrono>

namespace rdma_transport {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

inline Deadline DeadlineIn(Clock::duration timeout) {
  return Clock::now() + timeout;
}

inline constexpr Deadline kNoDeadline = Deadline::max();

// Milliseconds left until `deadline`, rounded up, clamped to 0..INT_MAX, or
// -1 (wait forever) for kNoDeadline: the `timeout` argument of poll(2).
int PollTimeoutMs(Deadline deadline);

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TRANSPORT_DEADLINE_H_
