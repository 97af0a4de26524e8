#include "transport/connection.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "transport/handshake.h"
#include "transport/inline_size.h"
#include "verbs_shim/verbs_error.h"
#include "verbs_shim/verbs_names.h"

namespace rdma_transport {
namespace {

constexpr int kPollBatch = 16;
constexpr uint64_t kWrValueMask = (1ull << 56) - 1;
// How long a follower waits on the condition variable before looking again.
constexpr auto kFollowerWait = std::chrono::milliseconds(50);
// Busy polling looks at the clock and yields once every this many empty
// turns (each turn polls the CQ once).
constexpr uint32_t kSpinTurns = 64;
constexpr uint64_t kNotWatching = ~uint64_t{0};
// What Close() writes on the setup stream before closing it: a peer that
// reads EOF without it knows this process is gone.
constexpr uint8_t kGoodbyeByte = 'G';
constexpr size_t kProbeSlotSize = 64;
// Pieces of a Write()/Read() op when the watchdog is armed, so that every
// completion the watchdog waits for moves at most this much.
constexpr uint64_t kWatchdogPieceBytes = 1 << 20;
// Soft-RoCE: at most this much RDMA in flight per connection. Its responder
// sends READ responses as fast as it can produce them; on a loaded host the
// veth queue overflows ("rdma_rxe: Failed sending ACK") and Linux 6.1's rxe
// then stalls the READ for good (no completion, no error: measured in the
// VM with every host core busy, 3 of 3 runs of a 16 MiB READ). 256 KiB is
// 256 packets at rxe's 1024-byte MTU, inside the 1000-packet backlog.
constexpr uint64_t kSoftRoceInFlightBytes = 256 << 10;

const char* AsyncEventMeaning(int type) {
  switch (type) {
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
      return "the QP failed";
    case IBV_EVENT_CQ_ERR:
      return "the completion queue failed";
    case IBV_EVENT_PORT_ERR:
      return "the port went down";
    case IBV_EVENT_DEVICE_FATAL:
      return "the device failed";
    default:
      return "the device reported an error";
  }
}

const char* OperationName(uint8_t kind) {
  switch (kind) {
    case 1:
      return "RECV";
    case 2:
      return "SEND_WITH_IMM";
    case 3:
      return "SEND_WITH_IMM (credit return)";
    case 4:
      return "RDMA_WRITE_WITH_IMM (close)";
    case 5:
      return "RDMA_WRITE";
    case 6:
      return "RDMA_READ";
    case 7:
      return "RDMA_WRITE (liveness probe)";
    case 8:
      return "BIND_MW (BindRegion)";
    default:
      return "unknown operation";
  }
}

absl::StatusCode CodeForCompletion(ibv_wc_status status) {
  switch (status) {
    case IBV_WC_RETRY_EXC_ERR:
    case IBV_WC_RNR_RETRY_EXC_ERR:
    case IBV_WC_WR_FLUSH_ERR:
    case IBV_WC_RESP_TIMEOUT_ERR:
    case IBV_WC_REM_ABORT_ERR:
    case IBV_WC_FATAL_ERR:
      return absl::StatusCode::kUnavailable;
    case IBV_WC_LOC_PROT_ERR:
    case IBV_WC_LOC_ACCESS_ERR:
    case IBV_WC_REM_ACCESS_ERR:
    case IBV_WC_MW_BIND_ERR:
      return absl::StatusCode::kPermissionDenied;
    case IBV_WC_LOC_LEN_ERR:
    case IBV_WC_REM_INV_REQ_ERR:
    case IBV_WC_REM_INV_RD_REQ_ERR:
      return absl::StatusCode::kInvalidArgument;
    default:
      return absl::StatusCode::kInternal;
  }
}

size_t RoundUp(size_t value, size_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

void Connection::FreeDeleter::operator()(std::byte* p) const { std::free(p); }

std::unique_lock<std::mutex> Connection::Enter() const {
  // Uncontended: one atomic operation, as a plain lock.
  std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
  if (lock.owns_lock()) [[likely]]
    return lock;
  entering_.fetch_add(1, std::memory_order_relaxed);
  lock.lock();
  entering_.fetch_sub(1, std::memory_order_relaxed);
  return lock;
}

Connection::Connection(const Context& context, const ConnectionOptions& options,
                       std::string name)
    : context_(context),
      verbs_(context.verbs()),
      env_(context.env()),
      options_(options),
      name_(std::move(name)),
      owed_credits_(options.credit_batch != 0 ? options.credit_batch
                                              : options.recv_slots / 2) {
  std::random_device random;
  psn_ = random() & 0xffffff;
}

Connection::~Connection() {
  if (!closed_) (void)Close(env_.Now());
}

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
  sq_depth_ = o.send_slots + o.max_rdma_batch + 4;
  const int device_max_wr = context_.device_attr().max_qp_wr;
  if (device_max_wr > 0 &&
      (sq_depth_ > static_cast<uint32_t>(device_max_wr) ||
       o.recv_slots > static_cast<uint32_t>(device_max_wr))) {
    return absl::InvalidArgumentError(
        absl::StrCat("send queue of ", sq_depth_, " or receive queue of ",
                     o.recv_slots, " work requests exceeds ",
                     context_.device_name(), "'s max_qp_wr ", device_max_wr));
  }
  signal_interval_ = std::clamp<uint32_t>(o.send_slots / 4, 1, 16);
  if (o.completion_timeout.count() > 0) {
    watchdog_armed_ = true;
    completion_timeout_ = o.completion_timeout;
  } else if (o.completion_timeout.count() == 0) {
    // Soft-RoCE retransmits forever to a dead peer on the kernels we run
    // (docs/soft-roce.md); other providers complete with RETRY_EXC_ERR.
    watchdog_armed_ = context_.device_attr().vendor_id == kVendorSoftRoce;
    const TransportConfig& config = context_.config();
    const auto retry_budget = std::chrono::nanoseconds(
        4096ll * (1ll << config.ack_timeout) * (config.retry_count + 1));
    completion_timeout_ =
        std::max<Clock::duration>(4 * retry_budget, std::chrono::seconds(2));
  }
  sq_bytes_.assign(sq_depth_, 0);

  if (o.progress == ProgressMode::kEvent) {
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
  absl::StatusOr<ibv_cq*> cq = verbs_.CreateCq(
      context_.device(), sq_depth_ + o.recv_slots + 1, this, channel_, 0);
  if (!cq.ok()) return cq.status();
  cq_ = *cq;

  RcQpCaps caps;
  caps.max_send_wr = sq_depth_;
  caps.max_recv_wr = o.recv_slots;
  caps.max_send_sge = 1;
  caps.max_recv_sge = 1;
  absl::StatusOr<NegotiatedQp> qp = context_.CreateRcQp(caps, cq_, cq_);
  if (!qp.ok()) return qp.status();
  inline_ = *std::move(qp);
  context_.RegisterListener(this, inline_.qp, cq_);
  registered_ = true;

  arrived_.assign(o.recv_slots, {0, 0});
  send_slot_seq_.assign(o.send_slots, 0);
  rdma_wrs_.assign(o.max_rdma_batch, ibv_send_wr{});
  rdma_sges_.assign(o.max_rdma_batch, ibv_sge{});
  return absl::OkStatus();
}

absl::Status Connection::CreateBuffers() {
  const ConnectionOptions& o = options_;
  slot_size_ = std::max<uint32_t>(o.max_message_size, 64);
  const size_t send_bytes = RoundUp(size_t{slot_size_} * o.send_slots, 4096);
  const size_t recv_bytes = RoundUp(size_t{slot_size_} * o.recv_slots, 4096);
  send_buffer_.reset(
      static_cast<std::byte*>(std::aligned_alloc(4096, send_bytes)));
  recv_buffer_.reset(
      static_cast<std::byte*>(std::aligned_alloc(4096, recv_bytes)));
  if (!send_buffer_ || !recv_buffer_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "allocating ", send_bytes + recv_bytes, " bytes of message rings"));
  }
  absl::StatusOr<MemoryRegion> send_ring = context_.RegisterMemory(
      {send_buffer_.get(), send_bytes}, MemoryAccess::kLocalOnly);
  if (!send_ring.ok()) return send_ring.status();
  send_ring_ = *std::move(send_ring);
  absl::StatusOr<MemoryRegion> recv_ring = context_.RegisterMemory(
      {recv_buffer_.get(), recv_bytes}, MemoryAccess::kLocalWrite);
  if (!recv_ring.ok()) return recv_ring.status();
  recv_ring_ = *std::move(recv_ring);
  // The peer's probes land here; nothing ever reads it.
  probe_buffer_.reset(
      static_cast<std::byte*>(std::aligned_alloc(64, kProbeSlotSize)));
  if (!probe_buffer_) {
    return absl::ResourceExhaustedError("allocating the probe slot");
  }
  absl::StatusOr<MemoryRegion> probe = context_.RegisterMemory(
      {probe_buffer_.get(), kProbeSlotSize}, MemoryAccess::kRemoteWrite);
  if (!probe.ok()) return probe.status();
  probe_slot_ = *std::move(probe);
  return absl::OkStatus();
}

absl::Status Connection::CreateResources() {
  if (absl::Status status = CreateQueues(); !status.ok()) return status;
  return CreateBuffers();
}

QpEndpoint Connection::LocalEndpoint() const {
  return context_.Endpoint(inline_.qp, psn_);
}

RemoteRegion Connection::ProbeTarget() const { return probe_slot_.remote(); }

void Connection::AdoptSetupStream(Socket stream) {
  std::unique_lock<std::mutex> lock(mu_);
  handshake_done_ = true;
  setup_ = std::move(stream);
  setup_watched_ = setup_.valid();
  if (setup_watched_ && epoll_fd_ >= 0) {
    epoll_event event = {};
    event.events = EPOLLIN | EPOLLRDHUP;
    event.data.fd = setup_.fd();
    (void)epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, setup_.fd(), &event);
  }
}

