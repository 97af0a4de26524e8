// The end-to-end suite's simulated backend: two NICs of one profile on a
// fresh fabric per test. RDMA_SIM_PROFILE picks the profile (cx6, cx7, e810,
// x722, erdma, rxe; default cx7).
#include <cstdlib>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "sim/device_profile.h"
#include "sim/fabric.h"
#include "sim/sim_verbs.h"
#include "tests/test_backend.h"
#include "transport/connection.h"

namespace rdma_transport {
namespace {

absl::StatusOr<sim::DeviceProfile> ProfileFromEnvironment() {
  const char* name = std::getenv("RDMA_SIM_PROFILE");
  const std::string profile = name != nullptr ? name : "cx7";
  if (profile == "cx6") return sim::ConnectX6();
  if (profile == "cx7") return sim::ConnectX7();
  if (profile == "e810") return sim::IntelE810();
  if (profile == "x722") return sim::IntelX722();
  if (profile == "erdma") return sim::AlibabaErdma();
  if (profile == "rxe") return sim::SoftRoce();
  return absl::InvalidArgumentError(
      absl::StrCat("RDMA_SIM_PROFILE=\"", profile,
                   "\" is not one of cx6, cx7, e810, x722, erdma, rxe"));
}

class SimBackend final : public TestBackend {
 public:
  static absl::StatusOr<std::unique_ptr<TestBackend>> Create() {
    absl::StatusOr<sim::DeviceProfile> profile = ProfileFromEnvironment();
    if (!profile.ok()) return profile.status();
    auto backend = std::unique_ptr<SimBackend>(new SimBackend());
    absl::StatusOr<std::string> client =
        backend->fabric_.AddDevice(*profile, std::nullopt, "10.0.0.1");
    if (!client.ok()) return client.status();
    absl::StatusOr<std::string> server =
        backend->fabric_.AddDevice(*profile, std::nullopt, "10.0.0.2");
    if (!server.ok()) return server.status();
    backend->client_ = *client;
    backend->server_ = *server;
    return backend;
  }

  std::string name() const override { return "sim"; }
  Verbs& verbs() override { return verbs_; }
  std::string client_device() const override { return client_; }
  std::string server_device() const override { return server_; }
  sim::Fabric* fabric() override { return &fabric_; }

  absl::Status KillPeer(Connection& connection) override {
    return fabric_.faults().KillDevice(connection.context().device_name());
  }

 private:
  SimBackend() : verbs_(&fabric_) {}

  sim::Fabric fabric_;
  sim::SimVerbs verbs_;
  std::string client_;
  std::string server_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<TestBackend>> MakeTestBackend() {
  return SimBackend::Create();
}

}  // namespace rdma_transport
