// File: transport/deadline.h
//
// Deadlines for calls that wait: a point on the clock of the Env the call
// runs on (verbs_shim/env.h). On real devices that is the steady clock; on a
// simulated fabric it is virtual time. Take deadlines from the Env of the
// Context the call runs on, and they are right on both:
//
//   Env& env = context.env();
//   absl::StatusOr<size_t> n =
//       connection->Receive(buffer, env.DeadlineIn(std::chrono::seconds(5)));
//
// DeadlineIn() below reads the real clock: a shorthand for code that only
// ever runs on real devices. Both clocks give std::chrono::steady_clock time
// points, so the compiler cannot tell them apart; their values can
// (kVirtualEpoch, verbs_shim/env.h). A call given a deadline from the other
// clock (which would pass at once, or not for 146 years) refuses it before
// doing anything, with kInvalidArgument naming both clocks and the fix:
// Listener::Accept(), Engine::Wait() and every Connection call that takes a
// deadline, whether or not it would have had to wait. The check compares
// with a reading of the clock taken when the object was made: no clock is
// read for it. Plain values, thread-safe.

#ifndef RDMA_TRANSPORT_TRANSPORT_DEADLINE_H_
#define RDMA_TRANSPORT_TRANSPORT_DEADLINE_H_

#include <chrono>
#include <string_view>

#include "absl/status/status.h"
#include "verbs_shim/env.h"

namespace rdma_transport {

// A deadline `timeout` from now on the real clock (Env::Real()).
inline Deadline DeadlineIn(Clock::duration timeout) {
  return Env::Real().DeadlineIn(timeout);
}

// kInvalidArgument for `deadline`, given to `who` (say, "connection to
// 10.0.0.2:7471") whose Env's clock is the other one: which clock the
// deadline is on, which the Env is on, and where to take deadlines from.
// Only for a deadline that fails OnClockOf(deadline, <the Env's time>).
[[gnu::cold]] absl::Status WrongClockError(std::string_view who,
                                           Deadline deadline);

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TRANSPORT_DEADLINE_H_
