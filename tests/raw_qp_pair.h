// File: tests/raw_qp_pair.h
//
// `RawQpPair`: the raw-verbs baseline the transport's per-message cost is
// measured against (transport_benchmark's BM_RawMessage and BM_Overhead).
// Two RC QPs connected between two Contexts, one CQ per side for sends and
// receives (as a Connection has), kRecvSlots receives of one slot each posted
// on the receiving side. Message() is what a transport message costs at the
// least: post one signalled SEND_WITH_IMM (IBV_SEND_INLINE exactly when the
// transport would send it inline), poll the sender's CQ, poll the
// receiver's, repost the receive.
//
//   RawQpPair raw(verbs, client_context, server_context);
//   for (int i = 0; i < n; ++i) {
//     if (!raw.Message(64)) std::abort();
//   }
//
// Test-only; aborts (Must(), benchmark_setup.h) when a setup step fails.
// Not thread-safe: one thread, on a fabric whose posts complete at once
// (kImmediate) or that another thread runs. Destroy it before its Contexts.

#ifndef RDMA_TRANSPORT_TESTS_RAW_QP_PAIR_H_
#define RDMA_TRANSPORT_TESTS_RAW_QP_PAIR_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "transport/context.h"
#include "transport/memory_region.h"
#include "verbs_shim/verbs.h"

namespace rdma_transport {

class RawQpPair {
 public:
  static constexpr int kRecvSlots = 64;
  static constexpr uint32_t kDefaultSlot = 4096;

  // Receive slots of `slot_bytes` each.
  RawQpPair(Verbs& verbs, Context& sender, Context& receiver,
            uint32_t slot_bytes = kDefaultSlot);
  ~RawQpPair();
  RawQpPair(const RawQpPair&) = delete;
  RawQpPair& operator=(const RawQpPair&) = delete;

  // One message of `size` bytes (<= the slot size) from sender to receiver;
  // false when a verbs call or a completion failed.
  bool Message(uint32_t size);

  // The sending QP's usable inline size (inline_size.h).
  uint32_t usable_inline() const { return usable_inline_; }

 private:
  struct Side {
    ibv_cq* cq = nullptr;
    NegotiatedQp qp;
  };

  absl::Status Repost(uint32_t slot);
  // Spins on `cq` until one completion; false on a poll error or a failed
  // completion.
  bool PollOne(ibv_cq* cq, ibv_wc* wc);

  Verbs& verbs_;
  uint32_t slot_bytes_;
  std::vector<std::byte> send_buffer_;
  std::vector<std::byte> recv_buffer_;
  MemoryRegion send_mr_;
  MemoryRegion recv_mr_;
  Side tx_;
  Side rx_;
  uint32_t usable_inline_ = 0;
};

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TESTS_RAW_QP_PAIR_H_
