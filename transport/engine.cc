// File: transport/engine.cc
//
// The Engine (engine.h): the shared CQ and its channel, the slot table,
// Progress() (poll a batch, dispatch runs of one connection's completions
// to it), Wait() through the Env, liveness service and the queue of
// finished asynchronous operations.

#include "transport/engine.h"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "transport/connection.h"
#include "transport/deadline.h"
#include "transport/wr_id.h"
#include "verbs_shim/verbs_error.h"

namespace rdma_transport {
namespace {

constexpr int kMaxPollBatch = 64;
// epoll data of the channel and async fds; setup streams carry their slot.
constexpr uint64_t kChannelTag = ~uint64_t{0};
constexpr uint64_t kAsyncTag = ~uint64_t{0} - 1;
constexpr uint64_t kReadyTag = ~uint64_t{0} - 2;
constexpr int kMaxEvents = 64;

}  // namespace

const char* OpOutcomeName(OpOutcome outcome) {
  switch (outcome) {
    case OpOutcome::kCompleted:
      return "COMPLETED";
    case OpOutcome::kFailed:
      return "FAILED";
    case OpOutcome::kOutcomeUnknown:
      return "OUTCOME_UNKNOWN";
  }
  return "?";
}

Engine::Engine(const Context& context, const EngineOptions& options)
    : context_(context),
      verbs_(context.verbs()),
      env_(context.env()),
      made_at_(env_.Now()),
      options_(options),
      qp_slots_(options.max_connections) {}

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(
    const Context& context, const EngineOptions& options) {
  if (options.max_connections < 1 ||
      options.max_connections > kMaxEngineSlots) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_connections ", options.max_connections,
                     " out of range 1..", kMaxEngineSlots));
  }
  if (options.poll_batch < 1 || options.poll_batch > kMaxPollBatch) {
    return absl::InvalidArgumentError(absl::StrCat(
        "poll_batch ", options.poll_batch, " out of range 1..", kMaxPollBatch));
  }
  if (options.max_async_ops < 1) {
    return absl::InvalidArgumentError("max_async_ops must be at least 1");
  }
  std::unique_ptr<Engine> engine(new Engine(context, options));
  const int device_max = context.device_attr().max_cqe;
  uint32_t entries = options.cq_entries;
  if (entries == 0) {
    entries = device_max > 0 ? std::min<uint32_t>(65536, device_max) : 65536;
  }
  if (device_max > 0 && entries > static_cast<uint32_t>(device_max)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cq_entries ", entries, " exceeds ", context.device_name(),
                     "'s max_cqe ", device_max));
  }
  Verbs& verbs = context.verbs();
  absl::StatusOr<ibv_comp_channel*> channel =
      verbs.CreateCompChannel(context.device());
  if (!channel.ok()) return channel.status();
  engine->channel_ = *channel;
  const int flags = fcntl(engine->channel_->fd, F_GETFL);
  if (flags < 0 ||
      fcntl(engine->channel_->fd, F_SETFL, flags | O_NONBLOCK) < 0) {
    return VerbsError("fcntl(completion channel, O_NONBLOCK)", errno);
  }
  absl::StatusOr<ibv_cq*> cq =
      verbs.CreateCq(context.device(), static_cast<int>(entries), engine.get(),
                     engine->channel_, 0);
  if (!cq.ok()) return cq.status();
  engine->cq_ = *cq;
  engine->cq_entries_ = entries;
  engine->epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  if (engine->epoll_fd_ < 0) return VerbsError("epoll_create1", errno);
  if (options.progress == ProgressMode::kEvent) {
    engine->ready_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (engine->ready_fd_ < 0) return VerbsError("eventfd", errno);
  }
  for (auto [fd, tag] : {std::pair{engine->channel_->fd, kChannelTag},
                         std::pair{context.async_fd(), kAsyncTag},
                         std::pair{engine->ready_fd_, kReadyTag}}) {
    if (fd < 0) continue;
    epoll_event event = {};
    event.events = EPOLLIN;
    event.data.u64 = tag;
    if (epoll_ctl(engine->epoll_fd_, EPOLL_CTL_ADD, fd, &event) != 0) {
      return VerbsError("epoll_ctl(EPOLL_CTL_ADD)", errno);
    }
  }
  if (options.srq_slots > 0) {
    absl::StatusOr<std::unique_ptr<SharedReceivePool>> pool =
        SharedReceivePool::Create(context, options.srq_slots,
                                  options.srq_slot_bytes);
    if (!pool.ok()) return pool.status();
    engine->pool_ = *std::move(pool);
  }
  engine->slots_.assign(options.max_connections, Slot{});
  engine->ready_.Reset(options.max_connections);
  engine->free_slots_.reserve(options.max_connections);
  for (uint32_t i = options.max_connections; i > 0; --i) {
    engine->free_slots_.push_back(i - 1);
  }
  engine->finished_.resize(options.max_async_ops);
  return engine;
}

