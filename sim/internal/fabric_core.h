// File: sim/internal/fabric_core.h
//
// `FabricCore` is everything a `Fabric` simulates: devices, the verbs objects
// behind the handles SimVerbs hands out, the event queue and virtual clock,
// the fault plan and the counters, all guarded by the single mutex `mu`.
// Fabric, FaultInjector and SimVerbs are thin, locking facades over it.
//
// Thread-safety: every member, data or function, requires `mu` held (the
// `Locked` suffix marks the functions that change or run the simulation;
// the Find* lookups need the lock too). Ownership: objects live in the
// registries below (unique_ptr); the verbs struct is the first member of each
// Sim* object and its address is the handle users hold. Errors: the verbs
// entry points return VerbsError() statuses with verbs' errno; the rest
// cannot fail.
//
// The model of one RC connection (see docs/simulator.md, "The RC transport"):
//   - A requester (requester.cc) starts the WQEs of its send queue in order,
//     several at a time: each gets its PSNs, one per path-MTU packet, and
//     its packets leave one by one through the device's port (link.cc), as
//     long as the send window (kSendWindowPackets unacknowledged PSNs) and
//     the READ depth (max_rd_atomic) allow.
//   - A packet reaches the far end after its serialisation on the sender's
//     port (queued behind whatever the port is sending), the link latency and
//     any injected delay. The responder (responder.cc) executes requests in
//     PSN order, acknowledges (coalesced: the last packet of a message, and
//     every kAckRequestInterval packets), NAKs a sequence error once, RNR-NAKs
//     a SEND without a receive, and answers a READ with its response packets.
//   - The requester completes WQEs in order as ACKs and READ responses
//     arrive, and goes back to the first unacknowledged PSN (go-back-N) on a
//     sequence NAK, an RNR NAK (after its delay) or its transport timer
//     (retry_cnt times, rnr_retry times for RNR, 7 = forever).
//   - Faults scheduled at a virtual time (FaultInjector::*At) are kFault
//     events in the same queue, so they interleave with the traffic
//     deterministically.
//   - Completions go to CQs (ring buffers sized at creation); send and
//     receive queue slots are reclaimed when their completion is polled (or a
//     later one of the same queue is), as libmlx5 does.

#ifndef RDMA_TRANSPORT_SIM_INTERNAL_FABRIC_CORE_H_
#define RDMA_TRANSPORT_SIM_INTERNAL_FABRIC_CORE_H_

#include <infiniband/verbs.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "sim/counters.h"
#include "sim/device_profile.h"
#include "sim/fabric.h"
#include "sim/fault_injector.h"
#include "sim/internal/event_queue.h"
#include "sim/internal/handle_registry.h"
#include "sim/internal/payload_pool.h"
#include "sim/internal/ring.h"
#include "sim/internal/switch_port.h"
#include "sim/internal/trace.h"
#include "sim/switch.h"

namespace rdma_transport::sim::internal {

using Nanos = std::chrono::nanoseconds;

// The integer in a verbs enum field a caller filled, read without assuming it
// holds a valid enumerator (loading an out-of-range enum is undefined).
template <typename Enum>
int RawEnum(const Enum& field) {
  std::underlying_type_t<Enum> raw;
  std::memcpy(&raw, &field, sizeof(raw));
  return static_cast<int>(raw);
}

struct SimContext;
struct SimPd;
struct SimMr;
struct SimMw;
struct SimQp;
struct SimSrq;

// The core's lock: spins briefly before sleeping. Several threads driving
// one fabric (a sender, a receiver and their pollers) take it for a few
// hundred nanoseconds at a time; a plain std::mutex puts the loser to sleep
// in the kernel and pays a wake-up per hand-over.
class CoreMutex {
 public:
  void lock() {
    for (int spin = 0; spin < 128; ++spin) {
      if (mu_.try_lock()) return;
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
    mu_.lock();
  }
  bool try_lock() { return mu_.try_lock(); }
  void unlock() { mu_.unlock(); }

 private:
  std::mutex mu_;
};

// --- Devices ---

struct Device {
  uint32_t index = 0;
  std::string name;
  DeviceProfile profile;
  uint32_t ipv4 = 0;  // Host byte order.
  uint16_t lid = 0;   // InfiniBand only.
  uint64_t node_guid = 0;
  // Port 1's GID table, gid_table_length slots; `gid_valid` marks the filled.
  std::vector<ibv_gid_entry> gid_table;
  std::vector<bool> gid_valid;
  // Per slot: the errno CreateAh fails with when sourced from it (0: none);
  // from DeviceProfile::gid_layout, cleared when a fault refills the slot.
  std::vector<int> gid_create_ah_errno;
  bool dead = false;
  // Port 1 taken down by FaultInjector::PortDown; the device stays.
  bool port_down = false;
  // Port 1's egress link (link.cc): its rate, and the virtual time, in
  // picoseconds, until which it is busy serialising packets already queued.
  uint64_t link_mbps = 0;
  int64_t egress_free_ps = 0;
  SimCounters counters;
  ibv_device verbs_device{};  // What ibv_context::device points at.
  uint32_t live_pds = 0;
  uint32_t live_mrs = 0;
  uint32_t live_cqs = 0;
  uint32_t live_qps = 0;
  uint32_t live_srqs = 0;
  uint32_t live_mws = 0;
  // Memory regions by key (lkey == rkey), for the wire.
  FlatIndex<uint32_t, SimMr*> mrs_by_key;
  // Memory windows by index (rkey >> 8, as rxe looks them up).
  std::unordered_map<uint32_t, SimMw*> mws_by_index;

