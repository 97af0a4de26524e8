// The blocking one-sided calls' pipeline (connection.h, "One-sided"):
// Write(), Read() and a rendezvous message's READ (ReceiveInto) keep
// several pieces on the send queue and post the next as the oldest
// completes, never more than the cap on bytes in flight (Soft-RoCE's
// kSoftRoceInFlightBytes, or ConnectionOptions::rdma_in_flight_bytes) nor
// more than max_rdma_batch work requests of the call. On the simulator
// with the rxe profile, ConnectX-7's (no cap) and ConnectX-7's with a cap
// of its own; a Verbs wrapper watches what each QP holds between a post and
// the completion that reports it, and every byte moved is checked. Virtual
// time, nothing timed.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <ostream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "sim/fabric.h"
#include "sim/sim_verbs.h"
#include "tests/connection_pair.h"
#include "tests/e2e_fixture.h"
#include "tests/register_for_test.h"
#include "transport/connection.h"
#include "verbs_shim/env_thread.h"
#include "verbs_shim/verbs_wrapper.h"

namespace rdma_transport {
namespace {

using std::chrono::seconds;

// Per QP, the send work requests posted and not yet reported done by a
// polled completion (one completion reports every earlier work request of
// its QP: RC completes in order): the most payload bytes and the most RDMA
// WRITE/READ work requests it ever held at once, and how often RDMA was
// posted onto RDMA still held. An upper bound on what the NIC holds, as the
// transport itself can know it. Thread-safe.
class InFlightVerbs : public VerbsWrapper {
 public:
  using VerbsWrapper::VerbsWrapper;

  absl::Status PostSend(ibv_qp* qp, ibv_send_wr* wr,
                        ibv_send_wr** bad_wr) override {
    absl::Status status = VerbsWrapper::PostSend(qp, wr, bad_wr);
    std::lock_guard<std::mutex> lock(mu_);
    Queue& queue = queues_[qp->qp_num];
    const uint64_t rdma_before = queue.rdma;
    bool posts_rdma = false;
    for (ibv_send_wr* w = wr; w != nullptr; w = w->next) {
      if (!status.ok() && w == *bad_wr) break;
      Entry entry{
          w->wr_id, 0,
          w->opcode == IBV_WR_RDMA_WRITE || w->opcode == IBV_WR_RDMA_READ};
      for (int i = 0; i < w->num_sge; ++i) entry.bytes += w->sg_list[i].length;
      queue.entries.push_back(entry);
      queue.bytes += entry.bytes;
      queue.rdma += entry.rdma ? 1 : 0;
      posts_rdma = posts_rdma || entry.rdma;
      most_bytes_ = std::max(most_bytes_, queue.bytes);
      most_rdma_ = std::max(most_rdma_, queue.rdma);
    }
    if (posts_rdma && rdma_before > 0) ++refills_;
    return status;
  }

  absl::StatusOr<int> PollCq(ibv_cq* cq, int num_entries, ibv_wc* wc) override {
    absl::StatusOr<int> polled = VerbsWrapper::PollCq(cq, num_entries, wc);
    if (!polled.ok()) return polled;
    std::lock_guard<std::mutex> lock(mu_);
    for (int i = 0; i < *polled; ++i) {
      auto queue = queues_.find(wc[i].qp_num);
      if (queue == queues_.end()) continue;
      std::vector<Entry>& entries = queue->second.entries;
      // A receive's wr_id names no send work request (wr_id.h: its kind).
      auto done = std::find_if(
          entries.begin(), entries.end(),
          [&](const Entry& entry) { return entry.wr_id == wc[i].wr_id; });
      if (done == entries.end()) continue;
      for (auto it = entries.begin(); it <= done; ++it) {
        queue->second.bytes -= it->bytes;
        queue->second.rdma -= it->rdma ? 1 : 0;
      }
      entries.erase(entries.begin(), done + 1);
    }
    return polled;
  }

