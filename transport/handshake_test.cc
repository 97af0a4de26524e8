// The handshake wire format: round trips, one golden frame that pins the
// byte layout, every rejection (code and message), truncation at every
// length, and random corruption.
#include "transport/handshake.h"

#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rdma_transport {
namespace {

using ::testing::HasSubstr;

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

// Sets the header's body length to what follows the header.
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

TEST(HandshakeTest, GoldenHelloBytes) {
  EXPECT_EQ(Encode(GoldenHello()), kGoldenHelloBytes);
  absl::StatusOr<HandshakeMessage> decoded =
      DecodeHandshakeFrame(kGoldenHelloBytes);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  ExpectSameMessage(*decoded, GoldenHello());
}

TEST(HandshakeTest, EveryTypeRoundTrips) {
  std::string token(kMaxTokenLength, '\0');
  for (size_t i = 0; i < token.size(); ++i) token[i] = static_cast<char>(i);
  HandshakeMessage long_token = GoldenHello();
  long_token.token = token;
  HandshakeMessage no_token = GoldenHello();
  no_token.token.clear();
  std::string reason(kMaxReasonLength, ' ');
  for (size_t i = 0; i < reason.size(); ++i) {
    reason[i] = static_cast<char>(0x20 + i % (0x7f - 0x20));  // ' '..'~'
  }
  const HandshakeMessage messages[] = {GoldenHello(), long_token, no_token,
                                       Accept(),      Ready(),    Reject("x"),
                                       Reject(reason)};
  for (const HandshakeMessage& message : messages) {
    SCOPED_TRACE(HandshakeTypeName(message.type));
    std::vector<uint8_t> bytes = Encode(message);
    absl::StatusOr<HandshakeMessage> decoded = DecodeHandshakeFrame(bytes);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    ExpectSameMessage(*decoded, message);
    EXPECT_EQ(Encode(*decoded), bytes);
  }
}

TEST(HandshakeTest, FrameSizes) {
  EXPECT_EQ(Encode(Ready()).size(), kHandshakeHeaderSize);
  EXPECT_EQ(Encode(Accept()).size(), kHandshakeHeaderSize + 60);
  EXPECT_EQ(Encode(Reject("no")).size(), kHandshakeHeaderSize + 2 + 2);
}

TEST(HandshakeTest, HeaderThenBodyAsAStreamReaderWould) {
  std::span<const uint8_t> frame(kGoldenHelloBytes);
  absl::StatusOr<HandshakeHeader> header =
      DecodeHandshakeHeader(frame.first(kHandshakeHeaderSize));
  ASSERT_TRUE(header.ok()) << header.status();
  EXPECT_EQ(header->type, HandshakeType::kHello);
  EXPECT_EQ(header->body_length, 63u);
  absl::StatusOr<HandshakeMessage> message =
      DecodeHandshakeBody(*header, frame.subspan(kHandshakeHeaderSize));
  ASSERT_TRUE(message.ok()) << message.status();
  ExpectSameMessage(*message, GoldenHello());
}

TEST(HandshakeTest, RangeEdgesAreAccepted) {
  for (int mtu : {256, 512, 1024, 2048, 4096}) {
    HandshakeMessage hello = GoldenHello();
    hello.endpoint.mtu = mtu;
    EXPECT_TRUE(DecodeHandshakeFrame(Encode(hello)).ok()) << mtu;
  }
  HandshakeMessage hello = GoldenHello();
  hello.recv_slots = kMinRecvSlots;
  hello.slot_size = 0;
  hello.endpoint.qp_num = 1;
  hello.endpoint.psn = 0xFFFFFF;
  EXPECT_TRUE(DecodeHandshakeFrame(Encode(hello)).ok());
  EXPECT_TRUE(DecodeHandshakeFrame(Encode(Accept())).ok());
}

TEST(HandshakeTest, TokenBytesAreArbitrary) {
  std::vector<uint8_t> bytes = kGoldenHelloBytes;
  bytes[kTokenAt] = 0xff;
  absl::StatusOr<HandshakeMessage> decoded = DecodeHandshakeFrame(bytes);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->token, std::string("\xff\0y", 3));
}

TEST(HandshakeTest, TypeNames) {
  EXPECT_STREQ(HandshakeTypeName(HandshakeType::kHello), "HELLO");
  EXPECT_STREQ(HandshakeTypeName(HandshakeType::kAccept), "ACCEPT");
  EXPECT_STREQ(HandshakeTypeName(HandshakeType::kReady), "READY");
  EXPECT_STREQ(HandshakeTypeName(HandshakeType::kReject), "REJECT");
  EXPECT_STREQ(HandshakeTypeName(static_cast<HandshakeType>(9)), "UNKNOWN");
}

// A valid frame, changed; decoding it must fail with `message` in the text.
struct BadFrame {
  const char* name;
  std::function<std::vector<uint8_t>()> bytes;
  const char* message;
};

std::vector<uint8_t> Hello(std::function<void(std::vector<uint8_t>&)> change) {
  std::vector<uint8_t> bytes = kGoldenHelloBytes;
  change(bytes);
  return bytes;
}

