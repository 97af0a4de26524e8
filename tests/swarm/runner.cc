#include "tests/swarm/runner.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "sim/fabric.h"
#include "sim/fault_injector.h"
#include "sim/profile_names.h"
#include "sim/sim_verbs.h"
#include "tests/connection_pair.h"
#include "tests/connection_test_peer.h"
#include "transport/config.h"
#include "transport/connection.h"
#include "transport/context.h"
#include "transport/listener.h"
#include "transport/memory_region.h"
#include "verbs_shim/verbs_wrapper.h"

namespace rdma_transport::swarm {
namespace {

using std::chrono::milliseconds;
using std::chrono::nanoseconds;
using std::chrono::seconds;

// Each side's one-sided buffers: a local source/destination and a region the
// peer may write and read.
constexpr size_t kRdmaBytes = 16 * 1024;
// Write()/Read() have no deadline; they are bounded by the QP's retry budget
// (4.096 us * 2^14 * 8 = 537 ms), a keepalive and the flush wait. A return
// later than this is a hang.
constexpr nanoseconds kRdmaBound = seconds(5);
// How long a Send may wait for credits its drained peer owes it.
constexpr nanoseconds kStallBound = seconds(2);
// After the faults stop, a receiver that is still healthy gets every message
// within this, or learns that its peer is gone (keepalive + retry budget).
constexpr nanoseconds kFinalDrain = seconds(5);

// The CQ overrun fault: while `shrink` is set, every CQ is created with four
// entries, far fewer than a connection's rings complete.
class TinyCqVerbs : public VerbsWrapper {
 public:
  using VerbsWrapper::VerbsWrapper;
  bool shrink = false;
  absl::StatusOr<ibv_cq*> CreateCq(ibv_context* context, int cqe,
                                   void* cq_context, ibv_comp_channel* channel,
                                   int comp_vector) override {
    return VerbsWrapper::CreateCq(context, shrink ? 4 : cqe, cq_context,
                                  channel, comp_vector);
  }
};

// One direction of a connection: messages Send() accepted and Receive() has
// not yet returned, oldest first.
struct Stream {
  uint64_t next_seq = 0;
  std::deque<std::vector<std::byte>> in_flight;
};

struct Side {
  std::unique_ptr<Connection> connection;
  std::vector<std::byte> local_bytes, remote_bytes;
  MemoryRegion local, remote;
  bool ended = false;   // a call returned a failure (not a deadline)
  bool closed = false;  // this side called Close()
  bool exited = false;  // this side's process "exited"
  bool usable() const {
    return connection != nullptr && !ended && !closed && !exited;
  }
};

struct Link {
  int generation = 0;
  std::array<Side, 2> sides;      // 0: client, 1: server
  std::array<Stream, 2> streams;  // by sending side
  bool open() const {
    return sides[0].connection != nullptr || sides[1].connection != nullptr;
  }
};

const char* SideName(int side) { return side == 0 ? "client" : "server"; }

class Run {
 public:
  Run(const Scenario& scenario, const RunOptions& options)
      : s_(scenario), options_(options) {}

  RunResult Go();

 private:
  Env& env() { return fabric_->env(); }
  void Log(const std::string& line) {
    if (!options_.verbose) return;
    absl::StrAppend(&result_.log, line, "\n");
    if (options_.echo) {
      std::printf("%s\n", line.c_str());
      std::fflush(stdout);
    }
  }
  void Violation(const std::string& what) {
    result_.violations.push_back(what);
    Log(absl::StrCat("  VIOLATION: ", what));
  }

  absl::Status Setup();
  absl::Status OpenContexts();
  // Dials link `index` anew (generation + 1); false if the dial failed.
  bool DialLink(size_t index);
  // Destroys both sides of a link, checking nothing it accepted is
  // unaccounted for.
  void EndLink(Link& link, int index);
  void Step(const swarm::Step& step, int index);
  void Send(Link& link, const swarm::Step& step, int index);
  void Drain(Link& link, int receiver, uint32_t count, nanoseconds wait,
             bool final);
  void Rdma(Link& link, const swarm::Step& step, bool is_write, int index);
  void Fault(Link& link, const swarm::Step& step);
  void Heal();
  void CheckLiveness();
  void Finish();

