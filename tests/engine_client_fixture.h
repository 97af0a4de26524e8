// File: tests/engine_client_fixture.h
//
// `EngineClientFixture`, the gtest fixture of the suites whose client is on
// an engine and whose server is a plain connection (engine_send_test,
// engine_window_test): two NICs of one profile on a simulated fabric in
// virtual time, a Context on each, an Engine on the client's, and one
// connected pair. TearDown destroys the pair (no operation in flight may
// outlive the memory it names), then calls ReleaseMemory() for the test's
// own registrations, then the engine and the contexts, and checks that the
// fabric has nothing left.
//
//   class MyTest : public EngineClientFixture<> {
//     void ReleaseMemory() override { region_ = MemoryRegion(); }
//     MemoryRegion region_;
//   };
//   TEST_F(MyTest, Works) {
//     StartPair("rxe", ConnectionOptions{});
//     ... client_->PostSendFrom(...); engine_->Progress(); ...
//   }
//
// `Base` is ::testing::Test or a ::testing::TestWithParam<T>. Test-only;
// one thread drives it (the dial's Connect() runs on a participant thread).

#ifndef RDMA_TRANSPORT_TESTS_ENGINE_CLIENT_FIXTURE_H_
#define RDMA_TRANSPORT_TESTS_ENGINE_CLIENT_FIXTURE_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "gtest/gtest.h"
#include "sim/fabric.h"
#include "sim/sim_verbs.h"
#include "tests/connection_pair.h"
#include "tests/e2e_fixture.h"
#include "transport/connection.h"
#include "transport/engine.h"

namespace rdma_transport {

template <typename Base = ::testing::Test>
class EngineClientFixture : public Base {
 protected:
  // Opens the fabric (with `fabric_options`), the contexts and the engine,
  // and dials one pair of `options`, the client on the engine.
  void StartPair(std::string_view profile, const ConnectionOptions& options,
                 const sim::FabricOptions& fabric_options = {}) {
    fabric_ = std::make_unique<sim::Fabric>(fabric_options);
    verbs_ = std::make_unique<sim::SimVerbs>(fabric_.get());
    E2E_ASSERT_OK(OpenTwoSimContextsWithEngine(*fabric_, *verbs_, profile,
                                               devices_, contexts_, engine_));
    ConnectionOptions client_options = options;
    client_options.engine = engine_.get();
    DialResult dial = DialWith(*contexts_[0], *contexts_[1], client_options,
                               options, ListenerOptions{});
    ASSERT_TRUE(dial.client.ok()) << dial.client.status();
    ASSERT_TRUE(dial.server.ok()) << dial.server.status();
    client_ = *std::move(dial.client);
    server_ = *std::move(dial.server);
  }

  // The test's registrations go here (called after the pair is gone).
  virtual void ReleaseMemory() {}

  void TearDown() override {
    client_.reset();
    server_.reset();
    ReleaseMemory();
    engine_.reset();
    contexts_.clear();
    if (fabric_ != nullptr) {
      EXPECT_EQ(LeakReportText(*fabric_), "");
    }
  }

  Env& env() { return fabric_->env(); }

  std::unique_ptr<sim::Fabric> fabric_;
  std::unique_ptr<sim::SimVerbs> verbs_;
  std::vector<std::string> devices_;
  std::vector<std::unique_ptr<Context>> contexts_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<Connection> client_;
  std::unique_ptr<Connection> server_;
};

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TESTS_ENGINE_CLIENT_FIXTURE_H_
