#include "transport/traffic_class_override.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace rdma_transport {
namespace {

constexpr std::string_view kGlobalPrefix = "Global tclass=";

}  // namespace

absl::StatusOr<std::optional<uint8_t>> ParseTrafficClassFile(
    std::string_view text) {
  while (!text.empty()) {
    const size_t end = text.find('\n');
    const std::string_view line = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view()
                                         : text.substr(end + 1);
    if (!line.starts_with(kGlobalPrefix)) continue;  // rule lines, blanks
    const std::string_view digits = line.substr(kGlobalPrefix.size());
    int value = 0;
    bool valid = !digits.empty() && digits.size() <= 3;
    for (char c : digits) {
      if (c < '0' || c > '9') valid = false;
      value = value * 10 + (c - '0');
    }
    if (!valid || value > 255) {
      return absl::InvalidArgumentError(absl::StrCat(
          "\"", std::string(line), "\": expected \"Global tclass=<0..255>\""));
    }
    return std::optional<uint8_t>(static_cast<uint8_t>(value));
  }
  return std::optional<uint8_t>();
}

absl::StatusOr<std::optional<TrafficClassOverride>> ReadTrafficClassOverride(
    Verbs& verbs, ibv_context* context, uint8_t port) {
  absl::StatusOr<Verbs::TrafficClassFile> file =
      verbs.ReadTrafficClassFile(context, port);
  if (!file.ok()) return file.status();
  if (!file->contents.has_value()) return std::optional<TrafficClassOverride>();
  absl::StatusOr<std::optional<uint8_t>> value =
      ParseTrafficClassFile(*file->contents);
  if (!value.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(file->path, ": ", value.status().message()));
  }
  if (!value->has_value()) return std::optional<TrafficClassOverride>();
  TrafficClassOverride found;
  found.path = file->path;
  found.traffic_class = **value;
  found.line =
      absl::StrCat(std::string(kGlobalPrefix), int{found.traffic_class});
  return std::optional<TrafficClassOverride>(std::move(found));
}

std::optional<std::string> TrafficClassOverrideWarning(
    std::string_view device_name, uint8_t port,
    const std::optional<TrafficClassOverride>& found,
    std::optional<uint8_t> configured) {
  if (!found.has_value() || !configured.has_value() ||
      *configured == found->traffic_class) {
    return std::nullopt;
  }
  return absl::StrCat(
      std::string(device_name), " port ", port, ": ", found->path, " holds \"",
      found->line,
      "\": the driver sends every QP's packets with traffic class ",
      int{found->traffic_class}, ", overriding MC_IB_TC=", int{*configured},
      " (a host-wide mlx5 setting; ask the host's operator, or set MC_IB_TC=",
      int{found->traffic_class}, " to agree with it)");
}

}  // namespace rdma_transport