  bool is_ethernet() const {
    return profile.link_layer == IBV_LINK_LAYER_ETHERNET;
  }
  // Packets leave and reach the device only while its port is up.
  bool link_up() const { return !dead && !port_down; }
  ibv_port_state port_state() const {
    return link_up() ? IBV_PORT_ACTIVE : IBV_PORT_DOWN;
  }
};

// --- Verbs objects ---

enum class AsyncEventTarget { kDevice, kQp, kCq, kSrq };

struct PendingAsyncEvent {
  ibv_async_event event{};
  AsyncEventTarget target = AsyncEventTarget::kDevice;
  uint32_t target_id = 0;  // qp_num, CQ or SRQ handle.
};

struct SimContext {
  ibv_context verbs{};
  uint32_t id = 0;
  Device* device = nullptr;
  std::deque<PendingAsyncEvent> async_events;
  uint32_t live_pds = 0;
  uint32_t live_cqs = 0;
  uint32_t live_channels = 0;
};

struct SimPd {
  ibv_pd verbs{};
  uint32_t id = 0;
  SimContext* context = nullptr;
  uint32_t live_mrs = 0;
  uint32_t live_qps = 0;
  uint32_t live_mws = 0;
  uint32_t live_ahs = 0;
  uint32_t live_srqs = 0;
};

struct SimAh {
  ibv_ah verbs{};
  uint32_t id = 0;
  SimPd* pd = nullptr;
  ibv_ah_attr attr{};
};

struct SimMr {
  ibv_mr verbs{};
  uint32_t id = 0;
  SimPd* pd = nullptr;
  Device* device = nullptr;
  int access = 0;
  // Windows bound to it: deregistering fails while any is (EINVAL, as rxe).
  uint32_t bound_mws = 0;
};

// A type 2 memory window. Bound by an IBV_WR_BIND_MW to one QP (the one the
// bind was posted on): its rkey then grants `access` to
// [addr, addr + length) of `mr`, to requests arriving at that QP only.
// Unbound again by IBV_WR_LOCAL_INV or DeallocMw. A bound window whose QP is
// destroyed stays bound to that QP number, which is never reused, so its
// rkey matches no request again (as rxe keeps the dead QP's reference until
// the window is deallocated); it still counts against the MR.
struct SimMw {
  ibv_mw verbs{};
  uint32_t id = 0;
  uint32_t index = 0;  // rkey >> 8
  SimPd* pd = nullptr;
  Device* device = nullptr;
  // The current rkey: the index and the key byte of the last bind. The
  // user's ibv_mw::rkey is not updated by a bind, as in libibverbs.
  uint32_t rkey = 0;
  bool bound = false;
  uint32_t qp_num = 0;
  SimMr* mr = nullptr;
  uint64_t addr = 0;
  uint64_t length = 0;
  int access = 0;
};

struct SimChannel {
  ibv_comp_channel verbs{};
  uint32_t id = 0;
  SimContext* context = nullptr;
  uint32_t live_cqs = 0;
  // Handles of CQs with an event not yet taken by GetCqEvent, oldest first;
  // the eventfd's counter equals its size.
  Ring<uint32_t> pending_cq_ids{16};
};

struct CqEntry {
  ibv_wc wc{};
  uint32_t qp_num = 0;
  uint64_t wqe_index = 0;  // Position in its queue, for slot reclamation.
  bool is_send = false;
  bool from_srq = false;  // a receive taken from the QP's SRQ
  bool solicited = false;
};

struct SimCq {
  ibv_cq verbs{};
  uint32_t id = 0;
  SimContext* context = nullptr;
  SimChannel* channel = nullptr;
  Ring<CqEntry> entries;
  bool armed = false;
  bool armed_solicited_only = false;
  bool overrun = false;
  // IBV_EVENT_CQ_ERR injected by FaultInjector::RaiseCqError.
  bool error_injected = false;
  uint32_t live_qps = 0;
  uint32_t comp_events_delivered = 0;
  uint32_t comp_events_acked = 0;
  uint32_t async_events_delivered = 0;
  uint32_t async_events_acked = 0;

