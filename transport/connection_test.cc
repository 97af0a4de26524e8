// Connection behaviour that needs a misbehaving provider: a Verbs wrapper
// (LevelDB's SpecialEnv, for verbs) over the simulator that swallows send
// completions, as Soft-RoCE in Linux 6.1 does when the peer's QP is gone (it
// retransmits forever instead of completing with IBV_WC_RETRY_EXC_ERR).
#include "transport/connection.h"

#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sim/fabric.h"
#include "sim/sim_verbs.h"
#include "tests/connection_pair.h"
#include "tests/connection_test_peer.h"
#include "tests/sim_pair_fixture.h"
#include "tests/swallow_send_completions.h"
#include "transport/biased_mutex.h"
#include "transport/listener.h"
#include "verbs_shim/env_thread.h"
#include "verbs_shim/verbs_wrapper.h"

namespace rdma_transport {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::HasSubstr;

// Every time below is virtual (the fabric's clock), so exact: the
// transport's timers fire when the SimEnv moves the clock to them.
class ConnectionTest : public SimPairTest<SwallowSendCompletions> {};

// The probe's own wire time on the simulated link: a few microseconds.
constexpr auto kWireSlack = std::chrono::microseconds(20);

// kSerialized: a call that finds another inside (here the test holds the
// lock as that call would) aborts, naming the broken promise; the
// connection's own calls, one at a time, carry messages as ever.
TEST_F(ConnectionTest, ASerializedConnectionAbortsACallThatOverlapsAnother) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ConnectionOptions options;
  options.thread_mode = ThreadMode::kSerialized;
  ASSERT_NO_FATAL_FAILURE(Connect(options));
  EXPECT_DEATH(
      {
        std::unique_lock<ConnectionLock> inside(
            ConnectionTestPeer::Lock(*client_));
        (void)client_->stats();
      },
      "two calls at once on a connection made with ThreadMode::kSerialized");
  const std::vector<std::byte> message(64, std::byte{9});
  ASSERT_TRUE(client_->Send(message).ok());
  std::vector<std::byte> buffer(64);
  absl::StatusOr<size_t> n = server_->Receive(buffer);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(buffer, message);
}

// kShared: the thread that dialled owns the lock's bias; a sending thread
// takes it over (the first revocation), and the main thread's stats() then
// makes it a plain FutexMutex for good (the second). Every message crosses
// each of those hand-overs intact and in order.
TEST_F(ConnectionTest, ASharedConnectionsLockMovesItsBiasOnceThenIsShared) {
  ASSERT_NO_FATAL_FAILURE(Connect(ConnectionOptions{}));
  const BiasedMutex& lock = ConnectionTestPeer::Lock(*client_).shared();
  if (!BiasedMutex::BiasingAvailable()) {
    GTEST_SKIP() << "membarrier(PRIVATE_EXPEDITED) unavailable";
  }
  std::vector<std::byte> buffer(64);
  ASSERT_TRUE(client_->Send(std::as_bytes(std::span("first", 5))).ok());
  ASSERT_TRUE(server_->Receive(buffer).ok());
  EXPECT_TRUE(lock.biased_to_this_thread());

  constexpr int kMessages = 200;
  // Whether the bias moved to the sending thread; the first failed send.
  EnvFuture<absl::StatusOr<bool>> sender =
      RunInThread(env(), [&]() -> absl::StatusOr<bool> {
        for (int i = 0; i < kMessages; ++i) {
          const uint32_t value = i;
          absl::Status sent =
              client_->Send(std::as_bytes(std::span(&value, 1)));
          if (!sent.ok()) return sent;
        }
        return lock.biased_to_this_thread();
      });
  for (int i = 0; i < kMessages; ++i) {
    absl::StatusOr<size_t> n = server_->Receive(buffer);
    ASSERT_TRUE(n.ok()) << n.status();
    ASSERT_EQ(*n, sizeof(uint32_t));
    uint32_t value = 0;
    std::memcpy(&value, buffer.data(), sizeof value);
    EXPECT_EQ(value, static_cast<uint32_t>(i));
  }
  absl::StatusOr<bool> moved = sender.Get();
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_TRUE(*moved);
  EXPECT_EQ(lock.state(), BiasedMutex::State::kBiased);
  EXPECT_FALSE(lock.biased_to_this_thread());

  EXPECT_EQ(client_->stats().messages_sent, uint64_t{kMessages} + 1);
  EXPECT_EQ(lock.state(), BiasedMutex::State::kRevoked);
  ASSERT_TRUE(client_->Send(std::as_bytes(std::span("last", 4))).ok());
  absl::StatusOr<size_t> n = server_->Receive(buffer);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 4u);
}

