// The simulated NIC's data path around the wire: posting, polling,
// completions and flushes, routes, data-path faults, memory checks and local
// operations. The RC protocol itself is in requester.cc and responder.cc,
// the links in link.cc. See fabric_core.h for the model.

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "sim/internal/fabric_core.h"
#include "sim/internal/packets.h"
#include "verbs_shim/verbs_error.h"
#include "verbs_shim/verbs_names.h"

namespace rdma_transport::sim::internal {
namespace {

bool IsSupportedOpcode(int opcode) {
  return opcode == IBV_WR_SEND || opcode == IBV_WR_SEND_WITH_IMM ||
         opcode == IBV_WR_RDMA_WRITE || opcode == IBV_WR_RDMA_WRITE_WITH_IMM ||
         opcode == IBV_WR_RDMA_READ || opcode == IBV_WR_BIND_MW ||
         opcode == IBV_WR_LOCAL_INV;
}

bool InsideRange(uint64_t start, uint64_t size, uint64_t addr,
                 uint64_t length) {
  return addr >= start && length <= size && addr - start <= size - length;
}

}  // namespace

// --- Posting and polling ---

absl::Status FabricCore::PostSendLocked(SimQp& qp, ibv_send_wr* wr,
                                        ibv_send_wr** bad_wr) {
  const DeviceProfile& profile = qp.device->profile;
  SimCounters& counters = qp.device->counters;
  ++counters.post_send_calls;
  absl::Status status;
  for (; wr != nullptr; wr = wr->next) {
    auto refuse = [&](int error, std::string detail) {
      if (bad_wr != nullptr) *bad_wr = wr;
      return VerbsError("ibv_post_send", error, detail);
    };
    if (qp.state == IBV_QPS_RESET || qp.state == IBV_QPS_INIT ||
        qp.state == IBV_QPS_RTR) {
      status = refuse(EINVAL, absl::StrCat("QP ", qp.qp_num, " is in ",
                                           QpStateName(qp.state)));
      break;
    }
    if (const int opcode = RawEnum(wr->opcode); !IsSupportedOpcode(opcode)) {
      const char* name = opcode >= 0 && opcode <= IBV_WR_DRIVER1
                             ? WrOpcodeName(static_cast<ibv_wr_opcode>(opcode))
                             : "unknown";
      status = refuse(EINVAL, absl::StrCat("opcode ", opcode, " (", name,
                                           ") is not simulated"));
      break;
    }
    if (wr->num_sge < 0 ||
        static_cast<uint32_t>(wr->num_sge) > qp.max_send_sge()) {
      status = refuse(profile.post_limit_errno,
                      absl::StrCat("num_sge ", wr->num_sge,
                                   " above max_send_sge ", qp.max_send_sge()));
      break;
    }
    if (wr->num_sge > 0 && wr->sg_list == nullptr) {
      status = refuse(EINVAL, "null sg_list");
      break;
    }
    if (qp.sq_posted - qp.sq_reclaimed >= qp.send_depth()) {
      status =
          refuse(ENOMEM, absl::StrCat("send queue full (", qp.send_depth(),
                                      " WRs not yet reclaimed by polling)"));
      break;
    }
    // What libibverbs' rxe provider refuses at post (validate_send_wr) or
    // would crash on (a null MR).
    if (wr->opcode == IBV_WR_BIND_MW) {
      if (wr->num_sge != 0 || wr->imm_data != 0) {
        status = refuse(EINVAL, "IBV_WR_BIND_MW with num_sge or imm_data");
        break;
      }
      if (FindMw(wr->bind_mw.mw) == nullptr) {
        status = refuse(EINVAL, "IBV_WR_BIND_MW: unknown or destroyed MW");
        break;
      }
      if (FindMr(wr->bind_mw.bind_info.mr) == nullptr) {
        status = refuse(EINVAL, "IBV_WR_BIND_MW: unknown or destroyed MR");
        break;
      }
    }
    if (wr->opcode == IBV_WR_LOCAL_INV && wr->num_sge != 0) {
      status = refuse(EINVAL, "IBV_WR_LOCAL_INV with num_sge");
      break;
    }
    const bool is_inline = (wr->send_flags & IBV_SEND_INLINE) != 0;
    if (is_inline && wr->opcode == IBV_WR_RDMA_READ) {
      status = refuse(EINVAL, "IBV_SEND_INLINE on an RDMA READ");
      break;
    }
    uint64_t length = 0;
    for (int i = 0; i < wr->num_sge; ++i) length += wr->sg_list[i].length;
    if (is_inline && length > qp.max_inline_data()) {
      status = refuse(profile.post_limit_errno,
                      absl::StrCat("inline payload of ", length,
                                   " bytes above the granted max_inline_data ",
                                   qp.max_inline_data()));
      break;
    }

    const uint64_t index = qp.sq_posted;
    SendWqe& wqe = qp.send_slot(index);
    wqe = SendWqe{};
    wqe.wr_id = wr->wr_id;
    wqe.opcode = wr->opcode;
    wqe.signaled =
        qp.init_attr.sq_sig_all != 0 || (wr->send_flags & IBV_SEND_SIGNALED);
    wqe.solicited = (wr->send_flags & IBV_SEND_SOLICITED) != 0;
    wqe.is_inline = is_inline;
    wqe.imm_data = wr->imm_data;
    wqe.remote_addr = wr->wr.rdma.remote_addr;
    wqe.rkey = wr->wr.rdma.rkey;
    wqe.num_sge = static_cast<uint32_t>(wr->num_sge);
    wqe.length = length;
    if (wr->opcode == IBV_WR_BIND_MW) {
      wqe.remote_addr = 0;
      wqe.rkey = 0;
      wqe.bind_mw_rkey = wr->bind_mw.mw->rkey;
      wqe.bind_new_rkey = wr->bind_mw.rkey;
      wqe.bind_mr_lkey = wr->bind_mw.bind_info.mr->lkey;
      wqe.bind_addr = wr->bind_mw.bind_info.addr;
      wqe.bind_length = wr->bind_mw.bind_info.length;
      wqe.bind_access = static_cast<int>(wr->bind_mw.bind_info.mw_access_flags);
    } else if (wr->opcode == IBV_WR_LOCAL_INV) {
      wqe.remote_addr = 0;
      wqe.rkey = wr->invalidate_rkey;
      wqe.imm_data = 0;
    }
    if (is_inline) {
      // Inline data is copied now: the caller may reuse its buffer as soon
      // as PostSend returns.
      uint8_t* out = qp.send_inline(index);
      for (int i = 0; i < wr->num_sge; ++i) {
        const ibv_sge& sge = wr->sg_list[i];
        if (sge.length == 0) continue;
        std::memcpy(out, AsPointer(sge.addr), sge.length);
        out += sge.length;
      }
      ++counters.inline_sends;
    } else if (wr->num_sge > 0) {
      std::copy(wr->sg_list, wr->sg_list + wr->num_sge, qp.send_sges(index));
    }
    ++qp.sq_posted;
    ++counters.send_wrs_posted;
  }
  if (qp.state == IBV_QPS_ERR) {
    ScheduleFlushLocked(qp);
  } else {
    KickSendQueueLocked(qp);
  }
  return status;
}

std::optional<RecvRefusal> CheckRecvWr(const ibv_recv_wr& wr, uint32_t max_sge,
                                       std::string_view max_sge_name,
                                       uint64_t in_use, uint32_t depth,
                                       std::string_view queue) {
  if (wr.num_sge < 0 || static_cast<uint32_t>(wr.num_sge) > max_sge) {
    return RecvRefusal{EINVAL,
                       absl::StrCat("num_sge ", wr.num_sge, " above ",
                                    std::string(max_sge_name), " ", max_sge)};
  }
  if (wr.num_sge > 0 && wr.sg_list == nullptr) {
    return RecvRefusal{EINVAL, "null sg_list"};
  }
  if (in_use >= depth) {
    return RecvRefusal{ENOMEM,
                       absl::StrCat(std::string(queue), " full (", depth,
                                    " WRs not yet reclaimed by polling)")};
  }
  return std::nullopt;
}

void StoreRecvWr(const ibv_recv_wr& wr, RecvWqe& wqe, ibv_sge* sges) {
  wqe.wr_id = wr.wr_id;
  wqe.num_sge = static_cast<uint32_t>(wr.num_sge);
  if (wr.num_sge > 0) std::copy(wr.sg_list, wr.sg_list + wr.num_sge, sges);
}

absl::Status FabricCore::PostRecvLocked(SimQp& qp, ibv_recv_wr* wr,
                                        ibv_recv_wr** bad_wr) {
  ++qp.device->counters.post_recv_calls;
  absl::Status status;
  bool posted = false;
  for (; wr != nullptr; wr = wr->next) {
    auto refuse = [&](int error, std::string detail) {
      if (bad_wr != nullptr) *bad_wr = wr;
      return VerbsError("ibv_post_recv", error, detail);
    };
    if (qp.state == IBV_QPS_RESET) {
      status = refuse(EINVAL, absl::StrCat("QP ", qp.qp_num, " is in RESET"));
      break;
    }
    if (qp.srq != nullptr) {
      status = refuse(EINVAL, absl::StrCat("QP ", qp.qp_num,
                                           " takes its receives from an SRQ: "
                                           "post them there"));
      break;
    }
    if (std::optional<RecvRefusal> refusal = CheckRecvWr(
            *wr, qp.max_recv_sge(), "max_recv_sge",
            qp.rq_posted - qp.rq_reclaimed, qp.recv_depth(), "receive queue")) {
      status = refuse(refusal->error, std::move(refusal->detail));
      break;
    }
    const uint64_t index = qp.rq_posted;
    StoreRecvWr(*wr, qp.recv_slot(index), qp.recv_sges(index));
    ++qp.rq_posted;
    ++qp.device->counters.recv_wrs_posted;
    posted = true;
  }
  if (qp.state == IBV_QPS_ERR) {
    ScheduleFlushLocked(qp);
  } else if (posted) {
    WakeRnrWaitersLocked(qp.qp_num);
  }
  return status;
}

absl::StatusOr<int> FabricCore::PollCqLocked(SimCq& cq, int num_entries,
                                             ibv_wc* wc) {
  if (cq.in_error()) [[unlikely]] {
    return VerbsError(
        "ibv_poll_cq", EOVERFLOW,
        cq.overrun ? absl::StrCat("CQ ", cq.id, " overran its ", cq.verbs.cqe,
                                  " entries")
                   : absl::StrCat("CQ ", cq.id,
                                  " is in error (IBV_EVENT_CQ_ERR injected by "
                                  "sim::FaultInjector)"));
  }
  if (num_entries < 0 || (num_entries > 0 && wc == nullptr)) {
    return VerbsError("ibv_poll_cq", EINVAL);
  }
  int count = 0;
  while (count < num_entries && !cq.entries.empty()) {
    const CqEntry& entry = cq.entries.Front();
    wc[count++] = entry.wc;
    // Polling a completion frees its queue slot and those of every earlier
    // (unsignalled) WQE of the same queue, as libmlx5 does.
    if (SimQp* qp = FindQpByNum(entry.qp_num); qp != nullptr) {
      if (entry.is_send) {
        qp->sq_reclaimed = std::max(qp->sq_reclaimed, entry.wqe_index + 1);
      } else if (entry.from_srq) {
        if (qp->srq != nullptr) ++qp->srq->reclaimed;
      } else {
        qp->rq_reclaimed = std::max(qp->rq_reclaimed, entry.wqe_index + 1);
      }
    }
    cq.entries.Pop();
  }
  return count;
}

// --- Flushes ---

void FabricCore::ScheduleFlushLocked(SimQp& qp) {
  if (qp.flush_scheduled) return;
  qp.flush_scheduled = true;
  Event event;
  event.kind = EventKind::kFlush;
  event.time = now;
  event.qp_num = qp.qp_num;
  event.epoch = qp.epoch;
  ScheduleLocked(event);
}

void FabricCore::HandleFlushLocked(const Event& event) {
  SimQp* qp = FindQpByNum(event.qp_num);
  if (qp == nullptr || qp->epoch != event.epoch || qp->state != IBV_QPS_ERR) {
    return;
  }
  qp->flush_scheduled = false;
  // Every outstanding WR completes, signalled or not.
  for (; qp->sq_active < qp->sq_posted; ++qp->sq_active) {
    const SendWqe& wqe = qp->send_slot(qp->sq_active);
    CqEntry entry;
    entry.wc.wr_id = wqe.wr_id;
    entry.wc.status = IBV_WC_WR_FLUSH_ERR;
    entry.wc.opcode = SendCompletionOpcode(wqe.opcode);
    entry.wc.qp_num = qp->qp_num;
    entry.qp_num = qp->qp_num;
    entry.wqe_index = qp->sq_active;
    entry.is_send = true;
    WriteCqeLocked(*qp->send_cq, entry);
  }
  qp->sq_next = qp->tx_wqe = qp->sq_active;
  qp->tx_packet = 0;
  qp->reads_in_flight = 0;
  // An SRQ's receives are not the QP's: they stay posted for the other QPs
  // attached to it (IBV_EVENT_QP_LAST_WQE_REACHED is not simulated), all but
  // the one a message cut short by the error had claimed.
  if (qp->srq_claimed.has_value()) {
    CqEntry entry;
    entry.wc.wr_id = qp->srq->slot(*qp->srq_claimed).wr_id;
    entry.wc.status = IBV_WC_WR_FLUSH_ERR;
    entry.wc.opcode = IBV_WC_RECV;
    entry.wc.qp_num = qp->qp_num;
    entry.qp_num = qp->qp_num;
    entry.wqe_index = *qp->srq_claimed;
    entry.from_srq = true;
    qp->srq_claimed.reset();
    WriteCqeLocked(*qp->recv_cq, entry);
  }
  for (; qp->rq_consumed < qp->rq_posted; ++qp->rq_consumed) {
    CqEntry entry;
    entry.wc.wr_id = qp->recv_slot(qp->rq_consumed).wr_id;
    entry.wc.status = IBV_WC_WR_FLUSH_ERR;
    entry.wc.opcode = IBV_WC_RECV;
    entry.wc.qp_num = qp->qp_num;
    entry.qp_num = qp->qp_num;
    entry.wqe_index = qp->rq_consumed;
    WriteCqeLocked(*qp->recv_cq, entry);
  }
}

// --- Completions ---

void FabricCore::WriteCqeLocked(SimCq& cq, const CqEntry& entry) {
  Device& device = *cq.context->device;
  if (cq.in_error() || cq.entries.full()) {
    // At the time of the event writing it, recorded already.
    trace.Record(TraceRecord::kCompletionLost, TraceWord(cq.id, entry.qp_num),
                 entry.wqe_index, entry.wc.status);
    ++device.counters.completions_lost;
    if (!cq.in_error()) {
      // Overrun is an error, never a silent drop: the CQ is unusable from
      // now on (PollCq fails with EOVERFLOW) and IBV_EVENT_CQ_ERR is raised.
      cq.overrun = true;
      ++device.counters.cq_overruns;
      RaiseCqErrorLocked(cq);
    }
    return;
  }
  trace.Record(
      TraceRecord::kCompletion, TraceWord(cq.id, entry.qp_num), entry.wqe_index,
      entry.wc.wr_id,
      TraceWord(TraceBytes(entry.wc.status, entry.wc.opcode, entry.is_send, 0),
                entry.wc.byte_len));
  cq.entries.Push(entry);
  ++device.counters.completions_by_status[entry.wc.status];
  if (cq.armed && cq.channel != nullptr &&
      (!cq.armed_solicited_only || entry.solicited ||
       entry.wc.status != IBV_WC_SUCCESS)) {
    cq.armed = false;
    cq.channel->pending_cq_ids.PushGrowing(cq.id);
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t written =
        write(cq.channel->verbs.fd, &one, sizeof(one));
  }
}

void FabricCore::RaiseCqErrorLocked(SimCq& cq) {
  RaiseAsyncEventLocked(*cq.context, IBV_EVENT_CQ_ERR, AsyncEventTarget::kCq,
                        &cq.verbs, cq.id);
}

// --- Wire and faults ---

SimQp* FabricCore::RouteLocked(SimQp& requester, Device** device) {
  *device = nullptr;
  if (requester.route_device < 0) {
    // Devices never leave a fabric, so the first match is cached until the
    // path is modified or a GID table changes (SetGidLocked forgets it).
    const ibv_ah_attr& path = requester.attr.ah_attr;
    const bool ethernet = requester.device->is_ethernet();
    for (const auto& candidate : devices) {
      if (candidate->is_ethernet() != ethernet) continue;
      bool matches = false;
      if (ethernet) {
        for (size_t i = 0; i < candidate->gid_table.size() && !matches; ++i) {
          matches =
              candidate->gid_valid[i] &&
              std::memcmp(candidate->gid_table[i].gid.raw, path.grh.dgid.raw,
                          sizeof(path.grh.dgid.raw)) == 0;
        }
      } else {
        matches = candidate->lid == path.dlid;
      }
      if (matches) {
        requester.route_device = static_cast<int>(candidate->index);
        break;
      }
    }
    if (requester.route_device < 0) return nullptr;
  }
  Device& candidate = *devices[static_cast<size_t>(requester.route_device)];
  *device = &candidate;
  if (!candidate.link_up()) return nullptr;
  return FindQpOnDevice(candidate, requester.attr.dest_qp_num);
}

uint8_t FabricCore::WireTrafficClass(const SimQp& qp) {
  // MLNX_OFED's mlx5_ib replaces the QP's traffic class with the host's
  // global tclass when the QP's path is set (modify_qp); the packets carry
  // it although the application asked for another.
  return qp.device->profile.traffic_class_override.value_or(
      qp.attr.ah_attr.grh.traffic_class);
}

Nanos FabricCore::ExtraDelayLocked(const SimQp& destination) const {
  Nanos delay{0};
  for (const FaultPlan::DelayFault& fault : faults.delays) {
    if (fault.target.Matches(destination)) delay = std::max(delay, fault.delay);
  }
  return delay;
}

namespace {

// Spends one packet of the first fault in `list` matching `destination`.
bool ConsumePacketFault(std::vector<FaultPlan::PacketFault>& list,
                        const SimQp& destination) {
  for (auto it = list.begin(); it != list.end(); ++it) {
    if (!it->target.Matches(destination)) continue;
    if (--it->remaining <= 0) list.erase(it);
    return true;
  }
  return false;
}

}  // namespace

bool FabricCore::ConsumeDropLocked(const SimQp& destination) {
  return ConsumePacketFault(faults.drops, destination);
}

bool FabricCore::ConsumeDuplicateLocked(const SimQp& destination) {
  return ConsumePacketFault(faults.duplicates, destination);
}

bool FabricCore::HasCompletionFaultLocked(const SimQp& qp) const {
  for (const FaultPlan::CompletionFault& fault : faults.completions) {
    if (fault.target.Matches(qp)) return true;
  }
  return false;
}

std::optional<ibv_wc_status> FabricCore::ConsumeCompletionFaultLocked(
    const SimQp& qp) {
  for (auto it = faults.completions.begin(); it != faults.completions.end();
       ++it) {
    if (!it->target.Matches(qp)) continue;
    const ibv_wc_status status = it->status;
    if (--it->remaining <= 0) faults.completions.erase(it);
    return status;
  }
  return std::nullopt;
}

const SimMr* FabricCore::FindMrForAccessLocked(const Device& device,
                                               const SimPd& pd, uint32_t key,
                                               uint64_t addr, uint64_t length,
                                               int required_access) const {
  const SimMr* mr = device.mrs_by_key.Find(key);
  if (mr == nullptr) return nullptr;
  if (mr->pd != &pd) return nullptr;
  if ((mr->access & required_access) != required_access) return nullptr;
  const uint64_t start = reinterpret_cast<uintptr_t>(mr->verbs.addr);
  const uint64_t size = mr->verbs.length;
  if (addr < start || length > size || addr - start > size - length) {
    return nullptr;
  }
  return mr;
}

bool FabricCore::CopySgesLocked(const Device& device, const SimPd& pd,
                                const ibv_sge* sges, uint32_t num_sge,
                                uint64_t offset, uint8_t* buffer,
                                uint64_t bytes, int required_access,
                                bool to_sges) const {
  uint64_t start = 0;  // Offset in the message of sges[i].
  for (uint32_t i = 0; i < num_sge && bytes > 0; ++i) {
    const ibv_sge& sge = sges[i];
    const uint64_t end = start + sge.length;
    if (sge.length == 0 || end <= offset) {
      start = end;
      continue;
    }
    const uint64_t skip = offset - start;
    const uint64_t chunk = std::min<uint64_t>(sge.length - skip, bytes);
    if (FindMrForAccessLocked(device, pd, sge.lkey, sge.addr + skip, chunk,
                              required_access) == nullptr) {
      return false;
    }
    void* host = AsPointer(sge.addr + skip);
    if (to_sges) {
      std::memcpy(host, buffer, chunk);
    } else {
      std::memcpy(buffer, host, chunk);
    }
    buffer += chunk;
    bytes -= chunk;
    offset += chunk;
    start = end;
  }
  return bytes == 0;
}

bool FabricCore::LocalBuffersValidLocked(SimQp& qp, const SendWqe& wqe,
                                         uint64_t index) {
  const bool gathers = CarriesPayload(wqe.opcode) && !wqe.is_inline;
  if (!gathers && wqe.opcode != IBV_WR_RDMA_READ) return true;
  const int access = gathers ? 0 : IBV_ACCESS_LOCAL_WRITE;
  const ibv_sge* sges = qp.send_sges(index);
  for (uint32_t i = 0; i < wqe.num_sge; ++i) {
    if (sges[i].length == 0) continue;
    if (FindMrForAccessLocked(*qp.device, *qp.pd, sges[i].lkey, sges[i].addr,
                              sges[i].length, access) == nullptr) {
      return false;
    }
  }
  return true;
}

bool FabricCore::RemoteKeyAllowsLocked(const SimQp& responder, uint32_t rkey,
                                       uint64_t addr, uint64_t length,
                                       int required_access) const {
  const Device& device = *responder.device;
  if (FindMrForAccessLocked(device, *responder.pd, rkey, addr, length,
                            required_access) != nullptr) {
    return true;
  }
  auto it = device.mws_by_index.find(rkey >> 8);
  if (it == device.mws_by_index.end()) return false;
  const SimMw& mw = *it->second;
  // o10-37.2.43: a type 2 window answers only requests arriving at the QP
  // it is bound to (rxe_lookup_mw's checks).
  if (!mw.bound || mw.rkey != rkey || mw.pd != responder.pd ||
      mw.qp_num != responder.qp_num) {
    return false;
  }
  if ((mw.access & required_access) != required_access) return false;
  return InsideRange(mw.addr, mw.length, addr, length);
}

ibv_wc_status FabricCore::ExecuteLocalOpLocked(SimQp& qp, const SendWqe& wqe) {
  Device& device = *qp.device;
  if (wqe.opcode == IBV_WR_LOCAL_INV) {
    // Only windows: the simulator has no fast-registration MRs to invalidate.
    auto it = device.mws_by_index.find(wqe.rkey >> 8);
    if (it == device.mws_by_index.end() || !it->second->bound ||
        it->second->rkey != wqe.rkey || it->second->pd != qp.pd) {
      return IBV_WC_LOC_QP_OP_ERR;  // rxe's status for a failed invalidate
    }
    UnbindMwLocked(*it->second);
    return IBV_WC_SUCCESS;
  }
  // IBV_WR_BIND_MW: rxe_bind_mw()'s and rxe_check_bind_mw()'s checks, in
  // their order; each failure is IBV_WC_MW_BIND_ERR (and the QP goes to ERR).
  auto it = device.mws_by_index.find(wqe.bind_mw_rkey >> 8);
  if (it == device.mws_by_index.end()) return IBV_WC_MW_BIND_ERR;
  SimMw& mw = *it->second;
  if (mw.rkey != wqe.bind_mw_rkey) return IBV_WC_MW_BIND_ERR;
  if (mw.bound) return IBV_WC_MW_BIND_ERR;              // o10-37.2.30: not free
  if (mw.pd != qp.pd) return IBV_WC_MW_BIND_ERR;        // C10-72
  if (wqe.bind_length == 0) return IBV_WC_MW_BIND_ERR;  // o10-37.2.40
  SimMr* bound_mr = device.mrs_by_key.Find(wqe.bind_mr_lkey);
  if (bound_mr == nullptr) return IBV_WC_MW_BIND_ERR;
  SimMr& mr = *bound_mr;
  if (mr.pd != qp.pd) return IBV_WC_MW_BIND_ERR;
  if ((mr.access & IBV_ACCESS_MW_BIND) == 0) return IBV_WC_MW_BIND_ERR;
  // Zero-based windows are not simulated.
  constexpr int kWindowAccess = IBV_ACCESS_REMOTE_READ |
                                IBV_ACCESS_REMOTE_WRITE |
                                IBV_ACCESS_REMOTE_ATOMIC;
  if ((wqe.bind_access & ~kWindowAccess) != 0) return IBV_WC_MW_BIND_ERR;
  // C10-74: a writable window needs a locally writable MR.
  if ((wqe.bind_access &
       (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) != 0 &&
      (mr.access & IBV_ACCESS_LOCAL_WRITE) == 0) {
    return IBV_WC_MW_BIND_ERR;
  }
  // C10-75: inside the MR.
  if (!InsideRange(reinterpret_cast<uintptr_t>(mr.verbs.addr), mr.verbs.length,
                   wqe.bind_addr, wqe.bind_length)) {
    return IBV_WC_MW_BIND_ERR;
  }
  mw.bound = true;
  mw.qp_num = qp.qp_num;
  mw.mr = &mr;
  ++mr.bound_mws;
  mw.addr = wqe.bind_addr;
  mw.length = wqe.bind_length;
  mw.access = wqe.bind_access;
  // rxe keeps the index and takes the key byte of the new rkey.
  mw.rkey = (mw.rkey & 0xffffff00u) | (wqe.bind_new_rkey & 0xffu);
  return IBV_WC_SUCCESS;
}

}  // namespace rdma_transport::sim::internal
