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
// Asynchronous events. The Context reads the device's async event fd
// (non-blocking, in a loop) whenever PollAsyncEvents() is called: every
// Connection calls it from its waits when the fd is readable, so whichever
// thread makes progress drains it and no thread of our own is needed; an
// application with no call in flight may call it from its own loop. Each
// event is acknowledged at once (before any connection's lock is taken, so
// ibv_destroy_qp never waits on us) and then:
//   IBV_EVENT_QP_FATAL, _QP_REQ_ERR, _QP_ACCESS_ERR  fail the QP's connection
//   IBV_EVENT_CQ_ERR                                   fail the CQ's connection
//   IBV_EVENT_PORT_ERR                                 fail every connection
//   IBV_EVENT_DEVICE_FATAL                             fail every connection
//   IBV_EVENT_GID_CHANGE                  choose the GID again for new QPs
//   anything else                                      counted only
// with kUnavailable naming the event; async_events() counts them all.
// "Every connection" is every one registered when the event is read: a
// connection registers (RegisterListener) only after the events already
// queued have been dispatched, so an event raised before it existed (a
// PORT_ERR from before the port came back up, read late) never fails it.
//
// Operator facts at start-up. Open() reads the port's host traffic-class
// override (traffic_class_override.h): when the driver will replace a
// configured MC_IB_TC with another value, it prints a warning to stderr
// ("rdma_transport: warning: mlx5_0 port 1: /sys/class/infiniband/mlx5_0/
// tc/1/traffic_class holds \"Global tclass=106\": ... overriding
// MC_IB_TC=136 ...") and keeps it in warnings(); a file it cannot read or
// parse is a warning too, never a failure. QPs connected while an override
// is in effect are counted (qps_under_traffic_class_override()). The GID
// choice and why are in gid() (gid_selection.h).
//
// Thread-safety: safe for concurrent use after Open(); the accessors return
// immutable data (gid() a copy, as a GID change may replace it), CreateRcQp
// and PollAsyncEvents may run on several threads at once.
//
// Errors: Open() fails with the verbs error of the failing call, kNotFound
// for an unknown device or when no usable GID exists, kInvalidArgument for a
// port the device does not have.

#ifndef RDMA_TRANSPORT_TRANSPORT_CONTEXT_H_
#define RDMA_TRANSPORT_TRANSPORT_CONTEXT_H_

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "transport/config.h"
#include "transport/gid_selection.h"
#include "transport/inline_size.h"
#include "transport/memory_region.h"
#include "transport/qp_bringup.h"
#include "transport/traffic_class_override.h"
#include "verbs_shim/verbs.h"

namespace rdma_transport {

// Queue sizes of an RC QP.
struct RcQpCaps {
  uint32_t max_send_wr = 128;
  uint32_t max_recv_wr = 128;
  uint32_t max_send_sge = 1;
  uint32_t max_recv_sge = 1;
  // Receives come from this shared receive queue (max_recv_wr/sge are then
  // ignored); nullptr: a receive queue of the QP's own.
  ibv_srq* srq = nullptr;
  // Every send work request generates a completion when true; otherwise only
  // those posted with IBV_SEND_SIGNALED.
  bool signal_all = false;
};

// Counts of the asynchronous events a Context has read.
struct AsyncEventCounts {
  uint64_t qp_fatal = 0;  // QP_FATAL, QP_REQ_ERR, QP_ACCESS_ERR
  uint64_t cq_error = 0;
  uint64_t port_error = 0;
  uint64_t port_active = 0;
  uint64_t device_fatal = 0;
  uint64_t gid_change = 0;
  uint64_t other = 0;
  uint64_t connections_failed = 0;  // connections told to fail
  uint64_t gid_reselections = 0;    // GID choices made again
};

// What a Context tells a connection when an async event concerns it.
class AsyncEventListener {
 public:
  virtual ~AsyncEventListener() = default;
  // Called with no lock of the Context held; must not block.
  virtual void OnAsyncEvent(ibv_event_type type) = 0;
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
  // The clock, waits and setup channel of this device (verbs.env()).
  Env& env() const { return verbs_.env(); }
  const std::string& device_name() const { return device_name_; }
  ibv_context* device() const { return device_; }
  ibv_pd* pd() const { return pd_; }
  const ibv_device_attr& device_attr() const { return device_attr_; }
  const ibv_port_attr& port_attr() const { return port_attr_; }
  SelectedGid gid() const;
  const TransportConfig& config() const { return config_; }
  // The largest path MTU this side accepts, in bytes: the smaller of MC_MTU
  // and the port's active MTU.
  int mtu() const { return mtu_; }
  InlineSizeCache& inline_cache() const { return inline_cache_; }
  // The port's host traffic-class override, if the driver has one set.
  const std::optional<TrafficClassOverride>& traffic_class_override() const {
    return traffic_class_override_;
  }
  // What Open() warned about (each also printed to stderr), in order.
  const std::vector<std::string>& warnings() const { return warnings_; }
  // RC QPs ConnectRcQp brought to RTR while traffic_class_override() was
  // set: their packets carry the override, not config().traffic_class.
  uint64_t qps_under_traffic_class_override() const {
    return qps_under_override_.load(std::memory_order_relaxed);
  }

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
  // The same with what the handshake settled (READ depths, traffic class and
  // service level) in place of the Context's own.
  absl::Status ConnectRcQp(ibv_qp* qp, uint32_t local_psn,
                           const QpEndpoint& remote,
                           const QpPathSettings& settings) const;

  // Reads and dispatches every pending async event (see above); returns how
  // many. Never blocks; a concurrent call returns 0 at once.
  int PollAsyncEvents() const;
  // The device's async event fd (readable while events wait), or -1.
  int async_fd() const;
  AsyncEventCounts async_events() const;

  // Connections register their QP and CQ to hear about events on them.
  // RegisterListener first dispatches the events already queued (raised
  // before the QP existed) to the listeners registered so far.
  void RegisterListener(AsyncEventListener* listener, const ibv_qp* qp,
                        const ibv_cq* cq) const;
  void UnregisterListener(AsyncEventListener* listener) const;

 private:
  Context(Verbs& verbs, std::string device_name, TransportConfig config)
      : verbs_(verbs),
        device_name_(std::move(device_name)),
        config_(std::move(config)) {}

  // PollAsyncEvents' loop, with async_drain_mu_ held.
  int DrainAsyncEventsLocked() const;
  void DispatchAsyncEvent(ibv_event_type type, uint32_t qp_num,
                          const ibv_cq* cq) const;
  // Prints "rdma_transport: warning: <text>" and keeps it in warnings_.
  void Warn(std::string text);
  GidRequest MakeGidRequest() const;

  Verbs& verbs_;
  const std::string device_name_;
  const TransportConfig config_;
  ibv_context* device_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_device_attr device_attr_ = {};
  ibv_port_attr port_attr_ = {};
  mutable std::mutex gid_mu_;
  mutable SelectedGid gid_;  // guarded by gid_mu_

  struct Registered {
    AsyncEventListener* listener;
    uint32_t qp_num;
    const ibv_cq* cq;
  };
  mutable std::mutex async_drain_mu_;  // one drainer at a time
  mutable std::mutex listeners_mu_;    // guards listeners_, events_
  mutable std::vector<Registered> listeners_;
  mutable AsyncEventCounts events_;
  int mtu_ = 0;
  mutable InlineSizeCache inline_cache_;
  std::optional<TrafficClassOverride> traffic_class_override_;
  std::vector<std::string> warnings_;
  mutable std::atomic<uint64_t> qps_under_override_{0};
};

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TRANSPORT_CONTEXT_H_