  // Records `status` of `side`'s `what`: a typed failure ends the side.
  void Failed(Link& link, int side, const absl::Status& status,
              const std::string& what);
  void CheckDeadline(Deadline deadline, const std::string& what) {
    const Deadline now = env().Now();
    if (now > deadline) {
      Violation(absl::StrCat(
          what, " returned ",
          std::chrono::duration_cast<nanoseconds>(now - deadline).count(),
          " ns after its deadline"));
    }
  }
  std::vector<std::byte> Payload(int link, int generation, int dir,
                                 uint64_t seq, uint32_t size) const;

  const Scenario& s_;
  const RunOptions options_;
  RunResult result_;
  std::unique_ptr<sim::Fabric> fabric_;
  std::unique_ptr<sim::SimVerbs> sim_verbs_;
  std::unique_ptr<TinyCqVerbs> verbs_;
  std::array<std::string, 2> devices_;
  std::array<std::unique_ptr<Context>, 2> contexts_;
  std::vector<Link> links_;
  std::array<bool, 2> killed_{false, false};
  std::array<bool, 2> port_down_{false, false};
};

bool IsTyped(const absl::Status& status) { return TypedStatus(status); }

std::vector<std::byte> Run::Payload(int link, int generation, int dir,
                                    uint64_t seq, uint32_t size) const {
  Rng rng(s_.seed * 0x100000001b3ull ^
          (static_cast<uint64_t>(link) << 48 ^
           static_cast<uint64_t>(generation) << 40 ^
           static_cast<uint64_t>(dir) << 32 ^ seq));
  std::vector<std::byte> bytes(size);
  for (size_t i = 0; i < bytes.size(); i += 8) {
    uint64_t word = rng.Next();
    std::memcpy(bytes.data() + i, &word, std::min<size_t>(8, size - i));
  }
  return bytes;
}

absl::Status Run::OpenContexts() {
  const std::array<const std::string*, 2> profiles = {&s_.client_profile,
                                                      &s_.server_profile};
  for (int side = 0; side < 2; ++side) {
    contexts_[side].reset();
    if (devices_[side].empty()) {
      absl::StatusOr<sim::DeviceProfile> profile =
          sim::ProfileByName(*profiles[side]);
      if (!profile.ok()) return profile.status();
      absl::StatusOr<std::string> device = fabric_->AddDevice(
          *profile, std::nullopt, side == 0 ? "10.0.0.1" : "10.0.0.2");
      if (!device.ok()) return device.status();
      devices_[side] = *device;
    }
    absl::StatusOr<std::unique_ptr<Context>> context =
        Context::Open(*verbs_, devices_[side], TransportConfig{});
    if (!context.ok()) return context.status();
    contexts_[side] = *std::move(context);
  }
  return absl::OkStatus();
}

absl::Status Run::Setup() {
  // kManual: a verbs call returns at once and the fabric moves only while
  // the transport waits, as a NIC works while the host waits. (kImmediate
  // would spend a retry budget inside one PostSend, past any deadline.)
  sim::FabricOptions fabric_options;
  fabric_options.progress_mode = sim::ProgressMode::kManual;
  fabric_ = std::make_unique<sim::Fabric>(fabric_options);
  sim_verbs_ = std::make_unique<sim::SimVerbs>(fabric_.get());
  verbs_ = std::make_unique<TinyCqVerbs>(sim_verbs_.get());
  if (absl::Status opened = OpenContexts(); !opened.ok()) return opened;
  verbs_->shrink = s_.features.tiny_cq;
  links_.resize(static_cast<size_t>(s_.connections));
  for (size_t i = 0; i < links_.size(); ++i) DialLink(i);
  return absl::OkStatus();
}

bool Run::DialLink(size_t index) {
  Link& link = links_[index];
  const int generation = link.generation + 1;
  link = Link{};
  link.generation = generation;
  ConnectionOptions options;
  options.recv_slots = s_.recv_slots;
  options.send_slots = s_.send_slots;
  options.max_message_size = s_.max_message_size;
  options.keepalive_interval = milliseconds(s_.keepalive_ms);
  options.progress =
      s_.features.event_mode ? ProgressMode::kEvent : ProgressMode::kBusyPoll;
  ++result_.connections_dialled;
  const Deadline accept_deadline =
      env().DeadlineIn(options.handshake_timeout * 2);
  DialResult dial = Dial(*contexts_[0], *contexts_[1], options, "127.0.0.1:0",
                         accept_deadline);
  CheckDeadline(accept_deadline, "Accept");
  const std::string what = absl::StrCat("dial of connection ", index,
                                        " (generation ", generation, ")");
  if (!dial.client.ok() || !dial.server.ok()) {
    for (const absl::Status& status :
         {dial.client.status(), dial.server.status()}) {
      if (!status.ok() && !IsTyped(status)) {
        Violation(absl::StrCat(what, ": untyped failure ", status.ToString()));
      }
    }
    Log(absl::StrCat("  ", what, " failed: client ",
                     dial.client.status().ToString(), "; server ",
                     dial.server.status().ToString()));
    // A half-made connection is destroyed at once (the other half fails).
    return false;
  }
  link.sides[0].connection = *std::move(dial.client);
  link.sides[1].connection = *std::move(dial.server);
  for (int side = 0; side < 2; ++side) {
    Side& me = link.sides[side];
    me.local_bytes.assign(kRdmaBytes, std::byte{0});
    me.remote_bytes.assign(kRdmaBytes, std::byte{0});
    absl::StatusOr<MemoryRegion> local =
        contexts_[side]->RegisterMemory(me.local_bytes, kLocalWrite);
    absl::StatusOr<MemoryRegion> remote = contexts_[side]->RegisterMemory(
        me.remote_bytes, kRemoteWrite | kRemoteRead);
    if (!local.ok() || !remote.ok()) {
      // Registration has no fault of its own here: a dead device refuses.
      Log(absl::StrCat("  registration failed on the ", SideName(side)));
      continue;
    }
    me.local = *std::move(local);
    me.remote = *std::move(remote);
  }
  Log(absl::StrCat("  ", what, ": ", link.sides[0].connection->name()));
  return true;
}

void Run::Failed(Link& link, int side, const absl::Status& status,
                 const std::string& what) {
  Side& me = link.sides[side];
  if (!IsTyped(status)) {
    Violation(absl::StrCat(what, " on the ", SideName(side),
                           ": untyped failure ", status.ToString()));
  }
  if (!me.ended) ++result_.connections_failed;
  me.ended = true;
  Log(absl::StrCat("    ", SideName(side), " ", what, ": ", status.ToString()));
}

void Run::Send(Link& link, const swarm::Step& step, int index) {
  Side& sender = link.sides[step.side];
  if (!sender.usable()) return;
  Stream& stream = link.streams[step.side];
  Rng sizes(s_.seed ^ (static_cast<uint64_t>(index) * 0x9e3779b97f4a7c15ull));
  const uint32_t limit = sender.connection->max_message_size();
  // A slow receiver makes the sender wait for credits: short deadlines.
  const nanoseconds wait =
      s_.features.slow_receiver ? milliseconds(2) : milliseconds(20);
  for (uint32_t i = 0; i < step.count; ++i) {
    const uint32_t size = step.size == 0
                              ? static_cast<uint32_t>(sizes.Below(limit + 1))
                              : std::min(step.size, limit);
    std::vector<std::byte> message =
        Payload(step.conn, link.generation, step.side, stream.next_seq, size);
    // When the peer has taken every message and seen every credit message
    // this side sent, its credits are back (all but fewer than a credit
    // batch, leaving more than the three data needs): Send must go through,
    // or the connection must fail, well within kStallBound (a
    // retransmission or a keepalive's retry budget).
    //
    // Seeing them takes a call: a credit message consumes one of the
    // peer's receives, which the peer reposts (and owes back) only when it
    // next polls, and nothing polls an idle connection. Without this turn
    // the sender's own credit returns leave it short (seed 1351: 2 credits,
    // with 2 credit messages unread by the peer and 1 credit owed), a
    // stall that an application calling Receive() or watching event_fd()
    // does not see (docs/testing.md, "Bugs found", 4).
    Side& peer = link.sides[1 - step.side];
    bool peer_drained = false;
    if (options_.check_credit_stalls && stream.in_flight.empty() &&
        peer.usable()) {
      Drain(link, 1 - step.side, 1, milliseconds(1), false);
      peer_drained =
          peer.usable() && peer.connection->stats().credit_messages_received ==
                               sender.connection->stats().credit_messages_sent;
    }
    const Deadline deadline =
        env().DeadlineIn(peer_drained ? kStallBound : wait);
    const absl::Status status = sender.connection->Send(message, deadline);
    CheckDeadline(deadline, "Send");
    if (status.ok()) {
      ++stream.next_seq;
      ++result_.messages_sent;
      stream.in_flight.push_back(std::move(message));
      continue;
    }
    if (status.code() == absl::StatusCode::kDeadlineExceeded) {
      if (peer_drained && sender.connection->status().ok() &&
          peer.connection->status().ok()) {
        Violation(absl::StrCat(
            "the ", SideName(step.side), "'s Send stalled ",
            std::chrono::duration_cast<milliseconds>(kStallBound).count(),
            " ms though its peer had received everything and both sides "
            "are healthy: credits lost (send credits: this side ",
            sender.connection->stats().send_credits, ", the peer ",
            peer.connection->stats().send_credits, "; credit messages sent ",
            sender.connection->stats().credit_messages_sent, "/",
            peer.connection->stats().credit_messages_sent, ")"));
      }
      Log(absl::StrCat("    send ", i, ": out of credits until the deadline"));
      return;
    }
    Failed(link, step.side, status, "Send");
    return;
  }
}

void Run::Drain(Link& link, int receiver, uint32_t count, nanoseconds wait,
                bool final) {
  Side& me = link.sides[receiver];
  if (!me.usable()) return;
  Stream& stream = link.streams[1 - receiver];
  std::vector<std::byte> buffer(s_.max_message_size);
  for (uint32_t i = 0; i < count; ++i) {
    if (final && stream.in_flight.empty()) return;
    const Deadline deadline = env().DeadlineIn(wait);
    absl::StatusOr<size_t> got = me.connection->Receive(buffer, deadline);
    CheckDeadline(deadline, "Receive");
    if (!got.ok()) {
      if (got.status().code() == absl::StatusCode::kDeadlineExceeded) {
        if (final) {
          const absl::Status status = me.connection->status();
          if (status.ok()) {
            Violation(absl::StrCat("lost ", stream.in_flight.size(),
                                   " message(s) to the ", SideName(receiver),
                                   ": accepted by Send(), never delivered, "
                                   "and the connection is still healthy"));
          }
          me.ended = true;
        }
        return;
      }
      Failed(link, receiver, got.status(), "Receive");
      return;
    }
    ++result_.messages_delivered;
    if (stream.in_flight.empty()) {
      Violation(absl::StrCat("the ", SideName(receiver),
                             " received a message never sent (or twice), ",
                             *got, " bytes"));
      continue;
    }
    const std::vector<std::byte>& expected = stream.in_flight.front();
    // (memcmp must not see the null data() of an empty message.)
    if (*got != expected.size() ||
        (!expected.empty() &&
         std::memcmp(buffer.data(), expected.data(), expected.size()) != 0)) {
      Violation(absl::StrCat(
          "the ", SideName(receiver), " received a message of ", *got,
          " bytes that is not the next one sent (",
          stream.next_seq - stream.in_flight.size(), ", ", expected.size(),
          " bytes): lost, reordered, duplicated or corrupt"));
    }
    stream.in_flight.pop_front();
  }
}

void Run::Rdma(Link& link, const swarm::Step& step, bool is_write, int index) {
  Side& me = link.sides[step.side];
  Side& peer = link.sides[1 - step.side];
  if (!me.usable() || !me.local.valid() || !peer.remote.valid()) return;
  Rng rng(s_.seed ^ (static_cast<uint64_t>(index) * 0xc2b2ae3d27d4eb4full));
  std::vector<RdmaOp> ops;
  const size_t size = std::min<size_t>(step.size, kRdmaBytes / step.count);
  for (uint32_t i = 0; i < step.count; ++i) {
    RdmaOp op;
    op.local = &me.local;
    op.local_offset = i * size;
    op.length = size;
    op.remote = peer.remote.remote();
    op.remote_offset = (step.count - 1 - i) * size;  // crossed on purpose
    ops.push_back(op);
  }
  // Sources get fresh bytes, destinations other fresh bytes, so a transfer
  // that did not happen cannot pass for one that did.
  for (size_t i = 0; i < kRdmaBytes; ++i) {
    const uint64_t word = rng.Next();
    me.local_bytes[i] = static_cast<std::byte>(word);
    peer.remote_bytes[i] = static_cast<std::byte>(word >> 8);
  }
  const Deadline start = env().Now();
  const absl::Status status =
      is_write ? me.connection->Write(ops) : me.connection->Read(ops);
  const nanoseconds took = env().Now() - start;
  const char* what = is_write ? "Write" : "Read";
  if (took > kRdmaBound) {
    Violation(absl::StrCat(what, " took ", took.count(),
                           " ns, beyond the retry-budget bound"));
  }
  if (!status.ok()) {
    Failed(link, step.side, status, what);
    return;
  }
  for (const RdmaOp& op : ops) {
    const std::byte* local = me.local_bytes.data() + op.local_offset;
    const std::byte* remote = peer.remote_bytes.data() + op.remote_offset;
    if (std::memcmp(local, remote, op.length) != 0) {
      Violation(absl::StrCat(what, " returned OK but ", op.length,
                             " bytes at remote offset ", op.remote_offset,
                             " differ from the source"));
      return;
    }
  }
  ++result_.rdma_ops_ok;
}

void Run::Fault(Link& link, const swarm::Step& step) {
  sim::FaultInjector& faults = fabric_->faults();
  const std::string& device = devices_[step.side];
  absl::Status status;
  switch (step.kind) {
    case StepKind::kKillDevice:
      killed_[step.side] = true;
      status = step.size == 0
                   ? faults.KillDevice(device)
                   : faults.KillDeviceAt(
                         device, fabric_->Now() + nanoseconds(step.size));
      break;
    case StepKind::kPortDown:
      port_down_[step.side] = true;
      status = faults.PortDown(device);
      break;
    case StepKind::kPortUp:
      status = faults.PortUp(device);
      break;
    default: {
      Side& me = link.sides[step.side];
      if (me.connection == nullptr || me.exited) return;
      if (step.kind == StepKind::kPeerExit) {
        ConnectionTestPeer::SimulateProcessExit(*me.connection);
        me.exited = true;
        // A process that exited receives nothing more.
        link.streams[1 - step.side].in_flight.clear();
        return;
      }
      const ibv_qp* qp = me.connection->qp();
      if (qp == nullptr) return;
      const sim::FaultTarget target = sim::FaultTarget::Qp(qp->qp_num);
      switch (step.kind) {
        case StepKind::kDrop:
          status = faults.DropPackets(target, static_cast<int>(step.count));
          break;
        case StepKind::kDelay:
          status = faults.DelayDelivery(target, nanoseconds(step.size));
          break;
        case StepKind::kQpFatal:
          status = faults.RaiseQpFatal(qp->qp_num);
          break;
        case StepKind::kFailCompletion:
          status = faults.FailCompletions(target, IBV_WC_GENERAL_ERR, 1);
          break;
        case StepKind::kCqError:
          status = faults.RaiseCqErrorOfQp(qp->qp_num, sim::QpCq::kSend);
          break;
        default:
          break;
      }
    }
  }
  // A QP already destroyed is not found: the fault has nothing to act on.
  if (!status.ok())
    Log(absl::StrCat("    fault not armed: ", status.ToString()));
}

void Run::EndLink(Link& link, int index) {
  for (int side = 0; side < 2; ++side) {
    Side& me = link.sides[side];
    // Messages the peer never received are accounted for when the peer (or
    // this side) ended: a live, healthy pair would not be ended here.
    if (me.connection != nullptr && !me.ended && !me.closed && !me.exited) {
      const Deadline deadline = env().DeadlineIn(seconds(3));
      const absl::Status closed = me.connection->Close(deadline);
      CheckDeadline(deadline, "Close");
      if (!closed.ok()) Failed(link, side, closed, "Close");
    }
  }
  for (int side = 0; side < 2; ++side) {
    link.sides[side].connection.reset();
    link.sides[side].local = MemoryRegion();
    link.sides[side].remote = MemoryRegion();
  }
  Log(absl::StrCat("  connection ", index, " (generation ", link.generation,
                   ") destroyed"));
}

void Run::Step(const swarm::Step& step, int index) {
  Log(absl::StrCat("[", index, "] ", DescribeStep(step), " @",
                   fabric_->Now().count(), " ns"));
  Link& link = links_[static_cast<size_t>(step.conn)];
  switch (step.kind) {
    case StepKind::kSend:
      Send(link, step, index);
      break;
    case StepKind::kDrain:
      Drain(link, 1 - step.side, step.count, milliseconds(1), false);
      break;
    case StepKind::kWrite:
    case StepKind::kRead:
      Rdma(link, step, step.kind == StepKind::kWrite, index);
      break;
    case StepKind::kClose: {
      Side& me = link.sides[step.side];
      if (!me.usable()) break;
      const Deadline deadline = env().DeadlineIn(seconds(2));
      const absl::Status status = me.connection->Close(deadline);
      CheckDeadline(deadline, "Close");
      me.closed = true;
      // What the peer sent and this side did not take is dropped with it.
      link.streams[1 - step.side].in_flight.clear();
      if (!status.ok()) Failed(link, step.side, status, "Close");
      break;
    }
    case StepKind::kReconnect: {
      const bool ended =
          !link.open() || !link.sides[0].usable() || !link.sides[1].usable();
      if (!ended) break;
      // Whatever the survivor had not received yet goes with it: its peer
      // ended (or closed), which is the typed outcome.
      EndLink(link, step.conn);
      DialLink(static_cast<size_t>(step.conn));
      break;
    }
    default:
      Fault(link, step);
      break;
  }
}

void Run::Heal() {
  Log(absl::StrCat("heal @", fabric_->Now().count(), " ns"));
  sim::FaultInjector& faults = fabric_->faults();
  faults.Clear();
  verbs_->shrink = false;
  for (int side = 0; side < 2; ++side) {
    if (killed_[side]) (void)faults.ReviveDevice(devices_[side]);
    if (port_down_[side] || killed_[side]) (void)faults.PortUp(devices_[side]);
  }
  // The old workaround for a transport bug the swarm found (docs/testing.md,
  // "Bugs found", 3, fixed in Context::RegisterListener): a port event still
  // queued when a connection was made failed the new connection, though the
  // port was back up.
  if (options_.drain_stale_async_events) {
    for (const auto& context : contexts_) {
      if (context != nullptr) context->PollAsyncEvents();
    }
  }
}

void Run::Finish() {
  // Every message accepted is delivered now, or its receiver ends typed.
  for (size_t i = 0; i < links_.size(); ++i) {
    Link& link = links_[i];
    for (int receiver = 0; receiver < 2; ++receiver) {
      Stream& stream = link.streams[1 - receiver];
      if (stream.in_flight.empty()) continue;
      if (!link.sides[receiver].usable()) continue;  // ended: typed, checked
      Drain(link, receiver, static_cast<uint32_t>(stream.in_flight.size()),
            kFinalDrain, true);
    }
    EndLink(link, static_cast<int>(i));
  }
}

void Run::CheckLiveness() {
  // New connections succeed once the faults have stopped, and keep working. A
  // NIC that died and came back needs its Context opened again, as an
  // application would.
  links_.clear();
  links_.resize(1);
  links_[0].generation = 1000;
  // After IBV_EVENT_DEVICE_FATAL a context is unusable (as with libibverbs):
  // the application opens the device again.
  if (killed_[0] || killed_[1]) {
    Log("  reopening the contexts after a device death");
    if (absl::Status reopened = OpenContexts(); !reopened.ok()) {
      Violation(absl::StrCat("liveness: cannot reopen a context: ",
                             reopened.ToString()));
      return;
    }
  }
  if (!DialLink(0)) {
    Violation("liveness: a new connection fails after the faults stopped");
    return;
  }
  Link& link = links_[0];
  // Enough single messages that credits go round several times: a credit
  // lost per return runs the sender dry.
  const int rounds = static_cast<int>(4 * s_.recv_slots);
  for (int side = 0; side < 2; ++side) {
    swarm::Step send;
    send.side = side;
    send.count = 1;
    const uint64_t delivered = result_.messages_delivered;
    for (int round = 0; round < rounds && link.sides[side].usable(); ++round) {
      Send(link, send, -1 - side);
      Drain(link, 1 - side, 1, kFinalDrain, true);
    }
    if (result_.messages_delivered - delivered !=
            static_cast<uint64_t>(rounds) ||
        !link.streams[side].in_flight.empty() || link.sides[0].ended ||
        link.sides[1].ended) {
      Violation(
          absl::StrCat("liveness: the new connection does not carry a "
                       "message from the ",
                       SideName(side)));
      break;
    }
  }
  EndLink(link, 0);
  for (int side = 0; side < 2; ++side) {
    if (link.sides[side].ended) {
      Violation("liveness: closing the new connection failed");
      break;
    }
  }
}

RunResult Run::Go() {
  if (absl::Status setup = Setup(); !setup.ok()) {
    Violation(absl::StrCat("setup: ", setup.ToString()));
    return std::move(result_);
  }
  for (size_t i = 0; i < s_.steps.size(); ++i) {
    Step(s_.steps[i], s_.shrunk() ? s_.kept[i] : static_cast<int>(i));
  }
  Heal();
  Finish();
  CheckLiveness();
  links_.clear();
  for (auto& context : contexts_) context.reset();
  for (const sim::LiveObject& object : fabric_->LeakReport()) {
    Violation(absl::StrCat("leak: ", object.ToString()));
  }
  result_.digest = fabric_->TraceDigest();
  result_.events = fabric_->EventsRun();
  result_.virtual_time = fabric_->Now();
  verbs_.reset();
  sim_verbs_.reset();
  fabric_.reset();
  return std::move(result_);
}

}  // namespace

bool TypedStatus(const absl::Status& status) {
  return !status.ok() && status.code() != absl::StatusCode::kUnknown &&
         !status.message().empty();
}

RunResult RunScenario(const Scenario& scenario, const RunOptions& options) {
  Run run(scenario, options);
  return run.Go();
}

}  // namespace rdma_transport::swarm
