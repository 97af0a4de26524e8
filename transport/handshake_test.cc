// The handshake wire format: round trips, one golden frame that pins the
// byte layout, the header/body split a stream reader uses, truncation at every
// length, and random corruption. The table of refusals is in
// handshake_refusals_test.cc, frame format 3 in handshake_v3_test.cc.
#include "transport/handshake.h"

#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "transport/handshake_test_frames.h"

namespace rdma_transport {
namespace handshake_test {
namespace {

using ::testing::HasSubstr;

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

}  // namespace
}  // namespace handshake_test
}  // namespace rdma_transport
