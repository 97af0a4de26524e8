// The message path's verbs calls, watched through a Verbs wrapper over the
// simulator: where the ring is large enough (credits.h, RepostsMayFollow), a
// message goes out before the receives Receive() emptied are posted again,
// so it does not wait for that PostRecv (over rxe under qemu TCG it was
// 0.46-0.74 us of the 1.9 us from a ping's arrival to the echo's post;
// issue 12), and their credits ride on a later message. They gather until
// there are a quarter of the credit batch (at most 8; RepostsMayGather) and
// then go out as one chain after the message: one PostRecv per 8 round
// trips of a ping-pong on the default ring (the simulator's t_min 1.52 ->
// 1.31 us at 8 B), or after a message with no receive since the one
// before. A credit message takes those gathering with it. On the
// smallest ring they go first and the message carries their credits:
// posted after, the owed credits reach the credit batch in a ping-pong, a
// credit message takes one of the three credits data needs, and the other
// side's Send() waits for a peer that is not polling (a ping-pong driven
// from one thread stopped at its second round trip before the rule).
#include <cstring>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "gtest/gtest.h"
#include "sim/fabric.h"
#include "sim/sim_verbs.h"
#include "tests/sim_pair_fixture.h"
#include "transport/connection.h"
#include "verbs_shim/env_thread.h"
#include "verbs_shim/verbs_wrapper.h"

namespace rdma_transport {
namespace {

// Records, per QP, the order of its PostSend and PostRecv calls, and how
// many receives each PostRecv chained.
class CallOrderVerbs : public VerbsWrapper {
 public:
  using VerbsWrapper::VerbsWrapper;

  enum class Call { kPostSend, kPostRecv };

  absl::Status PostSend(ibv_qp* qp, ibv_send_wr* wr,
                        ibv_send_wr** bad_wr) override {
    Record({qp, Call::kPostSend, 0});
    return VerbsWrapper::PostSend(qp, wr, bad_wr);
  }
  absl::Status PostRecv(ibv_qp* qp, ibv_recv_wr* wr,
                        ibv_recv_wr** bad_wr) override {
    uint32_t chained = 0;
    for (const ibv_recv_wr* w = wr; w != nullptr; w = w->next) ++chained;
    Record({qp, Call::kPostRecv, chained});
    return VerbsWrapper::PostRecv(qp, wr, bad_wr);
  }

  // The calls on `qp` since the last Clear().
  std::vector<Call> CallsOn(ibv_qp* qp) {
    std::vector<Call> calls;
    for (const Entry& entry : EntriesOn(qp)) calls.push_back(entry.call);
    return calls;
  }
  // The receives each PostRecv on `qp` chained, since the last Clear().
  std::vector<uint32_t> ChainsOn(ibv_qp* qp) {
    std::vector<uint32_t> chains;
    for (const Entry& entry : EntriesOn(qp)) {
      if (entry.call == Call::kPostRecv) chains.push_back(entry.chained);
    }
    return chains;
  }
  void Clear() {
    std::lock_guard<std::mutex> lock(mu_);
    entries_.clear();
  }

 private:
  struct Entry {
    ibv_qp* qp;
    Call call;
    uint32_t chained;  // PostRecv: the receives in its chain
  };

  void Record(const Entry& entry) {
    std::lock_guard<std::mutex> lock(mu_);
    entries_.push_back(entry);
  }
  std::vector<Entry> EntriesOn(ibv_qp* qp) {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<Entry> on;
    for (const Entry& entry : entries_) {
      if (entry.qp == qp) on.push_back(entry);
    }
    return on;
  }

