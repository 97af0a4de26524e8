// File: tools/bench_common.h
//
// The plumbing rdma_pingpong and rdma_bw share: how the two ends meet
// (--server, --connect or --self, over the transport's own TCP handshake),
// the small text messages they exchange to agree on a test plan, the stamps
// that let the receiver check every message, and the CSV/JSON reports.
//
//   // after ParseToolCommandLine (backend_flags.h):
//   const SessionFlags session = SessionFlags::FromCommandLine();
//   ...
//   BenchRoles roles;
//   roles.client = [&](Connection& c) { return MeasureSomething(c); };
//   roles.server = [&](Connection& c) { return ServeSomething(c); };
//   return RunBench("rdma_pingpong", *backend, session, options, roles);
//
// The client measures; the server follows the plan the client sends in its
// first message ("RDTPBENCH/1 <test> key=value ..."), answers "OK ..." or
// "ERR <why>", serves one client and exits, as perftest's servers do. In
// --self mode both run in this process, the server on a thread of its own,
// over the same handshake on 127.0.0.1.
//
// Thread-compatible functions; a Connection is used as its header allows.

#ifndef RDMA_TRANSPORT_TOOLS_BENCH_COMMON_H_
#define RDMA_TRANSPORT_TOOLS_BENCH_COMMON_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tools/backend_flags.h"
#include "transport/connection.h"
#include "transport/deadline.h"
#include "transport/memory_region.h"
#include "transport/received_message.h"

namespace rdma_transport {

// Messages between two deadline refreshes in the measured loops.
inline constexpr uint64_t kDeadlineRefresh = 256;

// Control messages (plans, replies) must fit every slot.
inline constexpr uint32_t kControlMessageSize = 512;

// The largest --sizes entry: a message above the slot goes by rendezvous.
inline constexpr uint32_t kMaxBenchMessageSize = 64u << 20;  // 64 MiB
// --slot_bytes=0 (auto): the largest size, within [kControlMessageSize,
// kAutoSlotCap]; larger sizes go by rendezvous.
inline constexpr uint32_t kAutoSlotCap = 64u << 10;  // 64 KiB
// Counts (--iterations, --warmup) not given on the command line shrink above
// this size, so that a size moves about as many bytes as this one does.
inline constexpr uint32_t kScaleCountsAbove = 64u << 10;

enum class BenchMode { kSelf, kServer, kClient };

struct SessionFlags {
  bool server = false;
  bool self = false;
  std::string listen = "0.0.0.0:18515";
  std::string connect;
  // Seconds without progress before a run fails. The hot loops refresh
  // their deadline every kDeadlineRefresh messages, not at each (a clock
  // read per message is not free everywhere, see CycleClock).
  int64_t timeout_s = 10;
  std::string token;  // ConnectionOptions::token of both sides
  std::string csv;
  std::string json;

  // The values of --server, --listen, --connect, --self, --timeout,
  // --token, --csv and --json (after ParseToolCommandLine).
  static SessionFlags FromCommandLine();
  // Exactly one of --server, --connect, --self; none means --self on the
  // simulator. The simulator only supports --self.
  absl::StatusOr<BenchMode> Mode(const BackendFlags& backend) const;
  Clock::duration timeout() const { return std::chrono::seconds(timeout_s); }
};

// How messages move (--zero_copy, --slot_bytes), the same flags for both
// tools. The server follows the client's plan for zero_copy and refuses a
// plan whose slot_bytes exceeds its own slot.
struct MessageFlags {
  bool zero_copy = false;
  int64_t slot_bytes = 0;  // 0: AutoSlotBytes(largest size)

