// File: transport/engine.h
//
// `Engine`: one progress engine for many connections, on one device or
// several. For each device (Context) it serves it owns one completion queue
// shared by the send and receive queues of every connection attached there,
// and that queue's completion channel; one pollable fd watches them all and
// one preallocated dispatch table names every connection, so one Progress()
// call drives them all.
// It also carries asynchronous operations (one-sided:
// Connection::PostWrite/PostRead; messages: PostSendFrom) to their end:
// each finished operation
// comes out of NextCompletion() once, as COMPLETED, FAILED or
// OUTCOME_UNKNOWN.
//
//   absl::StatusOr<std::unique_ptr<Engine>> engine = Engine::Create(context);
//   ConnectionOptions options;
//   options.engine = engine->get();  // opt in; null: the connection's own CQ
//   auto connection = Connect(context, "10.0.0.2:7471", options);
//   absl::StatusOr<OpHandle> first = (*connection)->PostWrite(ops);  // at once
//   size_t left = ops.size();
//   while (left > 0) {
//     if ((*engine)->Progress() == 0) (void)(*engine)->Wait(deadline);
//     while (std::optional<Completion> done = (*engine)->NextCompletion()) {
//       --left;  // done->handle - *first is the op's index in `ops`
//       if (done->outcome != OpOutcome::kCompleted) return done->status;
//     }
//   }
//
// Arrivals. The engine knows which of its connections hold messages not
// yet received: ReadyConnection() names the one that has waited longest,
// so a server finds its messages among thousands of connections without
// visiting an idle one. A connection joins the queue when a message
// arrives on it and it held none; a receive from it that leaves messages
// puts it behind the others; one that leaves none, or its close, takes it
// out. So the queue holds exactly the connections with messages waiting,
// in turn. A message arrives when the engine dispatches its completion
// (Progress(), Wait(), or a blocking call of one of its connections).
// Receiving from a connection that has a message never waits, reads no
// clock and makes no system call; with EngineOptions::progress kEvent, fd()
// is readable exactly while a connection or a completion is ready, so a
// thread may sleep in epoll_wait() with nothing left behind.
//
//   while (serving) {
//     if ((*engine)->Progress() == 0 && (*engine)->connections_ready() == 0) {
//       (void)(*engine)->Wait(env.DeadlineIn(std::chrono::milliseconds(10)));
//     }
//     while (Connection* ready = (*engine)->ReadyConnection()) {
//       absl::StatusOr<size_t> n = ready->Receive(buffer, env.Now());
//       if (!n.ok()) break;  // a failed connection: its status() says why
//       Handle(ready, std::span(buffer.data(), *n));
//     }
//   }
//
// A connection stays first until a receive takes one of its messages: a
// loop that does not receive from it (or gets an error and goes on) sees it
// again and again. A rendezvous message is ready like any other; its
// Receive() reads it from the peer (it waits for that READ).
//
// Shared receive queue. With EngineOptions::srq_slots > 0 the engine owns
// one SRQ and one registered pool of srq_slots x srq_slot_bytes
// (shared_receive_pool.h); attached connections keep no receive ring and
// post no receives of their own. Each reserves its recv_slots of the pool at
// attach - the credits its peer is given in the handshake - and Connect()/
// Accept() fail with kResourceExhausted when the pool has not that many
// unreserved slots. A slot taken by a message goes back to the SRQ once
// Receive() has copied the message out (or with its connection), before the
// credit for it returns to the peer: no RNR, and a connection whose
// application stops receiving holds at most its own recv_slots of the pool,
// never the others'. A device without SRQs fails Create() with
// kUnimplemented (errno text kept).
//
//   EngineOptions options;
//   options.srq_slots = 1024 * 16;       // >= the sum of recv_slots attached
//   options.srq_slot_bytes = 256;        // the largest message received
//   auto engine = Engine::Create(context, options);
//   ConnectionOptions shape;
//   shape.recv_slots = 16;               // this connection's share
//   shape.max_message_size = 256;
//   shape.engine = engine->get();
//   auto connection = Connect(context, address, shape);
//   absl::Status sent = (*connection)->Send(bytes);  // blocking calls too
//
// Several devices. Engine::Create({&nic0, &nic1}) makes an engine that
// serves connections on either Context: one thread, one loop, one fd, one
// queue of ready connections and one of finished operations over both NICs.
// Each device keeps what verbs tie to a device: its own CQ (and, with
// srq_slots, its own SRQ and pool), sized by the options for each. A
// connection on a Context the engine was not made with fails Connect() or
// Accept() with kInvalidArgument naming both. The Contexts must share one
// Env (one clock) and outlive the engine.
//
//   std::vector<const Context*> nics = {&nic0, &nic1};
//   absl::StatusOr<std::unique_ptr<Engine>> both = Engine::Create(nics);
//   ConnectionOptions on_both;
//   on_both.engine = both->get();
//   auto rail0 = Connect(nic0, "10.0.0.2:7471", on_both);
//   auto rail1 = Connect(nic1, "10.0.1.2:7471", on_both);
//   while ((*both)->Progress() > 0) {
//   }  // completions of both NICs dispatched
//
// Dispatch. Every work request of an attached connection carries the
// connection's slot in the engine in its wr_id (wr_id.h); a completion goes
// to slots[slot] after a check that its qp_num is that connection's (a
// completion left over from a connection that has gone is dropped). A
// receive of the shared queue names its pool slot instead, and goes to the
// connection whose QP it arrived on (a hash table of the attached QP
// numbers of that device, qp_slot_table.h: O(1)); a stale one has its slot
// reposted. QP numbers are per device, so a completion counts as a slot's
// only when it came from the slot's device's CQ. No allocation, no lookup
// that allocates: the tables are sized at Create().
//
// Capacity. Each device's CQ holds `cq_entries` completions; a connection
// attaching reserves its send queue plus its receive queue of them (about
// send_slots + max_rdma_batch + 4 + recv_slots) and Connect()/Accept() fail
// with kResourceExhausted when they are not left, as when all
// `max_connections` slots are taken. Asynchronous operations posted and not
// yet taken from NextCompletion() are bounded by `max_async_ops` across the
// engine, and per connection by its send queue (see Connection::PostWrite).
// On Soft-RoCE a connection holds ops past kSoftRoceInFlightBytes in flight
// itself and posts them from Progress() as completions are dispatched: keep
// calling Progress() (or Wait()) while ops are outstanding, as above.
//
// Blocking calls on an attached connection (Send, Receive, Write, Read,
// Check, Close) keep their contracts: while they wait they drive the engine
// (Progress()) themselves, so completions of the other connections are
// dispatched meanwhile, and they busy-poll whatever the connection's
// ProgressMode (the engine's fd is the one to sleep on).
//
// Liveness. The engine notices failures that come through the CQ (a retry
// exhaustion, a flush) and, in Wait(), every kServiceInterval empty
// Progress() calls in a row and every kBusyServiceInterval Progress() calls
// whatever they found (on the real clock, once those counts are reached,
// when busy_poll_gate.h says a turn is due: every 0.2-13 ms, and as
// timers fall due), services its connections: the device's async events,
// setup streams that closed (a peer process gone), keepalive probes and the
// completion watchdog, exactly as a blocking call's wait does. A connection
// that failed with asynchronous operations outstanding has its QP moved to
// ERR so that each ends with a flush completion; a provider that does not
// flush within kFlushWait gets the QP destroyed and the operations end then.
//
// Outcomes. COMPLETED: the NIC reported success. FAILED: the operation did
// not take effect remotely (a READ that did not complete, a WRITE refused by
// the responder's protection checks or by our own, or one never posted);
// status says why. OUTCOME_UNKNOWN: a WRITE or SEND that was posted and
// did not complete successfully on a QP that failed (retry exhaustion,
// flush), or a rendezvous SEND the peer had not reported read: its bytes
// may or may not have reached the peer. Every posted operation ends
// exactly once, in posting order per connection; none is lost when its
// connection fails, closes or is destroyed (those left then end FAILED or
// OUTCOME_UNKNOWN).
//
// Deadlines. PostWrite()/PostRead() take an optional deadline for their
// batch (PostSendFrom() for its message), on the Env's clock (virtual on the
// simulator). An RC operation cannot be cancelled, and reporting a deadline
// while the op stays in flight would leave the caller's memory in the NIC's
// hands indefinitely, so the contract is: an op not ended by its deadline fails
// its connection. At the first service turn at or after the deadline (Wait()
// wakes up for it) the connection fails with kDeadlineExceeded naming the op,
// its QP goes to ERR, and every op still in flight on it - the overdue one and
// all posted after or before it - ends with its flush completion (within
// kFlushWait, else the QP is destroyed) as after any failure: a WRITE
// OUTCOME_UNKNOWN, a READ FAILED, each with that kDeadlineExceeded status,
// which status() and every later call of the connection also return. Ops
// that completed first stay COMPLETED; other connections are untouched.
// The deadline is a bound on when the op ends, not on when the NIC is done
// with the memory: that is its completion, at most kFlushWait later. Nothing
// reads the clock per op: a post takes the minimum of its connection's
// deadlines, and a service turn (one clock read) compares; so an overdue op
// is noticed one service turn late at most (in a tight Progress() loop, up
// to kBusyServiceInterval calls), and a deadline already past at post is
// accepted and acted on at the next turn; one from another clock than the
// Env's is refused at post (kInvalidArgument, deadline.h). A connection
// inside a blocking call (Write(), Send()...) has its deadlines checked
// after the call ends.
//
//   absl::StatusOr<OpHandle> first =
//       connection->PostRead(ops, env.DeadlineIn(std::chrono::milliseconds(5)));
//   // A late op ends with done->status kDeadlineExceeded.
//
// Thread-safety. An engine and the connections attached to it belong to one
// thread at a time (the engine's thread): Progress(), Wait(),
// NextCompletion(), stats(), PostWrite()/PostRead()/PostSendFrom() and
// every blocking call of an attached connection must not run concurrently
// with each other. fd()
// and each connection's status()/stats()/accessors may be called from any
// thread. The engine takes no lock of its own; dispatching to a
// connection takes that connection's mutex, uncontended under this contract.
//
// Ownership. Create() takes Contexts that must outlive the engine; every
// attached connection must be destroyed before the engine (its destructor
// aborts otherwise: the connections' QPs use its CQs and SRQs). A connection
// on the shared queue being destroyed moves its QP to ERR and has the engine
// poll the CQ empty first (its own completions then count as stale), so no
// shared slot is lost with the completions ibv_destroy_qp cleans away.

