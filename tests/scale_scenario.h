// File: tests/scale_scenario.h
//
// The simulated scale run (docs/simulator.md, "Scale run"): `hosts`
// simulated NICs on one fabric, two Engines (the host as writer, as target)
// and one Listener per host, a connection from every host to every host,
// itself included (hosts^2; 4,096 at 64 hosts), then all-to-all RDMA WRITE
// traffic: every connection writes
// `bytes_per_connection` to its peer in `op_bytes` operations, `window` of
// them outstanding (PostWrite(), refilled per completion). All of it runs in
// the fabric's virtual time, driven by the calling thread (a helper thread
// per Connect() during setup only), so a run is deterministic: the same
// options give the same trace digest.
//
// Checked as it runs: every operation ends COMPLETED, and afterwards every
// byte of every peer's target region is what its writer wrote (a pattern
// of writer, target and offset; each writer has a ring of `window` slots
// in each target, so memory is hosts^2 x window x op_bytes, 1 GiB at the
// defaults, whatever bytes_per_connection is). Reported: connections, virtual
// time and throughput of the traffic phase, every host's egress link
// utilisation (wire bytes, headers included, over the link's rate and the
// phase's virtual time), the wall time of setup and traffic, and the fabric's
// trace digest.
//
//   ScaleOptions options;               // 64 hosts, 1 MiB per connection
//   absl::StatusOr<ScaleReport> report = RunScaleScenario(options);
//   if (report.ok()) std::printf("%s", FormatScaleReport(*report).c_str());
//
// Errors: kInvalidArgument for options out of range (naming the option);
// otherwise the first failure of setup or traffic, naming the connection.
// Thread-compatible: one run per call; runs share nothing.

#ifndef RDMA_TRANSPORT_TESTS_SCALE_SCENARIO_H_
#define RDMA_TRANSPORT_TESTS_SCALE_SCENARIO_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace rdma_transport {

struct ScaleOptions {
  uint32_t hosts = 64;                         // 2..250
  uint64_t bytes_per_connection = 1ull << 20;  // a multiple of op_bytes
  uint32_t op_bytes = 64 * 1024;               // 1..1 MiB
  uint32_t window = 4;                         // 1..12 ops outstanding
  std::string profile = "cx7";                 // sim::ProfileByName()
};

struct ScaleReport {
  uint32_t hosts = 0;
  uint32_t connections = 0;
  uint64_t bytes = 0;       // payload written, all connections
  uint64_t operations = 0;  // WRITEs completed
  double setup_wall_seconds = 0;
  double traffic_wall_seconds = 0;
  double traffic_virtual_seconds = 0;
  double throughput_gbps = 0;  // payload over virtual time, all links
  double link_gbps = 0;        // each host's egress rate
  // Per host, in host order: egress wire bytes over link rate x time.
  std::vector<double> link_utilisation;
  uint64_t retransmissions = 0;
  uint64_t digest = 0;  // sim::Fabric::Digest() after the run
};

absl::StatusOr<ScaleReport> RunScaleScenario(const ScaleOptions& options);

// The report as text: a summary line per figure, then utilisation
// min / median / max over the hosts.
std::string FormatScaleReport(const ScaleReport& report);

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TESTS_SCALE_SCENARIO_H_
