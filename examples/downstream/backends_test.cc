// The same code runs on every Verbs backend: IbverbsBackend in production,
// SimVerbs or MockVerbs in tests. Code that takes a `Verbs&` is testable
// without RDMA hardware.
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sim/fabric.h"
#include "sim/profile_names.h"
#include "sim/sim_verbs.h"
#include "verbs_shim/ibverbs_backend.h"
#include "verbs_shim/mock_verbs.h"
#include "verbs_shim/verbs.h"

namespace {

using ::testing::ElementsAre;
using ::testing::Return;

// The downstream project's own code: it only sees the interface.
absl::StatusOr<size_t> CountDevices(rdma_transport::Verbs& verbs) {
  absl::StatusOr<std::vector<std::string>> devices = verbs.ListDevices();
  if (!devices.ok()) return devices.status();
  return devices->size();
}

static_assert(
    std::is_base_of_v<rdma_transport::Verbs, rdma_transport::IbverbsBackend>);

TEST(BackendsTest, SimulatedNics) {
  rdma_transport::sim::Fabric fabric;
  ASSERT_TRUE(
      fabric.AddDevice(*rdma_transport::sim::ProfileByName("erdma")).ok());
  ASSERT_TRUE(
      fabric.AddDevice(*rdma_transport::sim::ProfileByName("x722")).ok());
  rdma_transport::sim::SimVerbs verbs(&fabric);
  EXPECT_EQ(CountDevices(verbs).value_or(0), 2u);
  EXPECT_THAT(*verbs.ListDevices(), ElementsAre("sim_erdma_0", "sim_x722_0"));
}

TEST(BackendsTest, MockedVerbs) {
  rdma_transport::MockVerbs verbs;
  EXPECT_CALL(verbs, ListDevices())
      .WillOnce(Return(std::vector<std::string>{"mlx5_0"}));
  EXPECT_EQ(CountDevices(verbs).value_or(0), 1u);
}

}  // namespace