  // An overrun or injected error makes the CQ unusable: polls fail and new
  // completions are lost.
  bool in_error() const { return overrun || error_injected; }
};

struct SendWqe {
  uint64_t wr_id = 0;
  ibv_wr_opcode opcode = IBV_WR_SEND;
  bool signaled = false;
  bool solicited = false;
  bool is_inline = false;
  uint32_t imm_data = 0;  // Network byte order, as posted.
  uint64_t remote_addr = 0;
  uint32_t rkey = 0;
  uint32_t num_sge = 0;
  uint64_t length = 0;
  // IBV_WR_BIND_MW: what the provider copies at post (rxe: the window's
  // rkey as the caller's ibv_mw holds it, the new rkey, the MR's lkey), and
  // the bind_info. IBV_WR_LOCAL_INV: `rkey` holds invalidate_rkey.
  uint32_t bind_mw_rkey = 0;
  uint32_t bind_new_rkey = 0;
  uint32_t bind_mr_lkey = 0;
  uint64_t bind_addr = 0;
  uint64_t bind_length = 0;
  int bind_access = 0;
  // Set when the requester starts the WQE (gives it its PSNs).
  uint32_t psn = 0;
  uint32_t packet_count = 0;
  // Packets of it transmitted, retransmissions included.
  uint32_t transmissions = 0;
  // RDMA READ: response packets received in order so far.
  uint32_t read_packets_received = 0;
};

struct RecvWqe {
  uint64_t wr_id = 0;
  uint32_t num_sge = 0;
};

// Posting a receive work request to a queue of `depth` slots with `in_use`
// taken, `max_sge` entries each (a QP's receive queue or an SRQ, named
// `queue` and `max_sge_name` in the refusal): CheckRecvWr() gives the
// refusal's errno and detail, if any, and StoreRecvWr() fills the slot.
struct RecvRefusal {
  int error = 0;
  std::string detail;
};
std::optional<RecvRefusal> CheckRecvWr(const ibv_recv_wr& wr, uint32_t max_sge,
                                       std::string_view max_sge_name,
                                       uint64_t in_use, uint32_t depth,
                                       std::string_view queue);
void StoreRecvWr(const ibv_recv_wr& wr, RecvWqe& wqe, ibv_sge* sges);

// A shared receive queue: one FIFO of receives that every QP attached to it
// consumes, in the order posted, whichever QP a message arrives on. A slot
// is free again once the completion of the receive in it has been polled
// (or cleaned away with its QP); completions of different QPs may be polled
// out of order, so reclaiming counts receives rather than moving an index
// (the ring holds at most max_wr receives posted and not yet reclaimed, and
// consumption is in order, so a slot is never overwritten while posted).
struct SimSrq {
  ibv_srq verbs{};
  uint32_t id = 0;
  SimPd* pd = nullptr;
  SimContext* context = nullptr;
  Device* device = nullptr;
  uint32_t max_wr = 0;
  uint32_t max_sge = 0;
  std::vector<RecvWqe> wqes;
  std::vector<ibv_sge> sges;  // max_sge per slot.
  uint64_t posted = 0;
  uint64_t consumed = 0;
  uint64_t reclaimed = 0;  // receives whose completion is gone from the CQs
  // Armed (IBV_SRQ_LIMIT > 0): IBV_EVENT_SRQ_LIMIT_REACHED once fewer than
  // this many receives are posted, then disarmed (0).
  uint32_t limit = 0;
  // Attached QPs, in creation order (their requesters are woken from RNR
  // waits when a receive is posted).
  std::vector<uint32_t> qp_nums;
  uint32_t async_events_delivered = 0;
  uint32_t async_events_acked = 0;

  bool has_receive() const { return consumed < posted; }
  RecvWqe& slot(uint64_t index) { return wqes[index % wqes.size()]; }
  ibv_sge* slot_sges(uint64_t index) {
    return sges.data() + (index % wqes.size()) * max_sge;
  }
};

struct SimQp {
  ibv_qp verbs{};
  // --- What the data path reads, first and together: with a thousand QPs
  // on a fabric their state is far larger than the cache, and each packet
  // pays a miss per cache line of its QPs it reads.
  uint32_t qp_num = 0;
  ibv_qp_state state = IBV_QPS_RESET;
  // Bumped on RESET and ERR: events of an older epoch are stale.
  uint64_t epoch = 0;
  SimPd* pd = nullptr;
  Device* device = nullptr;
  SimCq* send_cq = nullptr;
  SimCq* recv_cq = nullptr;
  // Receives come from this shared receive queue instead of `rq` (which is
  // then empty).
  SimSrq* srq = nullptr;

  // Send queue: slots [sq_reclaimed, sq_posted) are in use; [sq_active,
  // sq_posted) are not yet completed. Indices grow forever; slot = i % depth.
  std::vector<SendWqe> sq;
  std::vector<ibv_sge> sq_sges;    // max_send_sge per slot.
  std::vector<uint8_t> sq_inline;  // max_inline_data bytes per slot.
  uint64_t sq_reclaimed = 0;
  uint64_t sq_active = 0;
  uint64_t sq_posted = 0;

  // Receive queue: [rq_reclaimed, rq_posted) in use, [rq_consumed,
  // rq_posted) posted and not yet consumed by an incoming message.
  std::vector<RecvWqe> rq;
  std::vector<ibv_sge> rq_sges;  // max_recv_sge per slot.
  uint64_t rq_reclaimed = 0;
  uint64_t rq_consumed = 0;
  uint64_t rq_posted = 0;
  // On an SRQ: the shared receive the message arriving now has claimed (at
  // its first packet, as a NIC does, so that a message on another QP of the
  // SRQ cannot take it between this one's packets); nullopt between
  // messages.
  std::optional<uint64_t> srq_claimed;

