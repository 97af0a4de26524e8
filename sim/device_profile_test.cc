// The stock profiles' provider rules, directly (GrantQpCaps / GrantCqDepth)
// and through SimVerbs (what CreateQp writes back, what the queries report).

#include "sim/device_profile.h"

#include <cerrno>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "sim/fabric.h"
#include "sim/sim_verbs.h"
#include "sim/test_macros.h"
#include "verbs_shim/verbs_error.h"

namespace rdma_transport::sim {
namespace {

// What asking for `inline_size` inline bytes (one send SGE) is granted, or
// nullopt when the request is refused with EINVAL.
std::optional<uint32_t> GrantedInline(const DeviceProfile& profile,
                                      uint32_t inline_size) {
  ibv_qp_cap requested{.max_send_wr = 16,
                       .max_recv_wr = 16,
                       .max_send_sge = 1,
                       .max_recv_sge = 1,
                       .max_inline_data = inline_size};
  absl::StatusOr<ibv_qp_cap> granted = GrantQpCaps(profile, requested);
  if (!granted.ok()) {
    EXPECT_EQ(VerbsErrno(granted.status()), EINVAL) << granted.status();
    return std::nullopt;
  }
  return granted->max_inline_data;
}

struct InlineCase {
  const char* profile_name;
  DeviceProfile (*profile)();
  // Grants for asking 0, 48, 96, 101, 236, 256, 512, 1024 (nullopt: EINVAL).
  std::vector<std::optional<uint32_t>> grants;