  std::mutex mu_;
  std::vector<Entry> entries_;
};

class MessagePathTest : public SimPairTest<CallOrderVerbs> {
 protected:
  // One round trip of `size` bytes stamped with `round`: the client sends,
  // the server receives by copy and echoes, the client receives the echo.
  void RoundTrip(uint32_t round, size_t size) {
    std::vector<std::byte> ping(size, static_cast<std::byte>(round));
    std::vector<std::byte> buffer(size + 1);
    const Deadline deadline = fabric_.env().DeadlineIn(std::chrono::seconds(1));
    absl::Status sent = client_->Send(ping, deadline);
    ASSERT_TRUE(sent.ok()) << sent;
    absl::StatusOr<size_t> got = server_->Receive(buffer, deadline);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(*got, size);
    ASSERT_EQ(std::memcmp(buffer.data(), ping.data(), size), 0);
    sent = server_->Send({buffer.data(), size}, deadline);
    ASSERT_TRUE(sent.ok()) << sent << " (the client holds "
                           << client_->stats().send_credits << " credits)";
    got = client_->Receive(buffer, deadline);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(*got, size);
    ASSERT_EQ(std::memcmp(buffer.data(), ping.data(), size), 0);
  }

  // The server receives a ping (its slot waits to be posted), then echoes
  // it: the verbs calls the echo makes on the server's QP.
  std::vector<CallOrderVerbs::Call> EchoCalls() {
    std::vector<std::byte> ping(64, std::byte{7});
    std::vector<std::byte> buffer(64);
    EXPECT_TRUE(client_->Send(ping).ok());
    EXPECT_TRUE(server_->Receive(buffer).ok());
    verbs_.Clear();
    EXPECT_TRUE(server_->Send(buffer).ok());
    return verbs_.CallsOn(server_->qp());
  }
};

using Call = CallOrderVerbs::Call;

// The default ring (64 slots, credits returned from 32 owed): each echo's
// SEND goes out alone; the receives the pings emptied follow every eighth
// as one chain of eight.
TEST_F(MessagePathTest, OnADefaultRingTheRepostsFollowEveryEighthMessage) {
  ASSERT_NO_FATAL_FAILURE(Connect(ConnectionOptions{}));
  verbs_.Clear();
  for (uint32_t round = 0; round < 16; ++round) {
    ASSERT_NO_FATAL_FAILURE(RoundTrip(round, 64)) << round;
  }
  std::vector<Call> eight(8, Call::kPostSend);
  eight.push_back(Call::kPostRecv);
  std::vector<Call> expected = eight;
  expected.insert(expected.end(), eight.begin(), eight.end());
  EXPECT_EQ(verbs_.CallsOn(server_->qp()), expected);
  EXPECT_EQ(verbs_.ChainsOn(server_->qp()), (std::vector<uint32_t>{8, 8}));
  // The client's first ping goes before any echo has emptied a slot.
  std::vector<Call> client_calls(9, Call::kPostSend);
  client_calls.push_back(Call::kPostRecv);
  client_calls.insert(client_calls.end(), 7, Call::kPostSend);
  EXPECT_EQ(verbs_.CallsOn(client_->qp()), client_calls);
  EXPECT_EQ(client_->stats().credit_messages_sent, 0u);
  EXPECT_EQ(server_->stats().credit_messages_sent, 0u);
  // The server's last chain is owed until its next message.
  EXPECT_EQ(client_->stats().send_credits, 64u - 8u);
}

// A ring whose credit batch is below 8 (8 slots: batch 4) gathers none:
// the echo's SEND, then the receive the ping emptied.
TEST_F(MessagePathTest, OnARingOfEightTheRepostFollowsEachMessage) {
  ConnectionOptions options;
  options.recv_slots = 8;
  ASSERT_NO_FATAL_FAILURE(Connect(options));
  ASSERT_NO_FATAL_FAILURE(RoundTrip(0, 64));
  EXPECT_EQ(EchoCalls(), (std::vector<Call>{Call::kPostSend, Call::kPostRecv}));
}

// Receives gathering after a message go out before a credit message, which
// carries their credits: the server holds three after three round trips,
// then reads a rendezvous message and reports it in a credit message of
// its own; the client ends with every credit back.
TEST_F(MessagePathTest, ACreditMessageTakesTheGatheredReposts) {
  ASSERT_NO_FATAL_FAILURE(Connect(ConnectionOptions{}));
  ASSERT_TRUE(client_->path().rendezvous);
  for (uint32_t round = 0; round < 3; ++round) {
    ASSERT_NO_FATAL_FAILURE(RoundTrip(round, 64)) << round;
  }
  verbs_.Clear();
  const size_t large = size_t{client_->max_message_size()} + 1;
  std::vector<std::byte> message(large, std::byte{0x5a});
  const Deadline deadline = env().DeadlineIn(std::chrono::seconds(5));
  EnvFuture<absl::Status> sending =
      RunInThread(env(), [&] { return client_->Send(message, deadline); });
  std::vector<std::byte> buffer(large);
  absl::StatusOr<size_t> got = server_->Receive(buffer, deadline);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(*got, large);
  EXPECT_EQ(buffer, message);
  const absl::Status sent = sending.Get();
  ASSERT_TRUE(sent.ok()) << sent;
  EXPECT_EQ(server_->stats().credit_messages_sent, 1u);
  // The three from the round trips and the request's own slot, in one
  // chain, before the credit message.
  EXPECT_EQ(verbs_.ChainsOn(server_->qp()), (std::vector<uint32_t>{4}));
  const std::vector<Call> calls = verbs_.CallsOn(server_->qp());
  ASSERT_FALSE(calls.empty());
  EXPECT_EQ(calls.back(), Call::kPostSend);
  // The report asks for the credit of its slot at once (credit_due_): the
  // client's credit message takes its own three gathered (the echoes'
  // slots) after reposting the report's slot. The client holds every
  // credit but the one that message spent.
  EXPECT_EQ(client_->stats().credit_messages_sent, 1u);
  EXPECT_EQ(verbs_.ChainsOn(client_->qp()), (std::vector<uint32_t>{1, 3}));
  EXPECT_EQ(client_->stats().send_credits, 64u - 1u);
}

// A side that stops receiving does not keep what it gathered: the server
// holds three after three round trips; its next message, with no receive
// since the echo before, posts them after it, and the one after that
// carries their credits, so the client holds every credit again.
TEST_F(MessagePathTest, ASideThatStopsReceivingPostsWhatItGathered) {
  ASSERT_NO_FATAL_FAILURE(Connect(ConnectionOptions{}));
  for (uint32_t round = 0; round < 3; ++round) {
    ASSERT_NO_FATAL_FAILURE(RoundTrip(round, 64)) << round;
  }
  EXPECT_EQ(client_->stats().send_credits, 64u - 3u);
  verbs_.Clear();
  std::vector<std::byte> message(64, std::byte{3});
  std::vector<std::byte> buffer(64);
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(server_->Send(message).ok());
    ASSERT_TRUE(client_->Receive(buffer).ok());
  }
  EXPECT_EQ(
      verbs_.CallsOn(server_->qp()),
      (std::vector<Call>{Call::kPostSend, Call::kPostRecv, Call::kPostSend}));
  EXPECT_EQ(verbs_.ChainsOn(server_->qp()), (std::vector<uint32_t>{3}));
  EXPECT_EQ(client_->stats().send_credits, 64u);
  EXPECT_EQ(server_->stats().credit_messages_sent, 0u);
}

// A credit message's own slot is owed at once, beside reposts still
// gathering: once the two reach the credit batch, they go back in a credit
// message of their own, though neither alone would. On a ring of 10 with a
// batch of 8 (so data needs the peer to hold 3 of 10 credits): the client
// sends 8 (2 credits left), the server 7 (3 left); the client takes the 7
// (held: 7 < 8), the server the 8 (posted, a credit message: 2 left). The
// client sees the credit message (owed 1 + held 7) while it waits for data
// the server cannot send without credit: unless those 8 go back, each side
// waits for the other.
TEST_F(MessagePathTest, ACreditMessageSlotAndHeldRepostsReachTheBatch) {
  ConnectionOptions options;
  options.recv_slots = 10;
  options.credit_batch = 8;
  ASSERT_NO_FATAL_FAILURE(Connect(options));
  const Deadline deadline = fabric_.env().DeadlineIn(std::chrono::seconds(1));
  std::vector<std::byte> message(64, std::byte{5});
  std::vector<std::byte> buffer(64);
  for (int i = 0; i < 8; ++i) {
    absl::Status sent = client_->Send(message, deadline);
    ASSERT_TRUE(sent.ok()) << i << ": " << sent;
  }
  for (int i = 0; i < 7; ++i) {
    absl::Status sent = server_->Send(message, deadline);
    ASSERT_TRUE(sent.ok()) << i << ": " << sent;
  }
  for (int i = 0; i < 7; ++i) {
    ASSERT_TRUE(client_->Receive(buffer, deadline).ok()) << i;
  }
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(server_->Receive(buffer, deadline).ok()) << i;
  }
  EXPECT_EQ(server_->stats().credit_messages_sent, 1u);
  ASSERT_EQ(server_->stats().send_credits, 2u);
  // The client finds the credit message and nothing to receive.
  const absl::StatusOr<size_t> none = client_->Receive(
      buffer, fabric_.env().DeadlineIn(std::chrono::milliseconds(1)));
  EXPECT_TRUE(absl::IsDeadlineExceeded(none.status())) << none.status();
  EXPECT_EQ(client_->stats().credit_messages_sent, 1u);
  const absl::Status sent = server_->Send(message, deadline);
  ASSERT_TRUE(sent.ok()) << sent << " (the server holds "
                         << server_->stats().send_credits << " credits)";
  ASSERT_TRUE(client_->Receive(buffer, deadline).ok());
}

