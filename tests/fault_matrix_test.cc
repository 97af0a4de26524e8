// The fault matrix: every way the device, the peer or the network can fail
// the transport, each with a precise expected outcome. After every case: no
// crash, no hang (every wait has a deadline or the completion watchdog), the
// right absl::Status, no verbs object left alive (the sim's leak report is
// empty), and every message that arrived arrived exactly once, in order and
// intact.
//
// Runs on the simulator, whose FaultInjector and a hooking VerbsWrapper
// provide the faults.
#include <cerrno>
#include <cstdio>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sim/fabric.h"
#include "sim/profile_names.h"
#include "sim/sim_verbs.h"
#include "tests/connection_pair.h"
#include "tests/e2e_fixture.h"
#include "transport/connection.h"
#include "transport/listener.h"
#include "verbs_shim/env_thread.h"
#include "verbs_shim/verbs_error.h"
#include "verbs_shim/verbs_names.h"
#include "verbs_shim/verbs_wrapper.h"

namespace rdma_transport {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::AnyOf;
using ::testing::HasSubstr;

// SimVerbs with hooks a test sets before any traffic (not changed while
// connections run).
class HookedVerbs : public VerbsWrapper {
 public:
  using VerbsWrapper::VerbsWrapper;

  std::function<void(ibv_qp*, const ibv_qp_attr&, int)> on_modify_qp;
  std::function<void(ibv_qp*, const ibv_send_wr&)> on_post_send;
  int shrink_cq_to = 0;  // > 0: every CQ is created this small

  absl::Status ModifyQp(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask) override {
    if (on_modify_qp) on_modify_qp(qp, *attr, attr_mask);
    return VerbsWrapper::ModifyQp(qp, attr, attr_mask);
  }
  absl::Status PostSend(ibv_qp* qp, ibv_send_wr* wr,
                        ibv_send_wr** bad_wr) override {
    if (on_post_send) on_post_send(qp, *wr);
    return VerbsWrapper::PostSend(qp, wr, bad_wr);
  }
  absl::StatusOr<ibv_cq*> CreateCq(ibv_context* context, int cqe,
                                   void* cq_context, ibv_comp_channel* channel,
                                   int comp_vector) override {
    return VerbsWrapper::CreateCq(context,
                                  shrink_cq_to > 0 ? shrink_cq_to : cqe,
                                  cq_context, channel, comp_vector);
  }
};

class FaultMatrixTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<SimContexts> opened = OpenTwoSimContexts(fabric_, verbs_);
    ASSERT_TRUE(opened.ok()) << opened.status();
    devices_ = opened->devices;
    contexts_ = std::move(opened->contexts);
    options_.handshake_timeout = seconds(5);
    options_.completion_timeout = milliseconds(500);
  }

  void TearDown() override {
    client_.reset();
    server_.reset();
    listener_.reset();
    contexts_.clear();
    EXPECT_EQ(LeakReportText(fabric_), "") << "verbs objects leaked";
    ExpectSameTraceAsLastRun();
  }

  // Every case is deterministic: run twice (the BUILD target passes
  // --gtest_repeat=2), it must make the fabric run the same events, in the
  // same order, at the same virtual times, with the same outcomes.
  void ExpectSameTraceAsLastRun() {
    static std::map<std::string, uint64_t>* digests =
        new std::map<std::string, uint64_t>();
    const ::testing::TestInfo* test =
        ::testing::UnitTest::GetInstance()->current_test_info();
    const std::string name =
        std::string(test->test_suite_name()) + "." + test->name();
    const uint64_t digest = fabric_.TraceDigest();
    std::printf("trace digest %016llx (%llu events) %s\n",
                static_cast<unsigned long long>(digest),
                static_cast<unsigned long long>(fabric_.EventsRun()),
                name.c_str());
    auto [it, first] = digests->emplace(name, digest);
    if (!first) {
      EXPECT_EQ(it->second, digest)
          << name << ": the fabric's event trace differs from the last run";
    }
  }

  Context& client_context() { return *contexts_[0]; }
  Context& server_context() { return *contexts_[1]; }
  const std::string& server_device() { return devices_[1]; }
  // Every deadline is on the fabric's virtual clock.
  Env& env() { return fabric_.env(); }
  Deadline In(Clock::duration timeout) { return env().DeadlineIn(timeout); }

  // Connects client_ and server_; returns (client status, server status).
  std::pair<absl::Status, absl::Status> TryConnect() {
    DialResult dial = Dial(client_context(), server_context(), options_,
                           "127.0.0.1:0", In(seconds(3)));
    listener_ = std::move(dial.listener);
    if (dial.client.ok()) client_ = *std::move(dial.client);
    if (dial.server.ok()) server_ = *std::move(dial.server);
    return {dial.client.status(), dial.server.status()};
  }

  void ConnectOrDie() {
    auto [client, server] = TryConnect();
    ASSERT_TRUE(client.ok()) << client;
    ASSERT_TRUE(server.ok()) << server;
  }

  // Sends stream 1 from the client until `count` are sent or Send fails;
  // returns how many Send() calls succeeded and the first failure.
  std::pair<int, absl::Status> SendUpTo(int count, size_t size = 512) {
    std::vector<std::byte> message(size);
    for (int seq = 0; seq < count; ++seq) {
      FillMessage(1, seq, message);
      absl::Status status = client_->Send(message, In(seconds(5)));
      if (!status.ok()) return {seq, status};
    }
    return {count, absl::OkStatus()};
  }

  // Receives on the server until it fails or `deadline`; checks that what
  // arrived is messages 0..n-1 of stream 1, each once, in order, intact.
  // Returns n and the status that ended the loop.
  std::pair<int, absl::Status> ReceiveAll(
      size_t size = 512, milliseconds idle = milliseconds(300)) {
    std::vector<std::byte> buffer(4096);
    int received = 0;
    while (true) {
      absl::StatusOr<size_t> n = server_->Receive(buffer, In(idle));
      if (!n.ok()) return {received, n.status()};
      EXPECT_EQ(*n, size) << "message " << received;
      EXPECT_EQ(CheckMessage(1, received, {buffer.data(), *n}), "")
          << "message " << received << " is corrupt, duplicated or reordered";
      ++received;
    }
  }

  sim::Fabric fabric_;
  sim::SimVerbs sim_verbs_{&fabric_};
  HookedVerbs verbs_{&sim_verbs_};
  std::vector<std::string> devices_;
  std::vector<std::unique_ptr<Context>> contexts_;
  ConnectionOptions options_;
  std::unique_ptr<Listener> listener_;
  std::unique_ptr<Connection> client_;
  std::unique_ptr<Connection> server_;
};

