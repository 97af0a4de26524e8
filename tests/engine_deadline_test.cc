// Per-operation deadlines of asynchronous operations (transport/engine.h,
// "Deadlines") on the simulator in kManual mode, in virtual time: an op
// not ended by its batch's deadline fails its connection with
// kDeadlineExceeded and every op in flight on it ends (WRITEs
// OUTCOME_UNKNOWN, READs FAILED); ops that end in time and other
// connections are untouched; an overdue op is noticed in Wait() at its
// deadline and within a bounded number of Progress() calls in a busy loop.
#include <chrono>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "sim/fabric.h"
#include "sim/fault_injector.h"
#include "tests/engine_fixture.h"
#include "transport/connection.h"
#include "transport/engine.h"

namespace rdma_transport {
namespace {

using std::chrono::milliseconds;

class EngineDeadlineTest : public EngineTest {
 protected:
  EngineDeadlineTest() : EngineTest(sim::ProgressMode::kManual) {}

  void TearDown() override {
    clients_.clear();  // no op in flight may outlive its memory
    lanes_.clear();    // the regions before their contexts
    EngineTest::TearDown();
  }

  void SetUpLanes(size_t n, size_t ops) {
    lanes_.resize(n);
    for (size_t l = 0; l < n; ++l) {
      Lane& lane = lanes_[l];
      lane.source.resize(ops * kOpSpan);
      for (size_t i = 0; i < lane.source.size(); ++i) {
        lane.source[i] = static_cast<std::byte>((i * 5 + l * 17 + 7) & 0xff);
      }
      lane.target.assign(ops * kOpSpan, std::byte{0});
      lane.readback.assign(ops * kOpSpan, std::byte{0});
      lane.source_mr = Register(0, lane.source, kLocalOnly);
      lane.target_mr = Register(1, lane.target, kRemoteRead | kRemoteWrite);
      lane.readback_mr = Register(0, lane.readback, kLocalWrite);
    }
  }

  // Posts ops [first, first + count) of lane `l` as one batch.
  OpHandle Post(size_t l, size_t first, size_t count, bool write,
                Deadline deadline) {
    Lane& lane = lanes_[l];
    std::vector<RdmaOp> batch;
    for (size_t op = first; op < first + count; ++op) {
      batch.push_back({write ? &lane.source_mr : &lane.readback_mr,
                       op * kOpSpan, OpLength(l, op), lane.target_mr.remote(),
                       op * kOpSpan});
    }
    absl::StatusOr<OpHandle> handle =
        write ? clients_[l]->PostWrite(batch, deadline)
              : clients_[l]->PostRead(batch, deadline);
    EXPECT_TRUE(handle.ok()) << handle.status();
    for (size_t k = 0; k < count && handle.ok(); ++k) {
      lane_of_[*handle + k] = l;
    }
    return handle.ok() ? *handle : 0;
  }

  // The peer of lane `l` stops answering: every packet to its QP is lost.
  void Silence(size_t l) {
    ASSERT_TRUE(
        fabric_->faults()
            .DropPackets(sim::FaultTarget::Qp(servers_[l]->qp()->qp_num),
                         1 << 30)
            .ok());
  }

  // Each op's completion and when (virtual) it was taken.
  struct Ended {
    Completion completion;
    Deadline at;
  };
  void Take(const Completion& c) {
    ASSERT_TRUE(ended_.emplace(c.handle, Ended{c, env().Now()}).second)
        << "handle " << c.handle << " ended twice";
  }
  void DriveAll() {
    ASSERT_NO_FATAL_FAILURE(
        Drive([&] { return ended_.size() == lane_of_.size(); },
              [&](const Completion& c) { Take(c); }));
  }

