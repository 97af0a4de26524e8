// File: tests/swarm/driver.h
//
// Running many swarm seeds in one process, as CI and the soak do, and
// reporting a failing seed the way a person replays it: the scenario, the
// broken invariants, the shrunk scenario and the one command that replays
// it.
//
//   SwarmSummary summary = RunSeeds({.first_seed = 1, .seeds = 10000});
//   if (!summary.failures.empty()) std::cerr << summary.failures[0].report;
//
// A crash or an abort in the middle of a seed (a CHECK in the transport,
// SimEnv's deadlock detector) prints the seed's replay command from a
// signal handler before the process dies.
//
// Thread-safety: one RunSeeds at a time per process (the crash handler
// names the seed in progress).

#ifndef RDMA_TRANSPORT_TESTS_SWARM_DRIVER_H_
#define RDMA_TRANSPORT_TESTS_SWARM_DRIVER_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace rdma_transport::swarm {

struct SwarmOptions {
  uint64_t first_seed = 1;
  uint64_t seeds = 1000;
  // > 0: keep going (seed after seed) until this much wall time has passed,
  // whatever `seeds` says.
  std::chrono::seconds soak{0};
  // Shrink each failing seed (costs up to a few hundred reruns).
  bool shrink = true;
  // Stop after this many failing seeds.
  int max_failures = 1;
  // Print one line per seed (its digest) to stdout.
  bool print_digests = false;
  // RunOptions::check_credit_stalls for every seed.
  bool check_credit_stalls = false;
};

struct SeedFailure {
  uint64_t seed = 0;
  std::string report;  // scenario, violations, shrunk scenario, replay
};

struct SwarmSummary {
  uint64_t seeds_run = 0;
  std::chrono::nanoseconds wall{0};
  std::vector<SeedFailure> failures;
  // Totals over the seeds, for coverage.
  uint64_t messages_delivered = 0;
  uint64_t rdma_ops_ok = 0;
  uint64_t connections_dialled = 0;
  uint64_t connections_failed = 0;
  uint64_t events = 0;
  std::string ToString() const;
};

SwarmSummary RunSeeds(const SwarmOptions& options);

// The report of one failing scenario (shrinking it when `shrink`).
std::string FailureReport(uint64_t seed, bool shrink,
                          bool check_credit_stalls = false);

}  // namespace rdma_transport::swarm

#endif  // RDMA_TRANSPORT_TESTS_SWARM_DRIVER_H_