void Connection::OnAsyncEvent(ibv_event_type type) {
  int expected = 0;
  async_event_.compare_exchange_strong(expected, static_cast<int>(type) + 1);
  if (wakeup_fd_ >= 0) {
    uint64_t one = 1;
    (void)!write(wakeup_fd_, &one, sizeof(one));
  }
  env_.Notify();
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
  std::unique_lock<std::mutex> lock(mu_);
  for (uint32_t slot = 0; slot < options_.recv_slots; ++slot) {
    if (absl::Status status = RepostLocked(slot); !status.ok()) {
      return WithContext(status, name_);
    }
  }
  send_credits_ = SendCredits(peer_recv_slots);
  send_limit_ = std::min(options_.max_message_size, peer_slot_size);
  peer_probe_ = peer_probe;
  established_ = true;
  last_activity_ = env_.Now();
  LeaveLocked(lock);
  return absl::OkStatus();
}

void Connection::SetPeerProbe(const RemoteRegion& peer_probe) {
  std::unique_lock<std::mutex> lock(mu_);
  peer_probe_ = peer_probe;
}

int Connection::event_fd() const { return epoll_fd_; }

absl::Status Connection::status() const {
  std::unique_lock<std::mutex> lock = Enter();
  return UsableLocked();
}

ConnectionStats Connection::stats() const {
  std::unique_lock<std::mutex> lock = Enter();
  ConnectionStats stats = stats_;
  stats.send_credits = send_credits_.available();
  stats.watchdog_armed = watchdog_armed_;
  return stats;
}

absl::Status Connection::UsableLocked() const {
  if (!failure_.ok()) return failure_;
  if (closed_ || closing_) {
    return absl::FailedPreconditionError(
        absl::StrCat(name_, ": connection is closed"));
  }
  if (!established_) {
    return absl::FailedPreconditionError(
        absl::StrCat(name_, ": connection is not established"));
  }
  return absl::OkStatus();
}

void Connection::FailLocked(absl::Status status) {
  // Only news wakes the waiters: a wait that fails again and again (a CQ in
  // error, polled while quiescing) must not keep the Env's clock from moving.
  if (!failure_.ok()) return;
  failure_ = std::move(status);
  NotifyLocked();
}

void Connection::NotifyLocked() {
  cv_.notify_all();
  env_.Notify();
}

absl::Status Connection::RepostLocked(uint32_t slot) {
  ibv_sge sge;
  sge.addr = reinterpret_cast<uint64_t>(recv_ring_.data()) +
             uint64_t{slot} * slot_size_;
  sge.length = slot_size_;
  sge.lkey = recv_ring_.lkey();
  ibv_recv_wr wr = {};
  wr.wr_id = MakeWrId(WrKind::kRecv, slot);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  absl::Status status = verbs_.PostRecv(inline_.qp, &wr, &bad);
  if (!status.ok()) {
    status = WithContext(status, absl::StrCat(name_, ": reposting receive"));
    FailLocked(status);
  }
  return status;
}

