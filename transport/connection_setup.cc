// File: transport/connection_setup.cc
//
// Building and establishing a Connection: the queues (CQ, QP in RESET,
// completion channel, readiness fds), the registered rings and probe slot,
// the QP brought up against the peer's endpoint, and the setup stream
// adopted. ConnectionSetup (connection_setup.h) is what calls these.

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "transport/connection.h"
#include "transport/connection_internal.h"
#include "transport/handshake.h"
#include "transport/rendezvous_request.h"
#include "verbs_shim/ib_timer_encodings.h"
#include "verbs_shim/verbs_error.h"

namespace rdma_transport {
namespace {

constexpr size_t kProbeSlotSize = 64;

}  // namespace

absl::Status Connection::CreateQueues() {
  const ConnectionOptions& o = options_;
  if (o.recv_slots < kMinRecvSlots || o.recv_slots > kMaxRecvSlots) {
    return absl::InvalidArgumentError(
        absl::StrCat("recv_slots ", o.recv_slots, " out of range ",
                     kMinRecvSlots, "..", kMaxRecvSlots));
  }
  if (o.send_slots < 2 || o.send_slots > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("send_slots ", o.send_slots, " out of range 2..65535"));
  }
  if (o.max_message_size > kMaxSlotSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_message_size ", o.max_message_size, " exceeds ",
                     kMaxSlotSize, "; carry large payloads with Write()"));
  }
  if (o.credit_batch > o.recv_slots - 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "credit_batch ", o.credit_batch, " exceeds recv_slots - 2 = ",
        o.recv_slots - 2, ": the peer could be left unable to send"));
  }
  if (o.max_rdma_batch < 1 || o.max_rdma_batch > 4096) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_rdma_batch ", o.max_rdma_batch, " out of range 1..4096"));
  }
  const uint32_t sq_depth = o.send_slots + o.max_rdma_batch + 4;
  const int device_max_wr = context_.device_attr().max_qp_wr;
  if (device_max_wr > 0 &&
      (sq_depth > static_cast<uint32_t>(device_max_wr) ||
       (srq_pool_ == nullptr &&
        o.recv_slots > static_cast<uint32_t>(device_max_wr)))) {
    return absl::InvalidArgumentError(
        absl::StrCat("send queue of ", sq_depth, " or receive queue of ",
                     o.recv_slots, " work requests exceeds ",
                     context_.device_name(), "'s max_qp_wr ", device_max_wr));
  }
  sq_.Reset(sq_depth, std::clamp<uint32_t>(o.send_slots / 4, 1, 16));
  if (o.completion_timeout.count() > 0) {
    watchdog_armed_ = true;
    completion_timeout_ = o.completion_timeout;
  } else if (o.completion_timeout.count() == 0) {
    // Soft-RoCE retransmits forever to a dead peer on the kernels we run
    // (docs/soft-roce.md); other providers complete with RETRY_EXC_ERR.
    watchdog_armed_ = context_.device_attr().vendor_id == kVendorSoftRoce;
    const TransportConfig& config = context_.config();
    // A hand-built TransportConfig past 31 is clamped (ib_timer_encodings.h).
    const auto retry_budget =
        AckTimeoutDuration(config.ack_timeout) * (config.retry_count + 1);
    completion_timeout_ =
        std::max<Clock::duration>(4 * retry_budget, std::chrono::seconds(2));
  }

  if (engine_ != nullptr && !engine_->Serves(context_)) {
    std::string served;
    for (size_t i = 0; i < engine_->devices(); ++i) {
      absl::StrAppend(&served, i == 0 ? "" : ", ",
                      engine_->context(i).device_name());
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "the engine serves the Context", engine_->devices() == 1 ? "" : "s",
        " of ", served, ", not this connection's (", context_.device_name(),
        "): make it with Engine::Create() over this Context too"));
  }
  // With an engine, its CQ and fd serve this connection: none of its own.
  if (o.progress == ProgressMode::kEvent && engine_ == nullptr) {
    absl::StatusOr<ibv_comp_channel*> channel =
        verbs_.CreateCompChannel(context_.device());
    if (!channel.ok()) return channel.status();
    channel_ = *channel;
    int flags = fcntl(channel_->fd, F_GETFL);
    if (flags < 0 || fcntl(channel_->fd, F_SETFL, flags | O_NONBLOCK) < 0) {
      return VerbsError("fcntl(completion channel, O_NONBLOCK)", errno);
    }
    wakeup_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (wakeup_fd_ < 0) return VerbsError("eventfd", errno);
    ready_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (ready_fd_ < 0) return VerbsError("eventfd", errno);
    ++wake_interest_;  // every notify updates the readiness fd
    epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
    if (epoll_fd_ < 0) return VerbsError("epoll_create1", errno);
    for (int fd : {ready_fd_, channel_->fd, context_.async_fd()}) {
      if (fd < 0) continue;
      epoll_event event = {};
      event.events = EPOLLIN;
      event.data.fd = fd;
      if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &event) != 0) {
        return VerbsError("epoll_ctl(EPOLL_CTL_ADD)", errno);
      }
    }
  }
  const uint32_t cq_entries = sq_.depth() + o.recv_slots + 1;
  if (engine_ != nullptr) {
    cq_ = engine_->cq(context_);
  } else {
    absl::StatusOr<ibv_cq*> cq =
        verbs_.CreateCq(context_.device(), cq_entries, this, channel_, 0);
    if (!cq.ok()) return cq.status();
    cq_ = *cq;
  }

  RcQpCaps caps;
  caps.max_send_wr = sq_.depth();
  caps.max_recv_wr = o.recv_slots;
  caps.max_send_sge = 1;
  caps.max_recv_sge = 1;
  if (srq_pool_ != nullptr) caps.srq = srq_pool_->srq();
  absl::StatusOr<NegotiatedQp> qp = context_.CreateRcQp(caps, cq_, cq_);
  if (!qp.ok()) return qp.status();
  inline_ = *std::move(qp);
  if (engine_ != nullptr) {
    absl::StatusOr<uint32_t> slot = engine_->Attach(
        this, context_, inline_.qp->qp_num, cq_entries, o.recv_slots);
    if (!slot.ok()) return slot.status();
    engine_slot_ = *slot;
    engine_attached_ = true;
    async_.Reset(sq_.depth());
  }
  context_.RegisterListener(this, inline_.qp, cq_);
  registered_ = true;

  arrived_.assign(o.recv_slots, Arrival{});
  send_slot_seq_.assign(o.send_slots, 0);
  rdma_chain_.Reset(o.max_rdma_batch, engine_slot_, inline_.usable_inline);
  rdma_pipeline_.Reset(o.max_rdma_batch);
  if (engine_ != nullptr) {
    async_chain_.Reset(o.max_rdma_batch, engine_slot_, inline_.usable_inline);
  }
  return absl::OkStatus();
}