std::vector<uint8_t> AcceptBytes(
    std::function<void(std::vector<uint8_t>&)> change) {
  std::vector<uint8_t> bytes = Encode(Accept());
  change(bytes);
  return bytes;
}

std::vector<uint8_t> RejectBytes(
    std::function<void(std::vector<uint8_t>&)> change) {
  std::vector<uint8_t> bytes = Encode(Reject("go away"));
  change(bytes);
  return bytes;
}

void PrintTo(const BadFrame& frame, std::ostream* os) { *os << frame.name; }

class BadFrameTest : public ::testing::TestWithParam<BadFrame> {};

TEST_P(BadFrameTest, FailsWithInvalidArgumentNamingTheField) {
  std::vector<uint8_t> bytes = GetParam().bytes();
  EXPECT_TRUE(
      IsInvalid(DecodeHandshakeFrame(bytes).status(), GetParam().message));
}

INSTANTIATE_TEST_SUITE_P(
    Handshake, BadFrameTest,
    ::testing::Values(
        BadFrame{"HttpMagic",
                 [] {
                   return Hello([](auto& b) { std::memcpy(&b[0], "GET ", 4); });
                 },
                 "handshake: bad magic 0x47455420 (expected 0x52445450 "
                 "\"RDTP\"); is the peer speaking HTTP?"},
        BadFrame{"AsciiMagic",
                 [] {
                   return Hello([](auto& b) { std::memcpy(&b[0], "ABCD", 4); });
                 },
                 "bad magic 0x41424344 (expected 0x52445450 \"RDTP\"); the "
                 "peer sent ASCII \"ABCD\""},
        BadFrame{"SshMagic",
                 [] {
                   return Hello([](auto& b) { std::memcpy(&b[0], "SSH-", 4); });
                 },
                 "is the peer speaking SSH?"},
        BadFrame{"TlsMagic",
                 [] { return Hello([](auto& b) { Put32(b, 0, 0x16030100); }); },
                 "bad magic 0x16030100 (expected 0x52445450 \"RDTP\"); is the "
                 "peer speaking TLS?"},
        BadFrame{"ByteSwappedMagic",
                 [] { return Hello([](auto& b) { Put32(b, 0, 0x50544452); }); },
                 "byte-swapped"},
        BadFrame{"BinaryMagic",
                 [] { return Hello([](auto& b) { Put32(b, 0, 0x00000001); }); },
                 "bad magic 0x00000001 (expected 0x52445450 \"RDTP\")"},
        BadFrame{"Version",
                 [] { return Hello([](auto& b) { Put16(b, kVersionAt, 1); }); },
                 "handshake: peer speaks frame format 1, this side speaks "
                 "formats 2 and 3"},
        BadFrame{"FutureFormat",
                 [] { return Hello([](auto& b) { Put16(b, kVersionAt, 4); }); },
                 "handshake: peer speaks frame format 4"},
        BadFrame{"TypeZero",
                 [] { return Hello([](auto& b) { b[kTypeAt] = 0; }); },
                 "handshake: unknown type 0"},
        BadFrame{"TypeFive",
                 [] { return Hello([](auto& b) { b[kTypeAt] = 5; }); },
                 "handshake: unknown type 5"},
        BadFrame{"Flags",
                 [] { return Hello([](auto& b) { b[kFlagsAt] = 0x80; }); },
                 "handshake: flags 0x80 must be 0"},
        BadFrame{"HugeLength",
                 [] {
                   return Hello([](auto& b) { Put32(b, kLengthAt, 1u << 30); });
                 },
                 "handshake: body length 1073741824 exceeds the maximum 1024"},
        BadFrame{
            "LengthJustOverMaximum",
            [] { return Hello([](auto& b) { Put32(b, kLengthAt, 1025); }); },
            "handshake: body length 1025 exceeds the maximum 1024"},
        BadFrame{"AcceptBodyShort",
                 [] {
                   return AcceptBytes([](auto& b) {
                     b.pop_back();
                     FixLength(b);
                   });
                 },
                 "handshake ACCEPT: body is 59 bytes, its fields need 60"},
        BadFrame{"AcceptBodyLong",
                 [] {
                   return AcceptBytes([](auto& b) {
                     b.push_back(0);
                     FixLength(b);
                   });
                 },
                 "handshake ACCEPT: body is 61 bytes, its fields need 60"},
        BadFrame{"HelloBodyShort",
                 [] {
                   return Hello([](auto& b) {
                     b.resize(kHandshakeHeaderSize + 59);
                     FixLength(b);
                   });
                 },
                 "handshake HELLO: body is 59 bytes, its fields need at least "
                 "60"},
        BadFrame{"HelloBodyLongerThanAnyToken",
                 [] {
                   return Hello([](auto& b) {
                     b.resize(kHandshakeHeaderSize + 60 + 257);
                     FixLength(b);
                   });
                 },
                 "handshake HELLO: body is 317 bytes, its fields need at most "
                 "316"},
        BadFrame{"HelloBodyLongerThanTokenLen",
                 [] {
                   return Hello([](auto& b) {
                     b.push_back('!');
                     FixLength(b);
                   });
                 },
                 "handshake HELLO: body is 64 bytes, its fields need 63 (60 + "
                 "token_len 3)"},
        BadFrame{
            "HelloTokenLenTooLong",
            [] { return Hello([](auto& b) { Put16(b, kTokenLenAt, 300); }); },
            "handshake HELLO: token_len 300 out of range 0..256"},
        BadFrame{"AcceptCarriesToken",
                 [] {
                   return AcceptBytes([](auto& b) {
                     Put16(b, kTokenLenAt, 4);
                     b.insert(b.end(), {1, 2, 3, 4});
                     FixLength(b);
                   });
                 },
                 "handshake ACCEPT: body is 64 bytes, its fields need 60"},
        BadFrame{"AcceptTokenLenNonZero",
                 [] {
                   return AcceptBytes(
                       [](auto& b) { Put16(b, kTokenLenAt, 4); });
                 },
                 "handshake ACCEPT: token_len 4 must be 0 (only HELLO carries "
                 "a token)"},
        BadFrame{"ReadyWithBody",
                 [] {
                   std::vector<uint8_t> b = Encode(Ready());
                   b.push_back(0);
                   FixLength(b);
                   return b;
                 },
                 "handshake READY: body is 1 bytes, must be 0"},
        BadFrame{"QpNumZero",
                 [] { return Hello([](auto& b) { Put32(b, kQpNumAt, 0); }); },
                 "handshake HELLO: qp_num 0 out of range 1..16777215"},
        BadFrame{
            "QpNumOver24Bits",
            [] { return Hello([](auto& b) { Put32(b, kQpNumAt, 1u << 24); }); },
            "handshake HELLO: qp_num 16777216 out of range 1..16777215"},
        BadFrame{"PsnOver24Bits",
                 [] {
                   return AcceptBytes(
                       [](auto& b) { Put32(b, kPsnAt, 0xFFFFFFFF); });
                 },
                 "handshake ACCEPT: psn 4294967295 out of range 0..16777215"},
        BadFrame{"PortZero",
                 [] { return Hello([](auto& b) { b[kPortAt] = 0; }); },
                 "handshake HELLO: port 0 out of range 1..255"},
        BadFrame{"MtuNotAPowerOfTwo",
                 [] { return Hello([](auto& b) { Put16(b, kMtuAt, 1000); }); },
                 "handshake HELLO: mtu 1000 is not one of 256, 512, 1024, "
                 "2048, 4096"},
        BadFrame{"MtuTooSmall",
                 [] { return Hello([](auto& b) { Put16(b, kMtuAt, 128); }); },
                 "handshake HELLO: mtu 128 is not one of"},
        BadFrame{"MtuZero",
                 [] { return Hello([](auto& b) { Put16(b, kMtuAt, 0); }); },
                 "handshake HELLO: mtu 0 is not one of"},
        BadFrame{
            "RecvSlotsTooFew",
            [] { return Hello([](auto& b) { Put32(b, kRecvSlotsAt, 1); }); },
            "handshake HELLO: recv_slots 1 out of range 4..65535"},
        BadFrame{"RecvSlotsTooMany",
                 [] {
                   return Hello([](auto& b) { Put32(b, kRecvSlotsAt, 65536); });
                 },
                 "handshake HELLO: recv_slots 65536 out of range 4..65535"},
        BadFrame{"SlotSizeTooLarge",
                 [] {
                   return Hello([](auto& b) {
                     Put32(b, kSlotSizeAt, kMaxSlotSize + 1);
                   });
                 },
                 "handshake HELLO: slot_size 16777217 out of range "
                 "0..16777216"},
        BadFrame{
            "ReservedAfterPort",
            [] { return Hello([](auto& b) { b[kReservedAfterPortAt] = 7; }); },
            "handshake HELLO: reserved byte after port is 7, must be 0"},
        BadFrame{"ReservedAfterMtu",
                 [] {
                   return Hello(
                       [](auto& b) { Put16(b, kReservedAfterMtuAt, 1); });
                 },
                 "handshake HELLO: reserved u16 after mtu is 1, must be 0"},
        BadFrame{"ReservedAfterTokenLen",
                 [] {
                   return AcceptBytes([](auto& b) {
                     Put16(b, kReservedAfterTokenLenAt, 0x8000);
                   });
                 },
                 "handshake ACCEPT: reserved u16 after token_len is 32768, "
                 "must be 0"},
        BadFrame{"RejectReasonLenZero",
                 [] {
                   return RejectBytes(
                       [](auto& b) { Put16(b, kReasonLenAt, 0); });
                 },
                 "handshake REJECT: reason_len 0 out of range 1..512"},
        BadFrame{"RejectReasonLenTooLong",
                 [] {
                   return RejectBytes(
                       [](auto& b) { Put16(b, kReasonLenAt, 600); });
                 },
                 "handshake REJECT: reason_len 600 out of range 1..512"},
        BadFrame{"RejectReasonLenDisagreesWithBody",
                 [] {
                   return RejectBytes(
                       [](auto& b) { Put16(b, kReasonLenAt, 3); });
                 },
                 "handshake REJECT: body is 9 bytes, its fields need 5 (2 + "
                 "reason_len 3)"},
        BadFrame{"RejectBodyTooShort",
                 [] {
                   std::vector<uint8_t> b = Encode(Reject("x"));
                   b.pop_back();
                   FixLength(b);
                   return b;
                 },
                 "handshake REJECT: body is 2 bytes, its fields need 3..514"},
        BadFrame{"RejectBodyTooLong",
                 [] {
                   std::vector<uint8_t> b =
                       Encode(Reject(std::string(kMaxReasonLength, 'x')));
                   b.push_back('x');
                   FixLength(b);
                   return b;
                 },
                 "handshake REJECT: body is 515 bytes, its fields need 3..514"},
        BadFrame{"RejectReasonNewline",
                 [] {
                   return RejectBytes([](auto& b) { b[kReasonAt + 2] = '\n'; });
                 },
                 "handshake REJECT: reason byte 0x0a at offset 2 is not "
                 "printable ASCII (0x20..0x7e)"},
        BadFrame{
            "RejectReasonDel",
            [] { return RejectBytes([](auto& b) { b[kReasonAt] = 0x7f; }); },
            "reason byte 0x7f at offset 0 is not printable ASCII"},
        BadFrame{"RejectReasonHighBit",
                 [] { return RejectBytes([](auto& b) { b.back() = 0xc3; }); },
                 "reason byte 0xc3 at offset 6 is not printable ASCII"},
        BadFrame{"TruncatedHeader",
                 [] { return Hello([](auto& b) { b.resize(5); }); },
                 "handshake: truncated header: 5 of 12 bytes"},
        BadFrame{"Empty", [] { return std::vector<uint8_t>(); },
                 "handshake: truncated header: 0 of 12 bytes"},
        BadFrame{"TruncatedBody",
                 [] { return Hello([](auto& b) { b.resize(20); }); },
                 "handshake HELLO: truncated body: 8 of 63 bytes"},
        BadFrame{"TrailingBytes",
                 [] {
                   return Hello([](auto& b) { b.insert(b.end(), {0, 0, 0}); });
                 },
                 "handshake HELLO: 3 trailing bytes after the 75-byte frame"},
        BadFrame{"SecondFrameAfterTheFirst",
                 [] {
                   std::vector<uint8_t> b = Encode(Ready());
                   std::vector<uint8_t> more = Encode(Ready());
                   b.insert(b.end(), more.begin(), more.end());
                   return b;
                 },
                 "handshake READY: 12 trailing bytes after the 12-byte frame"}),
    [](const ::testing::TestParamInfo<BadFrame>& info) {
      return std::string(info.param.name);
    });

