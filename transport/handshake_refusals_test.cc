// Every refusal of the handshake wire format, as tables: a valid frame
// changed in one field must fail to decode, and a message with one field out
// of range must fail to encode, each with INVALID_ARGUMENT and a text that
// names the field (handshake_test.cc has the round trips).
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "transport/handshake.h"
#include "transport/handshake_test_frames.h"

namespace rdma_transport {
namespace handshake_test {
namespace {

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

}  // namespace
}  // namespace handshake_test
}  // namespace rdma_transport