TEST_F(ConnectionTest, APeerThatNeverAnswersIsDeclaredGone) {
  ConnectionOptions options;
  options.completion_timeout = milliseconds(200);
  ASSERT_NO_FATAL_FAILURE(Connect(options));
  EXPECT_TRUE(client_->stats().watchdog_armed);
  ASSERT_TRUE(client_->Check(env().DeadlineIn(seconds(5))).ok());
  verbs_.swallow = true;
  const Deadline start = env().Now();
  absl::Status status = client_->Check();  // no deadline: must still end
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_THAT(status.message(), HasSubstr("no completion for"));
  // The budget (200 ms, plus 1 byte at the 1 MiB/s floor) and the 1 ms the
  // wait sleeps past it.
  const auto elapsed = env().Now() - start;
  EXPECT_GE(elapsed, milliseconds(201));
  EXPECT_LT(elapsed, milliseconds(201) + kWireSlack);
  EXPECT_EQ(client_->Send(std::as_bytes(std::span("x", 1))), status);
}

TEST_F(ConnectionTest, AnIdleReceiveEndsWhenTheKeepaliveIsNeverAnswered) {
  ConnectionOptions options;
  options.completion_timeout = milliseconds(200);
  options.keepalive_interval = milliseconds(50);
  options.progress = ProgressMode::kEvent;
  ASSERT_NO_FATAL_FAILURE(Connect(options));
  verbs_.swallow = true;
  const Deadline start = env().Now();
  std::vector<std::byte> buffer(64);
  absl::StatusOr<size_t> n = client_->Receive(buffer);  // no deadline
  EXPECT_EQ(n.status().code(), absl::StatusCode::kUnavailable) << n.status();
  EXPECT_EQ(client_->stats().keepalives, 1u);
  // The probe at 50 ms, then the watchdog's 201 ms.
  const auto elapsed = env().Now() - start;
  EXPECT_GE(elapsed, milliseconds(251));
  EXPECT_LT(elapsed, milliseconds(251) + kWireSlack);
}

TEST_F(ConnectionTest, TheDefaultWatchdogIsArmedOnSoftRoceOnly) {
  ConnectionOptions options;
  ASSERT_NO_FATAL_FAILURE(Connect(options, "cx7"));
  EXPECT_FALSE(client_->stats().watchdog_armed);
  EXPECT_FALSE(server_->stats().watchdog_armed);
}

TEST_F(ConnectionTest, ANegativeCompletionTimeoutNeverArmsTheWatchdog) {
  ConnectionOptions options;
  options.completion_timeout = milliseconds(-1);
  ASSERT_NO_FATAL_FAILURE(Connect(options, "rxe"));
  EXPECT_FALSE(client_->stats().watchdog_armed);
}

TEST_F(ConnectionTest, TheDefaultWatchdogIsFourRetryBudgetsAtLeastTwoSeconds) {
  // On Soft-RoCE: 4.096 us * 2^14 * 8 = 0.537 s; four of them: 2.147 s.
  ConnectionOptions options;
  ASSERT_NO_FATAL_FAILURE(Connect(options, "rxe"));
  EXPECT_TRUE(client_->stats().watchdog_armed);
  verbs_.swallow = true;
  const Deadline start = env().Now();
  EXPECT_EQ(client_->Check().code(), absl::StatusCode::kUnavailable);
  const auto elapsed = env().Now() - start;
  const auto budget = 4 * std::chrono::nanoseconds(4096ll * (1 << 14) * 8);
  EXPECT_GE(elapsed, budget + milliseconds(1));
  EXPECT_LT(elapsed, budget + milliseconds(1) + kWireSlack);
}

}  // namespace
}  // namespace rdma_transport