  // The values of --zero_copy and --slot_bytes (after ParseToolCommandLine).
  static MessageFlags FromCommandLine();
  // kInvalidArgument naming --slot_bytes unless 0 or in
  // kControlMessageSize..kMaxSlotSize.
  absl::Status Check() const;
  // The slot (ConnectionOptions::max_message_size) for `largest`: --slot_bytes
  // when given, else `largest` within [kControlMessageSize, kAutoSlotCap].
  uint32_t Slot(uint32_t largest) const;
};

// A count for `size`: `base` unless `scale` (the flag was not given: its
// default) and size > kScaleCountsAbove, then base * kScaleCountsAbove / size,
// at least `floor`. Client and server compute it alike from the plan.
uint64_t CountFor(uint64_t base, bool scale, uint32_t size, uint64_t floor);

struct BenchRoles {
  std::function<absl::Status(Connection&)> client;
  std::function<absl::Status(Connection&)> server;
  // The engine (transport/engine.h) the client's connection attaches to, on
  // backend.local(); it must outlive RunBench(). nullptr: none. The
  // server's connection never has one (in --self it runs on a thread of its
  // own, and an engine belongs to one thread).
  Engine* client_engine = nullptr;
};

// Connects the two roles as `mode` says and runs them; returns the process
// exit status (0, or 1 after printing "<program>: error: ..." to stderr).
int RunBench(const std::string& program, BenchMode mode, BenchBackend& backend,
             const SessionFlags& session, const ConnectionOptions& options,
             const BenchRoles& roles);

// --- Timing: the cycle counter, as perftest does ---
//
// perftest stamps every post with the CPU's cycle counter (get_cycles()),
// which costs a few nanoseconds anywhere. clock_gettime is as cheap only
// where the kernel's clocksource is the TSC: in the qemu TCG guest of the
// Soft-RoCE stage it is the HPET, and every call is a system call of about
// 2 us, which would land inside each sample. On x86 CycleClock reads the
// TSC, calibrated against the steady clock once (about 20 ms); elsewhere it
// is the steady clock in nanoseconds.
class CycleClock {
 public:
  static uint64_t Now() {
#if defined(__x86_64__) || defined(__i386__)
    return __builtin_ia32_rdtsc();
#else
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               Clock::now().time_since_epoch())
        .count();
#endif
  }
  // Microseconds per tick; calibrated on the first call.
  static double MicrosecondsPerTick();
};

// --- Stamps: the first and the last 8 bytes of a message carry a value ---

inline void Stamp(std::span<std::byte> message, uint64_t value) {
  if (message.size() >= 16) {
    std::memcpy(message.data(), &value, 8);
    std::memcpy(message.data() + message.size() - 8, &value, 8);
  } else {
    std::memcpy(message.data(), &value, std::min<size_t>(message.size(), 8));
  }
}

inline bool HasStamp(std::span<const std::byte> message, uint64_t value) {
  uint64_t first = 0;
  if (message.size() >= 16) {
    uint64_t last = 0;
    std::memcpy(&first, message.data(), 8);
    std::memcpy(&last, message.data() + message.size() - 8, 8);
    return first == value && last == value;
  }
  const size_t n = std::min<size_t>(message.size(), 8);
  std::memcpy(&first, message.data(), n);
  uint64_t want = 0;
  std::memcpy(&want, &value, n);
  return first == want;
}

// The stamp of message `index` of size `size` in a run.
inline uint64_t StampValue(uint32_t size, uint64_t index) {
  return (uint64_t{size} << 40) ^ (index + 1) ^ 0x5254445000000000ull;
}

// --- Moving messages: copying, or zero copy (--zero_copy) ---
//
// Copying: Send(span) and Receive(span) of plain memory; a message above the
// slot goes by rendezvous, the transport registering the buffer for each
// message. Zero copy: SendFrom() a region registered once (kRemoteRead, so
// that a message above the slot can go by rendezvous); ReceiveBorrowed() for
// a message that fits a slot (the view released at the next Receive() or
// Release()) and ReceiveInto() a region registered once (kLocalWrite) for a
// larger one. Memory for the largest size is allocated (and registered)
// once, in Create(), before any timing. Movable; used by one thread.

class MessageSender {
 public:
  // Room for `largest` bytes on `connection`, which must outlive it.
  static absl::StatusOr<MessageSender> Create(Connection& connection,
                                              bool zero_copy, size_t largest);
  // The first `size` bytes, to fill and stamp before Send().
  std::span<std::byte> message(size_t size) { return {memory_.data(), size}; }
  // Sends the first `size` bytes: Send() or SendFrom().
  absl::Status Send(size_t size, Deadline deadline);