#ifndef RDMA_TRANSPORT_TRANSPORT_ENGINE_H_
#define RDMA_TRANSPORT_TRANSPORT_ENGINE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "transport/busy_poll_gate.h"
#include "transport/connection_options.h"
#include "transport/context.h"
#include "transport/qp_slot_table.h"
#include "transport/ready_queue.h"
#include "transport/shared_receive_pool.h"
#include "verbs_shim/env.h"

namespace rdma_transport {

class Connection;

struct EngineOptions {
  // Connections attached at once (at most kMaxEngineSlots, wr_id.h).
  uint32_t max_connections = 1024;
  // Completion queue entries of each device; 0: min(65536, the device's
  // max_cqe).
  uint32_t cq_entries = 0;
  // Asynchronous operations posted and not yet taken by NextCompletion().
  uint32_t max_async_ops = 65536;
  // Completions taken per poll of each device's CQ in Progress() (1..64).
  uint32_t poll_batch = 32;
  // On each device, a shared receive queue of this many slots (0: none,
  // each connection keeps its own receive ring). Attached connections then
  // take their device's receives: each reserves its recv_slots of them at
  // attach (kResourceExhausted when they are not left) and registers no
  // receive ring (see "Shared receive queue" above). At most the device's
  // max_srq_wr; a device without SRQs fails Create() with kUnimplemented.
  uint32_t srq_slots = 0;
  // Bytes of one shared slot (64..kMaxSlotSize): the largest message an
  // attached connection receives, whatever its max_message_size.
  uint32_t srq_slot_bytes = 4096;
  // kEvent: fd() is readable exactly while ReadyConnection() or
  // NextCompletion() has something (an eventfd in its set, written and
  // read as that changes: two system calls a change), so a thread can sleep
  // in epoll_wait() with nothing left behind. kBusyPoll: no system call
  // for it; fd() says only that Wait() would not sleep for the CQ, a setup
  // stream or an async event (see fd()).
  ProgressMode progress = ProgressMode::kBusyPoll;
};

// Progress() calls that find nothing between two liveness services.
inline constexpr uint32_t kServiceInterval = 64;
// Progress() calls, empty or not, after which one services anyway.
inline constexpr uint32_t kBusyServiceInterval = 1024;

// The end of one asynchronous operation (see the file comment).
enum class OpOutcome { kCompleted, kFailed, kOutcomeUnknown };
// "COMPLETED", "FAILED", "OUTCOME_UNKNOWN".
const char* OpOutcomeName(OpOutcome outcome);

// Names one asynchronous operation of an engine: unique per engine, in
// posting order; a batch of n ops gets n consecutive handles.
using OpHandle = uint64_t;

struct Completion {
  OpHandle handle = 0;
  // The connection it was posted on; only for comparison once that
  // connection may have been destroyed.
  const Connection* connection = nullptr;
  OpOutcome outcome = OpOutcome::kCompleted;
  absl::Status status;  // OK exactly when kCompleted
  bool is_write = false;
  bool is_send = false;  // Connection::PostSendFrom(): a message
  uint64_t length = 0;
};

struct EngineStats {
  uint64_t progress_calls = 0;
  uint64_t completions = 0;        // work completions polled
  uint64_t stale_completions = 0;  // for a slot no longer (or not) there
  uint64_t ops_posted = 0;         // asynchronous operations
  uint64_t ops_completed = 0;
  uint64_t ops_failed = 0;
  uint64_t ops_outcome_unknown = 0;
  uint32_t connections = 0;
  uint32_t devices = 0;  // the Contexts it serves; the figures below sum them
  uint32_t cq_entries = 0;
  uint32_t cq_entries_reserved = 0;
  uint32_t srq_slots = 0;           // EngineOptions::srq_slots a device
  uint32_t srq_slots_reserved = 0;  // the attached connections' recv_slots
  uint32_t srq_slots_held = 0;      // holding a message not yet received
};

// The most devices one engine serves.
inline constexpr size_t kMaxEngineDevices = 64;

class Engine {
 public:
  // An engine for connections on `context`.
  static absl::StatusOr<std::unique_ptr<Engine>> Create(
      const Context& context, const EngineOptions& options = {});
  // An engine for connections on any of `contexts` (1..kMaxEngineDevices,
  // distinct, on one Env): see "Several devices" above. kInvalidArgument
  // names what is wrong with the list; a device that refuses its CQ or SRQ
  // fails the whole Create() with that device's error.
  static absl::StatusOr<std::unique_ptr<Engine>> Create(
      const std::vector<const Context*>& contexts,
      const EngineOptions& options = {});

  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;
  ~Engine();

