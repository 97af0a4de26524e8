// File: transport/credits.h
//
// Credit-based flow control for messaging, so that a SEND never finds the
// peer without a posted receive (no RNR, ever).
//
// Each side posts `recv_slots` receives and tells the peer in the handshake;
// the peer starts with that many credits, one per receive it may consume.
// Every message that consumes a receive at the peer costs a credit: data
// messages (SEND_WITH_IMM), credit messages and the close message. The
// receiver hands credits back once it has reposted the receives:
//  - piggybacked in the immediate data of every data message it sends, and
//  - when it owes at least `batch` credits (half the ring by default) and has
//    no data to carry them, in a zero-length credit message.
// Two credits are kept in reserve: data may not spend them; a credit return
// may spend the first, the close message the last. Without the first, two
// sides that have each filled the other's ring could never tell each other
// they have drained it; without the second, credit returns could take the
// credit the close message needs and a closing side would wait on a dead
// peer. The credit batch must stay <= recv_slots - 2 (data can leave at most
// that many credits owed), which kMinRecvSlots = 4 and the default batch of
// half the ring keep.
//
// The credits returned travel in the immediate data (immediate_data.h).
// On an engine's shared receive queue the same holds per connection: its
// recv_slots are slots of the engine's pool reserved for it
// (shared_receive_pool.h), reposted before their credit goes back.
//
// These classes hold counters only; the Connection serialises access to them.

#ifndef RDMA_TRANSPORT_TRANSPORT_CREDITS_H_
#define RDMA_TRANSPORT_TRANSPORT_CREDITS_H_

#include <algorithm>
#include <cstdint>

#include "transport/immediate_data.h"

namespace rdma_transport {

// Credits this side holds for the peer's receive ring.
class SendCredits {
 public:
  explicit SendCredits(uint32_t initial = 0) : available_(initial) {}

  uint32_t available() const { return available_; }
  // Data needs three: the one it spends and two in reserve. A credit
  // return needs two: the one it spends and the close message's. The close
  // message needs one, which nothing else may take.
  bool CanSendData() const { return available_ >= 3; }
  bool CanSendCreditReturn() const { return available_ >= 2; }
  bool CanSendClose() const { return available_ >= 1; }
  void Spend() { --available_; }
  void Return(uint32_t credits) { available_ += credits; }

 private:
  uint32_t available_;
};

// Credits this side owes the peer: receives reposted but not yet announced.
class OwedCredits {
 public:
  // Reposts that follow a message wait for this many of them, at most.
  static constexpr uint32_t kMaxRepostGather = 8;

  explicit OwedCredits(uint32_t batch = 1)
      : batch_(std::max(batch, 1u)),
        repost_gather_(std::clamp(batch_ / 4, 1u, kMaxRepostGather)) {}

  uint32_t owed() const { return owed_; }
  void Add(uint32_t credits = 1) { owed_ += credits; }
  // True when enough are owed, once `more` receives still to be reposted
  // are owed too, to be worth a message of their own.
  bool WorthAMessageWith(uint32_t more) const { return owed_ + more >= batch_; }
  // True when `reposts` receives may be posted after the next message
  // instead of before it, their credits owed until the message after: that
  // message carries all owed now, and the reposts plus one more receive
  // stay below the batch, so alternating traffic never reaches the batch
  // through the lag (no credit message of its own), and what is owed and
  // not announced stays below the batch as before.
  bool RepostsMayFollow(uint32_t reposts) const {
    return owed_ <= kMaxCreditsPerImm && reposts + 1 < batch_;
  }
  // True when `reposts` receives that followed a message may wait for more
  // before they are posted: fewer than a quarter of the batch (at most
  // kMaxRepostGather; one, so none wait, below a batch of 8). A ping-pong
  // then makes one PostRecv per that many round trips instead of one each.
  // Their credits wait with them and miss the messages sent meanwhile (the
  // peer holds up to that many fewer); what the peer has not been told
  // still stays below the batch: the message that let them follow took
  // every credit owed, and the receives that join them are posted, with
  // their credits, once owed and held reach the batch (a credit message's
  // slot, owed the moment it arrives, counts with them too).
  bool RepostsMayGather(uint32_t reposts) const {
    return reposts < repost_gather_;
  }
  uint32_t repost_gather() const { return repost_gather_; }
  // Takes what one immediate can carry.
  uint32_t Take() {
    uint32_t taken = std::min(owed_, kMaxCreditsPerImm);
    owed_ -= taken;
    return taken;
  }

 private:
  uint32_t batch_;
  uint32_t repost_gather_;
  uint32_t owed_ = 0;
};

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TRANSPORT_CREDITS_H_