  // Requester (requester.cc). WQEs [sq_active, sq_next) are started: they
  // have PSNs and are (partly) transmitted. The next packet to transmit is
  // packet `tx_packet` of WQE `tx_wqe` (sq_active <= tx_wqe <= sq_next; at
  // sq_next, a new WQE must start first); go-back-N moves it back to
  // `una_psn`, the oldest PSN not yet acknowledged.
  uint64_t sq_next = 0;
  uint64_t tx_wqe = 0;
  uint32_t tx_packet = 0;
  uint32_t next_psn = 0;
  uint32_t una_psn = 0;
  // RDMA READs started and not yet completed (at most max_rd_atomic).
  uint32_t reads_in_flight = 0;
  int retries_left = 0;
  int rnr_retries_left = 0;
  // kTransmit events carry tx_generation; rewinding or pausing bumps it.
  bool transmit_scheduled = false;
  uint32_t tx_generation = 0;
  // The transport timer: one per QP, restarted whenever the oldest
  // outstanding PSN is acknowledged; kRetryTimer events carry
  // timer_generation.
  bool timer_armed = false;
  uint32_t timer_generation = 0;
  // A READ's responses were found missing and it was asked for again; not
  // again until it makes progress.
  bool implicit_nak_sent = false;
  bool flush_scheduled = false;
  // Waiting (rnr_retry 7) for a receive on the responder that RNR-NAKed us.
  bool rnr_waiting = false;

  // The device ah_attr leads to (index into FabricCore::devices), once
  // found; -1 until then, and again whenever IBV_QP_AV is modified.
  int route_device = -1;

  // Responder (responder.cc). A NAK (sequence error or RNR) was sent for
  // expected_psn: later packets are dropped silently until it arrives.
  uint32_t expected_psn = 0;
  bool nak_sent = false;

  ibv_qp_init_attr init_attr{};  // As granted.
  ibv_qp_attr attr{};            // Every attribute ModifyQp has set.

  // --- The rest: the control path's.
  uint32_t id = 0;
  SimContext* context = nullptr;
  int attr_mask_set = 0;
  uint32_t rnr_responder_qp_num = 0;
  Nanos rnr_resume_not_before{0};
  // Responder: RDMA READs being answered: the first PSN and the packet count of
  // each, oldest first (at most max_dest_rd_atomic).
  struct ReadResource {
    uint32_t psn = 0;
    uint32_t packets = 0;
  };
  std::vector<ReadResource> read_resources;

  uint32_t async_events_delivered = 0;
  uint32_t async_events_acked = 0;