  // Polls one batch of completions from each device's CQ and dispatches
  // each to its connection; returns how many were polled (0: every CQ was
  // empty). Never blocks.
  int Progress();
  // Sleeps until there may be work: returns OK once completions were
  // dispatched, or NextCompletion() or ReadyConnection() has something,
  // kDeadlineExceeded at `deadline` (on the Env's clock: virtual time on
  // the simulator). Services the connections' liveness while it waits.
  absl::Status Wait(Deadline deadline);
  // Readable while Wait() would not sleep for the CQ, a setup stream or an
  // async event: for the application's own epoll set. Call Progress() and
  // NextCompletion() when it is, then Wait(env.Now()) - it returns with the
  // CQ armed, a deadline already past or not - before epoll_wait() again.
  int fd() const { return epoll_fd_; }

  // The next finished asynchronous operation, oldest first, if any.
  std::optional<Completion> NextCompletion();
  size_t completions_ready() const { return finished_count_; }

  // A connection with a message waiting, or nullptr (see "Arrivals" above):
  // the one that has waited longest since it last had one received. Never
  // blocks, reads no clock, makes no system call.
  Connection* ReadyConnection() const {
    const uint32_t slot = ready_.front();
    return slot == ReadyQueue::kNone ? nullptr : slots_[slot].connection;
  }
  size_t connections_ready() const { return ready_.size(); }