Engine::~Engine() {
  if (attached_ > 0) {
    std::fprintf(stderr,
                 "rdma_transport: engine destroyed with %u connection(s) "
                 "still attached; destroy connections before their engine\n",
                 attached_);
    std::abort();
  }
  pool_.reset();  // the SRQ, after every QP attached to it
  if (cq_ != nullptr) {
    if (absl::Status status = verbs_.DestroyCq(cq_); !status.ok()) {
      std::fprintf(stderr, "rdma_transport: engine: %s\n",
                   status.ToString().c_str());
    }
  }
  if (channel_ != nullptr) (void)verbs_.DestroyCompChannel(channel_);
  if (epoll_fd_ >= 0) ::close(epoll_fd_);
  if (ready_fd_ >= 0) ::close(ready_fd_);
}

uint32_t Engine::SlotOfQp(uint32_t qp_num) const {
  return qp_slots_.Find(qp_num);
}

absl::StatusOr<uint32_t> Engine::Attach(Connection* connection, uint32_t qp_num,
                                        uint32_t cq_entries,
                                        uint32_t srq_credits) {
  if (free_slots_.empty()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the engine holds its maximum of ",
                     options_.max_connections, " connections"));
  }
  if (cq_reserved_ + cq_entries > cq_entries_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the engine's completion queue has ", cq_entries_ - cq_reserved_,
        " of ", cq_entries_, " entries left, the connection needs ", cq_entries,
        " (EngineOptions::cq_entries)"));
  }
  if (pool_ != nullptr) {
    if (absl::Status status = pool_->Reserve(srq_credits); !status.ok()) {
      return status;
    }
  } else {
    srq_credits = 0;
  }
  const uint32_t slot = free_slots_.back();
  free_slots_.pop_back();
  slots_[slot] = {connection, qp_num, cq_entries, srq_credits, -1};
  cq_reserved_ += cq_entries;
  ++attached_;
  qp_slots_.Insert(qp_num, slot);
  return slot;
}

void Engine::DrainForDetach(uint32_t slot) {
  Slot& s = slots_[slot];
  if (s.connection == nullptr || pool_ == nullptr) return;
  Connection* const connection = s.connection;
  s.connection = nullptr;  // its completions are stale from here on
  while (Progress() > 0) {
  }
  s.connection = connection;
}

void Engine::Detach(uint32_t slot) {
  Slot& s = slots_[slot];
  if (s.connection == nullptr) return;
  WatchSetupStream(slot, -1);
  ready_.Remove(slot);
  if (ready_fd_ >= 0) SyncReadyFd();
  cq_reserved_ -= s.cq_entries;
  if (pool_ != nullptr) pool_->Unreserve(s.srq_credits);
  if (qp_slots_.Find(s.qp_num) == slot) qp_slots_.Erase(s.qp_num);
  s = Slot{};
  free_slots_.push_back(slot);
  --attached_;
}

void Engine::WatchSetupStream(uint32_t slot, int fd) {
  Slot& s = slots_[slot];
  if (s.setup_fd >= 0) {
    (void)epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, s.setup_fd, nullptr);
    s.setup_fd = -1;
  }
  if (fd < 0) return;
  epoll_event event = {};
  event.events = EPOLLIN | EPOLLRDHUP;
  event.data.u64 = slot;
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &event) == 0) s.setup_fd = fd;
}

OpHandle Engine::ReserveOps(uint32_t count) {
  const OpHandle first = next_handle_;
  next_handle_ += count;
  ops_outstanding_ += count;
  stats_.ops_posted += count;
  return first;
}

void Engine::Finish(Completion completion) {
  switch (completion.outcome) {
    case OpOutcome::kCompleted:
      ++stats_.ops_completed;
      break;
    case OpOutcome::kFailed:
      ++stats_.ops_failed;
      break;
    case OpOutcome::kOutcomeUnknown:
      ++stats_.ops_outcome_unknown;
      break;
  }
  // Never full: ops_outstanding_ <= max_async_ops counts these too.
  finished_[(finished_head_ + finished_count_) % finished_.size()] =
      std::move(completion);
  ++finished_count_;
  if (ready_fd_ >= 0) SyncReadyFd();
}

