// The inline-size negotiation against exact verbs interactions (MockVerbs):
// which sizes are asked for, in which order, what is cached and what is used.
#include "transport/inline_size.h"

#include <cerrno>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "verbs_shim/mock_verbs.h"
#include "verbs_shim/verbs_error.h"

namespace rdma_transport {
namespace {

using ::testing::_;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::Return;

// A device that refuses with `refuse_errno` every max_inline_data above
// `limit` and grants `grant(request)` otherwise. Records every request.
class FakeCreateQp {
 public:
  FakeCreateQp(uint32_t limit, int refuse_errno = EINVAL,
               std::function<uint32_t(uint32_t)> grant = nullptr)
      : limit_(limit), refuse_errno_(refuse_errno), grant_(std::move(grant)) {}

  absl::StatusOr<ibv_qp*> operator()(ibv_pd*, ibv_qp_init_attr* attr) {
    requests_.push_back(attr->cap.max_inline_data);
    if (attr->cap.max_inline_data > limit_) {
      return VerbsError("ibv_create_qp", refuse_errno_);
    }
    if (grant_) attr->cap.max_inline_data = grant_(attr->cap.max_inline_data);
    return &qp_;
  }

  const std::vector<uint32_t>& requests() const { return requests_; }

 private:
  uint32_t limit_;
  int refuse_errno_;
  std::function<uint32_t(uint32_t)> grant_;
  std::vector<uint32_t> requests_;
  ibv_qp qp_ = {};
};

class InlineNegotiationTest : public ::testing::Test {
 protected:
  absl::StatusOr<NegotiatedQp> Create(
      uint32_t vendor_id, uint32_t part_id, InlineSizeCache& cache,
      std::optional<uint32_t> configured = std::nullopt) {
    ibv_qp_init_attr attr = {};
    attr.qp_type = IBV_QPT_RC;
    attr.cap.max_send_wr = 64;
    attr.cap.max_recv_wr = 64;
    attr.cap.max_send_sge = 1;
    attr.cap.max_recv_sge = 1;
    InlineDevice device{"dev0", vendor_id, part_id, &cache};
    return CreateQpNegotiatingInline(verbs_, &pd_, attr, device, configured);
  }

  // Every request from `first` down by 16, ending at 0.
  static std::vector<uint32_t> StepDownFrom(uint32_t first) {
    std::vector<uint32_t> sizes;
    for (uint32_t s = first; s > 0; s = s > 16 ? s - 16 : 0) sizes.push_back(s);
    sizes.push_back(0);
    return sizes;
  }