  uint32_t send_depth() const { return static_cast<uint32_t>(sq.size()); }
  uint32_t recv_depth() const { return static_cast<uint32_t>(rq.size()); }
  uint32_t max_send_sge() const { return init_attr.cap.max_send_sge; }
  uint32_t max_recv_sge() const { return init_attr.cap.max_recv_sge; }
  uint32_t max_inline_data() const { return init_attr.cap.max_inline_data; }
  SendWqe& send_slot(uint64_t index) { return sq[index % sq.size()]; }
  ibv_sge* send_sges(uint64_t index) {
    return sq_sges.data() + (index % sq.size()) * max_send_sge();
  }
  uint8_t* send_inline(uint64_t index) {
    return sq_inline.data() + (index % sq.size()) * max_inline_data();
  }
  RecvWqe& recv_slot(uint64_t index) { return rq[index % rq.size()]; }
  ibv_sge* recv_sges(uint64_t index) {
    return rq_sges.data() + (index % rq.size()) * max_recv_sge();
  }
};

// --- The event queue ---

enum class EventKind : uint8_t {
  kTransmit,    // Requester: send the next packet of the send queue.
  kArrive,      // Responder: a request packet arrives.
  kResponse,    // Requester: an ACK / NAK / READ response packet arrives.
  kRetryTimer,  // Requester: its transport timer expires.
  kFlush,       // A QP in ERR completes its outstanding work with FLUSH_ERR.
  kFault,       // A fault scheduled by FaultInjector::*At() happens.
  // The switch (switch.cc): a packet reaches it (to be delivered as
  // `deliver_as`), and an egress port finishes sending one.
  kSwitchArrive,
  kSwitchDequeue,
};

// What a kFault event does to its device.
enum class ScheduledFault : uint8_t { kKillDevice, kPortDown, kPortUp };

enum class Reply : uint8_t {
  kAck,           // Everything up to `psn` arrived.
  kRnrNak,        // `psn` found no receive; retry after `rnr_delay`.
  kErrorNak,      // `psn` failed with `nak_status` (class C error).
  kSequenceNak,   // `psn` is the PSN the responder expects (go back to it).
  kReadResponse,  // Packet `psn` of a READ's data.
};

// No payload buffer (FabricCore::AcquirePayloadLocked).
inline constexpr uint32_t kNoPayload = 0xFFFFFFFF;

// A scheduled event; for kArrive and kResponse, a packet on the wire. A
// request packet carries what its headers would (BTH, RETH, ImmDt) and, the
// simulator's liberty, the whole message's length on every packet.
//
// The switch's fields (kSwitchArrive: the packet's kind at its destination,
// its traffic class, its wire bytes, at most a 4096-byte MTU's payload and
// headers, and the device whose switch egress port it leaves by;
// kSwitchDequeue: that port) sit in what would be padding: 136 bytes, as
// without them (every packet is an event; their size is the event queue's
// cost).
struct EventFields {
  Nanos time{0};
  uint64_t sequence = 0;  // FIFO among events of the same time.
  EventKind kind = EventKind::kTransmit;
  EventKind deliver_as = EventKind::kArrive;
  uint32_t qp_num = 0;  // The requester (or the QP to flush).
  uint64_t epoch = 0;
  uint64_t wqe_index = 0;
  // kTransmit: tx_generation; kRetryTimer: timer_generation.
  uint32_t attempt = 0;
  // kArrive: where the request goes.
  uint32_t responder_device = 0;
  uint32_t responder_qp_num = 0;
  // The packet: its PSN, its place in its message, its payload.
  uint32_t psn = 0;
  uint32_t packet = 0;   // Index within the message (a READ's: of its data).
  uint32_t packets = 0;  // The message's packet count (READ: of the rest).
  bool ack_request = false;
  uint8_t traffic_class = 0;
  ibv_wr_opcode opcode = IBV_WR_SEND;
  bool solicited = false;
  uint16_t wire_bytes = 0;
  uint32_t imm_data = 0;
  uint64_t remote_addr = 0;  // RETH (READ: where the rest starts).
  uint32_t rkey = 0;
  uint32_t egress_device = 0;
  uint64_t length = 0;  // The message's (READ: the rest's) length.
  uint32_t payload = kNoPayload;
  uint32_t payload_bytes = 0;
  // kResponse.
  Reply reply = Reply::kAck;
  ibv_wc_status nak_status = IBV_WC_SUCCESS;
  Nanos rnr_delay{0};
  // kFault (`epoch` then holds the fault generation it was scheduled in).
  ScheduledFault fault = ScheduledFault::kKillDevice;
  uint32_t fault_device = 0;
};

// The blank EventFields every Event starts as (fabric_core.cc; never
// written). Copied in, a blank event is a few vector moves; built from the
// member initialisers, it is a `rep stos` zero-fill, whose stores the loads
// that follow soon after (copying the event into the queue, popping it
// again in kImmediate mode) cannot forward from: that stall was a fifth of
// the simulator's time at 1,024 connections (docs/performance.md, 1b). Not
// const, so that the compiler cannot turn the copy back into a zero-fill.
extern EventFields blank_event_fields;

struct Event : EventFields {
  Event() : EventFields(blank_event_fields) {}
};

// --- Faults ---

struct ResolvedTarget {
  int device = -1;  // -1: any.
  std::optional<uint32_t> qp_num;
  bool Matches(const SimQp& qp) const {
    return (device < 0 || static_cast<uint32_t>(device) == qp.device->index) &&
           (!qp_num.has_value() || *qp_num == qp.qp_num);
  }
};

struct FaultPlan {
  // A control-path call fails with `error` on `device` (empty: any).
  struct CallFault {
    int error = 0;
    int times = 1;  // kEveryTime: forever.
    std::string device;
    // CreateQp only: fires only for requests above this inline size.
    std::optional<uint32_t> when_inline_above;
    // ModifyQp only: the transition it fires on.
    ibv_qp_state from = IBV_QPS_RESET;
    ibv_qp_state to = IBV_QPS_RESET;
  };
  struct CompletionFault {
    ResolvedTarget target;
    ibv_wc_status status;
    int remaining;
  };
  // The next `remaining` packets to the target are dropped (or duplicated).
  struct PacketFault {
    ResolvedTarget target;
    int remaining;
  };
  struct DelayFault {
    ResolvedTarget target;
    Nanos delay;
  };
  std::vector<CallFault> create_qp;
  std::vector<CallFault> reg_mr;
  std::vector<CallFault> create_cq;
  std::vector<CallFault> modify_qp;
  std::vector<CompletionFault> completions;
  std::vector<PacketFault> drops;
  std::vector<DelayFault> delays;
  std::vector<PacketFault> duplicates;
};

// --- The core ---

class FabricCore {
 public:
  explicit FabricCore(const FabricOptions& options);
  ~FabricCore();
  FabricCore(const FabricCore&) = delete;
  FabricCore& operator=(const FabricCore&) = delete;

  mutable CoreMutex mu;

  // --- State (guarded by mu) ---
  FabricOptions options;
  Nanos now{0};
  std::vector<std::unique_ptr<Device>> devices;
  FaultPlan faults;
  std::unordered_map<const ibv_context*, std::unique_ptr<SimContext>> contexts;
  std::unordered_map<const ibv_pd*, std::unique_ptr<SimPd>> pds;
  std::unordered_map<const ibv_mr*, std::unique_ptr<SimMr>> mrs;
  std::unordered_map<const ibv_mw*, std::unique_ptr<SimMw>> mws;
  std::unordered_map<const ibv_comp_channel*, std::unique_ptr<SimChannel>>
      channels;
  HandleRegistry<ibv_cq, SimCq> cqs;
  HandleRegistry<ibv_qp, SimQp> qps;
  std::unordered_map<const ibv_ah*, std::unique_ptr<SimAh>> ahs;
  HandleRegistry<ibv_srq, SimSrq> srqs;
  std::unordered_map<uint32_t, SimCq*> cqs_by_id;
  uint32_t next_object_id = 1;
  uint32_t next_mr_key = 0x1000;
  // Window indices start where MR keys never reach, so an rkey names an MR
  // or a window, never both.
  uint32_t next_mw_index = 0x800000;
  // Bumped by FaultInjector::Clear(): kFault events of an older generation
  // are cancelled.
  uint64_t fault_generation = 0;
  // Every event run, packet lost, completion written and async event raised,
  // in order (see trace.h); events_run counts the events.
  Trace trace;
  uint64_t events_run = 0;
  // The switch (sim/switch.h, switch.cc): its options, one egress port per
  // device (sized when enabled), and the packets on their way to it or in
  // its queues.
  SwitchOptions switch_options;
  std::vector<SwitchPort<Event>> switch_ports;
  uint64_t packets_in_switch = 0;

