// File: transport/engine.cc
//
// The Engine (engine.h): a lane a device (its CQ, channel and SRQ pool),
// the slot table, Progress() (poll a batch of each lane, dispatch runs of
// one connection's completions to it), Wait() through the Env, liveness
// service and the queue of finished asynchronous operations.

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
// epoll data: setup streams carry their slot (below 2^32); a lane's
// channel and async fds kChannelTag or kAsyncTag plus the lane.
constexpr uint64_t kChannelTag = uint64_t{1} << 40;
constexpr uint64_t kAsyncTag = uint64_t{2} << 40;
constexpr uint64_t kLaneMask = (uint64_t{1} << 32) - 1;
constexpr uint64_t kReadyTag = ~uint64_t{0};
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

Engine::Engine(Env& env, const EngineOptions& options)
    : env_(env), made_at_(env_.Now()), options_(options) {}

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(
    const Context& context, const EngineOptions& options) {
  return Create(std::vector<const Context*>{&context}, options);
}

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(
    const std::vector<const Context*>& contexts, const EngineOptions& options) {
  if (contexts.empty() || contexts.size() > kMaxEngineDevices) {
    return absl::InvalidArgumentError(
        absl::StrCat("an engine serves 1..", kMaxEngineDevices,
                     " devices; given ", contexts.size()));
  }
  for (size_t i = 0; i < contexts.size(); ++i) {
    if (contexts[i] == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("Context ", i, " of the engine's list is null"));
    }
    for (size_t j = 0; j < i; ++j) {
      if (contexts[j] == contexts[i]) {
        return absl::InvalidArgumentError(
            absl::StrCat("Context ", i, " (", contexts[i]->device_name(),
                         ") is in the engine's list twice (also ", j, ")"));
      }
    }
    if (&contexts[i]->env() != &contexts[0]->env()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Contexts ", 0, " (", contexts[0]->device_name(), ") and ", i, " (",
          contexts[i]->device_name(),
          ") run on different Envs; one engine waits on one clock"));
    }
  }
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
  std::unique_ptr<Engine> engine(new Engine(contexts[0]->env(), options));
  engine->epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  if (engine->epoll_fd_ < 0) return VerbsError("epoll_create1", errno);
  if (options.progress == ProgressMode::kEvent) {
    engine->ready_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (engine->ready_fd_ < 0) return VerbsError("eventfd", errno);
    if (absl::Status status = engine->Watch(engine->ready_fd_, kReadyTag);
        !status.ok()) {
      return status;
    }
  }
  engine->lanes_.reserve(contexts.size());
  for (const Context* context : contexts) {
    if (absl::Status status = engine->AddLane(*context); !status.ok()) {
      if (contexts.size() == 1) return status;
      return WithContext(
          status, absl::StrCat("engine: device ", context->device_name()));
    }
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

absl::Status Engine::Watch(int fd, uint64_t tag) {
  epoll_event event = {};
  event.events = EPOLLIN;
  event.data.u64 = tag;
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &event) != 0) {
    return VerbsError("epoll_ctl(EPOLL_CTL_ADD)", errno);
  }
  return absl::OkStatus();
}

absl::Status Engine::AddLane(const Context& context) {
  const uint32_t index = static_cast<uint32_t>(lanes_.size());
  // Made in place: the destructor cleans up whatever the lane holds.
  Lane& lane = lanes_.emplace_back(context, options_.max_connections);
  const int device_max = context.device_attr().max_cqe;
  uint32_t entries = options_.cq_entries;
  if (entries == 0) {
    entries = device_max > 0 ? std::min<uint32_t>(65536, device_max) : 65536;
  }
  if (device_max > 0 && entries > static_cast<uint32_t>(device_max)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cq_entries ", entries, " exceeds ", context.device_name(),
                     "'s max_cqe ", device_max));
  }
  absl::StatusOr<ibv_comp_channel*> channel =
      lane.verbs->CreateCompChannel(context.device());
  if (!channel.ok()) return channel.status();
  lane.channel = *channel;
  const int flags = fcntl(lane.channel->fd, F_GETFL);
  if (flags < 0 || fcntl(lane.channel->fd, F_SETFL, flags | O_NONBLOCK) < 0) {
    return VerbsError("fcntl(completion channel, O_NONBLOCK)", errno);
  }
  absl::StatusOr<ibv_cq*> cq = lane.verbs->CreateCq(
      context.device(), static_cast<int>(entries), this, lane.channel, 0);
  if (!cq.ok()) return cq.status();
  lane.cq = *cq;
  lane.cq_entries = entries;
  if (absl::Status status = Watch(lane.channel->fd, kChannelTag + index);
      !status.ok()) {
    return status;
  }
  if (context.async_fd() >= 0) {
    if (absl::Status status = Watch(context.async_fd(), kAsyncTag + index);
        !status.ok()) {
      return status;
    }
  }
  if (options_.srq_slots > 0) {
    absl::StatusOr<std::unique_ptr<SharedReceivePool>> pool =
        SharedReceivePool::Create(context, options_.srq_slots,
                                  options_.srq_slot_bytes);
    if (!pool.ok()) return pool.status();
    lane.pool = *std::move(pool);
  }
  return absl::OkStatus();
}

