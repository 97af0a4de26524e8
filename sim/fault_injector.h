// File: sim/fault_injector.h
//
// `FaultInjector` arms deterministic failures in a `Fabric`. Get it from
// `fabric.faults()`; every fault is consumed in the order the simulated NIC
// meets the matching event, so the same test fails the same way every run.
//
//   Fabric fabric;
//   std::string client = *fabric.AddDevice(ConnectX6());  // "sim_cx6_0"
//   std::string server = *fabric.AddDevice(ConnectX6());  // "sim_cx6_1"
//   // ibv_create_qp asking for more than 64 inline bytes fails with EINVAL.
//   fabric.faults().RefuseCreateQpAboveInline(64, EINVAL);
//   // The next INIT->RTR transition on any device fails with ETIMEDOUT.
//   fabric.faults().FailModifyQp(IBV_QPS_INIT, IBV_QPS_RTR, ETIMEDOUT);
//   // The next two packets to QP 0x101 are lost (and retransmitted).
//   absl::Status armed = fabric.faults().DropPackets(FaultTarget::Qp(0x101), 2);
//   // A cable pulled 250 us into the run: IBV_EVENT_PORT_ERR, lost packets.
//   armed.Update(
//       fabric.faults().PortDownAt(client, std::chrono::microseconds(250)));
//   // Peer death: QPs on the server's NIC go to ERR; traffic to it times out.
//   armed.Update(fabric.faults().KillDevice(server));
//
// Control-path faults make the verbs call fail with the given errno, as
// VerbsError("ibv_xxx", errno) with a detail naming the injected fault; they
// fire `times` times (kEveryTime: until Clear()), first armed first served.
// Data-path faults act on the packets and work requests of the QPs their
// `FaultTarget` selects. Async-event faults raise the libibverbs events a NIC
// raises, on the contexts it raises them on, for GetAsyncEvent to read; each
// is counted in SimCounters::async_events_by_type. Scheduled faults (*At)
// run as fabric events at an absolute virtual time (see Fabric::Now()).
//
// Thread-safe: every method takes the fabric's lock. Owned by its Fabric.

#ifndef RDMA_TRANSPORT_SIM_FAULT_INJECTOR_H_
#define RDMA_TRANSPORT_SIM_FAULT_INJECTOR_H_

#include <infiniband/verbs.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "verbs_shim/env.h"

namespace rdma_transport::sim {

namespace internal {
class FabricCore;
}  // namespace internal

// A control-path fault fires this many times; kEveryTime never runs out.
inline constexpr int kEveryTime = -1;

// Which of a QP's completion queues a fault targets.
enum class QpCq { kSend, kRecv };

// Which QPs a data-path fault applies to: one QP (QP numbers are unique
// across a fabric), every QP of one device, or every QP.
struct FaultTarget {
  static FaultTarget Qp(uint32_t qp_num) { return {"", qp_num}; }
  static FaultTarget Device(std::string device) {
    return {std::move(device), std::nullopt};
  }
  static FaultTarget AnyQp() { return {"", std::nullopt}; }

  std::string device;              // Empty: any device.
  std::optional<uint32_t> qp_num;  // nullopt: any QP (of `device`).
};

class FaultInjector {
 public:
  FaultInjector(const FaultInjector&) = delete;
  FaultInjector& operator=(const FaultInjector&) = delete;

  // --- Control path ---
  // Each fault fires `times` times (kEveryTime: until Clear()) on `device`
  // (empty: any device), failing the call with `error`.

  // ibv_create_qp fails.
  void RefuseCreateQp(int error, int times = kEveryTime,
                      std::string_view device = {});
  // ibv_create_qp fails for requests asking for more than `max_inline_data`
  // inline bytes (a NIC with a lower inline limit than its profile says).
  void RefuseCreateQpAboveInline(uint32_t max_inline_data, int error = EINVAL,
                                 int times = kEveryTime,
                                 std::string_view device = {});
  void FailRegMr(int error, int times = 1, std::string_view device = {});
  void FailCreateCq(int error, int times = 1, std::string_view device = {});
  // ibv_modify_qp fails when it would move a QP from `from` to `to` (after
  // verbs' own validation of the request passed).
  void FailModifyQp(ibv_qp_state from, ibv_qp_state to, int error,
                    int times = 1, std::string_view device = {});

  // --- Data path ---

  // The next `count` send work requests of the target QPs to reach the head
  // of their send queue complete with `status` instead of executing (nothing
  // is transmitted). An error status moves the QP to ERR and flushes the rest
  // of its work, as the NIC does after a completion error. kInvalidArgument
  // for IBV_WC_SUCCESS or an unknown device.
  absl::Status FailCompletions(const FaultTarget& target, ibv_wc_status status,
                               int count = 1);
  // The next `count` packets addressed to the target QPs (request packets to
  // a responder, acknowledgements and READ response packets to a requester;
  // a message is one packet per path MTU) are lost.
  // The requester retransmits after its transport timeout, up to retry_cnt
  // times, then completes with IBV_WC_RETRY_EXC_ERR.
  absl::Status DropPackets(const FaultTarget& target, int count = 1);
  // The next `count` request packets arriving at the target QPs (as
  // responders) arrive twice, the copy right behind the original, as a
  // network that duplicates does; the responder treats the copy as the
  // duplicate it is (acknowledged again, a READ answered again).
  absl::Status DuplicatePackets(const FaultTarget& target, int count = 1);
  // Every packet to the target QPs arrives `delay` later than the link would
  // take, until cleared with a zero delay. A delay beyond the requester's
  // transport timeout causes retransmissions (duplicates are detected by PSN,
  // as on the wire).
  absl::Status DelayDelivery(const FaultTarget& target,
                             std::chrono::nanoseconds delay);

