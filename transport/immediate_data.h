// File: transport/immediate_data.h
//
// The wire format of the 32-bit immediate data every message carries
// (SEND_WITH_IMM, and the close message's WRITE_WITH_IMM): what the message
// is, the credits the sender returns with it (credits.h), and how many of
// the peer's rendezvous messages the sender has finished reading
// (rendezvous_request.h).
//
//   bits 31..30  kind: 0 data, 1 credit, 2 close, 3 rendezvous request
//   bits 29..24  0
//   bits 23..16  rendezvous messages finished (read and released), 0..255
//   bits 15..0   credits returned
//
// Kind 3 and bits 23..16 are sent only to a peer whose handshake said it
// takes rendezvous messages (ConnectionPath::rendezvous); bits 29..24 set
// are a protocol error.
//
// Host order here; network order on the wire (htonl before posting, ntohl
// after polling).
//
//   wr.imm_data = htonl(EncodeImm(ImmKind::kData, owed_credits_.Take()));
//   wr.imm_data = htonl(EncodeImm(ImmKind::kCredit, credits, finished));
//   const uint32_t imm = ntohl(wc.imm_data);
//   if (ImmKindOf(imm) == ImmKind::kClose) ...

#ifndef RDMA_TRANSPORT_TRANSPORT_IMMEDIATE_DATA_H_
#define RDMA_TRANSPORT_TRANSPORT_IMMEDIATE_DATA_H_

#include <algorithm>
#include <cstdint>

namespace rdma_transport {

enum class ImmKind : uint32_t {
  kData = 0,
  kCredit = 1,
  kClose = 2,
  kRendezvous = 3,
};

inline constexpr uint32_t kMaxCreditsPerImm = 0xffff;
inline constexpr uint32_t kMaxFinishedPerImm = 0xff;
// Bits no version sends.
inline constexpr uint32_t kImmReservedBits = 0x3f000000;

// `credits` and `finished` are capped at what the fields hold: callers take
// no more than kMaxCreditsPerImm / kMaxFinishedPerImm.
inline uint32_t EncodeImm(ImmKind kind, uint32_t credits,
                          uint32_t finished = 0) {
  return (static_cast<uint32_t>(kind) << 30) |
         (std::min(finished, kMaxFinishedPerImm) << 16) |
         std::min(credits, kMaxCreditsPerImm);
}
inline ImmKind ImmKindOf(uint32_t imm) {
  return static_cast<ImmKind>(imm >> 30);
}
inline uint32_t ImmCredits(uint32_t imm) { return imm & 0xffff; }
// kData with no reserved bit and no finished count (credits only): the
// common case, tested with one mask.
inline bool ImmIsPlainData(uint32_t imm) { return (imm & 0xffff0000) == 0; }
static_assert((3u << 30 | kImmReservedBits | kMaxFinishedPerImm << 16) ==
              0xffff0000);
inline uint32_t ImmFinished(uint32_t imm) { return (imm >> 16) & 0xff; }

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TRANSPORT_IMMEDIATE_DATA_H_
