#include "transport/biased_mutex.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace rdma_transport {

// Replays what a stale owner does: the thread that read its token just
// before a revocation and runs its EnterBiased() only afterwards.
class BiasedMutexTestPeer {
 public:
  static uintptr_t Owner(const BiasedMutex& mu) {
    return mu.owner_.load(std::memory_order_acquire);
  }
  static uint32_t Busy(const BiasedMutex& mu, int bias) {
    return mu.busy_[bias].load(std::memory_order_acquire);
  }
  static bool EnterBiased(BiasedMutex& mu, uintptr_t stale_owner) {
    return mu.EnterBiased(stale_owner);
  }
};

namespace {

using State = BiasedMutex::State;

// The tests of the bias itself need membarrier (valgrind, old kernels and
// some seccomp profiles lack it; then every BiasedMutex is a FutexMutex,
// which the last tests cover).
#define SKIP_WITHOUT_BIASING()                                   \
  if (!BiasedMutex::BiasingAvailable()) {                        \
    GTEST_SKIP() << "membarrier(PRIVATE_EXPEDITED) unavailable"; \
  }

void LockAndUnlockOn(BiasedMutex& mu, bool* biased_there) {
  std::thread other([&] {
    { std::unique_lock<BiasedMutex> lock(mu); }
    *biased_there = mu.biased_to_this_thread();
  });
  other.join();
}

TEST(BiasedMutexTest, TheFirstThreadToTakeItOwnsTheBias) {
  SKIP_WITHOUT_BIASING();
  BiasedMutex mu;
  EXPECT_EQ(mu.state(), State::kUnowned);
  EXPECT_FALSE(mu.biased_to_this_thread());
  for (int i = 0; i < 3; ++i) {
    std::unique_lock<BiasedMutex> lock(mu);
    EXPECT_EQ(mu.state(), State::kBiased);
    EXPECT_TRUE(mu.biased_to_this_thread());
  }
}

TEST(BiasedMutexTest, TryLockFailsWhileHeldAndSucceedsOnceReleased) {
  SKIP_WITHOUT_BIASING();
  BiasedMutex mu;
  ASSERT_TRUE(mu.try_lock());  // takes the bias
  EXPECT_TRUE(mu.biased_to_this_thread());
  EXPECT_FALSE(mu.try_lock());
  mu.unlock();
  EXPECT_TRUE(mu.try_lock());
  EXPECT_FALSE(mu.try_lock());
  mu.unlock();
}

// Accepted on one thread, used on another: the bias moves once, and the
// new owner keeps it.
TEST(BiasedMutexTest, TheFirstRevocationMovesTheBiasToTheRevoker) {
  SKIP_WITHOUT_BIASING();
  BiasedMutex mu;
  { std::unique_lock<BiasedMutex> lock(mu); }
  ASSERT_TRUE(mu.biased_to_this_thread());
  bool biased_there = false;
  LockAndUnlockOn(mu, &biased_there);
  EXPECT_TRUE(biased_there);
  EXPECT_FALSE(mu.biased_to_this_thread());
  EXPECT_EQ(mu.state(), State::kBiased);
}

// Two threads really share it: after the second revocation it is a
// FutexMutex for good, and nobody owns a bias.
TEST(BiasedMutexTest, TheSecondRevocationEndsBiasingForGood) {
  SKIP_WITHOUT_BIASING();
  BiasedMutex mu;
  { std::unique_lock<BiasedMutex> lock(mu); }
  bool biased_there = false;
  LockAndUnlockOn(mu, &biased_there);
  ASSERT_TRUE(biased_there);
  { std::unique_lock<BiasedMutex> lock(mu); }  // revokes the other's
  EXPECT_EQ(mu.state(), State::kRevoked);
  EXPECT_FALSE(mu.biased_to_this_thread());
  LockAndUnlockOn(mu, &biased_there);
  EXPECT_FALSE(biased_there);
  EXPECT_EQ(mu.state(), State::kRevoked);
}

TEST(BiasedMutexTest, TryLockDoesNotRevokeAnotherThreadsBias) {
  SKIP_WITHOUT_BIASING();
  BiasedMutex mu;
  { std::unique_lock<BiasedMutex> lock(mu); }
  bool took = true;
  std::thread other([&] { took = mu.try_lock(); });
  other.join();
  EXPECT_FALSE(took);
  EXPECT_TRUE(mu.biased_to_this_thread());
}

// The revoker finds the owner inside: it must wait for the unlock (and be
// woken by it), however long the owner stays.
TEST(BiasedMutexTest, ARevokerWaitsForTheOwnerInsideToLeave) {
  SKIP_WITHOUT_BIASING();
  BiasedMutex mu;
  int guarded = 0;
  mu.lock();
  ASSERT_TRUE(mu.biased_to_this_thread());
  std::atomic<bool> started{false};
  std::atomic<bool> acquired{false};
  int seen = -1;
  std::thread other([&] {
    started = true;
    std::unique_lock<BiasedMutex> lock(mu);
    acquired = true;
    seen = guarded;
  });
  while (!started.load()) std::this_thread::yield();
  // Time for the revocation to run into us (it cannot pass while we are
  // inside, however long we wait: no check here depends on this pause).
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(acquired.load());
  guarded = 42;
  mu.unlock();
  other.join();
  EXPECT_TRUE(acquired.load());
  EXPECT_EQ(seen, 42);
  EXPECT_FALSE(mu.biased_to_this_thread());
}

// The same for the second revocation: the second owner is inside (its own
// word), and the revoker makes the mutex a FutexMutex only after it left.
TEST(BiasedMutexTest, TheSecondRevokerWaitsForTheSecondOwnerInsideToLeave) {
  SKIP_WITHOUT_BIASING();
  BiasedMutex mu;
  { std::unique_lock<BiasedMutex> lock(mu); }  // bias 1: ours
  int guarded = 0;
  std::atomic<bool> inside{false};
  std::atomic<bool> leave{false};
  std::thread second_owner([&] {
    std::unique_lock<BiasedMutex> lock(mu);  // revokes ours: bias 2
    inside = true;
    while (!leave.load()) std::this_thread::yield();
    guarded = 42;
  });
  while (!inside.load()) std::this_thread::yield();
  ASSERT_EQ(mu.state(), State::kBiased);
  std::atomic<bool> acquired{false};
  int seen = -1;
  std::thread revoker([&] {
    std::unique_lock<BiasedMutex> lock(mu);  // the second revocation
    acquired = true;
    seen = guarded;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(acquired.load());
  leave = true;
  second_owner.join();
  revoker.join();
  EXPECT_TRUE(acquired.load());
  EXPECT_EQ(seen, 42);
  EXPECT_EQ(mu.state(), State::kRevoked);
}

// A first owner that loaded its token before the first revocation and
// enters only while the second owner is inside must back off, and touch
// only its own word; so must the second owner's late entry after the
// second revocation. The mutex excludes throughout.
TEST(BiasedMutexTest, AStaleOwnersLateEntryBacksOffAndLeavesTheOthersWord) {
  SKIP_WITHOUT_BIASING();
  using Peer = BiasedMutexTestPeer;
  BiasedMutex mu;
  { std::unique_lock<BiasedMutex> lock(mu); }
  const uintptr_t first = Peer::Owner(mu);  // our token: bias 1
  std::atomic<bool> inside{false};
  std::atomic<bool> leave{false};
  uintptr_t second = 0;
  std::thread second_owner([&] {
    std::unique_lock<BiasedMutex> lock(mu);  // revokes ours
    second = Peer::Owner(mu);
    inside = true;
    while (!leave.load()) std::this_thread::yield();
  });
  while (!inside.load()) std::this_thread::yield();
  ASSERT_NE(second, first);
  EXPECT_EQ(Peer::Busy(mu, 1), 1u);  // the second owner is inside
  EXPECT_FALSE(Peer::EnterBiased(mu, first));
  EXPECT_EQ(Peer::Busy(mu, 0), 0u);
  EXPECT_EQ(Peer::Busy(mu, 1), 1u);  // untouched by the stale owner
  leave = true;
  second_owner.join();

  { std::unique_lock<BiasedMutex> lock(mu); }  // the second revocation
  ASSERT_EQ(mu.state(), State::kRevoked);
  EXPECT_FALSE(Peer::EnterBiased(mu, second));
  EXPECT_FALSE(Peer::EnterBiased(mu, first));
  EXPECT_EQ(Peer::Busy(mu, 0), 0u);
  EXPECT_EQ(Peer::Busy(mu, 1), 0u);
  // Still a mutex: a FutexMutex from here on.
  ASSERT_TRUE(mu.try_lock());
  bool other_got_it = true;
  std::thread other([&] { other_got_it = mu.try_lock(); });
  other.join();
  EXPECT_FALSE(other_got_it);
  mu.unlock();
}

TEST(BiasedMutexDeathTest, TheOwnerLockingItAgainAborts) {
  SKIP_WITHOUT_BIASING();
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        BiasedMutex mu;
        mu.lock();
        mu.lock();
      },
      "locked again by the thread that holds it");
}

// A connection's setup thread locks without the bias; the user's thread,
// which waits for it while it is held, then takes the bias (no
// revocation, nothing left for a later one to spend).
TEST(BiasedMutexTest, LockingWithoutBiasLeavesTheBiasForTheNextThread) {
  SKIP_WITHOUT_BIASING();
  BiasedMutex mu;
  mu.LockWithoutBias();
  EXPECT_EQ(mu.state(), State::kUnowned);
  int guarded = 0;
  std::atomic<bool> started{false};
  std::atomic<bool> acquired{false};
  bool tried = true;
  bool biased_there = false;
  int seen = -1;
  std::thread user([&] {
    tried = mu.try_lock();  // held: fails, and claims nothing
    started = true;
    std::unique_lock<BiasedMutex> lock(mu);
    acquired = true;
    seen = guarded;
    biased_there = mu.biased_to_this_thread();
  });
  while (!started.load()) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(acquired.load());
  guarded = 7;
  mu.unlock();
  user.join();
  EXPECT_FALSE(tried);
  EXPECT_EQ(seen, 7);
  EXPECT_TRUE(biased_there);
  EXPECT_EQ(mu.state(), State::kBiased);
  // Once owned, locking without bias is an ordinary lock(): ours revokes.
  mu.LockWithoutBias();
  EXPECT_TRUE(mu.biased_to_this_thread());
  mu.unlock();
}

// Every transition raced from every side, on fresh mutexes: the claim of
// an unowned bias, the first revocation (owner inside, leaving, backing
// off) and the second. An increment of a plain counter only adds up if
// the mutex excluded the others in every one of them (and TSan sees the
// order).
TEST(BiasedMutexTest, ThreadsRacingThroughEveryRevocationLoseNothing) {
  constexpr int kRounds = 300;
  constexpr int kThreads = 3;
  constexpr int kIncrements = 200;
  for (int round = 0; round < kRounds; ++round) {
    BiasedMutex mu;
    long counter = 0;
    std::atomic<int> ready{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        ready.fetch_add(1);
        while (ready.load() < kThreads) {
        }
        for (int i = 0; i < kIncrements; ++i) {
          if ((i + t) % 3 == 0) {
            while (!mu.try_lock()) {
              // try_lock never revokes: give lock() its turn now and then.
              if (i % 2 == 0) {
                mu.lock();
                break;
              }
              std::this_thread::yield();
            }
          } else if ((i + t) % 7 == 0) {
            mu.LockWithoutBias();
          } else {
            mu.lock();
          }
          ++counter;
          if (i % 64 == t) std::this_thread::yield();  // inside, descheduled
          mu.unlock();
        }
      });
    }
    for (std::thread& thread : threads) thread.join();
    ASSERT_EQ(counter, long{kThreads} * kIncrements) << "round " << round;
  }
}

