#include "tools/device_report.h"

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "transport/context.h"
#include "transport/gid_selection.h"
#include "verbs_shim/ib_timer_encodings.h"
#include "verbs_shim/verbs_error.h"
#include "verbs_shim/verbs_names.h"

namespace rdma_transport {
namespace {

// 4.096 us * 2^encoding, in the unit that reads best: "67 ms", "1.07 s".
std::string AckTimeoutText(int encoding) {
  const double us =
      std::chrono::duration<double, std::micro>(AckTimeoutDuration(encoding))
          .count();
  if (us < 1e3) return absl::StrFormat("%.0f us", us);
  if (us < 1e6) return absl::StrFormat("%.0f ms", us / 1e3);
  return absl::StrFormat("%.3g s", us / 1e6);
}

const char* PortStateName(ibv_port_state state) {
  switch (state) {
    case IBV_PORT_DOWN:
      return "DOWN";
    case IBV_PORT_INIT:
      return "INIT";
    case IBV_PORT_ARMED:
      return "ARMED";
    case IBV_PORT_ACTIVE:
      return "ACTIVE";
    case IBV_PORT_ACTIVE_DEFER:
      return "ACTIVE_DEFER";
    default:
      return "NOP";
  }
}

const char* LinkLayerName(uint8_t link_layer) {
  switch (link_layer) {
    case IBV_LINK_LAYER_INFINIBAND:
      return "InfiniBand";
    case IBV_LINK_LAYER_ETHERNET:
      return "Ethernet";
    default:
      return "unspecified";
  }
}

// Creates one RC QP the way the transport does and reports the inline size
// negotiated, then destroys it.
absl::Status WriteInlineLine(Verbs& verbs, const Context& context,
                             std::ostream& out) {
  absl::StatusOr<ibv_cq*> cq =
      verbs.CreateCq(context.device(), 16, nullptr, nullptr, 0);
  if (!cq.ok()) return cq.status();
  absl::StatusOr<NegotiatedQp> qp = context.CreateRcQp(RcQpCaps{}, *cq, *cq);
  if (qp.ok()) {
    out << absl::StrFormat(
        "  inline: asked %u, granted %u, usable %u (sizes tried: %s)\n",
        qp->requested_inline, qp->granted_inline, qp->usable_inline,
        absl::StrJoin(qp->attempts, ", "));
    absl::Status destroyed = verbs.DestroyQp(qp->qp);
    if (!destroyed.ok()) {
      (void)verbs.DestroyCq(*cq);
      return destroyed;
    }
  }
  absl::Status cq_destroyed = verbs.DestroyCq(*cq);
  if (!qp.ok()) return qp.status();
  return cq_destroyed;
}

// "none (... absent)", "none (... is empty)", or the override and what it
// replaces.
std::string HostTrafficClassLine(Verbs& verbs, const Context& context,
                                 const TransportConfig& config) {
  const std::optional<TrafficClassOverride>& found =
      context.traffic_class_override();
  if (found.has_value()) {
    return absl::StrFormat(
        "%d, from %s (\"%s\"): the wire carries %d, %s", found->traffic_class,
        found->path, found->line, found->traffic_class,
        config.traffic_class.has_value()
            ? absl::StrFormat("not MC_IB_TC=%d", *config.traffic_class)
            : std::string("whatever MC_IB_TC says"));
  }
  absl::StatusOr<Verbs::TrafficClassFile> file =
      verbs.ReadTrafficClassFile(context.device(), context.config().port);
  if (!file.ok()) {
    return absl::StrCat("unknown (", file.status().message(), ")");
  }
  return !file->contents.has_value()
             ? absl::StrFormat("none (no %s)", file->path)
             : absl::StrFormat("none (%s sets no global tclass)", file->path);
}

absl::Status WriteOneDevice(Verbs& verbs, const std::string& name,
                            const TransportConfig& config, std::ostream& out) {
  absl::StatusOr<std::unique_ptr<Context>> context =
      Context::Open(verbs, name, config);
  if (!context.ok()) {
    out << absl::StrFormat("%s: cannot be used: %s\n", name,
                           std::string(context.status().message()));
    return context.status();
  }
  const ibv_device_attr& device = (*context)->device_attr();
  out << absl::StrFormat(
      "%s: vendor 0x%04x part %u (0x%x) fw %s, %u port(s), max_qp_wr %d, "
      "max_sge %d\n",
      name, device.vendor_id, device.vendor_part_id, device.vendor_part_id,
      device.fw_ver, device.phys_port_cnt, device.max_qp_wr, device.max_sge);

  for (uint8_t port = 1; port <= device.phys_port_cnt; ++port) {
    ibv_port_attr attr = {};
    absl::Status status = verbs.QueryPort((*context)->device(), port, &attr);
    if (!status.ok()) return status;
    out << absl::StrFormat(
        "  port %u: %s, link layer %s, active MTU %d, lid %u\n", port,
        PortStateName(attr.state), LinkLayerName(attr.link_layer),
        MtuBytes(attr.active_mtu), attr.lid);
    absl::StatusOr<std::vector<ibv_gid_entry>> entries =
        ReadGidTable(verbs, (*context)->device(), port, attr);
    if (!entries.ok()) return entries.status();
    for (const ibv_gid_entry& entry : *entries) {
      const bool chosen = port == (*context)->config().port &&
                          entry.gid_index == (*context)->gid().index;
      out << absl::StrFormat(
          "    gid %3u  %-40s %s%s\n", entry.gid_index, FormatGid(entry.gid),
          GidTypeName(static_cast<ibv_gid_type>(entry.gid_type)),
          chosen ? (config.gid_index.has_value() ? "  <- MC_GID_INDEX"
                                                 : "  <- chosen (auto)")
                 : "");
    }
    if (port == (*context)->config().port) {
      out << "    why: " << (*context)->gid().why << "\n";
    }
  }
  out << "  host traffic class: "
      << HostTrafficClassLine(verbs, **context, config) << "\n";
  for (const std::string& warning : (*context)->warnings()) {
    out << "  warning: " << warning << "\n";
  }
  out << absl::StrFormat(
      "  traffic class: %s, service level %d, path MTU limit %d, ACK timeout "
      "%d (%s, MC_IB_TIMEOUT)\n",
      config.traffic_class.has_value()
          ? absl::StrFormat("%d (MC_IB_TC)", *config.traffic_class)
          : std::string("system default (MC_IB_TC unset)"),
      config.service_level.value_or(0), (*context)->mtu(), config.ack_timeout,
      AckTimeoutText(config.ack_timeout));
  return WriteInlineLine(verbs, **context, out);
}

}  // namespace

absl::Status WriteDeviceReport(Verbs& verbs, const TransportConfig& config,
                               std::ostream& out) {
  absl::StatusOr<std::vector<std::string>> names = verbs.ListDevices();
  if (!names.ok()) return names.status();
  if (names->empty()) {
    return absl::NotFoundError(
        "no RDMA devices found (no RDMA driver loaded, or no RDMA support in "
        "this kernel; for Soft-RoCE: rdma link add rxe0 type rxe netdev "
        "<ifname>)");
  }
  absl::Status first_error;
  for (const std::string& name : *names) {
    absl::Status status = WriteOneDevice(verbs, name, config, out);
    if (!status.ok() && first_error.ok()) first_error = status;
  }
  return first_error;
}

}  // namespace rdma_transport
