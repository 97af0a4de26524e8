#include "sim/internal/fabric_core.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <utility>

namespace rdma_transport::sim::internal {

EventFields blank_event_fields;

namespace {

void SignalEventFd(int fd) {
  const uint64_t one = 1;
  // The counter cannot overflow in practice (2^64 - 2 events), and a failed
  // write would only lose a wake-up; nothing to recover.
  [[maybe_unused]] ssize_t written = write(fd, &one, sizeof(one));
}

template <typename Map>
auto FindIn(const Map& map, const typename Map::key_type& key)
    -> decltype(map.begin()->second.get()) {
  auto it = map.find(key);
  return it == map.end() ? nullptr : it->second.get();
}

}  // namespace

FabricCore::FabricCore(const FabricOptions& options) : options(options) {
  rnr_waiters_.reserve(16);
}

FabricCore::~FabricCore() {
  for (auto& [handle, channel] : channels) close(channel->verbs.fd);
  for (auto& [handle, context] : contexts) close(context->verbs.async_fd);
}

SimContext* FabricCore::FindContext(const ibv_context* handle) const {
  return FindIn(contexts, handle);
}
SimPd* FabricCore::FindPd(const ibv_pd* handle) const {
  return FindIn(pds, handle);
}
SimAh* FabricCore::FindAh(const ibv_ah* handle) const {
  return FindIn(ahs, handle);
}
SimSrq* FabricCore::FindSrq(const ibv_srq* handle) const {
  return srqs.Find(handle);
}
SimSrq* FabricCore::FindSrqById(uint32_t id) const {
  for (const auto& [handle, srq] : srqs) {
    if (srq->id == id) return srq.get();
  }
  return nullptr;
}
SimMr* FabricCore::FindMr(const ibv_mr* handle) const {
  return FindIn(mrs, handle);
}
SimMw* FabricCore::FindMw(const ibv_mw* handle) const {
  return FindIn(mws, handle);
}
SimChannel* FabricCore::FindChannel(const ibv_comp_channel* handle) const {
  return FindIn(channels, handle);
}
SimCq* FabricCore::FindCq(const ibv_cq* handle) const {
  return cqs.Find(handle);
}
SimQp* FabricCore::FindQp(const ibv_qp* handle) const {
  return qps.Find(handle);
}

SimQp* FabricCore::FindQpOnDevice(const Device& device, uint32_t qp_num) const {
  SimQp* qp = FindQpByNum(qp_num);
  return qp != nullptr && qp->device == &device ? qp : nullptr;
}

void FabricCore::RegisterQpLocked(SimQp& qp) {
  qp.qp_num = kFirstQpNum + static_cast<uint32_t>(qp_table_.size());
  qp_table_.push_back(&qp);
}

Device* FabricCore::FindDevice(std::string_view name) const {
  for (const auto& device : devices) {
    if (device->name == name) return device.get();
  }
  return nullptr;
}

// --- Progress ---

bool FabricCore::IsStaleLocked(const Event& event) const {
  if (event.kind == EventKind::kFault) {
    return event.epoch != fault_generation;  // Cancelled by Clear().
  }
  // A packet in the switch occupies it whoever it belongs to; it may turn
  // stale at its destination.
  if (event.kind == EventKind::kSwitchArrive ||
      event.kind == EventKind::kSwitchDequeue) {
    return false;
  }
  const SimQp* qp = FindQpByNum(event.qp_num);
  if (qp == nullptr || qp->epoch != event.epoch) return true;
  switch (event.kind) {
    case EventKind::kRetryTimer:
      return !qp->timer_armed || qp->timer_generation != event.attempt;
    case EventKind::kTransmit:
      return qp->tx_generation != event.attempt;
    default:
      return false;
  }
}

void FabricCore::DropStaleEventsLocked() {
  while (!events_.empty() && IsStaleLocked(events_.Top())) {
    const uint32_t slot = events_.PopTop();
    ReleasePayloadLocked(events_.at(slot));
    events_.Release(slot);
  }
}

bool FabricCore::StepLocked() {
  // A stale event (a timer whose message was answered, a packet for a QP
  // reset since) is discarded without moving the clock to it.
  DropStaleEventsLocked();
  if (events_.empty()) return false;
  // The event stays in its slot while it runs (handlers schedule others).
  const uint32_t slot = events_.PopTop();
  const Event& event = events_.at(slot);
  if (event.time > now) now = event.time;
  ++events_run;
  trace.Record(TraceRecord::kEvent, now.count(),
               TraceWord(event.qp_num, event.attempt), event.wqe_index,
               TraceWord(TraceBytes(event.kind, event.reply, event.nak_status,
                                    event.fault),
                         event.fault_device));
  switch (event.kind) {
    case EventKind::kTransmit:
      HandleTransmitLocked(event);
      break;
    case EventKind::kArrive:
      HandleArriveLocked(event);
      break;
    case EventKind::kResponse:
      HandleResponseLocked(event);
      break;
    case EventKind::kRetryTimer:
      HandleRetryTimerLocked(event);
      break;
    case EventKind::kFlush:
      HandleFlushLocked(event);
      break;
    case EventKind::kFault:
      HandleFaultLocked(event);
      break;
    case EventKind::kSwitchArrive:
      // The packet, payload and all, is in a switch queue now (or was
      // dropped and released there).
      HandleSwitchArriveLocked(event);
      break;
    case EventKind::kSwitchDequeue:
      HandleSwitchDequeueLocked(event);
      break;
  }
  if (event.kind != EventKind::kSwitchArrive) ReleasePayloadLocked(event);
  events_.Release(slot);
  DropStaleEventsLocked();
  return true;
}

size_t FabricCore::RunUntilIdleLocked() {
  size_t count = 0;
  while (StepLocked()) ++count;
  return count;
}

size_t FabricCore::AdvanceClockLocked(Nanos duration) {
  const Nanos deadline = now + duration;
  size_t count = 0;
  DropStaleEventsLocked();
  while (!events_.empty() && events_.TopTime() <= deadline) {
    StepLocked();
    ++count;
  }
  now = deadline;
  return count;
}

size_t FabricCore::PendingEventCountLocked() const {
  size_t live = 0;
  events_.ForEach([&](const Event& event) {
    if (!IsStaleLocked(event)) ++live;
  });
  return live;
}

std::optional<Nanos> FabricCore::NextEventTimeLocked() {
  DropStaleEventsLocked();
  if (events_.empty()) return std::nullopt;
  return events_.TopTime();
}

void FabricCore::ProgressLocked() {
  if (options.progress_mode == ProgressMode::kImmediate) RunUntilIdleLocked();
}

// --- QP life cycle ---

void FabricCore::EnterErrorLocked(SimQp& qp) {
  if (qp.state == IBV_QPS_ERR) return;
  qp.state = IBV_QPS_ERR;
  qp.verbs.state = IBV_QPS_ERR;
  ++qp.epoch;
  qp.transmit_scheduled = false;
  qp.timer_armed = false;
  qp.flush_scheduled = false;
  if (qp.rnr_waiting) {
    qp.rnr_waiting = false;
    std::erase(rnr_waiters_, qp.qp_num);
  }
  ScheduleFlushLocked(qp);
  // Requesters waiting on this QP's receives will now time out instead.
  WakeRnrWaitersLocked(qp.qp_num);
}

void FabricCore::ResetQpLocked(SimQp& qp) {
  qp.state = IBV_QPS_RESET;
  qp.verbs.state = IBV_QPS_RESET;
  ++qp.epoch;
  qp.sq_reclaimed = qp.sq_active = qp.sq_posted = 0;
  qp.rq_reclaimed = qp.rq_consumed = qp.rq_posted = 0;
  qp.srq_claimed.reset();
  qp.sq_next = qp.tx_wqe = 0;
  qp.tx_packet = 0;
  qp.next_psn = qp.una_psn = 0;
  qp.reads_in_flight = 0;
  qp.expected_psn = 0;
  qp.nak_sent = false;
  qp.implicit_nak_sent = false;
  qp.read_resources.clear();
  qp.transmit_scheduled = false;
  qp.timer_armed = false;
  qp.flush_scheduled = false;
  if (qp.rnr_waiting) {
    qp.rnr_waiting = false;
    std::erase(rnr_waiters_, qp.qp_num);
  }
  CleanCqsOfQpLocked(qp);
  WakeRnrWaitersLocked(qp.qp_num);
}

void FabricCore::CleanCqsOfQpLocked(const SimQp& qp) {
  // A receive of an SRQ whose completion is cleaned away is gone, as on
  // hardware (libmlx5 frees the SRQ WQE): its slot is free again, and the
  // buffer it named is no longer posted.
  auto belongs = [&qp](const CqEntry& entry) {
    if (entry.qp_num != qp.qp_num) return false;
    if (entry.from_srq && qp.srq != nullptr) ++qp.srq->reclaimed;
    return true;
  };
  qp.send_cq->entries.EraseIf(belongs);
  if (qp.recv_cq != qp.send_cq) qp.recv_cq->entries.EraseIf(belongs);
}

void FabricCore::RemoveQpLocked(SimQp& qp) {
  const uint32_t qp_num = qp.qp_num;
  if (qp.rnr_waiting) std::erase(rnr_waiters_, qp_num);
  CleanCqsOfQpLocked(qp);
  --qp.send_cq->live_qps;
  --qp.recv_cq->live_qps;
  --qp.pd->live_qps;
  --qp.device->live_qps;
  if (qp.srq != nullptr) std::erase(qp.srq->qp_nums, qp_num);
  qp_table_[qp_num - kFirstQpNum] = nullptr;
  qps.erase(&qp.verbs);  // Frees `qp`.
  // Requesters waiting on its receives will now time out instead.
  WakeRnrWaitersLocked(qp_num);
}

void FabricCore::WakeRnrWaitersLocked(uint32_t responder_qp_num) {
  if (rnr_waiters_.empty()) return;
  // Iterate over a copy: waking edits the list. The order is the order they
  // started waiting, so runs stay deterministic.
  const std::vector<uint32_t> waiters = rnr_waiters_;
  for (uint32_t qp_num : waiters) {
    SimQp* requester = FindQpByNum(qp_num);
    if (requester == nullptr || !requester->rnr_waiting ||
        requester->rnr_responder_qp_num != responder_qp_num) {
      continue;
    }
    requester->rnr_waiting = false;
    std::erase(rnr_waiters_, qp_num);
    // The requester retries on its RNR timer: not before the NAK's delay.
    ++requester->device->counters.retransmissions;
    ScheduleTransmitLocked(*requester,
                           std::max(now, requester->rnr_resume_not_before));
  }
}

void FabricCore::KillDeviceLocked(Device& device) {
  if (device.dead) return;
  device.dead = true;
  // QPs in creation order, for determinism.
  std::vector<SimQp*> victims;
  for (auto& [handle, qp] : qps) {
    if (qp->device == &device) victims.push_back(qp.get());
  }
  std::sort(victims.begin(), victims.end(),
            [](const SimQp* a, const SimQp* b) { return a->id < b->id; });
  for (SimQp* qp : victims) {
    if (qp->state == IBV_QPS_ERR || qp->state == IBV_QPS_RESET) continue;
    EnterErrorLocked(*qp);
    RaiseAsyncEventLocked(*qp->context, IBV_EVENT_QP_FATAL,
                          AsyncEventTarget::kQp, &qp->verbs, qp->qp_num);
  }
  RaiseOnEveryContextLocked(device, IBV_EVENT_DEVICE_FATAL);
}

void FabricCore::RaiseOnEveryContextLocked(const Device& device,
                                           ibv_event_type type) {
  // Contexts in opening order, for determinism.
  std::vector<SimContext*> opened;
  for (auto& [handle, context] : contexts) {
    if (context->device == &device) opened.push_back(context.get());
  }
  std::sort(
      opened.begin(), opened.end(),
      [](const SimContext* a, const SimContext* b) { return a->id < b->id; });
  for (SimContext* context : opened) {
    RaiseAsyncEventLocked(*context, type, AsyncEventTarget::kDevice, nullptr,
                          0);
  }
}

void FabricCore::RaiseAsyncEventLocked(SimContext& context, ibv_event_type type,
                                       AsyncEventTarget target, void* element,
                                       uint32_t target_id) {
  PendingAsyncEvent pending;
  pending.event.event_type = type;
  pending.target = target;
  pending.target_id = target_id;
  switch (target) {
    case AsyncEventTarget::kQp:
      pending.event.element.qp = static_cast<ibv_qp*>(element);
      break;
    case AsyncEventTarget::kCq:
      pending.event.element.cq = static_cast<ibv_cq*>(element);
      break;
    case AsyncEventTarget::kSrq:
      pending.event.element.srq = static_cast<ibv_srq*>(element);
      break;
    case AsyncEventTarget::kDevice:
      pending.event.element.port_num = 1;
      break;
  }
  context.async_events.push_back(pending);
  ++context.device->counters.async_events_by_type[type];
  trace.Record(TraceRecord::kAsyncEvent, now.count(),
               TraceWord(context.id, target_id), type);
  SignalEventFd(context.verbs.async_fd);
}

void FabricCore::CountPacketLostLocked(Device& where, uint32_t qp_num) {
  ++where.counters.packets_dropped;
  // Always inside an event, whose time is recorded already.
  trace.Record(TraceRecord::kPacketLost, TraceWord(where.index, qp_num));
}

void FabricCore::UnbindMwLocked(SimMw& mw) {
  if (!mw.bound) return;
  if (mw.mr != nullptr) --mw.mr->bound_mws;
  mw.bound = false;
  mw.qp_num = 0;
  mw.mr = nullptr;
  mw.addr = 0;
  mw.length = 0;
  mw.access = 0;
}

std::vector<LiveObject> FabricCore::LeakReportLocked() const {
  std::vector<std::pair<uint32_t, LiveObject>> live;
  for (const auto& [handle, context] : contexts) {
    live.push_back(
        {context->id, {"context", context->device->name, context->id}});
  }
  for (const auto& [handle, pd] : pds) {
    live.push_back({pd->id, {"pd", pd->context->device->name, pd->id}});
  }
  for (const auto& [handle, mr] : mrs) {
    live.push_back({mr->id, {"mr", mr->device->name, mr->id}});
  }
  for (const auto& [handle, mw] : mws) {
    live.push_back({mw->id, {"mw", mw->device->name, mw->id}});
  }
  for (const auto& [handle, channel] : channels) {
    live.push_back(
        {channel->id,
         {"comp_channel", channel->context->device->name, channel->id}});
  }
  for (const auto& [handle, cq] : cqs) {
    live.push_back({cq->id, {"cq", cq->context->device->name, cq->id}});
  }
  for (const auto& [handle, qp] : qps) {
    live.push_back({qp->id, {"qp", qp->device->name, qp->qp_num}});
  }
  for (const auto& [handle, srq] : srqs) {
    live.push_back({srq->id, {"srq", srq->device->name, srq->id}});
  }
  for (const auto& [handle, ah] : ahs) {
    live.push_back({ah->id, {"ah", ah->pd->context->device->name, ah->id}});
  }
  std::sort(live.begin(), live.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<LiveObject> report;
  report.reserve(live.size());
  for (auto& [id, object] : live) report.push_back(std::move(object));
  return report;
}

}  // namespace rdma_transport::sim::internal
