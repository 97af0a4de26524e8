// The responder side of an RC QP: request packets checked against the
// expected PSN, executed in PSN order, acknowledged (coalesced), NAKed on a
// sequence error (once) or an RNR, duplicates answered as a responder does,
// RDMA READs answered with their data packets within max_dest_rd_atomic.
// See fabric_core.h for the model.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>

#include "sim/internal/fabric_core.h"
#include "sim/internal/link.h"
#include "sim/internal/packets.h"
#include "verbs_shim/ib_timer_encodings.h"

namespace rdma_transport::sim::internal {

// --- The receive queue's consumption point ---

std::optional<uint64_t> FabricCore::ClaimReceiveLocked(SimQp& responder) {
  if (SimSrq* srq = responder.srq; srq != nullptr) {
    if (!responder.srq_claimed.has_value()) {
      if (!srq->has_receive()) return std::nullopt;
      responder.srq_claimed = srq->consumed++;
      ConsumedSrqReceiveLocked(*srq);
    }
    return responder.srq_claimed;
  }
  if (responder.rq_consumed == responder.rq_posted) return std::nullopt;
  return responder.rq_consumed;
}

RecvWqe& FabricCore::ReceiveWqe(SimQp& responder, uint64_t index) {
  return responder.srq != nullptr ? responder.srq->slot(index)
                                  : responder.recv_slot(index);
}

ibv_sge* FabricCore::ReceiveSges(SimQp& responder, uint64_t index) {
  return responder.srq != nullptr ? responder.srq->slot_sges(index)
                                  : responder.recv_sges(index);
}

void FabricCore::TakeReceiveLocked(SimQp& responder) {
  if (responder.srq != nullptr) {
    responder.srq_claimed.reset();
  } else {
    ++responder.rq_consumed;
  }
}

// --- Packets arriving ---

void FabricCore::HandleArriveLocked(const Event& event) {
  SimQp* requester = FindQpByNum(event.qp_num);
  if (requester == nullptr || requester->epoch != event.epoch) {
    return;  // The requester was reset or destroyed: nobody to answer.
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
  if (ConsumeDuplicateLocked(*responder)) {
    // The network delivers this packet twice: a copy right behind it.
    Event copy = event;
    if (event.payload != kNoPayload) {
      copy.payload = AcquirePayloadLocked(event.payload_bytes);
      std::memcpy(PayloadData(copy.payload), PayloadData(event.payload),
                  event.payload_bytes);
    }
    copy.time = now;
    ScheduleLocked(copy);
  }
  const uint32_t distance = PsnDistance(responder->expected_psn, event.psn);
  if (distance != 0 && distance < kPsnHalfWindow) {
    // Ahead of the expected PSN: a packet before it was lost. Discarded;
    // the first such is NAKed (PSN sequence error) so that the requester
    // goes back at once, the rest until the expected one arrives are not.
    CountPacketLostLocked(device, responder->qp_num);
    if (!responder->nak_sent) {
      responder->nak_sent = true;
      SendReplyLocked(*responder, event, Reply::kSequenceNak,
                      responder->expected_psn);
    }
    return;
  }
  if (distance != 0) {
    // A duplicate: a SEND or WRITE is acknowledged again, not executed
    // again; a READ is executed again (its data re-read).
    if (event.opcode == IBV_WR_RDMA_READ) {
      if (event.length == 0 ||
          RemoteKeyAllowsLocked(*responder, event.rkey, event.remote_addr,
                                event.length, IBV_ACCESS_REMOTE_READ)) {
        SendReadResponsesLocked(*responder, event);
      }
    } else if (event.ack_request) {
      SendReplyLocked(*responder, event, Reply::kAck,
                      PsnAdd(responder->expected_psn, kPsnMask));
    }
    return;
  }
  responder->nak_sent = false;
  const ResponderOutcome outcome =
      ExecuteRequestLocked(*requester, *responder, event);
  if (outcome.reply) {
    SendReplyLocked(*responder, event, outcome.kind, event.psn,
                    outcome.nak_status, outcome.rnr_delay);
  }
}

FabricCore::ResponderOutcome FabricCore::ExecuteRequestLocked(
    SimQp& requester, SimQp& responder, const Event& request) {
  ResponderOutcome outcome;
  Device& device = *responder.device;
  // Class C responder errors: NAK the requester and move the responder's QP
  // to ERR as well. `event` is raised when no CQE reports the error.
  auto fail = [&](ibv_wc_status requester_status,
                  std::optional<ibv_event_type> event) {
    EnterErrorLocked(responder);
    if (event.has_value()) {
      RaiseAsyncEventLocked(*responder.context, *event, AsyncEventTarget::kQp,
                            &responder.verbs, responder.qp_num);
    }
    outcome.reply = true;
    outcome.kind = Reply::kErrorNak;
    outcome.nak_status = requester_status;
    return outcome;
  };
  const ibv_wr_opcode opcode = request.opcode;
  const bool first = request.packet == 0;
  const bool last = request.packet + 1 == request.packets;

  if (opcode == IBV_WR_RDMA_READ) {
    if ((responder.attr.qp_access_flags & IBV_ACCESS_REMOTE_READ) == 0 ||
        responder.attr.max_dest_rd_atomic == 0) {
      return fail(IBV_WC_REM_INV_REQ_ERR, IBV_EVENT_QP_REQ_ERR);
    }
    // More READs outstanding than max_dest_rd_atomic: the IB spec's
    // NAK-invalid-request (rxe instead recycles its oldest resource).
    RetireReadResourcesLocked(responder, &requester);
    if (responder.read_resources.size() >= responder.attr.max_dest_rd_atomic) {
      return fail(IBV_WC_REM_INV_REQ_ERR, IBV_EVENT_QP_REQ_ERR);
    }
    if (request.length > 0 &&
        !RemoteKeyAllowsLocked(responder, request.rkey, request.remote_addr,
                               request.length, IBV_ACCESS_REMOTE_READ)) {
      return fail(IBV_WC_REM_ACCESS_ERR, IBV_EVENT_QP_ACCESS_ERR);
    }
    responder.read_resources.push_back({request.psn, request.packets});
    responder.expected_psn = PsnAdd(responder.expected_psn, request.packets);
    SendReadResponsesLocked(responder, request);
    return outcome;
  }

  if (IsWrite(opcode) && first) {
    if ((responder.attr.qp_access_flags & IBV_ACCESS_REMOTE_WRITE) == 0) {
      return fail(IBV_WC_REM_INV_REQ_ERR, IBV_EVENT_QP_REQ_ERR);
    }
    // A zero-length RDMA WRITE checks no R_Key (IB spec 9.7.5.2.3).
    if (request.length > 0 &&
        !RemoteKeyAllowsLocked(responder, request.rkey, request.remote_addr,
                               request.length, IBV_ACCESS_REMOTE_WRITE)) {
      return fail(IBV_WC_REM_ACCESS_ERR, IBV_EVENT_QP_ACCESS_ERR);
    }
  }
  std::optional<uint64_t> receive_index;
  if (NeedsReceive(opcode)) {
    receive_index = ClaimReceiveLocked(responder);
    if (!receive_index.has_value()) {
      // RNR: the PSN is not consumed, the message will come again.
      responder.nak_sent = true;
      outcome.reply = true;
      outcome.kind = Reply::kRnrNak;
      outcome.rnr_delay = RnrNakDelay(responder.attr.min_rnr_timer);
      return outcome;
    }
  }
  CqEntry entry;
  if (receive_index.has_value()) {
    const RecvWqe& receive = ReceiveWqe(responder, *receive_index);
    entry.wc.wr_id = receive.wr_id;
    entry.wc.qp_num = responder.qp_num;
    entry.wc.src_qp = requester.qp_num;
    entry.wc.slid = requester.device->lid;
    entry.wc.sl = requester.attr.ah_attr.sl;
    entry.wc.pkey_index = responder.attr.pkey_index;
    entry.wc.byte_len = static_cast<uint32_t>(request.length);
    entry.wc.opcode = opcode == IBV_WR_RDMA_WRITE_WITH_IMM
                          ? IBV_WC_RECV_RDMA_WITH_IMM
                          : IBV_WC_RECV;
    entry.qp_num = responder.qp_num;
    entry.wqe_index = *receive_index;
    entry.from_srq = responder.srq != nullptr;
    entry.solicited = request.solicited;
  }
  // A receive ends in error: its CQE says why, the requester is NAKed.
  auto fail_receive = [&](ibv_wc_status receive_status,
                          ibv_wc_status requester_status) {
    entry.wc.status = receive_status;
    entry.wc.byte_len = 0;
    TakeReceiveLocked(responder);
    WriteCqeLocked(*responder.recv_cq, entry);
    return fail(requester_status, std::nullopt);
  };

  const bool is_send = opcode == IBV_WR_SEND || opcode == IBV_WR_SEND_WITH_IMM;
  const uint64_t offset = request.packet * MtuOf(requester.attr.path_mtu);
  uint8_t* payload =
      request.payload != kNoPayload ? PayloadData(request.payload) : nullptr;
  if (is_send) {
    const RecvWqe& receive = ReceiveWqe(responder, *receive_index);
    const ibv_sge* sges = ReceiveSges(responder, *receive_index);
    if (first) {
      uint64_t capacity = 0;
      for (uint32_t i = 0; i < receive.num_sge; ++i) {
        capacity += sges[i].length;
      }
      if (request.length > capacity) {
        return fail_receive(IBV_WC_LOC_LEN_ERR, IBV_WC_REM_INV_REQ_ERR);
      }
    }
    if (request.payload_bytes > 0) {
      // Scatter the packet over the receive's buffers, at its offset.
      if (!CopySgesLocked(device, *responder.pd, sges, receive.num_sge, offset,
                          payload, request.payload_bytes,
                          IBV_ACCESS_LOCAL_WRITE, /*to_sges=*/true)) {
        return fail_receive(IBV_WC_LOC_PROT_ERR, IBV_WC_REM_OP_ERR);
      }
      device.counters.payload_bytes_delivered += request.payload_bytes;
    }
  } else if (IsWrite(opcode) && request.payload_bytes > 0) {
    std::memcpy(AsPointer(request.remote_addr + offset), payload,
                request.payload_bytes);
    device.counters.payload_bytes_delivered += request.payload_bytes;
  }
  responder.expected_psn = PsnAdd(responder.expected_psn, 1);
  if (last && receive_index.has_value()) {
    if (opcode == IBV_WR_SEND_WITH_IMM ||
        opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
      entry.wc.wc_flags |= IBV_WC_WITH_IMM;
      entry.wc.imm_data = request.imm_data;
    }
    TakeReceiveLocked(responder);
    WriteCqeLocked(*responder.recv_cq, entry);
  }
  if (request.ack_request) {
    outcome.reply = true;
    outcome.kind = Reply::kAck;
  }
  return outcome;
}

void FabricCore::RetireReadResourcesLocked(SimQp& responder,
                                           const SimQp* requester) {
  // The simulator looks at the requester (a NIC learns the same from the
  // requests that follow): a READ whose data the requester has all is done.
  auto& resources = responder.read_resources;
  size_t retired = 0;
  while (retired < resources.size()) {
    const SimQp::ReadResource& read = resources[retired];
    if (requester != nullptr &&
        PsnDistance(read.psn, requester->una_psn) < read.packets) {
      break;  // Some of its data has not reached the requester.
    }
    ++retired;
  }
  resources.erase(resources.begin(),
                  resources.begin() + static_cast<std::ptrdiff_t>(retired));
}

// --- Packets leaving ---

void FabricCore::SendReadResponsesLocked(SimQp& responder,
                                         const Event& request) {
  SimQp* requester = FindQpByNum(request.qp_num);
  if (requester == nullptr) return;
  Device& device = *responder.device;
  const uint64_t mtu = MtuOf(requester->attr.path_mtu);
  const uint8_t traffic_class = WireTrafficClass(responder);
  const Nanos delay = ExtraDelayLocked(*requester);
  for (uint32_t i = 0; i < request.packets; ++i) {
    Event response = ReplyPacket(responder, request, Reply::kReadResponse);
    response.opcode = IBV_WR_RDMA_READ;
    response.psn = PsnAdd(request.psn, i);
    response.packet = request.packet + i;
    response.payload_bytes = PacketBytes(request.length, mtu, i);
    if (response.payload_bytes > 0) {
      response.payload = AcquirePayloadLocked(response.payload_bytes);
      std::memcpy(PayloadData(response.payload),
                  AsPointer(request.remote_addr + i * mtu),
                  response.payload_bytes);
      device.counters.dma_read_bytes += response.payload_bytes;
    }
    // First, last and only responses carry an AETH; middle ones do not.
    const bool edge = i == 0 || i + 1 == request.packets;
    SendOnWireLocked(device, traffic_class, response,
                     edge ? uint32_t{kAethHeader} : uint32_t{0}, delay);
  }
}

Event FabricCore::ReplyPacket(const SimQp& responder, const Event& request,
                              Reply kind) {
  Event reply;
  reply.kind = EventKind::kResponse;
  reply.reply = kind;
  reply.qp_num = request.qp_num;
  reply.epoch = request.epoch;
  reply.wqe_index = request.wqe_index;
  reply.responder_device = request.responder_device;
  reply.responder_qp_num = responder.qp_num;
  return reply;
}

void FabricCore::SendReplyLocked(SimQp& responder, const Event& request,
                                 Reply kind, uint32_t psn,
                                 ibv_wc_status nak_status, Nanos rnr_delay) {
  SimQp* requester = FindQpByNum(request.qp_num);
  if (requester == nullptr) return;
  Event reply = ReplyPacket(responder, request, kind);
  reply.psn = psn;
  reply.nak_status = nak_status;
  reply.rnr_delay = rnr_delay;
  SendOnWireLocked(*responder.device, WireTrafficClass(responder), reply,
                   kAethHeader, ExtraDelayLocked(*requester));
}

}  // namespace rdma_transport::sim::internal
