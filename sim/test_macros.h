// File: sim/test_macros.h
//
// Status assertions for the sim's own tests (Debian's Abseil 20220623 ships
// no status matchers):
//
//   ASSERT_OK(verbs.ModifyQp(qp, &attr, mask));
//   ASSERT_OK_AND_ASSIGN(ibv_qp* qp, verbs.CreateQp(pd, &init_attr));
//   EXPECT_ERRNO(verbs.DeallocPd(pd), EBUSY);
//
// Test-only; header-only; thread-compatible.

#ifndef RDMA_TRANSPORT_SIM_TEST_MACROS_H_
#define RDMA_TRANSPORT_SIM_TEST_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "verbs_shim/verbs_error.h"

namespace rdma_transport::sim::testing_internal {

inline const absl::Status& StatusOf(const absl::Status& status) {
  return status;
}
template <typename T>
const absl::Status& StatusOf(const absl::StatusOr<T>& status_or) {
  return status_or.status();
}

inline ::testing::AssertionResult IsOk(const absl::Status& status) {
  if (status.ok()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << status;
}

inline ::testing::AssertionResult HasErrno(const absl::Status& status,
                                           int error) {
  if (VerbsErrno(status) == error) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "expected errno " << error << ", got "
                                       << VerbsErrno(status) << ": " << status;
}

}  // namespace rdma_transport::sim::testing_internal

// Each evaluates `expr` once and accepts a streamed message.
#define ASSERT_OK(expr)                                      \
  ASSERT_TRUE(::rdma_transport::sim::testing_internal::IsOk( \
      ::rdma_transport::sim::testing_internal::StatusOf(expr)))
#define EXPECT_OK(expr)                                      \
  EXPECT_TRUE(::rdma_transport::sim::testing_internal::IsOk( \
      ::rdma_transport::sim::testing_internal::StatusOf(expr)))
// The status carries verbs errno `error` (see VerbsErrno()).
#define EXPECT_ERRNO(expr, error)                                \
  EXPECT_TRUE(::rdma_transport::sim::testing_internal::HasErrno( \
      ::rdma_transport::sim::testing_internal::StatusOf(expr), (error)))
#define ASSERT_ERRNO(expr, error)                                \
  ASSERT_TRUE(::rdma_transport::sim::testing_internal::HasErrno( \
      ::rdma_transport::sim::testing_internal::StatusOf(expr), (error)))

#define SIM_CONCAT_INNER(a, b) a##b
#define SIM_CONCAT(a, b) SIM_CONCAT_INNER(a, b)
#define ASSERT_OK_AND_ASSIGN(lhs, expr)                  \
  auto SIM_CONCAT(sim_status_or_, __LINE__) = (expr);    \
  ASSERT_TRUE(SIM_CONCAT(sim_status_or_, __LINE__).ok()) \
      << SIM_CONCAT(sim_status_or_, __LINE__).status();  \
  lhs = std::move(SIM_CONCAT(sim_status_or_, __LINE__)).value()

#endif  // RDMA_TRANSPORT_SIM_TEST_MACROS_H_
