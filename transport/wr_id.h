// File: transport/wr_id.h
//
// The wire format of a Connection's work request ids (ibv_send_wr::wr_id,
// ibv_recv_wr::wr_id, echoed in ibv_wc::wr_id): the kind of work request in
// the top byte, and below it, in 56 bits, the receive slot (kRecv) or the
// send-queue sequence number (every other kind, connection_send_queue.cc).
//
//   wr.wr_id = MakeWrId(WrKind::kRecv, slot);
//   if (WrIdKind(wc.wr_id) == static_cast<uint8_t>(WrKind::kRecv)) ...
//
// Internal to //transport:transport (connection.h names WrKind privately).

#ifndef RDMA_TRANSPORT_TRANSPORT_WR_ID_H_
#define RDMA_TRANSPORT_TRANSPORT_WR_ID_H_

#include <cstdint>

namespace rdma_transport {

enum class WrKind : uint8_t {
  kRecv = 1,
  kSendData,
  kSendCredit,
  kClose,
  kWrite,
  kRead,
  kKeepalive,
  kBind,
};

inline constexpr uint64_t kWrValueMask = (1ull << 56) - 1;

inline uint64_t MakeWrId(WrKind kind, uint64_t value) {
  return (static_cast<uint64_t>(kind) << 56) | (value & kWrValueMask);
}
// The kind byte as it came back (a completion may carry any value).
inline uint8_t WrIdKind(uint64_t wr_id) {
  return static_cast<uint8_t>(wr_id >> 56);
}
inline uint64_t WrIdValue(uint64_t wr_id) { return wr_id & kWrValueMask; }
// `wr_id` with its value replaced, its kind kept.
inline uint64_t WithWrIdValue(uint64_t wr_id, uint64_t value) {
  return (wr_id & ~kWrValueMask) | (value & kWrValueMask);
}

// The operation a kind stands for, for error messages: "RDMA_WRITE",
// "SEND_WITH_IMM (credit return)", ..., "unknown operation".
const char* WrKindOperationName(uint8_t kind);

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TRANSPORT_WR_ID_H_
