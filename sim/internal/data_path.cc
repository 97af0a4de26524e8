// The simulated NIC's data path: posting, polling, and the event handlers
// that move messages between QPs. See fabric_core.h for the model.

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"
#include "sim/internal/fabric_core.h"
#include "verbs_shim/verbs_error.h"
#include "verbs_shim/verbs_names.h"

namespace rdma_transport::sim::internal {
namespace {

constexpr uint32_t kPsnMask = 0xFFFFFF;
// PSNs up to 2^23 behind the expected one are duplicates; ahead of it they
// are out of sequence (IB spec 9.7.4.1.2).
constexpr uint32_t kPsnHalfWindow = 0x800000;
// rnr_retry 7 means "retry forever".
constexpr uint8_t kInfiniteRnrRetry = 7;

// The local ACK timeout: 4.096 us * 2^timeout (0 means infinite; callers
// check).
Nanos TransportTimeout(uint8_t timeout) {
  return Nanos(int64_t{4096} << std::min<uint8_t>(timeout, 31));
}

// The RNR NAK timer encoding of the IB spec (table 45), in microseconds.
Nanos RnrDelay(uint8_t min_rnr_timer) {
  static constexpr int64_t kMicros[32] = {
      655360, 10,    20,    30,     40,     60,     80,     120,
      160,    240,   320,   480,    640,    960,    1280,   1920,
      2560,   3840,  5120,  7680,   10240,  15360,  20480,  30720,
      40960,  61440, 81920, 122880, 163840, 245760, 327680, 491520};
  return std::chrono::microseconds(kMicros[min_rnr_timer & 31]);
}

uint32_t PacketCount(uint64_t length, ibv_mtu path_mtu) {
  uint64_t mtu = static_cast<uint64_t>(MtuBytes(path_mtu));
  if (mtu == 0) mtu = 1024;
  return static_cast<uint32_t>(std::max<uint64_t>(1, (length + mtu - 1) / mtu));
}

bool CarriesPayload(ibv_wr_opcode opcode) {
  return opcode == IBV_WR_SEND || opcode == IBV_WR_SEND_WITH_IMM ||
         opcode == IBV_WR_RDMA_WRITE || opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
}

bool IsSupportedOpcode(int opcode) {
  return opcode == IBV_WR_SEND || opcode == IBV_WR_SEND_WITH_IMM ||
         opcode == IBV_WR_RDMA_WRITE || opcode == IBV_WR_RDMA_WRITE_WITH_IMM ||
         opcode == IBV_WR_RDMA_READ || opcode == IBV_WR_BIND_MW ||
         opcode == IBV_WR_LOCAL_INV;
}

// Work requests the NIC executes without sending anything.
bool IsLocalOp(ibv_wr_opcode opcode) {
  return opcode == IBV_WR_BIND_MW || opcode == IBV_WR_LOCAL_INV;
}

bool InsideRange(uint64_t start, uint64_t size, uint64_t addr,
                 uint64_t length) {
  return addr >= start && length <= size && addr - start <= size - length;
}

ibv_wc_opcode SendCompletionOpcode(ibv_wr_opcode opcode) {
  switch (opcode) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
      return IBV_WC_RDMA_WRITE;
    case IBV_WR_RDMA_READ:
      return IBV_WC_RDMA_READ;
    case IBV_WR_BIND_MW:
      return IBV_WC_BIND_MW;
    case IBV_WR_LOCAL_INV:
      return IBV_WC_LOCAL_INV;
    default:
      return IBV_WC_SEND;
  }
}

void* AsPointer(uint64_t address) {
  return reinterpret_cast<void*>(static_cast<uintptr_t>(address));
}

bool IsReceiving(ibv_qp_state state) {
  return state == IBV_QPS_RTR || state == IBV_QPS_RTS || state == IBV_QPS_SQD;
}

}  // namespace

// --- Posting and polling ---