absl::Status Connection::PostSendLocked(ibv_send_wr* first, uint32_t count) {
  ibv_send_wr* wr = first;
  for (uint32_t i = 0; i < count; ++i, wr = wr->next) {
    const uint64_t seq = sq_posted_ + i;
    wr->wr_id = (wr->wr_id & ~kWrValueMask) | (seq & kWrValueMask);
    if (!(wr->send_flags & IBV_SEND_SIGNALED) &&
        unsignaled_run_ + 1 >= signal_interval_) {
      wr->send_flags |= IBV_SEND_SIGNALED;
    }
    if (wr->send_flags & IBV_SEND_SIGNALED) {
      unsignaled_run_ = 0;
      signaled_end_ = seq + 1;
    } else {
      ++unsignaled_run_;
    }
    for (int i = 0; i < wr->num_sge; ++i) {
      sq_bytes_posted_ += wr->sg_list[i].length;
    }
    sq_bytes_[seq % sq_depth_] = sq_bytes_posted_;
  }
  ibv_send_wr* bad = nullptr;
  absl::Status status = verbs_.PostSend(inline_.qp, first, &bad);
  if (status.ok()) [[likely]] {
    sq_posted_ += count;
    return status;
  }
  // Work requests before `bad` were posted; the connection is unusable now.
  for (wr = first; wr != nullptr && wr != bad; wr = wr->next) ++sq_posted_;
  status = WithContext(
      status, absl::StrCat(name_, ": posting ", WrOpcodeName(first->opcode)));
  FailLocked(status);
  return status;
}

absl::StatusOr<uint64_t> Connection::PostControlLocked(WrKind kind,
                                                       uint32_t imm) {
  ibv_send_wr wr = {};
  ibv_sge sge = {};
  wr.wr_id = MakeWrId(kind, 0);
  wr.num_sge = 0;
  // Nothing to fetch either way; marked inline only where the QP has inline
  // data at all.
  wr.send_flags = inline_.usable_inline > 0 ? IBV_SEND_INLINE : 0;
  static constexpr uint8_t kProbeByte = 1;
  switch (kind) {
    case WrKind::kSendCredit:
      wr.opcode = IBV_WR_SEND_WITH_IMM;
      wr.imm_data = htonl(imm);
      break;
    case WrKind::kClose:
      wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
      wr.imm_data = htonl(imm);
      wr.send_flags |= IBV_SEND_SIGNALED;
      break;
    default:  // keepalive / Check(): one byte into the peer's probe slot
      wr.opcode = IBV_WR_RDMA_WRITE;
      wr.send_flags |= IBV_SEND_SIGNALED;
      // Virtualised RDMA has been seen to drop zero-byte packets: a byte,
      // from the probe slot's own memory where inline is not available.
      if (peer_probe_.rkey != 0 && peer_probe_.length > 0) {
        const bool inline_byte = inline_.usable_inline > 0;
        sge.addr = inline_byte ? reinterpret_cast<uint64_t>(&kProbeByte)
                               : reinterpret_cast<uint64_t>(probe_slot_.data());
        sge.length = 1;
        sge.lkey = inline_byte ? 0 : probe_slot_.lkey();
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.wr.rdma.remote_addr = peer_probe_.address;
        wr.wr.rdma.rkey = peer_probe_.rkey;
      }
      break;
  }
  const uint64_t seq = sq_posted_;
  if (absl::Status status = PostSendLocked(&wr, 1); !status.ok()) {
    return status;
  }
  return seq;
}

void Connection::MaybeReturnCreditsLocked() {
  if (!established_ || closing_ || !failure_.ok() || peer_closed_) return;
  while (owed_credits_.WorthAMessage() && send_credits_.CanSendCreditReturn() &&
         SqHasRoomLocked(1)) {
    const uint32_t credits = owed_credits_.Take();
    absl::StatusOr<uint64_t> seq = PostControlLocked(
        WrKind::kSendCredit, EncodeImm(ImmKind::kCredit, credits));
    if (!seq.ok()) return;
    send_credits_.Spend();
    ++stats_.credit_messages_sent;
  }
}

void Connection::HandleCompletionLocked(const ibv_wc& wc) {
  const uint8_t kind = static_cast<uint8_t>(wc.wr_id >> 56);
  const uint64_t value = wc.wr_id & kWrValueMask;
  if (kind != static_cast<uint8_t>(WrKind::kRecv)) {
    sq_completed_ = std::max(sq_completed_, value + 1);
    if (kind == static_cast<uint8_t>(WrKind::kKeepalive)) {
      keepalive_outstanding_ = false;
    }
  }
  if (wc.status != IBV_WC_SUCCESS) [[unlikely]] {
    // After a local close or an earlier failure, flushed work requests are
    // the expected end of everything still queued.
    if (wc.status == IBV_WC_WR_FLUSH_ERR && (closing_ || !failure_.ok())) {
      return;
    }
    std::string detail =
        absl::StrCat(name_, ": ", OperationName(kind),
                     " completion failed: ", WcStatusName(wc.status), " (",
                     WcStatusDescription(wc.status), "), vendor error 0x",
                     absl::Hex(wc.vendor_err));
    if (wc.status == IBV_WC_RETRY_EXC_ERR) {
      absl::StrAppend(&detail, "; the peer is unreachable or gone");
    }
    // A QP or CQ the device failed flushes its work: the async event, if
    // one came, is the reason to report.
    CheckAsyncEventsLocked(detail);
    FailLocked(absl::Status(CodeForCompletion(wc.status), detail));
    return;
  }
  ++completions_;
  if (kind != static_cast<uint8_t>(WrKind::kRecv)) return;

  if (!(wc.wc_flags & IBV_WC_WITH_IMM)) {
    FailLocked(absl::InternalError(absl::StrCat(
        name_, ": protocol error: a message arrived without immediate data")));
    return;
  }
  const uint32_t imm = ntohl(wc.imm_data);
  send_credits_.Return(ImmCredits(imm));
  const uint32_t slot = static_cast<uint32_t>(value);
  switch (ImmKindOf(imm)) {
    case ImmKind::kData: {
      const size_t tail = (arrived_head_ + arrived_count_) % arrived_.size();
      arrived_[tail] = {slot, wc.byte_len};
      ++arrived_count_;
      break;
    }
    case ImmKind::kCredit:
      ++stats_.credit_messages_received;
      if (RepostLocked(slot).ok()) owed_credits_.Add(1);
      break;
    case ImmKind::kClose:
      peer_closed_ = true;
      break;
    default:
      FailLocked(absl::InternalError(absl::StrCat(
          name_, ": protocol error: unknown message kind in immediate 0x",
          absl::Hex(imm))));
      break;
  }
}

bool Connection::PollOnceLocked(std::unique_lock<std::mutex>& lock) {
  if (cq_ == nullptr) return false;
  ibv_wc wcs[kPollBatch];
  absl::StatusOr<int> polled = verbs_.PollCq(cq_, kPollBatch, wcs);
  if (!polled.ok()) [[unlikely]] {
    // Callers see failure_; no progress was made. A CQ the device failed
    // says why in an async event.
    CheckAsyncEventsLocked(std::string(polled.status().message()));
    FailLocked(WithContext(polled.status(), name_));
    return false;
  }
  if (*polled == 0) return false;
  for (int i = 0; i < *polled; ++i) HandleCompletionLocked(wcs[i]);
  MaybeReturnCreditsLocked();
  // kEvent: a message this thread took off the CQ (while waiting in Send(),
  // say) is announced now, not when the thread leaves.
  if (ready_fd_ >= 0 && !ready_set_) UpdateReadinessLocked();
  NotifyLocked();
  return true;
}

