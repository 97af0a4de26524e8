// A deadline from the other clock is refused (transport/deadline.h): a
// real-clock deadline (DeadlineIn()) given to calls on a simulated fabric's
// virtual clock, and a virtual one given to calls on the real clock, come
// back as kInvalidArgument naming both clocks and the fix, from every kind
// of wait (Listener::Accept, Connection::Receive/Send/Check/Close,
// Engine::Wait, the asynchronous posts), and the connection stays usable.
#include <chrono>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sim/fabric.h"
#include "sim/sim_verbs.h"
#include "tests/connection_pair.h"
#include "tests/engine_fixture.h"
#include "transport/connection.h"
#include "transport/deadline.h"
#include "transport/engine.h"
#include "transport/listener.h"

namespace rdma_transport {
namespace {

using std::chrono::seconds;
using ::testing::HasSubstr;

// What every refusal of a real-clock deadline on the simulator says.
void ExpectRealClockRefused(const absl::Status& status) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), HasSubstr("the deadline is on the real clock"));
  EXPECT_THAT(status.message(), HasSubstr("simulated fabric's virtual clock"));
  EXPECT_THAT(status.message(), HasSubstr("context.env().DeadlineIn(...)"));
}

std::span<const std::byte> Bytes(const char* text) {
  return std::as_bytes(std::span(text, std::strlen(text)));
}

class DeadlineClockTest : public EngineTest {
 protected:
  // A message each way on `pair` with deadlines from the right clock.
  void ExpectUsable(Connection& from, Connection& to) {
    ASSERT_TRUE(
        from.Send(Bytes("still usable"), env().DeadlineIn(seconds(5))).ok());
    std::vector<std::byte> buffer(64);
    absl::StatusOr<size_t> n = to.Receive(buffer, env().DeadlineIn(seconds(5)));
    ASSERT_TRUE(n.ok()) << n.status();
    EXPECT_EQ(*n, std::strlen("still usable"));
  }
};

