// The inline-size negotiation against every simulated device profile: on
// each, the transport must settle on the size that device really grants,
// from the vendor default and from an oversized MC_MAX_INLINE, and a second
// QP must start at the cached size.
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "sim/fabric.h"
#include "sim/profile_names.h"
#include "sim/sim_verbs.h"
#include "transport/context.h"

namespace rdma_transport {
namespace {

struct Expected {
  const char* profile;
  // From the vendor default.
  uint32_t requested;
  uint32_t granted;
  uint32_t usable;
  // From MC_MAX_INLINE=1024, stepping down 16 at a time.
  uint32_t requested_from_1024;
  uint32_t granted_from_1024;
  uint32_t usable_from_1024;
};

class InlineProfilesTest : public ::testing::TestWithParam<Expected> {
 protected:
  // Creates `qps` QPs on a fresh device of the profile; returns them.
  std::vector<NegotiatedQp> Create(std::optional<uint32_t> max_inline,
                                   int qps) {
    sim::Fabric fabric;
    sim::SimVerbs verbs(&fabric);
    std::vector<NegotiatedQp> created;
    absl::StatusOr<sim::DeviceProfile> profile =
        sim::ProfileByName(GetParam().profile);
    EXPECT_TRUE(profile.ok()) << profile.status();
    if (!profile.ok()) return created;
    absl::StatusOr<std::string> device = fabric.AddDevice(*profile);
    EXPECT_TRUE(device.ok()) << device.status();
    TransportConfig config;
    config.max_inline = max_inline;
    absl::StatusOr<std::unique_ptr<Context>> context =
        Context::Open(verbs, *device, config);
    EXPECT_TRUE(context.ok()) << context.status();
    if (!context.ok()) return created;
    absl::StatusOr<ibv_cq*> cq =
        verbs.CreateCq((*context)->device(), 64, nullptr, nullptr, 0);
    EXPECT_TRUE(cq.ok()) << cq.status();
    for (int i = 0; i < qps; ++i) {
      absl::StatusOr<NegotiatedQp> qp =
          (*context)->CreateRcQp(RcQpCaps{}, *cq, *cq);
      EXPECT_TRUE(qp.ok()) << qp.status();
      if (qp.ok()) created.push_back(*qp);
    }
    for (const NegotiatedQp& qp : created) {
      EXPECT_TRUE(verbs.DestroyQp(qp.qp).ok());
    }
    EXPECT_TRUE(verbs.DestroyCq(*cq).ok());
    context->reset();
    EXPECT_TRUE(fabric.LeakReport().empty());
    return created;
  }
};

TEST_P(InlineProfilesTest, VendorDefaultSettlesOnWhatTheDeviceGrants) {
  const Expected& expected = GetParam();
  std::vector<NegotiatedQp> qps = Create(std::nullopt, 2);
  ASSERT_EQ(qps.size(), 2u);
  EXPECT_EQ(qps[0].requested_inline, expected.requested);
  EXPECT_EQ(qps[0].granted_inline, expected.granted);
  EXPECT_EQ(qps[0].usable_inline, expected.usable);
  EXPECT_EQ(qps[0].attempts, std::vector<uint32_t>{expected.requested});
  // The second QP starts at the cached size.
  EXPECT_EQ(qps[1].attempts, std::vector<uint32_t>{expected.requested});
}

TEST_P(InlineProfilesTest, OversizedRequestStepsDownToTheDevicesLimit) {
  const Expected& expected = GetParam();
  std::vector<NegotiatedQp> qps = Create(1024, 2);
  ASSERT_EQ(qps.size(), 2u);
  EXPECT_EQ(qps[0].requested_inline, expected.requested_from_1024);
  EXPECT_EQ(qps[0].granted_inline, expected.granted_from_1024);
  EXPECT_EQ(qps[0].usable_inline, expected.usable_from_1024);
  ASSERT_FALSE(qps[0].attempts.empty());
  EXPECT_EQ(qps[0].attempts.front(), 1024u);
  EXPECT_EQ(qps[0].attempts.size(),
            (1024 - expected.requested_from_1024) / 16 + 1);
  EXPECT_EQ(qps[1].attempts,
            std::vector<uint32_t>{expected.requested_from_1024});
}

TEST_P(InlineProfilesTest, InlineOffAsksForNothingAndUsesNothing) {
  std::vector<NegotiatedQp> qps = Create(0, 1);
  ASSERT_EQ(qps.size(), 1u);
  EXPECT_EQ(qps[0].attempts, std::vector<uint32_t>{0});
  EXPECT_EQ(qps[0].usable_inline, 0u);
}

// mlx5 rounds a request up to its send WQE and writes the larger value back:
// 236 -> a 448-byte WQE -> 252 granted, 236 usable (BlueFlame); the largest
// RC request a 1024-byte WQE holds is 816 (granted 828). irdma, eRDMA and
// rxe grant exactly what they accept.
INSTANTIATE_TEST_SUITE_P(
    EveryProfile, InlineProfilesTest,
    ::testing::Values(Expected{"cx6", 236, 252, 236, 816, 828, 236},
                      Expected{"cx7", 236, 252, 236, 816, 828, 236},
                      Expected{"e810", 101, 101, 101, 96, 96, 96},
                      Expected{"x722", 48, 48, 48, 48, 48, 48},
                      Expected{"erdma", 96, 96, 96, 96, 96, 96},
                      Expected{"rxe", 236, 236, 236, 512, 512, 512}),
    [](const auto& info) {
      std::string name = info.param.profile;
      for (char& c : name) {
        if (c == '-') c = '_';
      }
      return name;
    });

}  // namespace
}  // namespace rdma_transport
