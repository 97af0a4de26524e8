#include "sim/fault_injector.h"

#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "sim/internal/fabric_core.h"

namespace rdma_transport::sim {
namespace {

using internal::Device;
using internal::FabricCore;
using internal::ResolvedTarget;

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
  std::lock_guard<std::mutex> lock(core_->mu);
  core_->faults.create_qp.push_back(MakeCallFault(error, times, device));
}

void FaultInjector::RefuseCreateQpAboveInline(uint32_t max_inline_data,
                                              int error, int times,
                                              std::string_view device) {
  std::lock_guard<std::mutex> lock(core_->mu);
  CallFault fault = MakeCallFault(error, times, device);
  fault.when_inline_above = max_inline_data;
  core_->faults.create_qp.push_back(fault);
}

void FaultInjector::FailRegMr(int error, int times, std::string_view device) {
  std::lock_guard<std::mutex> lock(core_->mu);
  core_->faults.reg_mr.push_back(MakeCallFault(error, times, device));
}

void FaultInjector::FailCreateCq(int error, int times,
                                 std::string_view device) {
  std::lock_guard<std::mutex> lock(core_->mu);
  core_->faults.create_cq.push_back(MakeCallFault(error, times, device));
}

void FaultInjector::FailModifyQp(ibv_qp_state from, ibv_qp_state to, int error,
                                 int times, std::string_view device) {
  std::lock_guard<std::mutex> lock(core_->mu);
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
  std::lock_guard<std::mutex> lock(core_->mu);
  absl::StatusOr<ResolvedTarget> resolved = Resolve(*core_, target);
  if (!resolved.ok()) return resolved.status();
  if (count > 0)
    core_->faults.completions.push_back({*resolved, status, count});
  return absl::OkStatus();
}

absl::Status FaultInjector::DropPackets(const FaultTarget& target, int count) {
  std::lock_guard<std::mutex> lock(core_->mu);
  absl::StatusOr<ResolvedTarget> resolved = Resolve(*core_, target);
  if (!resolved.ok()) return resolved.status();
  if (count > 0) core_->faults.drops.push_back({*resolved, count});
  return absl::OkStatus();
}

absl::Status FaultInjector::DelayDelivery(const FaultTarget& target,
                                          std::chrono::nanoseconds delay) {
  std::lock_guard<std::mutex> lock(core_->mu);
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
  std::lock_guard<std::mutex> lock(core_->mu);
  Device* found = core_->FindDevice(device);
  if (found == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("no device named \"", std::string(device), "\""));
  }
  core_->KillDeviceLocked(*found);
  core_->ProgressLocked();
  return absl::OkStatus();
}

absl::Status FaultInjector::ReviveDevice(std::string_view device) {
  std::lock_guard<std::mutex> lock(core_->mu);
  Device* found = core_->FindDevice(device);
  if (found == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("no device named \"", std::string(device), "\""));
  }
  found->dead = false;
  return absl::OkStatus();
}

void FaultInjector::Clear() {
  std::lock_guard<std::mutex> lock(core_->mu);
  core_->faults = internal::FaultPlan{};
}

}  // namespace rdma_transport::sim