// The smallest ring: the repost first; the echo carries its credit.
TEST_F(MessagePathTest, OnTheSmallestRingTheRepostGoesFirst) {
  ConnectionOptions options;
  options.recv_slots = kMinRecvSlots;
  ASSERT_NO_FATAL_FAILURE(Connect(options));
  ASSERT_NO_FATAL_FAILURE(RoundTrip(0, 64));
  EXPECT_EQ(EchoCalls(), (std::vector<Call>{Call::kPostRecv, Call::kPostSend}));
}

// A long ping-pong from one thread keeps going on the credits the messages
// carry, on the smallest ring (4 slots, credits returned from 2 owed: the
// reposts go first), on 6 and 8 (the smallest where they follow the
// message: their credits a message late) and on the default ring: no credit
// message, no wait, every byte right.
class MessagePathRingTest : public MessagePathTest,
                            public ::testing::WithParamInterface<uint32_t> {};

TEST_P(MessagePathRingTest, APingPongNeedsNoCreditMessage) {
  ConnectionOptions options;
  options.recv_slots = GetParam();
  options.send_slots = 2;
  ASSERT_NO_FATAL_FAILURE(Connect(options));
  for (uint32_t round = 0; round < 1000; ++round) {
    ASSERT_NO_FATAL_FAILURE(RoundTrip(round, 1 + round % 200)) << round;
  }
  EXPECT_EQ(client_->stats().credit_messages_sent, 0u);
  EXPECT_EQ(server_->stats().credit_messages_sent, 0u);
  EXPECT_EQ(client_->stats().messages_received, 1000u);
  EXPECT_EQ(server_->stats().messages_received, 1000u);
}

INSTANTIATE_TEST_SUITE_P(Rings, MessagePathRingTest,
                         ::testing::Values(kMinRecvSlots, 5u, 6u, 8u, 64u));

}  // namespace
}  // namespace rdma_transport
