// File: transport/wr_id.h
//
// The wire format of a Connection's work request ids (ibv_send_wr::wr_id,
// ibv_recv_wr::wr_id, echoed in ibv_wc::wr_id): the kind of work request in
// the top byte, then 16 bits naming the connection's slot in its Engine
// (engine.h; 0 for a connection without one), and in the low 40 bits the
// receive slot (kRecv) or the send-queue sequence number modulo 2^40 (every
// other kind, connection_send_queue.cc; SequenceFromWrIdValue() gives back
// the whole number, as fewer than 2^40 work requests are ever outstanding).
//
//   wr.wr_id = MakeWrId(WrKind::kRecv, engine_slot, slot);
//   if (WrIdKind(wc.wr_id) == static_cast<uint8_t>(WrKind::kRecv)) ...
//   Connection* owner = slots[WrIdEngineSlot(wc.wr_id)];
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
  // A receive of the engine's shared receive queue (shared_receive_pool.h):
  // the value is the pool slot, the engine slot bits are 0 (the engine finds
  // the connection by the completion's qp_num).
  kSrqRecv,
};

inline constexpr int kWrValueBits = 40;
inline constexpr uint64_t kWrValueMask = (1ull << kWrValueBits) - 1;
inline constexpr int kWrEngineSlotBits = 16;
// Connections one Engine can hold.
inline constexpr uint32_t kMaxEngineSlots = 1u << kWrEngineSlotBits;

inline uint64_t MakeWrId(WrKind kind, uint32_t engine_slot, uint64_t value) {
  return (static_cast<uint64_t>(kind) << 56) |
         (static_cast<uint64_t>(engine_slot & (kMaxEngineSlots - 1))
          << kWrValueBits) |
         (value & kWrValueMask);
}
// The kind byte as it came back (a completion may carry any value).
inline uint8_t WrIdKind(uint64_t wr_id) {
  return static_cast<uint8_t>(wr_id >> 56);
}
inline uint32_t WrIdEngineSlot(uint64_t wr_id) {
  return static_cast<uint32_t>(wr_id >> kWrValueBits) & (kMaxEngineSlots - 1);
}
inline uint64_t WrIdValue(uint64_t wr_id) { return wr_id & kWrValueMask; }
// `wr_id` with its value replaced, its kind and engine slot kept.
inline uint64_t WithWrIdValue(uint64_t wr_id, uint64_t value) {
  return (wr_id & ~kWrValueMask) | (value & kWrValueMask);
}
// The whole sequence number whose low 40 bits are `value`, given that it is
// below `posted` (the next sequence to be posted) by less than 2^40.
inline uint64_t SequenceFromWrIdValue(uint64_t value, uint64_t posted) {
  return posted - ((posted - value) & kWrValueMask);
}

// The operation a kind stands for, for error messages: "RDMA_WRITE",
// "SEND_WITH_IMM (credit return)", ..., "unknown operation".
const char* WrKindOperationName(uint8_t kind);

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TRANSPORT_WR_ID_H_