void Connection::NoteActivityLocked(Deadline now) {
  if (completions_ != activity_seen_) {
    activity_seen_ = completions_;
    last_activity_ = now;
  }
}

Clock::duration Connection::WatchdogBudgetLocked() const {
  // Time for the bytes outstanding at the floor rate, on top of the base.
  const uint64_t completed_bytes =
      sq_completed_ == 0 ? 0 : sq_bytes_[(sq_completed_ - 1) % sq_depth_];
  const uint64_t outstanding = sq_bytes_posted_ - completed_bytes;
  return completion_timeout_ +
         std::chrono::duration_cast<Clock::duration>(
             std::chrono::duration<double>(
                 static_cast<double>(outstanding) /
                 static_cast<double>(kWatchdogFloorBytesPerSecond)));
}

void Connection::CheckStalledLocked(Deadline now) {
  if (!watchdog_armed_ || !failure_.ok() || inline_.qp == nullptr) return;
  if (signaled_end_ <= sq_completed_) {  // nothing signalled outstanding
    watchdog_seen_ = kNotWatching;
    return;
  }
  // Measured from the first look after the queue became busy or last moved,
  // so the clock is read only when somebody waits.
  if (sq_completed_ != watchdog_seen_) {
    watchdog_seen_ = sq_completed_;
    send_progress_time_ = now;
    return;
  }
  const Clock::duration stalled = now - send_progress_time_;
  const Clock::duration budget = WatchdogBudgetLocked();
  if (stalled <= budget) return;
  FailLocked(absl::UnavailableError(absl::StrCat(
      name_, ": no completion for ",
      std::chrono::duration_cast<std::chrono::milliseconds>(stalled).count(),
      " ms (budget ",
      std::chrono::duration_cast<std::chrono::milliseconds>(budget).count(),
      " ms) with ", signaled_end_ - sq_completed_,
      " work request(s) outstanding; the peer is unreachable or gone (the "
      "provider did not report it)")));
}

Deadline Connection::NextTimerLocked() const {
  Deadline wake = kNoDeadline;
  if (options_.keepalive_interval.count() > 0 && !keepalive_outstanding_) {
    wake = std::min(wake, last_activity_ + options_.keepalive_interval);
  }
  if (watchdog_armed_ && signaled_end_ > sq_completed_) {
    if (watchdog_seen_ == sq_completed_) {
      wake = std::min(wake, send_progress_time_ + WatchdogBudgetLocked() +
                                std::chrono::milliseconds(1));
    }
  }
  return wake;
}

bool Connection::MaybeKeepaliveLocked(Deadline now) {
  if (options_.keepalive_interval.count() <= 0 || keepalive_outstanding_ ||
      !SqHasRoomLocked(1) || !established_ || inline_.qp == nullptr) {
    return false;
  }
  NoteActivityLocked(now);
  if (now - last_activity_ < options_.keepalive_interval) return false;
  if (!PostControlLocked(WrKind::kKeepalive, 0).ok()) return false;
  keepalive_outstanding_ = true;
  ++stats_.keepalives;
  last_activity_ = now;
  return true;
}

void Connection::ReadSetupStreamLocked(std::unique_lock<std::mutex>& lock) {
  if (!setup_watched_) return;
  uint8_t bytes[16];
  while (true) {
    const ssize_t n = ::recv(setup_.fd(), bytes, sizeof(bytes), MSG_DONTWAIT);
    if (n > 0) {
      for (ssize_t i = 0; i < n; ++i) {
        if (bytes[i] == kGoodbyeByte) peer_goodbye_ = true;
      }
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    break;  // EOF or reset
  }
  setup_watched_ = false;
  if (epoll_fd_ >= 0) {
    (void)epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, setup_.fd(), nullptr);
  }
  if (peer_goodbye_) return;  // a Close(): its close message says the rest
  // What arrived before the peer died is still delivered.
  while (PollOnceLocked(lock)) {
  }
  if (!peer_closed_) {
    FailLocked(absl::UnavailableError(absl::StrCat(
        name_,
        ": the peer's process is gone (its setup connection closed without "
        "a goodbye)")));
  }
}

void Connection::CheckAsyncEventsLocked(std::string_view symptom) {
  context_.PollAsyncEvents();
  NoteAsyncEventLocked(symptom);
}

void Connection::NoteAsyncEventLocked(std::string_view symptom) {
  if (const int event = async_event_.load(std::memory_order_acquire);
      event != 0 && failure_.ok()) {
    FailLocked(absl::UnavailableError(absl::StrCat(
        name_, ": ", AsyncEventName(static_cast<ibv_event_type>(event - 1)),
        " (", AsyncEventMeaning(event - 1), ")",
        symptom.empty() ? "" : "; then ", std::string(symptom))));
  }
}

void Connection::ServiceLocked(std::unique_lock<std::mutex>& lock,
                               bool setup_readable, bool async_readable) {
  if (async_readable) context_.PollAsyncEvents();
  NoteAsyncEventLocked();
  if (setup_readable) ReadSetupStreamLocked(lock);
}

