#include "sim/fault_injector.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "sim/internal/fabric_core.h"

namespace rdma_transport::sim {
namespace {

// Declared before the fabric's lock in a fault that may end another
// thread's wait (an async event, a flush, a lost port): tells the fabric's
// SimEnv once the lock is released.
class NotifyWaiters {
 public:
  explicit NotifyWaiters(Env* env) : env_(env) {}
  ~NotifyWaiters() {
    if (env_ != nullptr) env_->Notify();
  }

 private:
  Env* const env_;
};

using internal::Device;
using internal::FabricCore;
using internal::Nanos;
using internal::ResolvedTarget;
using internal::ScheduledFault;
using internal::SimCq;
using internal::SimQp;

absl::Status NoSuchDevice(std::string_view device) {
  return absl::NotFoundError(
      absl::StrCat("no device named \"", std::string(device), "\""));
}

absl::Status NoSuchQp(uint32_t qp_num) {
  return absl::NotFoundError(absl::StrCat("no QP numbered ", qp_num));
}

// ::ffff:a.b.c.d, the RoCE v2 GID of an IPv4 address in host byte order.
ibv_gid Ipv4MappedGid(uint32_t ipv4) {
  ibv_gid gid{};
  gid.raw[10] = 0xff;
  gid.raw[11] = 0xff;
  for (int i = 0; i < 4; ++i) {
    gid.raw[12 + i] = static_cast<uint8_t>(ipv4 >> (24 - 8 * i));
  }
  return gid;
}

// Checks that slot `index` exists on `device` and that no other slot of any
// device holds `gid`.
absl::Status CheckGidSlot(const FabricCore& core, const Device& device,
                          uint32_t index, const ibv_gid& gid) {
  if (index >= device.gid_table.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("GID index ", index, " is beyond ", device.name,
                     "'s table of ", device.gid_table.size()));
  }
  const ibv_gid zero{};
  if (std::memcmp(gid.raw, zero.raw, sizeof(gid.raw)) == 0) {
    return absl::InvalidArgumentError(
        "the all-zero GID is no address (RemoveGid empties a slot)");
  }
  for (const auto& other : core.devices) {
    for (size_t i = 0; i < other->gid_table.size(); ++i) {
      if (other.get() == &device && i == index) continue;
      if (other->gid_valid[i] && std::memcmp(other->gid_table[i].gid.raw,
                                             gid.raw, sizeof(gid.raw)) == 0) {
        return absl::AlreadyExistsError(absl::StrCat(
            "GID index ", i, " of ", other->name, " holds that GID already"));
      }
    }
  }
  return absl::OkStatus();
}

// A CQ already in error (overrun or injected) raises nothing more: one
// error, one event.
void InjectCqErrorLocked(FabricCore& core, SimCq& cq) {
  if (cq.in_error()) return;
  cq.error_injected = true;
  core.RaiseCqErrorLocked(cq);
  core.ProgressLocked();
}

absl::Status ScheduleFault(FabricCore& core, std::string_view device, Nanos at,
                           ScheduledFault fault) {
  std::lock_guard<internal::CoreMutex> lock(core.mu);
  const Device* found = core.FindDevice(device);
  if (found == nullptr) return NoSuchDevice(device);
  if (at < core.now) {
    return absl::InvalidArgumentError(absl::StrCat(
        "fault scheduled at ", at.count(), " ns, before the virtual clock's ",
        core.now.count(), " ns"));
  }
  // Not run now, even in kImmediate: the work the test posts next must be
  // able to run up to `at` first.
  core.ScheduleFaultLocked(at, fault, *found);
  return absl::OkStatus();
}

absl::StatusOr<ResolvedTarget> Resolve(const FabricCore& core,
                                       const FaultTarget& target) {
  ResolvedTarget resolved;
  resolved.qp_num = target.qp_num;
  if (!target.device.empty()) {
    const Device* device = core.FindDevice(target.device);
    if (device == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("no device named \"", target.device, "\""));
    }
    resolved.device = static_cast<int>(device->index);
  }
  return resolved;
}

