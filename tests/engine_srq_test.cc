// Engines with a shared receive queue (EngineOptions::srq_slots) on the
// simulator, in virtual time: many connections receiving into one pool of
// registered slots, byte-exact; the pool's credit reservation refusing an
// attach it cannot honour; a consumer that never receives holding only its
// own reservation while the others go on; teardown giving every slot back;
// a peer lost failing only its connection; devices without SRQs.
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "sim/fabric.h"
#include "sim/fault_injector.h"
#include "sim/sim_verbs.h"
#include "tests/connection_pair.h"
#include "tests/e2e_fixture.h"
#include "tests/engine_pair_fixture.h"
#include "transport/connection.h"
#include "transport/engine.h"
#include "verbs_shim/verbs_error.h"
#include "verbs_shim/verbs_wrapper.h"

namespace rdma_transport {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr uint32_t kCredits = 4;  // recv_slots: each connection's share
constexpr uint32_t kSlotBytes = 1024;

// Fails CreateSrq as a provider without SRQs does (EOPNOTSUPP).
class NoSrqVerbs : public VerbsWrapper {
 public:
  using VerbsWrapper::VerbsWrapper;
  absl::StatusOr<ibv_srq*> CreateSrq(ibv_pd*, ibv_srq_init_attr*) override {
    return VerbsError("ibv_create_srq", EOPNOTSUPP);
  }
};

class EngineSrqTest : public EnginePairFixture<> {
 protected:
  // Two NICs of `profile`; an engine with `srq_slots` shared slots on each.
  void Open(uint32_t srq_slots, std::string_view profile = "cx7") {
    ASSERT_NO_FATAL_FAILURE(OpenContexts(profile));
    EngineOptions options;
    options.srq_slots = srq_slots;
    options.srq_slot_bytes = kSlotBytes;
    ASSERT_NO_FATAL_FAILURE(OpenEngines(options));
  }

  static ConnectionOptions Shape() {
    ConnectionOptions options;
    options.recv_slots = kCredits;
    options.send_slots = 8;
    options.max_message_size = kSlotBytes;
    options.max_rdma_batch = 4;
    return options;
  }
  DialResult Dial() { return DialEngines(Shape()); }
  void ConnectPairs(int n) { EnginePairFixture::ConnectPairs(n, Shape()); }

  // Message `seq` of stream i from client i, received and checked by server
  // i, echoed, and the echo checked by client i.
  void RoundTrip(int i, uint64_t seq) {
    std::vector<std::byte> message(MessageLength(i, seq, kSlotBytes));
    FillMessage(i, seq, message);
    E2E_ASSERT_OK(clients_[i]->Send(message, In(seconds(5))));
    std::vector<std::byte> buffer(kSlotBytes);
    absl::StatusOr<size_t> n = servers_[i]->Receive(buffer, In(seconds(5)));
    ASSERT_TRUE(n.ok()) << n.status();
    ASSERT_EQ(CheckMessage(i, seq, {buffer.data(), *n}), "");
    E2E_ASSERT_OK(servers_[i]->Send({buffer.data(), *n}, In(seconds(5))));
    n = clients_[i]->Receive(buffer, In(seconds(5)));
    ASSERT_TRUE(n.ok()) << n.status();
    ASSERT_EQ(CheckMessage(i, seq, {buffer.data(), *n}), "");
  }

