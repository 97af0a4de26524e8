// File: sim/profile_names.h
//
// The stock device profiles by short name, for command-line tools and test
// environments (RDMA_SIM_PROFILE=e810, `rdma_pingpong --profile=cx6`):
//
//   cx6      ConnectX6()             e810   IntelE810()
//   cx7      ConnectX7()             x722   IntelX722()
//   cx7-ib   ConnectX7Infiniband()   erdma  AlibabaErdma()
//                                    rxe    SoftRoce()
//
// Stateless and thread-safe.

#ifndef RDMA_TRANSPORT_SIM_PROFILE_NAMES_H_
#define RDMA_TRANSPORT_SIM_PROFILE_NAMES_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "sim/device_profile.h"

namespace rdma_transport::sim {

// kInvalidArgument naming the valid names for anything else.
absl::StatusOr<DeviceProfile> ProfileByName(std::string_view name);
std::vector<std::string> ProfileNames();

}  // namespace rdma_transport::sim

#endif  // RDMA_TRANSPORT_SIM_PROFILE_NAMES_H_
