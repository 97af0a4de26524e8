// File: sim/fabric.h
//
// `Fabric` is a simulated RDMA network: the NICs on it (each built from a
// `DeviceProfile`), the wire between them, a virtual clock, fault injection,
// counters and a record of every verbs object still alive. `SimVerbs`
// (sim/sim_verbs.h) is the `Verbs` backend that drives it.
//
//   Fabric fabric;                                      // kImmediate
//   std::string a = *fabric.AddDevice(ConnectX6());     // "sim_cx6_0"
//   std::string b = *fabric.AddDevice(ConnectX6());     // "sim_cx6_1"
//   SimVerbs verbs(&fabric);
//   ibv_context* context = *verbs.OpenDevice(a);
//   // ... as with libibverbs ...
//   ASSERT_TRUE(verbs.CloseDevice(context).ok());
//   EXPECT_THAT(fabric.LeakReport(), IsEmpty());        // nothing left open
//
// Addressing. Each device has one port. On Ethernet (RoCE) the port's GID
// table holds index 0, a link-local fe80:: GID, and index 1, the RoCE v2
// IPv4-mapped GID ::ffff:a.b.c.d of the device's address (10.0.0.N unless
// given). A QP's route is the device whose table holds ah_attr.grh.dgid (or,
// on InfiniBand, whose LID is ah_attr.dlid), then dest_qp_num on it. Packets
// with no route are lost and the sender ends in IBV_WC_RETRY_EXC_ERR.
//
// The switch. Off by default: packets go from port to port. With
// ConfigureSwitch(), every packet crosses a switch with eight priority
// queues per egress port, picked by the packet's DSCP (sim/switch.h).
//
// Progress. Work moves as discrete events on a virtual clock (nanoseconds
// from the fabric's creation). Messages travel as path-MTU packets; a packet
// queues behind the others leaving its port, takes its serialisation time at
// the port's link rate (the profile's active width and speed) and then
// `link_latency`. In ProgressMode::kImmediate every verbs
// call that creates work (post, modify, destroy, a fault) runs the fabric
// until nothing is left to do before returning, jumping the clock across
// timers (retransmission, RNR); no real time passes. In kManual nothing moves
// until the test calls RunUntilIdle(), Step() or AdvanceClock(). Nothing ever
// sleeps and there is no background thread.
//
// Thread-safety: safe for concurrent use; one lock guards all simulated state,
// so runs are deterministic when driven from one thread. The Fabric must
// outlive every SimVerbs bound to it; its destructor frees everything still
// alive and prints the leak report to stderr when it is not empty.

#ifndef RDMA_TRANSPORT_SIM_FABRIC_H_
#define RDMA_TRANSPORT_SIM_FABRIC_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "sim/counters.h"
#include "sim/device_profile.h"
#include "sim/fault_injector.h"
#include "sim/sim_env.h"
#include "sim/switch.h"

namespace rdma_transport::sim {

namespace internal {
class FabricCore;
}  // namespace internal

enum class ProgressMode {
  kImmediate,  // Each verbs call runs the fabric to quiescence.
  kManual,     // Only RunUntilIdle(), Step() and AdvanceClock() move it.
};

struct FabricOptions {
  ProgressMode progress_mode = ProgressMode::kImmediate;
  // One-way propagation delay of every link.
  std::chrono::nanoseconds link_latency{1000};
  // Every port's link rate in Gb/s; 0: each port's from its profile's
  // active_width and active_speed (4x EDR: 100). A packet of B bytes on the
  // wire (payload and headers) keeps its port busy B * 8 / rate.
  uint32_t link_gbps = 0;
  // The transport's clock (sim/sim_env.h): virtual, or the wall clock with
  // real TCP for setup.
  ClockMode clock = ClockMode::kVirtual;
};

// One verbs object still alive, for the leak report.
struct LiveObject {
  std::string kind;     // "context", "pd", "mr", "cq", "comp_channel", "qp"
  std::string device;   // "sim_cx6_0"
  uint32_t handle = 0;  // ibv_*::handle; for a QP, its qp_num
  std::string ToString() const;
};

class Fabric {
 public:
  explicit Fabric(FabricOptions options = {});
  ~Fabric();
  Fabric(const Fabric&) = delete;
  Fabric& operator=(const Fabric&) = delete;

