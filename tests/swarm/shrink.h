// File: tests/swarm/shrink.h
//
// Shrinking a failing swarm scenario: drop steps while the run still fails,
// first in halves and quarters, then one at a time (a simple delta
// debugging), until no single step can go. The result replays with
// ReplayCommand() (scenario.h): its seed plus the indices of the steps kept.
//
//   Scenario minimal = Shrink(GenerateScenario(seed), [](const Scenario& s) {
//     return !RunScenario(s).ok();
//   });
//
// Thread-safety: a pure function of its arguments (calls `fails` serially).

#ifndef RDMA_TRANSPORT_TESTS_SWARM_SHRINK_H_
#define RDMA_TRANSPORT_TESTS_SWARM_SHRINK_H_

#include <functional>

#include "tests/swarm/scenario.h"

namespace rdma_transport::swarm {

// `generated` must be an unshrunk scenario that `fails`. Returns a scenario
// of its steps (KeepSteps) that still fails and from which no single step
// can be removed without the failure going away. `max_runs` bounds the
// number of calls to `fails`.
Scenario Shrink(const Scenario& generated,
                const std::function<bool(const Scenario&)>& fails,
                int max_runs = 500);

}  // namespace rdma_transport::swarm

#endif  // RDMA_TRANSPORT_TESTS_SWARM_SHRINK_H_
