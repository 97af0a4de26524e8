// The fabric's switch (sim/switch.h): packets reach it from their sender's
// port, queue by priority at the egress port towards their destination, and
// leave it at that device's link rate. SwitchPort (switch_port.h) holds the
// queues and picks; this file moves packets through it in virtual time.

#include "sim/switch.h"

#include <algorithm>
#include <cstdint>

#include "absl/status/status.h"
#include "sim/internal/fabric_core.h"

namespace rdma_transport::sim::internal {

absl::Status FabricCore::ConfigureSwitchLocked(const SwitchOptions& options) {
  if (absl::Status valid = ValidateSwitchOptions(options); !valid.ok()) {
    return valid;
  }
  // Queued, on their way to it, or on an egress link (whose kSwitchDequeue
  // event would find its port gone).
  const bool link_busy =
      std::any_of(switch_ports.begin(), switch_ports.end(),
                  [](const SwitchPort<Event>& port) { return port.busy; });
  if (packets_in_switch != 0 || link_busy) {
    return absl::FailedPreconditionError(
        "packets are in the switch; configure it before traffic flows or "
        "once the fabric is idle");
  }
  switch_options = options;
  switch_ports.clear();
  if (options.enabled) switch_ports.resize(devices.size());
  return absl::OkStatus();
}

void FabricCore::SendToSwitchLocked(Event packet, uint8_t traffic_class,
                                    uint32_t wire_bytes, Nanos at) {
  // A request goes to its responder's device, a reply (ACK, NAK, READ
  // response) to its requester's; the callers checked the requester exists.
  uint32_t destination = packet.responder_device;
  if (packet.kind == EventKind::kResponse) {
    destination = FindQpByNum(packet.qp_num)->device->index;
  }
  packet.deliver_as = packet.kind;
  packet.kind = EventKind::kSwitchArrive;
  packet.traffic_class = traffic_class;
  packet.wire_bytes = static_cast<uint16_t>(wire_bytes);
  packet.egress_device = destination;
  packet.time = at;
  ++packets_in_switch;
  ScheduleLocked(packet);
}

void FabricCore::HandleSwitchArriveLocked(const Event& event) {
  if (event.egress_device >= switch_ports.size()) {
    switch_ports.resize(devices.size());  // A device added since.
  }
  SwitchPort<Event>& port = switch_ports[event.egress_device];
  Event packet = event;
  packet.kind = event.deliver_as;
  if (!port.Enqueue(SwitchPriority(switch_options, event.traffic_class), packet,
                    event.wire_bytes, switch_options.queue_limit_bytes)) {
    // Tail drop: lost on the way to the destination, counted there too.
    --packets_in_switch;
    CountPacketLostLocked(*devices[event.egress_device],
                          event.deliver_as == EventKind::kArrive
                              ? event.responder_qp_num
                              : event.qp_num);
    ReleasePayloadLocked(event);
    return;
  }
  if (!port.busy) SwitchTransmitLocked(event.egress_device);
}

void FabricCore::HandleSwitchDequeueLocked(const Event& event) {
  SwitchPort<Event>& port = switch_ports[event.egress_device];
  port.busy = false;
  if (!port.empty()) SwitchTransmitLocked(event.egress_device);
}

void FabricCore::SwitchTransmitLocked(uint32_t index) {
  SwitchPort<Event>& port = switch_ports[index];
  SwitchPort<Event>::Entry entry = port.Dequeue(switch_options);
  --packets_in_switch;
  const uint64_t mbps = std::max<uint64_t>(1, devices[index]->link_mbps);
  // Picoseconds, as a NIC's port (link.cc): bits * 10^6 / (Mb/s).
  const int64_t serialisation_ps =
      static_cast<int64_t>(uint64_t{entry.bytes} * 8 * 1000000 / mbps);
  const int64_t start_ps = std::max<int64_t>(now.count() * 1000, port.free_ps);
  port.free_ps = start_ps + serialisation_ps;
  port.busy = true;
  entry.packet.time = Nanos((port.free_ps + 999) / 1000) + options.link_latency;
  ScheduleLocked(entry.packet);
  // The port picks again when this packet has left (rounded down: its
  // clock is in picoseconds, so the next one starts exactly at free_ps).
  Event done;
  done.kind = EventKind::kSwitchDequeue;
  done.egress_device = index;
  done.time = std::max(now, Nanos(port.free_ps / 1000));
  ScheduleLocked(done);
}

}  // namespace rdma_transport::sim::internal