// --- The device refuses ------------------------------------------------------

TEST_F(FaultMatrixTest, InlineRefusedAtEverySizeStillConnectsWithoutInline) {
  fabric_.faults().RefuseCreateQpAboveInline(0, EINVAL);
  ASSERT_NO_FATAL_FAILURE(ConnectOrDie());
  EXPECT_EQ(client_->usable_inline(), 0u);
  EXPECT_EQ(client_->negotiated_qp().attempts.size(), 236u / 16 + 2);
  auto [sent, send_status] = SendUpTo(50, 8);
  ASSERT_TRUE(send_status.ok()) << send_status;
  auto [received, end] = ReceiveAll(8);
  EXPECT_EQ(received, 50);
  EXPECT_EQ(client_->stats().inline_sends, 0u);
  EXPECT_EQ(fabric_.Counters().inline_sends, 0u);
}

TEST_F(FaultMatrixTest, CreateQpEnomemFailsBothSidesCleanly) {
  fabric_.faults().RefuseCreateQp(ENOMEM, sim::kEveryTime, server_device());
  auto [client, server] = TryConnect();
  EXPECT_EQ(client.code(), absl::StatusCode::kFailedPrecondition) << client;
  EXPECT_THAT(client.message(), HasSubstr("server could not set up the QP"));
  EXPECT_THAT(client.message(), HasSubstr("Cannot allocate memory"));
  EXPECT_EQ(server.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(listener_->stats().rejected, 1u);
  // The client side itself: ENOMEM is returned at once, no step-down.
  fabric_.faults().Clear();
  fabric_.faults().RefuseCreateQp(ENOMEM, 1, devices_[0]);
  absl::StatusOr<std::unique_ptr<Connection>> again =
      Connect(client_context(), listener_->address(), options_);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(VerbsErrno(again.status()), ENOMEM);
  EXPECT_THAT(again.status().message(),
              HasSubstr("max_inline_data tried: 236;"));
}

TEST_F(FaultMatrixTest, RegMrFailureFailsConnectionSetup) {
  fabric_.faults().FailRegMr(ENOMEM, 1, devices_[0]);
  listener_ = *Listener::Create(server_context(), "127.0.0.1:0", options_);
  absl::StatusOr<std::unique_ptr<Connection>> client =
      Connect(client_context(), listener_->address(), options_);
  EXPECT_EQ(client.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(client.status().message(), HasSubstr("registering"));
  EXPECT_EQ(VerbsErrno(client.status()), ENOMEM);
}

TEST_F(FaultMatrixTest, CreateCqFailureFailsConnectionSetup) {
  fabric_.faults().FailCreateCq(ENOMEM, 1, devices_[0]);
  listener_ = *Listener::Create(server_context(), "127.0.0.1:0", options_);
  absl::StatusOr<std::unique_ptr<Connection>> client =
      Connect(client_context(), listener_->address(), options_);
  EXPECT_EQ(client.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(client.status().message(), HasSubstr("ibv_create_cq"));
}

TEST_F(FaultMatrixTest, ModifyQpFailureAtRtrIsReportedWithTheTransition) {
  fabric_.faults().FailModifyQp(IBV_QPS_INIT, IBV_QPS_RTR, ETIMEDOUT, 1,
                                devices_[0]);
  listener_ = *Listener::Create(server_context(), "127.0.0.1:0", options_);
  auto accept =
      RunInThread(env(), [&] { return listener_->Accept(In(seconds(2))); });
  absl::StatusOr<std::unique_ptr<Connection>> client =
      Connect(client_context(), listener_->address(), options_);
  EXPECT_EQ(client.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(client.status().message(), HasSubstr("INIT->RTR"));
  EXPECT_EQ(VerbsErrno(client.status()), ETIMEDOUT);
  // The server never got READY: it gives the half-made connection up.
  EXPECT_FALSE(accept.Get().ok());
}

TEST_F(FaultMatrixTest, CqOverflowFailsTheConnectionNeverDropsSilently) {
  verbs_.shrink_cq_to = 4;  // far below what the rings can complete
  ASSERT_NO_FATAL_FAILURE(ConnectOrDie());
  auto [sent, send_status] = SendUpTo(64, 64);
  auto [received, end] = ReceiveAll(64);
  const absl::Status client = client_->status();
  const absl::Status server = server_->status();
  EXPECT_TRUE(!client.ok() || !server.ok())
      << "a CQ overrun went unnoticed; sent " << sent << ", received "
      << received;
  const absl::Status& failed = server.ok() ? client : server;
  EXPECT_THAT(failed.message(), HasSubstr("ibv_poll_cq"));
  EXPECT_GT(fabric_.Counters().cq_overruns, 0u);
  EXPECT_LE(received, sent);
}

// --- Completions fail
// ----------------------------------------------------------

struct CompletionCase {
  ibv_wc_status status;
  absl::StatusCode code;
};

class CompletionErrorTest
    : public FaultMatrixTest,
      public ::testing::WithParamInterface<CompletionCase> {};

TEST_P(CompletionErrorTest, MapsToAStatusNamingOpcodeStatusAndConnection) {
  ASSERT_NO_FATAL_FAILURE(ConnectOrDie());
  auto [sent, ok] = SendUpTo(5);
  ASSERT_TRUE(ok.ok()) << ok;
  const uint32_t qp_num = client_->qp()->qp_num;
  ASSERT_TRUE(
      fabric_.faults()
          .FailCompletions(sim::FaultTarget::Qp(qp_num), GetParam().status)
          .ok());
  // The next signalled request fails; every later call says the same.
  absl::Status status = client_->Check(In(seconds(5)));
  EXPECT_EQ(status.code(), GetParam().code) << status;
  EXPECT_THAT(status.message(), HasSubstr(WcStatusName(GetParam().status)));
  EXPECT_THAT(status.message(), HasSubstr(client_->name()));
  EXPECT_THAT(status.message(), HasSubstr("RDMA_WRITE"));
  EXPECT_EQ(client_->Send(std::as_bytes(std::span("x", 1))), status);
  std::vector<std::byte> buffer(64);
  EXPECT_EQ(client_->Receive(buffer, In(seconds(1))).status(), status);
  // What had been sent before arrived, once, intact.
  auto [received, end] = ReceiveAll();
  EXPECT_EQ(received, 5);
}

// Linux 6.1's rxe can put a QP in ERR after a completer error it reports
// to nobody (its work requests then end flushed): the first failure of the
// connection is a flush, and the Status must say that nothing explained it.
TEST_F(FaultMatrixTest, AFlushNothingExplainedSaysTheProviderGaveNoReason) {
  ASSERT_NO_FATAL_FAILURE(ConnectOrDie());
  ibv_qp_attr attr = {};
  attr.qp_state = IBV_QPS_ERR;
  ASSERT_TRUE(sim_verbs_.ModifyQp(client_->qp(), &attr, IBV_QP_STATE).ok());
  absl::Status status = client_->Check(In(seconds(5)));
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_THAT(status.message(), HasSubstr("IBV_WC_WR_FLUSH_ERR"));
  EXPECT_THAT(status.message(),
              HasSubstr("no error completion or async event came before it"));
  EXPECT_THAT(status.message(), HasSubstr(client_->name()));
}

INSTANTIATE_TEST_SUITE_P(
    CommonStatuses, CompletionErrorTest,
    ::testing::Values(
        CompletionCase{IBV_WC_RETRY_EXC_ERR, absl::StatusCode::kUnavailable},
        CompletionCase{IBV_WC_RNR_RETRY_EXC_ERR,
                       absl::StatusCode::kUnavailable},
        CompletionCase{IBV_WC_REM_ACCESS_ERR,
                       absl::StatusCode::kPermissionDenied},
        CompletionCase{IBV_WC_LOC_PROT_ERR,
                       absl::StatusCode::kPermissionDenied},
        CompletionCase{IBV_WC_LOC_LEN_ERR, absl::StatusCode::kInvalidArgument},
        CompletionCase{IBV_WC_REM_INV_REQ_ERR,
                       absl::StatusCode::kInvalidArgument},
        CompletionCase{IBV_WC_REM_OP_ERR, absl::StatusCode::kInternal},
        CompletionCase{IBV_WC_LOC_QP_OP_ERR, absl::StatusCode::kInternal},
        CompletionCase{IBV_WC_GENERAL_ERR, absl::StatusCode::kInternal}),
    [](const auto& info) {
      return std::string(WcStatusName(info.param.status));
    });

TEST_F(FaultMatrixTest, RnrNeverHappensUnderFlowControl) {
  options_.recv_slots = 4;
  ASSERT_NO_FATAL_FAILURE(ConnectOrDie());
  // The receiver takes nothing: the sender stops at the credits it has.
  auto [sent, status] = SendUpTo(10, 64);
  EXPECT_EQ(sent, 2);  // 4 credits less the two kept in reserve
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(fabric_.Counters().rnr_naks, 0u);
  auto [received, end] = ReceiveAll(64);
  EXPECT_EQ(received, 2);
}

// --- The peer dies
// -------------------------------------------------------------

TEST_F(FaultMatrixTest, PeerKilledBeforeTheHandshake) {
  ASSERT_TRUE(fabric_.faults().KillDevice(server_device()).ok());
  auto [client, server] = TryConnect();
  EXPECT_EQ(client.code(), absl::StatusCode::kFailedPrecondition) << client;
  EXPECT_THAT(client.message(), HasSubstr("server could not set up the QP"));
  EXPECT_FALSE(server.ok());
}

TEST_F(FaultMatrixTest, PeerKilledDuringTheHandshake) {
  // The server's NIC dies as its QP reaches RTS, before ACCEPT is sent.
  std::atomic<bool> killed{false};
  verbs_.on_modify_qp = [&](ibv_qp* qp, const ibv_qp_attr& attr, int) {
    if (attr.qp_state == IBV_QPS_RTS && qp->context != nullptr &&
        std::string(qp->context->device->name) == server_device() &&
        !killed.exchange(true)) {
      (void)fabric_.faults().KillDevice(server_device());
    }
  };
  auto [client, server] = TryConnect();
  EXPECT_TRUE(killed.load());
  // Either side may notice first; nothing hangs, and whatever connected
  // fails at its first use.
  if (client.ok()) {
    EXPECT_EQ(client_->Check(In(seconds(5))).code(),
              absl::StatusCode::kUnavailable);
  } else {
    EXPECT_THAT(client.code(), AnyOf(absl::StatusCode::kFailedPrecondition,
                                     absl::StatusCode::kUnavailable,
                                     absl::StatusCode::kDeadlineExceeded));
  }
}

TEST_F(FaultMatrixTest, PeerKilledAfterTheHandshake) {
  ASSERT_NO_FATAL_FAILURE(ConnectOrDie());
  auto [sent, ok] = SendUpTo(10);
  ASSERT_TRUE(ok.ok());
  auto [received, end] = ReceiveAll();
  EXPECT_EQ(received, 10);
  ASSERT_TRUE(fabric_.faults().KillDevice(server_device()).ok());
  absl::Status status = client_->Check(In(seconds(5)));
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_THAT(status.message(), HasSubstr("IBV_WC_RETRY_EXC_ERR"));
  EXPECT_EQ(client_->Send(std::as_bytes(std::span("x", 1))).code(),
            absl::StatusCode::kUnavailable);
}

TEST_F(FaultMatrixTest, PeerKilledMidWrite) {
  ASSERT_NO_FATAL_FAILURE(ConnectOrDie());
  std::vector<std::byte> local(1 << 20), remote(1 << 20);
  FillMessage(2, 0, local);
  absl::StatusOr<MemoryRegion> local_region =
      client_context().RegisterMemory(local, kLocalWrite);
  absl::StatusOr<MemoryRegion> remote_region =
      server_context().RegisterMemory(remote, kRemoteWrite);
  ASSERT_TRUE(local_region.ok() && remote_region.ok());
  // 256 writes of 4 KiB in batches of 32; the server dies at the 100th post.
  std::vector<RdmaOp> ops;
  for (size_t i = 0; i < 256; ++i) {
    ops.push_back(
        {&*local_region, i * 4096, 4096, remote_region->remote(), i * 4096});
  }
  int posts = 0;
  verbs_.on_post_send = [&](ibv_qp*, const ibv_send_wr& wr) {
    for (const ibv_send_wr* w = &wr; w != nullptr; w = w->next) {
      if (w->opcode == IBV_WR_RDMA_WRITE && ++posts == 100) {
        (void)fabric_.faults().KillDevice(server_device());
      }
    }
  };
  absl::Status status = client_->Write(ops);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_THAT(status.message(), HasSubstr("RDMA_WRITE"));
  EXPECT_LT(client_->stats().rdma_writes, 256u);
  verbs_.on_post_send = nullptr;
}

TEST_F(FaultMatrixTest, DroppedPacketsAreRetransmittedNotLost) {
  ASSERT_NO_FATAL_FAILURE(ConnectOrDie());
  ASSERT_TRUE(fabric_.faults()
                  .DropPackets(sim::FaultTarget::Qp(server_->qp()->qp_num), 3)
                  .ok());
  auto [sent, ok] = SendUpTo(20);
  ASSERT_TRUE(ok.ok()) << ok;
  auto [received, end] = ReceiveAll();
  EXPECT_EQ(received, 20);
  EXPECT_GE(fabric_.Counters().retransmissions, 3u);
}

// --- Close under load
// ------------------------------------------------------------

TEST_F(FaultMatrixTest, CloseWhileSendsAreInFlightDeliversThemAll) {
  options_.send_slots = 32;
  options_.recv_slots = 64;
  ASSERT_NO_FATAL_FAILURE(ConnectOrDie());
  auto [sent, ok] = SendUpTo(60);
  ASSERT_TRUE(ok.ok()) << ok;
  // Close at once, with sends still queued behind unsignalled completions.
  ASSERT_TRUE(client_->Close(In(seconds(5))).ok());
  auto [received, end] = ReceiveAll();
  EXPECT_EQ(received, 60) << end;
  EXPECT_EQ(end.code(), absl::StatusCode::kUnavailable) << end;
  EXPECT_THAT(std::string(end.message()), HasSubstr("closed"));
}

TEST_F(FaultMatrixTest, CloseWhileTheOtherThreadWaitsInReceive) {
  options_.progress = ProgressMode::kEvent;
  ASSERT_NO_FATAL_FAILURE(ConnectOrDie());
  auto waiting = RunInThread(env(), [&] {
    std::vector<std::byte> buffer(64);
    return client_->Receive(buffer, In(seconds(30))).status();
  });
  // Let the receiver block (virtual time moves only once it waits), then
  // close underneath it; a Receive that kept waiting would end only at its
  // 30 s deadline, with kDeadlineExceeded.
  env().SleepUntil(In(milliseconds(10)));
  const Deadline closed_at = env().Now();
  ASSERT_TRUE(client_->Close(In(seconds(5))).ok());
  EXPECT_EQ(waiting.Get().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_LT(env().Now() - closed_at, seconds(1));
}

}  // namespace
}  // namespace rdma_transport