std::optional<Completion> Engine::NextCompletion() {
  if (finished_count_ == 0) return std::nullopt;
  std::optional<Completion> done(std::move(finished_[finished_head_]));
  finished_head_ = (finished_head_ + 1) % finished_.size();
  --finished_count_;
  --ops_outstanding_;
  if (ready_fd_ >= 0) SyncReadyFd();
  return done;
}

void Engine::SyncReadyFd() {
  const bool ready = !ready_.empty() || finished_count_ > 0;
  if (ready == ready_signalled_) return;
  uint64_t value = 1;
  // Neither fails on an eventfd of ours: the counter only goes 0 -> 1 -> 0.
  if (ready) {
    (void)!::write(ready_fd_, &value, sizeof value);
  } else {
    (void)!::read(ready_fd_, &value, sizeof value);
  }
  ready_signalled_ = ready;
}

int Engine::Progress() {
  ++stats_.progress_calls;
  ibv_wc wcs[kMaxPollBatch];
  absl::StatusOr<int> polled =
      verbs_.PollCq(cq_, static_cast<int>(options_.poll_batch), wcs);
  if (!polled.ok()) [[unlikely]] {
    // The shared CQ failed (an overrun, say): every connection on it has.
    context_.PollAsyncEvents();
    const absl::Status status = WithContext(polled.status(), "engine CQ");
    for (Slot& s : slots_) {
      if (s.connection != nullptr) s.connection->EngineFail(status);
    }
    return 0;
  }
  const int n = *polled;
  // A service turn after kServiceInterval empty polls in a row, and after
  // kBusyServiceInterval calls however busy (once what was polled is
  // dispatched): a connection whose ops are stuck is noticed (deadlines,
  // liveness) while others keep the CQ full.
  ++turns_since_service_;
  if (n == 0) {
    if (++idle_turns_ >= kServiceInterval) MaybeServiceTurn();
    return 0;
  }
  idle_turns_ = 0;
  stats_.completions += n;
  // A shared receive completion names its pool slot, not the connection:
  // that one is found by qp_num.
  uint32_t slot_of[kMaxPollBatch];
  for (int k = 0; k < n; ++k) {
    if (WrIdKind(wcs[k].wr_id) == static_cast<uint8_t>(WrKind::kSrqRecv)) {
      slot_of[k] = SlotOfQp(wcs[k].qp_num);
      if (pool_ != nullptr) pool_->NoteConsumed();
    } else {
      slot_of[k] = WrIdEngineSlot(wcs[k].wr_id);
    }
  }
  int i = 0;
  while (i < n) {
    const uint32_t slot = slot_of[i];
    int j = i + 1;
    while (j < n && slot_of[j] == slot && wcs[j].qp_num == wcs[i].qp_num) {
      ++j;
    }
    Connection* connection =
        slot < slots_.size() && slots_[slot].qp_num == wcs[i].qp_num
            ? slots_[slot].connection
            : nullptr;
    if (connection != nullptr) [[likely]] {
      connection->EngineDispatch({wcs + i, static_cast<size_t>(j - i)});
    } else {
      stats_.stale_completions += j - i;
      ReclaimStale({wcs + i, static_cast<size_t>(j - i)});
    }
    i = j;
  }
  if (turns_since_service_ >= kBusyServiceInterval) MaybeServiceTurn();
  return n;
}

void Engine::MaybeServiceTurn() {
  // On the real clock the gate decides (busy_poll_gate.h): a busy loop of
  // Progress() calls makes a service turn's system calls every 0.2-13 ms,
  // not every kServiceInterval empty polls; it never yields, so its gate
  // keeps no contended spells. Virtual time keeps the counts.
  uint64_t cycles = 0;
  if (!env_.virtual_time()) {
    cycles = env_.CycleCount();
    if (!service_gate_.Due(cycles, kNoDeadline)) {
      idle_turns_ = 0;
      turns_since_service_ = 0;
      return;
    }
  }
  uint32_t readable[kMaxEvents];
  const size_t count = ReadEvents(readable);
  const Deadline now = env_.Now();
  const Deadline wake = Service({readable, count}, now);
  service_gate_.Serviced(cycles, now, wake, count > 0);
}

