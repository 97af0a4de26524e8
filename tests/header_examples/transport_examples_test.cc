// The code examples in the comments of transport/'s public headers, each
// spliced in at its `// header-example: HEADER N` line (header_examples.py):
// they compile as written, and those that need no real device or second
// process run on the simulator, deadlines from the connection's own Env.
#include <infiniband/verbs.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "sim/fabric.h"
#include "sim/sim_verbs.h"
#include "tests/connection_pair.h"
#include "transport/config.h"
#include "transport/connect.h"
#include "transport/connection.h"
#include "transport/context.h"
#include "transport/deadline.h"
#include "transport/engine.h"
#include "transport/gid_subnet.h"
#include "transport/handshake.h"
#include "transport/listener.h"
#include "transport/memory_region.h"
#include "transport/negotiation.h"
#include "transport/peer_region.h"
#include "transport/received_message.h"
#include "verbs_shim/env.h"
#include "verbs_shim/env_thread.h"
#include "verbs_shim/ibverbs_backend.h"

namespace rdma_transport {
namespace {

using namespace std::chrono_literals;

// What the examples hand a received message to.
int consumed = 0;
void Consume(std::span<const std::byte> message) {
  if (!message.empty()) ++consumed;
}

// --- Examples that run (the tests below).

absl::Status ConfigExample() {
  // header-example: transport/config.h 1
  return absl::OkStatus();
}

absl::StatusOr<bool> GidSubnetExample(const ibv_gid& gid) {
  // header-example: transport/gid_subnet.h 1
  return inside;
}

absl::Status MemoryRegionExample(const Context& context) {
  // header-example: transport/memory_region.h 1
  if (!region.ok()) return region.status();
  return descriptor.rkey == region->mr()->rkey
             ? absl::OkStatus()
             : absl::InternalError("descriptor of another region");
}

absl::Status ConnectionExample(Connection* connection,
                               std::span<const std::byte> bytes,
                               std::span<std::byte> buffer,
                               const MemoryRegion& local,
                               const RemoteRegion& remote) {
  // header-example: transport/connection.h 1
  for (absl::Status status : {sent, n.status(), written}) {
    if (!status.ok()) return status;
  }
  return closed;
}

// What a kNoWait receive found: its length, or -1 for nothing there.
int64_t NoWaitExample(Connection* connection, std::span<std::byte> buffer) {
  // header-example: transport/connection.h 2
  return n.ok() ? static_cast<int64_t>(*n) : -1;
}

absl::StatusOr<size_t> DeadlineExample(const Context& context,
                                       Connection* connection,
                                       std::span<std::byte> buffer) {
  // header-example: transport/deadline.h 1
  return n;
}

absl::Status ReceivedMessageExample(Connection* connection) {
  // header-example: transport/received_message.h 1
  // header-example: transport/received_message.h 2
  return message.status();
}

absl::Status PeerRegionExample(const Context& context,
                               std::span<std::byte> buffer,
                               Connection* connection_a) {
  // header-example: transport/peer_region.h 1
  if (!for_a.ok()) return for_a.status();
  (void)descriptor;
  return released;
}

absl::Status EngineExample(const Context& context, std::span<const RdmaOp> ops,
                           Deadline deadline) {
  // header-example: transport/engine.h 1
  return absl::OkStatus();
}

// Serves until `expected` messages were handled, as the header's loop does.
int ArrivalsExample(absl::StatusOr<std::unique_ptr<Engine>>& engine, Env& env,
                    std::vector<std::byte>& buffer, int expected) {
  bool serving = true;
  int handled = 0;
  auto Handle = [&](Connection*, std::span<std::byte> message) {
    if (!message.empty() && ++handled == expected) serving = false;
  };
  // header-example: transport/engine.h 2
  return handled;
}

// --- Examples that need a real device or a peer elsewhere: compiled only.

[[maybe_unused]] absl::Status ContextExample() {
  // header-example: transport/context.h 1
  return context.status();
}

[[maybe_unused]] void ListenerExample(const Context& server_context,
                                      const Context& client_context,
                                      const ConnectionOptions& options) {
  // header-example: transport/listener.h 1
  // header-example: transport/listener.h 2
}

[[maybe_unused]] void ConnectExample(const Context& client_context,
                                     const ConnectionOptions& options) {
  // header-example: transport/connect.h 1
}

[[maybe_unused]] void ConnectionOptionsExample(const Context& context) {
  // header-example: transport/connection_options.h 1
}

[[maybe_unused]] void EngineSrqExample(const Context& context,
                                       const std::string& address,
                                       std::span<const std::byte> bytes) {
  // header-example: transport/engine.h 3
}

[[maybe_unused]] void EngineDeadlineExample(Connection* connection,
                                            std::span<const RdmaOp> ops,
                                            Env& env) {
  // header-example: transport/engine.h 5
}

[[maybe_unused]] void EngineDevicesExample(const Context& nic0,
                                           const Context& nic1) {
  // header-example: transport/engine.h 4
}

[[maybe_unused]] void NegotiationExample(const Context& context,
                                         const HandshakeMessage& accept) {
  // header-example: transport/negotiation.h 2
}

// Connection's member examples, each as its comment shows it.
[[maybe_unused]] void ConnectionMemberExamples(Connection* connection,
                                               const MemoryRegion& region,
                                               std::span<const RdmaOp> window,
                                               size_t slot) {
  {
      // header-example: transport/connection.h 4
  } {
      // header-example: transport/connection.h 5
  } {
      // header-example: transport/connection.h 6
  } {
      // header-example: transport/connection.h 7
  } {
    // header-example: transport/connection.h 8
  }
}

std::span<const std::byte> Text(const char* text) {
  return std::as_bytes(std::span(text, std::strlen(text)));
}

class TransportHeaderExamplesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<SimContexts> opened = OpenTwoSimContexts(fabric_, verbs_);
    ASSERT_TRUE(opened.ok()) << opened.status();
    contexts_ = std::move(opened->contexts);
  }
  void ConnectPair() {
    ASSERT_TRUE(DialPair(*contexts_[0], *contexts_[1], ConnectionOptions{},
                         client_, server_)
                    .ok());
  }
  void TearDown() override {
    client_.reset();
    server_.reset();
    contexts_.clear();
    EXPECT_EQ(LeakReportText(fabric_), "");
  }
  Env& env() { return fabric_.env(); }