using CallFault = internal::FaultPlan::CallFault;
using PacketFaults = std::vector<internal::FaultPlan::PacketFault>;

// DropPackets and DuplicatePackets: `count` packets to `target` more in the
// plan's `list`.
absl::Status AddPacketFault(FabricCore& core, PacketFaults& list,
                            const FaultTarget& target, int count) {
  absl::StatusOr<ResolvedTarget> resolved = Resolve(core, target);
  if (!resolved.ok()) return resolved.status();
  if (count > 0) list.push_back({*resolved, count});
  return absl::OkStatus();
}

CallFault MakeCallFault(int error, int times, std::string_view device) {
  CallFault fault;
  fault.error = error;
  fault.times = times;
  fault.device = std::string(device);
  return fault;
}

}  // namespace

void FaultInjector::RefuseCreateQp(int error, int times,
                                   std::string_view device) {
  const NotifyWaiters notify(env_);
  std::lock_guard<internal::CoreMutex> lock(core_->mu);
  core_->faults.create_qp.push_back(MakeCallFault(error, times, device));
}

void FaultInjector::RefuseCreateQpAboveInline(uint32_t max_inline_data,
                                              int error, int times,
                                              std::string_view device) {
  const NotifyWaiters notify(env_);
  std::lock_guard<internal::CoreMutex> lock(core_->mu);
  CallFault fault = MakeCallFault(error, times, device);
  fault.when_inline_above = max_inline_data;
  core_->faults.create_qp.push_back(fault);
}

void FaultInjector::FailRegMr(int error, int times, std::string_view device) {
  const NotifyWaiters notify(env_);
  std::lock_guard<internal::CoreMutex> lock(core_->mu);
  core_->faults.reg_mr.push_back(MakeCallFault(error, times, device));
}

void FaultInjector::FailCreateCq(int error, int times,
                                 std::string_view device) {
  const NotifyWaiters notify(env_);
  std::lock_guard<internal::CoreMutex> lock(core_->mu);
  core_->faults.create_cq.push_back(MakeCallFault(error, times, device));
}

void FaultInjector::FailModifyQp(ibv_qp_state from, ibv_qp_state to, int error,
                                 int times, std::string_view device) {
  const NotifyWaiters notify(env_);
  std::lock_guard<internal::CoreMutex> lock(core_->mu);
  CallFault fault = MakeCallFault(error, times, device);
  fault.from = from;
  fault.to = to;
  core_->faults.modify_qp.push_back(fault);
}

absl::Status FaultInjector::FailCompletions(const FaultTarget& target,
                                            ibv_wc_status status, int count) {
  if (status == IBV_WC_SUCCESS) {
    return absl::InvalidArgumentError(
        "FailCompletions needs an error status, not IBV_WC_SUCCESS");
  }
  const NotifyWaiters notify(env_);
  std::lock_guard<internal::CoreMutex> lock(core_->mu);
  absl::StatusOr<ResolvedTarget> resolved = Resolve(*core_, target);
  if (!resolved.ok()) return resolved.status();
  if (count > 0)
    core_->faults.completions.push_back({*resolved, status, count});
  return absl::OkStatus();
}

absl::Status FaultInjector::DropPackets(const FaultTarget& target, int count) {
  const NotifyWaiters notify(env_);
  std::lock_guard<internal::CoreMutex> lock(core_->mu);
  return AddPacketFault(*core_, core_->faults.drops, target, count);
}

absl::Status FaultInjector::DuplicatePackets(const FaultTarget& target,
                                             int count) {
  const NotifyWaiters notify(env_);
  std::lock_guard<internal::CoreMutex> lock(core_->mu);
  return AddPacketFault(*core_, core_->faults.duplicates, target, count);
}

