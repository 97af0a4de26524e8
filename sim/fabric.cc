#include "sim/fabric.h"

#include <arpa/inet.h>

#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>

#include "absl/strings/str_cat.h"
#include "sim/internal/fabric_core.h"
#include "sim/internal/link.h"

namespace rdma_transport::sim {
namespace {

using internal::Device;
using internal::FabricCore;

// The GID table of a device: on Ethernet, index 0 is the link-local GID built
// from a made-up MAC (02:53:49:4d:hh:ll, "SIM" plus the device index) and
// index 1 the RoCE v2 IPv4-mapped GID, unless the profile gives its own
// layout; on InfiniBand, index 0 is fe80::GUID. kInvalidArgument or
// kAlreadyExists for a layout AddDevice must refuse (sim/device_profile.h).
absl::Status FillGidTable(Device& device, const FabricCore& core) {
  const size_t length = static_cast<size_t>(device.profile.gid_table_length);
  device.gid_table.assign(length, ibv_gid_entry{});
  device.gid_valid.assign(length, false);
  device.gid_create_ah_errno.assign(length, 0);
  for (size_t i = 0; i < length; ++i) {
    device.gid_table[i].gid_index = static_cast<uint32_t>(i);
    device.gid_table[i].port_num = 1;
  }
  auto fill = [&device](size_t index, const ibv_gid& gid, ibv_gid_type type) {
    if (index >= device.gid_table.size()) return;
    ibv_gid_entry& entry = device.gid_table[index];
    entry.gid = gid;
    entry.gid_type = type;
    entry.ndev_ifindex = device.is_ethernet() ? device.index + 2 : 0;
    device.gid_valid[index] = true;
  };
  ibv_gid link_local{};
  link_local.raw[0] = 0xfe;
  link_local.raw[1] = 0x80;
  for (int i = 0; i < 8; ++i) {
    link_local.raw[8 + i] =
        static_cast<uint8_t>(device.node_guid >> (56 - 8 * i));
  }
  if (!device.is_ethernet()) {
    if (!device.profile.gid_layout.empty()) {
      return absl::InvalidArgumentError(
          "DeviceProfile::gid_layout is for Ethernet (RoCE) ports only");
    }
    fill(0, link_local, IBV_GID_TYPE_IB);
    return absl::OkStatus();
  }
  ibv_gid mapped{};
  mapped.raw[10] = 0xff;
  mapped.raw[11] = 0xff;
  for (int i = 0; i < 4; ++i) {
    mapped.raw[12 + i] = static_cast<uint8_t>(device.ipv4 >> (24 - 8 * i));
  }
  if (device.profile.gid_layout.empty()) {
    fill(0, link_local, device.profile.link_local_gid_type);
    fill(1, mapped, IBV_GID_TYPE_ROCE_V2);
    return absl::OkStatus();
  }
  for (const GidSlot& slot : device.profile.gid_layout) {
    const std::string what =
        absl::StrCat("gid_layout slot ", slot.index, " (\"", slot.gid, "\")");
    if (slot.index >= length) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": beyond gid_table_length ", length));
    }
    if (device.gid_valid[slot.index]) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": index given twice"));
    }
    ibv_gid gid{};
    if (slot.gid == kDeviceIpv4Gid) {
      gid = mapped;
    } else if (slot.gid == kLinkLocalGid) {
      gid = link_local;
    } else if (inet_pton(AF_INET6, slot.gid.c_str(), gid.raw) != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": not an IPv6 address, \"", kDeviceIpv4Gid,
                       "\" or \"", kLinkLocalGid, "\""));
    }
    static constexpr uint8_t kZero[16] = {};
    if (std::memcmp(gid.raw, kZero, sizeof(kZero)) == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": the all-zero GID marks an empty slot"));
    }
    for (size_t i = 0; i < length; ++i) {
      if (device.gid_valid[i] &&
          std::memcmp(device.gid_table[i].gid.raw, gid.raw, 16) == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": the same GID as index ", i));
      }
    }
    for (const auto& other : core.devices) {
      for (size_t i = 0; i < other->gid_table.size(); ++i) {
        if (other->gid_valid[i] &&
            std::memcmp(other->gid_table[i].gid.raw, gid.raw, 16) == 0) {
          return absl::AlreadyExistsError(absl::StrCat(
              what, ": device ", other->name, " holds it at index ", i));
        }
      }
    }
    fill(slot.index, gid, slot.type);
    device.gid_create_ah_errno[slot.index] = slot.create_ah_errno;
  }
  return absl::OkStatus();
}

