// One engine over several devices (transport/engine.h, "Several devices"),
// on the simulator in virtual time: two hosts with two NICs each, a rail
// per NIC pair, and on each host one engine over both of its NICs, driven
// by one loop. Messages found through ReadyConnection() and asynchronous
// WRITE/READ both ways on both rails, with and without shared receive
// queues; the engine's fd readable for a completion on either device; a port
// going down on one NIC failing that rail's connections only; and the lists
// and connections an engine refuses.
#include <chrono>
#include <cstddef>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "sim/fabric.h"
#include "sim/fault_injector.h"
#include "sim/profile_names.h"
#include "sim/sim_verbs.h"
#include "tests/connection_pair.h"
#include "tests/e2e_fixture.h"
#include "tests/engine_shapes.h"
#include "tests/readable_now.h"
#include "tests/register_for_test.h"
#include "transport/connection.h"
#include "transport/engine.h"

namespace rdma_transport {
namespace {

using std::chrono::milliseconds;

constexpr int kHosts = 2;
constexpr int kRails = 2;
constexpr size_t kMaxMessage = 512;

// One connected pair: its rail, and host h's end in end[h].
struct Pair {
  int rail = 0;
  std::unique_ptr<Connection> end[kHosts];
};

class EngineDevicesFixture : public ::testing::Test {
 protected:
  // Host h's NIC r is at 10.0.r.(h+1): rail r joins the two hosts' NIC r.
  void Open(sim::ProgressMode mode, const EngineShape& shape) {
    sim::FabricOptions fabric_options;
    fabric_options.progress_mode = mode;
    fabric_ = std::make_unique<sim::Fabric>(fabric_options);
    verbs_ = std::make_unique<sim::SimVerbs>(fabric_.get());
    absl::StatusOr<sim::DeviceProfile> profile = sim::ProfileByName("cx7");
    ASSERT_TRUE(profile.ok()) << profile.status();
    for (int h = 0; h < kHosts; ++h) {
      for (int r = 0; r < kRails; ++r) {
        absl::StatusOr<std::string> device = fabric_->AddDevice(
            *profile, std::nullopt,
            "10.0." + std::to_string(r) + "." + std::to_string(h + 1));
        ASSERT_TRUE(device.ok()) << device.status();
        devices_[h][r] = *device;
        absl::StatusOr<std::unique_ptr<Context>> context =
            Context::Open(*verbs_, *device, TransportConfig{});
        ASSERT_TRUE(context.ok()) << context.status();
        contexts_[h][r] = *std::move(context);
      }
    }
    engine_options_.progress = shape.progress;
    if (shape.srq) {
      engine_options_.srq_slots = 1024;  // on each NIC
      engine_options_.srq_slot_bytes = kMaxMessage;
    }
    for (int h = 0; h < kHosts; ++h) {
      absl::StatusOr<std::unique_ptr<Engine>> engine = Engine::Create(
          {contexts_[h][0].get(), contexts_[h][1].get()}, engine_options_);
      ASSERT_TRUE(engine.ok()) << engine.status();
      engines_[h] = *std::move(engine);
    }
  }

  void TearDown() override {
    pairs_.clear();
    for (auto& engine : engines_) engine.reset();
    for (auto& host : contexts_) {
      for (auto& context : host) context.reset();
    }
    if (fabric_ != nullptr) {
      EXPECT_EQ(LeakReportText(*fabric_), "");
    }
  }

  Env& env() { return fabric_->env(); }

  // `per_rail` pairs on each rail, host 0 dialling host 1, each end on its
  // host's engine; rails alternate, so both engines hold them interleaved.
  void ConnectRails(int per_rail) {
    ConnectionOptions shape;
    shape.max_message_size = kMaxMessage;
    shape.recv_slots = 16;
    for (int i = 0; i < per_rail; ++i) {
      for (int r = 0; r < kRails; ++r) {
        ConnectionOptions client = shape;
        client.engine = engines_[0].get();
        ConnectionOptions server = shape;
        server.engine = engines_[1].get();
        DialResult dial = DialWith(*contexts_[0][r], *contexts_[1][r], client,
                                   server, ListenerOptions{});
        ASSERT_TRUE(dial.client.ok()) << dial.client.status();
        ASSERT_TRUE(dial.server.ok()) << dial.server.status();
        Pair& pair = pairs_.emplace_back();
        pair.rail = r;
        pair.end[0] = *std::move(dial.client);
        pair.end[1] = *std::move(dial.server);
      }
    }
  }