absl::Status FaultInjector::DelayDelivery(const FaultTarget& target,
                                          std::chrono::nanoseconds delay) {
  const NotifyWaiters notify(env_);
  std::lock_guard<internal::CoreMutex> lock(core_->mu);
  absl::StatusOr<ResolvedTarget> resolved = Resolve(*core_, target);
  if (!resolved.ok()) return resolved.status();
  auto& delays = core_->faults.delays;
  std::erase_if(delays, [&resolved](const auto& fault) {
    return fault.target.device == resolved->device &&
           fault.target.qp_num == resolved->qp_num;
  });
  if (delay.count() > 0) delays.push_back({*resolved, delay});
  return absl::OkStatus();
}

absl::Status FaultInjector::KillDevice(std::string_view device) {
  const NotifyWaiters notify(env_);
  std::lock_guard<internal::CoreMutex> lock(core_->mu);
  Device* found = core_->FindDevice(device);
  if (found == nullptr) return NoSuchDevice(device);
  core_->KillDeviceLocked(*found);
  core_->ProgressLocked();
  return absl::OkStatus();
}

absl::Status FaultInjector::ReviveDevice(std::string_view device) {
  const NotifyWaiters notify(env_);
  std::lock_guard<internal::CoreMutex> lock(core_->mu);
  Device* found = core_->FindDevice(device);
  if (found == nullptr) return NoSuchDevice(device);
  found->dead = false;
  return absl::OkStatus();
}

absl::Status FaultInjector::PortDown(std::string_view device) {
  const NotifyWaiters notify(env_);
  std::lock_guard<internal::CoreMutex> lock(core_->mu);
  Device* found = core_->FindDevice(device);
  if (found == nullptr) return NoSuchDevice(device);
  core_->PortDownLocked(*found);
  core_->ProgressLocked();
  return absl::OkStatus();
}

absl::Status FaultInjector::PortUp(std::string_view device) {
  const NotifyWaiters notify(env_);
  std::lock_guard<internal::CoreMutex> lock(core_->mu);
  Device* found = core_->FindDevice(device);
  if (found == nullptr) return NoSuchDevice(device);
  core_->PortUpLocked(*found);
  core_->ProgressLocked();
  return absl::OkStatus();
}

absl::Status FaultInjector::ChangeGid(std::string_view device, uint32_t index,
                                      const ibv_gid& gid, ibv_gid_type type) {
  const NotifyWaiters notify(env_);
  std::lock_guard<internal::CoreMutex> lock(core_->mu);
  Device* found = core_->FindDevice(device);
  if (found == nullptr) return NoSuchDevice(device);
  if (absl::Status valid = CheckGidSlot(*core_, *found, index, gid);
      !valid.ok()) {
    return valid;
  }
  core_->SetGidLocked(*found, index, gid, type);
  core_->ProgressLocked();
  return absl::OkStatus();
}

absl::Status FaultInjector::ChangeIpv4(std::string_view device,
                                       std::string_view ipv4) {
  const NotifyWaiters notify(env_);
  std::lock_guard<internal::CoreMutex> lock(core_->mu);
  Device* found = core_->FindDevice(device);
  if (found == nullptr) return NoSuchDevice(device);
  if (!found->is_ethernet()) {
    return absl::FailedPreconditionError(absl::StrCat(
        found->name, " is an InfiniBand device: it has no IPv4 GID"));
  }
  const std::string text(ipv4);
  in_addr parsed{};
  if (inet_pton(AF_INET, text.c_str(), &parsed) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", text, "\" is not an IPv4 address"));
  }
  const uint32_t address = ntohl(parsed.s_addr);
  for (const auto& other : core_->devices) {
    if (other.get() != found && other->ipv4 == address) {
      return absl::AlreadyExistsError(
          absl::StrCat(other->name, " has address ", text));
    }
  }
  constexpr uint32_t kRoceV2Index = 1;
  const ibv_gid gid = Ipv4MappedGid(address);
  if (absl::Status valid = CheckGidSlot(*core_, *found, kRoceV2Index, gid);
      !valid.ok()) {
    return valid;
  }
  found->ipv4 = address;
  core_->SetGidLocked(*found, kRoceV2Index, gid, IBV_GID_TYPE_ROCE_V2);
  core_->ProgressLocked();
  return absl::OkStatus();
}

