// File: sim/pair_fixture.h
//
// `PairTest`, the gtest fixture of the sim's own tests: a Fabric, a SimVerbs
// and two Endpoints `a_` and `b_` on two devices, connected to each other.
// TearDown closes both and checks the fabric has no live object left.
//
//   TEST_F(PairTest, Works) {
//     ASSERT_NO_FATAL_FAILURE(Connect());
//     ASSERT_OK(b_->PostRecv(1, 0, 64));
//     ...
//   }
//
// Test-only; not thread-safe.

#ifndef RDMA_TRANSPORT_SIM_PAIR_FIXTURE_H_
#define RDMA_TRANSPORT_SIM_PAIR_FIXTURE_H_

#include <fcntl.h>

#include <cerrno>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "sim/device_profile.h"
#include "sim/fabric.h"
#include "sim/sim_testing.h"
#include "sim/sim_verbs.h"
#include "sim/test_macros.h"

namespace rdma_transport::sim {

class PairTest : public ::testing::Test {
 protected:
  // Creates the fabric (once) and two devices of `profile_a`/`profile_b`
  // with an endpoint each; Connect() also connects them.
  void CreatePair(const DeviceProfile& profile_a = ConnectX6(),
                  const DeviceProfile& profile_b = ConnectX6(),
                  const EndpointOptions& endpoint_options = {},
                  const FabricOptions& fabric_options = {}) {
    fabric_ = std::make_unique<Fabric>(fabric_options);
    verbs_ = std::make_unique<SimVerbs>(fabric_.get());
    absl::StatusOr<std::string> device_a = fabric_->AddDevice(profile_a);
    ASSERT_OK(device_a);
    absl::StatusOr<std::string> device_b = fabric_->AddDevice(profile_b);
    ASSERT_OK(device_b);
    ASSERT_OK_AND_ASSIGN(
        a_, Endpoint::Create(verbs_.get(), *device_a, endpoint_options));
    ASSERT_OK_AND_ASSIGN(
        b_, Endpoint::Create(verbs_.get(), *device_b, endpoint_options));
  }

  void Connect(const DeviceProfile& profile_a = ConnectX6(),
               const DeviceProfile& profile_b = ConnectX6(),
               const EndpointOptions& endpoint_options = {},
               const ConnectOptions& connect_options = {},
               const FabricOptions& fabric_options = {}) {
    ASSERT_NO_FATAL_FAILURE(
        CreatePair(profile_a, profile_b, endpoint_options, fabric_options));
    ASSERT_OK(a_->ConnectTo(*b_, connect_options));
    ASSERT_OK(b_->ConnectTo(*a_, connect_options));
  }

  void TearDown() override {
    if (a_ != nullptr) {
      EXPECT_OK(a_->Close());
    }
    if (b_ != nullptr) {
      EXPECT_OK(b_->Close());
    }
    a_.reset();
    b_.reset();
    if (fabric_ != nullptr) {
      for (const LiveObject& leak : fabric_->LeakReport()) {
        ADD_FAILURE() << "leaked " << leak.ToString();
      }
    }
  }

  // Exactly one completion from `cq`.
  static ibv_wc PollOne(Endpoint& endpoint, ibv_cq* cq) {
    ibv_wc wc[2] = {};
    absl::StatusOr<int> count = endpoint.verbs()->PollCq(cq, 2, wc);
    EXPECT_TRUE(count.ok()) << count.status();
    EXPECT_EQ(count.value_or(0), 1);
    return wc[0];
  }
  static ibv_wc PollOneSend(Endpoint& endpoint) {
    return PollOne(endpoint, endpoint.send_cq());
  }
  static ibv_wc PollOneRecv(Endpoint& endpoint) {
    return PollOne(endpoint, endpoint.recv_cq());
  }
  // Every async event pending on `context`, oldest first, each acknowledged
  // (so the objects can be destroyed; the element pointers stay comparable).
  // Makes the context's async_fd non-blocking.
  static std::vector<ibv_async_event> TakeAsyncEvents(Verbs& verbs,
                                                      ibv_context* context) {
    const int flags = fcntl(context->async_fd, F_GETFL);
    EXPECT_EQ(fcntl(context->async_fd, F_SETFL, flags | O_NONBLOCK), 0);
    std::vector<ibv_async_event> events;
    while (true) {
      ibv_async_event event{};
      absl::Status status = verbs.GetAsyncEvent(context, &event);
      if (!status.ok()) {
        EXPECT_EQ(VerbsErrno(status), EAGAIN) << status;
        return events;
      }
      verbs.AckAsyncEvent(&event);
      events.push_back(event);
    }
  }
  static std::vector<ibv_async_event> TakeAsyncEvents(Endpoint& endpoint) {
    return TakeAsyncEvents(*endpoint.verbs(), endpoint.context());
  }
  static ibv_port_state PortState(Endpoint& endpoint) {
    ibv_port_attr port{};
    EXPECT_OK(endpoint.verbs()->QueryPort(endpoint.context(), 1, &port));
    return port.state;
  }
  static ibv_qp_state QpState(Endpoint& endpoint) {
    ibv_qp_attr attr{};
    ibv_qp_init_attr init{};
    EXPECT_OK(
        endpoint.verbs()->QueryQp(endpoint.qp(), &attr, IBV_QP_STATE, &init));
    return attr.qp_state;
  }

  std::unique_ptr<Fabric> fabric_;
  std::unique_ptr<SimVerbs> verbs_;
  std::unique_ptr<Endpoint> a_;
  std::unique_ptr<Endpoint> b_;
};

}  // namespace rdma_transport::sim

#endif  // RDMA_TRANSPORT_SIM_PAIR_FIXTURE_H_
