// The engine's fd under a real race (transport/engine.h, "Arrivals"): a
// sender thread sends 100,000 messages over 64 connections while this
// thread sleeps in epoll_wait() on the receiving engine's fd (kEvent) and
// takes what the engine reports ready. A message queued without a readable
// fd would leave the loop asleep: every look at the queue checks the fd,
// and an epoll_wait() that times out while messages are still coming fails
// the test. Each connection's messages arrive once, in order. On the
// simulator's wall clock (real threads, real sockets).
#include <sys/epoll.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "sim/fabric.h"
#include "sim/sim_verbs.h"
#include "tests/connection_pair.h"
#include "tests/readable_now.h"
#include "transport/connection.h"
#include "transport/engine.h"

namespace rdma_transport {
namespace {

constexpr int kConnections = 64;
constexpr uint32_t kMessages = 100000;

TEST(EngineReadinessStressTest, NoMessageIsQueuedWithoutAReadableFd) {
  sim::Fabric fabric({.clock = sim::ClockMode::kWallClock});
  sim::SimVerbs verbs(&fabric);
  absl::StatusOr<SimContexts> sim = OpenTwoSimContexts(fabric, verbs);
  ASSERT_TRUE(sim.ok()) << sim.status();
  Env& env = fabric.env();
  EngineOptions engine_options;
  engine_options.progress = ProgressMode::kEvent;
  absl::StatusOr<std::unique_ptr<Engine>> engine =
      Engine::Create(*sim->contexts[1], engine_options);
  ASSERT_TRUE(engine.ok()) << engine.status();

  ConnectionOptions receiver;
  receiver.engine = engine->get();
  std::vector<std::unique_ptr<Connection>> senders, receivers;
  for (int i = 0; i < kConnections; ++i) {
    DialResult dial =
        DialWith(*sim->contexts[0], *sim->contexts[1], ConnectionOptions{},
                 receiver, ListenerOptions{});
    ASSERT_TRUE(dial.client.ok()) << dial.client.status();
    ASSERT_TRUE(dial.server.ok()) << dial.server.status();
    senders.push_back(*std::move(dial.client));
    receivers.push_back(*std::move(dial.server));
  }

  // Message m goes on connection (m * 7) % 64 and carries m.
  std::atomic<bool> sender_failed{false};
  std::atomic<bool> stop{false};
  std::thread sender([&] {
    // Bursts of 1..128 messages, a pause of 0..255 us between them, so
    // that the receiver runs dry and sleeps often, woken at any point.
    uint32_t seed = 12345, burst = 0;
    for (uint32_t m = 0; m < kMessages && !sender_failed && !stop; ++m) {
      if (burst-- == 0) {
        seed = seed * 1103515245 + 12345;
        burst = (seed >> 16) % 128;
        std::this_thread::sleep_for(
            std::chrono::microseconds((seed >> 8) % 256));
      }
      absl::Status sent = senders[(m * 7) % kConnections]->Send(
          std::as_bytes(std::span(&m, 1)),
          env.DeadlineIn(std::chrono::seconds(30)));
      if (!sent.ok()) {
        ADD_FAILURE() << "message " << m << ": " << sent;
        sender_failed = true;
      }
    }
  });
  // A failed assertion below leaves the test early: the sender stops
  // first (within its send deadline).
  struct StopAndJoin {
    std::atomic<bool>& stop;
    std::thread& thread;
    ~StopAndJoin() {
      stop = true;
      thread.join();
    }
  } stop_and_join{stop, sender};

  const int epoll_fd = epoll_create1(EPOLL_CLOEXEC);
  ASSERT_GE(epoll_fd, 0);
  epoll_event watch = {};
  watch.events = EPOLLIN;
  ASSERT_EQ(epoll_ctl(epoll_fd, EPOLL_CTL_ADD, (*engine)->fd(), &watch), 0);
  // The next message each connection must deliver: m with m * 7 = i (mod
  // 64), that is m = i * 55 (mod 64), then every 64th.
  std::vector<uint32_t> next(kConnections);
  for (int i = 0; i < kConnections; ++i) next[i] = (i * 55) % kConnections;
  uint32_t received = 0, sleeps = 0, checks = 0;
  std::vector<std::byte> buffer(64);
  while (received < kMessages && !sender_failed) {
    // Take everything ready; every look at the queue checks the fd.
    while ((*engine)->Progress() > 0) {
    }
    while (Connection* ready = (*engine)->ReadyConnection()) {
      ASSERT_TRUE(ReadableNow((*engine)->fd()))
          << (*engine)->connections_ready() << " connection(s) ready, fd not";
      ++checks;
      absl::StatusOr<size_t> n = ready->Receive(buffer, env.Now());
      ASSERT_TRUE(n.ok()) << n.status();
      ASSERT_EQ(*n, sizeof(uint32_t));
      uint32_t m;
      std::memcpy(&m, buffer.data(), sizeof m);
      const int i = static_cast<int>(m * 7 % kConnections);
      ASSERT_EQ(ready, receivers[i].get()) << "message " << m;
      ASSERT_EQ(m, next[i]) << "connection " << i << ": out of order";
      next[i] += kConnections;
      ++received;
      while ((*engine)->Progress() > 0) {
      }
    }
    if (received == kMessages) break;
    // Nothing ready: arm the CQ (Wait returns at once, OK if something
    // came meanwhile), then sleep on the fd.
    if ((*engine)->Wait(env.Now()).ok()) continue;
    ASSERT_EQ((*engine)->connections_ready(), 0u);
    epoll_event event;
    const int woken = epoll_wait(epoll_fd, &event, 1, 10000);
    ASSERT_EQ(woken, 1) << "asleep 10 s with " << received << " of "
                        << kMessages << " messages received";
    ++sleeps;
  }
  close(epoll_fd);
  std::printf("%u messages, %u sleeps in epoll_wait\n", received, sleeps);
  EXPECT_EQ(received, kMessages);
  EXPECT_GT(sleeps, 100u);  // the receiver slept and was woken often
  EXPECT_EQ(checks, kMessages);
  receivers.clear();
  senders.clear();
}

}  // namespace
}  // namespace rdma_transport
