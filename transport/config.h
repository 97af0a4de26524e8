// File: transport/config.h
//
// What every QP and connection of a transport Context is configured with,
// and where each value comes from: set in code, else the environment (the
// variable names a Mooncake deployment already sets), else the default.
//
//   TransportOptions options;
//   options.traffic_class = 136;        // wins over MC_IB_TC
//   absl::StatusOr<TransportConfig> config = LoadTransportConfig(options);
//   if (!config.ok()) return config.status();  // names variable, value, range
//
// | variable      | values                | default | effect
// | MC_IB_TC      | -1, 0..255            | -1      | RoCE traffic class (IP ToS/DSCP) in the GRH of every QP; -1: system default
// | MC_IB_SL      | -1, 0..15             | -1      | service level (ah_attr.sl); -1: 0
// | MC_GID_INDEX  | -1, 0..255            | -1      | local GID index; -1: first RoCE v2 IPv4-mapped GID
// | MC_IB_PORT    | 1..255                | 1       | device port
// | MC_MTU        | 512, 1024, 2048, 4096 | 4096    | upper bound of the path MTU
// | MC_MAX_INLINE | -1, 0..1024           | -1      | first inline size asked for; -1: by vendor, 0: no inline
// | MC_IB_TIMEOUT | -1, 1..31             | -1      | RC ACK timeout, 4.096 us * 2^value; -1: 14 (~67 ms)
// | RDMA_TRANSPORT_GID_SUBNET | a.b.c.d/n, x::/n | unset | only GIDs in this range are chosen (gid_subnet.h)
//
// An invalid value (not an integer, trailing characters, empty, out of range)
// fails loading with kInvalidArgument naming the variable, the value and the
// valid range: a QoS typo must never silently put traffic in the wrong class.
// docs/configuration.md is the user-facing reference.
//
// Thread-safety: LoadTransportConfig reads the environment with getenv();
// do not call it while another thread calls setenv(). TransportConfig is a
// plain value.

#ifndef RDMA_TRANSPORT_TRANSPORT_CONFIG_H_
#define RDMA_TRANSPORT_TRANSPORT_CONFIG_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "transport/gid_subnet.h"

namespace rdma_transport {

// Values set in code. An unset field is taken from the environment, then
// from the default. Each field accepts what its variable accepts (-1 included).
struct TransportOptions {
  std::optional<int> traffic_class;  // MC_IB_TC
  std::optional<int> service_level;  // MC_IB_SL
  std::optional<int> gid_index;      // MC_GID_INDEX
  std::optional<int> port;           // MC_IB_PORT
  std::optional<int> mtu;            // MC_MTU, in bytes
  std::optional<int> max_inline;     // MC_MAX_INLINE
  std::optional<int> ack_timeout;    // MC_IB_TIMEOUT
  // RDMA_TRANSPORT_GID_SUBNET, same syntax ("10.1.0.0/16").
  std::optional<std::string> gid_subnet;
};

// The resolved configuration.
struct TransportConfig {
  // nullopt: leave the system default (traffic class 0 in the GRH).
  std::optional<uint8_t> traffic_class;
  // nullopt: service level 0.
  std::optional<uint8_t> service_level;
  // nullopt: choose automatically (see gid_selection.h).
  std::optional<uint8_t> gid_index;
  // nullopt: every address qualifies; else only GIDs in this range are
  // chosen, and a configured gid_index must lie in it.
  std::optional<GidSubnet> gid_subnet;
  uint8_t port = 1;
  // Upper bound of the path MTU, in bytes: 512, 1024, 2048 or 4096. The path
  // MTU is the smallest of this, the port's active MTU and the peer's.
  int mtu = 4096;
  // nullopt: the vendor's known limit (inline_size.h); 0: no inline sends;
  // else the first max_inline_data to ask for.
  std::optional<uint32_t> max_inline;

  // RC transport parameters (IB spec encodings), as in Mooncake and
  // perftest: 4.096 us * 2^14 ~ 67 ms ACK timeout (MC_IB_TIMEOUT), 7
  // retries, RNR retry 7 (infinite), minimum RNR NAK timer 12 (0.64 ms).
  uint8_t ack_timeout = 14;
  uint8_t retry_count = 7;
  uint8_t rnr_retry = 7;
  uint8_t min_rnr_timer = 12;
  uint8_t hop_limit = 64;
};

// Looks up an environment variable; nullopt when unset.
using EnvironmentLookup =
    std::function<std::optional<std::string>(std::string_view name)>;

// The process environment (getenv).
EnvironmentLookup ProcessEnvironment();

// Resolves the configuration. Fails with kInvalidArgument on the first
// invalid value, set in code or in the environment.
absl::StatusOr<TransportConfig> LoadTransportConfig(
    const TransportOptions& set_in_code = {},
    const EnvironmentLookup& environment = ProcessEnvironment());

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TRANSPORT_CONFIG_H_
