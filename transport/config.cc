#include "transport/config.h"

#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace rdma_transport {
namespace {

// One integer setting: where it comes from and what it accepts.
struct IntSetting {
  const char* variable;  // environment variable
  const char* field;     // TransportOptions field
  std::optional<int> TransportOptions::*set_in_code;
  bool (*valid)(int);
  const char* expected;  // what valid() accepts, for error messages
  int default_value;
};

bool IsTrafficClass(int v) { return v == -1 || (v >= 0 && v <= 255); }
bool IsServiceLevel(int v) { return v == -1 || (v >= 0 && v <= 15); }
bool IsGidIndex(int v) { return v == -1 || (v >= 0 && v <= 255); }
bool IsPort(int v) { return v >= 1 && v <= 255; }
bool IsMtu(int v) { return v == 512 || v == 1024 || v == 2048 || v == 4096; }
bool IsMaxInline(int v) { return v == -1 || (v >= 0 && v <= 1024); }
bool IsAckTimeout(int v) { return v == -1 || (v >= 1 && v <= 31); }

constexpr IntSetting kTrafficClass = {
    "MC_IB_TC",
    "traffic_class",
    &TransportOptions::traffic_class,
    &IsTrafficClass,
    "an integer 0..255 (RoCE traffic class), or -1 for the system default",
    -1};
constexpr IntSetting kServiceLevel = {
    "MC_IB_SL",
    "service_level",
    &TransportOptions::service_level,
    &IsServiceLevel,
    "an integer 0..15 (service level), or -1 for the default (0)",
    -1};
constexpr IntSetting kGidIndex = {
    "MC_GID_INDEX",
    "gid_index",
    &TransportOptions::gid_index,
    &IsGidIndex,
    "an integer 0..255 (GID table index), or -1 to choose automatically",
    -1};
constexpr IntSetting kPort = {"MC_IB_PORT",
                              "port",
                              &TransportOptions::port,
                              &IsPort,
                              "an integer 1..255 (device port)",
                              1};
constexpr IntSetting kMtu = {"MC_MTU",
                             "mtu",
                             &TransportOptions::mtu,
                             &IsMtu,
                             "one of 512, 1024, 2048, 4096 (bytes)",
                             4096};
constexpr IntSetting kMaxInline = {
    "MC_MAX_INLINE",
    "max_inline",
    &TransportOptions::max_inline,
    &IsMaxInline,
    "an integer 0..1024 (first inline size to ask for; 0 disables inline), "
    "or -1 to choose by vendor",
    -1};
constexpr IntSetting kAckTimeout = {
    "MC_IB_TIMEOUT",
    "ack_timeout",
    &TransportOptions::ack_timeout,
    &IsAckTimeout,
    "an integer 1..31 (RC ACK timeout, 4.096 us * 2^value), or -1 for the "
    "default (14, ~67 ms)",
    -1};

// Strict decimal: optional '-', 1..9 digits, nothing else (no spaces, no
// '+', no trailing characters).
std::optional<int> ParseStrictInt(std::string_view text) {
  size_t i = 0;
  bool negative = false;
  if (!text.empty() && text[0] == '-') {
    negative = true;
    i = 1;
  }
  if (i == text.size() || text.size() - i > 9) return std::nullopt;
  int value = 0;
  for (; i < text.size(); ++i) {
    if (text[i] < '0' || text[i] > '9') return std::nullopt;
    value = value * 10 + (text[i] - '0');
  }
  return negative ? -value : value;
}

absl::StatusOr<int> Resolve(const IntSetting& setting,
                            const TransportOptions& set_in_code,
                            const EnvironmentLookup& environment) {
  if (const std::optional<int>& value = set_in_code.*setting.set_in_code;
      value.has_value()) {
    if (!setting.valid(*value)) {
      return absl::InvalidArgumentError(
          absl::StrCat("TransportOptions.", setting.field, "=", *value,
                       " is invalid: expected ", setting.expected));
    }
    return *value;
  }
  std::optional<std::string> text = environment(setting.variable);
  if (!text.has_value()) return setting.default_value;
  std::optional<int> value = ParseStrictInt(*text);
  if (!value.has_value() || !setting.valid(*value)) {
    return absl::InvalidArgumentError(
        absl::StrCat(setting.variable, "=\"", *text, "\" is invalid: expected ",
                     setting.expected,
                     text->empty() ? " (it is set but empty; unset it for the "
                                     "default)"
                                   : ""));
  }
  return *value;
}

constexpr char kGidSubnetVariable[] = "RDMA_TRANSPORT_GID_SUBNET";

absl::StatusOr<std::optional<GidSubnet>> ResolveGidSubnet(
    const TransportOptions& set_in_code, const EnvironmentLookup& environment) {
  std::string source;
  std::optional<std::string> text;
  if (set_in_code.gid_subnet.has_value()) {
    source = "TransportOptions.gid_subnet=";
    text = set_in_code.gid_subnet;
  } else {
    source = absl::StrCat(kGidSubnetVariable, "=");
    text = environment(kGidSubnetVariable);
    if (!text.has_value()) return std::optional<GidSubnet>();
  }
  absl::StatusOr<GidSubnet> subnet = ParseGidSubnet(*text);
  if (!subnet.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, subnet.status().message()));
  }
  return std::optional<GidSubnet>(*std::move(subnet));
}

}  // namespace

EnvironmentLookup ProcessEnvironment() {
  return [](std::string_view name) -> std::optional<std::string> {
    const char* value = std::getenv(std::string(name).c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
}

absl::StatusOr<TransportConfig> LoadTransportConfig(
    const TransportOptions& set_in_code, const EnvironmentLookup& environment) {
  TransportConfig config;

  absl::StatusOr<int> traffic_class =
      Resolve(kTrafficClass, set_in_code, environment);
  if (!traffic_class.ok()) return traffic_class.status();
  if (*traffic_class >= 0) config.traffic_class = *traffic_class;

  absl::StatusOr<int> service_level =
      Resolve(kServiceLevel, set_in_code, environment);
  if (!service_level.ok()) return service_level.status();
  if (*service_level >= 0) config.service_level = *service_level;

  absl::StatusOr<int> gid_index = Resolve(kGidIndex, set_in_code, environment);
  if (!gid_index.ok()) return gid_index.status();
  if (*gid_index >= 0) config.gid_index = *gid_index;

  absl::StatusOr<int> port = Resolve(kPort, set_in_code, environment);
  if (!port.ok()) return port.status();
  config.port = *port;

  absl::StatusOr<int> mtu = Resolve(kMtu, set_in_code, environment);
  if (!mtu.ok()) return mtu.status();
  config.mtu = *mtu;

  absl::StatusOr<int> max_inline =
      Resolve(kMaxInline, set_in_code, environment);
  if (!max_inline.ok()) return max_inline.status();
  if (*max_inline >= 0) config.max_inline = *max_inline;

  absl::StatusOr<int> ack_timeout =
      Resolve(kAckTimeout, set_in_code, environment);
  if (!ack_timeout.ok()) return ack_timeout.status();
  if (*ack_timeout >= 0) config.ack_timeout = *ack_timeout;

  absl::StatusOr<std::optional<GidSubnet>> gid_subnet =
      ResolveGidSubnet(set_in_code, environment);
  if (!gid_subnet.ok()) return gid_subnet.status();
  config.gid_subnet = *std::move(gid_subnet);

  return config;
}

}  // namespace rdma_transport