  sim::Fabric fabric_;
  sim::SimVerbs verbs_{&fabric_};
  std::vector<std::unique_ptr<Context>> contexts_;
  std::unique_ptr<Connection> client_, server_;
};

TEST(TransportHeaderExamples, ConfigLoads) {
  EXPECT_TRUE(ConfigExample().ok());
}

TEST(TransportHeaderExamples, GidSubnetContainsItsAddresses) {
  ibv_gid gid = {};
  gid.raw[10] = gid.raw[11] = 0xff;
  const uint8_t inside[] = {10, 1, 2, 3};
  std::memcpy(&gid.raw[12], inside, sizeof inside);
  absl::StatusOr<bool> contained = GidSubnetExample(gid);
  ASSERT_TRUE(contained.ok()) << contained.status();
  EXPECT_TRUE(*contained);
  gid.raw[13] = 2;  // 10.2.2.3
  EXPECT_FALSE(*GidSubnetExample(gid));
}

TEST_F(TransportHeaderExamplesTest, MemoryRegionRegisters) {
  EXPECT_TRUE(MemoryRegionExample(*contexts_[0]).ok());
}

TEST_F(TransportHeaderExamplesTest, ConnectionSendsReceivesWritesCloses) {
  ASSERT_NO_FATAL_FAILURE(ConnectPair());
  std::vector<std::byte> source(4096, std::byte{7}), target(4096);
  absl::StatusOr<MemoryRegion> local =
      contexts_[0]->RegisterMemory(source, kLocalOnly);
  absl::StatusOr<MemoryRegion> remote =
      contexts_[1]->RegisterMemory(target, kRemoteWrite);
  ASSERT_TRUE(local.ok() && remote.ok());
  ASSERT_TRUE(server_->Send(Text("reply")).ok());
  std::vector<std::byte> buffer(64);
  EXPECT_TRUE(ConnectionExample(client_.get(), Text("hello"), buffer, *local,
                                remote->remote())
                  .ok());
  EXPECT_EQ(target, source);
  absl::StatusOr<size_t> hello = server_->Receive(buffer, env().DeadlineIn(1s));
  ASSERT_TRUE(hello.ok()) << hello.status();
  EXPECT_EQ(*hello, 5u);
}

TEST_F(TransportHeaderExamplesTest, NotWaitingTakesWhatIsThere) {
  ASSERT_NO_FATAL_FAILURE(ConnectPair());
  std::vector<std::byte> buffer(64);
  Deadline before = env().Now();
  EXPECT_EQ(NoWaitExample(server_.get(), buffer), -1);
  EXPECT_EQ(env().Now(), before);  // nothing waited
  ASSERT_TRUE(client_->Send(Text("hello")).ok());
  before = env().Now();
  EXPECT_EQ(NoWaitExample(server_.get(), buffer), 5);
  EXPECT_EQ(NoWaitExample(server_.get(), buffer), -1);
  EXPECT_EQ(env().Now(), before);
}

