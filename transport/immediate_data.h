// File: transport/immediate_data.h
//
// The wire format of the 32-bit immediate data every message carries
// (SEND_WITH_IMM, and the close message's WRITE_WITH_IMM): what the message
// is, and the credits the sender returns with it (credits.h).
//
//   bits 31..30  kind: 0 data, 1 credit, 2 close
//   bits 15..0   credits returned
//
// Host order here; network order on the wire (htonl before posting, ntohl
// after polling).
//
//   wr.imm_data = htonl(EncodeImm(ImmKind::kData, owed_credits_.Take()));
//   const uint32_t imm = ntohl(wc.imm_data);
//   if (ImmKindOf(imm) == ImmKind::kClose) ...

#ifndef RDMA_TRANSPORT_TRANSPORT_IMMEDIATE_DATA_H_
#define RDMA_TRANSPORT_TRANSPORT_IMMEDIATE_DATA_H_

#include <algorithm>
#include <cstdint>

namespace rdma_transport {

enum class ImmKind : uint32_t { kData = 0, kCredit = 1, kClose = 2 };

inline constexpr uint32_t kMaxCreditsPerImm = 0xffff;

inline uint32_t EncodeImm(ImmKind kind, uint32_t credits) {
  return (static_cast<uint32_t>(kind) << 30) |
         std::min(credits, kMaxCreditsPerImm);
}
inline ImmKind ImmKindOf(uint32_t imm) {
  return static_cast<ImmKind>(imm >> 30);
}
inline uint32_t ImmCredits(uint32_t imm) { return imm & 0xffff; }

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TRANSPORT_IMMEDIATE_DATA_H_