absl::Status Connection::WaitLocked(std::unique_lock<std::mutex>& lock,
                                    uint64_t token, Deadline deadline) {
  const bool busy = options_.progress == ProgressMode::kBusyPoll;
  // kBusyPoll: most turns only let the other thread in and
  // pause; every kSpinTurns-th looks at the clock and the fds and yields.
  if (busy && ++spin_turns_ < kSpinTurns) {
    // Let in a thread that is waiting for the lock; otherwise keep it (each
    // unlock/lock pair is two atomic operations, dear under emulation).
    if (entering_.load(std::memory_order_relaxed) > 0) {
      lock.unlock();
      CpuRelax();
      lock.lock();
    } else {
      CpuRelax();
    }
    return absl::OkStatus();
  }
  spin_turns_ = 0;
  const Deadline now = env_.Now();
  ServiceLocked(lock, false, false);
  CheckStalledLocked(now);
  if (!failure_.ok()) return absl::OkStatus();  // the caller sees failure_
  if (MaybeKeepaliveLocked(now)) return absl::OkStatus();
  if (now >= deadline) {
    // The last look before giving up: what the device has said meanwhile.
    CheckAsyncEventsLocked();
    if (!failure_.ok()) return absl::OkStatus();
    // Before giving up in kEvent mode, consume the channel's events and arm
    // the CQ, so that a caller polling event_fd() is woken by the next
    // completion. A completion that slipped in meanwhile is progress.
    if (!busy && !event_waiter_ && cq_ != nullptr) {
      DrainChannelLocked();
      if (absl::Status status = verbs_.ReqNotifyCq(cq_, false); !status.ok()) {
        FailLocked(WithContext(status, name_));
        return absl::OkStatus();
      }
      cq_armed_ = true;
      if (PollOnceLocked(lock)) return absl::OkStatus();
    }
    return absl::DeadlineExceededError("deadline");
  }
  const Deadline wake = std::min(deadline, NextTimerLocked());

  // The fds every wait watches: the setup stream (the peer's process), the
  // device's async events, and in kEvent mode the completion channel and
  // the wakeup eventfd.
  pollfd fds[4];
  int count = 0;
  int setup_index = -1;
  int async_index = -1;
  int channel_index = -1;
  int wakeup_index = -1;
  if (setup_watched_) {
    setup_index = count;
    fds[count++] = {setup_.fd(), POLLIN, 0};
  }
  if (const int async = context_.async_fd(); async >= 0) {
    async_index = count;
    fds[count++] = {async, POLLIN, 0};
  }
  if (!busy) {
    if (event_waiter_) {
      // Another thread (the leader) sleeps on the channel; follow it.
      SleepLocked(lock, token, std::min(wake, now + kFollowerWait));
      return absl::OkStatus();
    }
    event_waiter_ = true;
    if (absl::Status status = verbs_.ReqNotifyCq(cq_, false); !status.ok()) {
      event_waiter_ = false;
      FailLocked(WithContext(status, name_));
      return absl::OkStatus();
    }
    cq_armed_ = true;
    // A completion that arrived before the CQ was armed raises no event.
    if (PollOnceLocked(lock)) {
      event_waiter_ = false;
      return absl::OkStatus();
    }
    channel_index = count;
    fds[count++] = {channel_->fd, POLLIN, 0};
    wakeup_index = count;
    fds[count++] = {wakeup_fd_, POLLIN, 0};
  }
  lock.unlock();
  const int ready = env_.Wait(token, {fds, static_cast<size_t>(count)}, wake,
                              busy ? WaitKind::kSpin : WaitKind::kBlock);
  lock.lock();
  if (!busy) event_waiter_ = false;
  auto readable = [&](int index) {
    return ready > 0 && index >= 0 && fds[index].revents != 0;
  };
  if (readable(channel_index)) DrainChannelLocked();
  if (readable(wakeup_index)) {
    uint64_t value;
    (void)!read(wakeup_fd_, &value, sizeof(value));
  }
  ServiceLocked(lock, readable(setup_index), readable(async_index));
  if (!busy) NotifyLocked();
  return absl::OkStatus();
}

void Connection::DrainChannelLocked() {
  ibv_cq* cq = nullptr;
  void* cq_context = nullptr;
  while (verbs_.GetCqEvent(channel_, &cq, &cq_context).ok()) {
    verbs_.AckCqEvents(cq, 1);
    cq_armed_ = false;  // an event disarms the CQ
  }
}

void Connection::LeaveLocked(std::unique_lock<std::mutex>& lock) {
  if (options_.progress != ProgressMode::kEvent || cq_ == nullptr) return;
  if (!cq_armed_ && failure_.ok() && !closed_) {
    if (absl::Status status = verbs_.ReqNotifyCq(cq_, false); status.ok()) {
      cq_armed_ = true;
    } else {
      FailLocked(WithContext(status, name_));
    }
    // What arrived before the CQ was armed raises no event: take it now.
    while (PollOnceLocked(lock)) {
    }
  }
  UpdateReadinessLocked();
}

void Connection::UpdateReadinessLocked() {
  if (ready_fd_ < 0) return;
  const bool ready = arrived_count_ > 0 || !failure_.ok() || peer_closed_ ||
                     closing_ || closed_;
  if (ready == ready_set_) return;
  uint64_t value = 1;
  if (ready) {
    (void)!write(ready_fd_, &value, sizeof(value));
  } else {
    (void)!read(ready_fd_, &value, sizeof(value));
  }
  ready_set_ = ready;
}

void Connection::SleepLocked(std::unique_lock<std::mutex>& lock, uint64_t token,
                             Deadline until, WaitKind kind) {
  if (env_.virtual_time() || kind == WaitKind::kSpin) {
    lock.unlock();
    env_.Wait(token, {}, until, kind);
    lock.lock();
  } else {
    cv_.wait_until(lock, until);
  }
}

void Connection::QuiesceLocked(std::unique_lock<std::mutex>& lock) {
  if (inline_.qp == nullptr || sq_completed_ >= sq_posted_) return;
  // Flush whatever is still queued, then wait until the NIC has given every
  // work request back.
  (void)ModifyQpToError(verbs_, inline_.qp);
  const Deadline give_up = env_.DeadlineIn(kFlushWait);
  while (sq_completed_ < sq_posted_) {
    const uint64_t token = env_.PrepareWait();
    if (PollOnceLocked(lock)) continue;
    if (env_.Now() >= give_up) break;
    SleepLocked(lock, token, std::min(give_up, env_.Now() + kFollowerWait),
                options_.progress == ProgressMode::kBusyPoll
                    ? WaitKind::kSpin
                    : WaitKind::kBlock);
  }
  if (sq_completed_ < sq_posted_) {
    // The provider did not flush in time: destroying the QP is what
    // guarantees the NIC no longer touches the memory.
    std::fprintf(stderr,
                 "rdma_transport: %s: %llu work request(s) not flushed within "
                 "%lld ms of the failure; destroying the QP\n",
                 name_.c_str(),
                 static_cast<unsigned long long>(sq_posted_ - sq_completed_),
                 static_cast<long long>(kFlushWait.count()));
    context_.UnregisterListener(this);
    registered_ = false;
    (void)verbs_.DestroyQp(inline_.qp);
    inline_.qp = nullptr;
    sq_completed_ = sq_posted_;
  }
}

template <typename Ready>
absl::Status Connection::WaitUntilLocked(std::unique_lock<std::mutex>& lock,
                                         Deadline deadline, Ready ready,
                                         const char* waiting_for) {
  while (true) {
    if (!failure_.ok()) return failure_;
    if (ready()) return absl::OkStatus();
    const uint64_t token = env_.PrepareWait();
    if (PollOnceLocked(lock)) continue;
    if (!WaitLocked(lock, token, deadline).ok()) {
      return absl::DeadlineExceededError(
          absl::StrCat(name_, ": ", waiting_for, " before the deadline"));
    }
  }
}

absl::Status Connection::WaitForSeqLocked(std::unique_lock<std::mutex>& lock,
                                          uint64_t seq, Deadline deadline) {
  return WaitUntilLocked(
      lock, deadline, [&] { return sq_completed_ > seq; },
      "work request not completed");
}

absl::Status Connection::PeerClosedError() const {
  return absl::UnavailableError(
      absl::StrCat(name_, ": the peer closed the connection"));
}