Engine::~Engine() {
  if (attached_ > 0) {
    std::fprintf(stderr,
                 "rdma_transport: engine destroyed with %u connection(s) "
                 "still attached; destroy connections before their engine\n",
                 attached_);
    std::abort();
  }
  for (Lane& lane : lanes_) {
    lane.pool.reset();  // the SRQ, after every QP attached to it
    if (lane.cq != nullptr) {
      if (absl::Status status = lane.verbs->DestroyCq(lane.cq); !status.ok()) {
        std::fprintf(stderr, "rdma_transport: engine: %s\n",
                     status.ToString().c_str());
      }
    }
    if (lane.channel != nullptr) {
      (void)lane.verbs->DestroyCompChannel(lane.channel);
    }
  }
  if (epoll_fd_ >= 0) ::close(epoll_fd_);
  if (ready_fd_ >= 0) ::close(ready_fd_);
}

absl::StatusOr<uint32_t> Engine::Attach(Connection* connection,
                                        const Context& context, uint32_t qp_num,
                                        uint32_t cq_entries,
                                        uint32_t srq_credits) {
  const uint32_t index = LaneOf(context);  // served: CreateQueues() checked
  Lane& lane = lanes_[index];
  if (free_slots_.empty()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the engine holds its maximum of ",
                     options_.max_connections, " connections"));
  }
  if (lane.cq_reserved + cq_entries > lane.cq_entries) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the engine's completion queue on ", context.device_name(),
                     " has ", lane.cq_entries - lane.cq_reserved, " of ",
                     lane.cq_entries, " entries left, the connection needs ",
                     cq_entries, " (EngineOptions::cq_entries)"));
  }
  if (lane.pool != nullptr) {
    if (absl::Status status = lane.pool->Reserve(srq_credits); !status.ok()) {
      return status;
    }
  } else {
    srq_credits = 0;
  }
  const uint32_t slot = free_slots_.back();
  free_slots_.pop_back();
  slots_[slot] = {connection, LaneQp(index, qp_num), cq_entries, srq_credits,
                  -1};
  lane.cq_reserved += cq_entries;
  ++attached_;
  lane.qp_slots.Insert(qp_num, slot);
  return slot;
}

