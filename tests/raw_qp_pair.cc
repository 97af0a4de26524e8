// File: tests/raw_qp_pair.cc

#include "tests/raw_qp_pair.h"

#include "tests/benchmark_setup.h"
#include "transport/inline_size.h"

namespace rdma_transport {

RawQpPair::RawQpPair(Verbs& verbs, Context& sender, Context& receiver,
                     uint32_t slot_bytes)
    : verbs_(verbs),
      slot_bytes_(slot_bytes),
      send_buffer_(slot_bytes),
      recv_buffer_(size_t{slot_bytes} * kRecvSlots) {
  RcQpCaps caps;
  caps.max_send_wr = 128;
  caps.max_recv_wr = kRecvSlots;
  for (Side* side : {&tx_, &rx_}) {
    Context& context = side == &tx_ ? sender : receiver;
    side->cq =
        Must(verbs.CreateCq(context.device(), 256, nullptr, nullptr, 0), "CQ");
    side->qp = Must(context.CreateRcQp(caps, side->cq, side->cq), "QP");
  }
  usable_inline_ = tx_.qp.usable_inline;
  Must(sender.ConnectRcQp(tx_.qp.qp, 1, receiver.Endpoint(rx_.qp.qp, 2)),
       "connect");
  Must(receiver.ConnectRcQp(rx_.qp.qp, 2, sender.Endpoint(tx_.qp.qp, 1)),
       "connect");
  send_mr_ = Must(sender.RegisterMemory(send_buffer_, kLocalOnly), "MR");
  recv_mr_ = Must(receiver.RegisterMemory(recv_buffer_, kLocalWrite), "MR");
  for (uint32_t slot = 0; slot < kRecvSlots; ++slot) {
    Must(Repost(slot), "post receive");
  }
}

RawQpPair::~RawQpPair() {
  (void)send_mr_.Release();
  (void)recv_mr_.Release();
  for (Side* side : {&tx_, &rx_}) {
    (void)verbs_.DestroyQp(side->qp.qp);
    (void)verbs_.DestroyCq(side->cq);
  }
}

absl::Status RawQpPair::Repost(uint32_t slot) {
  ibv_sge sge{reinterpret_cast<uint64_t>(recv_mr_.data()) +
                  uint64_t{slot} * slot_bytes_,
              slot_bytes_, recv_mr_.lkey()};
  ibv_recv_wr wr = {};
  wr.wr_id = slot;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  return verbs_.PostRecv(rx_.qp.qp, &wr, &bad);
}

bool RawQpPair::Message(uint32_t size) {
  ibv_sge sge{reinterpret_cast<uint64_t>(send_mr_.data()), size,
              send_mr_.lkey()};
  ibv_send_wr wr = {};
  wr.wr_id = 1;
  wr.opcode = IBV_WR_SEND_WITH_IMM;
  wr.imm_data = 0;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.send_flags = IBV_SEND_SIGNALED;
  if (ShouldSendInline(size, usable_inline_)) {
    wr.send_flags |= IBV_SEND_INLINE;
  }
  ibv_send_wr* bad = nullptr;
  if (!verbs_.PostSend(tx_.qp.qp, &wr, &bad).ok()) return false;
  ibv_wc wc;
  if (!PollOne(tx_.cq, &wc)) return false;
  if (!PollOne(rx_.cq, &wc) || wc.byte_len != size) return false;
  return Repost(static_cast<uint32_t>(wc.wr_id)).ok();
}

bool RawQpPair::PollOne(ibv_cq* cq, ibv_wc* wc) {
  while (true) {
    absl::StatusOr<int> n = verbs_.PollCq(cq, 1, wc);
    if (!n.ok()) return false;
    if (*n == 1) return wc->status == IBV_WC_SUCCESS;
  }
}

}  // namespace rdma_transport