  // Starts the maxima and refills again from what is outstanding now.
  void ResetMaxima() {
    std::lock_guard<std::mutex> lock(mu_);
    most_bytes_ = 0;
    most_rdma_ = 0;
    refills_ = 0;
    for (const auto& [qp_num, queue] : queues_) {
      most_bytes_ = std::max(most_bytes_, queue.bytes);
      most_rdma_ = std::max(most_rdma_, queue.rdma);
    }
  }
  uint64_t most_bytes() {
    std::lock_guard<std::mutex> lock(mu_);
    return most_bytes_;
  }
  uint64_t most_rdma() {
    std::lock_guard<std::mutex> lock(mu_);
    return most_rdma_;
  }
  // Posts of RDMA work requests onto a QP that still held some: a pipeline
  // refilled as completions come (stop-and-wait posts onto an empty one).
  uint64_t refills() {
    std::lock_guard<std::mutex> lock(mu_);
    return refills_;
  }

 private:
  struct Entry {
    uint64_t wr_id = 0;
    uint64_t bytes = 0;
    bool rdma = false;
  };
  struct Queue {
    std::vector<Entry> entries;
    uint64_t bytes = 0;
    uint64_t rdma = 0;
  };
  std::mutex mu_;
  std::map<uint32_t, Queue> queues_;
  uint64_t most_bytes_ = 0;
  uint64_t most_rdma_ = 0;
  uint64_t refills_ = 0;
};

struct PipelineCase {
  std::string name;
  std::string profile;
  uint64_t rdma_in_flight_bytes = 0;  // ConnectionOptions'
  uint64_t cap = 0;                   // what it comes to; 0: none
};

void PrintTo(const PipelineCase& c, std::ostream* out) { *out << c.name; }

constexpr uint32_t kMaxRdmaBatch = 8;
constexpr size_t kRegionBytes = 4 << 20;

std::byte PatternByte(uint64_t stream, size_t i) {
  return static_cast<std::byte>((stream * 131 + i * 7 + i / 251 + 1) & 0xff);
}

class OneSidedPipelineTest : public ::testing::TestWithParam<PipelineCase> {
 protected:
  void SetUp() override {
    // The wire moves as virtual time does, between the transport's polls
    // (kManual), not to the end at each post: pieces are seen complete one
    // by one.
    sim::FabricOptions fabric_options;
    fabric_options.progress_mode = sim::ProgressMode::kManual;
    fabric_ = std::make_unique<sim::Fabric>(fabric_options);
    sim_verbs_ = std::make_unique<sim::SimVerbs>(fabric_.get());
    verbs_ = std::make_unique<InFlightVerbs>(sim_verbs_.get());
    absl::StatusOr<SimContexts> opened =
        OpenTwoSimContexts(*fabric_, *verbs_, GetParam().profile);
    ASSERT_TRUE(opened.ok()) << opened.status();
    contexts_ = std::move(opened->contexts);
    ConnectionOptions options;
    options.max_rdma_batch = kMaxRdmaBatch;
    options.rdma_in_flight_bytes = GetParam().rdma_in_flight_bytes;
    options.max_message_size = 4096;  // larger messages by rendezvous
    const absl::Status dialed =
        DialPair(*contexts_[0], *contexts_[1], options, client_, server_);
    ASSERT_TRUE(dialed.ok()) << dialed;
    local_.assign(kRegionBytes, std::byte{0});
    remote_.assign(kRegionBytes, std::byte{0});
    local_mr_ = RegisterForTest(*contexts_[0], local_, kLocalWrite);
    remote_mr_ = RegisterForTest(*contexts_[1], remote_,
                                 kLocalWrite | kRemoteRead | kRemoteWrite);
  }

  void TearDown() override {
    client_.reset();
    server_.reset();
    local_mr_ = MemoryRegion();
    remote_mr_ = MemoryRegion();
    contexts_.clear();
    if (fabric_ != nullptr) {
      EXPECT_EQ(LeakReportText(*fabric_), "");
    }
  }

  Env& env() { return fabric_->env(); }
  uint64_t cap() const { return GetParam().cap; }
  // The pieces a capped pipeline cuts (connection_options.h).
  uint64_t piece() const { return cap() / kRdmaPiecesUnderCap; }

