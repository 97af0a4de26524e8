// libFuzzer target for the MC_* configuration parser (transport/config.h).
//
// The input is lines of NAME=VALUE; lines naming one of the eight variables
// set it in a fake environment (the last one wins), everything else is
// ignored. VALUE is arbitrary bytes, NUL included. Then:
//   - on success every field is in its documented range, a variable that
//     was not set has its default, and a variable that was set holds exactly
//     the integer its text spells (-1 meaning "unset" where allowed), and an
//     accepted RDMA_TRANSPORT_GID_SUBNET is a well-formed range (no bits
//     beyond its prefix, IPv4 ranges IPv4-mapped) holding its own prefix;
//   - on failure the code is kInvalidArgument, some variable was set (the
//     defaults are valid), and the message names a variable that was set.
//
// Built and run with clang by tests/fuzz/run_fuzzers.sh; the seed corpus
// (tests/fuzz/corpus/config/) also runs under plain `bazel test`.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "transport/config.h"

namespace rdma_transport {
namespace {

constexpr const char* kVariables[] = {
    "MC_IB_TC", "MC_IB_SL",      "MC_GID_INDEX",  "MC_IB_PORT",
    "MC_MTU",   "MC_MAX_INLINE", "MC_IB_TIMEOUT", "RDMA_TRANSPORT_GID_SUBNET"};

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "config_fuzzer: %s\n", what.c_str());
  std::abort();
}

std::map<std::string, std::string> ParseInput(std::string_view input) {
  std::map<std::string, std::string> environment;
  while (!input.empty()) {
    const size_t end = input.find('\n');
    std::string_view line = input.substr(0, end);
    input.remove_prefix(end == std::string_view::npos ? input.size() : end + 1);
    const size_t equals = line.find('=');
    if (equals == std::string_view::npos) continue;
    const std::string_view name = line.substr(0, equals);
    for (const char* variable : kVariables) {
      if (name == variable) {
        environment[variable] = std::string(line.substr(equals + 1));
      }
    }
  }
  return environment;
}

// The integer `text` spells: optional '-', then decimal digits, nothing
// else. Independent of config.cc's parser on purpose.
std::optional<int64_t> SpelledInteger(const std::string& text) {
  size_t i = text.size() > 0 && text[0] == '-' ? 1 : 0;
  if (i == text.size() || text.size() - i > 18) return std::nullopt;
  int64_t value = 0;
  for (; i < text.size(); ++i) {
    if (text[i] < '0' || text[i] > '9') return std::nullopt;
    value = value * 10 + (text[i] - '0');
  }
  return text[0] == '-' ? -value : value;
}

// What a variable resolved to, -1 standing for "unset" (nullopt).
template <typename T>
int64_t Resolved(const std::optional<T>& value) {
  return value.has_value() ? static_cast<int64_t>(*value) : -1;
}

void CheckVariable(const std::map<std::string, std::string>& environment,
                   const char* variable, int64_t resolved,
                   int64_t default_value, int64_t min, int64_t max) {
  if (resolved < min || resolved > max) {
    Fail(std::string(variable) + " resolved to " + std::to_string(resolved) +
         ", outside " + std::to_string(min) + ".." + std::to_string(max));
  }
  auto it = environment.find(variable);
  if (it == environment.end()) {
    if (resolved != default_value) {
      Fail(std::string(variable) + " is unset but resolved to " +
           std::to_string(resolved));
    }
    return;
  }
  std::optional<int64_t> spelled = SpelledInteger(it->second);
  if (!spelled.has_value() || *spelled != resolved) {
    Fail(std::string(variable) + "=\"" + it->second + "\" was accepted as " +
         std::to_string(resolved));
  }
}

