// File: transport/gid_selection.h
//
// Choosing the local GID a QP's traffic is sourced from.
//
// With MC_GID_INDEX set, that entry is used (it must exist on the port).
// Otherwise, on a RoCE port, candidates are ranked as UCX ranks them: the
// lowest-index RoCE v2 GID holding an IPv4-mapped address (::ffff:a.b.c.d),
// else the lowest-index RoCE v2 GID with a global IPv6 address. RoCE v1 and
// IB-type entries, the zero GID and link-local (fe80::/10) entries are
// skipped, since RoCE v2 over IP is what routes across an L3 fabric and what
// DSCP/ToS marking applies to. On an InfiniBand port, index 0 (the port
// GID). SelectedGid::why says which was taken and why each other was not.
//
// Two more checks narrow the automatic choice:
//   - RDMA_TRANSPORT_GID_SUBNET (GidRequest::subnet): entries outside the
//     range are skipped ("outside RDMA_TRANSPORT_GID_SUBNET=10.1.0.0/16").
//   - With a PD (GidRequest::pd), each candidate, best first, must form an
//     address handle to itself (address_handle_probe.h); one that cannot is
//     skipped with the errno, and the next is tried. A provider without
//     address handles (EOPNOTSUPP: erdma) cannot be asked; the candidate is
//     taken and `why` says it was not checked.
// A configured index (MC_GID_INDEX) is probed too, and must lie in the
// subnet when one is given: either failing is an error, not a fallback.
//
//   GidRequest request{.index = config.gid_index, .subnet = config.gid_subnet,
//                      .pd = pd};
//   absl::StatusOr<SelectedGid> gid =
//       SelectGid(verbs, context, "mlx5_0", 1, port_attr, request);
//
// Stateless functions, safe for concurrent use. Errors: kNotFound when no
// entry qualifies (the message lists what the table holds and why each was
// refused); kFailedPrecondition when the configured index is outside the
// subnet or cannot form an address handle; or the verbs error of a query.

#ifndef RDMA_TRANSPORT_TRANSPORT_GID_SELECTION_H_
#define RDMA_TRANSPORT_TRANSPORT_GID_SELECTION_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "transport/gid_subnet.h"
#include "verbs_shim/verbs.h"

namespace rdma_transport {

struct SelectedGid {
  uint32_t index = 0;
  ibv_gid gid = {};
  ibv_gid_type gid_type = IBV_GID_TYPE_IB;
  // "GID 3 chosen: the first RoCE v2 IPv4 entry of mlx5_0 port 1; 0=fe80::1
  // (RoCE v2): skipped, link-local; ...": every candidate and its fate.
  std::string why;
};

// Every valid GID entry of `port`, in index order. Uses ibv_query_gid_table
// with a buffer of the port's table size (the kernel refuses buffers beyond
// 64 KiB with EINVAL, i.e. 2047 entries), and falls back to querying entry
// by entry (ibv_query_gid_ex; empty entries skipped) when the table query is
// refused or unsupported.
absl::StatusOr<std::vector<ibv_gid_entry>> ReadGidTable(
    Verbs& verbs, ibv_context* context, uint8_t port,
    const ibv_port_attr& port_attr);

// What the configuration asks of the choice.
struct GidRequest {
  std::optional<uint8_t> index;     // MC_GID_INDEX; nullopt: automatic
  std::optional<GidSubnet> subnet;  // RDMA_TRANSPORT_GID_SUBNET
  // For the address-handle probe; nullptr: candidates are not probed (and
  // `why` says so).
  ibv_pd* pd = nullptr;
};

absl::StatusOr<SelectedGid> SelectGid(Verbs& verbs, ibv_context* context,
                                      std::string_view device_name,
                                      uint8_t port,
                                      const ibv_port_attr& port_attr,
                                      const GidRequest& request);

bool IsZeroGid(const ibv_gid& gid);
bool IsLinkLocalGid(const ibv_gid& gid);   // fe80::/10
bool IsIpv4MappedGid(const ibv_gid& gid);  // ::ffff:0:0/96
// "::ffff:10.0.0.1", "fe80::1", ... (inet_ntop form).
std::string FormatGid(const ibv_gid& gid);
// "IB", "RoCE v1", "RoCE v2".
const char* GidTypeName(ibv_gid_type type);

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TRANSPORT_GID_SELECTION_H_