absl::Status FabricCore::PostSendLocked(SimQp& qp, ibv_send_wr* wr,
                                        ibv_send_wr** bad_wr) {
  const DeviceProfile& profile = qp.device->profile;
  SimCounters& counters = qp.device->counters;
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

// --- Requester ---

void FabricCore::KickSendQueueLocked(SimQp& qp) {
  if (qp.state != IBV_QPS_RTS || qp.transmit_scheduled || qp.in_flight ||
      qp.rnr_waiting || qp.sq_active == qp.sq_posted) {
    return;
  }
  Event event;
  event.kind = EventKind::kTransmit;
  event.time = now;
  event.qp_num = qp.qp_num;
  event.epoch = qp.epoch;
  qp.transmit_scheduled = true;
  ScheduleLocked(event);
}

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

void FabricCore::HandleTransmitLocked(const Event& event) {
  SimQp* qp = FindQpByNum(event.qp_num);
  if (qp == nullptr || qp->epoch != event.epoch) return;
  qp->transmit_scheduled = false;
  if (qp->in_flight || qp->rnr_waiting || qp->sq_active == qp->sq_posted) {
    return;
  }
  // SQD lets the message already started finish; nothing new starts.
  const bool started = qp->send_slot(qp->sq_active).transmissions > 0;
  if (qp->state != IBV_QPS_RTS && !(qp->state == IBV_QPS_SQD && started)) {
    return;
  }
  TransmitHeadLocked(*qp);
}

void FabricCore::TransmitHeadLocked(SimQp& qp) {
  const uint64_t index = qp.sq_active;
  SendWqe& wqe = qp.send_slot(index);
  Device& device = *qp.device;
  if (wqe.transmissions == 0) {
    if (std::optional<ibv_wc_status> injected =
            ConsumeCompletionFaultLocked(qp)) {
      CompleteHeadSendLocked(qp, *injected);
      return;
    }
    if (IsLocalOp(wqe.opcode)) {
      // Executed by the NIC in send queue order, without a packet or a PSN.
      CompleteHeadSendLocked(qp, ExecuteLocalOpLocked(qp, wqe));
      return;
    }
    if (wqe.length > device.profile.max_msg_size) {
      CompleteHeadSendLocked(qp, IBV_WC_LOC_LEN_ERR);
      return;
    }
    wqe.packet_count = PacketCount(wqe.length, qp.attr.path_mtu);
    wqe.psn = qp.next_psn;
    qp.next_psn = (qp.next_psn + wqe.packet_count) & kPsnMask;
    qp.retries_left = qp.attr.retry_cnt;
    qp.rnr_retries_left = qp.attr.rnr_retry;
  }

  // The NIC reads the payload from host memory now, at transmission (again on
  // every retransmission); inline payloads were copied at post time.
  const ibv_sge* sges = qp.send_sges(index);
  if (CarriesPayload(wqe.opcode) && !wqe.is_inline) {
    if (qp.tx_payload.size() < wqe.length) qp.tx_payload.resize(wqe.length);
    uint8_t* out = qp.tx_payload.data();
    for (uint32_t i = 0; i < wqe.num_sge; ++i) {
      const ibv_sge& sge = sges[i];
      if (sge.length == 0) continue;
      if (FindMrForAccessLocked(device, *qp.pd, sge.lkey, sge.addr, sge.length,
                                /*required_access=*/0) == nullptr) {
        CompleteHeadSendLocked(qp, IBV_WC_LOC_PROT_ERR);
        return;
      }
      std::memcpy(out, AsPointer(sge.addr), sge.length);
      out += sge.length;
    }
    device.counters.dma_read_bytes += wqe.length;
  } else if (wqe.opcode == IBV_WR_RDMA_READ) {
    for (uint32_t i = 0; i < wqe.num_sge; ++i) {
      const ibv_sge& sge = sges[i];
      if (sge.length == 0) continue;
      if (FindMrForAccessLocked(device, *qp.pd, sge.lkey, sge.addr, sge.length,
                                IBV_ACCESS_LOCAL_WRITE) == nullptr) {
        CompleteHeadSendLocked(qp, IBV_WC_LOC_PROT_ERR);
        return;
      }
    }
  }

  ++wqe.transmissions;
  ++qp.attempt;
  qp.in_flight = true;
  ++device.counters.packets_sent;
  ++device.counters.packets_by_traffic_class[WireTrafficClass(qp)];
  const uint64_t request_bytes =
      wqe.opcode == IBV_WR_RDMA_READ ? 0 : wqe.length;
  const Nanos wire_time = WireTime(request_bytes);

  Device* responder_device = nullptr;
  if (!device.link_up()) {
    // Our own port is down: nothing leaves.
    CountPacketLostLocked(device, qp.qp_num);
  } else if (SimQp* responder = RouteLocked(qp, &responder_device);
             responder != nullptr) {
    Event arrive;
    arrive.kind = EventKind::kArrive;
    arrive.time = now + wire_time + ExtraDelayLocked(*responder);
    arrive.qp_num = qp.qp_num;
    arrive.epoch = qp.epoch;
    arrive.wqe_index = index;
    arrive.attempt = qp.attempt;
    arrive.responder_device = responder_device->index;
    arrive.responder_qp_num = responder->qp_num;
    ScheduleLocked(arrive);
  } else {
    // No such GID/LID, a dead device or a port down, or no such QP: the
    // packet is lost.
    Device& where = responder_device != nullptr ? *responder_device : device;
    CountPacketLostLocked(where, qp.qp_num);
  }

  if (qp.attr.timeout != 0) {
    Event timer;
    timer.kind = EventKind::kRetryTimer;
    const uint64_t response_bytes =
        wqe.opcode == IBV_WR_RDMA_READ ? wqe.length : 0;
    timer.time = now + wire_time + WireTime(response_bytes) +
                 TransportTimeout(qp.attr.timeout);
    timer.qp_num = qp.qp_num;
    timer.epoch = qp.epoch;
    timer.wqe_index = index;
    timer.attempt = qp.attempt;
    ScheduleLocked(timer);
  }
}

void FabricCore::CompleteHeadSendLocked(SimQp& qp, ibv_wc_status status) {
  const uint64_t index = qp.sq_active;
  const SendWqe& wqe = qp.send_slot(index);
  if (status != IBV_WC_SUCCESS || wqe.signaled) {
    CqEntry entry;
    entry.wc.wr_id = wqe.wr_id;
    entry.wc.status = status;
    entry.wc.opcode = SendCompletionOpcode(wqe.opcode);
    entry.wc.byte_len =
        status == IBV_WC_SUCCESS ? static_cast<uint32_t>(wqe.length) : 0;
    entry.wc.qp_num = qp.qp_num;
    entry.qp_num = qp.qp_num;
    entry.wqe_index = index;
    entry.is_send = true;
    WriteCqeLocked(*qp.send_cq, entry);
  }
  ++qp.sq_active;
  qp.in_flight = false;
  if (status != IBV_WC_SUCCESS) {
    EnterErrorLocked(qp);
  } else {
    KickSendQueueLocked(qp);
  }
}

void FabricCore::HandleResponseLocked(const Event& event) {
  SimQp* qp = FindQpByNum(event.qp_num);
  if (qp == nullptr || qp->epoch != event.epoch ||
      qp->sq_active != event.wqe_index || qp->sq_active == qp->sq_posted) {
    return;  // The requester has moved on: a stale duplicate.
  }
  // A port that went down while the packet was on the wire loses it.
  if (!qp->device->link_up() || ConsumeDropLocked(*qp)) {
    CountPacketLostLocked(*qp->device, qp->qp_num);
    return;
  }
  const SendWqe& wqe = qp->send_slot(event.wqe_index);
  switch (event.reply) {
    case Reply::kAck: {
      // Any acknowledgement of the head WQE completes it, even one answering
      // an earlier transmission.
      if (qp->rnr_waiting) {
        qp->rnr_waiting = false;
        std::erase(rnr_waiters_, qp->qp_num);
      }
      qp->in_flight = false;
      if (wqe.opcode == IBV_WR_RDMA_READ) {
        const ibv_sge* sges = qp->send_sges(event.wqe_index);
        const uint8_t* in = qp->read_payload.data();
        for (uint32_t i = 0; i < wqe.num_sge; ++i) {
          const ibv_sge& sge = sges[i];
          if (sge.length == 0) continue;
          if (FindMrForAccessLocked(*qp->device, *qp->pd, sge.lkey, sge.addr,
                                    sge.length,
                                    IBV_ACCESS_LOCAL_WRITE) == nullptr) {
            CompleteHeadSendLocked(*qp, IBV_WC_LOC_PROT_ERR);
            return;
          }
          std::memcpy(AsPointer(sge.addr), in, sge.length);
          in += sge.length;
        }
        qp->device->counters.payload_bytes_delivered += wqe.length;
      }
      CompleteHeadSendLocked(*qp, IBV_WC_SUCCESS);
      return;
    }
    case Reply::kRnrNak: {
      if (!qp->in_flight || event.attempt != qp->attempt) return;
      qp->in_flight = false;
      ++qp->device->counters.rnr_naks;
      if (qp->attr.rnr_retry == kInfiniteRnrRetry) {
        // Retry forever: wait until the responder has a receive posted.
        qp->rnr_waiting = true;
        qp->rnr_responder_qp_num = event.responder_qp_num;
        qp->rnr_resume_not_before = now + event.rnr_delay;
        rnr_waiters_.push_back(qp->qp_num);
        SimQp* responder = FindQpByNum(event.responder_qp_num);
        if (responder == nullptr || !IsReceiving(responder->state) ||
            HasReceive(*responder)) {
          WakeRnrWaitersLocked(event.responder_qp_num);
        }
        return;
      }
      if (qp->rnr_retries_left > 0) {
        --qp->rnr_retries_left;
        ++qp->device->counters.retransmissions;
        Event retry;
        retry.kind = EventKind::kTransmit;
        retry.time = now + event.rnr_delay;
        retry.qp_num = qp->qp_num;
        retry.epoch = qp->epoch;
        qp->transmit_scheduled = true;
        ScheduleLocked(retry);
        return;
      }
      CompleteHeadSendLocked(*qp, IBV_WC_RNR_RETRY_EXC_ERR);
      return;
    }
    case Reply::kErrorNak:
      if (!qp->in_flight || event.attempt != qp->attempt) return;
      CompleteHeadSendLocked(*qp, event.nak_status);
      return;
  }
}

void FabricCore::HandleRetryTimerLocked(const Event& event) {
  SimQp* qp = FindQpByNum(event.qp_num);
  if (qp == nullptr || qp->epoch != event.epoch ||
      qp->sq_active != event.wqe_index || !qp->in_flight ||
      qp->attempt != event.attempt) {
    return;  // Answered in time, or superseded.
  }
  qp->in_flight = false;
  if (qp->retries_left > 0) {
    --qp->retries_left;
    ++qp->device->counters.retransmissions;
    TransmitHeadLocked(*qp);
    return;
  }
  CompleteHeadSendLocked(*qp, IBV_WC_RETRY_EXC_ERR);
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
  // An SRQ's receives are not the QP's: they stay posted for the other QPs
  // attached to it (IBV_EVENT_QP_LAST_WQE_REACHED is not simulated).
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

// --- Responder ---

void FabricCore::HandleArriveLocked(const Event& event) {
  SimQp* requester = FindQpByNum(event.qp_num);
  if (requester == nullptr || requester->epoch != event.epoch ||
      requester->sq_active != event.wqe_index ||
      requester->sq_active == requester->sq_posted) {
    // The requester completed this WQE already (an earlier copy was
    // answered) or was reset: this copy is a late duplicate.
    return;
  }
  Device& device = *devices[event.responder_device];
  SimQp* responder = nullptr;
  if (device.link_up()) {
    responder = FindQpOnDevice(device, event.responder_qp_num);
  }
  if (responder == nullptr || ConsumeDropLocked(*responder) ||
      !IsReceiving(responder->state)) {
    CountPacketLostLocked(device, event.responder_qp_num);
    return;
  }
  const SendWqe& wqe = requester->send_slot(event.wqe_index);
  const uint32_t distance = (wqe.psn - responder->expected_psn) & kPsnMask;
  if (distance != 0 && distance < kPsnHalfWindow) {
    // Ahead of the expected PSN: out of sequence, silently discarded.
    CountPacketLostLocked(device, responder->qp_num);
    return;
  }
  const bool duplicate = distance != 0;
  const ResponderOutcome outcome = ExecuteRequestLocked(
      *requester, wqe, event.wqe_index, *responder, duplicate);

  ++device.counters.packets_sent;
  ++device.counters.packets_by_traffic_class[WireTrafficClass(*responder)];
  Event reply;
  reply.kind = EventKind::kResponse;
  reply.time =
      now + WireTime(outcome.response_bytes) + ExtraDelayLocked(*requester);
  reply.qp_num = requester->qp_num;
  reply.epoch = event.epoch;
  reply.wqe_index = event.wqe_index;
  reply.attempt = event.attempt;
  reply.responder_device = event.responder_device;
  reply.responder_qp_num = responder->qp_num;
  reply.reply = outcome.reply;
  reply.nak_status = outcome.nak_status;
  reply.rnr_delay = outcome.rnr_delay;
  ScheduleLocked(reply);
}

FabricCore::ResponderOutcome FabricCore::ExecuteRequestLocked(
    SimQp& requester, const SendWqe& wqe, uint64_t wqe_index, SimQp& responder,
    bool duplicate) {
  ResponderOutcome outcome;
  // A duplicate is acknowledged again without executing it again, except an
  // RDMA READ, whose response is regenerated.
  if (duplicate && wqe.opcode != IBV_WR_RDMA_READ) return outcome;

  Device& device = *responder.device;
  // Class C responder errors: NAK the requester and move the responder's QP to
  // ERR as well. `event` is raised when no CQE reports the error.
  auto fail = [&](ibv_wc_status requester_status,
                  std::optional<ibv_event_type> event) {
    EnterErrorLocked(responder);
    if (event.has_value()) {
      RaiseAsyncEventLocked(*responder.context, *event, AsyncEventTarget::kQp,
                            &responder.verbs, responder.qp_num);
    }
    outcome.reply = Reply::kErrorNak;
    outcome.nak_status = requester_status;
    return outcome;
  };
  const uint8_t* payload = wqe.is_inline ? requester.send_inline(wqe_index)
                                         : requester.tx_payload.data();
  const bool is_write = wqe.opcode == IBV_WR_RDMA_WRITE ||
                        wqe.opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
  const bool needs_receive = wqe.opcode == IBV_WR_SEND ||
                             wqe.opcode == IBV_WR_SEND_WITH_IMM ||
                             wqe.opcode == IBV_WR_RDMA_WRITE_WITH_IMM;

  if (is_write) {
    if ((responder.attr.qp_access_flags & IBV_ACCESS_REMOTE_WRITE) == 0) {
      return fail(IBV_WC_REM_INV_REQ_ERR, IBV_EVENT_QP_REQ_ERR);
    }
    // A zero-length RDMA WRITE checks no R_Key (IB spec 9.7.5.2.3).
    if (wqe.length > 0 &&
        !RemoteKeyAllowsLocked(responder, wqe.rkey, wqe.remote_addr, wqe.length,
                               IBV_ACCESS_REMOTE_WRITE)) {
      return fail(IBV_WC_REM_ACCESS_ERR, IBV_EVENT_QP_ACCESS_ERR);
    }
  }
  if (wqe.opcode == IBV_WR_RDMA_READ) {
    if ((responder.attr.qp_access_flags & IBV_ACCESS_REMOTE_READ) == 0 ||
        responder.attr.max_dest_rd_atomic == 0) {
      return fail(IBV_WC_REM_INV_REQ_ERR, IBV_EVENT_QP_REQ_ERR);
    }
    if (wqe.length > 0 &&
        !RemoteKeyAllowsLocked(responder, wqe.rkey, wqe.remote_addr, wqe.length,
                               IBV_ACCESS_REMOTE_READ)) {
      return fail(IBV_WC_REM_ACCESS_ERR, IBV_EVENT_QP_ACCESS_ERR);
    }
    if (requester.read_payload.size() < wqe.length) {
      requester.read_payload.resize(wqe.length);
    }
    if (wqe.length > 0) {
      std::memcpy(requester.read_payload.data(), AsPointer(wqe.remote_addr),
                  wqe.length);
    }
    device.counters.dma_read_bytes += wqe.length;
    outcome.response_bytes = wqe.length;
  }
  if (needs_receive && !HasReceive(responder)) {
    outcome.reply = Reply::kRnrNak;
    outcome.rnr_delay = RnrDelay(responder.attr.min_rnr_timer);
    return outcome;  // The PSN is not consumed: the request will come again.
  }
  if (is_write && wqe.length > 0) {
    std::memcpy(AsPointer(wqe.remote_addr), payload, wqe.length);
    device.counters.payload_bytes_delivered += wqe.length;
  }
  if (needs_receive) {
    SimSrq* srq = responder.srq;
    const uint64_t receive_index =
        srq != nullptr ? srq->consumed++ : responder.rq_consumed++;
    const RecvWqe& receive = srq != nullptr
                                 ? srq->slot(receive_index)
                                 : responder.recv_slot(receive_index);
    const ibv_sge* receive_sges = srq != nullptr
                                      ? srq->slot_sges(receive_index)
                                      : responder.recv_sges(receive_index);
    if (srq != nullptr) ConsumedSrqReceiveLocked(*srq);
    CqEntry entry;
    entry.wc.wr_id = receive.wr_id;
    entry.wc.qp_num = responder.qp_num;
    entry.wc.src_qp = requester.qp_num;
    entry.wc.slid = requester.device->lid;
    entry.wc.sl = requester.attr.ah_attr.sl;
    entry.wc.pkey_index = responder.attr.pkey_index;
    entry.wc.byte_len = static_cast<uint32_t>(wqe.length);
    entry.qp_num = responder.qp_num;
    entry.wqe_index = receive_index;
    entry.from_srq = srq != nullptr;
    entry.solicited = wqe.solicited;
    if (wqe.opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
      entry.wc.opcode = IBV_WC_RECV_RDMA_WITH_IMM;
    } else {
      entry.wc.opcode = IBV_WC_RECV;
      // Scatter the payload over the receive's buffers.
      const ibv_sge* sges = receive_sges;
      uint64_t capacity = 0;
      for (uint32_t i = 0; i < receive.num_sge; ++i) {
        capacity += sges[i].length;
      }
      if (wqe.length > capacity) {
        entry.wc.status = IBV_WC_LOC_LEN_ERR;
        entry.wc.byte_len = 0;
        WriteCqeLocked(*responder.recv_cq, entry);
        return fail(IBV_WC_REM_INV_REQ_ERR, std::nullopt);
      }
      uint64_t offset = 0;
      for (uint32_t i = 0; i < receive.num_sge && offset < wqe.length; ++i) {
        const ibv_sge& sge = sges[i];
        const uint64_t chunk =
            std::min<uint64_t>(sge.length, wqe.length - offset);
        if (chunk == 0) continue;
        if (FindMrForAccessLocked(device, *responder.pd, sge.lkey, sge.addr,
                                  chunk, IBV_ACCESS_LOCAL_WRITE) == nullptr) {
          entry.wc.status = IBV_WC_LOC_PROT_ERR;
          entry.wc.byte_len = 0;
          WriteCqeLocked(*responder.recv_cq, entry);
          return fail(IBV_WC_REM_OP_ERR, std::nullopt);
        }
        std::memcpy(AsPointer(sge.addr), payload + offset, chunk);
        offset += chunk;
      }
      device.counters.payload_bytes_delivered += wqe.length;
    }
    if (wqe.opcode == IBV_WR_SEND_WITH_IMM ||
        wqe.opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
      entry.wc.wc_flags |= IBV_WC_WITH_IMM;
      entry.wc.imm_data = wqe.imm_data;
    }
    WriteCqeLocked(*responder.recv_cq, entry);
  }
  if (!duplicate) {
    responder.expected_psn =
        (responder.expected_psn + wqe.packet_count) & kPsnMask;
  }
  return outcome;
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

Nanos FabricCore::WireTime(uint64_t bytes) const {
  Nanos serialisation{0};
  if (options.link_gbps > 0) {
    serialisation = Nanos(static_cast<int64_t>(bytes * 8 / options.link_gbps));
  }
  return options.link_latency + serialisation;
}

Nanos FabricCore::ExtraDelayLocked(const SimQp& destination) const {
  Nanos delay{0};
  for (const FaultPlan::DelayFault& fault : faults.delays) {
    if (fault.target.Matches(destination)) delay = std::max(delay, fault.delay);
  }
  return delay;
}

bool FabricCore::ConsumeDropLocked(const SimQp& destination) {
  for (auto it = faults.drops.begin(); it != faults.drops.end(); ++it) {
    if (!it->target.Matches(destination)) continue;
    if (--it->remaining <= 0) faults.drops.erase(it);
    return true;
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
  auto it = device.mrs_by_key.find(key);
  if (it == device.mrs_by_key.end()) return nullptr;
  const SimMr* mr = it->second;
  if (mr->pd != &pd) return nullptr;
  if ((mr->access & required_access) != required_access) return nullptr;
  const uint64_t start = reinterpret_cast<uintptr_t>(mr->verbs.addr);
  const uint64_t size = mr->verbs.length;
  if (addr < start || length > size || addr - start > size - length) {
    return nullptr;
  }
  return mr;
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
  auto mr_it = device.mrs_by_key.find(wqe.bind_mr_lkey);
  if (mr_it == device.mrs_by_key.end()) return IBV_WC_MW_BIND_ERR;
  SimMr& mr = *mr_it->second;
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