// Counts a call in flight for Close() to wait on, and ends it with
// LeaveLocked() (kEvent: the CQ re-armed, the readiness fd up to date).
class Connection::CallScope {
 public:
  CallScope(Connection& connection, std::unique_lock<std::mutex>& lock)
      : connection_(connection), lock_(lock) {
    ++connection_.active_calls_;
  }
  ~CallScope() {
    if (lock_.owns_lock()) connection_.LeaveLocked(lock_);
    if (--connection_.active_calls_ == 0) connection_.NotifyLocked();
  }

 private:
  Connection& connection_;
  std::unique_lock<std::mutex>& lock_;
};

absl::Status Connection::Send(std::span<const std::byte> message,
                              Deadline deadline) {
  const size_t size = message.size();
  std::unique_lock<std::mutex> lock = Enter();
  CallScope call(*this, lock);
  if (absl::Status status = UsableLocked(); !status.ok()) return status;
  if (size > send_limit_) [[unlikely]] {
    return absl::InvalidArgumentError(
        absl::StrCat(name_, ": message of ", size,
                     " bytes exceeds the maximum message size ", send_limit_,
                     " (the peer's receive slot); send larger payloads with "
                     "Write()"));
  }
  const bool send_inline =
      ShouldSendInline(static_cast<uint32_t>(size), inline_.usable_inline);
  absl::Status ready = WaitUntilLocked(
      lock, deadline,
      [&] {
        return peer_closed_ ||
               (send_credits_.CanSendData() && SqHasRoomLocked(1) &&
                (send_inline ||
                 send_slot_seq_[next_send_slot_] <= sq_completed_));
      },
      "no send credit or slot");
  if (absl::IsDeadlineExceeded(ready) && failure_.ok()) {
    return absl::DeadlineExceededError(
        absl::StrCat(ready.message(), " (", send_credits_.available(),
                     " credits; the peer is not receiving)"));
  }
  if (!ready.ok()) return ready;
  if (peer_closed_) return PeerClosedError();

  ibv_sge sge;
  ibv_send_wr wr = {};
  wr.wr_id = MakeWrId(WrKind::kSendData, 0);
  wr.opcode = IBV_WR_SEND_WITH_IMM;
  wr.imm_data = htonl(EncodeImm(ImmKind::kData, owed_credits_.Take()));
  wr.sg_list = &sge;
  wr.num_sge = size > 0 ? 1 : 0;
  uint32_t slot = 0;
  if (send_inline) {
    sge.addr = reinterpret_cast<uint64_t>(message.data());
    sge.length = static_cast<uint32_t>(size);
    sge.lkey = 0;  // inline data is copied by the CPU; no key is used
    wr.send_flags = IBV_SEND_INLINE;
  } else {
    slot = next_send_slot_;
    std::byte* destination = send_ring_.data() + size_t{slot} * slot_size_;
    if (size > 0) std::memcpy(destination, message.data(), size);
    sge.addr = reinterpret_cast<uint64_t>(destination);
    sge.length = static_cast<uint32_t>(size);
    sge.lkey = send_ring_.lkey();
  }
  const uint64_t seq = sq_posted_;
  if (absl::Status status = PostSendLocked(&wr, 1); !status.ok()) {
    return status;
  }
  send_credits_.Spend();
  if (!send_inline) {
    send_slot_seq_[slot] = seq + 1;
    next_send_slot_ = (next_send_slot_ + 1) % send_slot_seq_.size();
  }
  ++stats_.messages_sent;
  stats_.bytes_sent += size;
  if (send_inline) ++stats_.inline_sends;
  return absl::OkStatus();
}

absl::StatusOr<size_t> Connection::Receive(std::span<std::byte> buffer,
                                           Deadline deadline) {
  std::unique_lock<std::mutex> lock = Enter();
  CallScope call(*this, lock);
  while (true) {
    // Messages that arrived intact are delivered even after the connection
    // failed (a credit return racing with the peer's close, say): they are
    // in our memory, in order, and the sender was told they were sent.
    if (closed_ || closing_ || !established_) return UsableLocked();
    if (arrived_count_ > 0) {
      const auto [slot, length] = arrived_[arrived_head_];
      if (length > buffer.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat(name_, ": the next message has ", length,
                         " bytes but the buffer holds ", buffer.size(),
                         "; it stays queued"));
      }
      arrived_head_ = (arrived_head_ + 1) % arrived_.size();
      --arrived_count_;
      if (length > 0) {
        std::memcpy(buffer.data(),
                    recv_ring_.data() + size_t{slot} * slot_size_, length);
      }
      if (failure_.ok() && !peer_closed_ && RepostLocked(slot).ok()) {
        owed_credits_.Add(1);
        MaybeReturnCreditsLocked();
      }
      ++stats_.messages_received;
      stats_.bytes_received += length;
      return size_t{length};
    }
    if (peer_closed_) return PeerClosedError();
    if (!failure_.ok()) {
      // Completions of messages that arrived before the failure may still be
      // in the CQ.
      if (PollOnceLocked(lock)) continue;
      return failure_;
    }
    const uint64_t token = env_.PrepareWait();
    if (PollOnceLocked(lock)) continue;
    if (!WaitLocked(lock, token, deadline).ok()) {
      return absl::DeadlineExceededError(
          absl::StrCat(name_, ": no message before the deadline"));
    }
  }
}

absl::Status Connection::CheckRdmaOps(std::span<const RdmaOp> ops,
                                      bool is_write) const {
  for (size_t i = 0; i < ops.size(); ++i) {
    const RdmaOp& op = ops[i];
    const std::string which = absl::StrCat(
        name_, ": RDMA ", is_write ? "WRITE" : "READ", " #", i, ": ");
    if (op.local == nullptr || !op.local->valid()) {
      return absl::InvalidArgumentError(
          absl::StrCat(which, "no local memory region"));
    }
    if (absl::Status status = op.local->CheckRange(op.local_offset, op.length);
        !status.ok()) {
      return absl::OutOfRangeError(
          absl::StrCat(which, "local ", status.message()));
    }
    if (!is_write && !op.local->allows(kLocalWrite)) {
      return absl::PermissionDeniedError(absl::StrCat(
          which,
          "the local region was registered without kLocalWrite, so "
          "the NIC may not write the data read into it"));
    }
    if (op.remote_offset > op.remote.length ||
        op.length > op.remote.length - op.remote_offset) {
      return absl::OutOfRangeError(
          absl::StrCat(which, "remote range [", op.remote_offset, ", ",
                       op.remote_offset + op.length, ") is outside the peer's ",
                       op.remote.length, "-byte region"));
    }
  }
  return absl::OkStatus();
}

