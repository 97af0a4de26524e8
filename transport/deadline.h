// File: transport/deadline.h
//
// Deadlines for calls that wait: a point on an Env's clock (verbs_shim/env.h).
// On real devices that is the steady clock and DeadlineIn() below is enough;
// on a simulated fabric time is virtual: take deadlines from the Env the
// connection runs on, `context.env().DeadlineIn(...)`. Plain values,
// thread-safe.
//
//   absl::StatusOr<size_t> n =
//       connection.Receive(buffer, env.DeadlineIn(std::chrono::seconds(5)));

#ifndef RDMA_TRANSPORT_TRANSPORT_DEADLINE_H_
#define RDMA_TRANSPORT_TRANSPORT_DEADLINE_H_

#include <chrono>

#include "verbs_shim/env.h"

namespace rdma_transport {

// A deadline `timeout` from now on the real clock (Env::Real()).
inline Deadline DeadlineIn(Clock::duration timeout) {
  return Env::Real().DeadlineIn(timeout);
}

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TRANSPORT_DEADLINE_H_