  // Adds a NIC and returns its name: `name`, or "<profile.name_prefix>_<n>"
  // with n counting the devices of that prefix. `ipv4` ("10.1.2.3") is the
  // address behind its RoCE v2 GID; by default 10.0.0.<k> for the k-th
  // device. kAlreadyExists for a taken name or address, kInvalidArgument for
  // a malformed address.
  absl::StatusOr<std::string> AddDevice(
      const DeviceProfile& profile,
      std::optional<std::string> name = std::nullopt,
      std::optional<std::string> ipv4 = std::nullopt);
  std::vector<std::string> DeviceNames() const;

  FaultInjector& faults() { return faults_; }
  // The Env of the transport running on this fabric (sim/sim_env.h).
  SimEnv& env() { return *env_; }

  ProgressMode progress_mode() const;
  // Switching to kImmediate runs the fabric to quiescence.
  void set_progress_mode(ProgressMode mode);

  // --- The virtual clock ---

  // Virtual time since the fabric was created.
  std::chrono::nanoseconds Now() const;
  // Runs events until none is left, jumping the clock to each; returns how
  // many ran. Work waiting on something only the test can do (an RNR wait
  // with rnr_retry 7, a lost packet with timeout 0) does not keep it busy.
  size_t RunUntilIdle();
  // Runs the earliest pending event (moving the clock to it); false if none.
  bool Step();
  // Runs every event due within `duration`, then sets the clock to
  // Now() + duration; returns how many ran.
  size_t AdvanceClock(std::chrono::nanoseconds duration);
  size_t PendingEvents() const;
  // Virtual time of the earliest pending event, if any.
  std::optional<std::chrono::nanoseconds> NextEventTime() const;

  // --- Accounting ---

  // The rate of `device`'s port link in Gb/s (FabricOptions::link_gbps).
  // kNotFound for an unknown device.
  absl::StatusOr<double> LinkGbps(std::string_view device) const;

  SimCounters Counters() const;  // Summed over all devices.
  absl::StatusOr<SimCounters> DeviceCounters(std::string_view device) const;

  // --- The switch (sim/switch.h) ---

  // Puts the switch between the ports (options.enabled) or takes it away,
  // with empty queues and zero counters. kInvalidArgument for bad options
  // (ValidateSwitchOptions); kFailedPrecondition while packets are in the
  // switch (configure it before traffic, or when the fabric is idle).
  absl::Status ConfigureSwitch(const SwitchOptions& options);
  // The counters of the switch's egress port towards `device` (all zero
  // with the switch off). kNotFound for an unknown device.
  absl::StatusOr<SwitchPortCounters> SwitchCounters(
      std::string_view device) const;

  // Every verbs object not yet destroyed, in creation order.
  std::vector<LiveObject> LeakReport() const;

  // --- Determinism ---

  // A 64-bit digest of everything the fabric did so far, in order: every
  // event run (virtual time, kind, QP number, WQE index, attempt, reply),
  // and within it every packet lost (device, QP) and every completion
  // written or lost (CQ, QP, WQE index, wr_id, status, opcode, byte_len);
  // every async event raised (time, context, type, QP number or CQ handle).
  // Two fabrics driven through the same scenario from one thread have equal
  // digests; a run that differs in any of those (one more lost packet, a
  // completion a nanosecond later) almost surely has another. Compare
  // digests to prove a scenario replays, or to spot where two runs part
  // (check after each step). Addresses never enter it. Costs a few
  // nanoseconds per event; allocates nothing.
  uint64_t TraceDigest() const;
  // How many events the fabric has run (stale timers and packets, skipped
  // without running, excluded).
  uint64_t EventsRun() const;

 private:
  friend class SimVerbs;
  friend class SimEnv;
  internal::FabricCore& core() { return *core_; }
  // AdvanceClock() without telling the SimEnv (which calls it).
  void AdvanceClockQuietly(std::chrono::nanoseconds duration);

  std::unique_ptr<internal::FabricCore> core_;
  FaultInjector faults_;
  std::unique_ptr<SimEnv> env_;
};

}  // namespace rdma_transport::sim

#endif  // RDMA_TRANSPORT_SIM_FABRIC_H_
