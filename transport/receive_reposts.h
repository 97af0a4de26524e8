// File: transport/receive_reposts.h
//
// `ReceiveReposts` holds the slots of a connection's own receive ring that
// Receive() has emptied and not yet posted again, and posts them together,
// in one chained PostRecv: just before the credits they pay for go to the
// peer (a credit return, the close message, a data message's immediate), or
// after a data message when their credits may wait for a later one
// (credits.h, OwedCredits::RepostsMayFollow), once a quarter of the credit
// batch has gathered (RepostsMayGather: 8 on the default ring) or when no
// receive came between that message and the one before (the side has
// stopped receiving: what it holds would otherwise wait for its next
// receive).
// The peer may use a slot only once it holds its credit; a slot waiting here
// delays that credit (the peer's Send() may wait for credit that much
// sooner), as an owed credit does, and the two together go back, in a
// credit message if no data carries them, once they reach the credit batch.
// What waiting saves is a verbs call per message (a doorbell on a NIC, the
// fabric's lock on the simulator): with the default credit
// batch, one PostRecv per 8 messages of a ping-pong and per batch of a
// one-way stream instead of one each.
//
// Not for an engine's shared receive queue: a shared slot goes back to the
// pool at once, whatever becomes of the connection.
//
// Ownership: holds slot numbers only. Thread-safety: none; the Connection
// serialises access under its mutex. Errors: Post() returns the verbs
// error; the slots are forgotten either way (the QP is failing then).
//
//   ReceiveReposts reposts;
//   auto post_all = [&] {
//     const uint32_t posted = reposts.count();
//     if (reposts.Post(verbs, qp, ring_address, slot_size, lkey,
//                      engine_slot).ok()) {
//       owed.Add(posted);  // announced by the next message or credit return
//     }
//   };
//   // Receive() emptied `slot`:
//   reposts.Add(slot);
//   if (reposts.full() || owed.WorthAMessageWith(reposts.count())) post_all();
//   // A message was sent (after it, where credits.h's RepostsMayFollow
//   // allowed them to wait):
//   if (!reposts.empty() && (!reposts.TakeAddedSinceAsked() ||
//                            !owed.RepostsMayGather(reposts.count()))) {
//     post_all();
//   }

#ifndef RDMA_TRANSPORT_TRANSPORT_RECEIVE_REPOSTS_H_
#define RDMA_TRANSPORT_TRANSPORT_RECEIVE_REPOSTS_H_

#include <infiniband/verbs.h>

#include <array>
#include <cstdint>

#include "absl/status/status.h"
#include "transport/wr_id.h"
#include "verbs_shim/verbs.h"

namespace rdma_transport {

class ReceiveReposts {
 public:
  // Slots held at most; the caller posts when full.
  static constexpr uint32_t kCapacity = 16;

  uint32_t count() const { return count_; }
  bool empty() const { return count_ == 0; }
  bool full() const { return count_ == kCapacity; }

  // Requires !full().
  void Add(uint32_t slot) {
    slots_[count_++] = slot;
    added_ = true;
  }

  // True when a slot was added since the last call or Post(); clears that.
  // The message path asks after each message: false means no receive came
  // between it and the message before.
  bool TakeAddedSinceAsked() {
    const bool added = added_;
    added_ = false;
    return added;
  }

  // Posts every slot held, in the order added, as one chain: slot s is
  // `slot_size` bytes at ring_address + s * slot_size, with wr_id
  // MakeWrId(WrKind::kRecv, engine_slot, s).
  absl::Status Post(Verbs& verbs, ibv_qp* qp, uint64_t ring_address,
                    uint32_t slot_size, uint32_t lkey, uint32_t engine_slot) {
    if (count_ == 0) return absl::OkStatus();
    std::array<ibv_sge, kCapacity> sges;
    std::array<ibv_recv_wr, kCapacity> wrs;
    for (uint32_t i = 0; i < count_; ++i) {
      sges[i].addr = ring_address + uint64_t{slots_[i]} * slot_size;
      sges[i].length = slot_size;
      sges[i].lkey = lkey;
      wrs[i].wr_id = MakeWrId(WrKind::kRecv, engine_slot, slots_[i]);
      wrs[i].sg_list = &sges[i];
      wrs[i].num_sge = 1;
      wrs[i].next = i + 1 < count_ ? &wrs[i + 1] : nullptr;
    }
    count_ = 0;
    added_ = false;
    ibv_recv_wr* bad = nullptr;
    return verbs.PostRecv(qp, wrs.data(), &bad);
  }

 private:
  std::array<uint32_t, kCapacity> slots_;
  uint32_t count_ = 0;
  bool added_ = false;
};

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TRANSPORT_RECEIVE_REPOSTS_H_
