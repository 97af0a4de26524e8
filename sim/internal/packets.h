// File: sim/internal/packets.h
//
// PSN arithmetic and the packet rules shared by the requester
// (requester.cc) and the responder (responder.cc): how a message is cut into
// path-MTU packets, which packets ask for an acknowledgement, and the
// transport's timers. Pure functions; no state.

#ifndef RDMA_TRANSPORT_SIM_INTERNAL_PACKETS_H_
#define RDMA_TRANSPORT_SIM_INTERNAL_PACKETS_H_

#include <infiniband/verbs.h>

#include <algorithm>
#include <cstdint>

namespace rdma_transport::sim::internal {

inline constexpr uint32_t kPsnMask = 0xFFFFFF;
// PSNs up to 2^23 behind the expected one are duplicates; ahead of it they
// are out of sequence (IB spec 9.7.4.1.2).
inline constexpr uint32_t kPsnHalfWindow = 0x800000;
// The requester's send window: at most this many PSNs unacknowledged. A new
// WQE starts only inside it; a packet leaves only inside it.
inline constexpr uint32_t kSendWindowPackets = 1024;
// Besides the last packet of each message, every this many packets of a
// long message ask for an ACK (the AckReq bit), so that the window keeps
// moving (well inside kSendWindowPackets).
inline constexpr uint32_t kAckRequestInterval = 64;
// rnr_retry 7 means "retry forever".
inline constexpr uint8_t kInfiniteRnrRetry = 7;

inline uint32_t PsnAdd(uint32_t psn, uint32_t n) {
  return (psn + n) & kPsnMask;
}
// How far `psn` is ahead of `base` (0 .. 2^24 - 1).
inline uint32_t PsnDistance(uint32_t base, uint32_t psn) {
  return (psn - base) & kPsnMask;
}
// `psn` is `base` or after it, within half the PSN space.
inline bool PsnAtOrAfter(uint32_t psn, uint32_t base) {
  return PsnDistance(base, psn) < kPsnHalfWindow;
}

// Bytes of payload per packet at `path_mtu` (1024 if it was never set).
inline uint64_t MtuOf(ibv_mtu path_mtu) {
  const int code = static_cast<int>(path_mtu);
  return code >= 1 && code <= 5 ? uint64_t{128} << code : 1024;
}

// Packets of a message of `length` bytes (at least one).
inline uint32_t PacketCount(uint64_t length, uint64_t mtu) {
  return static_cast<uint32_t>(std::max<uint64_t>(1, (length + mtu - 1) / mtu));
}

// Bytes of packet `packet` of a message of `length` bytes.
inline uint32_t PacketBytes(uint64_t length, uint64_t mtu, uint32_t packet) {
  const uint64_t offset = uint64_t{packet} * mtu;
  return offset >= length
             ? 0
             : static_cast<uint32_t>(std::min(mtu, length - offset));
}

inline bool AsksForAck(uint32_t packet, uint32_t packets) {
  return packet + 1 == packets || (packet + 1) % kAckRequestInterval == 0;
}

inline bool CarriesPayload(ibv_wr_opcode opcode) {
  return opcode == IBV_WR_SEND || opcode == IBV_WR_SEND_WITH_IMM ||
         opcode == IBV_WR_RDMA_WRITE || opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
}

inline bool IsWrite(ibv_wr_opcode opcode) {
  return opcode == IBV_WR_RDMA_WRITE || opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
}

// Opcodes that consume a receive WR at the responder.
inline bool NeedsReceive(ibv_wr_opcode opcode) {
  return opcode == IBV_WR_SEND || opcode == IBV_WR_SEND_WITH_IMM ||
         opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
}

inline ibv_wc_opcode SendCompletionOpcode(ibv_wr_opcode opcode) {
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

inline void* AsPointer(uint64_t address) {
  return reinterpret_cast<void*>(static_cast<uintptr_t>(address));
}

inline bool IsReceiving(ibv_qp_state state) {
  return state == IBV_QPS_RTR || state == IBV_QPS_RTS || state == IBV_QPS_SQD;
}

}  // namespace rdma_transport::sim::internal

#endif  // RDMA_TRANSPORT_SIM_INTERNAL_PACKETS_H_
