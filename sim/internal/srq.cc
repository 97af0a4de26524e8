// File: sim/internal/srq.cc
//
// The shared receive queue's data path (fabric_core.h, SimSrq): posting to
// it, whether a QP has a receive, taking the next receive for an arriving
// message (in posting order, whichever QP it arrives on) and the limit
// event. The control path (create, modify, destroy) is in sim_verbs.cc.

#include <algorithm>
#include <cerrno>

#include "absl/strings/str_cat.h"
#include "sim/internal/fabric_core.h"
#include "verbs_shim/verbs_error.h"

namespace rdma_transport::sim::internal {

bool FabricCore::HasReceive(const SimQp& qp) {
  if (qp.srq != nullptr) return qp.srq->has_receive();
  return qp.rq_consumed < qp.rq_posted;
}

absl::Status FabricCore::PostSrqRecvLocked(SimSrq& srq, ibv_recv_wr* wr,
                                           ibv_recv_wr** bad_wr) {
  ++srq.device->counters.post_recv_calls;
  absl::Status status;
  bool posted = false;
  for (; wr != nullptr; wr = wr->next) {
    auto refuse = [&](int error, std::string detail) {
      if (bad_wr != nullptr) *bad_wr = wr;
      return VerbsError("ibv_post_srq_recv", error, detail);
    };
    if (std::optional<RecvRefusal> refusal = CheckRecvWr(
            *wr, srq.max_sge, "the SRQ's max_sge", srq.posted - srq.reclaimed,
            srq.max_wr, "shared receive queue")) {
      status = refuse(refusal->error, std::move(refusal->detail));
      break;
    }
    const uint64_t index = srq.posted;
    StoreRecvWr(*wr, srq.slot(index), srq.slot_sges(index));
    ++srq.posted;
    ++srq.device->counters.recv_wrs_posted;
    posted = true;
  }
  if (posted) WakeRnrWaitersOfSrqLocked(srq);
  return status;
}

void FabricCore::WakeRnrWaitersOfSrqLocked(const SimSrq& srq) {
  // Nothing to look at in the common case: no requester waits. Otherwise
  // the waiters NAKed by a QP of this SRQ, in the order they started.
  if (rnr_waiters_.empty()) return;
  std::vector<uint32_t> responders;
  for (uint32_t qp_num : rnr_waiters_) {
    const SimQp* requester = FindQpByNum(qp_num);
    if (requester == nullptr) continue;
    const SimQp* responder = FindQpByNum(requester->rnr_responder_qp_num);
    if (responder != nullptr && responder->srq == &srq &&
        std::find(responders.begin(), responders.end(), responder->qp_num) ==
            responders.end()) {
      responders.push_back(responder->qp_num);
    }
  }
  for (uint32_t qp_num : responders) WakeRnrWaitersLocked(qp_num);
}

void FabricCore::ConsumedSrqReceiveLocked(SimSrq& srq) {
  if (srq.limit == 0 || srq.posted - srq.consumed >= srq.limit) return;
  srq.limit = 0;  // one event per arming, as on hardware
  RaiseAsyncEventLocked(*srq.context, IBV_EVENT_SRQ_LIMIT_REACHED,
                        AsyncEventTarget::kSrq, &srq.verbs, srq.id);
}

}  // namespace rdma_transport::sim::internal
