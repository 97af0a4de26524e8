#include "tests/engine_fixture.h"

#include "tests/connection_pair.h"

namespace rdma_transport {

void EngineTest::SetUp() {
  sim::FabricOptions options;
  options.progress_mode = mode_;
  fabric_ = std::make_unique<sim::Fabric>(options);
  verbs_ = std::make_unique<sim::SimVerbs>(fabric_.get());
  absl::StatusOr<SimContexts> opened = OpenTwoSimContexts(*fabric_, *verbs_);
  ASSERT_TRUE(opened.ok()) << opened.status();
  devices_ = opened->devices;
  contexts_ = std::move(opened->contexts);
  absl::StatusOr<std::unique_ptr<Engine>> engine =
      Engine::Create(*contexts_[0]);
  ASSERT_TRUE(engine.ok()) << engine.status();
  engine_ = *std::move(engine);
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
  absl::StatusOr<MemoryRegion> region =
      contexts_[side]->RegisterMemory(memory, access);
  EXPECT_TRUE(region.ok()) << region.status();
  return region.ok() ? *std::move(region) : MemoryRegion();
}

size_t OpLength(size_t lane, size_t op) {
  return 1 + (lane * 131 + op * 37) % kOpSpan;
}

}  // namespace rdma_transport