absl::Status Connection::RdmaLocked(std::unique_lock<std::mutex>& lock,
                                    std::span<const RdmaOp> ops,
                                    bool is_write) {
  // An op longer than the port's max_msg_sz (8 MiB on rxe) goes as several
  // work requests: pieces of at most `max_piece` bytes.
  // With the watchdog armed, pieces of at most kWatchdogPieceBytes, so that
  // each completion it waits for is a bounded amount of work.
  const uint64_t port_limit = context_.port_attr().max_msg_sz;
  const bool soft_roce = context_.device_attr().vendor_id == kVendorSoftRoce;
  const uint64_t max_piece = std::min<uint64_t>(
      std::min<uint64_t>(port_limit > 0 ? port_limit : (1ull << 31),
                         1ull << 30),
      soft_roce         ? kSoftRoceInFlightBytes
      : watchdog_armed_ ? kWatchdogPieceBytes
                        : ~uint64_t{0});
  const uint64_t max_batch_bytes =
      soft_roce ? kSoftRoceInFlightBytes : ~uint64_t{0};
  size_t op_index = 0;
  uint64_t op_offset = 0;  // bytes of ops[op_index] already posted
  while (op_index < ops.size()) {
    // Lay out the next batch of pieces.
    uint32_t batch = 0;
    uint32_t ops_finished = 0;
    uint64_t unsignaled_bytes = 0;
    uint64_t batch_bytes = 0;
    while (batch < options_.max_rdma_batch && op_index < ops.size() &&
           batch_bytes < max_batch_bytes) {
      const RdmaOp& op = ops[op_index];
      const uint64_t length = std::min(op.length - op_offset, max_piece);
      ibv_sge& sge = rdma_sges_[batch];
      sge.addr = reinterpret_cast<uint64_t>(op.local->data() + op.local_offset +
                                            op_offset);
      sge.length = static_cast<uint32_t>(length);
      sge.lkey = op.local->lkey();
      ibv_send_wr& wr = rdma_wrs_[batch];
      wr = ibv_send_wr{};
      wr.wr_id = MakeWrId(is_write ? WrKind::kWrite : WrKind::kRead, 0);
      wr.opcode = is_write ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_READ;
      wr.sg_list = &sge;
      wr.num_sge = length > 0 ? 1 : 0;
      wr.wr.rdma.remote_addr = op.remote.address + op.remote_offset + op_offset;
      wr.wr.rdma.rkey = op.remote.rkey;
      if (is_write && ShouldSendInline(static_cast<uint32_t>(length),
                                       inline_.usable_inline)) {
        wr.send_flags |= IBV_SEND_INLINE;
      }
      // Progress inside a large batch: a completion every
      // kProgressSignalBytes, which the watchdog counts as progress.
      unsignaled_bytes += length;
      batch_bytes += length;
      if (unsignaled_bytes >= kProgressSignalBytes) {
        wr.send_flags |= IBV_SEND_SIGNALED;
        unsignaled_bytes = 0;
      }
      if (batch > 0) rdma_wrs_[batch - 1].next = &wr;
      ++batch;
      op_offset += length;
      if (op_offset >= op.length) {
        ++op_index;
        op_offset = 0;
        ++ops_finished;
      }
    }
    rdma_wrs_[batch - 1].send_flags |= IBV_SEND_SIGNALED;

    if (absl::Status status = WaitUntilLocked(
            lock, kNoDeadline, [&] { return SqHasRoomLocked(batch); },
            "no send queue room");
        !status.ok()) {
      return status;
    }
    const uint64_t last_seq = sq_posted_ + batch - 1;
    if (absl::Status status = PostSendLocked(rdma_wrs_.data(), batch);
        !status.ok()) {
      return status;
    }
    for (uint32_t i = 0; i < batch; ++i)
      stats_.rdma_bytes += rdma_sges_[i].length;
    (is_write ? stats_.rdma_writes : stats_.rdma_reads) += ops_finished;
    if (absl::Status status = WaitForSeqLocked(lock, last_seq, kNoDeadline);
        !status.ok()) {
      // The NIC may still hold work requests naming the caller's memory.
      QuiesceLocked(lock);
      return status;
    }
  }
  return absl::OkStatus();
}

absl::Status Connection::Write(std::span<const RdmaOp> ops) {
  if (absl::Status status = CheckRdmaOps(ops, true); !status.ok()) {
    return status;
  }
  std::unique_lock<std::mutex> lock = Enter();
  CallScope call(*this, lock);
  if (absl::Status status = UsableLocked(); !status.ok()) return status;
  return RdmaLocked(lock, ops, true);
}

absl::Status Connection::Read(std::span<const RdmaOp> ops) {
  if (absl::Status status = CheckRdmaOps(ops, false); !status.ok()) {
    return status;
  }
  std::unique_lock<std::mutex> lock = Enter();
  CallScope call(*this, lock);
  if (absl::Status status = UsableLocked(); !status.ok()) return status;
  return RdmaLocked(lock, ops, false);
}

