#include "tests/engine_fixture.h"

#include "tests/connection_pair.h"
#include "tests/register_for_test.h"

namespace rdma_transport {

void EngineTest::SetUp() {
  sim::FabricOptions options;
  options.progress_mode = mode_;
  fabric_ = std::make_unique<sim::Fabric>(options);
  verbs_ = std::make_unique<sim::SimVerbs>(fabric_.get());
  const absl::Status opened = OpenTwoSimContextsWithEngine(
      *fabric_, *verbs_, "cx7", devices_, contexts_, engine_);
  ASSERT_TRUE(opened.ok()) << opened;
}

void EngineTest::TearDown() {
  clients_.clear();
  servers_.clear();
  engine_.reset();
  contexts_.clear();
  if (fabric_ != nullptr) {
    EXPECT_EQ(LeakReportText(*fabric_), "");
  }
}

void EngineTest::ConnectPairs(int n, ConnectionOptions options) {
  ConnectionOptions client_options = options;
  client_options.engine = engine_.get();
  for (int i = 0; i < n; ++i) {
    DialResult dial = DialWith(*contexts_[0], *contexts_[1], client_options,
                               options, ListenerOptions{});
    ASSERT_TRUE(dial.client.ok()) << dial.client.status();
    ASSERT_TRUE(dial.server.ok()) << dial.server.status();
    clients_.push_back(*std::move(dial.client));
    servers_.push_back(*std::move(dial.server));
  }
}

MemoryRegion EngineTest::Register(int side, std::vector<std::byte>& memory,
                                  int access) {
  return RegisterForTest(*contexts_[side], memory, access);
}

size_t OpLength(size_t lane, size_t op) {
  return 1 + (lane * 131 + op * 37) % kOpSpan;
}

}  // namespace rdma_transport
