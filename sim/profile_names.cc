#include "sim/profile_names.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace rdma_transport::sim {
namespace {

struct NamedProfile {
  const char* name;
  DeviceProfile (*make)();
};

constexpr NamedProfile kProfiles[] = {
    {"cx6", &ConnectX6},
    {"cx7", &ConnectX7},
    {"cx7-ib", &ConnectX7Infiniband},
    {"e810", &IntelE810},
    {"x722", &IntelX722},
    {"erdma", &AlibabaErdma},
    {"rxe", &SoftRoce},
};

}  // namespace

std::vector<std::string> ProfileNames() {
  std::vector<std::string> names;
  for (const NamedProfile& profile : kProfiles) names.push_back(profile.name);
  return names;
}

absl::StatusOr<DeviceProfile> ProfileByName(std::string_view name) {
  for (const NamedProfile& profile : kProfiles) {
    if (name == profile.name) return profile.make();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("no simulated device profile named \"", std::string(name),
                   "\"; known: ", absl::StrJoin(ProfileNames(), ", ")));
}

}  // namespace rdma_transport::sim