void FillVerbsDevice(Device& device) {
  ibv_device& verbs = device.verbs_device;
  verbs.node_type = IBV_NODE_CA;
  verbs.transport_type = IBV_TRANSPORT_IB;
  std::snprintf(verbs.name, sizeof(verbs.name), "%s", device.name.c_str());
  std::snprintf(verbs.dev_name, sizeof(verbs.dev_name), "uverbs%u",
                device.index);
  std::snprintf(verbs.dev_path, sizeof(verbs.dev_path),
                "/sys/class/infiniband_verbs/uverbs%u", device.index);
  std::snprintf(verbs.ibdev_path, sizeof(verbs.ibdev_path),
                "/sys/class/infiniband/%s", device.name.c_str());
}

// The device named `name`; kNotFound naming it.
absl::StatusOr<const Device*> FindNamedDevice(const FabricCore& core,
                                              std::string_view name) {
  const Device* found = core.FindDevice(name);
  if (found == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("no device named \"", std::string(name), "\""));
  }
  return found;
}

}  // namespace

std::string LiveObject::ToString() const {
  return absl::StrCat(kind, " ", handle, " on ", device);
}

Fabric::Fabric(FabricOptions options)
    : core_(std::make_unique<FabricCore>(options)),
      faults_(core_.get()),
      env_(std::make_unique<SimEnv>(this, options.clock)) {
  faults_.env_ = env_.get();
}

Fabric::~Fabric() {
  const std::vector<LiveObject> leaks = LeakReport();
  if (leaks.empty()) return;
  std::fprintf(stderr, "sim::Fabric destroyed with %zu verbs objects alive:\n",
               leaks.size());
  for (const LiveObject& leak : leaks) {
    std::fprintf(stderr, "  %s\n", leak.ToString().c_str());
  }
}

absl::StatusOr<std::string> Fabric::AddDevice(const DeviceProfile& profile,
                                              std::optional<std::string> name,
                                              std::optional<std::string> ipv4) {
  std::lock_guard<internal::CoreMutex> lock(core_->mu);
  auto device = std::make_unique<Device>();
  device->index = static_cast<uint32_t>(core_->devices.size());
  device->profile = profile;
  device->link_mbps = core_->options.link_gbps > 0
                          ? uint64_t{core_->options.link_gbps} * 1000
                          : internal::LinkRateMbps(profile);
  if (name.has_value()) {
    if (name->empty() || name->size() >= IBV_SYSFS_NAME_MAX) {
      return absl::InvalidArgumentError(
          absl::StrCat("device name \"", *name, "\" must have 1..",
                       IBV_SYSFS_NAME_MAX - 1, " characters"));
    }
    if (core_->FindDevice(*name) != nullptr) {
      return absl::AlreadyExistsError(
          absl::StrCat("a device named \"", *name, "\" exists"));
    }
    device->name = *name;
  } else {
    for (int n = 0;; ++n) {
      std::string candidate = absl::StrCat(profile.name_prefix, "_", n);
      if (core_->FindDevice(candidate) == nullptr) {
        device->name = std::move(candidate);
        break;
      }
    }
  }
  auto address_taken = [this](uint32_t address) {
    for (const auto& other : core_->devices) {
      if (other->ipv4 == address) return true;
    }
    return false;
  };
  if (ipv4.has_value()) {
    in_addr parsed{};
    if (inet_pton(AF_INET, ipv4->c_str(), &parsed) != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("\"", *ipv4, "\" is not an IPv4 address"));
    }
    device->ipv4 = ntohl(parsed.s_addr);
    if (address_taken(device->ipv4)) {
      return absl::AlreadyExistsError(
          absl::StrCat("another device has address ", *ipv4));
    }
  } else {
    uint32_t host = device->index + 1;
    while (address_taken((10u << 24) | host)) ++host;
    device->ipv4 = (10u << 24) | host;
  }
  device->lid = static_cast<uint16_t>(device->index + 1);
  device->node_guid = 0x005349fffe4d0000ull | (device->index & 0xffff);
  if (absl::Status status = FillGidTable(*device, *core_); !status.ok()) {
    return status;
  }
  FillVerbsDevice(*device);
  std::string result = device->name;
  core_->devices.push_back(std::move(device));
  return result;
}