TEST(HandshakeTest, HeaderMustBeExactlyTwelveBytes) {
  std::span<const uint8_t> frame(kGoldenHelloBytes);
  EXPECT_TRUE(IsInvalid(DecodeHandshakeHeader(frame.first(11)).status(),
                        "handshake: truncated header: 11 of 12 bytes"));
  EXPECT_TRUE(IsInvalid(DecodeHandshakeHeader(frame.first(13)).status(),
                        "handshake: header is 13 bytes, expected exactly 12"));
}

TEST(HandshakeTest, HeaderRefusesABadLengthBeforeTheBodyArrives) {
  std::vector<uint8_t> header = Encode(Ready());
  Put32(header, kLengthAt, 500);
  EXPECT_TRUE(IsInvalid(DecodeHandshakeHeader(header).status(),
                        "handshake READY: body is 500 bytes, must be 0"));
}

TEST(HandshakeTest, BodyMustMatchTheHeadersLength) {
  std::span<const uint8_t> frame(kGoldenHelloBytes);
  HandshakeHeader header{HandshakeType::kHello, 63, kLegacyHandshakeVersion};
  EXPECT_TRUE(IsInvalid(
      DecodeHandshakeBody(header, frame.subspan(kHandshakeHeaderSize + 1))
          .status(),
      "handshake HELLO: body is 62 bytes but the header says 63"));
  // A header the caller made up is checked like a decoded one.
  header = {static_cast<HandshakeType>(0), 0, kLegacyHandshakeVersion};
  EXPECT_TRUE(IsInvalid(DecodeHandshakeBody(header, {}).status(),
                        "handshake: unknown type 0"));
  header = {HandshakeType::kAccept, 40, kLegacyHandshakeVersion};
  EXPECT_TRUE(IsInvalid(
      DecodeHandshakeBody(header, frame.subspan(kHandshakeHeaderSize, 40))
          .status(),
      "handshake ACCEPT: body is 40 bytes, its fields need 60"));
}