  std::vector<Lane> lanes_;
  std::map<OpHandle, size_t> lane_of_;
  std::map<OpHandle, Ended> ended_;
};

TEST_F(EngineDeadlineTest, AnOverdueOpFailsItsConnectionAndEndsAllItsOps) {
  ASSERT_NO_FATAL_FAILURE(ConnectPairs(2));
  SetUpLanes(2, 16);
  ASSERT_NO_FATAL_FAILURE(Silence(0));
  const Deadline start = env().Now();
  const Deadline soon = start + milliseconds(10);
  // Lane 0: a batch without a deadline, one due soon, one due later: the
  // one due soon is the one reported, and all three end.
  Post(0, 0, 4, true, kNoDeadline);
  const OpHandle overdue = Post(0, 4, 4, false, soon);
  Post(0, 8, 4, true, start + milliseconds(50));
  // Lane 1 is healthy, with the same tight deadline: it completes in time.
  Post(1, 0, 8, true, soon);
  Post(1, 0, 8, false, soon);
  ASSERT_NO_FATAL_FAILURE(DriveAll());

  const std::string named = absl::StrCat("handle ", overdue, ",");
  size_t unknown = 0, failed = 0;
  for (const auto& [handle, e] : ended_) {
    const Completion& c = e.completion;
    if (lane_of_.at(handle) == 1) {
      ASSERT_EQ(c.outcome, OpOutcome::kCompleted) << c.status;
      EXPECT_LT(e.at, soon);
      continue;
    }
    EXPECT_EQ(c.status.code(), absl::StatusCode::kDeadlineExceeded) << c.status;
    EXPECT_NE(c.status.message().find(named), std::string::npos) << c.status;
    // Ended at the deadline (Wait() woke up for it), not at the retry
    // budget's end (~0.54 s).
    EXPECT_GE(e.at, soon);
    EXPECT_LE(e.at, soon + milliseconds(1));
    if (c.is_write) {
      EXPECT_EQ(c.outcome, OpOutcome::kOutcomeUnknown);
      ++unknown;
    } else {
      EXPECT_EQ(c.outcome, OpOutcome::kFailed);
      ++failed;
    }
  }
  EXPECT_EQ(unknown, 8u);
  EXPECT_EQ(failed, 4u);
  EXPECT_EQ(clients_[0]->async_ops_in_flight(), 0u);
  EXPECT_EQ(clients_[0]->status().code(), absl::StatusCode::kDeadlineExceeded);
  RdmaOp again = {&lanes_[0].source_mr, 0, 1, lanes_[0].target_mr.remote(), 0};
  EXPECT_EQ(clients_[0]->PostWrite({&again, 1}).status().code(),
            absl::StatusCode::kDeadlineExceeded);

  // Lane 1: its deadlines passed after its ops ended, which is no failure,
  // and it goes on working.
  const Deadline later = env().DeadlineIn(milliseconds(100));
  while (env().Now() < later) (void)engine_->Wait(later);
  EXPECT_EQ(engine_->completions_ready(), 0u);
  EXPECT_TRUE(clients_[1]->status().ok()) << clients_[1]->status();
  Post(1, 8, 8, true, env().DeadlineIn(milliseconds(10)));
  ASSERT_NO_FATAL_FAILURE(DriveAll());
  for (const auto& [handle, e] : ended_) {
    if (lane_of_.at(handle) == 1) {
      ASSERT_EQ(e.completion.outcome, OpOutcome::kCompleted);
    }
  }
  const Lane& lane = lanes_[1];
  for (size_t op = 0; op < 16; ++op) {
    const size_t at = op * kOpSpan;
    ASSERT_EQ(std::memcmp(lane.target.data() + at, lane.source.data() + at,
                          OpLength(1, op)),
              0)
        << "WRITE " << op;
    if (op < 8) {
      ASSERT_EQ(std::memcmp(lane.readback.data() + at, lane.source.data() + at,
                            OpLength(1, op)),
                0)
          << "READ " << op;
    }
  }
  EXPECT_TRUE(clients_[1]->status().ok()) << clients_[1]->status();
}

TEST_F(EngineDeadlineTest, ADeadlineAlreadyPastAtPostIsActedOnAtOnce) {
  ASSERT_NO_FATAL_FAILURE(ConnectPairs(1));
  SetUpLanes(1, 4);
  ASSERT_NO_FATAL_FAILURE(Silence(0));
  const Deadline now = env().Now();
  const OpHandle handle = Post(0, 0, 4, false, now);  // accepted
  ASSERT_NE(handle, 0u);
  ASSERT_NO_FATAL_FAILURE(DriveAll());
  for (const auto& [h, e] : ended_) {
    EXPECT_EQ(e.completion.outcome, OpOutcome::kFailed);
    EXPECT_EQ(e.completion.status.code(), absl::StatusCode::kDeadlineExceeded);
    EXPECT_LE(e.at, now + milliseconds(1));
  }
}

TEST_F(EngineDeadlineTest, AnOverdueOpIsNoticedWhileOthersKeepTheEngineBusy) {
  ASSERT_NO_FATAL_FAILURE(ConnectPairs(2));
  SetUpLanes(2, 16);
  ASSERT_NO_FATAL_FAILURE(Silence(0));
  const Deadline deadline = env().DeadlineIn(milliseconds(1));
  const OpHandle overdue = Post(0, 0, 1, false, deadline);
  // Lane 1 keeps the CQ busy; nobody calls Wait(): only Progress() and the
  // fabric stepped event by event.
  size_t next = 0;
  uint64_t calls = 0;
  while (!ended_.count(overdue) && calls < 100'000) {
    if (clients_[1]->async_ops_in_flight() < 8) {
      Post(1, next % 16, 1, true, kNoDeadline);
      ++next;
    }
    fabric_->Step();
    engine_->Progress();
    ++calls;
    while (std::optional<Completion> c = engine_->NextCompletion()) {
      ASSERT_NO_FATAL_FAILURE(Take(*c));
    }
  }
  ASSERT_TRUE(ended_.count(overdue))
      << "never noticed in " << calls << " Progress() calls";
  const Ended& e = ended_.at(overdue);
  EXPECT_EQ(e.completion.status.code(), absl::StatusCode::kDeadlineExceeded)
      << e.completion.status;
  EXPECT_EQ(e.completion.outcome, OpOutcome::kFailed);
  EXPECT_LT(e.at, deadline + milliseconds(5));
  EXPECT_GT(next, 100u);  // it was busy meanwhile
  ASSERT_NO_FATAL_FAILURE(DriveAll());
  for (const auto& [handle, x] : ended_) {
    if (lane_of_.at(handle) == 1) {
      ASSERT_EQ(x.completion.outcome, OpOutcome::kCompleted)
          << x.completion.status;
    }
  }
  EXPECT_TRUE(clients_[1]->status().ok()) << clients_[1]->status();
}

}  // namespace
}  // namespace rdma_transport