absl::StatusOr<PeerRegion> Connection::BindRegion(const MemoryRegion& region,
                                                  size_t offset, size_t length,
                                                  int access) {
  const std::string which = absl::StrCat(name_, ": BindRegion: ");
  if (access == 0 || (access & ~(kRemoteRead | kRemoteWrite)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(which, "access 0x", absl::Hex(access),
                     " is not kRemoteRead and/or kRemoteWrite"));
  }
  if (!region.valid()) {
    return absl::InvalidArgumentError(absl::StrCat(which, "no memory region"));
  }
  if (length == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(which, "a binding needs at least one byte"));
  }
  if (absl::Status status = region.CheckRange(offset, length); !status.ok()) {
    return absl::OutOfRangeError(absl::StrCat(which, status.message()));
  }
  if (!region.allows(kBindable)) {
    return absl::FailedPreconditionError(
        absl::StrCat(which,
                     "the region was registered without kBindable "
                     "(IBV_ACCESS_MW_BIND)"));
  }
  // kRemoteWrite implies local write at the verbs level.
  if ((access & kRemoteWrite) && !region.allows(kLocalWrite) &&
      !region.allows(kRemoteWrite)) {
    return absl::FailedPreconditionError(
        absl::StrCat(which,
                     "a writable binding needs a region registered with "
                     "kLocalWrite"));
  }
  constexpr unsigned int kType2 =
      IBV_DEVICE_MEM_WINDOW_TYPE_2A | IBV_DEVICE_MEM_WINDOW_TYPE_2B;
  if ((context_.device_attr().device_cap_flags & kType2) == 0) {
    return absl::UnimplementedError(absl::StrCat(
        which, "device ", context_.device_name(),
        " has no type 2 memory windows (IBV_DEVICE_MEM_WINDOW_TYPE_2A/2B "
        "not in device_cap_flags); share the region with remote() instead"));
  }

  std::unique_lock<std::mutex> lock = Enter();
  CallScope call(*this, lock);
  if (absl::Status status = UsableLocked(); !status.ok()) return status;
  if (absl::Status status = WaitUntilLocked(
          lock, kNoDeadline, [&] { return SqHasRoomLocked(1); },
          "no send queue room");
      !status.ok()) {
    return status;
  }
  absl::StatusOr<ibv_mw*> mw = verbs_.AllocMw(context_.pd(), IBV_MW_TYPE_2);
  if (!mw.ok()) {
    if (VerbsErrno(mw.status()) == EOPNOTSUPP) {
      return absl::UnimplementedError(
          absl::StrCat(which, "device ", context_.device_name(),
                       " refuses memory windows: ", mw.status().message()));
    }
    return WithContext(mw.status(), which);
  }
  auto window = std::make_shared<BoundWindow>(&verbs_, *mw);
  std::byte* start = region.data() + offset;
  ibv_send_wr wr = {};
  wr.wr_id = MakeWrId(WrKind::kBind, 0);
  wr.opcode = IBV_WR_BIND_MW;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.bind_mw.mw = *mw;
  wr.bind_mw.rkey = ibv_inc_rkey((*mw)->rkey);
  wr.bind_mw.bind_info.mr = region.mr();
  wr.bind_mw.bind_info.addr = reinterpret_cast<uint64_t>(start);
  wr.bind_mw.bind_info.length = length;
  wr.bind_mw.bind_info.mw_access_flags =
      (access & kRemoteRead ? IBV_ACCESS_REMOTE_READ : 0) |
      (access & kRemoteWrite ? IBV_ACCESS_REMOTE_WRITE : 0);
  const uint64_t seq = sq_posted_;
  if (absl::Status status = PostSendLocked(&wr, 1); !status.ok()) {
    QuiesceLocked(lock);
    return status;
  }
  if (absl::Status status = WaitForSeqLocked(lock, seq, kNoDeadline);
      !status.ok()) {
    QuiesceLocked(lock);
    return status;  // `window` deallocates the window
  }
  // libibverbs leaves ibv_mw::rkey to the caller after a bind.
  (*mw)->rkey = wr.bind_mw.rkey;
  std::erase_if(windows_, [](const std::shared_ptr<BoundWindow>& w) {
    return !w->bound();
  });
  windows_.push_back(window);
  ++stats_.regions_bound;
  return PeerRegion(
      std::move(window),
      RemoteRegion{reinterpret_cast<uint64_t>(start), length, wr.bind_mw.rkey});
}

absl::Status Connection::Check(Deadline deadline) {
  std::unique_lock<std::mutex> lock = Enter();
  CallScope call(*this, lock);
  if (absl::Status status = UsableLocked(); !status.ok()) return status;
  if (peer_closed_) return PeerClosedError();
  if (absl::Status status = WaitUntilLocked(
          lock, deadline, [&] { return SqHasRoomLocked(1); },
          "liveness check could not be posted");
      !status.ok()) {
    return status;
  }
  absl::StatusOr<uint64_t> seq = PostControlLocked(WrKind::kKeepalive, 0);
  if (!seq.ok()) return seq.status();
  keepalive_outstanding_ = true;
  ++stats_.keepalives;
  return WaitForSeqLocked(lock, *seq, deadline);
}

absl::Status Connection::Close(Deadline deadline) {
  std::unique_lock<std::mutex> lock = Enter();
  if (closed_) return absl::OkStatus();
  if (closing_) {
    return absl::FailedPreconditionError(
        absl::StrCat(name_, ": Close() is already running"));
  }
  closing_ = true;
  if (wakeup_fd_ >= 0) {
    uint64_t one = 1;
    (void)!write(wakeup_fd_, &one, sizeof(one));
  }
  NotifyLocked();
  UpdateReadinessLocked();
  // Tell the peer's process this is a close, not a death; the close
  // message (below) is what ends its Receive().
  if (setup_.valid()) {
    const uint8_t goodbye = kGoodbyeByte;
    (void)!::send(setup_.fd(), &goodbye, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
  }

  absl::Status result;
  // A connection whose handshake never finished (the Listener gives it up)
  // has nobody to tell: the peer may not even have its QP up.
  if (established_ && handshake_done_ && failure_.ok() && !peer_closed_) {
    // The close message needs a credit and a send queue entry. A failure
    // meanwhile leaves nothing to tell: the close itself still succeeds.
    absl::Status ready = WaitUntilLocked(
        lock, deadline,
        [&] { return send_credits_.CanSendClose() && SqHasRoomLocked(1); },
        "close: no credit to tell the peer");
    if (absl::IsDeadlineExceeded(ready) && failure_.ok()) result = ready;
    if (ready.ok()) {
      absl::StatusOr<uint64_t> seq = PostControlLocked(
          WrKind::kClose, EncodeImm(ImmKind::kClose, owed_credits_.Take()));
      if (seq.ok()) {
        send_credits_.Spend();
        // Its completion means everything posted before it completed too.
        result = WaitForSeqLocked(lock, *seq, deadline);
        // A peer that closed at the same time may be gone already.
        if (!result.ok() && peer_closed_) result = absl::OkStatus();
      } else {
        result = seq.status();
      }
    }
  }
  // Let calls still inside (a Receive on another thread) leave first.
  while (active_calls_ > 0) {
    SleepLocked(lock, env_.PrepareWait(), env_.DeadlineIn(kFollowerWait));
  }
  TearDownLocked();
  closed_ = true;
  return result;
}

void Connection::TearDownLocked() {
  auto report = [this](const absl::Status& status) {
    if (!status.ok()) {
      std::fprintf(stderr, "rdma_transport: %s: closing: %s\n", name_.c_str(),
                   status.ToString().c_str());
    }
  };
  // No async event reaches this connection from here on.
  if (registered_) {
    context_.UnregisterListener(this);
    registered_ = false;
  }
  // No window outlives the connection: dead before the QP goes.
  for (const std::shared_ptr<BoundWindow>& window : windows_) {
    report(window->Release());
  }
  windows_.clear();
  if (inline_.qp != nullptr) {
    report(verbs_.DestroyQp(inline_.qp));
    inline_.qp = nullptr;
  }
  if (cq_ != nullptr) {
    report(verbs_.DestroyCq(cq_));
    cq_ = nullptr;
  }
  if (channel_ != nullptr) {
    report(verbs_.DestroyCompChannel(channel_));
    channel_ = nullptr;
  }
  report(send_ring_.Release());
  report(recv_ring_.Release());
  report(probe_slot_.Release());
  for (int* fd : {&wakeup_fd_, &ready_fd_, &epoll_fd_}) {
    if (*fd >= 0) {
      ::close(*fd);
      *fd = -1;
    }
  }
  setup_watched_ = false;
  setup_.Close();
}

}  // namespace rdma_transport