absl::Status Connection::CreateBuffers() {
  const ConnectionOptions& o = options_;
  slot_size_ = std::max<uint32_t>(o.max_message_size, 64);
  const size_t send_bytes = RoundUp(size_t{slot_size_} * o.send_slots, 4096);
  // With a shared receive queue the engine's pool holds the receives.
  const size_t recv_bytes =
      srq_pool_ != nullptr ? 0
                           : RoundUp(size_t{slot_size_} * o.recv_slots, 4096);
  send_buffer_ = AllocateAligned(4096, send_bytes);
  if (recv_bytes > 0) recv_buffer_ = AllocateAligned(4096, recv_bytes);
  if (!send_buffer_ || (recv_bytes > 0 && !recv_buffer_)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "allocating ", send_bytes + recv_bytes, " bytes of message rings"));
  }
  absl::StatusOr<MemoryRegion> send_ring = context_.RegisterMemory(
      {send_buffer_.get(), send_bytes}, MemoryAccess::kLocalOnly);
  if (!send_ring.ok()) return send_ring.status();
  send_ring_ = *std::move(send_ring);
  if (recv_bytes > 0) {
    absl::StatusOr<MemoryRegion> recv_ring = context_.RegisterMemory(
        {recv_buffer_.get(), recv_bytes}, MemoryAccess::kLocalWrite);
    if (!recv_ring.ok()) return recv_ring.status();
    recv_ring_ = *std::move(recv_ring);
  }
  // The peer's probes land here; nothing ever reads it.
  probe_buffer_ = AllocateAligned(64, kProbeSlotSize);
  if (!probe_buffer_) {
    return absl::ResourceExhaustedError("allocating the probe slot");
  }
  absl::StatusOr<MemoryRegion> probe = context_.RegisterMemory(
      {probe_buffer_.get(), kProbeSlotSize}, MemoryAccess::kRemoteWrite);
  if (!probe.ok()) return probe.status();
  probe_slot_ = *std::move(probe);
  return absl::OkStatus();
}