 private:
  Connection* connection_ = nullptr;
  bool zero_copy_ = false;
  std::vector<std::byte> memory_;
  MemoryRegion region_;  // zero copy only
};

class MessageReceiver {
 public:
  // Room for max(largest, kControlMessageSize) bytes (an "ERR ..." text
  // fits wherever a message was expected).
  static absl::StatusOr<MessageReceiver> Create(Connection& connection,
                                                bool zero_copy, size_t largest);
  // Releases the last view, then receives the next message; `expected`, its
  // length if all is well, picks the zero-copy call: ReceiveBorrowed(&view)
  // when it fits connection.max_message_size() (the release and the
  // receive in one call), else ReceiveInto(). The bytes stay valid until
  // Release() or the next Receive().
  absl::StatusOr<std::span<const std::byte>> Receive(size_t expected,
                                                     Deadline deadline);
  // Gives a borrowed slot (and its credit) back; no-op otherwise.
  void Release() { view_.Release(); }

 private:
  Connection* connection_ = nullptr;
  bool zero_copy_ = false;
  std::vector<std::byte> memory_;
  MemoryRegion region_;  // zero copy only
  ReceivedMessage view_;
};

// "eager", "rndv" or "mixed": how `total` messages went, `rendezvous` of
// them by rendezvous (a ConnectionStats::rendezvous_sent/received delta).
const char* PathName(uint64_t rendezvous, uint64_t total);

// --- Text control messages ---

absl::Status SendText(Connection& connection, const std::string& text,
                      Deadline deadline);
// Receives one message and returns it as text; `scratch` must hold it.
absl::StatusOr<std::string> ReceiveText(Connection& connection,
                                        std::span<std::byte> scratch,
                                        Deadline deadline);

// "RDTPBENCH/1 pingpong sizes=8,64 iterations=1000" <-> {test, key: value}.
struct Plan {
  std::string test;
  std::map<std::string, std::string> values;

  std::string Encode() const;
  static absl::StatusOr<Plan> Decode(const std::string& text);
  absl::StatusOr<int64_t> Int(const std::string& key) const;
  absl::StatusOr<std::vector<uint32_t>> Sizes(const std::string& key) const;
};

// Server side of the last exchange: waits for "DONE", answers "DONE", then
// waits for the client's close so that neither side's QP goes away while
// the other still talks to it.
absl::Status ServerFinish(Connection& connection, std::span<std::byte> scratch,
                          Deadline deadline);
// Client side: "DONE", then the server's "DONE".
absl::Status ClientFinish(Connection& connection, std::span<std::byte> scratch,
                          Deadline deadline);

// --- Reports ---

// Rows of named fields, written as CSV (one header line) and/or JSON (an
// array of objects; numeric fields unquoted).
class Report {
 public:
  class Row {
   public:
    Row& Add(const std::string& name, const std::string& value);
    Row& Add(const std::string& name, const char* value) {
      return Add(name, std::string(value));
    }
    Row& Add(const std::string& name, double value);
    Row& Add(const std::string& name, uint64_t value);
    Row& Add(const std::string& name, int value) {
      return Add(name, static_cast<uint64_t>(value));
    }
    Row& Add(const std::string& name, uint32_t value) {
      return Add(name, static_cast<uint64_t>(value));
    }
    Row& Add(const std::string& name, bool value) {
      return Add(name, std::string(value ? "yes" : "no"));
    }

   private:
    friend class Report;
    struct Field {
      std::string name;
      std::string value;
      bool numeric = false;
    };
    std::vector<Field> fields_;
  };

  Row& AddRow();
  // Writes the files named (empty: skipped).
  absl::Status Write(const std::string& csv_path,
                     const std::string& json_path) const;

 private:
  std::vector<Row> rows_;
};

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TOOLS_BENCH_COMMON_H_
