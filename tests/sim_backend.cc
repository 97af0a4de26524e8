// The end-to-end suite's simulated backend: two NICs of one profile on a
// fresh fabric per test. RDMA_SIM_PROFILE picks the profile by its short
// name (sim/profile_names.h; default cx7).
#include <cstdlib>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "sim/device_profile.h"
#include "sim/fabric.h"
#include "sim/profile_names.h"
#include "sim/sim_verbs.h"
#include "tests/test_backend.h"
#include "transport/connection.h"
#include "verbs_shim/verbs_error.h"

namespace rdma_transport {
namespace {

absl::StatusOr<sim::DeviceProfile> ProfileFromEnvironment() {
  const char* name = std::getenv("RDMA_SIM_PROFILE");
  absl::StatusOr<sim::DeviceProfile> profile =
      sim::ProfileByName(name != nullptr ? name : "cx7");
  if (!profile.ok()) return WithContext(profile.status(), "RDMA_SIM_PROFILE");
  return profile;
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
