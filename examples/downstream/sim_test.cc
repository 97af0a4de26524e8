// A downstream project's tests on rdma_transport's simulated NIC: no RDMA
// hardware, deterministic, in virtual time.
#include <chrono>
#include <future>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "sim/fabric.h"
#include "sim/profile_names.h"
#include "sim/sim_testing.h"
#include "sim/sim_verbs.h"
#include "transport/config.h"
#include "transport/connection.h"
#include "transport/context.h"
#include "transport/listener.h"
#include "verbs_shim/env_thread.h"

namespace {

namespace sim = rdma_transport::sim;
using std::chrono::seconds;

// Raw verbs on the simulator: a SEND and an RDMA WRITE between two QPs.
TEST(DownstreamSimTest, SendAndRdmaWriteBetweenTwoEndpoints) {
  sim::Fabric fabric;
  sim::SimVerbs verbs(&fabric);
  absl::StatusOr<sim::DeviceProfile> profile = sim::ProfileByName("e810");
  ASSERT_TRUE(profile.ok()) << profile.status();
  absl::StatusOr<std::unique_ptr<sim::Endpoint>> a =
      sim::Endpoint::Create(&verbs, *fabric.AddDevice(*profile));
  absl::StatusOr<std::unique_ptr<sim::Endpoint>> b =
      sim::Endpoint::Create(&verbs, *fabric.AddDevice(*profile));
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_TRUE((*a)->ConnectTo(**b).ok());
  ASSERT_TRUE((*b)->ConnectTo(**a).ok());

  std::memcpy((*a)->data(), "hello", 5);
  ASSERT_TRUE((*b)->PostRecv(/*wr_id=*/1, /*offset=*/0, /*length=*/64).ok());
  ASSERT_TRUE((*a)->PostSend(/*wr_id=*/2, IBV_WR_SEND, /*offset=*/0, 5).ok());
  absl::StatusOr<std::vector<ibv_wc>> received = (*b)->PollRecvCq();
  ASSERT_TRUE(received.ok()) << received.status();
  ASSERT_EQ(received->size(), 1u);
  EXPECT_EQ((*received)[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ((*received)[0].byte_len, 5u);
  EXPECT_EQ(std::string(reinterpret_cast<char*>((*b)->data()), 5), "hello");

  std::memcpy((*a)->data() + 100, "written", 7);
  ASSERT_TRUE((*a)->PostSend(/*wr_id=*/3, IBV_WR_RDMA_WRITE, /*offset=*/100, 7,
                             IBV_SEND_SIGNALED, /*imm_data=*/0,
                             (*b)->address(1000), (*b)->rkey())
                  .ok());
  absl::StatusOr<std::vector<ibv_wc>> sent = (*a)->PollSendCq();
  ASSERT_TRUE(sent.ok()) << sent.status();
  ASSERT_EQ(sent->size(), 2u);  // the SEND and the WRITE
  EXPECT_EQ((*sent)[1].status, IBV_WC_SUCCESS);
  EXPECT_EQ(std::string(reinterpret_cast<char*>((*b)->data() + 1000), 7),
            "written");
  EXPECT_EQ(fabric.Counters().packets_dropped, 0u);
}

// The transport over the simulator: the peer's NIC dies, Check() says so.
TEST(DownstreamSimTest, TheTransportReportsADeadPeer) {
  sim::Fabric fabric;
  sim::SimVerbs verbs(&fabric);
  std::vector<std::string> devices;
  std::vector<std::unique_ptr<rdma_transport::Context>> contexts;
  for (const char* address : {"10.0.0.1", "10.0.0.2"}) {
    absl::StatusOr<std::string> device =
        fabric.AddDevice(*sim::ProfileByName("cx7"), std::nullopt, address);
    ASSERT_TRUE(device.ok()) << device.status();
    absl::StatusOr<std::unique_ptr<rdma_transport::Context>> context =
        rdma_transport::Context::Open(verbs, *device,
                                      rdma_transport::TransportConfig{});
    ASSERT_TRUE(context.ok()) << context.status();
    devices.push_back(*device);
    contexts.push_back(*std::move(context));
  }
  absl::StatusOr<std::unique_ptr<rdma_transport::Listener>> listener =
      rdma_transport::Listener::Create(*contexts[1], "127.0.0.1:0");
  ASSERT_TRUE(listener.ok()) << listener.status();
  // The transport runs on the fabric's virtual clock: deadlines from its
  // Env, threads through RunInThread.
  rdma_transport::Env& env = fabric.env();
  auto dial = rdma_transport::RunInThread(env, [&] {
    return rdma_transport::Connect(*contexts[0], (*listener)->address());
  });
  absl::StatusOr<std::unique_ptr<rdma_transport::Connection>> server =
      (*listener)->Accept(env.DeadlineIn(seconds(10)));
  absl::StatusOr<std::unique_ptr<rdma_transport::Connection>> client =
      dial.Get();
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_TRUE((*client)->Check(env.DeadlineIn(seconds(5))).ok());

  ASSERT_TRUE(fabric.faults().KillDevice(devices[1]).ok());
  const rdma_transport::Deadline killed = env.Now();
  absl::Status status = (*client)->Check(env.DeadlineIn(seconds(10)));
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  // Noticed after the QP's retry budget (4.096 us * 2^14 * 8 = 0.54 s) of
  // virtual time, in no real time at all.
  EXPECT_LT(env.Now() - killed, seconds(1));

  client->reset();
  server->reset();
  contexts.clear();
  EXPECT_TRUE(fabric.LeakReport().empty());
}

}  // namespace
