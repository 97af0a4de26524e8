#include "transport/handshake_test_frames.h"

#include <cstring>
#include <string>
#include <vector>

namespace rdma_transport {
namespace handshake_test {

// One HELLO whose bytes are written out by hand below.
HandshakeMessage GoldenHello() {
  HandshakeMessage hello;
  hello.version = kLegacyHandshakeVersion;
  hello.type = HandshakeType::kHello;
  hello.endpoint.qp_num = 0x123456;
  hello.endpoint.psn = 0xABCDEF;
  // ::ffff:10.0.0.2, a RoCE v2 IPv4-mapped GID.
  hello.endpoint.gid.raw[10] = 0xff;
  hello.endpoint.gid.raw[11] = 0xff;
  hello.endpoint.gid.raw[12] = 10;
  hello.endpoint.gid.raw[15] = 2;
  hello.endpoint.lid = 0x0102;
  hello.endpoint.port = 1;
  hello.endpoint.mtu = 4096;
  hello.recv_slots = 128;
  hello.slot_size = 65536;
  hello.probe_address = 0x0102030405060708;
  hello.probe_rkey = 0xa1b2c3d4;
  hello.token = std::string("k\0y", 3);  // tokens are binary
  return hello;
}

const std::vector<uint8_t> kGoldenHelloBytes = {
    // header: magic "RDTP", version 2, type HELLO, flags 0, length 63
    0x52, 0x44, 0x54, 0x50, 0x00, 0x02, 0x01, 0x00, 0x00, 0x00, 0x00, 0x3f,
    // qp_num, psn
    0x00, 0x12, 0x34, 0x56, 0x00, 0xab, 0xcd, 0xef,
    // gid
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff,
    0x0a, 0x00, 0x00, 0x02,
    // lid, port, reserved, mtu, reserved
    0x01, 0x02, 0x01, 0x00, 0x10, 0x00, 0x00, 0x00,
    // recv_slots, slot_size
    0x00, 0x00, 0x00, 0x80, 0x00, 0x01, 0x00, 0x00,
    // probe_addr, probe_rkey, reserved
    0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0xa1, 0xb2, 0xc3, 0xd4,
    0x00, 0x00, 0x00, 0x00,
    // token_len, reserved, token
    0x00, 0x03, 0x00, 0x00, 0x6b, 0x00, 0x79};

HandshakeMessage Accept() {
  HandshakeMessage accept = GoldenHello();
  accept.type = HandshakeType::kAccept;
  accept.endpoint.qp_num = 0xFFFFFF;
  accept.endpoint.psn = 0;
  accept.endpoint.gid.raw[0] = 0xfe;
  accept.endpoint.gid.raw[1] = 0x80;
  accept.endpoint.lid = 0xFFFF;
  accept.endpoint.port = 255;
  accept.endpoint.mtu = 256;
  accept.recv_slots = kMaxRecvSlots;
  accept.slot_size = kMaxSlotSize;
  accept.token.clear();
  return accept;
}

HandshakeMessage Ready() {
  HandshakeMessage ready;
  ready.version = kLegacyHandshakeVersion;
  ready.type = HandshakeType::kReady;
  return ready;
}

HandshakeMessage Reject(std::string reason) {
  HandshakeMessage reject;
  reject.version = kLegacyHandshakeVersion;
  reject.type = HandshakeType::kReject;
  reject.reason = std::move(reason);
  return reject;
}

void ExpectSameMessage(const HandshakeMessage& a, const HandshakeMessage& b) {
  EXPECT_EQ(a.type, b.type);
  EXPECT_EQ(a.endpoint.qp_num, b.endpoint.qp_num);
  EXPECT_EQ(a.endpoint.psn, b.endpoint.psn);
  EXPECT_EQ(0, std::memcmp(a.endpoint.gid.raw, b.endpoint.gid.raw,
                           sizeof(a.endpoint.gid.raw)));
  EXPECT_EQ(a.endpoint.lid, b.endpoint.lid);
  EXPECT_EQ(a.endpoint.port, b.endpoint.port);
  EXPECT_EQ(a.endpoint.mtu, b.endpoint.mtu);
  EXPECT_EQ(a.recv_slots, b.recv_slots);
  EXPECT_EQ(a.slot_size, b.slot_size);
  EXPECT_EQ(a.probe_address, b.probe_address);
  EXPECT_EQ(a.probe_rkey, b.probe_rkey);
  EXPECT_EQ(a.token, b.token);
  EXPECT_EQ(a.reason, b.reason);
}

std::vector<uint8_t> Encode(const HandshakeMessage& message) {
  absl::StatusOr<std::vector<uint8_t>> bytes = EncodeHandshake(message);
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  return bytes.ok() ? *bytes : std::vector<uint8_t>();
}

void Put16(std::vector<uint8_t>& bytes, size_t at, uint16_t value) {
  bytes[at] = static_cast<uint8_t>(value >> 8);
  bytes[at + 1] = static_cast<uint8_t>(value);
}

void Put32(std::vector<uint8_t>& bytes, size_t at, uint32_t value) {
  Put16(bytes, at, static_cast<uint16_t>(value >> 16));
  Put16(bytes, at + 2, static_cast<uint16_t>(value));
}

void FixLength(std::vector<uint8_t>& bytes) {
  Put32(bytes, kLengthAt,
        static_cast<uint32_t>(bytes.size() - kHandshakeHeaderSize));
}

::testing::AssertionResult IsInvalid(const absl::Status& status,
                                     const std::string& substring) {
  if (status.code() != absl::StatusCode::kInvalidArgument) {
    return ::testing::AssertionFailure()
           << "expected INVALID_ARGUMENT, got " << status;
  }
  if (std::string(status.message()).find(substring) == std::string::npos) {
    return ::testing::AssertionFailure() << "message \"" << status.message()
                                         << "\" lacks \"" << substring << "\"";
  }
  return ::testing::AssertionSuccess();
}

}  // namespace handshake_test
}  // namespace rdma_transport
