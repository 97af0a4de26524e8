// File: transport/handshake.h
//
// The out-of-band connection handshake: what two sides exchange over TCP so
// each can bring its RC QP up against the other's. A versioned,
// length-prefixed binary format; every integer is big-endian.
//
//   header (12 bytes)
//     magic    u32  0x52445450 ("RDTP")
//     version  u16  kHandshakeVersion
//     type     u8   1 HELLO (client -> server), 2 ACCEPT (server -> client),
//                   3 READY (client -> server), 4 REJECT (either way)
//     flags    u8   0
//     length   u32  length of the body that follows, <= kMaxHandshakeBody
//   HELLO / ACCEPT body (kEndpointBodySize = 60 fixed bytes, then the token)
//     qp_num      u32  1..0xFFFFFF
//     psn         u32  0..0xFFFFFF
//     gid         16 bytes
//     lid         u16
//     port        u8   >= 1
//     reserved    u8   0
//     mtu         u16  256, 512, 1024, 2048 or 4096
//     reserved    u16  0
//     recv_slots  u32  kMinRecvSlots..kMaxRecvSlots: receive WRs posted
//     slot_size   u32  0..kMaxSlotSize: largest message a slot holds (0: only
//                      empty messages)
//     probe_addr  u64  where the peer's keepalive probes write one byte
//     probe_rkey  u32  its rkey (both 0: no probe slot; zero-byte probes)
//     reserved    u32  0
//     token_len   u16  0..kMaxTokenLength (HELLO only; ACCEPT carries 0)
//     reserved    u16  0
//     token       token_len bytes, arbitrary binary
//   READY body: empty.
//   REJECT body: reason_len u16 (1..kMaxReasonLength), then the reason, in
//     printable ASCII.
//
// The sequence: the client sends HELLO; the server checks it (version, token,
// values), brings its QP to RTS with receives posted and answers ACCEPT (or
// REJECT and closes); the client brings its QP to RTS, posts its receives and
// sends READY, after which both may send.
//
// Version 2 added the probe slot (version 1 had a 44-byte body without it);
// a peer speaking another version is refused with a reason naming both.
//
// Decoding is strict: wrong magic or version, an unknown type, non-zero
// flags or reserved fields, a body longer than kMaxHandshakeBody, a body
// whose length is not exactly what its fields need, truncated input, and any
// value out of its range fail with kInvalidArgument naming the field and the
// value. DecodeHandshakeHeader already checks the body length its type allows
// (READY 0, ACCEPT 60, HELLO 60..316, REJECT 3..514), so a stream reader
// refuses an absurd length before waiting for the body. EncodeHandshake
// ignores the fields a type does not carry (the endpoint of READY and
// REJECT) and refuses a token on anything but HELLO or a reason on anything
// but REJECT, which would otherwise be dropped silently. Functions are
// stateless and thread-safe; decoding never reads out of `bytes`.

#ifndef RDMA_TRANSPORT_TRANSPORT_HANDSHAKE_H_
#define RDMA_TRANSPORT_TRANSPORT_HANDSHAKE_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "transport/qp_bringup.h"

namespace rdma_transport {

inline constexpr uint32_t kHandshakeMagic = 0x52445450;  // "RDTP"
inline constexpr uint16_t kHandshakeVersion = 2;
inline constexpr size_t kHandshakeHeaderSize = 12;
inline constexpr size_t kEndpointBodySize = 60;
inline constexpr size_t kMaxHandshakeBody = 1024;
inline constexpr size_t kMaxTokenLength = 256;
inline constexpr size_t kMaxReasonLength = 512;
inline constexpr uint32_t kMinRecvSlots = 4;
inline constexpr uint32_t kMaxRecvSlots = 65535;
inline constexpr uint32_t kMaxSlotSize = 16u << 20;  // 16 MiB

enum class HandshakeType : uint8_t {
  kHello = 1,
  kAccept = 2,
  kReady = 3,
  kReject = 4,
};

const char* HandshakeTypeName(HandshakeType type);

struct HandshakeMessage {
  HandshakeType type = HandshakeType::kHello;
  // HELLO and ACCEPT.
  QpEndpoint endpoint;
  uint32_t recv_slots = 0;
  uint32_t slot_size = 0;
  uint64_t probe_address = 0;
  uint32_t probe_rkey = 0;
  std::string token;  // HELLO only
  // REJECT only.
  std::string reason;
};

struct HandshakeHeader {
  HandshakeType type = HandshakeType::kHello;
  uint32_t body_length = 0;
};

// The wire bytes of `message`. Fails with kInvalidArgument if a field is
// out of range (the same checks as decoding).
absl::StatusOr<std::vector<uint8_t>> EncodeHandshake(
    const HandshakeMessage& message);

// Checks a header (exactly kHandshakeHeaderSize bytes).
absl::StatusOr<HandshakeHeader> DecodeHandshakeHeader(
    std::span<const uint8_t> bytes);

// Decodes a body whose header was already checked; `body` must be exactly
// header.body_length bytes.
absl::StatusOr<HandshakeMessage> DecodeHandshakeBody(
    const HandshakeHeader& header, std::span<const uint8_t> body);

// Decodes exactly one whole frame (header and body, nothing after it).
absl::StatusOr<HandshakeMessage> DecodeHandshakeFrame(
    std::span<const uint8_t> bytes);

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TRANSPORT_HANDSHAKE_H_
