#include "transport/rendezvous_request.h"

#include <array>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "transport/immediate_data.h"

namespace rdma_transport {
namespace {

using ::testing::HasSubstr;

using Wire = std::array<std::byte, kRendezvousRequestBytes>;

Wire Encoded(uint64_t address, uint64_t length, uint32_t rkey) {
  Wire wire;
  RemoteRegion{address, length, rkey}.Encode(wire);
  return wire;
}

TEST(RendezvousRequestTest, RoundTrips) {
  absl::StatusOr<RemoteRegion> decoded =
      DecodeRendezvousRequest(Encoded(0x1122334455667788, 64u << 20, 7));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->address, 0x1122334455667788u);
  EXPECT_EQ(decoded->length, 64u << 20);
  EXPECT_EQ(decoded->rkey, 7u);
}

TEST(RendezvousRequestTest, HostileBytesAreRefusedByName) {
  const Wire good = Encoded(4096, 100, 7);
  EXPECT_THAT(DecodeRendezvousRequest({good.data(), 19}).status().message(),
              HasSubstr("19 bytes; it must be 20"));
  EXPECT_THAT(DecodeRendezvousRequest(Encoded(4096, 0, 7)).status().message(),
              HasSubstr("length 0 out of range"));
  EXPECT_EQ(DecodeRendezvousRequest(Encoded(4096, kMaxRendezvousBytes + 1, 7))
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(DecodeRendezvousRequest(Encoded(~uint64_t{0} - 10, 100, 7))
                  .status()
                  .message(),
              HasSubstr("wraps around"));
}

TEST(ImmediateDataTest, FinishedCountTravelsBesideCreditsAndKind) {
  const uint32_t imm = EncodeImm(ImmKind::kCredit, 70000, 300);
  EXPECT_EQ(ImmKindOf(imm), ImmKind::kCredit);
  EXPECT_EQ(ImmCredits(imm), kMaxCreditsPerImm);
  EXPECT_EQ(ImmFinished(imm), kMaxFinishedPerImm);
  EXPECT_EQ(imm & kImmReservedBits, 0u);
  const uint32_t request = EncodeImm(ImmKind::kRendezvous, 3, 1);
  EXPECT_EQ(ImmKindOf(request), ImmKind::kRendezvous);
  EXPECT_EQ(ImmCredits(request), 3u);
  EXPECT_EQ(ImmFinished(request), 1u);
}

}  // namespace
}  // namespace rdma_transport
