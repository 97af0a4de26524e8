// Frame format 3: the version range, the extensions (READ_DEPTH, TRAFFIC,
// ESTABLISHED, RETRY_AFTER, MESSAGING, unknown and critical ones), and that
// frames of the legacy format 2 still decode.
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "transport/handshake.h"
#include "transport/handshake_test_frames.h"

namespace rdma_transport {
namespace handshake_test {
namespace {

using ::testing::HasSubstr;

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

TEST(HandshakeV3Test, MessagingSaysWhetherTheSenderTakesRendezvous) {
  HandshakeMessage hello = GoldenHelloV3();
  hello.unknown_extensions.clear();
  hello.messaging = MessagingFeatures{true};
  const std::vector<uint8_t> frame = Encode(hello);
  // MESSAGING, the last extension: type 4, 4 bytes, flags 1, reserved.
  const std::vector<uint8_t> tail(frame.end() - 8, frame.end());
  EXPECT_EQ(tail, (std::vector<uint8_t>{0x00, 0x04, 0x00, 0x04, 1, 0, 0, 0}));
  absl::StatusOr<HandshakeMessage> decoded = DecodeHandshakeFrame(frame);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  ASSERT_TRUE(decoded->messaging.has_value());
  EXPECT_TRUE(decoded->messaging->rendezvous);

  EXPECT_TRUE(IsInvalid(
      DecodeHandshakeFrame(
          HelloWithExtensions({0x00, 0x04, 0x00, 0x04, 0x02, 0, 0, 0}))
          .status(),
      "MESSAGING flags 0x02: only bit 0 (rendezvous) is defined"));
  EXPECT_TRUE(IsInvalid(
      DecodeHandshakeFrame(
          HelloWithExtensions({0x00, 0x04, 0x00, 0x04, 0x01, 0, 0, 9}))
          .status(),
      "MESSAGING reserved bytes are not 0"));
  EXPECT_TRUE(
      IsInvalid(DecodeHandshakeFrame(
                    ReadyWithExtensions({0x00, 0x04, 0x00, 0x04, 1, 0, 0, 0}))
                    .status(),
                "extension MESSAGING does not belong in this frame"));
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
}  // namespace handshake_test
}  // namespace rdma_transport
