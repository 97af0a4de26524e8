// File: transport/handshake.h
//
// The out-of-band connection handshake: what two sides exchange over TCP so
// each can bring its RC QP up against the other's. A versioned,
// length-prefixed binary format; every integer is big-endian.
//
//   header (12 bytes)
//     magic    u32  0x52445450 ("RDTP")
//     version  u16  the frame format: 2 (legacy) or 3
//     type     u8   1 HELLO (client -> server), 2 ACCEPT (server -> client),
//                   3 READY (client -> server), 4 REJECT (either way),
//                   5 ESTABLISHED (server -> client; format 3 only)
//     flags    u8   0
//     length   u32  length of the body that follows, <= kMaxHandshakeBody
//   HELLO / ACCEPT body: 60 fixed bytes, then (format 3) the version range,
//   then the token, then (format 3) extensions
//     qp_num      u32  1..0xFFFFFF
//     psn         u32  0..0xFFFFFF
//     gid         16 bytes
//     lid         u16
//     port        u8   >= 1
//     reserved    u8   0
//     mtu         u16  256, 512, 1024, 2048 or 4096: the sender's active MTU
//     reserved    u16  0
//     recv_slots  u32  kMinRecvSlots..kMaxRecvSlots: receive WRs posted
//     slot_size   u32  0..kMaxSlotSize: largest message a slot holds (0: only
//                      empty messages)
//     probe_addr  u64  where the peer's keepalive probes write one byte
//     probe_rkey  u32  its rkey (both 0: no probe slot, or - format 3 ACCEPT -
//                      sent in ESTABLISHED)
//     reserved    u32  0
//     token_len   u16  0..kMaxTokenLength (HELLO only; ACCEPT carries 0)
//     reserved    u16  0
//     min_version u16  format 3: the lowest protocol version the sender
//     max_version u16  speaks, and the highest (1 <= min <= max); an ACCEPT
//                      names the chosen version as both
//     token       token_len bytes, arbitrary binary
//     extensions  format 3: the rest of the body
//   READY body: format 2 empty; format 3 extensions only.
//   ESTABLISHED body (format 3): probe_addr u64, probe_rkey u32, reserved u32
//     (0), then extensions.
//   REJECT body: reason_len u16 (1..kMaxReasonLength), then the reason, in
//     printable ASCII, then (format 3) extensions.
//
//   extension: type u16, length u16, value (length bytes). Types ascend
//   strictly (each at most once). An unknown type is skipped (kept in
//   unknown_extensions) unless its top bit (kCriticalExtension) is set, which
//   fails decoding: an old peer skips what it does not know, unless the
//   sender said it must not. Known types, their length and where they may
//   appear:
//     1 READ_DEPTH      4  HELLO, ACCEPT: initiator u8 (RDMA READs the
//                          sender issues at once, 1..255), responder u8 (READs
//                          it serves at once, 1..255), reserved u16 0
//     2 TRAFFIC         4  HELLO: the client's own traffic class and service
//                          level; ACCEPT: what the client must use. flags u8
//                          (bit 0 traffic class set, bit 1 service level set,
//                          others 0), traffic_class u8, service_level u8
//                          (0..15), reserved u8 0; an unset value is 0
//     3 RETRY_AFTER     4  REJECT: u32 milliseconds (1..60000) after which
//                          the refused client may try again (server busy)
//     4 MESSAGING       4  HELLO, ACCEPT: flags u8 (bit 0: the sender takes
//                          rendezvous messages, immediate kind 3 and the
//                          finished count, immediate_data.h; others 0),
//                          reserved u8 0, reserved u16 0
//
// Versions: frame format 2 is what every peer before protocol 3 spoke (its
// HELLO and ACCEPT have neither version range nor extensions; its READY and
// REJECT are as above without extensions). Protocol 3 sends format 3 frames,
// answers a format-2 HELLO in format 2 and so still serves older clients
// (listener.h). Later protocol versions keep format 3 and add extensions.
//
// Decoding is strict: wrong magic or format, an unknown type, non-zero flags
// or reserved fields, a body longer than kMaxHandshakeBody, a body whose
// length is not exactly what its fields need, truncated input, a known
// extension of the wrong length, out of order or where it does not belong,
// and any value out of its range fail with kInvalidArgument naming the
// field and the value. DecodeHandshakeHeader already checks the body length
// the format and type allow, so a stream reader refuses an absurd length
// before waiting for the body. EncodeHandshake refuses what decoding would
// refuse (a token on anything but HELLO, a reason on anything but REJECT, an
// extension on a format-2 frame), so nothing is dropped silently - except an
// unknown critical extension, which it writes (a test's, or a later
// version's) and decoding refuses; fields a type does not carry (the
// endpoint of READY, the version range of a format-2 frame) are not
// written. A decoded format-2 HELLO or ACCEPT has the range 2..2. It writes
// extensions in ascending type order, so decoding and encoding again give
// the same bytes. Functions are stateless and thread-safe; decoding never
// reads out of `bytes`.

