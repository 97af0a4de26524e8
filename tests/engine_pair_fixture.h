// File: tests/engine_pair_fixture.h
//
// `EnginePairFixture`, the gtest fixture of the engine suites that put both
// sides of every pair on an engine: two cx7 NICs on one simulated fabric in
// virtual time, a Context on each, an engine per side, and the connected
// pairs. TearDown destroys connections, then engines, then contexts, and
// checks the fabric has nothing left.
//
//   class MyTest : public EnginePairFixture<> {};
//   TEST_F(MyTest, Works) {
//     OpenContexts();
//     OpenEngines(options);
//     DialResult dial = DialEngines(shape);
//     ...
//   }
//
// `Base` is ::testing::Test or a ::testing::TestWithParam<T>. Test-only;
// one thread drives it (the dial's Connect() runs on a participant thread).

#ifndef RDMA_TRANSPORT_TESTS_ENGINE_PAIR_FIXTURE_H_
#define RDMA_TRANSPORT_TESTS_ENGINE_PAIR_FIXTURE_H_

#include <memory>
#include <string_view>
#include <vector>

#include "gtest/gtest.h"
#include "sim/fabric.h"
#include "sim/sim_verbs.h"
#include "tests/connection_pair.h"
#include "transport/connection.h"
#include "transport/engine.h"

namespace rdma_transport {

template <typename Base = ::testing::Test>
class EnginePairFixture : public Base {
 protected:
  void OpenContexts(std::string_view profile = "cx7") {
    fabric_ = std::make_unique<sim::Fabric>();
    verbs_ = std::make_unique<sim::SimVerbs>(fabric_.get());
    absl::StatusOr<SimContexts> opened =
        OpenTwoSimContexts(*fabric_, *verbs_, profile);
    ASSERT_TRUE(opened.ok()) << opened.status();
    contexts_ = std::move(opened->contexts);
  }
  void OpenEngines(const EngineOptions& options) {
    for (int side = 0; side < 2; ++side) {
      absl::StatusOr<std::unique_ptr<Engine>> engine =
          Engine::Create(*contexts_[side], options);
      ASSERT_TRUE(engine.ok()) << engine.status();
      engines_[side] = *std::move(engine);
    }
  }
  // One pair of `shape`, the client on engines_[0], the server on
  // engines_[1].
  DialResult DialEngines(const ConnectionOptions& shape) {
    ConnectionOptions client = shape;
    client.engine = engines_[0].get();
    ConnectionOptions server = shape;
    server.engine = engines_[1].get();
    ListenerOptions listener;
    listener.allow_unauthenticated = true;
    return DialWith(*contexts_[0], *contexts_[1], client, server, listener);
  }
  void ConnectPairs(int n, const ConnectionOptions& shape) {
    for (int i = 0; i < n; ++i) {
      DialResult dial = DialEngines(shape);
      ASSERT_TRUE(dial.client.ok()) << dial.client.status();
      ASSERT_TRUE(dial.server.ok()) << dial.server.status();
      clients_.push_back(*std::move(dial.client));
      servers_.push_back(*std::move(dial.server));
    }
  }

  void TearDown() override {
    clients_.clear();
    servers_.clear();
    for (auto& engine : engines_) engine.reset();
    contexts_.clear();
    if (fabric_ != nullptr) {
      EXPECT_EQ(LeakReportText(*fabric_), "");
    }
  }

  std::unique_ptr<sim::Fabric> fabric_;
  std::unique_ptr<sim::SimVerbs> verbs_;
  std::vector<std::unique_ptr<Context>> contexts_;
  std::unique_ptr<Engine> engines_[2];
  std::vector<std::unique_ptr<Connection>> clients_;
  std::vector<std::unique_ptr<Connection>> servers_;
};

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TESTS_ENGINE_PAIR_FIXTURE_H_