TEST(HandshakeTest, EveryTruncationFailsCleanly) {
  const std::vector<uint8_t> frames[] = {kGoldenHelloBytes, Encode(Accept()),
                                         Encode(Ready()),
                                         Encode(Reject("version mismatch"))};
  for (const std::vector<uint8_t>& frame : frames) {
    for (size_t length = 0; length < frame.size(); ++length) {
      SCOPED_TRACE(length);
      // A copy of exactly `length` bytes, so ASan catches a read past it.
      std::vector<uint8_t> prefix(frame.begin(), frame.begin() + length);
      absl::Status status = DecodeHandshakeFrame(prefix).status();
      EXPECT_TRUE(IsInvalid(status, length < kHandshakeHeaderSize
                                        ? "truncated header"
                                        : "truncated body"));
    }
  }
}

TEST(HandshakeTest, TrailingBytesFail) {
  for (size_t extra = 1; extra <= 16; ++extra) {
    std::vector<uint8_t> bytes = kGoldenHelloBytes;
    bytes.resize(bytes.size() + extra, 0);
    EXPECT_TRUE(IsInvalid(DecodeHandshakeFrame(bytes).status(),
                          "trailing bytes after the 75-byte frame"));
  }
}

// Random corruption never crashes; what still decodes re-encodes to the very
// same bytes (decoding accepts nothing it would not itself emit).
TEST(HandshakeTest, RandomByteFlipsDecodeOrFailCleanly) {
  std::mt19937 random(20261130);
  const std::vector<uint8_t> frames[] = {
      kGoldenHelloBytes, Encode(Accept()), Encode(Ready()),
      Encode(Reject("queue full")), Encode(GoldenHello())};
  int decoded = 0;
  int failed = 0;
  for (const std::vector<uint8_t>& frame : frames) {
    for (int i = 0; i < 4000; ++i) {
      std::vector<uint8_t> bytes = frame;
      const int flips = 1 + static_cast<int>(random() % 4);
      for (int f = 0; f < flips; ++f) {
        bytes[random() % bytes.size()] ^=
            static_cast<uint8_t>(1 + random() % 255);
      }
      if (random() % 8 == 0) bytes.resize(random() % (bytes.size() + 1));
      absl::StatusOr<HandshakeMessage> message = DecodeHandshakeFrame(bytes);
      if (message.ok()) {
        ++decoded;
        absl::StatusOr<std::vector<uint8_t>> again = EncodeHandshake(*message);
        ASSERT_TRUE(again.ok()) << again.status();
        ASSERT_EQ(*again, bytes);
      } else {
        ++failed;
        ASSERT_EQ(message.status().code(), absl::StatusCode::kInvalidArgument)
            << message.status();
        ASSERT_THAT(std::string(message.status().message()),
                    HasSubstr("handshake"));
      }
    }
  }
  // Both outcomes happen: flips in the gid, lid, token or reason text are
  // valid frames.
  EXPECT_GT(decoded, 0);
  EXPECT_GT(failed, 0);
}

