// The end-to-end suite over libibverbs: Soft-RoCE in CI's VM, or real NICs.
// RDMA_TEST_CLIENT_DEVICE and RDMA_TEST_SERVER_DEVICE name the devices
// (default rxe0 and rxe1). A missing device is a failure, never a skip: the
// suite runs here only where RDMA is expected.
#include "verbs_shim/ibverbs_backend.h"

#include <cstdlib>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tests/test_backend.h"
#include "transport/connection.h"
#include "transport/qp_bringup.h"

namespace rdma_transport {
namespace {

std::string FromEnvironment(const char* variable, const char* fallback) {
  const char* value = std::getenv(variable);
  return value != nullptr && *value != '\0' ? value : fallback;
}

class IbverbsTestBackend final : public TestBackend {
 public:
  static absl::StatusOr<std::unique_ptr<TestBackend>> Create() {
    auto backend =
        std::unique_ptr<IbverbsTestBackend>(new IbverbsTestBackend());
    backend->client_ = FromEnvironment("RDMA_TEST_CLIENT_DEVICE", "rxe0");
    backend->server_ = FromEnvironment("RDMA_TEST_SERVER_DEVICE", "rxe1");
    absl::StatusOr<std::vector<std::string>> devices =
        backend->verbs_.ListDevices();
    if (!devices.ok()) return devices.status();
    for (const std::string& wanted : {backend->client_, backend->server_}) {
      bool found = false;
      for (const std::string& device : *devices) found |= device == wanted;
      if (!found) {
        return absl::NotFoundError(absl::StrCat(
            "RDMA device \"", wanted, "\" not found (present: [",
            absl::StrJoin(*devices, ", "),
            "]); set RDMA_TEST_CLIENT_DEVICE / RDMA_TEST_SERVER_DEVICE"));
      }
    }
    return backend;
  }

  std::string name() const override { return "ibverbs"; }
  Verbs& verbs() override { return verbs_; }
  std::string client_device() const override { return client_; }
  std::string server_device() const override { return server_; }

  absl::Status KillPeer(Connection& connection) override {
    return ModifyQpToError(verbs_, connection.qp());
  }

 private:
  IbverbsTestBackend() = default;

  IbverbsBackend verbs_;
  std::string client_;
  std::string server_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<TestBackend>> MakeTestBackend() {
  return IbverbsTestBackend::Create();
}

}  // namespace rdma_transport
