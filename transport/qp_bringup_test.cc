// QP bring-up against exact verbs interactions: the attributes and masks of
// each ibv_modify_qp, and that MC_IB_TC / MC_IB_SL reach the RTR transition.
#include "transport/qp_bringup.h"

#include <cerrno>
#include <cstring>
#include <map>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "verbs_shim/mock_verbs.h"
#include "verbs_shim/verbs_error.h"

namespace rdma_transport {
namespace {

using ::testing::_;
using ::testing::HasSubstr;
using ::testing::Return;

// One recorded ibv_modify_qp call.
struct ModifyCall {
  ibv_qp_attr attr;
  int mask;
};

class QpBringupTest : public ::testing::Test {
 protected:
  QpBringupTest() {
    qp_.qp_num = 0x11;
    remote_.qp_num = 0x22;
    remote_.psn = 0x123456;
    remote_.lid = 0;
    remote_.mtu = 1024;
    remote_.gid.raw[10] = 0xff;
    remote_.gid.raw[11] = 0xff;
    remote_.gid.raw[12] = 10;
    remote_.gid.raw[15] = 2;
    local_.port = 1;
    local_.sgid_index = 1;
    local_.use_global_route = true;
    local_.mtu = 4096;
    local_.max_rd_atomic = 16;
    local_.max_dest_rd_atomic = 16;
    local_.psn = 0x654321;
    ON_CALL(verbs_, ModifyQp(&qp_, _, _))
        .WillByDefault([this](ibv_qp*, ibv_qp_attr* attr, int mask) {
          calls_.push_back({*attr, mask});
          return absl::OkStatus();
        });
  }

  TransportConfig ConfigFromEnvironment(
      std::map<std::string, std::string> values) {
    absl::StatusOr<TransportConfig> config = LoadTransportConfig(
        {}, [values](std::string_view name) -> std::optional<std::string> {
          auto it = values.find(std::string(name));
          if (it == values.end()) return std::nullopt;
          return it->second;
        });
    EXPECT_TRUE(config.ok()) << config.status();
    return config.value_or(TransportConfig{});
  }

  // Brings the QP up and returns the RTR call.
  ModifyCall BringUpAndGetRtr(const TransportConfig& config) {
    EXPECT_CALL(verbs_, ModifyQp(&qp_, _, _)).Times(3);
    absl::Status status = BringUpRcQp(verbs_, &qp_, local_, remote_, config);
    EXPECT_TRUE(status.ok()) << status;
    EXPECT_EQ(calls_.size(), 3u);
    if (calls_.size() != 3) return {};
    EXPECT_EQ(calls_[1].attr.qp_state, IBV_QPS_RTR);
    return calls_[1];
  }

