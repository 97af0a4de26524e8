// The code examples in the comments of sim/'s public headers, each spliced
// in at its `// header-example: HEADER N` line (header_examples.py): they
// compile as written, and those that stand alone run.
#include <infiniband/verbs.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sim/device_profile.h"
#include "sim/fabric.h"
#include "sim/fault_injector.h"
#include "sim/profile_names.h"
#include "sim/sim_env.h"
#include "sim/sim_testing.h"
#include "sim/sim_verbs.h"
#include "sim/switch.h"
#include "sim/traffic_mix.h"
#include "transport/connection.h"

namespace rdma_transport::sim {
namespace {

using ::testing::IsEmpty;

// header-example: sim/device_profile.h 1

// --- Examples that need what the text around them assumes: compiled only.

[[maybe_unused]] void SimEnvExample(Connection* connection,
                                    std::span<std::byte> buffer) {
  // header-example: sim/sim_env.h 1
}

[[maybe_unused]] void SwitchExample(Fabric& fabric,
                                    const std::string& server_device) {
  // header-example: sim/switch.h 2
}

[[maybe_unused]] void TrafficMixExample(const std::string& bulk_host,
                                        const std::string& client,
                                        const std::string& server) {
  // header-example: sim/traffic_mix.h 1
}

// --- Examples that run.

TEST(SimHeaderExamples, FabricOpensAndClosesADevice) {
  // header-example: sim/fabric.h 1
}

TEST(SimHeaderExamples, SimVerbsOpensADevice) {
  // header-example: sim/sim_verbs.h 1
  ASSERT_TRUE(context.ok()) << context.status();
  EXPECT_TRUE(verbs.CloseDevice(*context).ok());
}

TEST(SimHeaderExamples, FaultsAreArmed) {
  // header-example: sim/fault_injector.h 1
  EXPECT_TRUE(armed.ok()) << armed;
}

TEST(SimHeaderExamples, ADeviceProfileOfOnesOwn) {
  Fabric fabric;
  absl::StatusOr<std::string> name = fabric.AddDevice(MyNic());
  ASSERT_TRUE(name.ok()) << name.status();
  EXPECT_EQ(name->rfind("sim_mynic", 0), 0u) << *name;
}

TEST(SimHeaderExamples, EndpointsSendAMessage) {
  // header-example: sim/sim_testing.h 1
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(done[0].wr_id, 1u);
}

}  // namespace
}  // namespace rdma_transport::sim
