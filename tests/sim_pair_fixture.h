// File: tests/sim_pair_fixture.h
//
// `SimPairTest<Wrapper>`: a gtest fixture with two simulated NICs on one
// fabric, a transport Context on each through a Verbs wrapper of the test's
// choosing (`Wrapper`, constructed over the fabric's SimVerbs: LevelDB's
// SpecialEnv idea, for verbs), and one connection between them made on
// demand. Every time in it is virtual (the fabric's clock), so a scenario
// runs in one thread, deterministically. TearDown closes both ends and
// fails the test if the fabric holds anything afterwards.
//
//   class SwallowTest : public SimPairTest<SwallowSendCompletions> {};
//   TEST_F(SwallowTest, Something) {
//     ASSERT_NO_FATAL_FAILURE(Connect(ConnectionOptions{}));
//     verbs_.swallow = true;
//     ...client_->Send(...)...
//   }
//
// Test-only; thread-compatible (the test's thread drives it).

#ifndef RDMA_TRANSPORT_TESTS_SIM_PAIR_FIXTURE_H_
#define RDMA_TRANSPORT_TESTS_SIM_PAIR_FIXTURE_H_

#include <memory>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "sim/fabric.h"
#include "sim/sim_verbs.h"
#include "tests/connection_pair.h"
#include "transport/connection.h"
#include "transport/context.h"

namespace rdma_transport {

template <typename Wrapper>
class SimPairTest : public ::testing::Test {
 protected:
  // Two NICs of `profile` (sim/profile_names.h) and a Context on each.
  void Open(std::string_view profile = "cx7") {
    absl::StatusOr<SimContexts> opened =
        OpenTwoSimContexts(fabric_, verbs_, profile);
    ASSERT_TRUE(opened.ok()) << opened.status();
    contexts_ = std::move(opened->contexts);
  }

  // Open(), then client_ and server_ connected with `options`.
  void Connect(const ConnectionOptions& options,
               std::string_view profile = "cx7") {
    ASSERT_NO_FATAL_FAILURE(Open(profile));
    const absl::Status dialed =
        DialPair(*contexts_[0], *contexts_[1], options, client_, server_);
    ASSERT_TRUE(dialed.ok()) << dialed;
  }

  Env& env() { return fabric_.env(); }

  void TearDown() override {
    client_.reset();
    server_.reset();
    contexts_.clear();
    EXPECT_EQ(LeakReportText(fabric_), "");
  }

  sim::Fabric fabric_;
  sim::SimVerbs sim_verbs_{&fabric_};
  Wrapper verbs_{&sim_verbs_};
  std::vector<std::unique_ptr<Context>> contexts_;
  std::unique_ptr<Connection> client_;
  std::unique_ptr<Connection> server_;
};

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TESTS_SIM_PAIR_FIXTURE_H_
