// Context against exact verbs interactions: opening, GID choice, QP creation
// with the device's vendor, and teardown.
#include "transport/context.h"

#include <arpa/inet.h>

#include <cerrno>
#include <cstring>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "verbs_shim/mock_verbs.h"
#include "verbs_shim/verbs_error.h"

namespace rdma_transport {
namespace {

using ::testing::_;
using ::testing::DoAll;
using ::testing::HasSubstr;
using ::testing::NiceMock;
using ::testing::Return;
using ::testing::SetArgPointee;

ibv_gid_entry GidEntry(uint32_t index, const char* address, ibv_gid_type type,
                       uint32_t port = 1) {
  ibv_gid_entry entry = {};
  EXPECT_EQ(inet_pton(AF_INET6, address, entry.gid.raw), 1) << address;
  entry.gid_index = index;
  entry.gid_type = type;
  entry.port_num = port;
  return entry;
}

class ContextTest : public ::testing::Test {
 protected:
  ContextTest() {
    device_attr_.vendor_id = 0x02c9;
    device_attr_.vendor_part_id = 4123;
    device_attr_.phys_port_cnt = 1;
    device_attr_.max_qp_rd_atom = 16;
    device_attr_.max_qp_init_rd_atom = 16;
    port_attr_.link_layer = IBV_LINK_LAYER_ETHERNET;
    port_attr_.active_mtu = IBV_MTU_1024;
    port_attr_.gid_tbl_len = 8;
    gids_ = {GidEntry(0, "fe80::1", IBV_GID_TYPE_ROCE_V2),
             GidEntry(1, "::ffff:10.0.0.7", IBV_GID_TYPE_ROCE_V1),
             GidEntry(2, "2001:db8::7", IBV_GID_TYPE_ROCE_V2),
             GidEntry(3, "::ffff:10.0.0.7", IBV_GID_TYPE_ROCE_V2),
             GidEntry(4, "::ffff:10.0.0.8", IBV_GID_TYPE_ROCE_V2)};
    ON_CALL(verbs_, OpenDevice("mlx5_0")).WillByDefault(Return(&device_));
    ON_CALL(verbs_, QueryDevice(&device_, _))
        .WillByDefault(
            DoAll(SetArgPointee<1>(device_attr_), Return(absl::OkStatus())));
    ON_CALL(verbs_, QueryPort(&device_, 1, _))
        .WillByDefault(
            DoAll(SetArgPointee<2>(port_attr_), Return(absl::OkStatus())));
    ON_CALL(verbs_, QueryGidTable(&device_, _))
        .WillByDefault(
            [this](ibv_context*,
                   std::span<ibv_gid_entry> out) -> absl::StatusOr<size_t> {
              if (out.size() < gids_.size()) {
                return VerbsError("ibv_query_gid_table", EINVAL);
              }
              std::copy(gids_.begin(), gids_.end(), out.begin());
              return gids_.size();
            });
    ON_CALL(verbs_, AllocPd(&device_)).WillByDefault(Return(&pd_));
    ON_CALL(verbs_, DeallocPd(&pd_)).WillByDefault(Return(absl::OkStatus()));
    ON_CALL(verbs_, CloseDevice(&device_))
        .WillByDefault(Return(absl::OkStatus()));
  }

  absl::StatusOr<std::unique_ptr<Context>> Open(TransportConfig config = {}) {
    return Context::Open(verbs_, "mlx5_0", config);
  }

  static ibv_context NoAsyncFd() {
    ibv_context context = {};
    context.async_fd = -1;
    return context;
  }

