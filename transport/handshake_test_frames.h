// Frames and helpers shared by the handshake wire-format tests
// (handshake_test, handshake_refusals_test, handshake_v3_test): the byte
// offsets of a HELLO/ACCEPT/REJECT frame, one golden HELLO written out byte by
// byte, one message of each type, and IsInvalid(), which checks that a status
// is INVALID_ARGUMENT and that its text names what was wrong.
//
//   std::vector<uint8_t> bytes = kGoldenHelloBytes;
//   bytes[kPortAt] = 0;
//   EXPECT_TRUE(IsInvalid(DecodeHandshakeFrame(bytes).status(), "port 0"));
#ifndef RDMA_TRANSPORT_TRANSPORT_HANDSHAKE_TEST_FRAMES_H_
#define RDMA_TRANSPORT_TRANSPORT_HANDSHAKE_TEST_FRAMES_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "transport/handshake.h"

namespace rdma_transport {
namespace handshake_test {

// Offsets in a HELLO / ACCEPT frame (header included).
constexpr size_t kVersionAt = 4;
constexpr size_t kTypeAt = 6;
constexpr size_t kFlagsAt = 7;
constexpr size_t kLengthAt = 8;
constexpr size_t kQpNumAt = 12;
constexpr size_t kPsnAt = 16;
constexpr size_t kPortAt = 38;
constexpr size_t kReservedAfterPortAt = 39;
constexpr size_t kMtuAt = 40;
constexpr size_t kReservedAfterMtuAt = 42;
constexpr size_t kRecvSlotsAt = 44;
constexpr size_t kSlotSizeAt = 48;
constexpr size_t kProbeAddressAt = 52;
constexpr size_t kReservedAfterProbeAt = 64;
constexpr size_t kTokenLenAt = 68;
constexpr size_t kReservedAfterTokenLenAt = 70;
constexpr size_t kTokenAt = 72;
// In a REJECT frame.
constexpr size_t kReasonLenAt = 12;
constexpr size_t kReasonAt = 14;

// One HELLO whose bytes are kGoldenHelloBytes, written out by hand.
HandshakeMessage GoldenHello();
extern const std::vector<uint8_t> kGoldenHelloBytes;

// An ACCEPT with every field at an edge of its range.
HandshakeMessage Accept();
HandshakeMessage Ready();
HandshakeMessage Reject(std::string reason);

// Every field of `a` and `b` is the same (EXPECT_*).
void ExpectSameMessage(const HandshakeMessage& a, const HandshakeMessage& b);

// EncodeHandshake(message), which must succeed (EXPECT_TRUE).
std::vector<uint8_t> Encode(const HandshakeMessage& message);

// Big-endian stores into a frame.
void Put16(std::vector<uint8_t>& bytes, size_t at, uint16_t value);
void Put32(std::vector<uint8_t>& bytes, size_t at, uint32_t value);

// Sets the header's body length to what follows the header.
void FixLength(std::vector<uint8_t>& bytes);

// `status` is INVALID_ARGUMENT and its message contains `substring`.
::testing::AssertionResult IsInvalid(const absl::Status& status,
                                     const std::string& substring);

}  // namespace handshake_test
}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TRANSPORT_HANDSHAKE_TEST_FRAMES_H_
