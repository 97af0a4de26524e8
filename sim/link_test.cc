// Links with bandwidth: a port's link is shared by every QP on it, and a
// stream of 64 KiB WRITEs or SENDs reaches at least 90% of the link's rate
// in virtual time (a deterministic property, so a test asserts it).

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "sim/fabric.h"
#include "sim/sim_testing.h"
#include "sim/sim_verbs.h"
#include "sim/test_macros.h"

namespace rdma_transport::sim {
namespace {

constexpr uint32_t kMessage = 64 * 1024;
constexpr int kDepth = 16;  // The endpoints' queue depth.

// One requester streaming to one responder.
struct Stream {
  std::unique_ptr<Endpoint> requester;
  std::unique_ptr<Endpoint> responder;
  int posted = 0;
  int done = 0;
  std::chrono::nanoseconds finished{0};
};

class LinkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    FabricOptions options;
    options.progress_mode = ProgressMode::kManual;
    fabric_ = std::make_unique<Fabric>(options);
    verbs_ = std::make_unique<SimVerbs>(fabric_.get());
    a_ = *fabric_->AddDevice(ConnectX7());
    b_ = *fabric_->AddDevice(ConnectX7());
  }

  Stream& AddStream() {
    EndpointOptions endpoint;
    endpoint.buffer_bytes = kDepth * kMessage;
    ConnectOptions connect;
    connect.path_mtu = IBV_MTU_4096;
    streams_.push_back(std::make_unique<Stream>());
    Stream& stream = *streams_.back();
    stream.requester = *Endpoint::Create(verbs_.get(), a_, endpoint);
    stream.responder = *Endpoint::Create(verbs_.get(), b_, endpoint);
    EXPECT_OK(stream.requester->ConnectTo(*stream.responder, connect));
    EXPECT_OK(stream.responder->ConnectTo(*stream.requester, connect));
    return stream;
  }

  void Post(Stream& stream, ibv_wr_opcode opcode) {
    const size_t slot = (stream.posted % kDepth) * size_t{kMessage};
    if (opcode == IBV_WR_SEND) {
      EXPECT_OK(stream.responder->PostRecv(stream.posted, slot, kMessage));
    }
    EXPECT_OK(stream.requester->PostSend(
        stream.posted, opcode, slot, kMessage, IBV_SEND_SIGNALED, 0,
        stream.responder->address(slot), stream.responder->rkey()));
    ++stream.posted;
  }

  // Runs every stream to `count` messages, keeping each send queue full;
  // records when each finished.
  void Run(ibv_wr_opcode opcode, int count) {
    for (auto& stream : streams_) {
      while (stream->posted < kDepth) Post(*stream, opcode);
    }
    size_t running = streams_.size();
    while (running > 0 && fabric_->Step()) {
      for (auto& stream : streams_) {
        if (stream->done == count) continue;
        // Held in a local: a range-for over *PollSendCq() would outlive
        // the StatusOr it dereferences.
        const std::vector<ibv_wc> completed = *stream->requester->PollSendCq();
        for (const ibv_wc& wc : completed) {
          EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
          ++stream->done;
          if (stream->posted < count) Post(*stream, opcode);
        }
        if (opcode == IBV_WR_SEND) (void)stream->responder->PollRecvCq();
        if (stream->done == count) {
          stream->finished = fabric_->Now();
          --running;
        }
      }
    }
  }

  static double Gbps(int count, std::chrono::nanoseconds took) {
    return 8.0 * kMessage * count / static_cast<double>(took.count());
  }

  // The figure docs/simulator.md quotes (--test_output=all).
  static void Print(const char* what, double gbps, double link) {
    std::printf("%s: %.1f of %.0f Gb/s (%.1f%%)\n", what, gbps, link,
                100 * gbps / link);
  }

  // One stream of 256 messages: between 90% and 100% of the link's rate.
  void ExpectOneStreamReachesNinetyPercent(ibv_wr_opcode opcode,
                                           const char* what) {
    Stream& stream = AddStream();
    Run(opcode, 256);
    const double gbps = Gbps(256, stream.finished);
    const double link = *fabric_->LinkGbps(a_);
    Print(what, gbps, link);
    EXPECT_GE(gbps, 0.9 * link) << gbps << " of " << link << " Gb/s";
    EXPECT_LE(gbps, link);
  }

  void TearDown() override {
    for (auto& stream : streams_) {
      EXPECT_OK(stream->requester->Close());
      EXPECT_OK(stream->responder->Close());
    }
    streams_.clear();
    EXPECT_TRUE(fabric_->LeakReport().empty());
  }

  std::unique_ptr<Fabric> fabric_;
  std::unique_ptr<SimVerbs> verbs_;
  std::string a_;
  std::string b_;
  std::vector<std::unique_ptr<Stream>> streams_;
};

TEST_F(LinkTest, TheLinkRateComesFromTheProfile) {
  EXPECT_EQ(*fabric_->LinkGbps(a_), 400.0);  // ConnectX-7: 4x NDR.
  Fabric other;
  EXPECT_EQ(*other.LinkGbps(*other.AddDevice(ConnectX6())), 200.0);  // 4x HDR
  EXPECT_EQ(*other.LinkGbps(*other.AddDevice(SoftRoce())), 2.5);     // 1x SDR
  EXPECT_EQ(other.LinkGbps("nothing").status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(LinkTest, WritesOf64KiBReachNinetyPercentOfTheLink) {
  ExpectOneStreamReachesNinetyPercent(IBV_WR_RDMA_WRITE, "64 KiB WRITEs");
}

TEST_F(LinkTest, SendsOf64KiBReachNinetyPercentOfTheLink) {
  ExpectOneStreamReachesNinetyPercent(IBV_WR_SEND, "64 KiB SENDs");
}

// Two QPs on the same ports share the link: each gets half.
TEST_F(LinkTest, TwoQpsOnAPortShareItsLink) {
  Stream& one = AddStream();
  Stream& two = AddStream();
  Run(IBV_WR_RDMA_WRITE, 128);
  const double link = *fabric_->LinkGbps(a_);
  for (const Stream* stream : {&one, &two}) {
    const double gbps = Gbps(128, stream->finished);
    Print("64 KiB WRITEs, one of two QPs", gbps, link);
    EXPECT_GE(gbps, 0.45 * link) << gbps;
    EXPECT_LE(gbps, 0.55 * link) << gbps;
  }
  // Both were done at about the same time: neither starved the other.
  const auto gap = one.finished - two.finished;
  EXPECT_LT(std::chrono::abs(gap), std::chrono::microseconds(5));
}

}  // namespace
}  // namespace rdma_transport::sim