// Kept in step with CreateQueues() and CreateBuffers() above; the memory
// test (tests/engine_memory_test.cc) compares it with what they allocate.
ConnectionFootprint Connection::Footprint(const ConnectionOptions& o,
                                          const EngineOptions* engine) {
  const bool shared = engine != nullptr && engine->srq_slots > 0;
  const uint64_t slot = std::max<uint32_t>(o.max_message_size, 64);
  const uint64_t sq_depth = o.send_slots + o.max_rdma_batch + 4;
  ConnectionFootprint footprint;
  footprint.registered_bytes =
      RoundUp(slot * o.send_slots, 4096) +
      (shared ? 0 : RoundUp(slot * o.recv_slots, 4096)) + kProbeSlotSize;
  footprint.registrations = shared ? 2 : 3;
  footprint.shared_receive_bytes =
      shared ? uint64_t{o.recv_slots} * engine->srq_slot_bytes : 0;
  footprint.heap_bytes =
      sizeof(Connection) + o.recv_slots * sizeof(Arrival) +  // arrived_
      o.send_slots * sizeof(uint64_t) +                      // send_slot_seq_
      sq_depth * sizeof(uint64_t) +                          // sq_'s bytes
      // rdma_chain_, and async_chain_ with an engine
      (engine != nullptr ? 2 : 1) * o.max_rdma_batch *
          (sizeof(ibv_send_wr) + sizeof(ibv_sge)) +
      o.max_rdma_batch * RdmaPipeline::kBytesPerWr +         // rdma_pipeline_
      (engine != nullptr ? sq_depth * sizeof(AsyncOp) : 0);  // async_
  return footprint;
}

absl::Status Connection::CreateResources() {
  if (absl::Status status = CreateQueues(); !status.ok()) return status;
  return CreateBuffers();
}

uint32_t Connection::OfferedSlotSize() const {
  if (srq_pool_ == nullptr) return options_.max_message_size;
  return std::min(options_.max_message_size, srq_pool_->slot_bytes());
}

QpEndpoint Connection::LocalEndpoint() const {
  return context_.Endpoint(inline_.qp, psn_);
}

RemoteRegion Connection::ProbeTarget() const { return probe_slot_.remote(); }

void Connection::AdoptSetupStream(Socket stream) {
  std::unique_lock<ConnectionLock> lock = EnterForSetup();
  handshake_done_ = true;
  setup_ = std::move(stream);
  setup_watched_ = setup_.valid();
  if (setup_watched_ && epoll_fd_ >= 0) {
    epoll_event event = {};
    event.events = EPOLLIN | EPOLLRDHUP;
    event.data.fd = setup_.fd();
    (void)epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, setup_.fd(), &event);
  }
  if (setup_watched_ && engine_attached_) {
    engine_->WatchSetupStream(engine_slot_, setup_.fd());
  }
}

absl::Status Connection::Establish(const QpEndpoint& remote,
                                   uint32_t peer_recv_slots,
                                   uint32_t peer_slot_size,
                                   const RemoteRegion& peer_probe,
                                   const ConnectionPath& path) {
  QpPathSettings settings;
  settings.max_rd_atomic = path.max_rd_atomic;
  settings.max_dest_rd_atomic = path.max_dest_rd_atomic;
  settings.traffic_class = path.traffic_class;
  settings.service_level = path.service_level;
  if (absl::Status status =
          context_.ConnectRcQp(inline_.qp, psn_, remote, settings);
      !status.ok()) {
    return WithContext(status, name_);
  }
  path_ = path;
  path_.rendezvous = path.rendezvous && options_.rendezvous;
  std::unique_lock<ConnectionLock> lock = EnterForSetup();
  // With a shared receive queue the engine posted every slot already.
  for (uint32_t slot = 0; srq_pool_ == nullptr && slot < options_.recv_slots;
       ++slot) {
    if (absl::Status status = RepostLocked(slot); !status.ok()) {
      return WithContext(status, name_);
    }
  }
  send_credits_ = SendCredits(peer_recv_slots);
  send_limit_ = std::min(options_.max_message_size, peer_slot_size);
  // A request must fit the peer's slot (and ours, when not inline).
  if (send_limit_ < kRendezvousRequestBytes) path_.rendezvous = false;
  rendezvous_threshold_ =
      options_.rendezvous_threshold == 0
          ? send_limit_
          : std::min(options_.rendezvous_threshold, send_limit_);
  peer_probe_ = peer_probe;
  established_ = true;
  open_ = failure_.ok() && !closing_ && !closed_;
  last_activity_ = env_.Now();
  LeaveLocked(lock);
  return absl::OkStatus();
}

void Connection::SetPeerProbe(const RemoteRegion& peer_probe) {
  std::unique_lock<ConnectionLock> lock = EnterForSetup();
  peer_probe_ = peer_probe;
}

}  // namespace rdma_transport