absl::Status FaultInjector::RemoveGid(std::string_view device, uint32_t index) {
  const NotifyWaiters notify(env_);
  std::lock_guard<internal::CoreMutex> lock(core_->mu);
  Device* found = core_->FindDevice(device);
  if (found == nullptr) return NoSuchDevice(device);
  if (index >= found->gid_table.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("GID index ", index, " is beyond ", found->name,
                     "'s table of ", found->gid_table.size()));
  }
  if (!found->gid_valid[index]) {
    return absl::NotFoundError(
        absl::StrCat("GID index ", index, " of ", found->name, " is empty"));
  }
  core_->SetGidLocked(*found, index, std::nullopt, IBV_GID_TYPE_ROCE_V2);
  core_->ProgressLocked();
  return absl::OkStatus();
}

absl::Status FaultInjector::RaiseQpFatal(uint32_t qp_num) {
  const NotifyWaiters notify(env_);
  std::lock_guard<internal::CoreMutex> lock(core_->mu);
  SimQp* qp = core_->FindQpByNum(qp_num);
  if (qp == nullptr) return NoSuchQp(qp_num);
  core_->RaiseQpFatalLocked(*qp);
  core_->ProgressLocked();
  return absl::OkStatus();
}

absl::Status FaultInjector::RaiseCqError(std::string_view device,
                                         uint32_t cq_handle) {
  const NotifyWaiters notify(env_);
  std::lock_guard<internal::CoreMutex> lock(core_->mu);
  const Device* found = core_->FindDevice(device);
  if (found == nullptr) return NoSuchDevice(device);
  auto it = core_->cqs_by_id.find(cq_handle);
  if (it == core_->cqs_by_id.end() || it->second->context->device != found) {
    return absl::NotFoundError(
        absl::StrCat("no CQ with handle ", cq_handle, " on ", found->name));
  }
  InjectCqErrorLocked(*core_, *it->second);
  return absl::OkStatus();
}

absl::Status FaultInjector::RaiseCqErrorOfQp(uint32_t qp_num, QpCq which) {
  const NotifyWaiters notify(env_);
  std::lock_guard<internal::CoreMutex> lock(core_->mu);
  SimQp* qp = core_->FindQpByNum(qp_num);
  if (qp == nullptr) return NoSuchQp(qp_num);
  InjectCqErrorLocked(*core_,
                      which == QpCq::kSend ? *qp->send_cq : *qp->recv_cq);
  return absl::OkStatus();
}

absl::Status FaultInjector::KillDeviceAt(std::string_view device,
                                         std::chrono::nanoseconds at) {
  return ScheduleFault(*core_, device, at, ScheduledFault::kKillDevice);
}

absl::Status FaultInjector::PortDownAt(std::string_view device,
                                       std::chrono::nanoseconds at) {
  return ScheduleFault(*core_, device, at, ScheduledFault::kPortDown);
}

absl::Status FaultInjector::PortUpAt(std::string_view device,
                                     std::chrono::nanoseconds at) {
  return ScheduleFault(*core_, device, at, ScheduledFault::kPortUp);
}

void FaultInjector::Clear() {
  const NotifyWaiters notify(env_);
  std::lock_guard<internal::CoreMutex> lock(core_->mu);
  core_->faults = internal::FaultPlan{};
  ++core_->fault_generation;  // Cancels the scheduled faults not yet run.
}

}  // namespace rdma_transport::sim
