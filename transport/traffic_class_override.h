// File: transport/traffic_class_override.h
//
// The host-wide RoCE traffic class some drivers apply over the application's.
// With MLNX_OFED's mlx5_ib, `echo 106 > /sys/class/infiniband/mlx5_0/tc/1/
// traffic_class` makes the kernel replace the traffic class of every QP of
// that port when its path is set: MC_IB_TC then never reaches the wire,
// silently (Mooncake issue #1699). The file reads "Global tclass=106\n"
// while set, possibly followed by per-destination rule lines, and is empty
// when nothing is set; upstream kernels and other vendors have no such file.
//
//   absl::StatusOr<std::optional<TrafficClassOverride>> found =
//       ReadTrafficClassOverride(verbs, context, /*port=*/1);
//   if (found.ok() && found->has_value()) ... (*found)->traffic_class
//
// Stateless functions, safe for concurrent use. Errors: the backend's read
// error (errno text; the file exists but cannot be read), kInvalidArgument
// for a "Global tclass=" line whose value is not 0..255.

#ifndef RDMA_TRANSPORT_TRANSPORT_TRAFFIC_CLASS_OVERRIDE_H_
#define RDMA_TRANSPORT_TRANSPORT_TRAFFIC_CLASS_OVERRIDE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "verbs_shim/verbs.h"

namespace rdma_transport {

struct TrafficClassOverride {
  std::string path;  // "/sys/class/infiniband/mlx5_0/tc/1/traffic_class"
  std::string line;  // "Global tclass=106", as read
  uint8_t traffic_class = 0;  // 106
};

// The global traffic class the file's text sets: nullopt for an empty file
// or one with rule lines only; the value of its "Global tclass=N" line.
absl::StatusOr<std::optional<uint8_t>> ParseTrafficClassFile(
    std::string_view text);

// Reads `port`'s file through the backend and parses it; nullopt when there
// is no file or it sets no global traffic class.
absl::StatusOr<std::optional<TrafficClassOverride>> ReadTrafficClassOverride(
    Verbs& verbs, ibv_context* context, uint8_t port);

// The start-up warning when the override differs from what the application
// asked for (`configured`, MC_IB_TC; nullopt: unset), else nullopt (no
// override, or the same value).
std::optional<std::string> TrafficClassOverrideWarning(
    std::string_view device_name, uint8_t port,
    const std::optional<TrafficClassOverride>& found,
    std::optional<uint8_t> configured);

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TRANSPORT_TRAFFIC_CLASS_OVERRIDE_H_
