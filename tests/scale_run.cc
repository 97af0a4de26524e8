// scale_run: the simulated scale run (tests/scale_scenario.h): 64 hosts,
// a connection from each to every host (4,096), all-to-all RDMA WRITE in
// virtual time; prints throughput, per-host link utilisation and the trace
// digest.
//
//   bazel run -c opt //tests:scale_run
//   bazel run -c opt //tests:scale_run -- --hosts=16 --bytes_per_connection=4194304
#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "tests/scale_scenario.h"

ABSL_FLAG(uint32_t, hosts, rdma_transport::ScaleOptions{}.hosts,
          "simulated hosts (2..250); connections: hosts x hosts");
ABSL_FLAG(uint64_t, bytes_per_connection,
          rdma_transport::ScaleOptions{}.bytes_per_connection,
          "payload each connection writes (a multiple of --op_bytes)");
ABSL_FLAG(uint32_t, op_bytes, rdma_transport::ScaleOptions{}.op_bytes,
          "bytes per RDMA WRITE (1..1048576)");
ABSL_FLAG(uint32_t, window, rdma_transport::ScaleOptions{}.window,
          "WRITEs outstanding per connection (1..12)");
ABSL_FLAG(std::string, profile, rdma_transport::ScaleOptions{}.profile,
          "simulated NIC profile (rdma_devices --backend=sim lists them)");

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  rdma_transport::ScaleOptions options;
  options.hosts = absl::GetFlag(FLAGS_hosts);
  options.bytes_per_connection = absl::GetFlag(FLAGS_bytes_per_connection);
  options.op_bytes = absl::GetFlag(FLAGS_op_bytes);
  options.window = absl::GetFlag(FLAGS_window);
  options.profile = absl::GetFlag(FLAGS_profile);
  absl::StatusOr<rdma_transport::ScaleReport> report =
      rdma_transport::RunScaleScenario(options);
  if (!report.ok()) {
    std::fprintf(stderr, "scale_run: %s\n", report.status().ToString().c_str());
    return 1;
  }
  std::printf("%s", rdma_transport::FormatScaleReport(*report).c_str());
  return 0;
}
