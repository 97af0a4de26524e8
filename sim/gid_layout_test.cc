// The profile features behind the transport's start-up checks: explicit GID
// table layouts, address handles (and slots that cannot form one), and the
// host traffic-class override, which replaces the QP's class on the wire.
#include <arpa/inet.h>

#include <cerrno>
#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sim/fabric.h"
#include "sim/sim_testing.h"
#include "sim/sim_verbs.h"
#include "sim/test_macros.h"
#include "verbs_shim/verbs_error.h"

namespace rdma_transport::sim {
namespace {

using ::testing::HasSubstr;

std::string GidText(const ibv_gid& gid) {
  char text[INET6_ADDRSTRLEN] = {};
  inet_ntop(AF_INET6, gid.raw, text, sizeof(text));
  return text;
}

DeviceProfile Layout(std::vector<GidSlot> slots) {
  DeviceProfile profile = ConnectX7();
  profile.gid_layout = std::move(slots);
  return profile;
}

TEST(GidLayoutTest, SlotsAreFilledWhereTheLayoutSays) {
  Fabric fabric;
  SimVerbs verbs(&fabric);
  ASSERT_OK_AND_ASSIGN(
      std::string name,
      fabric.AddDevice(Layout({{0, kLinkLocalGid, IBV_GID_TYPE_ROCE_V2},
                               {2, "2001:db8::9", IBV_GID_TYPE_ROCE_V2},
                               {3, kDeviceIpv4Gid, IBV_GID_TYPE_ROCE_V2}}),
                       std::nullopt, "10.1.0.9"));
  ASSERT_OK_AND_ASSIGN(ibv_context * context, verbs.OpenDevice(name));
  std::vector<ibv_gid_entry> table(256);
  ASSERT_OK_AND_ASSIGN(size_t count, verbs.QueryGidTable(context, table));
  ASSERT_EQ(count, 3u);
  EXPECT_EQ(table[0].gid_index, 0u);
  EXPECT_EQ(GidText(table[0].gid), "fe80::53:49ff:fe4d:0");
  EXPECT_EQ(table[1].gid_index, 2u);
  EXPECT_EQ(GidText(table[1].gid), "2001:db8::9");
  EXPECT_EQ(table[2].gid_index, 3u);
  EXPECT_EQ(GidText(table[2].gid), "::ffff:10.1.0.9");
  EXPECT_EQ(table[2].gid_type, IBV_GID_TYPE_ROCE_V2);
  ibv_gid_entry entry = {};
  EXPECT_EQ(VerbsErrno(verbs.QueryGid(context, 1, 1, &entry)), ENODATA);
  ASSERT_OK(verbs.CloseDevice(context));
}

TEST(GidLayoutTest, BadLayoutsAreRefused) {
  Fabric fabric;
  struct Case {
    std::vector<GidSlot> slots;
    absl::StatusCode code;
    const char* message;
  };
  const Case cases[] = {
      {{{256, "2001:db8::1"}},
       absl::StatusCode::kInvalidArgument,
       "beyond gid_table_length 256"},
      {{{1, "2001:db8::1"}, {1, "2001:db8::2"}},
       absl::StatusCode::kInvalidArgument,
       "index given twice"},
      {{{1, "2001:db8::1"}, {2, "2001:db8::1"}},
       absl::StatusCode::kInvalidArgument,
       "the same GID as index 1"},
      {{{1, "10.0.0.1"}},
       absl::StatusCode::kInvalidArgument,
       "not an IPv6 address"},
      {{{1, "::"}}, absl::StatusCode::kInvalidArgument, "all-zero GID"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<std::string> added = fabric.AddDevice(Layout(c.slots));
    ASSERT_FALSE(added.ok()) << c.message;
    EXPECT_EQ(added.status().code(), c.code) << c.message;
    EXPECT_THAT(added.status().message(), HasSubstr(c.message));
  }
  ASSERT_OK(fabric.AddDevice(Layout({{4, "2001:db8::4"}})).status());
  absl::StatusOr<std::string> twin =
      fabric.AddDevice(Layout({{5, "2001:db8::4"}}));
  ASSERT_FALSE(twin.ok());
  EXPECT_EQ(twin.status().code(), absl::StatusCode::kAlreadyExists);
  DeviceProfile ib = ConnectX7Infiniband();
  ib.gid_layout = {{1, "2001:db8::7"}};
  EXPECT_EQ(fabric.AddDevice(ib).status().code(),
            absl::StatusCode::kInvalidArgument);
}

class AddressHandleTest : public ::testing::Test {
 protected:
  void Open(const DeviceProfile& profile) {
    ASSERT_OK_AND_ASSIGN(std::string name, fabric_.AddDevice(profile));
    ASSERT_OK_AND_ASSIGN(context_, verbs_.OpenDevice(name));
    ASSERT_OK_AND_ASSIGN(pd_, verbs_.AllocPd(context_));
  }
  void TearDown() override {
    if (pd_ != nullptr) {
      EXPECT_OK(verbs_.DeallocPd(pd_));
    }
    if (context_ != nullptr) {
      EXPECT_OK(verbs_.CloseDevice(context_));
    }
    EXPECT_TRUE(fabric_.LeakReport().empty());
  }
  ibv_ah_attr SelfAttr(uint8_t index) {
    ibv_gid_entry entry = {};
    EXPECT_OK(verbs_.QueryGid(context_, 1, index, &entry));
    ibv_ah_attr attr = {};
    attr.port_num = 1;
    attr.is_global = 1;
    attr.grh.sgid_index = index;
    attr.grh.dgid = entry.gid;
    return attr;
  }

  Fabric fabric_;
  SimVerbs verbs_{&fabric_};
  ibv_context* context_ = nullptr;
  ibv_pd* pd_ = nullptr;
};

TEST_F(AddressHandleTest, CreatedOnAFilledSlotAndHeldAgainstThePd) {
  ASSERT_NO_FATAL_FAILURE(Open(ConnectX7()));
  ibv_ah_attr attr = SelfAttr(1);
  ASSERT_OK_AND_ASSIGN(ibv_ah * ah, verbs_.CreateAh(pd_, &attr));
  EXPECT_EQ(ah->pd, pd_);
  EXPECT_EQ(VerbsErrno(verbs_.DeallocPd(pd_)), EBUSY);
  ASSERT_EQ(fabric_.LeakReport().size(), 3u);
  EXPECT_EQ(fabric_.LeakReport()[2].kind, "ah");
  ASSERT_OK(verbs_.DestroyAh(ah));
  EXPECT_EQ(VerbsErrno(verbs_.DestroyAh(ah)), EINVAL);  // destroyed
}

TEST_F(AddressHandleTest, RefusedLikeTheKernel) {
  DeviceProfile profile = Layout({{0, kLinkLocalGid, IBV_GID_TYPE_ROCE_V1},
                                  {1, kDeviceIpv4Gid, IBV_GID_TYPE_ROCE_V2},
                                  {2, "2001:db8::2", IBV_GID_TYPE_ROCE_V2,
                                   /*create_ah_errno=*/ENETUNREACH}});
  ASSERT_NO_FATAL_FAILURE(Open(profile));
  ibv_ah_attr attr = SelfAttr(2);
  EXPECT_EQ(VerbsErrno(verbs_.CreateAh(pd_, &attr).status()), ENETUNREACH);
  attr = SelfAttr(1);
  attr.grh.sgid_index = 7;  // empty slot
  EXPECT_EQ(VerbsErrno(verbs_.CreateAh(pd_, &attr).status()), EINVAL);
  attr = SelfAttr(1);
  attr.is_global = 0;  // RoCE needs the GRH
  EXPECT_EQ(VerbsErrno(verbs_.CreateAh(pd_, &attr).status()), EINVAL);
}

TEST_F(AddressHandleTest, ErdmaHasNone) {
  ASSERT_NO_FATAL_FAILURE(Open(AlibabaErdma()));
  ibv_ah_attr attr = SelfAttr(1);
  EXPECT_EQ(VerbsErrno(verbs_.CreateAh(pd_, &attr).status()), EOPNOTSUPP);
}

TEST(TrafficClassOverrideTest, FileReadsAsOnMlx5) {
  Fabric fabric;
  SimVerbs verbs(&fabric);
  DeviceProfile overridden = ConnectX7();
  overridden.traffic_class_override = 106;
  ASSERT_OK_AND_ASSIGN(std::string a, fabric.AddDevice(overridden));
  ASSERT_OK_AND_ASSIGN(std::string b, fabric.AddDevice(ConnectX7()));
  ASSERT_OK_AND_ASSIGN(std::string c, fabric.AddDevice(IntelE810()));
  struct Want {
    std::string device;
    std::optional<std::string> contents;
  };
  for (const Want& want :
       {Want{a, "Global tclass=106\n"}, Want{b, ""}, Want{c, std::nullopt}}) {
    ASSERT_OK_AND_ASSIGN(ibv_context * context, verbs.OpenDevice(want.device));
    ASSERT_OK_AND_ASSIGN(Verbs::TrafficClassFile file,
                         verbs.ReadTrafficClassFile(context, 1));
    EXPECT_EQ(file.path,
              "/sys/class/infiniband/" + want.device + "/tc/1/traffic_class");
    EXPECT_EQ(file.contents, want.contents) << want.device;
    ASSERT_OK(verbs.CloseDevice(context));
  }
}

TEST(TrafficClassOverrideTest, OverrideReplacesTheQpsClassOnTheWire) {
  Fabric fabric;
  SimVerbs verbs(&fabric);
  DeviceProfile overridden = ConnectX7();
  overridden.traffic_class_override = 106;
  ASSERT_OK_AND_ASSIGN(std::string a, fabric.AddDevice(overridden));
  ASSERT_OK_AND_ASSIGN(std::string b, fabric.AddDevice(ConnectX7()));
  ASSERT_OK_AND_ASSIGN(auto client, Endpoint::Create(&verbs, a));
  ASSERT_OK_AND_ASSIGN(auto server, Endpoint::Create(&verbs, b));
  ConnectOptions options;
  options.traffic_class = 136;
  ASSERT_OK(client->ConnectTo(*server, options));
  ASSERT_OK(server->ConnectTo(*client, options));
  ASSERT_OK(server->PostRecv(1, 0, 64));
  ASSERT_OK(client->PostSend(2, IBV_WR_SEND, 0, 64));
  ASSERT_OK_AND_ASSIGN(std::vector<ibv_wc> received, server->PollRecvCq());
  ASSERT_EQ(received.size(), 1u);

  // a's request left with the host's class; b's ACK with the QP's.
  ASSERT_OK_AND_ASSIGN(SimCounters sent_a, fabric.DeviceCounters(a));
  ASSERT_OK_AND_ASSIGN(SimCounters sent_b, fabric.DeviceCounters(b));
  EXPECT_EQ(sent_a.packets_sent, 1u);
  EXPECT_EQ(sent_a.packets_with_traffic_class(106), 1u);
  EXPECT_EQ(sent_a.packets_with_traffic_class(136), 0u);
  EXPECT_EQ(sent_b.packets_with_traffic_class(136), 1u);
  EXPECT_THAT(fabric.Counters().ToString(), HasSubstr("packets_sent_tc_106=1"));
  // QueryQp still reports what the application set.
  ibv_qp_attr attr = {};
  ibv_qp_init_attr init = {};
  ASSERT_OK(verbs.QueryQp(client->qp(), &attr, IBV_QP_AV, &init));
  EXPECT_EQ(attr.ah_attr.grh.traffic_class, 136);
}

}  // namespace
}  // namespace rdma_transport::sim