  // --- Lookups: nullptr for an unknown or destroyed handle ---
  SimContext* FindContext(const ibv_context* handle) const;
  SimPd* FindPd(const ibv_pd* handle) const;
  SimMr* FindMr(const ibv_mr* handle) const;
  SimMw* FindMw(const ibv_mw* handle) const;
  SimChannel* FindChannel(const ibv_comp_channel* handle) const;
  SimCq* FindCq(const ibv_cq* handle) const;
  SimQp* FindQp(const ibv_qp* handle) const;
  SimAh* FindAh(const ibv_ah* handle) const;
  SimSrq* FindSrq(const ibv_srq* handle) const;
  SimSrq* FindSrqById(uint32_t id) const;
  SimQp* FindQpByNum(uint32_t qp_num) const {
    const uint32_t index = qp_num - kFirstQpNum;
    return index < qp_table_.size() ? qp_table_[index] : nullptr;
  }
  // The QP on `device` numbered `qp_num`, or nullptr.
  SimQp* FindQpOnDevice(const Device& device, uint32_t qp_num) const;
  Device* FindDevice(std::string_view name) const;

  // --- Progress ---
  void ScheduleLocked(const Event& event) { events_.Push(event); }
  // The same, for an event built where it will live (event_queue.h):
  // StartEventLocked() gives a blank event for the caller to fill in, and
  // CommitEventLocked() puts it in its place in the queue; nothing else may
  // touch the queue in between.
  Event& StartEventLocked() { return events_.Start(); }
  void CommitEventLocked() { events_.Commit(); }
  // Runs the earliest event; false if none.
  bool StepLocked();
  size_t RunUntilIdleLocked();
  size_t AdvanceClockLocked(Nanos duration);
  // Events still meaningful (stale timers and packets excluded).
  size_t PendingEventCountLocked() const;
  // The time of the earliest event still meaningful, if any.
  std::optional<Nanos> NextEventTimeLocked();
  // In kImmediate mode, runs to quiescence; in kManual, does nothing.
  void ProgressLocked();

  // --- Verbs data path (validation included) ---
  absl::Status PostSendLocked(SimQp& qp, ibv_send_wr* wr, ibv_send_wr** bad_wr);
  absl::Status PostRecvLocked(SimQp& qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr);
  absl::Status PostSrqRecvLocked(SimSrq& srq, ibv_recv_wr* wr,
                                 ibv_recv_wr** bad_wr);
  absl::StatusOr<int> PollCqLocked(SimCq& cq, int num_entries, ibv_wc* wc);

  // --- QP life cycle hooks used by the control path ---

  // Starts transmitting if the QP can (RTS, work queued, nothing in flight).
  void KickSendQueueLocked(SimQp& qp);
  // Moves the QP to ERR and schedules the flush of its outstanding work.
  void EnterErrorLocked(SimQp& qp);
  // RESET: drops all outstanding work and its completions (as libmlx5 cleans
  // the CQs of a QP being reset), forgets PSN state.
  void ResetQpLocked(SimQp& qp);
  // Removes the QP's completions from its CQs (destroy and reset).
  void CleanCqsOfQpLocked(const SimQp& qp);
  // CreateQp: gives the QP the next QP number and makes it findable.
  void RegisterQpLocked(SimQp& qp);
  // DestroyQp: forgets the QP everywhere (registries, CQs, RNR waits) and
  // frees it.
  void RemoveQpLocked(SimQp& qp);
  // Requesters waiting on an RNR from `responder_qp_num` try again.
  void WakeRnrWaitersLocked(uint32_t responder_qp_num);
  // Whether a message arriving at `qp` finds a receive (its RQ or its SRQ).
  static bool HasReceive(const SimQp& qp);
  // Requesters waiting on an RNR from any QP of `srq` try again.
  void WakeRnrWaitersOfSrqLocked(const SimSrq& srq);
  // After a receive was taken from `srq`: raises the limit event if armed
  // and fewer than the limit are left posted.
  void ConsumedSrqReceiveLocked(SimSrq& srq);
  void KillDeviceLocked(Device& device);
  // Unbinds a window (local invalidate, dealloc): its rkey is dead.
  void UnbindMwLocked(SimMw& mw);