  EngineStats stats() const;
  // The Contexts it serves, in the order given to Create().
  size_t devices() const { return lanes_.size(); }
  const Context& context(size_t device = 0) const {
    return *lanes_[device].context;
  }
  // Whether connections on `context` may attach.
  bool Serves(const Context& context) const {
    return LaneOf(context) != kNoLane;
  }

 private:
  friend class Connection;

  // One device's share: what verbs tie to a device.
  struct Lane {
    explicit Lane(const Context& on, uint32_t max_connections)
        : context(&on), verbs(&on.verbs()), qp_slots(max_connections) {}
    const Context* context;
    Verbs* verbs;
    ibv_comp_channel* channel = nullptr;
    ibv_cq* cq = nullptr;
    std::unique_ptr<SharedReceivePool> pool;
    // The slot of every connection attached on this device, by qp_num.
    QpSlotTable qp_slots;
    uint32_t cq_entries = 0;
    uint32_t cq_reserved = 0;
    bool cq_armed = false;
  };
  static constexpr uint32_t kNoLane = ~uint32_t{0};

  Engine(Env& env, const EngineOptions& options);
  // Makes `context`'s lane: its channel, CQ, SRQ pool, epoll entries.
  absl::Status AddLane(const Context& context);
  // Adds `fd` to epoll_fd_'s set, readable, with `tag` as its data.
  absl::Status Watch(int fd, uint64_t tag);
  bool AllArmed() const {
    for (const Lane& lane : lanes_) {
      if (!lane.cq_armed) return false;
    }
    return true;
  }
  uint32_t LaneOf(const Context& context) const {
    for (uint32_t i = 0; i < lanes_.size(); ++i) {
      if (lanes_[i].context == &context) return i;
    }
    return kNoLane;
  }
  // Polls one batch of lane `lane`'s CQ and dispatches it.
  int PollLane(uint32_t lane);

