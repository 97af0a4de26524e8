// File: tests/swarm/runner.h
//
// Runs one swarm scenario (scenario.h) against the real transport on a
// simulated fabric, in virtual time, and checks the invariants:
//
//   1. Messages: on every connection and direction, what Receive() returns
//      is exactly the sequence Send() accepted, byte for byte, each once and
//      in order (a prefix of it while the connection lives). After the faults
//      stop, every accepted message is delivered, or the receiving side's
//      connection has ended with a typed Status (see TypedStatus below).
//   2. One-sided: a Write() or Read() that returns OK left the destination
//      byte-exact equal to the source.
//   3. Deadlines: no call given a deadline (Send, Receive, Close, Accept via
//      the dial) returns after it on the virtual clock; Write()/Read(), which
//      have none, return within a bound of the QP's retry budget.
//   4. Liveness: after the faults stop (cleared, devices revived, ports up),
//      a new connection between the two NICs succeeds and carries
//      4 x recv_slots messages each way, one at a time.
//   5. Leaks: once everything is destroyed, the fabric's leak report is empty.
//
// A run is a deterministic function of the scenario: the result carries the
// fabric's TraceDigest() (sim/fabric.h), the same on every rerun of a seed.
//
//   RunResult result = RunScenario(GenerateScenario(42));
//   if (!result.ok()) std::cerr << result.violations[0];
//
// Thread-safety: RunScenario may run on several threads at once (each run
// has its own fabric); it starts a thread of its own per connection dialled.

#ifndef RDMA_TRANSPORT_TESTS_SWARM_RUNNER_H_
#define RDMA_TRANSPORT_TESTS_SWARM_RUNNER_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "tests/swarm/scenario.h"

namespace rdma_transport::swarm {

struct RunOptions {
  // Log every step and its outcome into RunResult::log.
  bool verbose = false;
  // With verbose: also print each line to stdout as it happens (a hang
  // shows where it is).
  bool echo = false;
  // After the faults stop, read the Contexts' queued async events before
  // the liveness dial, as an application's event loop would have. The
  // workaround for a transport bug since fixed (docs/testing.md, "Bugs
  // found", 3: a stale port event failed a new connection); off, so the
  // liveness dial meets whatever is still queued.
  bool drain_stale_async_events = false;
  // A Send whose peer has received everything (and, given a turn, has seen
  // every credit message this side sent) must go through or fail within
  // 2 s (a lost credit would stall it). Opt-in: the stall it first found
  // (docs/testing.md, "Bugs found", 4) was the check's own premise.
  bool check_credit_stalls = false;
};

struct RunResult {
  uint64_t digest = 0;  // Fabric::TraceDigest() at the end of the run
  uint64_t events = 0;  // Fabric::EventsRun()
  std::chrono::nanoseconds virtual_time{0};
  // Broken invariants, in the order found; empty: the run passed.
  std::vector<std::string> violations;
  std::string log;  // RunOptions::verbose only

  // What the run did, for coverage figures.
  uint64_t messages_sent = 0;
  uint64_t messages_delivered = 0;
  uint64_t rdma_ops_ok = 0;
  uint64_t connections_dialled = 0;
  uint64_t connections_failed = 0;  // ended with a typed Status

  bool ok() const { return violations.empty(); }
};

RunResult RunScenario(const Scenario& scenario, const RunOptions& options = {});

// Whether `status` is a typed failure as connection.h promises: not OK, not
// kUnknown, and with a message.
bool TypedStatus(const absl::Status& status);

}  // namespace rdma_transport::swarm

#endif  // RDMA_TRANSPORT_TESTS_SWARM_RUNNER_H_