  // --- Faults raising async events (device_faults.cc) ---
  // PortDown/PortUp set port_down; the port event goes to every open context
  // of the device only when the state QueryPort reports changes (never on a
  // dead device, nor when the port already was down or up).
  void PortDownLocked(Device& device);
  void PortUpLocked(Device& device);
  // Fills (or, with nullopt, empties) slot `index` of the GID table, which
  // the caller checked exists, raises IBV_EVENT_GID_CHANGE on every open
  // context and makes every QP look its route up again.
  void SetGidLocked(Device& device, uint32_t index,
                    const std::optional<ibv_gid>& gid, ibv_gid_type type);
  // IBV_EVENT_QP_FATAL, and the QP goes to ERR (its work is flushed).
  void RaiseQpFatalLocked(SimQp& qp);
  // Raises IBV_EVENT_CQ_ERR for a CQ the caller put in error (overrun or
  // error_injected); data_path.cc, shared by the overrun path and the fault.
  void RaiseCqErrorLocked(SimCq& cq);
  // Runs `fault` on `device` at virtual time `at` (not before now), as a
  // fabric event.
  void ScheduleFaultLocked(Nanos at, ScheduledFault fault,
                           const Device& device);
  // The same event on every open context of `device`, oldest context first.
  void RaiseOnEveryContextLocked(const Device& device, ibv_event_type type);

  void RaiseAsyncEventLocked(SimContext& context, ibv_event_type type,
                             AsyncEventTarget target, void* element,
                             uint32_t target_id);
  // Counts a lost packet at `where` and records it in the trace.
  void CountPacketLostLocked(Device& where, uint32_t qp_num);

  // Fabric::ConfigureSwitch (switch.cc): kInvalidArgument for bad options,
  // kFailedPrecondition while packets are in the switch; resets its ports.
  absl::Status ConfigureSwitchLocked(const SwitchOptions& options);

  std::vector<LiveObject> LeakReportLocked() const;

 private:
  bool IsStaleLocked(const Event& event) const;
  void DropStaleEventsLocked();

  // Event handlers: requester.cc (kTransmit, kResponse, kRetryTimer),
  // responder.cc (kArrive), data_path.cc (kFlush), device_faults.cc.
  void HandleTransmitLocked(const Event& event);
  void HandleArriveLocked(const Event& event);
  void HandleResponseLocked(const Event& event);
  void HandleRetryTimerLocked(const Event& event);
  void HandleFlushLocked(const Event& event);
  void HandleFaultLocked(const Event& event);
  void HandleSwitchArriveLocked(const Event& event);
  void HandleSwitchDequeueLocked(const Event& event);

  // --- Requester (requester.cc) ---
  // Schedules the QP's next kTransmit at `at` (once).
  void ScheduleTransmitLocked(SimQp& qp, Nanos at);
  // Starts the WQE at sq_next if the window, the READ depth and the order of
  // completions allow; false if it must wait. A WQE that completes at once
  // (a local operation, an injected or a local error) completes here.
  bool StartNextWqeLocked(SimQp& qp);
  // Transmits the packet at the transmit pointer and advances it.
  void TransmitPacketLocked(SimQp& qp);
  // Completes the WQE at sq_active with `status`, writing a CQE when it is
  // signalled or an error; an error moves the QP to ERR.
  void CompleteHeadSendLocked(SimQp& qp, ibv_wc_status status);
  // Completes, in order, every started WQE whose PSNs up to `psn` are
  // acknowledged (a READ only once all its data arrived). Returns false if
  // the ACK passed a READ still missing data (its responses were lost).
  bool AcknowledgeLocked(SimQp& qp, uint32_t psn);
  // The oldest PSN was acknowledged: fresh retry budgets, timer restarted,
  // transmission resumed.
  void NoteProgressLocked(SimQp& qp);
  // Go-back-N: the next packet transmitted is the one of una_psn.
  void RewindLocked(SimQp& qp);
  // A sequence NAK or the transport timer: spends one of retry_cnt retries
  // and goes back to una_psn, or, with none left, fails the oldest WQE with
  // IBV_WC_RETRY_EXC_ERR (the QP goes to ERR).
  void RetryOrFailLocked(SimQp& qp);
  // The oldest outstanding PSN moved (or nothing is outstanding any more):
  // restart, or stop, the transport timer.
  void RestartTimerLocked(SimQp& qp, Nanos from);
  // Schedules the timer's expiry (of the current timer_generation) at
  // `from` + the QP's timeout; the caller checked timeout is not 0.
  void ArmTimerLocked(SimQp& qp, Nanos from);
  // Writes a READ response's payload into the READ's local buffers; false
  // on a local protection error.
  bool PlaceReadDataLocked(SimQp& qp, const SendWqe& wqe, uint64_t index,
                           const Event& response);

  // --- Responder (responder.cc) ---
  // Executes the in-sequence request packet `request` at `responder`;
  // returns the reply to send, if any.
  struct ResponderOutcome {
    bool reply = false;
    Reply kind = Reply::kAck;
    ibv_wc_status nak_status = IBV_WC_SUCCESS;
    Nanos rnr_delay{0};
  };
  ResponderOutcome ExecuteRequestLocked(SimQp& requester, SimQp& responder,
                                        const Event& request);
  // Answers an RDMA READ request (new or duplicate) with its data packets.
  void SendReadResponsesLocked(SimQp& responder, const Event& request);
  // A packet from `responder` back to the requester of `request` (an ACK,
  // NAK or READ response): the routing and identity fields set.
  static Event ReplyPacket(const SimQp& responder, const Event& request,
                           Reply kind);
  // Sends an ACK or NAK for `psn` back to the request's requester.
  void SendReplyLocked(SimQp& responder, const Event& request, Reply kind,
                       uint32_t psn, ibv_wc_status nak_status = IBV_WC_SUCCESS,
                       Nanos rnr_delay = Nanos(0));
  // The receive WR an incoming message goes to: the consumption point of the
  // receive queue, or on an SRQ the shared receive claimed by the message's
  // first packet (claimed here if not yet); nullopt: none posted, RNR.
  // ReceiveWqe/ReceiveSges name it; taking it completes it.
  std::optional<uint64_t> ClaimReceiveLocked(SimQp& responder);
  RecvWqe& ReceiveWqe(SimQp& responder, uint64_t index);
  ibv_sge* ReceiveSges(SimQp& responder, uint64_t index);
  void TakeReceiveLocked(SimQp& responder);
  // Frees the READ resources whose responses the requester has all.
  void RetireReadResourcesLocked(SimQp& responder, const SimQp* requester);

