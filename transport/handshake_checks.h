// File: transport/handshake_checks.h
//
// The value checks of handshake frames (handshake.h) that encoding and
// decoding share, so that EncodeHandshake refuses exactly what decoding
// would: known frame types, the body length a type and format allow, the
// endpoint fields of HELLO and ACCEPT, token and reason lengths, and a
// whole message before it is written. Each fails with kInvalidArgument
// naming the field and the value. Internal to //transport:handshake.

#ifndef RDMA_TRANSPORT_TRANSPORT_HANDSHAKE_CHECKS_H_
#define RDMA_TRANSPORT_TRANSPORT_HANDSHAKE_CHECKS_H_

#include <cstddef>
#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "transport/handshake.h"
#include "transport/qp_bringup.h"

namespace rdma_transport {
namespace handshake_internal {

// The HELLO / ACCEPT body before the token: every field the header's table
// lists, qp_num through the reserved u16 after token_len. The token bytes
// follow this fixed part, so every field sits at a fixed offset.
inline constexpr size_t kEndpointFieldsSize = kEndpointBodySize;
// The REJECT body before the reason: reason_len.
inline constexpr size_t kReasonLengthSize = 2;

static_assert(kEndpointFieldsSize + kMaxTokenLength <= kMaxHandshakeBody);
static_assert(kReasonLengthSize + kMaxReasonLength <= kMaxHandshakeBody);

inline bool IsPrintable(uint8_t c) { return c >= 0x20 && c <= 0x7e; }

bool IsKnownType(uint16_t version, uint8_t type);
absl::Status UnknownType(uint16_t version, unsigned type);
// A frame format this side speaks (2 or 3), and a type that format has.
absl::Status CheckFormatAndType(uint16_t version, HandshakeType type);
// What the body length of a `type` frame of `version` may be, before its
// fields are read: exact for format-2 ACCEPT and READY, a range otherwise.
// Shared by header and body decoding so a reader of a stream refuses a bad
// length before it waits for the body.
absl::Status CheckBodyLength(uint16_t version, HandshakeType type,
                             uint64_t length);
// The value checks HELLO and ACCEPT share, for encoding and decoding alike.
absl::Status CheckEndpoint(HandshakeType type, const QpEndpoint& endpoint,
                           uint32_t recv_slots, uint32_t slot_size);
absl::Status CheckTokenLength(HandshakeType type, size_t token_len);
absl::Status CheckReason(HandshakeType type, std::span<const uint8_t> reason);
// Everything decoding would check of `message`, before it is encoded.
absl::Status CheckMessage(const HandshakeMessage& message);

}  // namespace handshake_internal
}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TRANSPORT_HANDSHAKE_CHECKS_H_
