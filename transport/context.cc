#include "transport/context.h"

#include <fcntl.h>

#include <algorithm>
#include <cerrno>
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

  // The PD first: the GID choice probes candidates with an address handle.
  absl::StatusOr<ibv_pd*> pd = verbs.AllocPd(context->device_);
  if (!pd.ok()) {
    return WithContext(pd.status(), absl::StrCat("on ", name));
  }
  context->pd_ = *pd;

  absl::StatusOr<SelectedGid> gid =
      SelectGid(verbs, context->device_, name, config.port, context->port_attr_,
                context->MakeGidRequest());
  if (!gid.ok()) return gid.status();
  context->gid_ = *gid;

  const int active_mtu = MtuBytes(context->port_attr_.active_mtu);
  context->mtu_ =
      active_mtu > 0 ? std::min(config.mtu, active_mtu) : config.mtu;

  absl::StatusOr<std::optional<TrafficClassOverride>> tc_override =
      ReadTrafficClassOverride(verbs, context->device_, config.port);
  if (!tc_override.ok()) {
    context->Warn(absl::StrCat(
        name, " port ", config.port,
        ": cannot tell whether the host overrides the traffic class: ",
        tc_override.status().message()));
  } else {
    context->traffic_class_override_ = *std::move(tc_override);
    if (std::optional<std::string> warning = TrafficClassOverrideWarning(
            name, config.port, context->traffic_class_override_,
            config.traffic_class)) {
      context->Warn(*std::move(warning));
    }
  }
  // Async events are read without blocking, from whichever thread waits.
  if (int fd = context->device_->async_fd; fd >= 0) {
    const int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
      return VerbsError("fcntl(async_fd, O_NONBLOCK)", errno, name);
    }
  }
  return context;
}

void Context::Warn(std::string text) {
  std::fprintf(stderr, "rdma_transport: warning: %s\n", text.c_str());
  warnings_.push_back(std::move(text));
}

GidRequest Context::MakeGidRequest() const {
  GidRequest request;
  request.index = config_.gid_index;
  request.subnet = config_.gid_subnet;
  request.pd = pd_;
  return request;
}

SelectedGid Context::gid() const {
  std::lock_guard<std::mutex> lock(gid_mu_);
  return gid_;
}

int Context::async_fd() const {
  return device_ != nullptr ? device_->async_fd : -1;
}

AsyncEventCounts Context::async_events() const {
  std::lock_guard<std::mutex> lock(listeners_mu_);
  return events_;
}

void Context::RegisterListener(AsyncEventListener* listener, const ibv_qp* qp,
                               const ibv_cq* cq) const {
  // Events still queued were raised before this QP and CQ existed: they
  // concern the listeners registered so far, not this one (a PORT_ERR
  // queued before the port came back up must not fail a connection made
  // after it). Dispatch them first; a concurrent drainer finishes first.
  std::lock_guard<std::mutex> drain(async_drain_mu_);
  DrainAsyncEventsLocked();
  std::lock_guard<std::mutex> lock(listeners_mu_);
  listeners_.push_back({listener, qp != nullptr ? qp->qp_num : 0, cq});
}

void Context::UnregisterListener(AsyncEventListener* listener) const {
  std::lock_guard<std::mutex> lock(listeners_mu_);
  listeners_.erase(std::remove_if(listeners_.begin(), listeners_.end(),
                                  [listener](const Registered& r) {
                                    return r.listener == listener;
                                  }),
                   listeners_.end());
}

int Context::PollAsyncEvents() const {
  std::unique_lock<std::mutex> drain(async_drain_mu_, std::try_to_lock);
  if (!drain.owns_lock()) return 0;
  return DrainAsyncEventsLocked();
}

int Context::DrainAsyncEventsLocked() const {
  if (device_ == nullptr) return 0;
  int count = 0;
  while (true) {
    ibv_async_event event = {};
    if (!verbs_.GetAsyncEvent(device_, &event).ok()) break;  // EAGAIN: done
    // Take what identifies the target, then acknowledge at once: a thread
    // destroying that QP or CQ waits for the acknowledgement.
    const ibv_event_type type = event.event_type;
    uint32_t qp_num = 0;
    const ibv_cq* cq = nullptr;
    if (IsQpAsyncEvent(type)) {
      qp_num = event.element.qp != nullptr ? event.element.qp->qp_num : 0;
    } else if (type == IBV_EVENT_CQ_ERR) {
      cq = event.element.cq;
    }
    verbs_.AckAsyncEvent(&event);
    DispatchAsyncEvent(type, qp_num, cq);
    ++count;
  }
  return count;
}