void CheckGidSubnet(const std::map<std::string, std::string>& environment,
                    const std::optional<GidSubnet>& subnet) {
  auto it = environment.find("RDMA_TRANSPORT_GID_SUBNET");
  if (it == environment.end()) {
    if (subnet.has_value())
      Fail("RDMA_TRANSPORT_GID_SUBNET unset but resolved");
    return;
  }
  if (!subnet.has_value()) Fail("RDMA_TRANSPORT_GID_SUBNET set but dropped");
  if (subnet->text != it->second) {
    Fail("RDMA_TRANSPORT_GID_SUBNET=\"" + it->second + "\" kept as \"" +
         subnet->text + "\"");
  }
  if (subnet->text.find('/') == std::string::npos) Fail("no '/' accepted");
  const int min_bits = subnet->ipv4 ? 96 : 0;
  if (subnet->prefix_bits < min_bits || subnet->prefix_bits > 128) {
    Fail("prefix_bits " + std::to_string(subnet->prefix_bits));
  }
  for (int bit = subnet->prefix_bits; bit < 128; ++bit) {
    if ((subnet->prefix[bit / 8] >> (7 - bit % 8)) & 1) {
      Fail("bit " + std::to_string(bit) + " set beyond the prefix of \"" +
           subnet->text + "\"");
    }
  }
  if (subnet->ipv4) {
    for (int i = 0; i < 10; ++i) {
      if (subnet->prefix[i] != 0) Fail("IPv4 range not IPv4-mapped");
    }
    if (subnet->prefix[10] != 0xff || subnet->prefix[11] != 0xff) {
      Fail("IPv4 range not IPv4-mapped");
    }
  }
  uint8_t raw[16];
  for (int i = 0; i < 16; ++i) raw[i] = subnet->prefix[i];
  if (!subnet->Contains(raw)) Fail("the range does not hold its own prefix");
}

void CheckOneInput(std::string_view input) {
  const std::map<std::string, std::string> environment = ParseInput(input);
  const EnvironmentLookup lookup =
      [&environment](std::string_view name) -> std::optional<std::string> {
    auto it = environment.find(std::string(name));
    if (it == environment.end()) return std::nullopt;
    return it->second;
  };
  absl::StatusOr<TransportConfig> config = LoadTransportConfig({}, lookup);

  if (!config.ok()) {
    if (config.status().code() != absl::StatusCode::kInvalidArgument) {
      Fail("failed with a code other than INVALID_ARGUMENT: " +
           config.status().ToString());
    }
    const std::string message(config.status().message());
    for (const auto& [variable, value] : environment) {
      if (message.find(variable) != std::string::npos) return;
    }
    Fail("the error names no variable that was set: " + message);
  }

  CheckVariable(environment, "MC_IB_TC", Resolved(config->traffic_class), -1,
                -1, 255);
  CheckVariable(environment, "MC_IB_SL", Resolved(config->service_level), -1,
                -1, 15);
  CheckVariable(environment, "MC_GID_INDEX", Resolved(config->gid_index), -1,
                -1, 255);
  CheckVariable(environment, "MC_IB_PORT", config->port, 1, 1, 255);
  CheckVariable(environment, "MC_MTU", config->mtu, 4096, 512, 4096);
  if (config->mtu != 512 && config->mtu != 1024 && config->mtu != 2048 &&
      config->mtu != 4096) {
    Fail("mtu resolved to " + std::to_string(config->mtu));
  }
  CheckVariable(environment, "MC_MAX_INLINE", Resolved(config->max_inline), -1,
                -1, 1024);
  // MC_IB_TIMEOUT's -1 and unset both resolve to 14.
  const auto timeout = environment.find("MC_IB_TIMEOUT");
  const bool timeout_minus_one =
      timeout != environment.end() && SpelledInteger(timeout->second) == -1;
  CheckVariable(
      environment, "MC_IB_TIMEOUT",
      timeout_minus_one && config->ack_timeout == 14 ? -1 : config->ack_timeout,
      14, timeout_minus_one ? -1 : 1, 31);
  CheckGidSubnet(environment, config->gid_subnet);
}

}  // namespace
}  // namespace rdma_transport

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  rdma_transport::CheckOneInput(
      std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