// Encoding refuses exactly what decoding refuses.
struct BadMessage {
  const char* name;
  std::function<HandshakeMessage()> message;
  const char* error;
};

void PrintTo(const BadMessage& message, std::ostream* os) {
  *os << message.name;
}

class BadMessageTest : public ::testing::TestWithParam<BadMessage> {};

TEST_P(BadMessageTest, EncodeFailsWithInvalidArgument) {
  EXPECT_TRUE(IsInvalid(EncodeHandshake(GetParam().message()).status(),
                        GetParam().error));
}

HandshakeMessage HelloWith(std::function<void(HandshakeMessage&)> change) {
  HandshakeMessage hello = GoldenHello();
  change(hello);
  return hello;
}

INSTANTIATE_TEST_SUITE_P(
    Handshake, BadMessageTest,
    ::testing::Values(
        BadMessage{"UnknownType",
                   [] {
                     return HelloWith([](auto& m) {
                       m.type = static_cast<HandshakeType>(7);
                     });
                   },
                   "handshake: unknown type 7"},
        BadMessage{
            "QpNumZero",
            [] { return HelloWith([](auto& m) { m.endpoint.qp_num = 0; }); },
            "handshake HELLO: qp_num 0 out of range 1..16777215"},
        BadMessage{"PsnOver24Bits",
                   [] {
                     return HelloWith(
                         [](auto& m) { m.endpoint.psn = 0x1000000; });
                   },
                   "handshake HELLO: psn 16777216 out of range 0..16777215"},
        BadMessage{
            "PortZero",
            [] { return HelloWith([](auto& m) { m.endpoint.port = 0; }); },
            "handshake HELLO: port 0 out of range 1..255"},
        BadMessage{
            "MtuNegative",
            [] { return HelloWith([](auto& m) { m.endpoint.mtu = -1; }); },
            "handshake HELLO: mtu -1 is not one of"},
        BadMessage{
            "MtuTooLargeForU16",
            [] { return HelloWith([](auto& m) { m.endpoint.mtu = 65536; }); },
            "handshake HELLO: mtu 65536 is not one of"},
        BadMessage{"RecvSlotsZero",
                   [] { return HelloWith([](auto& m) { m.recv_slots = 0; }); },
                   "handshake HELLO: recv_slots 0 out of range 4..65535"},
        BadMessage{"SlotSizeTooLarge",
                   [] {
                     return HelloWith(
                         [](auto& m) { m.slot_size = kMaxSlotSize + 1; });
                   },
                   "handshake HELLO: slot_size 16777217 out of range"},
        BadMessage{"TokenTooLong",
                   [] {
                     return HelloWith([](auto& m) {
                       m.token.assign(kMaxTokenLength + 1, 'a');
                     });
                   },
                   "handshake HELLO: token_len 257 out of range 0..256"},
        BadMessage{"ReasonOnHello",
                   [] { return HelloWith([](auto& m) { m.reason = "why"; }); },
                   "handshake HELLO: reason_len 3 must be 0 (only REJECT "
                   "carries a reason)"},
        BadMessage{"TokenOnAccept",
                   [] {
                     HandshakeMessage m = Accept();
                     m.token = "t";
                     return m;
                   },
                   "handshake ACCEPT: token_len 1 must be 0 (only HELLO "
                   "carries a token)"},
        BadMessage{"AcceptQpNumOver24Bits",
                   [] {
                     HandshakeMessage m = Accept();
                     m.endpoint.qp_num = 0x1000000;
                     return m;
                   },
                   "handshake ACCEPT: qp_num 16777216 out of range"},
        BadMessage{"TokenOnReady",
                   [] {
                     HandshakeMessage m = Ready();
                     m.token = "tt";
                     return m;
                   },
                   "handshake READY: token_len 2 must be 0"},
        BadMessage{"TokenOnReject",
                   [] {
                     HandshakeMessage m = Reject("no");
                     m.token = "tt";
                     return m;
                   },
                   "handshake REJECT: token_len 2 must be 0"},
        BadMessage{"ReasonEmpty", [] { return Reject(""); },
                   "handshake REJECT: reason_len 0 out of range 1..512"},
        BadMessage{
            "ReasonTooLong",
            [] { return Reject(std::string(kMaxReasonLength + 1, 'x')); },
            "handshake REJECT: reason_len 513 out of range 1..512"},
        BadMessage{"ReasonNotPrintable",
                   [] { return Reject(std::string("bad\0", 4)); },
                   "handshake REJECT: reason byte 0x00 at offset 3 is not "
                   "printable ASCII (0x20..0x7e)"},
        BadMessage{"ReasonUtf8", [] { return Reject("caf\xc3\xa9"); },
                   "reason byte 0xc3 at offset 3 is not printable ASCII"}),
    [](const ::testing::TestParamInfo<BadMessage>& info) {
      return std::string(info.param.name);
    });