std::vector<std::string> Fabric::DeviceNames() const {
  std::lock_guard<internal::CoreMutex> lock(core_->mu);
  std::vector<std::string> names;
  for (const auto& device : core_->devices) names.push_back(device->name);
  return names;
}

ProgressMode Fabric::progress_mode() const {
  std::lock_guard<internal::CoreMutex> lock(core_->mu);
  return core_->options.progress_mode;
}

void Fabric::set_progress_mode(ProgressMode mode) {
  std::lock_guard<internal::CoreMutex> lock(core_->mu);
  core_->options.progress_mode = mode;
  core_->ProgressLocked();
}

std::chrono::nanoseconds Fabric::Now() const {
  std::lock_guard<internal::CoreMutex> lock(core_->mu);
  return core_->now;
}

size_t Fabric::RunUntilIdle() {
  size_t count;
  {
    std::lock_guard<internal::CoreMutex> lock(core_->mu);
    count = core_->RunUntilIdleLocked();
  }
  env_->Notify();
  return count;
}

bool Fabric::Step() {
  bool stepped;
  {
    std::lock_guard<internal::CoreMutex> lock(core_->mu);
    stepped = core_->StepLocked();
  }
  env_->Notify();
  return stepped;
}

size_t Fabric::AdvanceClock(std::chrono::nanoseconds duration) {
  size_t count;
  {
    std::lock_guard<internal::CoreMutex> lock(core_->mu);
    count = core_->AdvanceClockLocked(duration);
  }
  env_->Notify();
  return count;
}

void Fabric::AdvanceClockQuietly(std::chrono::nanoseconds duration) {
  std::lock_guard<internal::CoreMutex> lock(core_->mu);
  core_->AdvanceClockLocked(duration);
}

std::optional<std::chrono::nanoseconds> Fabric::NextEventTime() const {
  std::lock_guard<internal::CoreMutex> lock(core_->mu);
  return core_->NextEventTimeLocked();
}

size_t Fabric::PendingEvents() const {
  std::lock_guard<internal::CoreMutex> lock(core_->mu);
  return core_->PendingEventCountLocked();
}

SimCounters Fabric::Counters() const {
  std::lock_guard<internal::CoreMutex> lock(core_->mu);
  SimCounters total;
  for (const auto& device : core_->devices) total += device->counters;
  return total;
}

absl::StatusOr<SimCounters> Fabric::DeviceCounters(
    std::string_view device) const {
  std::lock_guard<internal::CoreMutex> lock(core_->mu);
  absl::StatusOr<const Device*> found = FindNamedDevice(*core_, device);
  if (!found.ok()) return found.status();
  return (*found)->counters;
}

absl::Status Fabric::ConfigureSwitch(const SwitchOptions& options) {
  std::lock_guard<internal::CoreMutex> lock(core_->mu);
  return core_->ConfigureSwitchLocked(options);
}

absl::StatusOr<SwitchPortCounters> Fabric::SwitchCounters(
    std::string_view device) const {
  std::lock_guard<internal::CoreMutex> lock(core_->mu);
  absl::StatusOr<const Device*> found = FindNamedDevice(*core_, device);
  if (!found.ok()) return found.status();
  const uint32_t index = (*found)->index;
  if (index >= core_->switch_ports.size()) return SwitchPortCounters{};
  return core_->switch_ports[index].counters();
}

std::vector<LiveObject> Fabric::LeakReport() const {
  std::lock_guard<internal::CoreMutex> lock(core_->mu);
  return core_->LeakReportLocked();
}

uint64_t Fabric::TraceDigest() const {
  std::lock_guard<internal::CoreMutex> lock(core_->mu);
  return core_->trace.digest();
}

absl::StatusOr<double> Fabric::LinkGbps(std::string_view device) const {
  std::lock_guard<internal::CoreMutex> lock(core_->mu);
  const internal::Device* found = core_->FindDevice(device);
  if (found == nullptr) {
    return absl::NotFoundError(absl::StrCat("no device ", std::string(device)));
  }
  return static_cast<double>(found->link_mbps) / 1000.0;
}

uint64_t Fabric::EventsRun() const {
  std::lock_guard<internal::CoreMutex> lock(core_->mu);
  return core_->events_run;
}

}  // namespace rdma_transport::sim