  // What a QP held at most since ResetMaxima(): under the cap, and, for an
  // op of `length` bytes alone, the cap's worth of pieces on the wire at
  // once, each next piece posted while the others are still out (one per
  // piece but the first batch and the last); without a cap the op in one
  // piece.
  void ExpectPipelined(uint64_t length, const std::string& what) {
    if (cap() > 0) {
      EXPECT_LE(verbs_->most_bytes(), cap()) << what << ": the cap broken";
      EXPECT_EQ(verbs_->most_bytes(), cap()) << what;
      EXPECT_EQ(verbs_->most_rdma(), kRdmaPiecesUnderCap)
          << what << ": pieces in flight (1 is stop-and-wait)";
      const uint64_t pieces = (length + piece() - 1) / piece();
      EXPECT_EQ(verbs_->refills(), pieces - kRdmaPiecesUnderCap)
          << what << ": pieces posted while others were in flight (0 is "
          << "stop-and-wait per batch)";
    } else {
      EXPECT_EQ(verbs_->most_rdma(), 1u) << what;
      EXPECT_EQ(verbs_->most_bytes(), length) << what;
    }
  }

  void Fill(std::vector<std::byte>& memory, uint64_t stream) {
    for (size_t i = 0; i < memory.size(); ++i) {
      memory[i] = PatternByte(stream, i);
    }
  }