void Engine::ReclaimStale(std::span<const ibv_wc> wcs) {
  if (pool_ == nullptr) return;
  // A shared slot consumed by a connection that has gone goes back to the
  // pool: nobody else will.
  for (const ibv_wc& wc : wcs) {
    if (WrIdKind(wc.wr_id) != static_cast<uint8_t>(WrKind::kSrqRecv)) continue;
    if (absl::Status status =
            pool_->Repost(static_cast<uint32_t>(WrIdValue(wc.wr_id)));
        !status.ok()) {
      std::fprintf(stderr, "rdma_transport: %s\n", status.ToString().c_str());
    }
  }
}

void Engine::DrainChannel() {
  ibv_cq* cq = nullptr;
  void* cq_context = nullptr;
  while (verbs_.GetCqEvent(channel_, &cq, &cq_context).ok()) {
    verbs_.AckCqEvents(cq, 1);
    cq_armed_ = false;  // an event disarms the CQ
  }
}

size_t Engine::ReadEvents(std::span<uint32_t> setup_readable) {
  epoll_event events[kMaxEvents];
  const int n = epoll_wait(epoll_fd_, events, kMaxEvents, 0);
  size_t count = 0;
  for (int i = 0; i < n; ++i) {
    const uint64_t tag = events[i].data.u64;
    if (tag == kChannelTag) {
      DrainChannel();
    } else if (tag == kAsyncTag || tag == kReadyTag) {
      // Service() reads the async events; ready_fd_ stays as it is.
    } else if (count < setup_readable.size()) {
      setup_readable[count++] = static_cast<uint32_t>(tag);
    }
  }
  return count;
}

Deadline Engine::Service(std::span<const uint32_t> setup_readable,
                         Deadline now) {
  idle_turns_ = 0;
  turns_since_service_ = 0;
  context_.PollAsyncEvents();
  Deadline wake = kNoDeadline;
  for (uint32_t slot = 0; slot < slots_.size(); ++slot) {
    Connection* connection = slots_[slot].connection;
    if (connection == nullptr) continue;
    const bool readable =
        std::find(setup_readable.begin(), setup_readable.end(), slot) !=
        setup_readable.end();
    wake = std::min(wake, connection->EngineService(now, readable));
  }
  // A timer due that could not act (a keepalive with the send queue full)
  // is looked at again shortly, not spun on.
  return std::max(wake, now + std::chrono::milliseconds(1));
}

absl::Status Engine::Wait(Deadline deadline) {
  if (!OnClockOf(deadline, made_at_)) [[unlikely]] {
    return WrongClockError("engine: Wait()", deadline);
  }
  while (true) {
    if (finished_count_ > 0 || !ready_.empty()) return absl::OkStatus();
    const uint64_t token = env_.PrepareWait();
    if (Progress() > 0) return absl::OkStatus();
    if (!cq_armed_) {
      if (absl::Status status = verbs_.ReqNotifyCq(cq_, false); !status.ok()) {
        return WithContext(status, "engine: arming the CQ");
      }
      cq_armed_ = true;
      // What arrived before the CQ was armed raises no event.
      if (Progress() > 0) return absl::OkStatus();
    }
    uint32_t readable[kMaxEvents];
    const size_t count = ReadEvents(readable);
    const Deadline wake = Service({readable, count}, env_.Now());
    if (finished_count_ > 0 || !ready_.empty()) return absl::OkStatus();
    // The channel event (if any) was taken by ReadEvents; the CQ needs
    // arming again before sleeping, and before returning: the caller's
    // epoll on fd() must see the next completion.
    if (!cq_armed_) continue;
    if (env_.Now() >= deadline) {
      return absl::DeadlineExceededError("engine: nothing before the deadline");
    }
    pollfd fd = {epoll_fd_, POLLIN, 0};
    env_.Wait(token, {&fd, 1}, std::min(deadline, wake), WaitKind::kBlock);
  }
}

EngineStats Engine::stats() const {
  EngineStats stats = stats_;
  stats.connections = attached_;
  stats.cq_entries = cq_entries_;
  stats.cq_entries_reserved = cq_reserved_;
  if (pool_ != nullptr) {
    stats.srq_slots = pool_->slots();
    stats.srq_slots_reserved = pool_->reserved();
    stats.srq_slots_held = pool_->held();
  }
  return stats;
}

}  // namespace rdma_transport