// The Connection waits on a std::condition_variable_any with it: a value
// handed back and forth must never be lost or seen twice, whichever way
// the bias went.
TEST(BiasedMutexTest, WorksWithConditionVariableAny) {
  constexpr int kHandoffs = 2000;
  BiasedMutex mu;
  std::condition_variable_any cv;
  int turn = 0;  // even: the main thread's, odd: the other's
  std::thread other([&] {
    for (int i = 0; i < kHandoffs; ++i) {
      std::unique_lock<BiasedMutex> lock(mu);
      cv.wait(lock, [&] { return turn % 2 == 1; });
      ++turn;
      cv.notify_all();
    }
  });
  for (int i = 0; i < kHandoffs; ++i) {
    std::unique_lock<BiasedMutex> lock(mu);
    cv.wait(lock, [&] { return turn % 2 == 0; });
    ++turn;
    cv.notify_all();
  }
  other.join();
  EXPECT_EQ(turn, 2 * kHandoffs);
}

TEST(BiasedMutexTest, WithoutBiasItIsAFutexMutexFromTheStart) {
  BiasedMutex mu(/*allow_bias=*/false);
  EXPECT_EQ(mu.state(), State::kRevoked);
  ASSERT_TRUE(mu.try_lock());
  EXPECT_FALSE(mu.biased_to_this_thread());
  EXPECT_FALSE(mu.try_lock());
  mu.unlock();
  long counter = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        std::unique_lock<BiasedMutex> lock(mu);
        ++counter;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(counter, 20000);
  EXPECT_EQ(mu.state(), State::kRevoked);
}

}  // namespace
}  // namespace rdma_transport