  // The index of the pair whose end on host `h` is `connection`, or -1.
  int PairOf(int h, const Connection* connection) const {
    for (size_t p = 0; p < pairs_.size(); ++p) {
      if (pairs_[p].end[h].get() == connection) return static_cast<int>(p);
    }
    return -1;
  }

  // The message stream from host h on pair p.
  static uint64_t Stream(int h, size_t p) { return h * 1000 + p; }

  // Host h sends `count` messages on every pair it has an end of (`only`:
  // the pairs of that rail alone).
  void SendOnEveryPair(int h, int count, std::optional<int> only = {}) {
    std::vector<std::byte> message(kMaxMessage);
    for (size_t p = 0; p < pairs_.size(); ++p) {
      if (only.has_value() && pairs_[p].rail != *only) continue;
      for (int k = 0; k < count; ++k) {
        const uint64_t seq = sent_[{h, p}]++;
        message.resize(MessageLength(Stream(h, p), seq, kMaxMessage));
        FillMessage(Stream(h, p), seq, message);
        E2E_ASSERT_OK(pairs_[p].end[h]->Send(message));
      }
    }
  }

  // Drives both engines in one loop and receives what they report ready
  // until `expected` messages came in, each checked against its pair's
  // stream and order: one that came on another connection fails the check.
  void ReceiveByArrivals(int expected) {
    std::vector<std::byte> buffer(kMaxMessage);
    int received = 0;
    for (int turn = 0; received < expected; ++turn) {
      ASSERT_LT(turn, 100000) << received << " of " << expected << " received";
      for (int h = 0; h < kHosts; ++h) {
        engines_[h]->Progress();
        while (Connection* ready = engines_[h]->ReadyConnection()) {
          const int p = PairOf(h, ready);
          ASSERT_GE(p, 0) << "host " << h << ": a connection of no pair ready";
          absl::StatusOr<size_t> n = ready->Receive(buffer, env().Now());
          ASSERT_TRUE(n.ok()) << n.status();
          const uint64_t seq = received_[{h, p}]++;
          ASSERT_EQ(CheckMessage(Stream(1 - h, p), seq, {buffer.data(), *n}),
                    "")
              << "host " << h << ", pair " << p << " (rail " << pairs_[p].rail
              << "), message " << seq;
          ++received;
        }
      }
    }
  }

  // Drives both engines until `count` operations ended, handing each to
  // `on_end(host, completion)`.
  template <typename OnEnd>
  void DriveOps(int count, OnEnd on_end) {
    int ended = 0;
    for (int turn = 0; ended < count; ++turn) {
      ASSERT_LT(turn, 100000) << ended << " of " << count << " ops ended";
      for (int h = 0; h < kHosts; ++h) {
        engines_[h]->Progress();
        while (std::optional<Completion> done = engines_[h]->NextCompletion()) {
          on_end(h, *done);
          ++ended;
        }
      }
    }
  }

