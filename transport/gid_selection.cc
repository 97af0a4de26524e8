#include "transport/gid_selection.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "verbs_shim/verbs_error.h"

namespace rdma_transport {

bool IsZeroGid(const ibv_gid& gid) {
  static constexpr uint8_t kZero[16] = {};
  return std::memcmp(gid.raw, kZero, sizeof(kZero)) == 0;
}

bool IsLinkLocalGid(const ibv_gid& gid) {
  return gid.raw[0] == 0xfe && (gid.raw[1] & 0xc0) == 0x80;
}

bool IsIpv4MappedGid(const ibv_gid& gid) {
  static constexpr uint8_t kPrefix[12] = {0, 0, 0, 0, 0,    0,
                                          0, 0, 0, 0, 0xff, 0xff};
  return std::memcmp(gid.raw, kPrefix, sizeof(kPrefix)) == 0;
}

std::string FormatGid(const ibv_gid& gid) {
  char text[INET6_ADDRSTRLEN] = {};
  if (inet_ntop(AF_INET6, gid.raw, text, sizeof(text)) == nullptr) {
    return "<unprintable gid>";
  }
  return text;
}

const char* GidTypeName(ibv_gid_type type) {
  switch (type) {
    case IBV_GID_TYPE_IB:
      return "IB";
    case IBV_GID_TYPE_ROCE_V1:
      return "RoCE v1";
    case IBV_GID_TYPE_ROCE_V2:
      return "RoCE v2";
  }
  return "unknown";
}

absl::StatusOr<std::vector<ibv_gid_entry>> ReadGidTable(
    Verbs& verbs, ibv_context* context, uint8_t port,
    const ibv_port_attr& port_attr) {
  // The ioctl's attribute length is 16 bits: at most 2047 32-byte entries.
  constexpr size_t kMaxTableQuery = 65535 / sizeof(ibv_gid_entry);
  const size_t table_length = std::max<int>(port_attr.gid_tbl_len, 1);
  std::vector<ibv_gid_entry> entries;
  if (table_length <= kMaxTableQuery) {
    entries.resize(table_length);
    absl::StatusOr<size_t> count = verbs.QueryGidTable(context, entries);
    if (count.ok() && *count <= entries.size()) {
      entries.resize(*count);
      // The table holds every port's entries; keep this port's.
      std::erase_if(entries, [port](const ibv_gid_entry& entry) {
        return entry.port_num != port;
      });
      std::sort(entries.begin(), entries.end(),
                [](const ibv_gid_entry& a, const ibv_gid_entry& b) {
                  return a.gid_index < b.gid_index;
                });
      return entries;
    }
    // EINVAL: more valid entries than one port's table (several ports);
    // EOPNOTSUPP: an old kernel. Ask entry by entry instead.
  }
  entries.clear();
  for (uint32_t index = 0; index < table_length; ++index) {
    ibv_gid_entry entry = {};
    absl::Status status = verbs.QueryGid(context, port, index, &entry);
    if (status.ok()) {
      entries.push_back(entry);
    } else if (VerbsErrno(status) != ENODATA) {
      return WithContext(status, absl::StrCat("reading GID ", index));
    }
  }
  return entries;
}

absl::StatusOr<SelectedGid> SelectGid(Verbs& verbs, ibv_context* context,
                                      std::string_view device_name,
                                      uint8_t port,
                                      const ibv_port_attr& port_attr,
                                      std::optional<uint8_t> configured_index) {
  const std::string where =
      absl::StrCat(std::string(device_name), " port ", port);
  if (configured_index.has_value()) {
    ibv_gid_entry entry = {};
    absl::Status status =
        verbs.QueryGid(context, port, *configured_index, &entry);
    if (!status.ok()) {
      return WithContext(status,
                         absl::StrCat("MC_GID_INDEX=", *configured_index,
                                      " cannot be used on ", where));
    }
    SelectedGid selected;
    selected.index = *configured_index;
    selected.gid = entry.gid;
    selected.gid_type = static_cast<ibv_gid_type>(entry.gid_type);
    selected.why = absl::StrCat("GID ", *configured_index,
                                " chosen by MC_GID_INDEX on ", where);
    return selected;
  }

  if (port_attr.link_layer == IBV_LINK_LAYER_INFINIBAND) {
    ibv_gid_entry entry = {};
    absl::Status status = verbs.QueryGid(context, port, 0, &entry);
    if (!status.ok()) return status;
    SelectedGid selected;
    selected.gid = entry.gid;
    selected.gid_type = static_cast<ibv_gid_type>(entry.gid_type);
    selected.why =
        absl::StrCat("GID 0 chosen: the port GID of InfiniBand ", where);
    return selected;
  }

  absl::StatusOr<std::vector<ibv_gid_entry>> entries =
      ReadGidTable(verbs, context, port, port_attr);
  if (!entries.ok()) return entries.status();

  // Rank 0: RoCE v2 with an IPv4-mapped address; rank 1: RoCE v2 with a
  // global IPv6 address; the rest is skipped. Lowest rank, then lowest index.
  const ibv_gid_entry* best = nullptr;
  int best_rank = 2;
  std::string seen;
  std::string candidates;
  for (const ibv_gid_entry& entry : *entries) {
    const std::string name = absl::StrCat(
        entry.gid_index, "=", FormatGid(entry.gid), " (",
        GidTypeName(static_cast<ibv_gid_type>(entry.gid_type)), ")");
    absl::StrAppend(&seen, seen.empty() ? "" : ", ", name);
    const char* skipped = nullptr;
    int rank = 2;
    if (entry.gid_type != IBV_GID_TYPE_ROCE_V2) {
      skipped = "not RoCE v2, not routable across L3";
    } else if (IsZeroGid(entry.gid)) {
      skipped = "empty";
    } else if (IsLinkLocalGid(entry.gid)) {
      skipped = "link-local";
    } else {
      rank = IsIpv4MappedGid(entry.gid) ? 0 : 1;
    }
    absl::StrAppend(&candidates, "; ", name, ": ",
                    skipped != nullptr ? absl::StrCat("skipped, ", skipped)
                    : rank == 0        ? "IPv4"
                                       : "IPv6 global, ranked below IPv4");
    if (skipped == nullptr && rank < best_rank) {
      best = &entry;
      best_rank = rank;
    }
  }
  if (best == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("no RoCE v2 GID with an IPv4 or global IPv6 address on ",
                     where, " (GID table: ", seen.empty() ? "empty" : seen,
                     "); give the netdev an address or set MC_GID_INDEX"));
  }
  SelectedGid selected;
  selected.index = best->gid_index;
  selected.gid = best->gid;
  selected.gid_type = static_cast<ibv_gid_type>(best->gid_type);
  selected.why = absl::StrCat(
      "GID ", best->gid_index, " chosen: the first RoCE v2 ",
      best_rank == 0 ? "IPv4" : "global IPv6 (no RoCE v2 IPv4 entry)",
      " entry of ", where, candidates);
  return selected;
}

}  // namespace rdma_transport
