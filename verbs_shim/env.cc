#include "verbs_shim/env.h"

#include <poll.h>
#include <sched.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <thread>

namespace rdma_transport {
namespace {

// poll(2)'s timeout for `wake`: milliseconds left, rounded up, -1 forever.
int TimeoutMs(Deadline wake) {
  if (wake == kNoDeadline) return -1;
  const Clock::duration left = wake - Clock::now();
  if (left <= Clock::duration::zero()) return 0;
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  return ms > INT_MAX ? INT_MAX : static_cast<int>(ms);
}

class RealEnv final : public Env {
 public:
  Deadline Now() override { return Clock::now(); }

  int Wait(uint64_t /*token*/, std::span<pollfd> fds, Deadline wake,
           WaitKind kind) override {
    if (!OnClockOf(wake, Clock::time_point())) [[unlikely]] {
      std::fprintf(stderr,
                   "rdma_transport: Env::Real().Wait() was given a wake time "
                   "on a simulated fabric's virtual clock, which the real "
                   "clock would not reach in 146 years; take it from the Env "
                   "it is given to (env.DeadlineIn())\n");
      std::abort();
    }
    if (kind != WaitKind::kBlock) {
      int ready = 0;
      if (!fds.empty()) ready = PollOnce(fds, 0);
      if (ready == 0 && kind == WaitKind::kSpin) sched_yield();
      return ready;
    }
    if (fds.empty()) {
      if (wake != kNoDeadline) std::this_thread::sleep_until(wake);
      return 0;
    }
    while (true) {
      int ready = PollOnce(fds, TimeoutMs(wake));
      if (ready != 0 || Clock::now() >= wake) return ready;
    }
  }

 private:
  static int PollOnce(std::span<pollfd> fds, int timeout_ms) {
    for (pollfd& fd : fds) fd.revents = 0;
    int ready = poll(fds.data(), fds.size(), timeout_ms);
    if (ready >= 0) return ready;
    if (errno == EINTR) return 0;
    for (pollfd& fd : fds) fd.revents = POLLERR;
    return static_cast<int>(fds.size());
  }
};

}  // namespace

Env& Env::Real() {
  static RealEnv* env = new RealEnv();
  return *env;
}

void Env::SleepUntil(Deadline deadline) {
  while (Now() < deadline) {
    const uint64_t token = PrepareWait();
    Wait(token, {}, deadline, WaitKind::kBlock);
  }
}

Deadline Env::DeadlineIn(Clock::duration timeout) {
  const Deadline now = Now();
  if (timeout >= kNoDeadline - now) return kNoDeadline;
  return now + timeout;
}

}  // namespace rdma_transport