#ifndef RDMA_TRANSPORT_TRANSPORT_HANDSHAKE_H_
#define RDMA_TRANSPORT_TRANSPORT_HANDSHAKE_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "transport/qp_bringup.h"

namespace rdma_transport {

inline constexpr uint32_t kHandshakeMagic = 0x52445450;  // "RDTP"
// Frame formats, and the protocol versions this side speaks.
inline constexpr uint16_t kLegacyHandshakeVersion = 2;
inline constexpr uint16_t kHandshakeVersion = 3;
inline constexpr uint16_t kMinHandshakeVersion = kLegacyHandshakeVersion;
inline constexpr size_t kHandshakeHeaderSize = 12;
inline constexpr size_t kEndpointBodySize = 60;
inline constexpr size_t kVersionRangeSize = 4;
inline constexpr size_t kEstablishedBodySize = 16;
inline constexpr size_t kExtensionHeaderSize = 4;
inline constexpr size_t kMaxHandshakeBody = 1024;
inline constexpr size_t kMaxTokenLength = 256;
inline constexpr size_t kMaxReasonLength = 512;
inline constexpr uint32_t kMinRecvSlots = 4;
inline constexpr uint32_t kMaxRecvSlots = 65535;
inline constexpr uint32_t kMaxSlotSize = 16u << 20;  // 16 MiB
inline constexpr uint16_t kCriticalExtension = 0x8000;
inline constexpr uint32_t kMaxRetryAfterMs = 60000;

enum class HandshakeType : uint8_t {
  kHello = 1,
  kAccept = 2,
  kReady = 3,
  kReject = 4,
  kEstablished = 5,
};

const char* HandshakeTypeName(HandshakeType type);

enum class HandshakeExtensionType : uint16_t {
  kReadDepth = 1,
  kTraffic = 2,
  kRetryAfter = 3,
  kMessaging = 4,
};

// Outstanding RDMA READs: what the sender's QP issues at once (its
// max_rd_atomic) and what it serves at once (its max_dest_rd_atomic).
struct ReadDepth {
  uint8_t initiator = 1;
  uint8_t responder = 1;
};

// A traffic class and service level, each possibly unset (system default).
struct TrafficSettings {
  std::optional<uint8_t> traffic_class;
  std::optional<uint8_t> service_level;  // 0..15
};

// What the sender's messaging understands beyond protocol 3's.
struct MessagingFeatures {
  // Messages larger than a receive slot travel by rendezvous
  // (connection.h): it takes rendezvous requests and finished counts.
  bool rendezvous = false;
};

// An extension this side does not know, as it was on the wire.
struct HandshakeExtension {
  uint16_t type = 0;
  std::vector<uint8_t> value;
};

struct HandshakeMessage {
  HandshakeType type = HandshakeType::kHello;
  // The frame format: kLegacyHandshakeVersion or kHandshakeVersion.
  uint16_t version = kHandshakeVersion;
  // HELLO and ACCEPT of format 3: the protocol versions the sender speaks
  // (ACCEPT: the chosen one, as both).
  uint16_t min_version = kMinHandshakeVersion;
  uint16_t max_version = kHandshakeVersion;
  // HELLO and ACCEPT.
  QpEndpoint endpoint;
  uint32_t recv_slots = 0;
  uint32_t slot_size = 0;
  // HELLO, ACCEPT and ESTABLISHED.
  uint64_t probe_address = 0;
  uint32_t probe_rkey = 0;
  std::string token;  // HELLO only
  // REJECT only.
  std::string reason;
  // Format-3 extensions.
  std::optional<ReadDepth> read_depth;         // HELLO, ACCEPT
  std::optional<TrafficSettings> traffic;      // HELLO, ACCEPT
  std::optional<uint32_t> retry_after_ms;      // REJECT
  std::optional<MessagingFeatures> messaging;  // HELLO, ACCEPT
  // Decoding: the extensions skipped. Encoding: written as they are, in type
  // order among the known ones (a test's or a later version's).
  std::vector<HandshakeExtension> unknown_extensions;
};

struct HandshakeHeader {
  HandshakeType type = HandshakeType::kHello;
  uint32_t body_length = 0;
  uint16_t version = kHandshakeVersion;  // the frame format
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

// The protocol version two sides use: the highest both speak, given the
// peer's range. kFailedPrecondition naming both ranges when they do not
// overlap.
absl::StatusOr<uint16_t> ChooseHandshakeVersion(uint16_t peer_min,
                                                uint16_t peer_max);

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TRANSPORT_HANDSHAKE_H_
