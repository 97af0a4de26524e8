// What the libibverbs backend can show on any machine, RDMA or not. The
// behaviour on real devices is covered by the end-to-end suite over rxe.
#include "verbs_shim/ibverbs_backend.h"

#include "gtest/gtest.h"

namespace rdma_transport {
namespace {

TEST(IbverbsBackendTest, ListsDevicesOrNoneWithoutFailing) {
  IbverbsBackend verbs;
  absl::StatusOr<std::vector<std::string>> devices = verbs.ListDevices();
  ASSERT_TRUE(devices.ok()) << devices.status();
  for (const std::string& name : *devices) EXPECT_FALSE(name.empty());
}

TEST(IbverbsBackendTest, OpeningAnUnknownDeviceIsNotFound) {
  IbverbsBackend verbs;
  absl::StatusOr<ibv_context*> context =
      verbs.OpenDevice("no_such_rdma_device_0");
  ASSERT_FALSE(context.ok());
  // kNotFound when the machine has RDMA, or the list error when it has none.
  EXPECT_NE(context.status().message().find("no_such_rdma_device_0") ==
                    std::string_view::npos &&
                context.status().code() == absl::StatusCode::kNotFound,
            true)
      << context.status();
}

}  // namespace
}  // namespace rdma_transport
