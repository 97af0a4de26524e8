// File: transport/connection_options.h
//
// The plain values a Connection (connection.h) is made with and reports:
// ConnectionOptions (what Connect()/Listener take), ConnectionStats,
// ConnectionFootprint (Connection::Footprint(): its memory by formula),
// RdmaOp (one one-sided transfer), and the constants their comments name.
// No behaviour; copyable; safe to share between threads once built.
//
//   ConnectionOptions options;
//   options.recv_slots = 16;                  // the credits the peer starts with
//   options.max_message_size = 1024;
//   options.progress = ProgressMode::kEvent;  // sleep on a completion channel
//   auto connection = Connect(context, "10.0.0.2:7471", options);

#ifndef RDMA_TRANSPORT_TRANSPORT_CONNECTION_OPTIONS_H_
#define RDMA_TRANSPORT_TRANSPORT_CONNECTION_OPTIONS_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "transport/handshake.h"
#include "transport/memory_region.h"

namespace rdma_transport {

class Engine;

enum class ProgressMode { kBusyPoll, kEvent };

// Who may call a connection at once (connection.h, "Thread-safety";
// connection_lock.h).
enum class ThreadMode {
  // One thread may receive while another sends; status() and stats() from
  // any thread at any time. A connection used by one thread at a time
  // takes its lock with plain loads and stores (a biased lock); once two
  // threads have met on it, an atomic instruction to take it and one to
  // leave (connection_lock.h).
  kShared,
  // The caller makes sure that no two calls on the connection overlap,
  // status(), stats(), its views' Release() and its engine's calls
  // included: one thread, or several that hand it over with their own
  // synchronisation (UCX's UCS_THREAD_MODE_SERIALIZED). Nothing atomic is
  // locked, however often the connection moves between threads. Two calls
  // caught overlapping abort the process.
  kSerialized,
};

struct ConnectionOptions {
  // Receives kept posted, i.e. the credits the peer starts with (>= 2).
  uint32_t recv_slots = 64;
  // Messages in flight before Send() waits for completions.
  uint32_t send_slots = 64;
  // Largest message this side receives (the slot size) and sends.
  uint32_t max_message_size = 4096;
  // Work requests per post in Write()/Read(), and of one such call on the
  // send queue at most (connection.h, "One-sided").
  uint32_t max_rdma_batch = 32;
  // Bytes of RDMA in flight at most per connection, for Write()/Read() and
  // PostWrite()/PostRead(); 0: kSoftRoceInFlightBytes on Soft-RoCE, no cap
  // elsewhere. Under a cap, Write()/Read() and PostWrite()/PostRead() cut
  // pieces of cap / kRdmaPiecesUnderCap.
  uint64_t rdma_in_flight_bytes = 0;
  // Messages larger than this many bytes go by rendezvous (connection.h,
  // "Rendezvous"): the receiver READs them from the sender's memory. 0, or
  // anything above the peer's slot size: the peer's slot size, so every
  // message that fits a slot is sent eagerly (measured: docs/performance.md,
  // "Zero-copy and rendezvous").
  uint32_t rendezvous_threshold = 0;
  // Offer rendezvous in the handshake. false: messages larger than the
  // peer's slot are refused with kInvalidArgument, as before protocol 3's
  // MESSAGING extension.
  bool rendezvous = true;
  // Credits owed before they go back in a message of their own; 0: half of
  // recv_slots.
  uint32_t credit_batch = 0;
  ProgressMode progress = ProgressMode::kBusyPoll;
  // Busy-poll waits yield the CPU (sched_yield) once they have found
  // nothing for ~0.4 ms within ~25 ms of the thread having been
  // descheduled (busy_poll_gate.h): a thread the poller keeps off its CPU
  // (the peer's, or the kernel workers that move Soft-RoCE's packets) runs
  // sooner than the scheduler's tick would let it in. false: never yield,
  // as perftest does. Over rxe on a 7.2 kernel: 2.00 system calls a round
  // trip as perftest's, against 2.09-2.20 with yields, and perftest's 99th
  // percentile, about 1.7x the one with yields (docs/performance.md).
  bool busy_poll_yields = true;
  ThreadMode thread_mode = ThreadMode::kShared;
  // The whole TCP handshake must finish within this.
  std::chrono::milliseconds handshake_timeout{5000};
  // Any wait idle (no completion) this long probes the peer; 0 disables.
  std::chrono::milliseconds keepalive_interval{1000};
  // The completion watchdog's base budget: the send queue making no progress
  // for this long (plus the time its outstanding bytes take at
  // kWatchdogFloorBytesPerSecond) means the peer is gone, whatever the
  // provider says. 0: armed only on Soft-RoCE (vendor 0xFFFFFF), with four
  // times the QP's retry budget, at least 2 s; > 0: armed on every device
  // with this budget; < 0: never armed.
  std::chrono::milliseconds completion_timeout{0};
  // Shared secret: a server with a token rejects clients without the same.
  std::string token;
  // For error messages; the setup code fills in the addresses when empty.
  std::string name;
  // The newest handshake protocol Connect() offers (transport/handshake.h):
  // kHandshakeVersion (3), or 2 to speak to a server that predates protocol
  // 3. Connect() also falls back to 2 by itself when such a server refuses
  // the newer HELLO.
  uint16_t max_protocol_version = kHandshakeVersion;
  // Extensions Connect() adds to its HELLO as they are: types this version
  // does not know, to test that a server skips what a later version sends.
  std::vector<HandshakeExtension> extra_hello_extensions;
  // The engine (engine.h) whose completion queue this connection shares and
  // which carries its asynchronous operations; it must be on the same
  // Context and outlive the connection. nullptr: a CQ of the connection's
  // own, as before, and no PostWrite()/PostRead(). With an engine that has
  // a shared receive queue (EngineOptions::srq_slots), recv_slots is the
  // number of its slots this connection reserves (the credits its peer
  // holds) and no receive ring is allocated.
  Engine* engine = nullptr;
};

struct ConnectionStats {
  uint64_t messages_sent = 0;
  uint64_t messages_received = 0;
  uint64_t inline_sends = 0;
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  uint64_t credit_messages_sent = 0;
  uint64_t credit_messages_received = 0;
  // Messages that went by rendezvous (counted in messages_sent/received
  // and their bytes too), and ReceivedMessages not yet released.
  uint64_t rendezvous_sent = 0;
  uint64_t rendezvous_received = 0;
  uint64_t views_held = 0;
  uint64_t rdma_writes = 0;  // RdmaOps completed, not work requests
  uint64_t rdma_reads = 0;
  uint64_t rdma_bytes = 0;
  uint64_t keepalives = 0;
  uint64_t regions_bound = 0;  // BindRegion() successes
  // Busy-poll waits (ProgressMode::kBusyPoll, and blocking calls on an
  // engine's connection): the service turns taken (each reads the clock),
  // and of those the ones that yielded the CPU (sched_yield: the thread had
  // been descheduled within the last ~25 ms) and the ones that looked at
  // the setup stream and async-event fds (a poll: their interval was due,
  // busy_poll_gate.h).
  uint64_t service_turns = 0;
  uint64_t service_yields = 0;
  uint64_t service_looks = 0;
  uint32_t send_credits = 0;
  bool watchdog_armed = false;
};

// The slowest a healthy link is assumed to move an outstanding batch.
inline constexpr uint64_t kWatchdogFloorBytesPerSecond = 1 << 20;
// Write()/Read() signal a work request at least every this many bytes.
inline constexpr uint64_t kProgressSignalBytes = 1 << 20;
// Soft-RoCE: at most this much RDMA in flight per connection (Write()/Read()
// and PostWrite()/PostRead()). Its responder sends READ responses as fast as
// it can produce them; on a loaded host the veth queue overflows ("rdma_rxe:
// Failed sending ACK") and Linux 6.1's rxe then stalls the READ for good (no
// completion, no error: measured in the VM with every host core busy, 3 of 3
// runs of a 16 MiB READ). 256 KiB is 256 packets at rxe's 1024-byte MTU,
// inside the 1000-packet backlog.
inline constexpr uint64_t kSoftRoceInFlightBytes = 256 << 10;
// Under a cap on bytes in flight (kSoftRoceInFlightBytes, rdma_in_flight_bytes)
// Write()/Read() (and PostWrite()/PostRead()) cut pieces of at most cap /
// kRdmaPiecesUnderCap, so that this many are on the wire together and the next
// goes out as the oldest completes (64 KiB on rxe), instead of one piece of the
// whole cap stopping the link while its completion comes back.
inline constexpr uint64_t kRdmaPiecesUnderCap = 4;
// After a failure, how long flush completions may take before the QP is
// destroyed instead.
inline constexpr std::chrono::milliseconds kFlushWait{1000};

// What one connection keeps besides its QP and CQ, computed from its
// options as docs/resources.md's formulas do (Connection::Footprint()).
struct ConnectionFootprint {
  // Registered memory of its own: the send ring, the receive ring (none on
  // an engine with a shared receive queue) and the 64-byte probe slot, each
  // ring rounded up to 4 KiB; and how many memory regions that is.
  uint64_t registered_bytes = 0;
  uint32_t registrations = 0;
  // Its reservation of the engine's shared receive pool:
  // recv_slots x srq_slot_bytes (0 without one).
  uint64_t shared_receive_bytes = 0;
  // Heap (operator new) the Connection object and its arrays keep, not
  // counting its name and the Context's listener entry (a few dozen bytes).
  uint64_t heap_bytes = 0;
};

// One one-sided transfer: `length` bytes between local[local_offset...] and
// the peer's remote[remote_offset...].
struct RdmaOp {
  const MemoryRegion* local = nullptr;
  size_t local_offset = 0;
  size_t length = 0;
  RemoteRegion remote;
  uint64_t remote_offset = 0;
};

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TRANSPORT_CONNECTION_OPTIONS_H_