  friend void PrintTo(const InlineCase& c, std::ostream* os) {
    *os << c.profile_name;
  }
};

constexpr uint32_t kAsks[] = {0, 48, 96, 101, 236, 256, 512, 1024};
constexpr std::nullopt_t kRefused = std::nullopt;

class InlineGrantTest : public ::testing::TestWithParam<InlineCase> {};

TEST_P(InlineGrantTest, GrantsWhatTheProviderGrants) {
  const InlineCase& c = GetParam();
  const DeviceProfile profile = c.profile();
  ASSERT_EQ(c.grants.size(), std::size(kAsks));
  for (size_t i = 0; i < std::size(kAsks); ++i) {
    EXPECT_EQ(GrantedInline(profile, kAsks[i]), c.grants[i])
        << c.profile_name << " asked for " << kAsks[i];
  }
}

INSTANTIATE_TEST_SUITE_P(
    Profiles, InlineGrantTest,
    ::testing::Values(
        // mlx5: WQE = align64(192 + align16(4 + ask)), grant = WQE - 196;
        // asking 0 still gets the 256-byte WQE of one data segment.
        InlineCase{"ConnectX6",
                   ConnectX6,
                   {60, 60, 124, 124, 252, 316, 572, kRefused}},
        InlineCase{"ConnectX7",
                   ConnectX7,
                   {60, 60, 124, 124, 252, 316, 572, kRefused}},
        InlineCase{"IntelE810",
                   IntelE810,
                   {0, 48, 96, 101, kRefused, kRefused, kRefused, kRefused}},
        InlineCase{"IntelX722",
                   IntelX722,
                   {0, 48, kRefused, kRefused, kRefused, kRefused, kRefused,
                    kRefused}},
        InlineCase{
            "AlibabaErdma",
            AlibabaErdma,
            {0, 48, 96, kRefused, kRefused, kRefused, kRefused, kRefused}},
        InlineCase{
            "SoftRoce", SoftRoce, {16, 48, 96, 101, 236, 256, 512, kRefused}}),
    [](const ::testing::TestParamInfo<InlineCase>& info) {
      return std::string(info.param.profile_name);
    });

TEST(Mlx5RulesTest, LargestInlineFillsA1024ByteWqe) {
  EXPECT_EQ(GrantedInline(ConnectX6(), 828), 828u);
  EXPECT_EQ(GrantedInline(ConnectX6(), 829), std::nullopt);
}

TEST(Mlx5RulesTest, MoreSendSgesMeanMoreInline) {
  // 30 data segments: 192 + 480 = 672 -> 704-byte WQE -> 508 inline bytes.
  ibv_qp_cap requested{.max_send_wr = 16,
                       .max_recv_wr = 16,
                       .max_send_sge = 30,
                       .max_recv_sge = 1,
                       .max_inline_data = 0};
  ASSERT_OK_AND_ASSIGN(ibv_qp_cap granted, GrantQpCaps(ConnectX6(), requested));
  EXPECT_EQ(granted.max_inline_data, 508u);
  EXPECT_EQ(granted.max_send_sge, 30u);
}

TEST(Mlx5RulesTest, QueueDepthsRoundUpToPowersOfTwo) {
  ibv_qp_cap requested{.max_send_wr = 100,
                       .max_recv_wr = 100,
                       .max_send_sge = 1,
                       .max_recv_sge = 1,
                       .max_inline_data = 0};
  ASSERT_OK_AND_ASSIGN(ibv_qp_cap granted, GrantQpCaps(ConnectX6(), requested));
  EXPECT_EQ(granted.max_send_wr, 128u);
  EXPECT_EQ(granted.max_recv_wr, 128u);

  // The receive queue is at least one 64-byte block of 16-byte WQEs.
  requested.max_recv_wr = 1;
  ASSERT_OK_AND_ASSIGN(granted, GrantQpCaps(ConnectX6(), requested));
  EXPECT_EQ(granted.max_recv_wr, 4u);
}

TEST(Mlx5RulesTest, SendQueueLimitCountsBasicBlocksNotWrs) {
  // 256-byte WQEs are 4 basic blocks each: 8192 WRs fill 32768 blocks.
  ibv_qp_cap requested{.max_send_wr = 8192,
                       .max_recv_wr = 1,
                       .max_send_sge = 1,
                       .max_recv_sge = 1,
                       .max_inline_data = 0};
  ASSERT_OK_AND_ASSIGN(ibv_qp_cap granted, GrantQpCaps(ConnectX6(), requested));
  EXPECT_EQ(granted.max_send_wr, 8192u);
  requested.max_send_wr = 8193;
  EXPECT_ERRNO(GrantQpCaps(ConnectX6(), requested), EINVAL);
}

TEST(Mlx5RulesTest, CqDepthIsPowerOfTwoMinusOne) {
  EXPECT_EQ(*GrantCqDepth(ConnectX6(), 1), 1);
  EXPECT_EQ(*GrantCqDepth(ConnectX6(), 100), 127);
  EXPECT_EQ(*GrantCqDepth(ConnectX6(), 127), 127);
  EXPECT_EQ(*GrantCqDepth(ConnectX6(), 128), 255);
  EXPECT_ERRNO(GrantCqDepth(ConnectX6(), 0), EINVAL);
  EXPECT_ERRNO(GrantCqDepth(ConnectX6(), 4194304), EINVAL);
}

TEST(RxeRulesTest, InlineSpaceAndSgeSpaceAreShared) {
  ibv_qp_cap requested{.max_send_wr = 16,
                       .max_recv_wr = 16,
                       .max_send_sge = 4,
                       .max_recv_sge = 1,
                       .max_inline_data = 0};
  ASSERT_OK_AND_ASSIGN(ibv_qp_cap granted, GrantQpCaps(SoftRoce(), requested));
  EXPECT_EQ(granted.max_inline_data, 64u);
  EXPECT_EQ(granted.max_send_sge, 4u);

  requested.max_inline_data = 256;
  ASSERT_OK_AND_ASSIGN(granted, GrantQpCaps(SoftRoce(), requested));
  EXPECT_EQ(granted.max_inline_data, 256u);
  EXPECT_EQ(granted.max_send_sge, 16u);
}

TEST(FixedLimitRulesTest, DepthsAreExact) {
  ibv_qp_cap requested{.max_send_wr = 100,
                       .max_recv_wr = 33,
                       .max_send_sge = 3,
                       .max_recv_sge = 2,
                       .max_inline_data = 64};
  ASSERT_OK_AND_ASSIGN(ibv_qp_cap granted, GrantQpCaps(IntelE810(), requested));
  EXPECT_EQ(granted.max_send_wr, 100u);
  EXPECT_EQ(granted.max_recv_wr, 33u);
  EXPECT_EQ(granted.max_send_sge, 3u);
  EXPECT_EQ(granted.max_recv_sge, 2u);
  EXPECT_EQ(granted.max_inline_data, 64u);
  EXPECT_EQ(*GrantCqDepth(IntelE810(), 100), 100);
}

TEST(DeviceLimitsTest, RefusesBeyondMaxQpWrAndMaxSge) {
  for (const DeviceProfile& profile :
       {ConnectX6(), IntelE810(), AlibabaErdma(), SoftRoce()}) {
    ibv_qp_cap requested{.max_send_wr = 16,
                         .max_recv_wr = 16,
                         .max_send_sge = 1,
                         .max_recv_sge = 1,
                         .max_inline_data = 0};
    requested.max_recv_wr = static_cast<uint32_t>(profile.max_qp_wr) + 1;
    EXPECT_ERRNO(GrantQpCaps(profile, requested), EINVAL) << profile.model;
    requested.max_recv_wr = 16;
    requested.max_send_sge = static_cast<uint32_t>(profile.max_sge) + 1;
    EXPECT_ERRNO(GrantQpCaps(profile, requested), EINVAL) << profile.model;
  }
}

// --- Through SimVerbs ---

struct IdentityCase {
  DeviceProfile (*profile)();
  uint32_t vendor_id;
  uint32_t vendor_part_id;
  const char* name;
};

TEST(ProfileQueriesTest, DevicesReportTheirProfile) {
  const IdentityCase cases[] = {
      {ConnectX6, 0x02c9, 4123, "sim_cx6_0"},
      {ConnectX7, 0x02c9, 4129, "sim_cx7_0"},
      {IntelE810, 0x8086, 0x1593, "sim_e810_0"},
      {IntelX722, 0x8086, 0x37D0, "sim_x722_0"},
      {AlibabaErdma, 0x1ded, 0x107f, "sim_erdma_0"},
      {SoftRoce, 0xFFFFFF, 0, "sim_rxe_0"},
  };
  Fabric fabric;
  SimVerbs verbs(&fabric);
  for (const IdentityCase& c : cases) {
    const DeviceProfile profile = c.profile();
    ASSERT_OK_AND_ASSIGN(std::string name, fabric.AddDevice(profile));
    EXPECT_EQ(name, c.name);
    ASSERT_OK_AND_ASSIGN(ibv_context * context, verbs.OpenDevice(name));
    EXPECT_STREQ(context->device->name, c.name);

    ibv_device_attr device{};
    ASSERT_OK(verbs.QueryDevice(context, &device));
    EXPECT_EQ(device.vendor_id, c.vendor_id) << name;
    EXPECT_EQ(device.vendor_part_id, c.vendor_part_id) << name;
    EXPECT_EQ(device.max_qp_wr, profile.max_qp_wr) << name;
    EXPECT_EQ(device.max_sge, profile.max_sge) << name;
    EXPECT_EQ(device.max_cqe, profile.max_cqe) << name;
    EXPECT_EQ(device.max_mr_size, profile.max_mr_size) << name;
    EXPECT_EQ(device.phys_port_cnt, 1) << name;
    EXPECT_EQ(std::string(device.fw_ver), profile.fw_version) << name;

    ibv_port_attr port{};
    ASSERT_OK(verbs.QueryPort(context, 1, &port));
    EXPECT_EQ(port.state, IBV_PORT_ACTIVE);
    EXPECT_EQ(port.link_layer, IBV_LINK_LAYER_ETHERNET);
    EXPECT_EQ(port.active_mtu, profile.active_mtu);
    EXPECT_EQ(port.max_mtu, profile.max_mtu);
    EXPECT_EQ(port.gid_tbl_len, profile.gid_table_length);
    EXPECT_ERRNO(verbs.QueryPort(context, 2, &port), EINVAL);
    ASSERT_OK(verbs.CloseDevice(context));
  }
  ibv_context* rxe = *verbs.OpenDevice("sim_rxe_0");
  ibv_port_attr port{};
  ASSERT_OK(verbs.QueryPort(rxe, 1, &port));
  EXPECT_EQ(port.active_mtu, IBV_MTU_1024);
  ASSERT_OK(verbs.CloseDevice(rxe));
}

TEST(ProfileQueriesTest, CreateQpWritesTheGrantBack) {
  Fabric fabric;
  SimVerbs verbs(&fabric);
  const std::string cx6 = *fabric.AddDevice(ConnectX6());
  const std::string e810 = *fabric.AddDevice(IntelE810());
  for (const auto& [device, asked, granted] :
       {std::tuple<std::string, uint32_t, uint32_t>{cx6, 236, 252},
        {cx6, 256, 316},
        {e810, 64, 64}}) {
    ibv_context* context = *verbs.OpenDevice(device);
    ibv_pd* pd = *verbs.AllocPd(context);
    ibv_cq* cq = *verbs.CreateCq(context, 16, nullptr, nullptr, 0);
    ibv_qp_init_attr init{};
    init.send_cq = cq;
    init.recv_cq = cq;
    init.qp_type = IBV_QPT_RC;
    init.cap = {.max_send_wr = 16,
                .max_recv_wr = 16,
                .max_send_sge = 1,
                .max_recv_sge = 1,
                .max_inline_data = asked};
    ASSERT_OK_AND_ASSIGN(ibv_qp * qp, verbs.CreateQp(pd, &init));
    EXPECT_EQ(init.cap.max_inline_data, granted) << device << " " << asked;
    ibv_qp_attr attr{};
    ibv_qp_init_attr queried{};
    ASSERT_OK(verbs.QueryQp(qp, &attr, 0, &queried));
    EXPECT_EQ(queried.cap.max_inline_data, granted);
    EXPECT_EQ(attr.cap.max_inline_data, granted);
    ASSERT_OK(verbs.DestroyQp(qp));
    ASSERT_OK(verbs.DestroyCq(cq));
    ASSERT_OK(verbs.DeallocPd(pd));
    ASSERT_OK(verbs.CloseDevice(context));
  }
  EXPECT_TRUE(fabric.LeakReport().empty());
}

TEST(ProfileQueriesTest, CreateQpRefusesInlineAboveTheLimit) {
  Fabric fabric;
  SimVerbs verbs(&fabric);
  for (const DeviceProfile& profile : {ConnectX6(), IntelX722(), SoftRoce()}) {
    const std::string name = *fabric.AddDevice(profile);
    ibv_context* context = *verbs.OpenDevice(name);
    ibv_pd* pd = *verbs.AllocPd(context);
    ibv_cq* cq = *verbs.CreateCq(context, 16, nullptr, nullptr, 0);
    ibv_qp_init_attr init{};
    init.send_cq = cq;
    init.recv_cq = cq;
    init.qp_type = IBV_QPT_RC;
    init.cap = {.max_send_wr = 16,
                .max_recv_wr = 16,
                .max_send_sge = 1,
                .max_recv_sge = 1,
                .max_inline_data = 1024};
    EXPECT_ERRNO(verbs.CreateQp(pd, &init), EINVAL) << name;
    EXPECT_EQ(init.cap.max_inline_data, 1024u) << "no write-back on failure";
    ASSERT_OK(verbs.DestroyCq(cq));
    ASSERT_OK(verbs.DeallocPd(pd));
    ASSERT_OK(verbs.CloseDevice(context));
  }
}

}  // namespace
}  // namespace rdma_transport::sim
