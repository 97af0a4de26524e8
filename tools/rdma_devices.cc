// rdma_devices: lists the RDMA devices this machine has, with vendor, part
// id, ports, GIDs, the GID the transport would choose and the inline size it
// negotiates. The environment (MC_IB_TC, MC_GID_INDEX, MC_MAX_INLINE, ...)
// applies as it would to the transport.
//
//   bazel run //tools:rdma_devices
//
// Exit status: 0 when every device was reported, 1 when there is no RDMA
// device or one could not be used, 2 for a configuration error.
#include <cstdio>
#include <cstring>
#include <iostream>

#include "tools/device_report.h"
#include "transport/config.h"
#include "verbs_shim/ibverbs_backend.h"

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0 ||
        std::strcmp(argv[i], "-h") == 0) {
      std::printf(
          "usage: rdma_devices\n"
          "Lists RDMA devices, their GIDs and the negotiated inline size.\n"
          "Honours MC_IB_TC, MC_IB_SL, MC_GID_INDEX, MC_IB_PORT, MC_MTU, "
          "MC_MAX_INLINE.\n");
      return 0;
    }
    std::fprintf(stderr, "rdma_devices: unknown argument \"%s\" (try --help)\n",
                 argv[i]);
    return 2;
  }
  absl::StatusOr<rdma_transport::TransportConfig> config =
      rdma_transport::LoadTransportConfig();
  if (!config.ok()) {
    std::fprintf(stderr, "rdma_devices: %s\n",
                 std::string(config.status().message()).c_str());
    return 2;
  }
  rdma_transport::IbverbsBackend verbs;
  absl::Status status =
      rdma_transport::WriteDeviceReport(verbs, *config, std::cout);
  std::cout.flush();
  if (!status.ok()) {
    std::fprintf(stderr, "rdma_devices: %s\n",
                 std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}
