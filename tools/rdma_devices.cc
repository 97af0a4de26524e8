// rdma_devices: lists the RDMA devices this machine has, with vendor, part
// id, ports, GIDs, the GID the transport would choose and why, the host's
// traffic-class override, and the inline size it negotiates. The
// environment (MC_IB_TC, MC_GID_INDEX, RDMA_TRANSPORT_GID_SUBNET,
// MC_MAX_INLINE, ...) applies as it would to the transport.
//
//   bazel run //tools:rdma_devices
//   bazel run //tools:rdma_devices -- --sim=cx7 --sim_tc_override=106
//
// --sim=<profile> reports on one simulated NIC of that profile
// (sim/profile_names.h) instead of the real devices, and
// --sim_tc_override=<0..255> gives it a host traffic-class override, as
// `echo N > /sys/class/infiniband/<dev>/tc/1/traffic_class` does on mlx5:
// for trying the report, and for its test.
//
// Exit status: 0 when every device was reported, 1 when there is no RDMA
// device or one could not be used, 2 for a configuration or usage error.
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "sim/fabric.h"
#include "sim/profile_names.h"
#include "sim/sim_verbs.h"
#include "tools/device_report.h"
#include "transport/config.h"
#include "verbs_shim/ibverbs_backend.h"

namespace {

// "--name=value" -> value, else nullopt.
std::optional<std::string> FlagValue(std::string_view arg,
                                     std::string_view name) {
  if (arg.size() <= name.size() + 1 || !arg.starts_with(name) ||
      arg[name.size()] != '=') {
    return std::nullopt;
  }
  return std::string(arg.substr(name.size() + 1));
}

// 0..255, decimal digits only.
std::optional<uint8_t> ParseTrafficClass(const std::string& text) {
  if (text.empty() || text.size() > 3) return std::nullopt;
  int value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + (c - '0');
  }
  if (value > 255) return std::nullopt;
  return static_cast<uint8_t>(value);
}

int Usage(const char* problem) {
  std::fprintf(stderr, "rdma_devices: %s (try --help)\n", problem);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::optional<std::string> sim_profile;
  std::optional<uint8_t> sim_tc_override;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::printf(
          "usage: rdma_devices [--sim=<profile> [--sim_tc_override=<0..255>]]\n"
          "Lists RDMA devices, their GIDs and the one chosen (and why), the\n"
          "host traffic-class override, and the negotiated inline size.\n"
          "Honours MC_IB_TC, MC_IB_SL, MC_GID_INDEX, MC_IB_PORT, MC_MTU, "
          "MC_MAX_INLINE,\nMC_IB_TIMEOUT, RDMA_TRANSPORT_GID_SUBNET.\n"
          "  --sim=<profile>            one simulated NIC instead (%s)\n"
          "  --sim_tc_override=<n>      its host traffic-class override\n",
          "cx6, cx7, cx7-ib, e810, x722, erdma, rxe");
      return 0;
    }
    if (std::optional<std::string> value = FlagValue(arg, "--sim")) {
      sim_profile = *value;
    } else if (std::optional<std::string> tc =
                   FlagValue(arg, "--sim_tc_override")) {
      sim_tc_override = ParseTrafficClass(*tc);
      if (!sim_tc_override.has_value()) {
        const std::string problem =
            "--sim_tc_override=" + *tc + ": want an integer 0..255";
        return Usage(problem.c_str());
      }
    } else {
      const std::string problem =
          "unknown argument \"" + std::string(arg) + "\"";
      return Usage(problem.c_str());
    }
  }
  if (sim_tc_override.has_value() && !sim_profile.has_value()) {
    return Usage("--sim_tc_override needs --sim=<profile>");
  }
  absl::StatusOr<rdma_transport::TransportConfig> config =
      rdma_transport::LoadTransportConfig();
  if (!config.ok()) {
    std::fprintf(stderr, "rdma_devices: %s\n",
                 std::string(config.status().message()).c_str());
    return 2;
  }

  std::unique_ptr<rdma_transport::sim::Fabric> fabric;
  std::unique_ptr<rdma_transport::Verbs> verbs;
  if (sim_profile.has_value()) {
    absl::StatusOr<rdma_transport::sim::DeviceProfile> profile =
        rdma_transport::sim::ProfileByName(*sim_profile);
    if (!profile.ok()) {
      std::fprintf(stderr, "rdma_devices: --sim=%s: %s\n", sim_profile->c_str(),
                   std::string(profile.status().message()).c_str());
      return 2;
    }
    profile->traffic_class_override = sim_tc_override;
    fabric = std::make_unique<rdma_transport::sim::Fabric>();
    if (absl::StatusOr<std::string> added = fabric->AddDevice(*profile);
        !added.ok()) {
      std::fprintf(stderr, "rdma_devices: %s\n",
                   std::string(added.status().message()).c_str());
      return 2;
    }
    verbs = std::make_unique<rdma_transport::sim::SimVerbs>(fabric.get());
  } else {
    verbs = std::make_unique<rdma_transport::IbverbsBackend>();
  }
  absl::Status status =
      rdma_transport::WriteDeviceReport(*verbs, *config, std::cout);
  std::cout.flush();
  if (!status.ok()) {
    std::fprintf(stderr, "rdma_devices: %s\n",
                 std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}