  MockVerbs verbs_;
  ibv_pd pd_ = {};
};

TEST_F(InlineNegotiationTest, MellanoxStepsDownBy16UntilGranted) {
  FakeCreateQp device(/*limit=*/204);
  EXPECT_CALL(verbs_, CreateQp(&pd_, _)).WillRepeatedly(std::ref(device));
  InlineSizeCache cache;
  absl::StatusOr<NegotiatedQp> qp = Create(kVendorMellanox, 4123, cache);
  ASSERT_TRUE(qp.ok()) << qp.status();
  EXPECT_THAT(device.requests(), ElementsAre(236, 220, 204));
  EXPECT_THAT(qp->attempts, ElementsAre(236, 220, 204));
  EXPECT_EQ(qp->requested_inline, 204u);
  EXPECT_EQ(qp->granted_inline, 204u);
  EXPECT_EQ(qp->usable_inline, 204u);
  EXPECT_EQ(cache.Get(), 204u);
}

struct VendorCase {
  const char* name;
  uint32_t vendor_id;
  uint32_t part_id;
  uint32_t first_request;
};

class VendorFirstRequestTest
    : public InlineNegotiationTest,
      public ::testing::WithParamInterface<VendorCase> {};

TEST_P(VendorFirstRequestTest, AsksTheVendorLimitFirstThenStepsDown) {
  const VendorCase& vendor = GetParam();
  // Refuse the first two requests to see the whole step-down sequence.
  FakeCreateQp device(/*limit=*/vendor.first_request - 32);
  EXPECT_CALL(verbs_, CreateQp).WillRepeatedly(std::ref(device));
  InlineSizeCache cache;
  absl::StatusOr<NegotiatedQp> qp =
      Create(vendor.vendor_id, vendor.part_id, cache);
  ASSERT_TRUE(qp.ok()) << qp.status();
  EXPECT_THAT(device.requests(),
              ElementsAre(vendor.first_request, vendor.first_request - 16,
                          vendor.first_request - 32));
  EXPECT_EQ(VendorInlineRequest(vendor.vendor_id, vendor.part_id),
            vendor.first_request);
}

INSTANTIATE_TEST_SUITE_P(
    Vendors, VendorFirstRequestTest,
    ::testing::Values(VendorCase{"ConnectX6", 0x02c9, 4123, 236},
                      VendorCase{"ConnectX7", 0x02c9, 4129, 236},
                      VendorCase{"IntelX722Gen1", 0x8086, 0x37D0, 48},
                      VendorCase{"IntelX722Gen1Vf", 0x8086, 0x37CD, 48},
                      VendorCase{"IntelE810Gen2", 0x8086, 0x1593, 101},
                      VendorCase{"IntelE823Gen2", 0x8086, 0x188A, 101},
                      VendorCase{"IntelLaterGen", 0x8086, 0x0DDD, 216},
                      VendorCase{"AlibabaErdma", 0x1ded, 0x107f, 96},
                      VendorCase{"SoftRoce", 0xFFFFFF, 0, 236},
                      VendorCase{"UnknownVendor", 0x1234, 7, 236}),
    [](const auto& info) { return std::string(info.param.name); });

TEST_F(InlineNegotiationTest, AllRefusedCreatesWithoutInline) {
  FakeCreateQp device(/*limit=*/0);
  EXPECT_CALL(verbs_, CreateQp).WillRepeatedly(std::ref(device));
  InlineSizeCache cache;
  absl::StatusOr<NegotiatedQp> qp = Create(kVendorMellanox, 4123, cache);
  ASSERT_TRUE(qp.ok()) << qp.status();
  EXPECT_THAT(device.requests(), ElementsAreArray(StepDownFrom(236)));
  EXPECT_EQ(device.requests().back(), 0u);
  EXPECT_EQ(device.requests()[device.requests().size() - 2], 12u);
  EXPECT_EQ(qp->requested_inline, 0u);
  EXPECT_EQ(qp->usable_inline, 0u);
  EXPECT_FALSE(ShouldSendInline(1, qp->usable_inline));
  EXPECT_FALSE(ShouldSendInline(0, qp->usable_inline));
}

TEST_F(InlineNegotiationTest, OtherErrnoIsReturnedAtOnceWithoutRetry) {
  FakeCreateQp device(/*limit=*/0, /*refuse_errno=*/ENOMEM);
  EXPECT_CALL(verbs_, CreateQp).WillRepeatedly(std::ref(device));
  InlineSizeCache cache;
  absl::StatusOr<NegotiatedQp> qp = Create(kVendorMellanox, 4123, cache);
  ASSERT_FALSE(qp.ok());
  EXPECT_THAT(device.requests(), ElementsAre(236));
  EXPECT_EQ(VerbsErrno(qp.status()), ENOMEM);
  EXPECT_EQ(qp.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(qp.status().message(), HasSubstr("Cannot allocate memory"));
  EXPECT_THAT(qp.status().message(), HasSubstr("dev0"));
  EXPECT_EQ(cache.Get(), std::nullopt);
}

TEST_F(InlineNegotiationTest, OtherErrnoMidwayStopsTheStepDown) {
  int calls = 0;
  EXPECT_CALL(verbs_, CreateQp).WillRepeatedly([&](ibv_pd*, ibv_qp_init_attr*) {
    return VerbsError("ibv_create_qp", ++calls == 1 ? EINVAL : EPERM);
  });
  InlineSizeCache cache;
  absl::StatusOr<NegotiatedQp> qp = Create(kVendorMellanox, 4123, cache);
  ASSERT_FALSE(qp.ok());
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(VerbsErrno(qp.status()), EPERM);
  EXPECT_THAT(qp.status().message(), HasSubstr("tried: 236, 220"));
}

TEST_F(InlineNegotiationTest, EinvalEvenWithoutInlineIsAnError) {
  EXPECT_CALL(verbs_, CreateQp)
      .WillRepeatedly(Return(VerbsError("ibv_create_qp", EINVAL)));
  InlineSizeCache cache;
  absl::StatusOr<NegotiatedQp> qp = Create(kVendorAlibaba, 0x107f, cache);
  ASSERT_FALSE(qp.ok());
  EXPECT_EQ(VerbsErrno(qp.status()), EINVAL);
  EXPECT_THAT(qp.status().message(),
              HasSubstr("tried: 96, 80, 64, 48, 32, 16, 0"));
}

TEST_F(InlineNegotiationTest, SecondQpStartsAtTheCachedSize) {
  FakeCreateQp device(/*limit=*/204);
  EXPECT_CALL(verbs_, CreateQp).WillRepeatedly(std::ref(device));
  InlineSizeCache cache;
  ASSERT_TRUE(Create(kVendorMellanox, 4123, cache).ok());
  absl::StatusOr<NegotiatedQp> second = Create(kVendorMellanox, 4123, cache);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_THAT(device.requests(), ElementsAre(236, 220, 204, 204));
  EXPECT_THAT(second->attempts, ElementsAre(204));
}

TEST_F(InlineNegotiationTest, TwoDevicesKeepSeparateCaches) {
  FakeCreateQp mellanox(/*limit=*/204);
  FakeCreateQp intel(/*limit=*/101);
  ibv_pd intel_pd = {};
  EXPECT_CALL(verbs_, CreateQp(&pd_, _)).WillRepeatedly(std::ref(mellanox));
  EXPECT_CALL(verbs_, CreateQp(&intel_pd, _)).WillRepeatedly(std::ref(intel));
  InlineSizeCache mellanox_cache;
  InlineSizeCache intel_cache;
  ASSERT_TRUE(Create(kVendorMellanox, 4123, mellanox_cache).ok());

  ibv_qp_init_attr attr = {};
  attr.cap.max_send_wr = 1;
  InlineDevice intel_device{"irdma0", kVendorIntel, 0x1593, &intel_cache};
  ASSERT_TRUE(CreateQpNegotiatingInline(verbs_, &intel_pd, attr, intel_device,
                                        std::nullopt)
                  .ok());
  ASSERT_TRUE(CreateQpNegotiatingInline(verbs_, &intel_pd, attr, intel_device,
                                        std::nullopt)
                  .ok());
  ASSERT_TRUE(Create(kVendorMellanox, 4123, mellanox_cache).ok());

  EXPECT_EQ(mellanox_cache.Get(), 204u);
  EXPECT_EQ(intel_cache.Get(), 101u);
  EXPECT_THAT(mellanox.requests(), ElementsAre(236, 220, 204, 204));
  EXPECT_THAT(intel.requests(), ElementsAre(101, 101));
}

TEST_F(InlineNegotiationTest, MellanoxGrantingMoreStillInlinesAtMost236) {
  // mlx5 rounds the request up to its WQE size and writes it back.
  FakeCreateQp device(/*limit=*/828, EINVAL, [](uint32_t) { return 256u; });
  EXPECT_CALL(verbs_, CreateQp).WillRepeatedly(std::ref(device));
  InlineSizeCache cache;
  absl::StatusOr<NegotiatedQp> qp = Create(kVendorMellanox, 4129, cache);
  ASSERT_TRUE(qp.ok()) << qp.status();
  EXPECT_EQ(qp->granted_inline, 256u);
  EXPECT_EQ(qp->usable_inline, 236u);
  EXPECT_TRUE(ShouldSendInline(236, qp->usable_inline));
  EXPECT_FALSE(ShouldSendInline(237, qp->usable_inline));
}

TEST_F(InlineNegotiationTest, OtherVendorsInlineUpToTheGrantedSize) {
  FakeCreateQp device(/*limit=*/1024, EINVAL, [](uint32_t) { return 512u; });
  EXPECT_CALL(verbs_, CreateQp).WillRepeatedly(std::ref(device));
  InlineSizeCache cache;
  absl::StatusOr<NegotiatedQp> qp = Create(kVendorSoftRoce, 0, cache);
  ASSERT_TRUE(qp.ok()) << qp.status();
  EXPECT_EQ(qp->usable_inline, 512u);
  EXPECT_TRUE(ShouldSendInline(512, qp->usable_inline));
  EXPECT_FALSE(ShouldSendInline(513, qp->usable_inline));
}

TEST_F(InlineNegotiationTest, ConfiguredFirstSizeReplacesTheVendorDefault) {
  FakeCreateQp device(/*limit=*/40);
  EXPECT_CALL(verbs_, CreateQp).WillRepeatedly(std::ref(device));
  InlineSizeCache cache;
  absl::StatusOr<NegotiatedQp> qp =
      Create(kVendorMellanox, 4123, cache, /*configured=*/64);
  ASSERT_TRUE(qp.ok()) << qp.status();
  EXPECT_THAT(device.requests(), ElementsAre(64, 48, 32));
  EXPECT_EQ(qp->usable_inline, 32u);
}

TEST_F(InlineNegotiationTest, ConfiguredZeroDisablesInlineEvenIfGranted) {
  // rxe grants 16 bytes of inline when asked for none.
  FakeCreateQp device(/*limit=*/512, EINVAL,
                      [](uint32_t asked) { return asked == 0 ? 16u : asked; });
  EXPECT_CALL(verbs_, CreateQp).WillRepeatedly(std::ref(device));
  InlineSizeCache cache;
  absl::StatusOr<NegotiatedQp> qp =
      Create(kVendorSoftRoce, 0, cache, /*configured=*/0);
  ASSERT_TRUE(qp.ok()) << qp.status();
  EXPECT_THAT(device.requests(), ElementsAre(0));
  EXPECT_EQ(qp->granted_inline, 16u);
  EXPECT_EQ(qp->usable_inline, 0u);
  EXPECT_FALSE(ShouldSendInline(8, qp->usable_inline));
  EXPECT_EQ(cache.Get(), std::nullopt);
}

TEST_F(InlineNegotiationTest, StepDownReachesZeroFromOddSizes) {
  FakeCreateQp device(/*limit=*/0);
  EXPECT_CALL(verbs_, CreateQp).WillRepeatedly(std::ref(device));
  InlineSizeCache cache;
  ASSERT_TRUE(Create(kVendorIntel, 0x1593, cache).ok());
  EXPECT_THAT(device.requests(), ElementsAre(101, 85, 69, 53, 37, 21, 5, 0));
}

TEST(UsableInlineSizeTest, Rules) {
  EXPECT_EQ(UsableInlineSize(kVendorMellanox, 236, 252), 236u);
  EXPECT_EQ(UsableInlineSize(kVendorMellanox, 204, 204), 204u);
  EXPECT_EQ(UsableInlineSize(kVendorIntel, 101, 101), 101u);
  EXPECT_EQ(UsableInlineSize(kVendorSoftRoce, 236, 236), 236u);
  EXPECT_EQ(UsableInlineSize(kVendorSoftRoce, 0, 16), 0u);
}

TEST(InlineSizeCacheTest, StartsEmptyAndRemembersTheLastSize) {
  InlineSizeCache cache;
  EXPECT_EQ(cache.Get(), std::nullopt);
  cache.Set(220);
  EXPECT_EQ(cache.Get(), 220u);
  cache.Set(0);
  EXPECT_EQ(cache.Get(), 0u);
}

}  // namespace
}  // namespace rdma_transport
