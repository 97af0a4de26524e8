// File: transport/gid_subnet.h
//
// `GidSubnet`: an address range a local GID must lie in to be chosen, the
// value of RDMA_TRANSPORT_GID_SUBNET. On a host with several RoCE v2 IPv4
// GIDs (a storage and a compute network on one NIC, or a management address
// on the same netdev), the lowest-index one is not always the one the peers
// reach; the range says which.
//
//   absl::StatusOr<GidSubnet> subnet = ParseGidSubnet("10.1.0.0/16");
//   if (!subnet.ok()) return subnet.status();   // says what was wrong
//   const bool inside = subnet->Contains(gid.raw);  // ::ffff:10.1.x.y: true
//
// Syntax, parsed strictly (no spaces, no defaults): an IPv4 range
// "a.b.c.d/n" (n 0..32), matching the IPv4-mapped GIDs ::ffff:a.b.c.d of
// RoCE v2, or an IPv6 range "x:y::/n" (n 0..128), matching the 16 GID bytes
// as an IPv6 address. The address must have no bits set beyond the prefix
// ("10.1.2.0/16" is refused, with the range it probably means), so a typo
// does not silently widen or move the range.
//
// Plain value; thread-compatible. ParseGidSubnet fails with
// kInvalidArgument and a message naming what was wrong (without the
// variable's name, which the caller adds).

#ifndef RDMA_TRANSPORT_TRANSPORT_GID_SUBNET_H_
#define RDMA_TRANSPORT_TRANSPORT_GID_SUBNET_H_

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace rdma_transport {

struct GidSubnet {
  // The range as 16 GID bytes: IPv4 ranges are stored IPv4-mapped
  // (::ffff:a.b.c.d) with 96 + n prefix bits.
  std::array<uint8_t, 16> prefix = {};
  int prefix_bits = 0;  // 0..128, of the 16 bytes
  bool ipv4 = false;
  std::string text;  // as given: "10.1.0.0/16"

  // Whether the 16-byte GID `raw` lies in the range.
  bool Contains(const uint8_t (&raw)[16]) const;
};

absl::StatusOr<GidSubnet> ParseGidSubnet(std::string_view text);

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TRANSPORT_GID_SUBNET_H_
