// The requester side of an RC QP: starting WQEs within the send window and
// the READ depth, cutting them into path-MTU packets, completing them in
// order as ACKs and READ responses arrive, and go-back-N on a sequence NAK,
// an RNR NAK or the transport timer. See fabric_core.h for the model.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>

#include "sim/internal/fabric_core.h"
#include "sim/internal/link.h"
#include "sim/internal/packets.h"
#include "verbs_shim/ib_timer_encodings.h"

namespace rdma_transport::sim::internal {
namespace {

// Work requests the NIC executes without sending anything.
bool IsLocalOp(ibv_wr_opcode opcode) {
  return opcode == IBV_WR_BIND_MW || opcode == IBV_WR_LOCAL_INV;
}

}  // namespace

void FabricCore::KickSendQueueLocked(SimQp& qp) {
  if ((qp.state != IBV_QPS_RTS && qp.state != IBV_QPS_SQD) ||
      qp.transmit_scheduled || qp.rnr_waiting || qp.tx_wqe == qp.sq_posted) {
    return;
  }
  ScheduleTransmitLocked(qp, now);
}

void FabricCore::ScheduleTransmitLocked(SimQp& qp, Nanos at) {
  if (qp.transmit_scheduled) return;
  qp.transmit_scheduled = true;
  Event& event = StartEventLocked();
  event.kind = EventKind::kTransmit;
  event.time = std::max(at, now);
  event.qp_num = qp.qp_num;
  event.epoch = qp.epoch;
  event.attempt = qp.tx_generation;
  CommitEventLocked();
}

void FabricCore::HandleTransmitLocked(const Event& event) {
  SimQp* qp = FindQpByNum(event.qp_num);
  if (qp == nullptr || qp->epoch != event.epoch ||
      qp->tx_generation != event.attempt) {
    return;
  }
  qp->transmit_scheduled = false;
  if (qp->rnr_waiting ||
      (qp->state != IBV_QPS_RTS && qp->state != IBV_QPS_SQD)) {
    return;
  }
  if (qp->tx_wqe == qp->sq_next) {
    // SQD lets the messages already started finish; nothing new starts.
    if (qp->state != IBV_QPS_RTS || qp->sq_next == qp->sq_posted) return;
    const uint64_t completed_before = qp->sq_active;
    if (!StartNextWqeLocked(*qp)) return;
    if (qp->sq_active != completed_before || qp->state != IBV_QPS_RTS) {
      return;  // Completed at once; CompleteHeadSendLocked kicked the next.
    }
  } else {
    const SendWqe& wqe = qp->send_slot(qp->tx_wqe);
    const uint32_t psn = PsnAdd(wqe.psn, qp->tx_packet);
    if (PsnDistance(qp->una_psn, psn) >= kSendWindowPackets) return;
  }
  TransmitPacketLocked(*qp);
}

bool FabricCore::StartNextWqeLocked(SimQp& qp) {
  const uint64_t index = qp.sq_next;
  SendWqe& wqe = qp.send_slot(index);
  Device& device = *qp.device;
  const bool completes_at_once = IsLocalOp(wqe.opcode) ||
                                 HasCompletionFaultLocked(qp) ||
                                 wqe.length > device.profile.max_msg_size ||
                                 !LocalBuffersValidLocked(qp, wqe, index);
  if (completes_at_once) {
    // Completions are in order: wait for those started before it.
    if (qp.sq_active != qp.sq_next) return false;
    if (std::optional<ibv_wc_status> injected =
            ConsumeCompletionFaultLocked(qp)) {
      CompleteHeadSendLocked(qp, *injected);
    } else if (IsLocalOp(wqe.opcode)) {
      // Executed by the NIC in send queue order, without a packet or a PSN.
      CompleteHeadSendLocked(qp, ExecuteLocalOpLocked(qp, wqe));
    } else if (wqe.length > device.profile.max_msg_size) {
      CompleteHeadSendLocked(qp, IBV_WC_LOC_LEN_ERR);
    } else {
      CompleteHeadSendLocked(qp, IBV_WC_LOC_PROT_ERR);
    }
    return true;
  }
  if (PsnDistance(qp.una_psn, qp.next_psn) >= kSendWindowPackets) return false;
  if (wqe.opcode == IBV_WR_RDMA_READ &&
      qp.reads_in_flight >= std::max<uint32_t>(1, qp.attr.max_rd_atomic)) {
    return false;  // Waits in the send queue, as on a NIC.
  }
  if (qp.sq_active == qp.sq_next) {
    qp.retries_left = qp.attr.retry_cnt;
    qp.rnr_retries_left = qp.attr.rnr_retry;
    qp.una_psn = qp.next_psn;
  }
  wqe.packet_count = PacketCount(wqe.length, MtuOf(qp.attr.path_mtu));
  wqe.psn = qp.next_psn;
  wqe.transmissions = 0;
  wqe.read_packets_received = 0;
  qp.next_psn = PsnAdd(qp.next_psn, wqe.packet_count);
  if (wqe.opcode == IBV_WR_RDMA_READ) ++qp.reads_in_flight;
  ++qp.sq_next;
  qp.tx_packet = 0;
  return true;
}

void FabricCore::TransmitPacketLocked(SimQp& qp) {
  const uint64_t index = qp.tx_wqe;
  SendWqe& wqe = qp.send_slot(index);
  Device& device = *qp.device;
  const uint64_t mtu = MtuOf(qp.attr.path_mtu);
  const uint32_t packet = qp.tx_packet;

  Event request;
  request.kind = EventKind::kArrive;
  request.qp_num = qp.qp_num;
  request.epoch = qp.epoch;
  request.wqe_index = index;
  request.psn = PsnAdd(wqe.psn, packet);
  request.packet = packet;
  request.opcode = wqe.opcode;
  request.solicited = wqe.solicited;
  request.imm_data = wqe.imm_data;
  request.rkey = wqe.rkey;
  uint32_t headers = 0;
  if (wqe.opcode == IBV_WR_RDMA_READ) {
    // A READ request asks for the data not yet received: all of it, or,
    // retransmitted, the rest from the first missing response packet.
    const uint64_t offset = std::min<uint64_t>(packet * mtu, wqe.length);
    request.remote_addr = wqe.remote_addr + offset;
    request.length = wqe.length - offset;
    request.packets = wqe.packet_count - packet;
    request.ack_request = true;
    headers = kRethHeader;
    ++qp.tx_wqe;
    qp.tx_packet = 0;
  } else {
    request.remote_addr = wqe.remote_addr;
    request.length = wqe.length;
    request.packets = wqe.packet_count;
    request.ack_request = AsksForAck(packet, wqe.packet_count);
    request.payload_bytes = PacketBytes(wqe.length, mtu, packet);
    if (packet == 0 && IsWrite(wqe.opcode)) headers += kRethHeader;
    if (packet + 1 == wqe.packet_count &&
        (wqe.opcode == IBV_WR_SEND_WITH_IMM ||
         wqe.opcode == IBV_WR_RDMA_WRITE_WITH_IMM)) {
      headers += kImmHeader;
    }
    if (request.payload_bytes > 0) {
      // The NIC reads the payload from host memory now, at transmission
      // (again on every retransmission); inline payloads were copied at
      // post time.
      request.payload = AcquirePayloadLocked(request.payload_bytes);
      uint8_t* out = PayloadData(request.payload);
      const uint64_t offset = packet * mtu;
      if (wqe.is_inline) {
        std::memcpy(out, qp.send_inline(index) + offset, request.payload_bytes);
      } else {
        if (!CopySgesLocked(device, *qp.pd, qp.send_sges(index), wqe.num_sge,
                            offset, out, request.payload_bytes,
                            /*required_access=*/0, /*to_sges=*/false)) {
          ReleasePayloadLocked(request);
          CompleteHeadSendLocked(qp, IBV_WC_LOC_PROT_ERR);
          return;
        }
        device.counters.dma_read_bytes += request.payload_bytes;
      }
    }
    if (++qp.tx_packet == wqe.packet_count) {
      ++qp.tx_wqe;
      qp.tx_packet = 0;
    }
  }
  ++wqe.transmissions;

  const uint8_t traffic_class = WireTrafficClass(qp);
  Nanos left = now;
  Device* responder_device = nullptr;
  if (!device.link_up()) {
    // Our own port is down: nothing leaves.
    ++device.counters.packets_sent;
    ++device.counters.packets_by_traffic_class[traffic_class];
    CountPacketLostLocked(device, qp.qp_num);
    ReleasePayloadLocked(request);
  } else if (SimQp* responder = RouteLocked(qp, &responder_device);
             responder != nullptr) {
    request.responder_device = responder_device->index;
    request.responder_qp_num = responder->qp_num;
    left = SendOnWireLocked(device, traffic_class, request, headers,
                            ExtraDelayLocked(*responder));
  } else {
    // No such GID/LID, a dead device or a port down, or no such QP: the
    // packet leaves and is lost, after its serialisation (payload and
    // all: it occupies the port as any other).
    left = ReserveEgressLocked(device, traffic_class, request, headers);
    Device& where = responder_device != nullptr ? *responder_device : device;
    CountPacketLostLocked(where, qp.qp_num);
    ReleasePayloadLocked(request);
  }

  // The timer starts when a packet leaves a QP whose timer is not running.
  if (!qp.timer_armed && qp.attr.timeout != 0) ArmTimerLocked(qp, left);
  // The next packet goes when this one has left the port (rounded down: the
  // port's own clock is in picoseconds, so nothing is lost to rounding).
  if (qp.tx_wqe != qp.sq_posted) {
    ScheduleTransmitLocked(qp,
                           std::max(now, Nanos(device.egress_free_ps / 1000)));
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
  if (qp.sq_active < qp.sq_next && wqe.opcode == IBV_WR_RDMA_READ &&
      qp.reads_in_flight > 0) {
    --qp.reads_in_flight;
  }
  ++qp.sq_active;
  qp.sq_next = std::max(qp.sq_next, qp.sq_active);
  if (qp.tx_wqe < qp.sq_active) {
    qp.tx_wqe = qp.sq_active;
    qp.tx_packet = 0;
  }
  if (status != IBV_WC_SUCCESS) {
    EnterErrorLocked(qp);
  } else {
    KickSendQueueLocked(qp);
  }
}

bool FabricCore::AcknowledgeLocked(SimQp& qp, uint32_t psn) {
  if (!PsnAtOrAfter(psn, qp.una_psn)) return true;  // Nothing new.
  bool progressed = false;
  bool passed_read = false;
  const uint64_t epoch = qp.epoch;
  while (qp.sq_active < qp.sq_next && qp.epoch == epoch) {
    const SendWqe& wqe = qp.send_slot(qp.sq_active);
    const uint32_t last = PsnAdd(wqe.psn, wqe.packet_count - 1);
    if (wqe.opcode == IBV_WR_RDMA_READ) {
      // ACKs acknowledge requests, never a READ's data: one beyond a READ
      // still missing data means its responses were lost.
      passed_read = PsnAtOrAfter(psn, last);
      break;
    }
    if (!PsnAtOrAfter(psn, last)) {
      // Part of a long message.
      qp.una_psn = PsnAdd(psn, 1);
      progressed = true;
      break;
    }
    qp.una_psn = PsnAdd(last, 1);
    progressed = true;
    CompleteHeadSendLocked(qp, IBV_WC_SUCCESS);
  }
  if (progressed && qp.epoch == epoch) NoteProgressLocked(qp);
  return !passed_read;
}

void FabricCore::NoteProgressLocked(SimQp& qp) {
  qp.implicit_nak_sent = false;
  qp.retries_left = qp.attr.retry_cnt;
  qp.rnr_retries_left = qp.attr.rnr_retry;
  if (qp.rnr_waiting) {
    qp.rnr_waiting = false;
    std::erase(rnr_waiters_, qp.qp_num);
  }
  RestartTimerLocked(qp, now);
  KickSendQueueLocked(qp);
}

void FabricCore::RestartTimerLocked(SimQp& qp, Nanos from) {
  ++qp.timer_generation;
  qp.timer_armed = false;
  if (qp.sq_active == qp.sq_next || qp.attr.timeout == 0) return;
  ArmTimerLocked(qp, from);
}

void FabricCore::ArmTimerLocked(SimQp& qp, Nanos from) {
  qp.timer_armed = true;
  Event& timer = StartEventLocked();
  timer.kind = EventKind::kRetryTimer;
  timer.time = from + AckTimeoutDuration(qp.attr.timeout);
  timer.qp_num = qp.qp_num;
  timer.epoch = qp.epoch;
  timer.wqe_index = qp.sq_active;
  timer.attempt = qp.timer_generation;
  CommitEventLocked();
}

void FabricCore::RewindLocked(SimQp& qp) {
  qp.tx_wqe = qp.sq_active;
  qp.tx_packet = qp.sq_active < qp.sq_next
                     ? PsnDistance(qp.send_slot(qp.sq_active).psn, qp.una_psn)
                     : 0;
  ++qp.tx_generation;
  qp.transmit_scheduled = false;
}

bool FabricCore::PlaceReadDataLocked(SimQp& qp, const SendWqe& wqe,
                                     uint64_t index, const Event& response) {
  if (response.payload_bytes == 0) return true;
  const uint64_t offset = response.packet * MtuOf(qp.attr.path_mtu);
  if (!CopySgesLocked(*qp.device, *qp.pd, qp.send_sges(index), wqe.num_sge,
                      offset, PayloadData(response.payload),
                      response.payload_bytes, IBV_ACCESS_LOCAL_WRITE,
                      /*to_sges=*/true)) {
    return false;
  }
  qp.device->counters.payload_bytes_delivered += response.payload_bytes;
  return true;
}

void FabricCore::HandleResponseLocked(const Event& event) {
  SimQp* qp = FindQpByNum(event.qp_num);
  if (qp == nullptr || qp->epoch != event.epoch) return;  // Reset since.
  // A port that went down while the packet was on the wire loses it.
  if (!qp->device->link_up() || ConsumeDropLocked(*qp)) {
    CountPacketLostLocked(*qp->device, qp->qp_num);
    return;
  }
  if (qp->state != IBV_QPS_RTS && qp->state != IBV_QPS_SQD) return;
  const uint64_t epoch = qp->epoch;
  // Every reply acknowledges the PSNs before its own.
  const uint32_t before =
      event.reply == Reply::kAck ? event.psn : PsnAdd(event.psn, kPsnMask);
  if (!AcknowledgeLocked(*qp, before)) {
    // An implicit NAK: a READ's responses were lost; ask for them again,
    // once until the READ makes progress.
    if (qp->epoch == epoch && !qp->implicit_nak_sent) {
      qp->implicit_nak_sent = true;
      RewindLocked(*qp);
      KickSendQueueLocked(*qp);
    }
    return;
  }
  if (qp->epoch != epoch || event.reply == Reply::kAck) return;
  if (event.psn != qp->una_psn || qp->sq_active == qp->sq_next) {
    return;  // A duplicate, or out of order: dropped.
  }
  const uint64_t index = qp->sq_active;
  const SendWqe& wqe = qp->send_slot(index);
  switch (event.reply) {
    case Reply::kAck:
      return;
    case Reply::kReadResponse: {
      if (wqe.opcode != IBV_WR_RDMA_READ) return;
      if (!PlaceReadDataLocked(*qp, wqe, index, event)) {
        CompleteHeadSendLocked(*qp, IBV_WC_LOC_PROT_ERR);
        return;
      }
      SendWqe& reading = qp->send_slot(index);
      ++reading.read_packets_received;
      qp->una_psn = PsnAdd(qp->una_psn, 1);
      if (reading.read_packets_received == reading.packet_count) {
        CompleteHeadSendLocked(*qp, IBV_WC_SUCCESS);
      }
      if (qp->epoch == epoch) NoteProgressLocked(*qp);
      return;
    }
    case Reply::kRnrNak: {
      ++qp->device->counters.rnr_naks;
      // The RNR timer replaces the transport timer until then.
      ++qp->timer_generation;
      qp->timer_armed = false;
      RewindLocked(*qp);
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
        ScheduleTransmitLocked(*qp, now + event.rnr_delay);
        return;
      }
      CompleteHeadSendLocked(*qp, IBV_WC_RNR_RETRY_EXC_ERR);
      return;
    }
    case Reply::kSequenceNak:
      RetryOrFailLocked(*qp);
      return;
    case Reply::kErrorNak:
      CompleteHeadSendLocked(*qp, event.nak_status);
      return;
  }
}

void FabricCore::HandleRetryTimerLocked(const Event& event) {
  SimQp* qp = FindQpByNum(event.qp_num);
  if (qp == nullptr || qp->epoch != event.epoch ||
      qp->timer_generation != event.attempt || !qp->timer_armed) {
    return;  // Restarted or stopped since.
  }
  qp->timer_armed = false;
  if (qp->sq_active == qp->sq_next || qp->rnr_waiting) return;
  RetryOrFailLocked(*qp);
}

void FabricCore::RetryOrFailLocked(SimQp& qp) {
  if (qp.retries_left > 0) {
    --qp.retries_left;
    ++qp.device->counters.retransmissions;
    RewindLocked(qp);
    KickSendQueueLocked(qp);
    return;
  }
  CompleteHeadSendLocked(qp, IBV_WC_RETRY_EXC_ERR);
}

}  // namespace rdma_transport::sim::internal