  std::unique_ptr<sim::Fabric> fabric_;
  std::unique_ptr<sim::SimVerbs> sim_verbs_;
  std::unique_ptr<InFlightVerbs> verbs_;
  std::vector<std::unique_ptr<Context>> contexts_;
  std::unique_ptr<Connection> client_;
  std::unique_ptr<Connection> server_;
  std::vector<std::byte> local_, remote_;
  MemoryRegion local_mr_, remote_mr_;
};

TEST_P(OneSidedPipelineTest, ALongWriteAndReadKeepPiecesInFlightUnderTheCap) {
  // 2 MiB + 3 bytes: many pieces under a cap, their last one short.
  constexpr uint64_t kLength = (2 << 20) + 3;
  constexpr uint64_t kLocalAt = 5, kRemoteAt = 1000;
  Fill(local_, 1);
  const RdmaOp write{&local_mr_, kLocalAt, kLength, remote_mr_.remote(),
                     kRemoteAt};
  verbs_->ResetMaxima();
  E2E_ASSERT_OK(client_->Write({&write, 1}));
  ExpectPipelined(kLength, "Write");
  for (size_t i = 0; i < remote_.size(); ++i) {
    const bool written = i >= kRemoteAt && i < kRemoteAt + kLength;
    ASSERT_EQ(remote_[i],
              written ? PatternByte(1, i - kRemoteAt + kLocalAt) : std::byte{0})
        << "remote byte " << i;
  }

  // Back the other way, from a fresh pattern, into zeroed local memory.
  Fill(remote_, 2);
  std::fill(local_.begin(), local_.end(), std::byte{0});
  const RdmaOp read{&local_mr_, kRemoteAt, kLength, remote_mr_.remote(),
                    kLocalAt};
  verbs_->ResetMaxima();
  E2E_ASSERT_OK(client_->Read({&read, 1}));
  ExpectPipelined(kLength, "Read");
  for (size_t i = 0; i < local_.size(); ++i) {
    const bool read_into = i >= kRemoteAt && i < kRemoteAt + kLength;
    ASSERT_EQ(local_[i], read_into ? PatternByte(2, i - kRemoteAt + kLocalAt)
                                   : std::byte{0})
        << "local byte " << i;
  }
  const ConnectionStats stats = client_->stats();
  EXPECT_EQ(stats.rdma_writes, 1u);
  EXPECT_EQ(stats.rdma_reads, 1u);
  EXPECT_EQ(stats.rdma_bytes, 2 * kLength);
  E2E_ASSERT_OK(client_->Close(env().DeadlineIn(seconds(5))));
}

TEST_P(OneSidedPipelineTest, ManyOpsKeepAtMostMaxRdmaBatchWorkRequests) {
  // Large and small ops mixed: every byte lands where its op says, and the
  // call never holds more than max_rdma_batch work requests.
  std::vector<RdmaOp> ops;
  uint64_t at = 0;
  for (int k = 0; k < 40; ++k) {
    const uint64_t length = k % 10 == 3 ? (300 << 10) + k : 1000 + k;
    ops.push_back({&local_mr_, at, length, remote_mr_.remote(), at + 64});
    at += length + 17;  // a gap the ops leave alone
  }
  ASSERT_LE(at + 64, kRegionBytes);
  Fill(local_, 3);
  verbs_->ResetMaxima();
  E2E_ASSERT_OK(client_->Write(ops));
  EXPECT_LE(verbs_->most_rdma(), kMaxRdmaBatch);
  EXPECT_GT(verbs_->most_rdma(), 1u);
  if (cap() > 0) {
    EXPECT_LE(verbs_->most_bytes(), cap());
  }
  std::vector<bool> written(remote_.size(), false);
  for (const RdmaOp& op : ops) {
    for (uint64_t i = 0; i < op.length; ++i) {
      written[op.remote_offset + i] = true;
      ASSERT_EQ(remote_[op.remote_offset + i],
                PatternByte(3, op.local_offset + i))
          << "op at " << op.local_offset << " byte " << i;
    }
  }
  for (size_t i = 0; i < remote_.size(); ++i) {
    if (!written[i]) {
      ASSERT_EQ(remote_[i], std::byte{0}) << "gap byte " << i;
    }
  }
  EXPECT_EQ(client_->stats().rdma_writes, ops.size());
  E2E_ASSERT_OK(client_->Close(env().DeadlineIn(seconds(5))));
}

TEST_P(OneSidedPipelineTest, ARendezvousMessageIsReadInPipelinedPieces) {
  // 3 MiB + 7 by rendezvous: the receiver READs it into its region.
  constexpr uint64_t kLength = (3 << 20) + 7;
  constexpr uint64_t kSourceAt = 11, kTargetAt = 4096;
  Fill(local_, 4);
  MemoryRegion source =
      RegisterForTest(*contexts_[0], local_, kLocalWrite | kRemoteRead);
  verbs_->ResetMaxima();
  auto sending = RunInThread(env(), [&] {
    return client_->SendFrom(source, kSourceAt, kLength,
                             env().DeadlineIn(seconds(60)));
  });
  absl::StatusOr<size_t> received = server_->ReceiveInto(
      remote_mr_, kTargetAt, kLength, env().DeadlineIn(seconds(60)));
  E2E_ASSERT_OK(sending.Get());
  ASSERT_TRUE(received.ok()) << received.status();
  ASSERT_EQ(*received, kLength);
  // The sender's QP held a request of a few bytes; the receiver's the READ.
  ExpectPipelined(kLength, "rendezvous READ");
  for (size_t i = 0; i < remote_.size(); ++i) {
    const bool landed = i >= kTargetAt && i < kTargetAt + kLength;
    ASSERT_EQ(remote_[i],
              landed ? PatternByte(4, i - kTargetAt + kSourceAt) : std::byte{0})
        << "target byte " << i;
  }
  EXPECT_EQ(server_->stats().rendezvous_received, 1u);
  E2E_ASSERT_OK(client_->Close(env().DeadlineIn(seconds(5))));
  client_.reset();
  server_.reset();
}

INSTANTIATE_TEST_SUITE_P(
    Profiles, OneSidedPipelineTest,
    ::testing::Values(PipelineCase{"rxe", "rxe", 0, kSoftRoceInFlightBytes},
                      PipelineCase{"cx7", "cx7", 0, 0},
                      PipelineCase{"cx7_capped", "cx7", 512 << 10, 512 << 10}),
    [](const ::testing::TestParamInfo<PipelineCase>& info) {
      return info.param.name;
    });

}  // namespace
}  // namespace rdma_transport
