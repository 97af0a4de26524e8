// The code examples in the comments of verbs_shim/'s public headers, each
// spliced in at its `// header-example: HEADER N` line (header_examples.py):
// they compile as written, and run on the simulator or against the mock.
#include <errno.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sim/fabric.h"
#include "sim/sim_verbs.h"
#include "verbs_shim/env.h"
#include "verbs_shim/env_thread.h"
#include "verbs_shim/mock_verbs.h"
#include "verbs_shim/verbs.h"
#include "verbs_shim/verbs_error.h"
#include "verbs_shim/verbs_wrapper.h"

namespace rdma_transport {
namespace {

using ::testing::_;
using ::testing::Field;
using ::testing::Return;

// header-example: verbs_shim/verbs_wrapper.h 1

absl::Status EnvExample(Verbs& verbs, int fd,
                        const std::function<bool()>& work_available) {
  // header-example: verbs_shim/env.h 1
  return absl::OkStatus();
}

// What the RunInThread example runs: a server that serves one request (a
// wait of 5 ms, virtual on the simulator) and a client.
struct Listener {
  Env& env;
  int served = 0;
};
absl::Status ServeOne(Listener& listener) {
  listener.env.SleepUntil(
      listener.env.DeadlineIn(std::chrono::milliseconds(5)));
  ++listener.served;
  return absl::OkStatus();
}
absl::Status RunClient() { return absl::OkStatus(); }

absl::Status EnvThreadExample(Env& env, Listener* listener) {
  // header-example: verbs_shim/env_thread.h 1
  if (!client.ok()) return client;
  return served;
}

absl::Status VerbsErrorExample() {
  errno = EINVAL;
  // header-example: verbs_shim/verbs_error.h 1
}

[[maybe_unused]] void AskForLess(const absl::Status& status) {
  // header-example: verbs_shim/verbs_error.h 2
}

TEST(VerbsShimHeaderExamples, EnvWaitsUntilItsDeadlineOnTheSimulator) {
  sim::Fabric fabric;
  sim::SimVerbs verbs(&fabric);
  const int fd = eventfd(0, EFD_NONBLOCK);
  ASSERT_GE(fd, 0);
  const Deadline start = fabric.env().Now();
  absl::Status waited = EnvExample(verbs, fd, [] { return false; });
  EXPECT_EQ(waited.code(), absl::StatusCode::kDeadlineExceeded) << waited;
  EXPECT_EQ(fabric.env().Now() - start, std::chrono::seconds(1));
  // The fd readable wakes the wait; work there ends the loop, at once.
  const uint64_t one = 1;
  ASSERT_EQ(write(fd, &one, sizeof one), static_cast<ssize_t>(sizeof one));
  int looks = 0;
  const Deadline woken = fabric.env().Now();
  EXPECT_TRUE(EnvExample(verbs, fd, [&] { return ++looks > 2; }).ok());
  EXPECT_EQ(fabric.env().Now(), woken);
  close(fd);
}

TEST(VerbsShimHeaderExamples, RunInThreadTakesPartInVirtualTime) {
  sim::Fabric fabric;
  Listener listener{fabric.env()};
  const Deadline start = fabric.env().Now();
  EXPECT_TRUE(EnvThreadExample(fabric.env(), &listener).ok());
  EXPECT_EQ(listener.served, 1);
  EXPECT_EQ(fabric.env().Now() - start, std::chrono::milliseconds(5));
}

TEST(VerbsShimHeaderExamples, MockVerbsRefusesAsTheDeviceWould) {
  MockVerbs verbs;
  ibv_pd* pd = reinterpret_cast<ibv_pd*>(0x1000);
  // header-example: verbs_shim/mock_verbs.h 1
  ibv_qp_init_attr attr = {};
  attr.cap.max_inline_data = 236;
  absl::StatusOr<ibv_qp*> qp = verbs.CreateQp(pd, &attr);
  EXPECT_EQ(VerbsErrno(qp.status()), EINVAL);
}

TEST(VerbsShimHeaderExamples, AWrapperRefusesRegistration) {
  sim::Fabric fabric;
  sim::SimVerbs sim(&fabric);
  RefuseRegMr verbs(&sim);
  char buffer[64];
  absl::StatusOr<ibv_mr*> mr = verbs.RegMr(nullptr, buffer, sizeof buffer, 0);
  EXPECT_EQ(VerbsErrno(mr.status()), ENOMEM);
}

TEST(VerbsShimHeaderExamples, VerbsErrorKeepsTheErrno) {
  absl::Status status = VerbsErrorExample();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "ibv_create_qp failed: Invalid argument (errno 22)");
  EXPECT_EQ(VerbsErrno(status), EINVAL);
}

}  // namespace
}  // namespace rdma_transport