// ---- Frame format 3: version range and extensions ----

// A format-3 HELLO with every extension a HELLO may carry and one unknown.
HandshakeMessage GoldenHelloV3() {
  HandshakeMessage hello = GoldenHello();
  hello.version = kHandshakeVersion;
  hello.min_version = 2;
  hello.max_version = 3;
  hello.read_depth = ReadDepth{16, 8};
  hello.traffic = TrafficSettings{136, std::nullopt};
  hello.unknown_extensions.push_back({0x0100, {0xca, 0xfe}});
  return hello;
}

const std::vector<uint8_t> kGoldenHelloV3Bytes = [] {
  std::vector<uint8_t> bytes = kGoldenHelloBytes;
  bytes[5] = 3;  // format 3
  // version range 2..3 between the fixed fields and the token.
  const std::vector<uint8_t> range = {0x00, 0x02, 0x00, 0x03};
  bytes.insert(bytes.begin() + kTokenAt, range.begin(), range.end());
  const std::vector<uint8_t> extensions = {
      // READ_DEPTH: initiator 16, responder 8
      0x00, 0x01, 0x00, 0x04, 0x10, 0x08, 0x00, 0x00,
      // TRAFFIC: traffic class 136 set, service level unset
      0x00, 0x02, 0x00, 0x04, 0x01, 0x88, 0x00, 0x00,
      // unknown type 0x0100, 2 bytes
      0x01, 0x00, 0x00, 0x02, 0xca, 0xfe};
  bytes.insert(bytes.end(), extensions.begin(), extensions.end());
  bytes[11] = static_cast<uint8_t>(bytes.size() - kHandshakeHeaderSize);
  return bytes;
}();

TEST(HandshakeV3Test, GoldenHelloPinsTheLayout) {
  EXPECT_EQ(Encode(GoldenHelloV3()), kGoldenHelloV3Bytes);
  absl::StatusOr<HandshakeMessage> decoded =
      DecodeHandshakeFrame(kGoldenHelloV3Bytes);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  ExpectSameMessage(*decoded, GoldenHelloV3());
  EXPECT_EQ(decoded->version, 3);
  EXPECT_EQ(decoded->min_version, 2);
  EXPECT_EQ(decoded->max_version, 3);
  ASSERT_TRUE(decoded->read_depth.has_value());
  EXPECT_EQ(decoded->read_depth->initiator, 16);
  EXPECT_EQ(decoded->read_depth->responder, 8);
  ASSERT_TRUE(decoded->traffic.has_value());
  EXPECT_EQ(decoded->traffic->traffic_class, std::optional<uint8_t>(136));
  EXPECT_FALSE(decoded->traffic->service_level.has_value());
  ASSERT_EQ(decoded->unknown_extensions.size(), 1u);
  EXPECT_EQ(decoded->unknown_extensions[0].type, 0x0100);
  EXPECT_EQ(decoded->unknown_extensions[0].value,
            (std::vector<uint8_t>{0xca, 0xfe}));
}