TEST_F(TransportHeaderExamplesTest, DeadlineFromTheContextsEnv) {
  ASSERT_NO_FATAL_FAILURE(ConnectPair());
  ASSERT_TRUE(client_->Send(Text("hello")).ok());
  std::vector<std::byte> buffer(64);
  absl::StatusOr<size_t> n =
      DeadlineExample(*contexts_[1], server_.get(), buffer);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 5u);
}

TEST_F(TransportHeaderExamplesTest, ReceivedMessagesAreConsumedInPlace) {
  ASSERT_NO_FATAL_FAILURE(ConnectPair());
  for (const char* text : {"one", "two", "three"}) {
    ASSERT_TRUE(client_->Send(Text(text)).ok());
  }
  consumed = 0;
  // The loop ends when no message comes within its second (virtual).
  EXPECT_TRUE(ReceivedMessageExample(server_.get()).ok());
  EXPECT_EQ(consumed, 3);
}

TEST_F(TransportHeaderExamplesTest, PeerRegionBindsAndReleases) {
  ASSERT_NO_FATAL_FAILURE(ConnectPair());
  std::vector<std::byte> buffer(8192);
  EXPECT_TRUE(PeerRegionExample(*contexts_[1], buffer, server_.get()).ok());
}

TEST_F(TransportHeaderExamplesTest, EngineWritesAndReportsEachOp) {
  // The example dials "10.0.0.2:7471": the second NIC's address, on the
  // simulator's in-memory network (no token needed there).
  ListenerOptions open_to_all;
  open_to_all.allow_unauthenticated = true;
  absl::StatusOr<std::unique_ptr<Listener>> listener = Listener::Create(
      *contexts_[1], "10.0.0.2:7471", ConnectionOptions{}, open_to_all);
  ASSERT_TRUE(listener.ok()) << listener.status();
  EnvFuture<absl::StatusOr<std::unique_ptr<Connection>>> accepted = RunInThread(
      env(), [&] { return (*listener)->Accept(env().DeadlineIn(10s)); });
  std::vector<std::byte> source(2 * 4096, std::byte{3}), target(2 * 4096);
  absl::StatusOr<MemoryRegion> local =
      contexts_[0]->RegisterMemory(source, kLocalOnly);
  absl::StatusOr<MemoryRegion> remote =
      contexts_[1]->RegisterMemory(target, kRemoteWrite);
  ASSERT_TRUE(local.ok() && remote.ok());
  const RdmaOp ops[] = {{&*local, 0, 4096, remote->remote(), 0},
                        {&*local, 4096, 4096, remote->remote(), 4096}};
  EXPECT_TRUE(EngineExample(*contexts_[0], ops, env().DeadlineIn(5s)).ok());
  absl::StatusOr<std::unique_ptr<Connection>> server = accepted.Get();
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ(target, source);
}

TEST_F(TransportHeaderExamplesTest, AServerLoopTakesWhatArrives) {
  absl::StatusOr<std::unique_ptr<Engine>> engine =
      Engine::Create(*contexts_[0]);
  ASSERT_TRUE(engine.ok()) << engine.status();
  ConnectionOptions on_engine;
  on_engine.engine = engine->get();
  std::vector<std::unique_ptr<Connection>> clients, servers;
  for (int i = 0; i < 8; ++i) {
    DialResult dial = DialWith(*contexts_[0], *contexts_[1], on_engine,
                               ConnectionOptions{}, ListenerOptions{});
    ASSERT_TRUE(dial.client.ok() && dial.server.ok());
    clients.push_back(*std::move(dial.client));
    servers.push_back(*std::move(dial.server));
  }
  for (int round = 0; round < 3; ++round) {
    for (int i : {5, 0, 7, 2, 1, 6, 3, 4}) {
      ASSERT_TRUE(servers[i]->Send(Text("request")).ok());
    }
  }
  std::vector<std::byte> buffer(64);
  EXPECT_EQ(ArrivalsExample(engine, env(), buffer, 24), 24);
  EXPECT_EQ((*engine)->connections_ready(), 0u);
  clients.clear();
  servers.clear();
}

}  // namespace
}  // namespace rdma_transport
