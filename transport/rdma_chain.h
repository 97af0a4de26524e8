// File: transport/rdma_chain.h
//
// `RdmaChain`: one chain of RDMA WRITE/READ work requests laid out for a
// single ibv_post_send, in arrays allocated once (Reset()). Append() fills
// the next work request and its gather entry for one piece and links it to
// the one before; every `signal_bytes` of payload one of them is signalled
// (so that a long chain shows progress and frees send queue room as it
// goes), and SignalLast() signals the piece just appended (an op's last
// piece, the chain's end). WRITEs that fit the QP's usable inline size go
// with IBV_SEND_INLINE. Sequence numbers are not its business: the send
// queue's ledger stamps them at post time (send_queue_ledger.h).
//
//   chain.Reset(max_rdma_batch, engine_slot, usable_inline);
//   chain.Begin(kProgressSignalBytes);
//   while (!chain.full() && more) chain.Append(local, lkey, remote, rkey,
//                                              length, /*is_write=*/true);
//   chain.SignalLast();
//   status = PostSendLocked(chain.head(), chain.size());
//
// Not thread-safe (the owning Connection's mutex guards it); allocates only
// in Reset(). Append() on a full chain is a caller bug (checked by assert).

#ifndef RDMA_TRANSPORT_TRANSPORT_RDMA_CHAIN_H_
#define RDMA_TRANSPORT_TRANSPORT_RDMA_CHAIN_H_

#include <infiniband/verbs.h>

#include <cstdint>
#include <vector>

namespace rdma_transport {

class RdmaChain {
 public:
  // Room for `max_wrs` work requests, whose wr_ids name `engine_slot`
  // (wr_id.h); WRITEs of at most `usable_inline` bytes go inline.
  void Reset(uint32_t max_wrs, uint32_t engine_slot, uint32_t usable_inline);
  // Empties the chain; from now on one work request every `signal_bytes`
  // of payload (>= 1) is signalled.
  void Begin(uint64_t signal_bytes);
  // Appends `length` bytes from local `local_addr` (`lkey`) to (WRITE) or
  // from (READ) the peer's `remote_addr` (`rkey`). Returns the work request.
  ibv_send_wr& Append(uint64_t local_addr, uint32_t lkey, uint64_t remote_addr,
                      uint32_t rkey, uint64_t length, bool is_write);
  // Signals the work request appended last; the byte count for the next
  // automatic signal starts again. No-op on an empty chain.
  void SignalLast();

  ibv_send_wr* head() { return wrs_.data(); }
  const ibv_send_wr& at(uint32_t index) const { return wrs_[index]; }
  uint32_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  bool full() const { return size_ == wrs_.size(); }
  // Payload bytes of the chain as laid out.
  uint64_t bytes() const { return bytes_; }

 private:
  std::vector<ibv_send_wr> wrs_;
  std::vector<ibv_sge> sges_;
  uint32_t engine_slot_ = 0;
  uint32_t usable_inline_ = 0;
  uint32_t size_ = 0;
  uint64_t bytes_ = 0;
  uint64_t signal_bytes_ = 1;
  uint64_t unsignaled_bytes_ = 0;
};

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TRANSPORT_RDMA_CHAIN_H_