void Context::DispatchAsyncEvent(ibv_event_type type, uint32_t qp_num,
                                 const ibv_cq* cq) const {
  std::vector<AsyncEventListener*> to_fail;
  bool reselect_gid = false;
  {
    std::lock_guard<std::mutex> lock(listeners_mu_);
    switch (type) {
      case IBV_EVENT_QP_FATAL:
      case IBV_EVENT_QP_REQ_ERR:
      case IBV_EVENT_QP_ACCESS_ERR:
        ++events_.qp_fatal;
        for (const Registered& r : listeners_) {
          if (r.qp_num == qp_num) to_fail.push_back(r.listener);
        }
        break;
      case IBV_EVENT_CQ_ERR:
        ++events_.cq_error;
        for (const Registered& r : listeners_) {
          if (r.cq == cq) to_fail.push_back(r.listener);
        }
        break;
      case IBV_EVENT_PORT_ERR:
        ++events_.port_error;
        for (const Registered& r : listeners_) to_fail.push_back(r.listener);
        break;
      case IBV_EVENT_DEVICE_FATAL:
        ++events_.device_fatal;
        for (const Registered& r : listeners_) to_fail.push_back(r.listener);
        break;
      case IBV_EVENT_PORT_ACTIVE:
        ++events_.port_active;
        break;
      case IBV_EVENT_GID_CHANGE:
        ++events_.gid_change;
        reselect_gid = true;
        break;
      default:
        ++events_.other;
        break;
    }
    events_.connections_failed += to_fail.size();
    // Listeners unregister under listeners_mu_ before they go away, and
    // OnAsyncEvent only stores an atomic and wakes: safe to call here.
    for (AsyncEventListener* listener : to_fail) listener->OnAsyncEvent(type);
  }
  if (reselect_gid) {
    absl::StatusOr<SelectedGid> gid =
        SelectGid(verbs_, device_, device_name_, config_.port, port_attr_,
                  MakeGidRequest());
    if (gid.ok()) {
      std::lock_guard<std::mutex> lock(gid_mu_);
      gid_ = *gid;
    } else {
      std::fprintf(stderr,
                   "rdma_transport: %s: GID changed and none is usable now: "
                   "%s (new connections keep the old GID)\n",
                   device_name_.c_str(), gid.status().ToString().c_str());
    }
    std::lock_guard<std::mutex> lock(listeners_mu_);
    ++events_.gid_reselections;
  }
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
  attr.srq = caps.srq;
  if (caps.srq != nullptr) attr.cap.max_recv_wr = attr.cap.max_recv_sge = 0;
  InlineDevice device{device_name_, device_attr_.vendor_id,
                      device_attr_.vendor_part_id, &inline_cache_};
  return CreateQpNegotiatingInline(verbs_, pd_, attr, device,
                                   config_.max_inline);
}

LocalRoute Context::Route(uint32_t psn) const {
  LocalRoute route;
  route.port = config_.port;
  route.sgid_index = gid().index;
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
  endpoint.gid = gid().gid;
  endpoint.lid = port_attr_.lid;
  endpoint.port = config_.port;
  endpoint.mtu = mtu_;
  return endpoint;
}

absl::Status Context::ConnectRcQp(ibv_qp* qp, uint32_t local_psn,
                                  const QpEndpoint& remote) const {
  const LocalRoute route = Route(local_psn);
  QpPathSettings settings;
  settings.max_rd_atomic = route.max_rd_atomic;
  settings.max_dest_rd_atomic = route.max_dest_rd_atomic;
  settings.traffic_class = config_.traffic_class;
  settings.service_level = config_.service_level;
  return ConnectRcQp(qp, local_psn, remote, settings);
}

absl::Status Context::ConnectRcQp(ibv_qp* qp, uint32_t local_psn,
                                  const QpEndpoint& remote,
                                  const QpPathSettings& settings) const {
  LocalRoute route = Route(local_psn);
  route.max_rd_atomic = std::max<uint8_t>(settings.max_rd_atomic, 1);
  route.max_dest_rd_atomic = std::max<uint8_t>(settings.max_dest_rd_atomic, 1);
  TransportConfig config = config_;
  config.traffic_class = settings.traffic_class;
  config.service_level = settings.service_level;
  // A traffic class needs the GRH on InfiniBand too.
  route.use_global_route =
      route.use_global_route || settings.traffic_class.has_value();
  absl::Status status = BringUpRcQp(verbs_, qp, route, remote, config);
  if (status.ok() && traffic_class_override_.has_value()) {
    qps_under_override_.fetch_add(1, std::memory_order_relaxed);
  }
  return status;
}

}  // namespace rdma_transport