  // For Connection: attaching on `context` (which the engine serves)
  // reserves `cq_entries` of its device's CQ, a slot and, with a shared
  // receive queue, `srq_credits` of its slots.
  absl::StatusOr<uint32_t> Attach(Connection* connection,
                                  const Context& context, uint32_t qp_num,
                                  uint32_t cq_entries, uint32_t srq_credits);
  // With a shared receive queue: the connection's QP has been moved to ERR
  // (it consumes no more receives); polls the CQ until it is empty with the
  // slot's completions treated as stale, so that every shared slot one of
  // them holds is reposted before the QP's destruction would clean it away.
  void DrainForDetach(uint32_t slot);
  void Detach(uint32_t slot);
  // `context`'s shared receive queue's slots, or nullptr without one (or
  // when the engine does not serve `context`).
  SharedReceivePool* pool(const Context& context) const {
    const uint32_t lane = LaneOf(context);
    return lane == kNoLane ? nullptr : lanes_[lane].pool.get();
  }
  // The connection's setup stream, watched by fd() (-1: none).
  void WatchSetupStream(uint32_t slot, int fd);
  // `context`'s CQ (the engine serves it).
  ibv_cq* cq(const Context& context) const {
    return lanes_[LaneOf(context)].cq;
  }
  // Stale completions of `lane`: shared slots they consumed are reposted.
  void ReclaimStale(Lane& lane, std::span<const ibv_wc> wcs);
  // Every connection on `lane` fails with `status` (its CQ failed).
  void FailLane(uint32_t lane, const absl::Status& status);
  // Room for `count` more operations (counted until taken).
  bool HasOpRoom(uint32_t count) const {
    return ops_outstanding_ + count <= options_.max_async_ops;
  }
  OpHandle ReserveOps(uint32_t count);
  void Finish(Completion completion);
  // For Connection, under its lock: a message arrived on `slot`'s
  // connection; one was received there and `more` wait.
  void NoteArrival(uint32_t slot) {
    if (ready_.Push(slot) && ready_fd_ >= 0) SyncReadyFd();
  }
  void NoteReceived(uint32_t slot, bool more) {
    ready_.Remove(slot);
    if (more) ready_.Push(slot);  // behind the others
    if (ready_fd_ >= 0) SyncReadyFd();
  }
  // kEvent: ready_fd_ readable exactly while something is ready.
  void SyncReadyFd();