  NiceMock<MockVerbs> verbs_;
  // No async event fd: the Context must not touch one it has not got.
  ibv_context device_ = NoAsyncFd();
  ibv_pd pd_ = {};
  ibv_device_attr device_attr_ = {};
  ibv_port_attr port_attr_ = {};
  std::vector<ibv_gid_entry> gids_;
};

TEST_F(ContextTest, AutoGidIsTheFirstRoceV2Ipv4MappedEntry) {
  absl::StatusOr<std::unique_ptr<Context>> context = Open();
  ASSERT_TRUE(context.ok()) << context.status();
  EXPECT_EQ((*context)->gid().index, 3u);
  EXPECT_EQ(FormatGid((*context)->gid().gid), "::ffff:10.0.0.7");
  EXPECT_EQ((*context)->gid().gid_type, IBV_GID_TYPE_ROCE_V2);
  // Every candidate and why it was not taken.
  const std::string& why = (*context)->gid().why;
  EXPECT_THAT(why, HasSubstr("GID 3 chosen: the first RoCE v2 IPv4 entry of "
                             "mlx5_0 port 1"));
  EXPECT_THAT(why, HasSubstr("0=fe80::1 (RoCE v2): skipped, link-local"));
  EXPECT_THAT(why, HasSubstr("1=::ffff:10.0.0.7 (RoCE v1): skipped, not RoCE "
                             "v2"));
  EXPECT_THAT(why, HasSubstr("2=2001:db8::7 (RoCE v2): IPv6 global, ranked "
                             "below IPv4"));
  EXPECT_THAT(why, HasSubstr("4=::ffff:10.0.0.8 (RoCE v2): IPv4"));
}

TEST_F(ContextTest, AutoGidFallsBackToAGlobalIpv6RoceV2Entry) {
  gids_ = {GidEntry(0, "fe80::1", IBV_GID_TYPE_ROCE_V2),
           GidEntry(1, "::ffff:10.0.0.7", IBV_GID_TYPE_ROCE_V1),
           GidEntry(2, "2001:db8::7", IBV_GID_TYPE_ROCE_V2),
           GidEntry(3, "2001:db8::8", IBV_GID_TYPE_ROCE_V2)};
  absl::StatusOr<std::unique_ptr<Context>> context = Open();
  ASSERT_TRUE(context.ok()) << context.status();
  EXPECT_EQ((*context)->gid().index, 2u);
  EXPECT_THAT(
      (*context)->gid().why,
      HasSubstr("GID 2 chosen: the first RoCE v2 global IPv6 (no usable "
                "RoCE v2 IPv4 entry)"));
}

TEST_F(ContextTest, AutoGidSkipsOtherPortsZeroAndLinkLocal) {
  gids_ = {GidEntry(0, "::ffff:10.9.9.9", IBV_GID_TYPE_ROCE_V2, /*port=*/2),
           GidEntry(1, "::", IBV_GID_TYPE_ROCE_V2),
           GidEntry(2, "fe80::ffff:10.0.0.1", IBV_GID_TYPE_ROCE_V2),
           GidEntry(5, "::ffff:192.168.1.5", IBV_GID_TYPE_ROCE_V2)};
  absl::StatusOr<std::unique_ptr<Context>> context = Open();
  ASSERT_TRUE(context.ok()) << context.status();
  EXPECT_EQ((*context)->gid().index, 5u);
}

TEST_F(ContextTest, NoUsableGidIsNotFoundAndListsTheTable) {
  gids_ = {GidEntry(0, "fe80::1", IBV_GID_TYPE_ROCE_V2),
           GidEntry(1, "::ffff:10.0.0.7", IBV_GID_TYPE_ROCE_V1)};
  absl::StatusOr<std::unique_ptr<Context>> context = Open();
  ASSERT_FALSE(context.ok());
  EXPECT_EQ(context.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(context.status().message(),
              HasSubstr("0=fe80::1 (RoCE v2), 1=::ffff:10.0.0.7 (RoCE v1)"));
  EXPECT_THAT(context.status().message(), HasSubstr("mlx5_0 port 1"));
}

TEST_F(ContextTest, GidTableFallsBackToOneEntryAtATime) {
  // An old kernel without the table query; index 2 is empty.
  EXPECT_CALL(verbs_, QueryGidTable(&device_, _))
      .WillOnce(Return(VerbsError("ibv_query_gid_table", EOPNOTSUPP)));
  port_attr_.gid_tbl_len = 4;
  ON_CALL(verbs_, QueryPort(&device_, 1, _))
      .WillByDefault(
          DoAll(SetArgPointee<2>(port_attr_), Return(absl::OkStatus())));
  const std::vector<ibv_gid_entry> table = {
      GidEntry(0, "fe80::1", IBV_GID_TYPE_ROCE_V2),
      GidEntry(1, "::ffff:10.0.0.9", IBV_GID_TYPE_ROCE_V1), ibv_gid_entry{},
      GidEntry(3, "::ffff:10.0.0.9", IBV_GID_TYPE_ROCE_V2)};
  EXPECT_CALL(verbs_, QueryGid(&device_, 1, _, _))
      .Times(4)
      .WillRepeatedly([&](ibv_context*, uint8_t, uint32_t index,
                          ibv_gid_entry* entry) -> absl::Status {
        if (index == 2) return VerbsError("ibv_query_gid_ex", ENODATA);
        *entry = table[index];
        return absl::OkStatus();
      });
  absl::StatusOr<std::unique_ptr<Context>> context = Open();
  ASSERT_TRUE(context.ok()) << context.status();
  EXPECT_EQ((*context)->gid().index, 3u);
}

TEST_F(ContextTest, GidTableQueryIsSizedToThePortsTable) {
  // rxe's table has 1024 entries; the kernel refuses buffers over 64 KiB.
  port_attr_.gid_tbl_len = 1024;
  ON_CALL(verbs_, QueryPort(&device_, 1, _))
      .WillByDefault(
          DoAll(SetArgPointee<2>(port_attr_), Return(absl::OkStatus())));
  EXPECT_CALL(verbs_, QueryGidTable(&device_, _))
      .WillOnce([this](ibv_context*,
                       std::span<ibv_gid_entry> out) -> absl::StatusOr<size_t> {
        EXPECT_EQ(out.size(), 1024u);
        std::copy(gids_.begin(), gids_.end(), out.begin());
        return gids_.size();
      });
  absl::StatusOr<std::unique_ptr<Context>> context = Open();
  ASSERT_TRUE(context.ok()) << context.status();
  EXPECT_EQ((*context)->gid().index, 3u);
}

TEST_F(ContextTest, ConfiguredGidIndexIsQueriedAndUsed) {
  EXPECT_CALL(verbs_, QueryGidTable).Times(0);
  EXPECT_CALL(verbs_, QueryGid(&device_, 1, 2, _))
      .WillOnce(DoAll(SetArgPointee<3>(gids_[2]), Return(absl::OkStatus())));
  TransportConfig config;
  config.gid_index = 2;
  absl::StatusOr<std::unique_ptr<Context>> context = Open(config);
  ASSERT_TRUE(context.ok()) << context.status();
  EXPECT_EQ((*context)->gid().index, 2u);
  EXPECT_EQ(FormatGid((*context)->gid().gid), "2001:db8::7");
}

TEST_F(ContextTest, EmptyConfiguredGidIndexNamesTheVariable) {
  EXPECT_CALL(verbs_, QueryGid(&device_, 1, 9, _))
      .WillOnce(Return(VerbsError("ibv_query_gid_ex", ENODATA)));
  TransportConfig config;
  config.gid_index = 9;
  absl::StatusOr<std::unique_ptr<Context>> context = Open(config);
  ASSERT_FALSE(context.ok());
  EXPECT_THAT(context.status().message(),
              HasSubstr("MC_GID_INDEX=9 cannot be used on mlx5_0 port 1"));
  EXPECT_EQ(VerbsErrno(context.status()), ENODATA);
}

TEST_F(ContextTest, PortTheDeviceDoesNotHaveIsRefused) {
  TransportConfig config;
  config.port = 2;
  absl::StatusOr<std::unique_ptr<Context>> context = Open(config);
  ASSERT_FALSE(context.ok());
  EXPECT_EQ(context.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(context.status().message(), HasSubstr("MC_IB_PORT=2"));
}

TEST_F(ContextTest, MtuIsTheSmallerOfConfigAndActive) {
  absl::StatusOr<std::unique_ptr<Context>> context = Open();
  ASSERT_TRUE(context.ok());
  EXPECT_EQ((*context)->mtu(), 1024);
  TransportConfig config;
  config.mtu = 512;
  context = Open(config);
  ASSERT_TRUE(context.ok());
  EXPECT_EQ((*context)->mtu(), 512);
}

TEST_F(ContextTest, UnknownDeviceFailsWithTheBackendsError) {
  EXPECT_CALL(verbs_, OpenDevice("mlx5_9"))
      .WillOnce(Return(absl::NotFoundError("no RDMA device named \"mlx5_9\"")));
  absl::StatusOr<std::unique_ptr<Context>> context =
      Context::Open(verbs_, "mlx5_9", {});
  EXPECT_EQ(context.status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ContextTest, ClosesWhatItOpenedWhenOpenFailsHalfway) {
  EXPECT_CALL(verbs_, AllocPd(&device_))
      .WillOnce(Return(VerbsError("ibv_alloc_pd", ENOMEM)));
  EXPECT_CALL(verbs_, DeallocPd).Times(0);
  EXPECT_CALL(verbs_, CloseDevice(&device_)).Times(1);
  absl::StatusOr<std::unique_ptr<Context>> context = Open();
  ASSERT_FALSE(context.ok());
  EXPECT_EQ(VerbsErrno(context.status()), ENOMEM);
  EXPECT_THAT(context.status().message(), HasSubstr("mlx5_0"));
}

TEST_F(ContextTest, DestructionReleasesPdThenDevice) {
  absl::StatusOr<std::unique_ptr<Context>> context = Open();
  ASSERT_TRUE(context.ok());
  ::testing::InSequence in_order;
  EXPECT_CALL(verbs_, DeallocPd(&pd_));
  EXPECT_CALL(verbs_, CloseDevice(&device_));
  context->reset();
}

TEST_F(ContextTest, CreateRcQpNegotiatesWithTheDevicesVendorAndCaches) {
  absl::StatusOr<std::unique_ptr<Context>> context = Open();
  ASSERT_TRUE(context.ok());
  ibv_cq cq = {};
  ibv_qp qp = {};
  std::vector<uint32_t> requests;
  EXPECT_CALL(verbs_, CreateQp(&pd_, _))
      .WillRepeatedly(
          [&](ibv_pd*, ibv_qp_init_attr* attr) -> absl::StatusOr<ibv_qp*> {
            requests.push_back(attr->cap.max_inline_data);
            EXPECT_EQ(attr->qp_type, IBV_QPT_RC);
            EXPECT_EQ(attr->send_cq, &cq);
            EXPECT_EQ(attr->cap.max_send_wr, 32u);
            if (attr->cap.max_inline_data > 220) {
              return VerbsError("ibv_create_qp", EINVAL);
            }
            return &qp;
          });
  RcQpCaps caps;
  caps.max_send_wr = 32;
  absl::StatusOr<NegotiatedQp> first = (*context)->CreateRcQp(caps, &cq, &cq);
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<NegotiatedQp> second = (*context)->CreateRcQp(caps, &cq, &cq);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(requests, (std::vector<uint32_t>{236, 220, 220}));
  EXPECT_EQ(second->usable_inline, 220u);
}

TEST_F(ContextTest, EndpointAndRouteDescribeThisSide) {
  absl::StatusOr<std::unique_ptr<Context>> context = Open();
  ASSERT_TRUE(context.ok());
  ibv_qp qp = {};
  qp.qp_num = 99;
  QpEndpoint endpoint = (*context)->Endpoint(&qp, 0x1abcdef);
  EXPECT_EQ(endpoint.qp_num, 99u);
  EXPECT_EQ(endpoint.psn, 0xabcdefu);  // 24 bits
  EXPECT_EQ(FormatGid(endpoint.gid), "::ffff:10.0.0.7");
  EXPECT_EQ(endpoint.mtu, 1024);
  LocalRoute route = (*context)->Route(5);
  EXPECT_TRUE(route.use_global_route);
  EXPECT_EQ(route.sgid_index, 3u);
  EXPECT_EQ(route.max_rd_atomic, 16);
}

// The address-handle probe: from the GID to itself, on the Context's PD.
TEST_F(ContextTest, AutoGidSkipsAnEntryThatCannotFormAnAddressHandle) {
  EXPECT_CALL(verbs_, CreateAh(&pd_, _))
      .WillRepeatedly(
          [](ibv_pd*, ibv_ah_attr* attr) -> absl::StatusOr<ibv_ah*> {
            EXPECT_EQ(attr->port_num, 1);
            EXPECT_EQ(attr->is_global, 1);
            if (attr->grh.sgid_index == 3) {
              EXPECT_EQ(FormatGid(attr->grh.dgid), "::ffff:10.0.0.7");
              return VerbsError("ibv_create_ah", ENETUNREACH);
            }
            static ibv_ah ah = {};
            return &ah;
          });
  absl::StatusOr<std::unique_ptr<Context>> context = Open();
  ASSERT_TRUE(context.ok()) << context.status();
  EXPECT_EQ((*context)->gid().index, 4u);
  EXPECT_THAT((*context)->gid().why,
              HasSubstr("3=::ffff:10.0.0.7 (RoCE v2): skipped, cannot form an "
                        "address handle: ibv_create_ah"));
}

TEST_F(ContextTest, EveryCandidateFailingTheProbeIsNotFound) {
  EXPECT_CALL(verbs_, CreateAh(&pd_, _))
      .WillRepeatedly(Return(VerbsError("ibv_create_ah", EHOSTUNREACH)));
  absl::StatusOr<std::unique_ptr<Context>> context = Open();
  ASSERT_FALSE(context.ok());
  EXPECT_EQ(context.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(context.status().message(),
              HasSubstr("2=2001:db8::7 (RoCE v2): skipped, cannot form an "
                        "address handle"));
}

TEST_F(ContextTest, ProviderWithoutAddressHandlesIsNotProbed) {
  EXPECT_CALL(verbs_, CreateAh(&pd_, _))
      .WillOnce(Return(VerbsError("ibv_create_ah", EOPNOTSUPP)));
  EXPECT_CALL(verbs_, DestroyAh).Times(0);
  absl::StatusOr<std::unique_ptr<Context>> context = Open();
  ASSERT_TRUE(context.ok()) << context.status();
  EXPECT_EQ((*context)->gid().index, 3u);
  EXPECT_THAT((*context)->gid().why,
              HasSubstr("address handle not probed: the provider has none"));
}

TEST_F(ContextTest, ProbedAddressHandleIsDestroyed) {
  ibv_ah ah = {};
  EXPECT_CALL(verbs_, CreateAh(&pd_, _)).WillOnce(Return(&ah));
  EXPECT_CALL(verbs_, DestroyAh(&ah)).WillOnce(Return(absl::OkStatus()));
  ASSERT_TRUE(Open().ok());
}

TEST_F(ContextTest, GidSubnetFiltersAndExplains) {
  TransportConfig config;
  config.gid_subnet = *ParseGidSubnet("10.0.0.8/32");
  absl::StatusOr<std::unique_ptr<Context>> context = Open(config);
  ASSERT_TRUE(context.ok()) << context.status();
  EXPECT_EQ((*context)->gid().index, 4u);
  EXPECT_THAT((*context)->gid().why,
              HasSubstr("3=::ffff:10.0.0.7 (RoCE v2): skipped, outside "
                        "RDMA_TRANSPORT_GID_SUBNET=10.0.0.8/32"));
  // An IPv6 range leaves only the IPv6 entry.
  config.gid_subnet = *ParseGidSubnet("2001:db8::/32");
  context = Open(config);
  ASSERT_TRUE(context.ok()) << context.status();
  EXPECT_EQ((*context)->gid().index, 2u);
}

TEST_F(ContextTest, ConfiguredGidIndexOutsideTheSubnetIsRefused) {
  ON_CALL(verbs_, QueryGid(&device_, 1, 3, _))
      .WillByDefault(
          DoAll(SetArgPointee<3>(gids_[3]), Return(absl::OkStatus())));
  TransportConfig config;
  config.gid_index = 3;
  config.gid_subnet = *ParseGidSubnet("10.9.0.0/16");
  absl::StatusOr<std::unique_ptr<Context>> context = Open(config);
  ASSERT_FALSE(context.ok());
  EXPECT_EQ(context.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(context.status().message(),
              HasSubstr("MC_GID_INDEX=3 is 3=::ffff:10.0.0.7 (RoCE v2) on "
                        "mlx5_0 port 1, outside "
                        "RDMA_TRANSPORT_GID_SUBNET=10.9.0.0/16"));
}

Verbs::TrafficClassFile TcFile(std::optional<std::string> contents) {
  return {"/sys/class/infiniband/mlx5_0/tc/1/traffic_class",
          std::move(contents)};
}

TEST_F(ContextTest, HostTrafficClassOverrideIsReadAndWarnedAbout) {
  EXPECT_CALL(verbs_, ReadTrafficClassFile(&device_, 1))
      .WillOnce(Return(TcFile("Global tclass=106\n")));
  TransportConfig config;
  config.traffic_class = 136;
  absl::StatusOr<std::unique_ptr<Context>> context = Open(config);
  ASSERT_TRUE(context.ok()) << context.status();
  ASSERT_TRUE((*context)->traffic_class_override().has_value());
  EXPECT_EQ((*context)->traffic_class_override()->traffic_class, 106);
  ASSERT_EQ((*context)->warnings().size(), 1u);
  EXPECT_THAT((*context)->warnings()[0],
              HasSubstr("mlx5_0 port 1: /sys/class/infiniband/mlx5_0/tc/1/"
                        "traffic_class holds \"Global tclass=106\""));
  EXPECT_THAT((*context)->warnings()[0], HasSubstr("overriding MC_IB_TC=136"));
}

TEST_F(ContextTest, OverrideAgreeingWithMcIbTcOrUnsetIsNotWarned) {
  EXPECT_CALL(verbs_, ReadTrafficClassFile(&device_, 1))
      .WillRepeatedly(Return(TcFile("Global tclass=106\n")));
  TransportConfig config;
  config.traffic_class = 106;
  absl::StatusOr<std::unique_ptr<Context>> context = Open(config);
  ASSERT_TRUE(context.ok()) << context.status();
  EXPECT_TRUE((*context)->warnings().empty());
  context = Open();
  ASSERT_TRUE(context.ok()) << context.status();
  EXPECT_TRUE((*context)->warnings().empty());
  EXPECT_EQ((*context)->traffic_class_override()->traffic_class, 106);
}

TEST_F(ContextTest, EmptyOrAbsentTrafficClassFileIsNoOverride) {
  for (std::optional<std::string> contents :
       {std::optional<std::string>(""), std::optional<std::string>()}) {
    EXPECT_CALL(verbs_, ReadTrafficClassFile(&device_, 1))
        .WillOnce(Return(TcFile(contents)));
    TransportConfig config;
    config.traffic_class = 136;
    absl::StatusOr<std::unique_ptr<Context>> context = Open(config);
    ASSERT_TRUE(context.ok()) << context.status();
    EXPECT_FALSE((*context)->traffic_class_override().has_value());
    EXPECT_TRUE((*context)->warnings().empty());
  }
}

TEST_F(ContextTest, UnreadableTrafficClassFileIsAWarningNotAFailure) {
  EXPECT_CALL(verbs_, ReadTrafficClassFile(&device_, 1))
      .WillOnce(Return(VerbsError(
          "open", EACCES, "/sys/class/infiniband/mlx5_0/tc/1/traffic_class")));
  absl::StatusOr<std::unique_ptr<Context>> context = Open();
  ASSERT_TRUE(context.ok()) << context.status();
  ASSERT_EQ((*context)->warnings().size(), 1u);
  EXPECT_THAT((*context)->warnings()[0],
              HasSubstr("cannot tell whether the host overrides the traffic "
                        "class"));
  EXPECT_THAT((*context)->warnings()[0], HasSubstr("Permission denied"));
}

}  // namespace
}  // namespace rdma_transport
