#include "transport/gid_selection.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "transport/address_handle_probe.h"
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

namespace {

constexpr char kSubnetVariable[] = "RDMA_TRANSPORT_GID_SUBNET";

std::string EntryName(const ibv_gid_entry& entry) {
  return absl::StrCat(entry.gid_index, "=", FormatGid(entry.gid), " (",
                      GidTypeName(static_cast<ibv_gid_type>(entry.gid_type)),
                      ")");
}

// The probe's verdict on one GID: nullopt when it can be used (`note` then
// says when that could not be checked), else why not.
std::optional<std::string> ProbeVerdict(Verbs& verbs, const GidRequest& request,
                                        uint8_t port,
                                        const ibv_gid_entry& entry,
                                        std::string* note) {
  if (request.pd == nullptr) {
    *note = "; address handle not probed";
    return std::nullopt;
  }
  absl::Status probe =
      ProbeAddressHandle(verbs, request.pd, port, entry.gid_index, entry.gid);
  if (probe.ok()) return std::nullopt;
  if (AddressHandlesUnsupported(probe)) {
    *note = absl::StrCat("; address handle not probed: the provider has none (",
                         probe.message(), ")");
    return std::nullopt;
  }
  return absl::StrCat("cannot form an address handle: ", probe.message());
}

}  // namespace

absl::StatusOr<SelectedGid> SelectGid(Verbs& verbs, ibv_context* context,
                                      std::string_view device_name,
                                      uint8_t port,
                                      const ibv_port_attr& port_attr,
                                      const GidRequest& request) {
  const std::string where =
      absl::StrCat(std::string(device_name), " port ", port);
  const std::optional<GidSubnet>& subnet = request.subnet;
  const std::string subnet_text =
      subnet.has_value() ? absl::StrCat(kSubnetVariable, "=", subnet->text)
                         : "";
  if (request.index.has_value()) {
    const uint8_t index = *request.index;
    ibv_gid_entry entry = {};
    absl::Status status = verbs.QueryGid(context, port, index, &entry);
    if (!status.ok()) {
      return WithContext(status, absl::StrCat("MC_GID_INDEX=", index,
                                              " cannot be used on ", where));
    }
    if (subnet.has_value() && !subnet->Contains(entry.gid.raw)) {
      return absl::FailedPreconditionError(
          absl::StrCat("MC_GID_INDEX=", index, " is ", EntryName(entry), " on ",
                       where, ", outside ", subnet_text));
    }
    std::string note;
    if (std::optional<std::string> refused =
            ProbeVerdict(verbs, request, port, entry, &note)) {
      return absl::FailedPreconditionError(
          absl::StrCat("MC_GID_INDEX=", index, " (", EntryName(entry), ") on ",
                       where, " ", *refused));
    }
    SelectedGid selected;
    selected.index = index;
    selected.gid = entry.gid;
    selected.gid_type = static_cast<ibv_gid_type>(entry.gid_type);
    selected.why =
        absl::StrCat("GID ", index, " chosen by MC_GID_INDEX on ", where, note);
    return selected;
  }

  if (port_attr.link_layer == IBV_LINK_LAYER_INFINIBAND) {
    ibv_gid_entry entry = {};
    absl::Status status = verbs.QueryGid(context, port, 0, &entry);
    if (!status.ok()) return status;
    if (subnet.has_value() && !subnet->Contains(entry.gid.raw)) {
      return absl::NotFoundError(absl::StrCat("the port GID of InfiniBand ",
                                              where, ", ", EntryName(entry),
                                              ", is outside ", subnet_text));
    }
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
  // global IPv6 address; the rest is skipped. Lowest rank, then lowest
  // index, among those that form an address handle.
  struct Candidate {
    const ibv_gid_entry* entry;
    int rank;          // 0, 1; 2: skipped
    std::string fate;  // for `why`
  };
  std::vector<Candidate> candidates;
  std::string seen;
  for (const ibv_gid_entry& entry : *entries) {
    absl::StrAppend(&seen, seen.empty() ? "" : ", ", EntryName(entry));
    Candidate candidate{&entry, 2, ""};
    if (entry.gid_type != IBV_GID_TYPE_ROCE_V2) {
      candidate.fate = "skipped, not RoCE v2, not routable across L3";
    } else if (IsZeroGid(entry.gid)) {
      candidate.fate = "skipped, empty";
    } else if (IsLinkLocalGid(entry.gid)) {
      candidate.fate = "skipped, link-local";
    } else if (subnet.has_value() && !subnet->Contains(entry.gid.raw)) {
      candidate.fate = absl::StrCat("skipped, outside ", subnet_text);
    } else {
      candidate.rank = IsIpv4MappedGid(entry.gid) ? 0 : 1;
      candidate.fate =
          candidate.rank == 0 ? "IPv4" : "IPv6 global, ranked below IPv4";
    }
    candidates.push_back(std::move(candidate));
  }
  Candidate* best = nullptr;
  std::string note;
  for (int rank = 0; rank < 2 && best == nullptr; ++rank) {
    for (Candidate& candidate : candidates) {
      if (candidate.rank != rank) continue;
      if (std::optional<std::string> refused =
              ProbeVerdict(verbs, request, port, *candidate.entry, &note)) {
        candidate.fate = absl::StrCat("skipped, ", *refused);
        candidate.rank = 2;
        continue;
      }
      best = &candidate;
      break;
    }
  }
  std::string fates;
  for (const Candidate& candidate : candidates) {
    absl::StrAppend(&fates, "; ", EntryName(*candidate.entry), ": ",
                    candidate.fate);
  }
  if (best == nullptr) {
    return absl::NotFoundError(absl::StrCat(
        "no usable RoCE v2 GID with an IPv4 or global IPv6 address",
        subnet.has_value() ? absl::StrCat(" in ", subnet_text) : "", " on ",
        where, " (GID table: ", seen.empty() ? "empty" : seen, fates,
        "); give the netdev an address",
        subnet.has_value() ? absl::StrCat(", widen ", kSubnetVariable) : "",
        " or set MC_GID_INDEX"));
  }
  const ibv_gid_entry& chosen = *best->entry;
  SelectedGid selected;
  selected.index = chosen.gid_index;
  selected.gid = chosen.gid;
  selected.gid_type = static_cast<ibv_gid_type>(chosen.gid_type);
  selected.why = absl::StrCat(
      "GID ", chosen.gid_index, " chosen: the first RoCE v2 ",
      best->rank == 0 ? "IPv4" : "global IPv6 (no usable RoCE v2 IPv4 entry)",
      " entry", subnet.has_value() ? absl::StrCat(" in ", subnet_text) : "",
      " of ", where,
      request.pd != nullptr && note.empty() ? " that forms an address handle"
                                            : "",
      note, fates);
  return selected;
}

}  // namespace rdma_transport