  ::testing::NiceMock<MockVerbs> verbs_;
  ibv_qp qp_ = {};
  LocalRoute local_;
  QpEndpoint remote_;
  std::vector<ModifyCall> calls_;
};

TEST_F(QpBringupTest, TrafficClassFromEnvironmentReachesRtr) {
  ModifyCall rtr =
      BringUpAndGetRtr(ConfigFromEnvironment({{"MC_IB_TC", "136"}}));
  EXPECT_TRUE(rtr.mask & IBV_QP_AV);
  EXPECT_EQ(rtr.attr.ah_attr.is_global, 1);
  EXPECT_EQ(rtr.attr.ah_attr.grh.traffic_class, 136);
}

TEST_F(QpBringupTest, UnsetTrafficClassLeavesZero) {
  ModifyCall rtr = BringUpAndGetRtr(ConfigFromEnvironment({}));
  EXPECT_TRUE(rtr.mask & IBV_QP_AV);
  EXPECT_EQ(rtr.attr.ah_attr.grh.traffic_class, 0);
  EXPECT_EQ(rtr.attr.ah_attr.sl, 0);
}

TEST_F(QpBringupTest, MinusOneTrafficClassLeavesZero) {
  ModifyCall rtr = BringUpAndGetRtr(
      ConfigFromEnvironment({{"MC_IB_TC", "-1"}, {"MC_IB_SL", "-1"}}));
  EXPECT_EQ(rtr.attr.ah_attr.grh.traffic_class, 0);
  EXPECT_EQ(rtr.attr.ah_attr.sl, 0);
}

TEST_F(QpBringupTest, ServiceLevelFromEnvironmentReachesRtr) {
  ModifyCall rtr = BringUpAndGetRtr(
      ConfigFromEnvironment({{"MC_IB_SL", "5"}, {"MC_IB_TC", "96"}}));
  EXPECT_EQ(rtr.attr.ah_attr.sl, 5);
  EXPECT_EQ(rtr.attr.ah_attr.grh.traffic_class, 96);
}

TEST_F(QpBringupTest, RtrCarriesTheGlobalRouteAndRemoteQp) {
  TransportConfig config;
  ModifyCall rtr = BringUpAndGetRtr(config);
  EXPECT_EQ(rtr.mask, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                          IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
  EXPECT_EQ(std::memcmp(rtr.attr.ah_attr.grh.dgid.raw, remote_.gid.raw, 16), 0);
  EXPECT_EQ(rtr.attr.ah_attr.grh.sgid_index, 1);
  EXPECT_EQ(rtr.attr.ah_attr.grh.hop_limit, config.hop_limit);
  EXPECT_EQ(rtr.attr.ah_attr.port_num, 1);
  EXPECT_EQ(rtr.attr.dest_qp_num, 0x22u);
  EXPECT_EQ(rtr.attr.rq_psn, 0x123456u);
  EXPECT_EQ(rtr.attr.max_dest_rd_atomic, 16);
  EXPECT_EQ(rtr.attr.min_rnr_timer, config.min_rnr_timer);
}

TEST_F(QpBringupTest, PathMtuIsTheSmallerOfBothSides) {
  EXPECT_EQ(BringUpAndGetRtr(TransportConfig{}).attr.path_mtu, IBV_MTU_1024);
  calls_.clear();
  remote_.mtu = 4096;
  local_.mtu = 2048;
  EXPECT_EQ(BringUpAndGetRtr(TransportConfig{}).attr.path_mtu, IBV_MTU_2048);
}

TEST_F(QpBringupTest, InvalidPathMtuIsRefusedBeforeAnyRtrCall) {
  remote_.mtu = 1500;
  EXPECT_CALL(verbs_, ModifyQp(&qp_, _, _)).Times(1);  // INIT only
  absl::Status status =
      BringUpRcQp(verbs_, &qp_, local_, remote_, TransportConfig{});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("path MTU"));
}

TEST_F(QpBringupTest, InitAndRtsMasksAndValues) {
  TransportConfig config;
  config.ack_timeout = 18;  // MC_IB_TIMEOUT, not the default 14
  BringUpAndGetRtr(config);
  ASSERT_EQ(calls_.size(), 3u);
  const ModifyCall& init = calls_[0];
  EXPECT_EQ(init.attr.qp_state, IBV_QPS_INIT);
  EXPECT_EQ(init.mask, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                           IBV_QP_ACCESS_FLAGS);
  EXPECT_EQ(init.attr.port_num, 1);
  EXPECT_EQ(init.attr.qp_access_flags, static_cast<unsigned>(kRcQpAccessFlags));
  const ModifyCall& rts = calls_[2];
  EXPECT_EQ(rts.attr.qp_state, IBV_QPS_RTS);
  EXPECT_EQ(rts.mask, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
                          IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                          IBV_QP_MAX_QP_RD_ATOMIC);
  EXPECT_EQ(rts.attr.sq_psn, 0x654321u);
  EXPECT_EQ(rts.attr.timeout, 18);
  EXPECT_EQ(rts.attr.retry_cnt, config.retry_count);
  EXPECT_EQ(rts.attr.rnr_retry, config.rnr_retry);
  EXPECT_EQ(rts.attr.max_rd_atomic, 16);
}

TEST_F(QpBringupTest, InfinibandWithoutGlobalRouteUsesTheLid) {
  local_.use_global_route = false;
  remote_.lid = 7;
  ModifyCall rtr = BringUpAndGetRtr(TransportConfig{});
  EXPECT_EQ(rtr.attr.ah_attr.is_global, 0);
  EXPECT_EQ(rtr.attr.ah_attr.dlid, 7);
}

TEST_F(QpBringupTest, FailureNamesTheQpAndTransitionAndKeepsErrno) {
  EXPECT_CALL(verbs_, ModifyQp(&qp_, _, _))
      .WillOnce(Return(absl::OkStatus()))
      .WillOnce(Return(VerbsError("ibv_modify_qp", EINVAL)));
  absl::Status status =
      BringUpRcQp(verbs_, &qp_, local_, remote_, TransportConfig{});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("QP 17 INIT->RTR"));
  EXPECT_THAT(status.message(), HasSubstr("Invalid argument"));
  EXPECT_EQ(VerbsErrno(status), EINVAL);
}

TEST_F(QpBringupTest, ModifyToErrorSetsOnlyTheState) {
  EXPECT_CALL(verbs_, ModifyQp(&qp_, _, IBV_QP_STATE));
  ASSERT_TRUE(ModifyQpToError(verbs_, &qp_).ok());
  ASSERT_EQ(calls_.size(), 1u);
  EXPECT_EQ(calls_[0].attr.qp_state, IBV_QPS_ERR);
}

}  // namespace
}  // namespace rdma_transport