  // Peer death: the device leaves the fabric. Its QPs go to ERR (their work
  // is flushed with IBV_WC_WR_FLUSH_ERR; IBV_EVENT_QP_FATAL per QP and
  // IBV_EVENT_DEVICE_FATAL per open context are raised), its port reports
  // IBV_PORT_DOWN, packets to it are lost (senders end in
  // IBV_WC_RETRY_EXC_ERR after their retry budget), and CreateQp or taking a
  // QP out of RESET on it fails with EIO. kNotFound for an unknown device.
  absl::Status KillDevice(std::string_view device);
  // The device rejoins the fabric. Its QPs stay in ERR; new ones work.
  absl::Status ReviveDevice(std::string_view device);

  // --- Async events ---
  // Unknown devices, QPs and CQs are kNotFound.

  // Link loss: port 1 reports IBV_PORT_DOWN (QueryPort) and
  // IBV_EVENT_PORT_ERR (element.port_num 1) goes to every open context of
  // the device. While it is down every packet to or from the device is lost:
  // its peers and its own QPs retransmit and, unless the port comes back in
  // time, end in IBV_WC_RETRY_EXC_ERR. The port event moves no QP to ERR, as
  // on hardware. No event when the port is already down (or the device is
  // dead).
  absl::Status PortDown(std::string_view device);
  // The port is IBV_PORT_ACTIVE again, IBV_EVENT_PORT_ACTIVE goes to every
  // open context, and packets flow (QPs still retrying carry on). No event
  // when the port was not taken down by PortDown; a dead device's port stays
  // down until ReviveDevice.
  absl::Status PortUp(std::string_view device);

  // Replaces (or fills) GID table slot `index` of the device's port with
  // `gid` of `type`; QueryGid and QueryGidTable show it, and routing by
  // ah_attr.grh.dgid uses the new table from the next packet on (a QP whose
  // peer's GID went away loses its packets). IBV_EVENT_GID_CHANGE
  // (element.port_num 1) goes to every open context of the device.
  // kInvalidArgument for an index beyond gid_tbl_len or the all-zero GID,
  // kAlreadyExists when another slot of any device holds `gid`.
  absl::Status ChangeGid(std::string_view device, uint32_t index,
                         const ibv_gid& gid,
                         ibv_gid_type type = IBV_GID_TYPE_ROCE_V2);
  // A new address on a RoCE device: its RoCE v2 GID at index 1 becomes
  // ::ffff:`ipv4`, as ChangeGid does, and AddDevice treats `ipv4` as taken.
  // kInvalidArgument for a malformed address, kAlreadyExists for another
  // device's, kFailedPrecondition on InfiniBand.
  absl::Status ChangeIpv4(std::string_view device, std::string_view ipv4);
  // Empties GID table slot `index` (an address removed), with
  // IBV_EVENT_GID_CHANGE as ChangeGid. kNotFound for an empty slot,
  // kInvalidArgument for one beyond the table.
  absl::Status RemoveGid(std::string_view device, uint32_t index);

  // IBV_EVENT_QP_FATAL (element.qp) on the QP's context, and the QP goes to
  // ERR with its outstanding work flushed (IBV_WC_WR_FLUSH_ERR), as after a
  // NIC-internal error. `qp_num` is ibv_qp::qp_num.
  absl::Status RaiseQpFatal(uint32_t qp_num);
  // IBV_EVENT_CQ_ERR (element.cq) on the CQ's context, and the CQ is in
  // error as after an overrun: PollCq fails with EOVERFLOW and completions
  // for it are lost (SimCounters::completions_lost). `cq_handle` is
  // ibv_cq::handle of a CQ of `device`.
  absl::Status RaiseCqError(std::string_view device, uint32_t cq_handle);
  // The same, for the send or receive CQ of QP `qp_num`.
  absl::Status RaiseCqErrorOfQp(uint32_t qp_num, QpCq which = QpCq::kSend);

  // --- Scheduled faults ---
  // KillDevice, PortDown and PortUp at virtual time `at` (nanoseconds since
  // the fabric's creation), run as a fabric event: everything due before
  // `at` happens first, so work in progress sees the fault mid-way, the same
  // way every run, in either progress mode. Nothing runs now: in kImmediate
  // the fault happens during the next call that runs the fabric, which then
  // runs on up to `at` if nothing else is left. Scheduled faults at the same
  // time run in the order they were scheduled. Clear() cancels those not yet
  // run. kInvalidArgument for `at` before Now(), kNotFound for an unknown
  // device.
  absl::Status KillDeviceAt(std::string_view device,
                            std::chrono::nanoseconds at);
  absl::Status PortDownAt(std::string_view device, std::chrono::nanoseconds at);
  absl::Status PortUpAt(std::string_view device, std::chrono::nanoseconds at);

  // Forgets every pending fault and delivery delay, and cancels scheduled
  // faults not yet run (does not revive devices or bring ports up).
  void Clear();

 private:
  friend class Fabric;
  explicit FaultInjector(internal::FabricCore* core) : core_(core) {}

  internal::FabricCore* const core_;
  Env* env_ = nullptr;  // the fabric's SimEnv, told after every fault
};

}  // namespace rdma_transport::sim

#endif  // RDMA_TRANSPORT_SIM_FAULT_INJECTOR_H_