TEST(HandshakeV3Test, LegacyFramesStayDecodable) {
  // The bytes a protocol-2 peer sends (the golden frame above) decode as
  // format 2, with no version range or extension, and encode back the same.
  absl::StatusOr<HandshakeMessage> hello =
      DecodeHandshakeFrame(kGoldenHelloBytes);
  ASSERT_TRUE(hello.ok()) << hello.status();
  EXPECT_EQ(hello->version, kLegacyHandshakeVersion);
  EXPECT_FALSE(hello->read_depth.has_value());
  EXPECT_EQ(Encode(*hello), kGoldenHelloBytes);
  // READY and REJECT of format 2, byte for byte.
  const std::vector<uint8_t> ready = {0x52, 0x44, 0x54, 0x50, 0x00, 0x02,
                                      0x03, 0x00, 0x00, 0x00, 0x00, 0x00};
  EXPECT_EQ(Encode(Ready()), ready);
  const std::vector<uint8_t> reject = {0x52, 0x44, 0x54, 0x50, 0x00, 0x02,
                                       0x04, 0x00, 0x00, 0x00, 0x00, 0x04,
                                       0x00, 0x02, 'n',  'o'};
  EXPECT_EQ(Encode(Reject("no")), reject);
}

TEST(HandshakeV3Test, UnknownExtensionsAreSkippedCriticalOnesRefused) {
  HandshakeMessage hello = GoldenHelloV3();
  hello.unknown_extensions = {{0x0007, {}},
                              {0x7fff, std::vector<uint8_t>(300)}};
  absl::StatusOr<HandshakeMessage> decoded =
      DecodeHandshakeFrame(Encode(hello));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  ASSERT_EQ(decoded->unknown_extensions.size(), 2u);
  EXPECT_EQ(decoded->unknown_extensions[1].value.size(), 300u);
  EXPECT_TRUE(decoded->read_depth.has_value());

  hello.unknown_extensions = {{0x8042, {1}}};
  absl::StatusOr<std::vector<uint8_t>> critical = EncodeHandshake(hello);
  ASSERT_TRUE(critical.ok()) << critical.status();
  EXPECT_TRUE(IsInvalid(DecodeHandshakeFrame(*critical).status(),
                        "unknown critical extension 0x8042"));
}

std::vector<uint8_t> ReadyWithExtensions(std::vector<uint8_t> extensions) {
  std::vector<uint8_t> frame = Encode(Ready());
  frame[5] = 3;
  frame.insert(frame.end(), extensions.begin(), extensions.end());
  frame[11] = static_cast<uint8_t>(extensions.size());
  return frame;
}

std::vector<uint8_t> HelloWithExtensions(std::vector<uint8_t> extensions) {
  HandshakeMessage hello = GoldenHelloV3();
  hello.read_depth.reset();
  hello.traffic.reset();
  hello.unknown_extensions.clear();
  std::vector<uint8_t> frame = Encode(hello);
  frame.insert(frame.end(), extensions.begin(), extensions.end());
  frame[11] = static_cast<uint8_t>(frame.size() - kHandshakeHeaderSize);
  return frame;
}

TEST(HandshakeV3Test, MalformedExtensionsFailNamingWhatIsWrong) {
  EXPECT_TRUE(
      IsInvalid(DecodeHandshakeFrame(ReadyWithExtensions({0x00})).status(),
                "truncated extension header: 1 of 4 bytes"));
  EXPECT_TRUE(IsInvalid(
      DecodeHandshakeFrame(ReadyWithExtensions({0x00, 0x09, 0x00, 0x05, 1}))
          .status(),
      "extension type 9 says 5 bytes, 1 remain"));
  EXPECT_TRUE(IsInvalid(
      DecodeHandshakeFrame(
          ReadyWithExtensions({0x00, 0x09, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00}))
          .status(),
      "extension type 8 after type 9: types must ascend"));
  EXPECT_TRUE(IsInvalid(
      DecodeHandshakeFrame(
          ReadyWithExtensions({0x00, 0x09, 0x00, 0x00, 0x00, 0x09, 0x00, 0x00}))
          .status(),
      "each at most once"));
  EXPECT_TRUE(IsInvalid(
      DecodeHandshakeFrame(
          ReadyWithExtensions({0x00, 0x01, 0x00, 0x04, 1, 1, 0, 0}))
          .status(),
      "handshake READY: extension READ_DEPTH does not belong in this frame"));
  EXPECT_TRUE(
      IsInvalid(DecodeHandshakeFrame(
                    HelloWithExtensions({0x00, 0x01, 0x00, 0x03, 1, 1, 0}))
                    .status(),
                "extension READ_DEPTH is 3 bytes, must be 4"));
  EXPECT_TRUE(
      IsInvalid(DecodeHandshakeFrame(
                    HelloWithExtensions({0x00, 0x01, 0x00, 0x04, 0, 1, 0, 0}))
                    .status(),
                "READ_DEPTH initiator 0 out of range 1..255"));
  EXPECT_TRUE(IsInvalid(
      DecodeHandshakeFrame(
          HelloWithExtensions({0x00, 0x02, 0x00, 0x04, 0x02, 0, 16, 0}))
          .status(),
      "TRAFFIC service_level 16 out of range 0..15"));
  EXPECT_TRUE(IsInvalid(
      DecodeHandshakeFrame(
          HelloWithExtensions({0x00, 0x02, 0x00, 0x04, 0x04, 0, 0, 0}))
          .status(),
      "TRAFFIC flags 0x04"));
  EXPECT_TRUE(IsInvalid(
      DecodeHandshakeFrame(
          HelloWithExtensions({0x00, 0x02, 0x00, 0x04, 0x00, 7, 0, 0}))
          .status(),
      "TRAFFIC traffic_class 7 must be 0 when flag bit 0 is clear"));
}