  // Liveness of every connection (see the file comment); `setup_readable`
  // lists the slots whose setup stream fd() reported. Returns when the
  // earliest connection timer (keepalive, watchdog, flush) is due. `now` is
  // the clock read for this turn.
  Deadline Service(std::span<const uint32_t> setup_readable, Deadline now);
  // Reads fd()'s epoll set without waiting: takes the channel's events and
  // puts the slots of readable setup streams in `setup_readable`.
  size_t ReadEvents(std::span<uint32_t> setup_readable);
  // ReadEvents() then Service(), from Progress(), when service_gate_ says
  // the turn is due (always in virtual time).
  void MaybeServiceTurn();
  void DrainChannel(Lane& lane);

  Env& env_;
  // When the engine was made, on its Env's clock: Wait() checks its
  // deadline's clock against it (OnClockOf) before anything else.
  const Deadline made_at_;
  EngineOptions options_;
  // One a device, in Create()'s order; never resized after Create().
  std::vector<Lane> lanes_;
  int epoll_fd_ = -1;
  // kEvent: an eventfd in epoll_fd_'s set, readable exactly while
  // ready_signalled_ (ReadyConnection() or NextCompletion() has something).
  int ready_fd_ = -1;
  bool ready_signalled_ = false;

  // A completion polled from lane L for QP q belongs to slot s exactly when
  // slots_[s].lane_qp == LaneQp(L, q).
  static uint64_t LaneQp(uint32_t lane, uint32_t qp_num) {
    return (uint64_t{lane} << 32) | qp_num;
  }
  struct Slot {
    Connection* connection = nullptr;
    uint64_t lane_qp = 0;
    uint32_t cq_entries = 0;
    uint32_t srq_credits = 0;
    int setup_fd = -1;
  };
  static uint32_t LaneOfSlot(const Slot& slot) {
    return static_cast<uint32_t>(slot.lane_qp >> 32);
  }
  std::vector<Slot> slots_;
  std::vector<uint32_t> free_slots_;  // a stack
  // The slots whose connections hold messages not yet received.
  ReadyQueue ready_;
  uint32_t attached_ = 0;
  uint32_t idle_turns_ = 0;           // empty Progress() calls in a row
  uint32_t turns_since_service_ = 0;  // Progress() calls since Service()
  BusyPollGate service_gate_{false};  // real clock: when a turn is due

  // Finished operations not yet taken: a ring of max_async_ops entries.
  std::vector<Completion> finished_;
  size_t finished_head_ = 0;
  size_t finished_count_ = 0;
  uint64_t ops_outstanding_ = 0;  // posted and not yet taken
  OpHandle next_handle_ = 1;

  EngineStats stats_;
};

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TRANSPORT_ENGINE_H_
