#include "transport/context.h"

#include <algorithm>
#include <cstdio>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "verbs_shim/verbs_error.h"
#include "verbs_shim/verbs_names.h"

namespace rdma_transport {

absl::StatusOr<std::unique_ptr<Context>> Context::Open(
    Verbs& verbs, std::string_view device_name, const TransportConfig& config) {
  std::unique_ptr<Context> context(
      new Context(verbs, std::string(device_name), config));
  const std::string& name = context->device_name_;

  absl::StatusOr<ibv_context*> device = verbs.OpenDevice(name);
  if (!device.ok()) return device.status();
  context->device_ = *device;

  if (absl::Status status =
          verbs.QueryDevice(context->device_, &context->device_attr_);
      !status.ok()) {
    return WithContext(status, absl::StrCat("querying ", name));
  }
  if (config.port < 1 || config.port > context->device_attr_.phys_port_cnt) {
    return absl::InvalidArgumentError(
        absl::StrCat("MC_IB_PORT=", config.port, " but ", name, " has ",
                     context->device_attr_.phys_port_cnt, " port(s)"));
  }
  if (absl::Status status =
          verbs.QueryPort(context->device_, config.port, &context->port_attr_);
      !status.ok()) {
    return WithContext(status,
                       absl::StrCat("querying ", name, " port ", config.port));
  }

  absl::StatusOr<SelectedGid> gid =
      SelectGid(verbs, context->device_, name, config.port, context->port_attr_,
                config.gid_index);
  if (!gid.ok()) return gid.status();
  context->gid_ = *gid;

  const int active_mtu = MtuBytes(context->port_attr_.active_mtu);
  context->mtu_ =
      active_mtu > 0 ? std::min(config.mtu, active_mtu) : config.mtu;

  absl::StatusOr<ibv_pd*> pd = verbs.AllocPd(context->device_);
  if (!pd.ok()) {
    return WithContext(pd.status(), absl::StrCat("on ", name));
  }
  context->pd_ = *pd;
  return context;
}

Context::~Context() {
  // Destruction cannot report failure; a failure here means the owner leaked
  // objects created from this context (the verbs refuse with EBUSY).
  if (pd_ != nullptr) {
    if (absl::Status status = verbs_.DeallocPd(pd_); !status.ok()) {
      std::fprintf(stderr, "rdma_transport: closing %s: %s\n",
                   device_name_.c_str(), status.ToString().c_str());
    }
  }
  if (device_ != nullptr) {
    if (absl::Status status = verbs_.CloseDevice(device_); !status.ok()) {
      std::fprintf(stderr, "rdma_transport: closing %s: %s\n",
                   device_name_.c_str(), status.ToString().c_str());
    }
  }
}

absl::StatusOr<MemoryRegion> Context::RegisterMemory(
    std::span<std::byte> memory, int access) const {
  if (memory.empty()) {
    return absl::InvalidArgumentError("cannot register an empty memory range");
  }
  absl::StatusOr<ibv_mr*> mr =
      verbs_.RegMr(pd_, memory.data(), memory.size(), ToIbvAccessFlags(access));
  if (!mr.ok()) {
    return WithContext(mr.status(), absl::StrCat("registering ", memory.size(),
                                                 " bytes on ", device_name_));
  }
  return MemoryRegion(&verbs_, *mr, access);
}

absl::StatusOr<NegotiatedQp> Context::CreateRcQp(const RcQpCaps& caps,
                                                 ibv_cq* send_cq,
                                                 ibv_cq* recv_cq) const {
  ibv_qp_init_attr attr = {};
  attr.send_cq = send_cq;
  attr.recv_cq = recv_cq;
  attr.qp_type = IBV_QPT_RC;
  attr.sq_sig_all = caps.signal_all ? 1 : 0;
  attr.cap.max_send_wr = caps.max_send_wr;
  attr.cap.max_recv_wr = caps.max_recv_wr;
  attr.cap.max_send_sge = caps.max_send_sge;
  attr.cap.max_recv_sge = caps.max_recv_sge;
  InlineDevice device{device_name_, device_attr_.vendor_id,
                      device_attr_.vendor_part_id, &inline_cache_};
  return CreateQpNegotiatingInline(verbs_, pd_, attr, device,
                                   config_.max_inline);
}

LocalRoute Context::Route(uint32_t psn) const {
  LocalRoute route;
  route.port = config_.port;
  route.sgid_index = gid_.index;
  // RoCE always needs the GRH; InfiniBand only for a traffic class or an
  // explicitly chosen GID.
  route.use_global_route = port_attr_.link_layer != IBV_LINK_LAYER_INFINIBAND ||
                           config_.traffic_class.has_value() ||
                           config_.gid_index.has_value();
  route.mtu = mtu_;
  route.max_rd_atomic =
      static_cast<uint8_t>(std::clamp(device_attr_.max_qp_init_rd_atom, 1, 16));
  route.max_dest_rd_atomic =
      static_cast<uint8_t>(std::clamp(device_attr_.max_qp_rd_atom, 1, 16));
  route.psn = psn & 0xffffff;
  return route;
}

QpEndpoint Context::Endpoint(const ibv_qp* qp, uint32_t psn) const {
  QpEndpoint endpoint;
  endpoint.qp_num = qp->qp_num;
  endpoint.psn = psn & 0xffffff;
  endpoint.gid = gid_.gid;
  endpoint.lid = port_attr_.lid;
  endpoint.port = config_.port;
  endpoint.mtu = mtu_;
  return endpoint;
}

absl::Status Context::ConnectRcQp(ibv_qp* qp, uint32_t local_psn,
                                  const QpEndpoint& remote) const {
  return BringUpRcQp(verbs_, qp, Route(local_psn), remote, config_);
}

}  // namespace rdma_transport