TEST(HandshakeV3Test, VersionRangesAreChecked) {
  HandshakeMessage hello = GoldenHelloV3();
  std::vector<uint8_t> frame = Encode(hello);
  Put16(frame, kTokenAt, 3);  // min 3 > max 3? no: make min 4
  Put16(frame, kTokenAt, 4);
  EXPECT_TRUE(IsInvalid(DecodeHandshakeFrame(frame).status(),
                        "version range 4..3 is empty"));
  HandshakeMessage accept = Accept();
  accept.version = kHandshakeVersion;
  accept.min_version = 2;
  accept.max_version = 3;
  EXPECT_TRUE(IsInvalid(EncodeHandshake(accept).status(),
                        "version range 2..3 is not valid here"));
  accept.min_version = 3;
  absl::StatusOr<HandshakeMessage> decoded =
      DecodeHandshakeFrame(Encode(accept));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->max_version, 3);

  EXPECT_EQ(*ChooseHandshakeVersion(2, 2), 2);
  EXPECT_EQ(*ChooseHandshakeVersion(2, 3), 3);
  EXPECT_EQ(*ChooseHandshakeVersion(1, 9), 3);  // a later peer
  EXPECT_EQ(ChooseHandshakeVersion(4, 9).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(ChooseHandshakeVersion(1, 1).status().message()),
              HasSubstr("the peer speaks protocol versions 1..1, this side "
                        "2..3: none in common"));
}

TEST(HandshakeV3Test, EstablishedAndRetryAfterRoundTrip) {
  HandshakeMessage established;
  established.type = HandshakeType::kEstablished;
  established.probe_address = 0x1122334455667788;
  established.probe_rkey = 0x99;
  std::vector<uint8_t> frame = Encode(established);
  EXPECT_EQ(frame.size(), kHandshakeHeaderSize + kEstablishedBodySize);
  absl::StatusOr<HandshakeMessage> decoded = DecodeHandshakeFrame(frame);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->probe_address, 0x1122334455667788u);
  EXPECT_EQ(decoded->probe_rkey, 0x99u);
  frame[5] = 2;  // ESTABLISHED does not exist in format 2
  EXPECT_TRUE(IsInvalid(DecodeHandshakeFrame(frame).status(),
                        "unknown type 5 in a format-2 frame"));

  HandshakeMessage busy = Reject("server busy");
  busy.version = kHandshakeVersion;
  busy.retry_after_ms = 20;
  decoded = DecodeHandshakeFrame(Encode(busy));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->retry_after_ms, std::optional<uint32_t>(20));
  busy.retry_after_ms = kMaxRetryAfterMs + 1;
  EXPECT_TRUE(IsInvalid(EncodeHandshake(busy).status(),
                        "RETRY_AFTER milliseconds 60001 out of range"));
}

TEST(HandshakeV3Test, EncodingRefusesWhatDecodingWould) {
  HandshakeMessage legacy = GoldenHello();
  legacy.read_depth = ReadDepth{1, 1};
  EXPECT_TRUE(IsInvalid(EncodeHandshake(legacy).status(),
                        "a format-2 frame carries no extensions"));
  HandshakeMessage hello = GoldenHelloV3();
  hello.unknown_extensions = {{1, {}}};
  EXPECT_TRUE(IsInvalid(EncodeHandshake(hello).status(),
                        "extension type 1 is a known one"));
  hello.unknown_extensions = {{0x0200, std::vector<uint8_t>(1000)}};
  EXPECT_TRUE(
      IsInvalid(EncodeHandshake(hello).status(), "more than the maximum 1024"));
  hello = GoldenHelloV3();
  hello.version = 4;
  EXPECT_TRUE(IsInvalid(EncodeHandshake(hello).status(),
                        "frame format 4 is not 2 or 3"));
  HandshakeMessage ready = Ready();
  ready.version = kHandshakeVersion;
  ready.retry_after_ms = 5;
  EXPECT_TRUE(IsInvalid(EncodeHandshake(ready).status(),
                        "extension RETRY_AFTER does not belong"));
}

}  // namespace
}  // namespace rdma_transport