TEST_F(DeadlineClockTest, AcceptRefusesARealClockDeadlineOnTheSimulator) {
  absl::StatusOr<std::unique_ptr<Listener>> listener =
      Listener::Create(*contexts_[1], "127.0.0.1:0", ConnectionOptions{});
  ASSERT_TRUE(listener.ok()) << listener.status();
  absl::StatusOr<std::unique_ptr<Connection>> accepted =
      (*listener)->Accept(DeadlineIn(seconds(10)));
  ExpectRealClockRefused(accepted.status());
  EXPECT_THAT(accepted.status().message(), HasSubstr("Accept()"));
  // The deadline of the virtual clock waits, in virtual time, and times out.
  const Deadline start = env().Now();
  accepted = (*listener)->Accept(env().DeadlineIn(seconds(10)));
  EXPECT_EQ(accepted.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(env().Now() - start, seconds(10));
}

TEST_F(DeadlineClockTest, ReceiveRefusesARealClockDeadlineOnTheSimulator) {
  ConnectPairs(1);
  std::vector<std::byte> buffer(64);
  for (Connection* connection : {clients_[0].get(), servers_[0].get()}) {
    SCOPED_TRACE(connection == clients_[0].get() ? "on the engine"
                                                 : "on its own CQ");
    ExpectRealClockRefused(
        connection->Receive(buffer, DeadlineIn(seconds(1))).status());
    ExpectRealClockRefused(
        connection->ReceiveBorrowed(DeadlineIn(seconds(1))).status());
    ExpectRealClockRefused(
        connection->NextMessageSize(DeadlineIn(seconds(1))).status());
    EXPECT_TRUE(connection->status().ok()) << connection->status();
  }
  ExpectUsable(*clients_[0], *servers_[0]);
  ExpectUsable(*servers_[0], *clients_[0]);
}

TEST_F(DeadlineClockTest, TheRefusalComesWhetherOrNotTheCallWouldWait) {
  ConnectPairs(1);
  ASSERT_TRUE(clients_[0]->Send(Bytes("queued")).ok());
  ASSERT_TRUE(servers_[0]->Send(Bytes("queued")).ok());
  std::vector<std::byte> buffer(64);
  for (Connection* connection : {clients_[0].get(), servers_[0].get()}) {
    ExpectRealClockRefused(
        connection->Receive(buffer, DeadlineIn(seconds(1))).status());
    ExpectRealClockRefused(
        connection->Send(Bytes("x"), DeadlineIn(seconds(1))));
    // The message stays queued for a call with a deadline of its clock.
    absl::StatusOr<size_t> n =
        connection->Receive(buffer, env().DeadlineIn(seconds(1)));
    ASSERT_TRUE(n.ok()) << n.status();
    EXPECT_EQ(*n, std::strlen("queued"));
  }
}

TEST_F(DeadlineClockTest, EngineWaitRefusesARealClockDeadlineOnTheSimulator) {
  ConnectPairs(1);
  ExpectRealClockRefused(engine_->Wait(DeadlineIn(seconds(1))));
  EXPECT_EQ(engine_->Wait(env().DeadlineIn(seconds(1))).code(),
            absl::StatusCode::kDeadlineExceeded);
}

TEST_F(DeadlineClockTest, AsynchronousPostsRefuseARealClockDeadlineAtOnce) {
  ConnectPairs(1);
  std::vector<std::byte> source(4096), target(4096);
  MemoryRegion from = Register(0, source, kLocalOnly);
  MemoryRegion to = Register(1, target, kRemoteRead | kRemoteWrite);
  const RdmaOp op{&from, 0, 4096, to.remote(), 0};
  ExpectRealClockRefused(
      clients_[0]->PostWrite({&op, 1}, DeadlineIn(seconds(1))).status());
  ExpectRealClockRefused(
      clients_[0]->PostSendFrom(from, 0, 64, DeadlineIn(seconds(1))).status());
  // Nothing was posted: no op in flight, none to end.
  EXPECT_EQ(clients_[0]->async_ops_in_flight(), 0u);
  EXPECT_FALSE(engine_->NextCompletion().has_value());
  ExpectUsable(*clients_[0], *servers_[0]);
}

TEST_F(DeadlineClockTest, CheckAndCloseRefuseARealClockDeadlineAndStayOpen) {
  ConnectPairs(1);
  ExpectRealClockRefused(servers_[0]->Check(DeadlineIn(seconds(1))));
  EXPECT_EQ(servers_[0]->stats().keepalives, 0u);  // no probe went out
  ExpectRealClockRefused(servers_[0]->Close(DeadlineIn(seconds(1))));
  ExpectUsable(*servers_[0], *clients_[0]);
  EXPECT_TRUE(servers_[0]->Close(env().DeadlineIn(seconds(5))).ok());
}

TEST_F(DeadlineClockTest, ASendThatWaitsForCreditRefusesARealClockDeadline) {
  ConnectionOptions options;
  options.recv_slots = 4;
  ConnectPairs(1, options);
  // Out of credits: the next send waits, and refuses the deadline there.
  absl::Status sent;
  int messages = 0;
  while ((sent = servers_[0]->Send(Bytes("fill"), env().Now())).ok()) {
    ++messages;
  }
  ASSERT_EQ(sent.code(), absl::StatusCode::kDeadlineExceeded) << sent;
  ExpectRealClockRefused(servers_[0]->Send(Bytes("x"), DeadlineIn(seconds(1))));
  // Nothing more was sent.
  std::vector<std::byte> buffer(64);
  for (int i = 0; i < messages; ++i) {
    ASSERT_TRUE(
        clients_[0]->Receive(buffer, env().DeadlineIn(seconds(5))).ok());
  }
  EXPECT_EQ(clients_[0]->Receive(buffer, env().Now()).status().code(),
            absl::StatusCode::kDeadlineExceeded);
}

TEST_F(DeadlineClockTest, ARendezvousSendRefusesARealClockDeadlineBeforeIt) {
  ConnectPairs(1);
  ASSERT_TRUE(servers_[0]->path().rendezvous);
  std::vector<std::byte> large(servers_[0]->max_message_size() * 4);
  ExpectRealClockRefused(servers_[0]->Send(large, DeadlineIn(seconds(1))));
  EXPECT_EQ(servers_[0]->stats().rendezvous_sent, 0u);
  ExpectUsable(*servers_[0], *clients_[0]);
}

// The other way round: a fabric on the wall clock is on the real clock, and
// a deadline of a virtual clock would not pass there for 146 years.
TEST(DeadlineClockOnTheRealClockTest, AVirtualClockDeadlineIsRefused) {
  sim::Fabric fabric({.clock = sim::ClockMode::kWallClock});
  sim::SimVerbs verbs(&fabric);
  absl::StatusOr<SimContexts> sim = OpenTwoSimContexts(fabric, verbs);
  ASSERT_TRUE(sim.ok()) << sim.status();
  std::unique_ptr<Connection> client, server;
  ASSERT_TRUE(DialPair(*sim->contexts[0], *sim->contexts[1],
                       ConnectionOptions{}, client, server)
                  .ok());
  const Deadline virtual_deadline = kVirtualEpoch + seconds(1);
  std::vector<std::byte> buffer(64);
  absl::Status refused = server->Receive(buffer, virtual_deadline).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
  EXPECT_THAT(refused.message(),
              HasSubstr("the deadline is on a simulated fabric's virtual "
                        "clock, but this runs on the real clock"));
  // The real clock's deadlines work there, DeadlineIn() among them.
  EXPECT_EQ(server->Receive(buffer, DeadlineIn(std::chrono::milliseconds(1)))
                .status()
                .code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(client->Close(DeadlineIn(seconds(5))).ok());
  EXPECT_TRUE(server->Close(DeadlineIn(seconds(5))).ok());
}

}  // namespace
}  // namespace rdma_transport
