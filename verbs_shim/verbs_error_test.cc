#include "verbs_shim/verbs_error.h"

#include <cerrno>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "verbs_shim/verbs_names.h"

namespace rdma_transport {
namespace {

using ::testing::HasSubstr;

TEST(VerbsErrorTest, KeepsErrnoAndNamesTheCall) {
  absl::Status status = VerbsError("ibv_create_qp", EINVAL);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("ibv_create_qp failed"));
  EXPECT_THAT(status.message(), HasSubstr("Invalid argument"));
  EXPECT_THAT(status.message(), HasSubstr("errno 22"));
  EXPECT_EQ(VerbsErrno(status), EINVAL);
}

TEST(VerbsErrorTest, MapsErrnoToCanonicalCodes) {
  EXPECT_EQ(VerbsError("x", ENOMEM).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(VerbsError("x", EBUSY).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(VerbsError("x", ETIMEDOUT).code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(VerbsError("x", EOPNOTSUPP).code(),
            absl::StatusCode::kUnimplemented);
  EXPECT_EQ(VerbsError("x", EAGAIN).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(VerbsError("x", ENODATA).code(), absl::StatusCode::kNotFound);
}

TEST(VerbsErrorTest, ZeroErrnoBecomesEio) {
  absl::Status status = VerbsError("ibv_poll_cq", 0);
  EXPECT_FALSE(status.ok());
  EXPECT_EQ(VerbsErrno(status), EIO);
}

TEST(VerbsErrorTest, DetailIsAppended) {
  absl::Status status = VerbsError("ibv_reg_mr", ENOMEM, "length 4096");
  EXPECT_THAT(status.message(), HasSubstr("; length 4096"));
}

TEST(VerbsErrorTest, OtherStatusesHaveNoErrno) {
  EXPECT_EQ(VerbsErrno(absl::OkStatus()), 0);
  EXPECT_EQ(VerbsErrno(absl::InvalidArgumentError("plain")), 0);
}

TEST(VerbsErrorTest, WithContextKeepsCodeAndErrno) {
  absl::Status status =
      WithContext(VerbsError("ibv_modify_qp", EINVAL), "QP 7 INIT->RTR");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("QP 7 INIT->RTR: ibv_modify_qp"));
  EXPECT_EQ(VerbsErrno(status), EINVAL);
  EXPECT_TRUE(WithContext(absl::OkStatus(), "x").ok());
}

TEST(VerbsNamesTest, NamesAndMtus) {
  EXPECT_STREQ(WcStatusName(IBV_WC_RNR_RETRY_EXC_ERR),
               "IBV_WC_RNR_RETRY_EXC_ERR");
  EXPECT_STREQ(WcStatusDescription(IBV_WC_REM_ACCESS_ERR),
               "remote access error");
  EXPECT_STREQ(WcOpcodeName(IBV_WC_RECV_RDMA_WITH_IMM), "RECV_RDMA_WITH_IMM");
  EXPECT_STREQ(WrOpcodeName(IBV_WR_SEND_WITH_IMM), "SEND_WITH_IMM");
  EXPECT_STREQ(QpStateName(IBV_QPS_RTS), "RTS");
  EXPECT_EQ(MtuBytes(IBV_MTU_1024), 1024);
  EXPECT_EQ(MtuFromBytes(4096), IBV_MTU_4096);
  EXPECT_EQ(MtuFromBytes(1500), std::nullopt);
}

}  // namespace
}  // namespace rdma_transport