  // --- The wire (link.cc) ---
  // Queues a packet of `payload_bytes` (plus headers) on `from`'s port and
  // schedules `packet` at the far end when it has arrived: after the
  // packets queued before it, its serialisation, the link latency and
  // `extra_delay`. Returns the time its last bit leaves the port.
  Nanos SendOnWireLocked(Device& from, uint8_t traffic_class, Event packet,
                         uint32_t header_bytes, Nanos extra_delay);
  // The same without delivering it (a packet that leaves and is lost).
  Nanos ReserveEgressLocked(Device& from, uint8_t traffic_class,
                            const Event& packet, uint32_t header_bytes);
  // With the switch enabled: `packet` of `wire_bytes` reaches the switch at
  // `at`, on its way to the device `egress_device` (switch.cc).
  void SendToSwitchLocked(Event packet, uint8_t traffic_class,
                          uint32_t wire_bytes, Nanos at);
  // Sends the next packet the scheduler of the idle switch egress port
  // `index` picks; the caller checked it has one.
  void SwitchTransmitLocked(uint32_t index);
  // Payload buffers of packets in flight, from the fabric's pool
  // (payload_pool.h): a buffer of at least `bytes`, the one most recently
  // released if one is free.
  uint32_t AcquirePayloadLocked(uint32_t bytes) {
    return payloads_.Acquire(bytes);
  }
  uint8_t* PayloadData(uint32_t buffer) const { return payloads_.Data(buffer); }
  // Gives `packet`'s buffer back to the pool (nothing if it has none).
  void ReleasePayloadLocked(const Event& packet) {
    if (packet.payload != kNoPayload) payloads_.Release(packet.payload);
  }

  void WriteCqeLocked(SimCq& cq, const CqEntry& entry);
  void ScheduleFlushLocked(SimQp& qp);
  // The responder QP a requester's path leads to, or nullptr.
  SimQp* RouteLocked(SimQp& requester, Device** device);
  // The traffic class a packet `qp` sends carries on the wire.
  static uint8_t WireTrafficClass(const SimQp& qp);
  Nanos ExtraDelayLocked(const SimQp& destination) const;
  bool ConsumeDropLocked(const SimQp& destination);
  bool ConsumeDuplicateLocked(const SimQp& destination);
  bool HasCompletionFaultLocked(const SimQp& qp) const;
  std::optional<ibv_wc_status> ConsumeCompletionFaultLocked(const SimQp& qp);
  const SimMr* FindMrForAccessLocked(const Device& device, const SimPd& pd,
                                     uint32_t key, uint64_t addr,
                                     uint64_t length,
                                     int required_access) const;
  // A responder's R_Key check: an MR on the responder's PD, or a window
  // bound to the responder QP itself; both with the access and the range.
  bool RemoteKeyAllowsLocked(const SimQp& responder, uint32_t rkey,
                             uint64_t addr, uint64_t length,
                             int required_access) const;
  // Executes a local work request (IBV_WR_BIND_MW, IBV_WR_LOCAL_INV) at the
  // head of the send queue; returns its completion status.
  ibv_wc_status ExecuteLocalOpLocked(SimQp& qp, const SendWqe& wqe);
  // Copies `bytes` bytes at `offset` of the message `sges` describe out of
  // (to_sges false) or into (to_sges true) `buffer`, each piece through an
  // MR of `pd` with `required_access`; false if one is not.
  bool CopySgesLocked(const Device& device, const SimPd& pd,
                      const ibv_sge* sges, uint32_t num_sge, uint64_t offset,
                      uint8_t* buffer, uint64_t bytes, int required_access,
                      bool to_sges) const;
  // Whether the local buffers of `wqe` (gather, or a READ's scatter) are
  // registered with the access it needs.
  bool LocalBuffersValidLocked(SimQp& qp, const SendWqe& wqe, uint64_t index);

  // QP numbers are handed out in sequence from kFirstQpNum and never reused:
  // qp_table_[qp_num - kFirstQpNum] is the QP, or nullptr once destroyed.
  static constexpr uint32_t kFirstQpNum = 0x100;
  std::vector<SimQp*> qp_table_;

  // Earliest first; equal times in the order scheduled.
  EventQueue<Event> events_;
  // The payloads of the packets in the queue and the switch's queues.
  PayloadPool payloads_;
  // qp_nums of requesters with rnr_waiting set.
  std::vector<uint32_t> rnr_waiters_;
};

}  // namespace rdma_transport::sim::internal

#endif  // RDMA_TRANSPORT_SIM_INTERNAL_FABRIC_CORE_H_