void Engine::DrainForDetach(uint32_t slot) {
  Slot& s = slots_[slot];
  if (s.connection == nullptr || lanes_[LaneOfSlot(s)].pool == nullptr) return;
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
  Lane& lane = lanes_[LaneOfSlot(s)];
  const uint32_t qp_num = static_cast<uint32_t>(s.lane_qp);
  lane.cq_reserved -= s.cq_entries;
  if (lane.pool != nullptr) lane.pool->Unreserve(s.srq_credits);
  if (lane.qp_slots.Find(qp_num) == slot) lane.qp_slots.Erase(qp_num);
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

// Inline in Progress(): an engine of one device polls with no call of its
// own.
[[gnu::always_inline]] inline int Engine::PollLane(uint32_t index) {
  Lane& lane = lanes_[index];
  ibv_wc wcs[kMaxPollBatch];
  absl::StatusOr<int> polled =
      lane.verbs->PollCq(lane.cq, static_cast<int>(options_.poll_batch), wcs);
  if (!polled.ok()) [[unlikely]] {
    // A shared CQ failed (an overrun, say): every connection on it has.
    lane.context->PollAsyncEvents();
    FailLane(index, WithContext(polled.status(),
                                absl::StrCat("engine CQ of ",
                                             lane.context->device_name())));
    return 0;
  }
  const int n = *polled;
  if (n == 0) return 0;
  stats_.completions += n;
  // A shared receive completion names its pool slot, not the connection:
  // that one is found by qp_num.
  uint32_t slot_of[kMaxPollBatch];
  for (int k = 0; k < n; ++k) {
    if (WrIdKind(wcs[k].wr_id) == static_cast<uint8_t>(WrKind::kSrqRecv)) {
      slot_of[k] = lane.qp_slots.Find(wcs[k].qp_num);
      if (lane.pool != nullptr) lane.pool->NoteConsumed();
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
        slot < slots_.size() &&
                slots_[slot].lane_qp == LaneQp(index, wcs[i].qp_num)
            ? slots_[slot].connection
            : nullptr;
    if (connection != nullptr) [[likely]] {
      connection->EngineDispatch({wcs + i, static_cast<size_t>(j - i)});
    } else {
      stats_.stale_completions += j - i;
      ReclaimStale(lane, {wcs + i, static_cast<size_t>(j - i)});
    }
    i = j;
  }
  return n;
}

int Engine::Progress() {
  ++stats_.progress_calls;
  int n = 0;
  for (uint32_t lane = 0; lane < lanes_.size(); ++lane) n += PollLane(lane);
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
  if (turns_since_service_ >= kBusyServiceInterval) MaybeServiceTurn();
  return n;
}

void Engine::FailLane(uint32_t lane, const absl::Status& status) {
  for (Slot& s : slots_) {
    if (s.connection != nullptr && LaneOfSlot(s) == lane) {
      s.connection->EngineFail(status);
    }
  }
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

void Engine::ReclaimStale(Lane& lane, std::span<const ibv_wc> wcs) {
  if (lane.pool == nullptr) return;
  // A shared slot consumed by a connection that has gone goes back to the
  // pool: nobody else will.
  for (const ibv_wc& wc : wcs) {
    if (WrIdKind(wc.wr_id) != static_cast<uint8_t>(WrKind::kSrqRecv)) continue;
    if (absl::Status status =
            lane.pool->Repost(static_cast<uint32_t>(WrIdValue(wc.wr_id)));
        !status.ok()) {
      std::fprintf(stderr, "rdma_transport: %s\n", status.ToString().c_str());
    }
  }
}

void Engine::DrainChannel(Lane& lane) {
  ibv_cq* cq = nullptr;
  void* cq_context = nullptr;
  while (lane.verbs->GetCqEvent(lane.channel, &cq, &cq_context).ok()) {
    lane.verbs->AckCqEvents(cq, 1);
    lane.cq_armed = false;  // an event disarms the CQ
  }
}

size_t Engine::ReadEvents(std::span<uint32_t> setup_readable) {
  epoll_event events[kMaxEvents];
  const int n = epoll_wait(epoll_fd_, events, kMaxEvents, 0);
  size_t count = 0;
  for (int i = 0; i < n; ++i) {
    const uint64_t tag = events[i].data.u64;
    if (tag == kReadyTag) {
      // ready_fd_ stays as it is.
    } else if ((tag & ~kLaneMask) == kChannelTag) {
      DrainChannel(lanes_[tag & kLaneMask]);
    } else if ((tag & ~kLaneMask) == kAsyncTag) {
      // Service() reads the async events.
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
  for (Lane& lane : lanes_) lane.context->PollAsyncEvents();
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
    bool armed_now = false;
    for (Lane& lane : lanes_) {
      if (lane.cq_armed) continue;
      if (absl::Status status = lane.verbs->ReqNotifyCq(lane.cq, false);
          !status.ok()) {
        return WithContext(status, absl::StrCat("engine: arming the CQ of ",
                                                lane.context->device_name()));
      }
      lane.cq_armed = true;
      armed_now = true;
    }
    // What arrived before a CQ was armed raises no event.
    if (armed_now && Progress() > 0) return absl::OkStatus();
    uint32_t readable[kMaxEvents];
    const size_t count = ReadEvents(readable);
    const Deadline wake = Service({readable, count}, env_.Now());
    if (finished_count_ > 0 || !ready_.empty()) return absl::OkStatus();
    // The channel events (if any) were taken by ReadEvents; a CQ that had
    // one needs arming again before sleeping, and before returning: the
    // caller's epoll on fd() must see the next completion.
    if (!AllArmed()) continue;
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
  stats.devices = static_cast<uint32_t>(lanes_.size());
  for (const Lane& lane : lanes_) {
    stats.cq_entries += lane.cq_entries;
    stats.cq_entries_reserved += lane.cq_reserved;
    if (lane.pool != nullptr) {
      stats.srq_slots += lane.pool->slots();
      stats.srq_slots_reserved += lane.pool->reserved();
      stats.srq_slots_held += lane.pool->held();
    }
  }
  return stats;
}

}  // namespace rdma_transport
