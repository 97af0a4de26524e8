// Arrivals (transport/engine.h): the engine's ReadyConnection() names the
// connections holding messages not yet received, in turn, without a look at
// the idle ones; with EngineOptions::progress kEvent its fd is readable
// exactly while one is ready. On the simulator, with and without a shared
// receive queue. The clients are on the engine and receive; the servers
// (on their own CQs) send.
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/engine_fixture.h"
#include "tests/engine_shapes.h"
#include "tests/readable_now.h"
#include "transport/connection.h"
#include "transport/engine.h"

namespace rdma_transport {
namespace {

std::span<const std::byte> Bytes(const std::string& text) {
  return std::as_bytes(std::span(text.data(), text.size()));
}

class EngineArrivalsTest : public EngineTest,
                           public ::testing::WithParamInterface<EngineShape> {
 protected:
  void SetUp() override {
    EngineTest::SetUp();
    EngineOptions options;
    options.progress = GetParam().progress;
    if (GetParam().srq) {
      options.srq_slots = 64 * 64;  // 64 connections of 64 credits
      options.srq_slot_bytes = 1024;
    }
    absl::StatusOr<std::unique_ptr<Engine>> engine =
        Engine::Create(*contexts_[0], options);
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = *std::move(engine);
  }

  // Server `i` sends `text` to client `i`, and the engine dispatches it.
  void Arrive(int i, const std::string& text) {
    ASSERT_TRUE(servers_[i]->Send(Bytes(text)).ok());
    while (engine_->Progress() > 0) {
    }
  }

  // The ready connection's index among the clients, -1 for none.
  int Ready() {
    Connection* ready = engine_->ReadyConnection();
    for (size_t i = 0; i < clients_.size(); ++i) {
      if (clients_[i].get() == ready) return static_cast<int>(i);
    }
    return ready == nullptr ? -1 : -2;
  }

  // Receives from the ready connection; what it received.
  std::string ReceiveReady() {
    Connection* ready = engine_->ReadyConnection();
    if (ready == nullptr) return "<none ready>";
    std::vector<std::byte> buffer(64);
    absl::StatusOr<size_t> n = ready->Receive(buffer, env().Now());
    if (!n.ok()) return n.status().ToString();
    return std::string(reinterpret_cast<const char*>(buffer.data()), *n);
  }
};

TEST_P(EngineArrivalsTest, ConnectionsComeInTheOrderTheyBecameReady) {
  ConnectPairs(4);
  EXPECT_EQ(Ready(), -1);
  Arrive(2, "two");
  Arrive(0, "zero");
  Arrive(3, "three");
  EXPECT_EQ(engine_->connections_ready(), 3u);
  EXPECT_EQ(Ready(), 2);
  EXPECT_EQ(ReceiveReady(), "two");
  EXPECT_EQ(Ready(), 0);
  EXPECT_EQ(ReceiveReady(), "zero");
  EXPECT_EQ(ReceiveReady(), "three");
  EXPECT_EQ(Ready(), -1);
  EXPECT_EQ(engine_->connections_ready(), 0u);
}

TEST_P(EngineArrivalsTest, AConnectionWithMoreMessagesTakesItsTurnBehind) {
  ConnectPairs(3);
  Arrive(0, "a1");
  Arrive(0, "a2");
  Arrive(1, "b1");
  EXPECT_EQ(engine_->connections_ready(), 2u);
  EXPECT_EQ(ReceiveReady(), "a1");  // 0 still holds a2: behind 1 now
  EXPECT_EQ(Ready(), 1);
  EXPECT_EQ(ReceiveReady(), "b1");
  EXPECT_EQ(ReceiveReady(), "a2");
  EXPECT_EQ(Ready(), -1);
  // A message for a connection in the queue keeps its place.
  Arrive(2, "c1");
  Arrive(1, "b2");
  Arrive(2, "c2");
  EXPECT_EQ(Ready(), 2);
  EXPECT_EQ(ReceiveReady(), "c1");
  EXPECT_EQ(ReceiveReady(), "b2");
  EXPECT_EQ(ReceiveReady(), "c2");
}

TEST_P(EngineArrivalsTest, OnlyTheConnectionsWithMessagesAreReady) {
  ConnectPairs(64);
  Arrive(41, "x");
  EXPECT_EQ(engine_->connections_ready(), 1u);
  EXPECT_EQ(Ready(), 41);
  EXPECT_EQ(ReceiveReady(), "x");
  EXPECT_EQ(engine_->connections_ready(), 0u);
}

TEST_P(EngineArrivalsTest, ReceivingWithoutAskingLeavesNothingReady) {
  ConnectPairs(2);
  Arrive(1, "one");
  Arrive(1, "two");
  std::vector<std::byte> buffer(64);
  // Peeking (the size) takes nothing: still ready.
  ASSERT_TRUE(clients_[1]->NextMessageSize(env().Now()).ok());
  EXPECT_EQ(Ready(), 1);
  ASSERT_TRUE(clients_[1]->Receive(buffer, env().Now()).ok());
  absl::StatusOr<ReceivedMessage> view =
      clients_[1]->ReceiveBorrowed(env().Now());
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(Ready(), -1);
  view->Release();
}

TEST_P(EngineArrivalsTest, AClosedConnectionIsReadyNoMore) {
  ConnectPairs(2);
  Arrive(0, "lost");
  Arrive(1, "kept");
  ASSERT_TRUE(
      clients_[0]->Close(env().DeadlineIn(std::chrono::seconds(5))).ok());
  EXPECT_EQ(Ready(), 1);
  clients_.erase(clients_.begin());  // destroyed: detached
  EXPECT_EQ(ReceiveReady(), "kept");
  EXPECT_EQ(Ready(), -1);
}

TEST_P(EngineArrivalsTest, WaitReturnsAtOnceWhileAConnectionIsReady) {
  ConnectPairs(1);
  Arrive(0, "x");
  const Deadline start = env().Now();
  EXPECT_TRUE(engine_->Wait(env().DeadlineIn(std::chrono::seconds(1))).ok());
  EXPECT_EQ(env().Now(), start);
  EXPECT_EQ(ReceiveReady(), "x");
  EXPECT_EQ(engine_->Wait(env().DeadlineIn(std::chrono::seconds(1))).code(),
            absl::StatusCode::kDeadlineExceeded);
}

TEST_P(EngineArrivalsTest, TheFdIsReadableWhileAConnectionIsReady) {
  if (GetParam().progress != ProgressMode::kEvent) {
    GTEST_SKIP() << "kBusyPoll: the fd says nothing of arrivals";
  }
  ConnectPairs(2);
  EXPECT_FALSE(ReadableNow(engine_->fd()));
  Arrive(0, "a");
  Arrive(1, "b");
  Arrive(1, "c");
  EXPECT_TRUE(ReadableNow(engine_->fd()));
  EXPECT_EQ(ReceiveReady(), "a");
  EXPECT_TRUE(ReadableNow(engine_->fd()));
  EXPECT_EQ(ReceiveReady(), "b");
  EXPECT_EQ(ReceiveReady(), "c");
  EXPECT_FALSE(ReadableNow(engine_->fd()));
  Arrive(0, "d");
  EXPECT_TRUE(ReadableNow(engine_->fd()));
  EXPECT_EQ(ReceiveReady(), "d");
  EXPECT_FALSE(ReadableNow(engine_->fd()));
}

// kNoWait (connection.h, "Not waiting"): an empty receive takes no service
// turn (the clock, the setup stream, the device's events) and, on the
// engine, no Progress(); a receive with a deadline of now takes one.
TEST_P(EngineArrivalsTest, ReceivingWithoutWaitingLooksAtNothingElse) {
  ConnectPairs(2);
  std::vector<std::byte> buffer(64);
  const Deadline before = env().Now();
  const uint64_t progress_calls = engine_->stats().progress_calls;
  for (Connection* idle : {clients_[0].get(), servers_[0].get()}) {
    const uint64_t turns = idle->stats().service_turns;
    for (int i = 0; i < 10000; ++i) {
      absl::StatusOr<size_t> n = idle->Receive(buffer, kNoWait);
      ASSERT_TRUE(absl::IsDeadlineExceeded(n.status())) << n.status();
    }
    EXPECT_EQ(idle->stats().service_turns, turns) << idle->name();
  }
  EXPECT_EQ(engine_->stats().progress_calls, progress_calls);
  EXPECT_EQ(env().Now(), before);
  // What is there is taken: the engine's once Progress() brought it, the
  // server's own from its CQ.
  Arrive(0, "to the client");
  absl::StatusOr<size_t> n = clients_[0]->Receive(buffer, kNoWait);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(buffer.data()), *n),
            "to the client");
  ASSERT_TRUE(clients_[1]->Send(Bytes("to the server")).ok());
  n = servers_[1]->Receive(buffer, kNoWait);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(buffer.data()), *n),
            "to the server");
  // The contrast: a deadline of now makes the busy wait's service turn.
  const uint64_t turns = servers_[1]->stats().service_turns;
  EXPECT_TRUE(absl::IsDeadlineExceeded(
      servers_[1]->Receive(buffer, env().Now()).status()));
  EXPECT_GT(servers_[1]->stats().service_turns, turns);
}

INSTANTIATE_TEST_SUITE_P(Shapes, EngineArrivalsTest, EngineShapes(),
                         EngineShapeName);

}  // namespace
}  // namespace rdma_transport
