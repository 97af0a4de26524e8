// File: transport/context.h
//
// `Context`: one opened RDMA device, as the transport uses it. It holds the
// device handle, a protection domain, the device's and port's attributes, the
// local GID chosen for RoCE v2, the resolved TransportConfig, and the
// device's inline-size cache, and it creates RC QPs with inline negotiation
// and brings them up.
//
//   IbverbsBackend verbs;                       // or sim::SimVerbs, MockVerbs
//   absl::StatusOr<TransportConfig> config = LoadTransportConfig();
//   absl::StatusOr<std::unique_ptr<Context>> context =
//       Context::Open(verbs, "mlx5_0", *config);
//
// Ownership: the Context owns the device context and the PD and releases
// them when destroyed; everything created from it (QPs, CQs, MRs) must be
// destroyed first. It does not own `verbs`, which must outlive it.
//
// Thread-safety: safe for concurrent use after Open(); the accessors return
// immutable data, CreateRcQp may run on several threads at once.
//
// Errors: Open() fails with the verbs error of the failing call, kNotFound
// for an unknown device or when no usable GID exists, kInvalidArgument for a
// port the device does not have.

#ifndef RDMA_TRANSPORT_TRANSPORT_CONTEXT_H_
#define RDMA_TRANSPORT_TRANSPORT_CONTEXT_H_

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "transport/config.h"
#include "transport/gid_selection.h"
#include "transport/inline_size.h"
#include "transport/memory_region.h"
#include "transport/qp_bringup.h"
#include "verbs_shim/verbs.h"

namespace rdma_transport {

// Queue sizes of an RC QP.
struct RcQpCaps {
  uint32_t max_send_wr = 128;
  uint32_t max_recv_wr = 128;
  uint32_t max_send_sge = 1;
  uint32_t max_recv_sge = 1;
  // Every send work request generates a completion when true; otherwise only
  // those posted with IBV_SEND_SIGNALED.
  bool signal_all = false;
};

class Context {
 public:
  static absl::StatusOr<std::unique_ptr<Context>> Open(
      Verbs& verbs, std::string_view device_name,
      const TransportConfig& config);

  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
  ~Context();

  Verbs& verbs() const { return verbs_; }
  const std::string& device_name() const { return device_name_; }
  ibv_context* device() const { return device_; }
  ibv_pd* pd() const { return pd_; }
  const ibv_device_attr& device_attr() const { return device_attr_; }
  const ibv_port_attr& port_attr() const { return port_attr_; }
  const SelectedGid& gid() const { return gid_; }
  const TransportConfig& config() const { return config_; }
  // The largest path MTU this side accepts, in bytes: the smaller of MC_MTU
  // and the port's active MTU.
  int mtu() const { return mtu_; }
  InlineSizeCache& inline_cache() const { return inline_cache_; }

  // Registers `memory` with the least privilege `access` (a MemoryAccess
  // mask). kInvalidArgument for an empty span; the verbs error otherwise.
  absl::StatusOr<MemoryRegion> RegisterMemory(std::span<std::byte> memory,
                                              int access) const;

  // Creates an RC QP in RESET on this device's PD, negotiating
  // max_inline_data (inline_size.h).
  absl::StatusOr<NegotiatedQp> CreateRcQp(const RcQpCaps& caps, ibv_cq* send_cq,
                                          ibv_cq* recv_cq) const;

  // This side's route and handshake facts for a QP whose first send PSN is
  // `psn`.
  LocalRoute Route(uint32_t psn) const;
  QpEndpoint Endpoint(const ibv_qp* qp, uint32_t psn) const;

  // RESET -> INIT -> RTR -> RTS against `remote`, with this context's
  // traffic class, service level and MTU.
  absl::Status ConnectRcQp(ibv_qp* qp, uint32_t local_psn,
                           const QpEndpoint& remote) const;

 private:
  Context(Verbs& verbs, std::string device_name, TransportConfig config)
      : verbs_(verbs),
        device_name_(std::move(device_name)),
        config_(std::move(config)) {}

  Verbs& verbs_;
  const std::string device_name_;
  const TransportConfig config_;
  ibv_context* device_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_device_attr device_attr_ = {};
  ibv_port_attr port_attr_ = {};
  SelectedGid gid_;
  int mtu_ = 0;
  mutable InlineSizeCache inline_cache_;
};

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TRANSPORT_CONTEXT_H_
