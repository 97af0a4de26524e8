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
// Stateless functions, safe for concurrent use. Errors: kNotFound when no
// entry qualifies (the message lists what the table holds), or the verbs
// error of the query.

#ifndef RDMA_TRANSPORT_TRANSPORT_GID_SELECTION_H_
#define RDMA_TRANSPORT_TRANSPORT_GID_SELECTION_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
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

absl::StatusOr<SelectedGid> SelectGid(Verbs& verbs, ibv_context* context,
                                      std::string_view device_name,
                                      uint8_t port,
                                      const ibv_port_attr& port_attr,
                                      std::optional<uint8_t> configured_index);

bool IsZeroGid(const ibv_gid& gid);
bool IsLinkLocalGid(const ibv_gid& gid);   // fe80::/10
bool IsIpv4MappedGid(const ibv_gid& gid);  // ::ffff:0:0/96
// "::ffff:10.0.0.1", "fe80::1", ... (inet_ntop form).
std::string FormatGid(const ibv_gid& gid);
// "IB", "RoCE v1", "RoCE v2".
const char* GidTypeName(ibv_gid_type type);

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TRANSPORT_GID_SELECTION_H_
