// The faults that raise asynchronous events: port state changes, GID table
// changes, fatal QP and CQ errors, and faults scheduled at a virtual time.
// See fabric_core.h for the locking contract and fault_injector.h for what
// each one means to a verbs user.

#include <infiniband/verbs.h>

#include <optional>

#include "sim/internal/fabric_core.h"

namespace rdma_transport::sim::internal {

void FabricCore::PortDownLocked(Device& device) {
  if (device.port_down) return;
  const bool was_active = device.link_up();
  device.port_down = true;
  // QPs are left alone, as on hardware: they fail when their retries run
  // out, because every packet to or from the port is now lost.
  if (was_active) RaiseOnEveryContextLocked(device, IBV_EVENT_PORT_ERR);
}

void FabricCore::PortUpLocked(Device& device) {
  if (!device.port_down) return;
  device.port_down = false;
  // A dead device's port stays down until ReviveDevice.
  if (device.link_up())
    RaiseOnEveryContextLocked(device, IBV_EVENT_PORT_ACTIVE);
}

void FabricCore::SetGidLocked(Device& device, uint32_t index,
                              const std::optional<ibv_gid>& gid,
                              ibv_gid_type type) {
  ibv_gid_entry& entry = device.gid_table[index];
  entry = ibv_gid_entry{};
  entry.gid_index = index;
  entry.port_num = 1;
  if (gid.has_value()) {
    entry.gid = *gid;
    entry.gid_type = type;
    entry.ndev_ifindex = device.is_ethernet() ? device.index + 2 : 0;
  }
  device.gid_valid[index] = gid.has_value();
  device.gid_create_ah_errno[index] = 0;
  // Routes were resolved against the old tables.
  for (auto& [handle, qp] : qps) qp->route_device = -1;
  RaiseOnEveryContextLocked(device, IBV_EVENT_GID_CHANGE);
}

void FabricCore::RaiseQpFatalLocked(SimQp& qp) {
  EnterErrorLocked(qp);
  RaiseAsyncEventLocked(*qp.context, IBV_EVENT_QP_FATAL, AsyncEventTarget::kQp,
                        &qp.verbs, qp.qp_num);
}

void FabricCore::ScheduleFaultLocked(Nanos at, ScheduledFault fault,
                                     const Device& device) {
  Event event;
  event.kind = EventKind::kFault;
  event.time = at < now ? now : at;
  event.epoch = fault_generation;
  event.fault = fault;
  event.fault_device = device.index;
  ScheduleLocked(event);
}

void FabricCore::HandleFaultLocked(const Event& event) {
  Device& device = *devices[event.fault_device];
  switch (event.fault) {
    case ScheduledFault::kKillDevice:
      KillDeviceLocked(device);
      break;
    case ScheduledFault::kPortDown:
      PortDownLocked(device);
      break;
    case ScheduledFault::kPortUp:
      PortUpLocked(device);
      break;
  }
}

}  // namespace rdma_transport::sim::internal