  std::unique_ptr<sim::Fabric> fabric_;
  std::unique_ptr<sim::SimVerbs> verbs_;
  std::string devices_[kHosts][kRails];
  std::unique_ptr<Context> contexts_[kHosts][kRails];
  EngineOptions engine_options_;
  std::unique_ptr<Engine> engines_[kHosts];
  std::vector<Pair> pairs_;
  std::map<std::pair<int, size_t>, uint64_t> sent_, received_;
};

class EngineDevicesTest : public EngineDevicesFixture,
                          public ::testing::WithParamInterface<EngineShape> {};

TEST_P(EngineDevicesTest, MessagesBothWaysOnBothRailsFromOneLoopAHost) {
  ASSERT_NO_FATAL_FAILURE(Open(sim::ProgressMode::kImmediate, GetParam()));
  ASSERT_NO_FATAL_FAILURE(ConnectRails(3));
  for (int h = 0; h < kHosts; ++h) {
    const EngineStats stats = engines_[h]->stats();
    EXPECT_EQ(stats.devices, 2u);
    EXPECT_EQ(stats.connections, 6u);
    if (GetParam().srq) {
      EXPECT_EQ(stats.srq_slots, 2 * engine_options_.srq_slots);
      EXPECT_EQ(stats.srq_slots_reserved, 6u * 16);
    }
  }
  for (int round = 0; round < 20; ++round) {
    ASSERT_NO_FATAL_FAILURE(SendOnEveryPair(0, 4));
    ASSERT_NO_FATAL_FAILURE(SendOnEveryPair(1, 3));
    ASSERT_NO_FATAL_FAILURE(ReceiveByArrivals(6 * (4 + 3)));
  }
  for (int h = 0; h < kHosts; ++h) {
    EXPECT_EQ(engines_[h]->connections_ready(), 0u);
    EXPECT_EQ(engines_[h]->stats().stale_completions, 0u);
  }
}

TEST_P(EngineDevicesTest, WritesAndReadsBothWaysOnBothRails) {
  ASSERT_NO_FATAL_FAILURE(Open(sim::ProgressMode::kImmediate, GetParam()));
  ASSERT_NO_FATAL_FAILURE(ConnectRails(2));
  constexpr size_t kBytes = 64 * 1024;
  constexpr size_t kOps = 16;  // of kBytes / kOps each, a direction a pair
  // memory[h][p]: what host h writes from, its target of the peer's WRITEs
  // and where it reads the peer's target back into.
  struct Memory {
    std::vector<std::byte> source, target, readback;
    MemoryRegion source_mr, target_mr, readback_mr;
  };
  std::vector<Memory> memory[kHosts];
  for (int h = 0; h < kHosts; ++h) {
    memory[h].resize(pairs_.size());
    for (size_t p = 0; p < pairs_.size(); ++p) {
      const Context& nic = *contexts_[h][pairs_[p].rail];
      Memory& m = memory[h][p];
      m.source.resize(kBytes);
      for (size_t i = 0; i < kBytes; ++i) {
        m.source[i] = static_cast<std::byte>((i * 31 + p * 7 + h * 101) & 0xff);
      }
      m.target.assign(kBytes, std::byte{0});
      m.readback.assign(kBytes, std::byte{0});
      m.source_mr = RegisterForTest(nic, m.source, kLocalOnly);
      m.target_mr = RegisterForTest(nic, m.target, kRemoteRead | kRemoteWrite);
      m.readback_mr = RegisterForTest(nic, m.readback, kLocalWrite);
    }
  }
  for (bool write : {true, false}) {
    std::map<std::pair<int, OpHandle>, size_t> posted;  // -> pair
    for (int h = 0; h < kHosts; ++h) {
      for (size_t p = 0; p < pairs_.size(); ++p) {
        Memory& mine = memory[h][p];
        const Memory& peer = memory[1 - h][p];
        std::vector<RdmaOp> ops;
        for (size_t k = 0; k < kOps; ++k) {
          const size_t offset = k * (kBytes / kOps);
          ops.push_back({write ? &mine.source_mr : &mine.readback_mr, offset,
                         kBytes / kOps, peer.target_mr.remote(), offset});
        }
        absl::StatusOr<OpHandle> first = write
                                             ? pairs_[p].end[h]->PostWrite(ops)
                                             : pairs_[p].end[h]->PostRead(ops);
        ASSERT_TRUE(first.ok()) << first.status();
        for (size_t k = 0; k < kOps; ++k) posted[{h, *first + k}] = p;
      }
    }
    ASSERT_NO_FATAL_FAILURE(DriveOps(
        static_cast<int>(posted.size()), [&](int h, const Completion& done) {
          auto it = posted.find({h, done.handle});
          ASSERT_NE(it, posted.end()) << "host " << h << ": op " << done.handle;
          EXPECT_EQ(done.outcome, OpOutcome::kCompleted) << done.status;
          EXPECT_EQ(done.is_write, write);
          EXPECT_EQ(done.connection, pairs_[it->second].end[h].get());
          posted.erase(it);
        }));
    EXPECT_TRUE(posted.empty());
  }
  for (int h = 0; h < kHosts; ++h) {
    for (size_t p = 0; p < pairs_.size(); ++p) {
      // Host h's target holds what its peer wrote; h read back the peer's
      // target, which holds what h wrote.
      EXPECT_EQ(memory[h][p].target, memory[1 - h][p].source)
          << "host " << h << ", pair " << p;
      EXPECT_EQ(memory[h][p].readback, memory[h][p].source)
          << "host " << h << ", pair " << p;
    }
  }
}

// Work moves only when the test runs the fabric (kManual): a message for
// either NIC, delivered while nobody polls, makes the engine's fd readable
// once Wait() has armed both CQs, and Wait() returns with it.
TEST_P(EngineDevicesTest, TheFdSignalsEitherDevicesCompletions) {
  ASSERT_NO_FATAL_FAILURE(Open(sim::ProgressMode::kManual, GetParam()));
  ASSERT_NO_FATAL_FAILURE(ConnectRails(1));
  fabric_->RunUntilIdle();
  while (engines_[0]->Progress() > 0) {
  }
  // Each rail twice: a channel event not taken would leave the fd readable
  // with nothing there.
  for (int turn = 0; turn < 2 * kRails + 1; ++turn) {
    const int r = turn % kRails;
    // Nothing there: Wait() arms the CQs and returns at its deadline.
    const absl::Status armed = engines_[0]->Wait(env().Now());
    ASSERT_TRUE(absl::IsDeadlineExceeded(armed)) << armed;
    ASSERT_FALSE(ReadableNow(engines_[0]->fd())) << "turn " << turn;
    if (turn == 2 * kRails) break;
    ASSERT_NO_FATAL_FAILURE(SendOnEveryPair(1, 1, r));
    fabric_->RunUntilIdle();
    EXPECT_TRUE(ReadableNow(engines_[0]->fd())) << "rail " << r;
    const absl::Status woke =
        engines_[0]->Wait(env().DeadlineIn(milliseconds(500)));
    ASSERT_TRUE(woke.ok()) << "rail " << r << ": " << woke;
    Connection* ready = engines_[0]->ReadyConnection();
    const int p = PairOf(0, ready);
    ASSERT_GE(p, 0) << "rail " << r;
    EXPECT_EQ(pairs_[p].rail, r);
    std::vector<std::byte> buffer(kMaxMessage);
    absl::StatusOr<size_t> n = ready->Receive(buffer, env().Now());
    ASSERT_TRUE(n.ok()) << n.status();
    EXPECT_EQ(CheckMessage(Stream(1, p), turn / kRails, {buffer.data(), *n}),
              "");
    fabric_->RunUntilIdle();  // the credit return, if one went
    while (engines_[0]->Progress() > 0) {
    }
  }
}

TEST_P(EngineDevicesTest, APortDownFailsItsRailOnlyAndTheOtherRailCarriesOn) {
  ASSERT_NO_FATAL_FAILURE(Open(sim::ProgressMode::kImmediate, GetParam()));
  ASSERT_NO_FATAL_FAILURE(ConnectRails(2));
  ASSERT_TRUE(fabric_->faults().PortDown(devices_[0][1]).ok());
  // Host 0's engine services its connections while it waits: the async
  // event of NIC 1's port fails the connections on it.
  const Deadline give_up = env().DeadlineIn(std::chrono::seconds(5));
  auto rail1_failed = [&] {
    for (const Pair& pair : pairs_) {
      if (pair.rail == 1 && pair.end[0]->status().ok()) return false;
    }
    return true;
  };
  for (int turn = 0; !rail1_failed() && env().Now() < give_up; ++turn) {
    ASSERT_LT(turn, 1000) << "rail 1 still up, and time stands still";
    const absl::Status waited =
        engines_[0]->Wait(env().DeadlineIn(milliseconds(10)));
    ASSERT_TRUE(waited.ok() || absl::IsDeadlineExceeded(waited)) << waited;
    while (engines_[0]->ReadyConnection() != nullptr) {
      // A failed connection is not reported ready; none should be here.
      FAIL() << "a connection is ready with nothing sent";
    }
  }
  ASSERT_TRUE(rail1_failed()) << "rail 1's connections still up after 5 s";
  for (const Pair& pair : pairs_) {
    if (pair.rail == 1) {
      EXPECT_EQ(pair.end[0]->status().code(), absl::StatusCode::kUnavailable)
          << pair.end[0]->status();
    } else {
      EXPECT_TRUE(pair.end[0]->status().ok()) << pair.end[0]->status();
    }
  }
  // Rail 0 carries messages both ways as before the fault.
  ASSERT_NO_FATAL_FAILURE(SendOnEveryPair(0, 3, 0));
  ASSERT_NO_FATAL_FAILURE(SendOnEveryPair(1, 3, 0));
  ASSERT_NO_FATAL_FAILURE(ReceiveByArrivals(2 * 2 * 3));
}

INSTANTIATE_TEST_SUITE_P(Shapes, EngineDevicesTest, EngineShapes(),
                         EngineShapeName);

// What an engine refuses: a list it cannot serve, and a connection on a
// device it was not made for.
class EngineDevicesRefusalTest : public EngineDevicesFixture {};

TEST_F(EngineDevicesRefusalTest, ListsItCannotServeAreRefusedByName) {
  ASSERT_NO_FATAL_FAILURE(
      Open(sim::ProgressMode::kImmediate, {false, ProgressMode::kBusyPoll}));
  const Context* nic0 = contexts_[0][0].get();
  const Context* nic1 = contexts_[0][1].get();
  auto refused = [](const absl::StatusOr<std::unique_ptr<Engine>>& made) {
    EXPECT_EQ(made.status().code(), absl::StatusCode::kInvalidArgument)
        << made.status();
    return std::string(made.status().message());
  };
  EXPECT_EQ(refused(Engine::Create(std::vector<const Context*>{})),
            "an engine serves 1..64 devices; given 0");
  EXPECT_EQ(refused(Engine::Create({nic0, nullptr})),
            "Context 1 of the engine's list is null");
  EXPECT_EQ(refused(Engine::Create({nic0, nic1, nic0})),
            "Context 2 (" + nic0->device_name() +
                ") is in the engine's list twice (also 0)");
  // A Context of another fabric runs on another clock.
  sim::Fabric other;
  sim::SimVerbs other_verbs(&other);
  absl::StatusOr<SimContexts> elsewhere =
      OpenTwoSimContexts(other, other_verbs);
  ASSERT_TRUE(elsewhere.ok()) << elsewhere.status();
  EXPECT_EQ(refused(Engine::Create({nic0, elsewhere->contexts[0].get()})),
            "Contexts 0 (" + nic0->device_name() + ") and 1 (" +
                elsewhere->contexts[0]->device_name() +
                ") run on different Envs; one engine waits on one clock");
  // Options are checked as for one device.
  EngineOptions bad;
  bad.poll_batch = 0;
  EXPECT_EQ(refused(Engine::Create({nic0, nic1}, bad)),
            "poll_batch 0 out of range 1..64");
}

TEST_F(EngineDevicesRefusalTest, AConnectionOnADeviceTheEngineDoesNotServe) {
  ASSERT_NO_FATAL_FAILURE(
      Open(sim::ProgressMode::kImmediate, {false, ProgressMode::kBusyPoll}));
  absl::StatusOr<std::unique_ptr<Engine>> nic0_only =
      Engine::Create(*contexts_[0][0]);
  ASSERT_TRUE(nic0_only.ok()) << nic0_only.status();
  EXPECT_TRUE((*nic0_only)->Serves(*contexts_[0][0]));
  EXPECT_FALSE((*nic0_only)->Serves(*contexts_[0][1]));
  ConnectionOptions client;
  client.engine = nic0_only->get();
  DialResult dial = DialWith(*contexts_[0][1], *contexts_[1][1], client,
                             ConnectionOptions{}, ListenerOptions{});
  ASSERT_EQ(dial.client.status().code(), absl::StatusCode::kInvalidArgument)
      << dial.client.status();
  const std::string why(dial.client.status().message());
  EXPECT_NE(why.find("the engine serves the Context of " + devices_[0][0] +
                     ", not this connection's (" + devices_[0][1] + ")"),
            std::string::npos)
      << why;
  EXPECT_EQ((*nic0_only)->stats().connections, 0u);
}

}  // namespace
}  // namespace rdma_transport