  uint64_t RnrNaks() const { return fabric_->Counters().rnr_naks; }
  Deadline In(Clock::duration timeout) {
    return fabric_->env().DeadlineIn(timeout);
  }
};

TEST_F(EngineSrqTest, ManyConnectionsReceiveIntoOneSharedPoolByteExact) {
  constexpr int kPairs = 32;
  // Exactly the sum of the reservations: every slot is somebody's credit.
  ASSERT_NO_FATAL_FAILURE(Open(kPairs * kCredits));
  ASSERT_NO_FATAL_FAILURE(ConnectPairs(kPairs));
  for (int side = 0; side < 2; ++side) {
    const EngineStats stats = engines_[side]->stats();
    EXPECT_EQ(stats.srq_slots, kPairs * kCredits);
    EXPECT_EQ(stats.srq_slots_reserved, kPairs * kCredits);
  }
  // The peer announced the pool's slot size and its reservation.
  EXPECT_EQ(clients_[0]->max_message_size(), kSlotBytes);
  EXPECT_EQ(clients_[0]->stats().send_credits, kCredits);
  // Many times the pool's size in messages, interleaved over every pair.
  for (uint64_t seq = 0; seq < 40; ++seq) {
    for (int i = 0; i < kPairs; ++i) ASSERT_NO_FATAL_FAILURE(RoundTrip(i, seq));
  }
  // Credits kept every message to a posted slot.
  EXPECT_EQ(RnrNaks(), 0u);
  for (int side = 0; side < 2; ++side) {
    EXPECT_EQ(engines_[side]->stats().srq_slots_held, 0u);
    EXPECT_EQ(engines_[side]->stats().stale_completions, 0u);
  }
  for (auto& client : clients_) E2E_ASSERT_OK(client->Close(In(seconds(1))));
}

TEST_F(EngineSrqTest, AttachingBeyondThePoolsReservationsIsRefused) {
  ASSERT_NO_FATAL_FAILURE(Open(2 * kCredits + 1));
  ASSERT_NO_FATAL_FAILURE(ConnectPairs(2));
  DialResult third = Dial();
  ASSERT_FALSE(third.client.ok());
  EXPECT_EQ(third.client.status().code(), absl::StatusCode::kResourceExhausted)
      << third.client.status();
  EXPECT_NE(third.client.status().message().find(
                "shared receive pool has 1 of 9 slots unreserved"),
            std::string::npos)
      << third.client.status();
  // A connection gone gives its reservation back.
  clients_.pop_back();
  servers_.pop_back();
  EXPECT_EQ(engines_[0]->stats().srq_slots_reserved, kCredits);
  ASSERT_NO_FATAL_FAILURE(ConnectPairs(1));
  ASSERT_NO_FATAL_FAILURE(RoundTrip(1, 0));
}

TEST_F(EngineSrqTest, AConsumerThatNeverReceivesHoldsOnlyItsOwnShare) {
  constexpr int kPairs = 4;
  ASSERT_NO_FATAL_FAILURE(Open(kPairs * kCredits));
  ASSERT_NO_FATAL_FAILURE(ConnectPairs(kPairs));
  // Server 0's application never calls Receive(): client 0 may fill its
  // share (recv_slots less the two credits data keeps in reserve) and then
  // waits for credit - it cannot take slots of the others.
  std::vector<std::byte> message(kSlotBytes);
  int sent = 0;
  while (true) {
    FillMessage(0, sent, message);
    const absl::Status status =
        clients_[0]->Send(message, In(milliseconds(50)));
    if (absl::IsDeadlineExceeded(status)) break;
    E2E_ASSERT_OK(status);
    ++sent;
    ASSERT_LE(sent, static_cast<int>(kCredits));
  }
  EXPECT_EQ(sent, static_cast<int>(kCredits) - 2);
  // The other pairs move twenty times the whole pool meanwhile.
  for (uint64_t seq = 0; seq < 20 * kCredits * kPairs; ++seq) {
    for (int i = 1; i < kPairs; ++i) ASSERT_NO_FATAL_FAILURE(RoundTrip(i, seq));
  }
  EXPECT_EQ(engines_[1]->stats().srq_slots_held, static_cast<uint32_t>(sent));
  EXPECT_EQ(RnrNaks(), 0u);
  // The slow consumer's messages are intact when it gets to them.
  std::vector<std::byte> buffer(kSlotBytes);
  for (int seq = 0; seq < sent; ++seq) {
    absl::StatusOr<size_t> n = servers_[0]->Receive(buffer, In(seconds(1)));
    ASSERT_TRUE(n.ok()) << n.status();
    ASSERT_EQ(CheckMessage(0, seq, {buffer.data(), *n}), "");
  }
  EXPECT_EQ(engines_[1]->stats().srq_slots_held, 0u);
}

TEST_F(EngineSrqTest, TeardownGivesEverySlotBackAndTheOthersGoOn) {
  constexpr int kPairs = 3;
  ASSERT_NO_FATAL_FAILURE(Open(kPairs * kCredits));
  ASSERT_NO_FATAL_FAILURE(ConnectPairs(kPairs));
  // Server 1 has two messages waiting when its connection is destroyed
  // (no Close() first), and its client one more on the wire.
  std::vector<std::byte> message(100);
  for (int seq = 0; seq < 2; ++seq) {
    FillMessage(1, seq, message);
    E2E_ASSERT_OK(clients_[1]->Send(message, In(seconds(1))));
  }
  ASSERT_NO_FATAL_FAILURE(RoundTrip(0, 0));  // drives both engines
  EXPECT_EQ(engines_[1]->stats().srq_slots_held, 2u);
  servers_[1].reset();
  EXPECT_EQ(engines_[1]->stats().srq_slots_held, 0u);
  EXPECT_EQ(engines_[1]->stats().srq_slots_reserved, (kPairs - 1) * kCredits);
  // Its client learns of the close; the others are untouched and still use
  // every slot of the pool, many times over.
  std::vector<std::byte> buffer(kSlotBytes);
  const absl::StatusOr<size_t> closed =
      clients_[1]->Receive(buffer, In(seconds(1)));
  EXPECT_EQ(closed.status().code(), absl::StatusCode::kUnavailable)
      << closed.status();
  for (uint64_t seq = 1; seq < 30; ++seq) {
    for (int i : {0, 2}) ASSERT_NO_FATAL_FAILURE(RoundTrip(i, seq));
  }
  EXPECT_EQ(RnrNaks(), 0u);
  // Connections first, then the engines (their SRQ after every QP):
  // TearDown() checks nothing leaked.
}

TEST_F(EngineSrqTest, APeerLostFailsOnlyItsConnection) {
  constexpr int kPairs = 6;
  constexpr int kVictim = 2;
  ASSERT_NO_FATAL_FAILURE(Open(kPairs * kCredits));
  ASSERT_NO_FATAL_FAILURE(ConnectPairs(kPairs));
  for (int i = 0; i < kPairs; ++i) ASSERT_NO_FATAL_FAILURE(RoundTrip(i, 0));
  // The victim's peer vanishes: every packet to its QP is lost.
  ASSERT_TRUE(
      fabric_->faults()
          .DropPackets(sim::FaultTarget::Qp(servers_[kVictim]->qp()->qp_num),
                       1 << 30)
          .ok());
  std::vector<std::byte> message(64);
  FillMessage(kVictim, 1, message);
  E2E_ASSERT_OK(clients_[kVictim]->Send(message, In(seconds(1))));
  // A blocking Receive on the victim waits through the retry budget (and
  // keepalive) and fails; meanwhile it drove the engine for everybody.
  std::vector<std::byte> buffer(kSlotBytes);
  const absl::StatusOr<size_t> lost =
      clients_[kVictim]->Receive(buffer, In(seconds(30)));
  ASSERT_FALSE(lost.ok());
  EXPECT_EQ(lost.status().code(), absl::StatusCode::kUnavailable)
      << lost.status();
  for (uint64_t seq = 1; seq < 20; ++seq) {
    for (int i = 0; i < kPairs; ++i) {
      if (i == kVictim) continue;
      ASSERT_NO_FATAL_FAILURE(RoundTrip(i, seq));
    }
  }
  for (int i = 0; i < kPairs; ++i) {
    if (i == kVictim) continue;
    E2E_ASSERT_OK(clients_[i]->status());
  }
  EXPECT_EQ(engines_[0]->stats().srq_slots_held, 0u);
}

TEST_F(EngineSrqTest, ADeviceWithoutSrqsIsUnimplemented) {
  // A profile whose provider has none (irdma on E810).
  ASSERT_NO_FATAL_FAILURE(Open(0, "e810"));
  EngineOptions options;
  options.srq_slots = 64;
  absl::StatusOr<std::unique_ptr<Engine>> engine =
      Engine::Create(*contexts_[0], options);
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(engine.status().message().find("max_srq 0"), std::string::npos)
      << engine.status();
  // One whose max_srq says yes but ibv_create_srq refuses: the errno text.
  sim::Fabric cx7_fabric;
  sim::SimVerbs cx7_verbs(&cx7_fabric);
  NoSrqVerbs cx7_refusing(&cx7_verbs);
  absl::StatusOr<SimContexts> cx7 =
      OpenTwoSimContexts(cx7_fabric, cx7_refusing, "cx7");
  ASSERT_TRUE(cx7.ok()) << cx7.status();
  engine = Engine::Create(*cx7->contexts[0], options);
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(engine.status().message().find("Operation not supported"),
            std::string::npos)
      << engine.status();
  // Bad shapes are the caller's, before the device is asked.
  options.srq_slot_bytes = 16;
  engine = Engine::Create(*cx7->contexts[0], options);
  EXPECT_EQ(engine.status().code(), absl::StatusCode::kInvalidArgument)
      << engine.status();
  options.srq_slot_bytes = kSlotBytes;
  options.srq_slots = 1 << 20;
  engine = Engine::Create(*cx7->contexts[0], options);
  EXPECT_EQ(engine.status().code(), absl::StatusCode::kInvalidArgument)
      << engine.status();
}

}  // namespace
}  // namespace rdma_transport
