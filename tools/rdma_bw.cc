// rdma_bw: streaming bandwidth and message rate per message size over the
// transport, SEND (Connection::Send/Receive) and RDMA WRITE
// (Connection::PostWrite on an Engine, or the blocking Connection::Write),
// reported as ib_send_bw / ib_write_bw report them with --report_gbits:
// #bytes #iterations BW peak[Gb/sec] BW average[Gb/sec] MsgRate[Mpps].
//
//   rdma_bw --self                                          # sim, one process
//   rdma_bw --self --virtual_time --sizes=65536             # sim, virtual time
//   rdma_bw --self --op=send --zero_copy --sizes=8,4096,1048576,67108864
//   rdma_bw --self --virtual_time --op=send --zero_copy --send_mode=blocking
//       --sizes=1048576                      # the one-at-a-time SendFrom()
//   rdma_bw --backend=ibverbs --device=mlx5_1 --server --sizes=65536
//   rdma_bw --backend=ibverbs --device=mlx5_0 --connect=10.0.0.2:18515
//       --sizes=65536                                   # (one line)
//
// Sizes (--sizes): 1 B..64 MiB. A SEND that fits the receive slot
// (--slot_bytes; by default the largest size, within 512 B..64 KiB, or only
// control messages with --op=write) goes eagerly, a larger one by
// rendezvous (the receiver READs it; the blocking Send()/SendFrom() return
// when it has, so they keep one such message in flight at a time, the
// zero-copy window many). Each SEND row ends with its
// path - eager, rndv or mixed - from the client's
// ConnectionStats::rendezvous_sent over the size's messages. The server's
// slot must be at least the client's: it refuses the plan otherwise, naming
// the --slot_bytes to start it with.
//
// --zero_copy (SEND): the client sends from memory registered once
// (kRemoteRead), the server receives by ReceiveBorrowed() when a message
// fits a slot (the view released once checked) or ReceiveInto() a region
// registered once (kLocalWrite) when larger (tools/bench_common.h,
// MessageReceiver); without it by the copying Send() and Receive(). The
// server does as the client's plan says. How the client sends,
// --send_mode: window (the default) puts its connection on an Engine and
// keeps --window messages outstanding by PostSendFrom(), each from a slot
// of its own of a ring (RingSlots: at most 256 MiB, so 64 MiB messages have
// 4 slots), posting the next as each ends, as perftest's tx-depth does; a
// rendezvous message ends when the peer has read it, so several are read
// back to back. blocking: SendFrom() from one buffer, which returns when
// the NIC (eager) or the peer (rendezvous) is done with the memory, so one
// message is in flight at a time (MessageSender). The CSV's send_mode says
// which (copy for Send()). WRITE is zero copy either way. Memory for the
// largest size is allocated and registered before any timing.
//
// Counts: --iterations (5000) and --warmup (500) per size. Not given on the
// command line, they shrink above 64 KiB, to move as many bytes as 64 KiB does
// (at least 10 and 1: a 64 MiB size sends 11 messages); given, they hold
// for every size. The WRITE ring holds at most 256 MiB: a size whose ring
// of --write_window (--ops_per_write) slots would be larger has fewer (a
// 64 MiB size 4), and its row's "window" in the CSV says how many.
//
// Window: SEND keeps up to --window messages in flight (the transport's
// send_slots and recv_slots, i.e. the credits, two of which the transport
// keeps in reserve; default 128, ib_send_bw's tx-depth). WRITE,
// --write_mode=window (the default): the client's connection is on an Engine
// and keeps
// --write_window operations outstanding continuously, posting a new one
// (PostWrite) for each that completes, as perftest's tx-depth does; on
// Soft-RoCE the transport holds what exceeds its in-flight cap
// (kSoftRoceInFlightBytes) in the connection and posts it as completions
// come. --write_mode=blocking: --ops_per_write operations per Write() call,
// in chains of --batch work requests (ConnectionOptions::max_rdma_batch),
// one chain outstanding at a time.
//
// Timing is the client's: from the first timed post to the server's
// acknowledgement of the last message (SEND) or to the last WRITE's
// completion. "BW average" is bytes over
// that time; "BW peak" is the best of ten equal slices of the run timed at
// post, leaving out the first slice, which only fills the window. Every
// SEND is checked by the server (length, stamps in its first and last 8
// bytes); after the WRITEs of a size, the server checks the stamp of every
// slot of its region against the last operation that wrote it (op k writes
// slot k mod the ring: --write_window slots, or --ops_per_write blocking).
//
// --virtual_time (simulator, --self): the transport and the simulated wire
// run on the fabric's virtual clock (BenchBackend, SimClock::kVirtual), the
// WRITE loop waits on the engine instead of spinning (virtual time moves
// only while every thread waits), and each row adds the average's share of
// the simulated link's rate: what the model's wire allows, not CPU time.
#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "sim/fabric.h"
#include "tools/backend_flags.h"
#include "tools/bench_common.h"
#include "transport/connection.h"
#include "transport/engine.h"
#include "transport/handshake.h"
#include "transport/memory_region.h"

ABSL_FLAG(std::string, op, "both", "send | write | both");
ABSL_FLAG(std::string, sizes, "64,1024,4096,65536",
          "message sizes in bytes, a list (1..67108864; SENDs above the slot "
          "go by rendezvous)");
ABSL_FLAG(int64_t, iterations, 5000,
          "timed messages per size (perftest -n); unless given, fewer above "
          "64 KiB (at least 10)");
ABSL_FLAG(int64_t, warmup, 500,
          "untimed messages before them, per size; unless given, fewer "
          "above 64 KiB (at least 1)");
ABSL_FLAG(int64_t, window, 128,
          "SEND: messages in flight (send_slots and recv_slots; the zero-copy "
          "window's messages outstanding, perftest's tx-depth)");
ABSL_FLAG(std::string, send_mode, "window",
          "SEND with --zero_copy: window (PostSendFrom on an engine, --window "
          "messages outstanding continuously, each from a slot of its own) | "
          "blocking (SendFrom(), one message at a time)");
ABSL_FLAG(int64_t, batch, 32,
          "WRITE: work requests per chain (max_rdma_batch)");
ABSL_FLAG(int64_t, ops_per_write, 32,
          "WRITE, --write_mode=blocking: operations per Write() call");
ABSL_FLAG(std::string, write_mode, "window",
          "WRITE: window (PostWrite on an engine, --write_window operations "
          "outstanding continuously) | blocking (Write(), one chain at a "
          "time)");
ABSL_FLAG(int64_t, rdma_in_flight, 0,
          "WRITE: bytes of RDMA in flight at most "
          "(ConnectionOptions::rdma_in_flight_bytes); 0: the transport's "
          "default, 256 KiB on Soft-RoCE and no cap elsewhere");
ABSL_FLAG(bool, virtual_time, false,
          "--backend=sim only: run the transport and the simulated wire on "
          "the fabric's virtual clock and report bandwidth in virtual time, "
          "against the simulated link's rate");
ABSL_FLAG(int64_t, write_window, 128,
          "WRITE, --write_mode=window: operations outstanding (perftest's "
          "tx-depth)");

namespace rdma_transport {
namespace {

constexpr int kSlices = 10;
// The fewest messages a size scaled down (CountFor) sends.
constexpr uint64_t kMinIterations = kSlices;
constexpr uint64_t kMinWarmup = 1;
// The most bytes of one side's ring: the WRITE ring, or the zero-copy SEND
// window's (--send_mode=window).
constexpr uint64_t kRingBytes = uint64_t{256} << 20;

// The ring of a size: `ring` slots, fewer where they would hold more than
// kRingBytes, at least one. Client and server compute it alike.
uint64_t RingSlots(uint64_t ring, uint32_t size) {
  return std::clamp<uint64_t>(kRingBytes / size, 1, ring);
}

// The bytes of a ring for every size of `sizes`.
uint64_t RingBytes(uint64_t ring, const std::vector<uint32_t>& sizes) {
  uint64_t bytes = 0;
  for (uint32_t size : sizes) {
    bytes = std::max(bytes, RingSlots(ring, size) * size);
  }
  return bytes;
}

// The values of the flags above (after ParseToolCommandLine).
struct BwFlags {
  std::string op;  // send | write | both
  std::string sizes;
  int64_t iterations = 0;
  int64_t warmup = 0;
  int64_t window = 0;
  int64_t batch = 0;
  int64_t ops_per_write = 0;
  std::string write_mode;  // window | blocking
  std::string send_mode;   // window | blocking (zero-copy SEND only)
  int64_t write_window = 0;
  int64_t rdma_in_flight = 0;
  bool virtual_time = false;
  // Not given on the command line: scaled down by size (CountFor).
  bool scale_iterations = false;
  bool scale_warmup = false;
  MessageFlags messages;
  uint32_t slot = 0;  // ConnectionOptions::max_message_size

  uint64_t Iterations(uint32_t size) const {
    return CountFor(iterations, scale_iterations, size, kMinIterations);
  }
  uint64_t Warmup(uint32_t size) const {
    return CountFor(warmup, scale_warmup, size, kMinWarmup);
  }

  bool windowed() const { return write_mode == "window"; }
  // SEND by a window of PostSendFrom() (zero copy only: the copying Send()
  // is the blocking call either way).
  bool send_windowed() const {
    return messages.zero_copy && send_mode == "window";
  }
  // How SENDs go: window, blocking (SendFrom) or copy (Send).
  std::string send_path() const {
    return !messages.zero_copy ? "copy"
           : send_windowed()   ? "window"
                               : "blocking";
  }
  // Slots of the WRITE ring: op k writes slot k mod this.
  int64_t ring() const { return windowed() ? write_window : ops_per_write; }

  static BwFlags FromCommandLine() {
    BwFlags bw;
    bw.op = absl::GetFlag(FLAGS_op);
    bw.sizes = absl::GetFlag(FLAGS_sizes);
    bw.iterations = absl::GetFlag(FLAGS_iterations);
    bw.warmup = absl::GetFlag(FLAGS_warmup);
    bw.window = absl::GetFlag(FLAGS_window);
    bw.batch = absl::GetFlag(FLAGS_batch);
    bw.ops_per_write = absl::GetFlag(FLAGS_ops_per_write);
    bw.write_mode = absl::GetFlag(FLAGS_write_mode);
    bw.send_mode = absl::GetFlag(FLAGS_send_mode);
    bw.write_window = absl::GetFlag(FLAGS_write_window);
    bw.rdma_in_flight = absl::GetFlag(FLAGS_rdma_in_flight);
    bw.virtual_time = absl::GetFlag(FLAGS_virtual_time);
    bw.scale_iterations = !FlagOnCommandLine("iterations");
    bw.scale_warmup = !FlagOnCommandLine("warmup");
    bw.messages = MessageFlags::FromCommandLine();
    return bw;
  }
};

// "0a1b..." -> its bytes; nullopt unless every character is a hex digit
// and there is an even number of them. (absl's HexStringToBytes that says
// so is newer than Debian 12's Abseil; the old one is deprecated.)
std::optional<std::string> DecodeHex(std::string_view hex) {
  auto digit = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  if (hex.size() % 2 != 0) return std::nullopt;
  std::string bytes(hex.size() / 2, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) {
    const int high = digit(hex[2 * i]);
    const int low = digit(hex[2 * i + 1]);
    if (high < 0 || low < 0) return std::nullopt;
    bytes[i] = static_cast<char>(high * 16 + low);
  }
  return bytes;
}

// The bytes a SEND carries besides its stamps.
void FillPattern(std::span<std::byte> memory) {
  for (size_t i = 0; i < memory.size(); ++i) {
    memory[i] = static_cast<std::byte>(i * 13 + 5);
  }
}

struct BwResult {
  double seconds = 0;
  double peak_gbps = 0;
  double average_gbps = 0;
  double mpps = 0;
};

// Progress marks of a timed run: (messages done, when), from (0, start)
// to (count, end), one about every count / kSlices messages.
class Marks {
 public:
  // Times on `env`'s clock: the wall clock, or the simulator's virtual one.
  explicit Marks(Env& env) : env_(env) {}

  void Start(uint64_t count) {
    count_ = count;
    marks_.clear();
    marks_.push_back({0, env_.Now()});
  }
  // After `done` messages; records a mark once a slice has passed.
  void Progress(uint64_t done) {
    if ((done - marks_.back().first) * kSlices >= count_ && done < count_) {
      marks_.push_back({done, env_.Now()});
    }
  }
  void Finish() { marks_.push_back({count_, env_.Now()}); }

  // Average over the whole run; peak over the best slice but the first,
  // which only fills the window.
  BwResult Compute(uint32_t size) const {
    BwResult result;
    auto seconds = [](Clock::time_point a, Clock::time_point b) {
      return std::chrono::duration<double>(b - a).count();
    };
    result.seconds = seconds(marks_.front().second, marks_.back().second);
    result.average_gbps = 8.0 * size * count_ / result.seconds / 1e9;
    result.mpps = count_ / result.seconds / 1e6;
    for (size_t i = 2; i < marks_.size(); ++i) {
      const double s = seconds(marks_[i - 1].second, marks_[i].second);
      const uint64_t n = marks_[i].first - marks_[i - 1].first;
      if (s > 0) {
        result.peak_gbps = std::max(result.peak_gbps, 8.0 * size * n / s / 1e9);
      }
    }
    result.peak_gbps = std::max(result.peak_gbps, result.average_gbps);
    return result;
  }

 private:
  Env& env_;
  uint64_t count_ = 0;
  std::vector<std::pair<uint64_t, Clock::time_point>> marks_;
};

absl::Status ExpectText(Connection& connection, std::span<std::byte> scratch,
                        const std::string& want, Deadline deadline) {
  absl::StatusOr<std::string> text = ReceiveText(connection, scratch, deadline);
  if (!text.ok()) return text.status();
  if (*text != want) {
    return absl::DataLossError(absl::StrCat("expected \"", want,
                                            "\" from the server, got \"",
                                            text->substr(0, 200), "\""));
  }
  return absl::OkStatus();
}

// --timeout from now on the connection's clock (the simulator's virtual one
// with --virtual_time).
Deadline SessionDeadline(const Connection& connection,
                         const SessionFlags& session) {
  return connection.env().DeadlineIn(session.timeout());
}

// `path`: a column for how SENDs went (eager or rndv).
std::string Header(const std::string& op, bool path) {
  return absl::StrFormat(
      "---------------------------------------------------------------------"
      "-----------------\n"
      "                    %s BW Test (rdma_transport)\n"
      "---------------------------------------------------------------------"
      "-----------------\n"
      " %-7s %-12s %-17s %-20s %-14s%s",
      op, "#bytes", "#iterations", "BW peak[Gb/sec]", "BW average[Gb/sec]",
      "MsgRate[Mpps]", path ? " path" : "");
}

class BwClient {
 public:
  // `engine`: the connection's (ConnectionOptions::engine), needed for
  // --write_mode=window.
  // `link_gbps`: the simulated link's rate when timing in virtual time
  // (--virtual_time), else 0.
  BwClient(Connection& connection, Engine* engine,
           const BackendFlags& backend_flags, const SessionFlags& session,
           const BwFlags& flags, std::vector<uint32_t> sizes, double link_gbps)
      : connection_(connection),
        engine_(engine),
        link_gbps_(link_gbps),
        backend_flags_(backend_flags),
        session_(session),
        flags_(flags),
        sizes_(std::move(sizes)),
        scratch_(kControlMessageSize) {}

  absl::Status Run() {
    const uint32_t largest = *std::max_element(sizes_.begin(), sizes_.end());
    const NegotiatedQp& qp = connection_.negotiated_qp();
    std::printf(
        " connection       : %s\n"
        " device           : %s, inline %s (usable %u B), progress %s\n"
        " window           : SEND %s; WRITE %s\n",
        connection_.name().c_str(), connection_.context().device_name().c_str(),
        backend_flags_.inline_mode.c_str(), qp.usable_inline,
        backend_flags_.progress.c_str(),
        flags_.send_windowed()
            ? absl::StrCat(flags_.window,
                           " messages outstanding (PostSendFrom on an engine)")
                  .c_str()
        : flags_.messages.zero_copy
            ? "one message at a time (SendFrom, --send_mode=blocking)"
            : absl::StrCat(flags_.window, " messages").c_str(),
        flags_.windowed()
            ? absl::StrCat(flags_.write_window,
                           " ops outstanding (PostWrite on an engine)")
                  .c_str()
            : absl::StrCat(flags_.ops_per_write,
                           " ops per Write() in chains of ", flags_.batch)
                  .c_str());
    std::printf(
        " messages         : SEND %s; slot %u B, %s\n",
        !flags_.messages.zero_copy ? "copied (Send, Receive)"
        : flags_.send_windowed()
            ? "zero copy (PostSendFrom; ReceiveBorrowed, ReceiveInto above "
              "the slot)"
            : "zero copy (SendFrom; ReceiveBorrowed, ReceiveInto above the "
              "slot)",
        connection_.max_message_size(),
        connection_.path().rendezvous ? "larger ones by rendezvous"
                                      : "rendezvous off");
    if (flags_.op != "write") {
      if (largest > connection_.max_message_size() &&
          !connection_.path().rendezvous) {
        return absl::FailedPreconditionError(absl::StrCat(
            "size ", largest, " exceeds the connection's slot of ",
            connection_.max_message_size(),
            " B and rendezvous is off (the peer did not offer it)"));
      }
      if (absl::Status status = RunSend(); !status.ok()) return status;
    }
    if (flags_.op != "send") {
      if (absl::Status status = RunWrite(); !status.ok()) return status;
    }
    return ClientFinish(connection_, scratch_, Soon());
  }

  const Report& report() const { return report_; }

 private:
  Deadline Soon() const { return SessionDeadline(connection_, session_); }

  absl::Status StartPlan(const std::string& op, std::string* reply) {
    Plan plan;
    plan.test = "bw";
    plan.values["op"] = op;
    plan.values["sizes"] = flags_.sizes;
    plan.values["iterations"] = absl::StrCat(flags_.iterations);
    plan.values["warmup"] = absl::StrCat(flags_.warmup);
    plan.values["ring"] = absl::StrCat(flags_.ring());
    plan.values["scale_iterations"] = flags_.scale_iterations ? "1" : "0";
    plan.values["scale_warmup"] = flags_.scale_warmup ? "1" : "0";
    plan.values["zero_copy"] = flags_.messages.zero_copy ? "1" : "0";
    plan.values["slot_bytes"] = absl::StrCat(flags_.slot);
    if (absl::Status status = SendText(connection_, plan.Encode(), Soon());
        !status.ok()) {
      return status;
    }
    absl::StatusOr<std::string> text =
        ReceiveText(connection_, scratch_, Soon());
    if (!text.ok()) return text.status();
    if (text->rfind("OK", 0) != 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("the server refused the plan: ", *text));
    }
    *reply = *text;
    return absl::OkStatus();
  }

  // `path`: how the SENDs went (PathName), empty for WRITE; `window`: the
  // messages or operations in flight at most.
  void Print(const std::string& op, uint32_t size, uint64_t count,
             const BwResult& r, const std::string& path, uint64_t window,
             uint64_t rendezvous_sent) {
    // In virtual time, the average against the simulated link's rate.
    const std::string of_link =
        link_gbps_ > 0
            ? absl::StrFormat("   %.1f%% of the %.0f Gb/s link",
                              100 * r.average_gbps / link_gbps_, link_gbps_)
            : "";
    std::printf(" %-7u %-12llu %-17.2f %-20.2f %-14.6f%s%s\n", size,
                static_cast<unsigned long long>(count), r.peak_gbps,
                r.average_gbps, r.mpps,
                path.empty() ? "" : absl::StrCat(" ", path).c_str(),
                of_link.c_str());
    std::fflush(stdout);
    report_.AddRow()
        .Add("tool", "rdma_bw")
        .Add("backend", backend_flags_.backend)
        .Add("device", connection_.context().device_name())
        .Add("op", op)
        .Add("bytes", size)
        .Add("iterations", count)
        .Add("seconds", r.seconds)
        .Add("bw_peak_gbps", r.peak_gbps)
        .Add("bw_average_gbps", r.average_gbps)
        .Add("msg_rate_mpps", r.mpps)
        .Add("window", window)
        .Add("ops_per_write", op == "write" && !flags_.windowed()
                                  ? window
                                  : static_cast<uint64_t>(flags_.ops_per_write))
        .Add("write_mode", op == "send" ? std::string("-") : flags_.write_mode)
        .Add("send_mode", op == "send" ? flags_.send_path() : std::string("-"))
        .Add("rdma_in_flight", static_cast<uint64_t>(flags_.rdma_in_flight))
        .Add("inline_mode", backend_flags_.inline_mode)
        .Add("usable_inline", connection_.usable_inline())
        .Add("progress", backend_flags_.progress)
        .Add("virtual_time", link_gbps_ > 0)
        .Add("link_gbps", link_gbps_)
        .Add("zero_copy",
             op == "send" ? (flags_.messages.zero_copy ? "yes" : "no") : "-")
        .Add("slot_bytes", connection_.max_message_size())
        .Add("rendezvous_sent", rendezvous_sent)
        .Add("path", path.empty() ? std::string("-") : path);
  }

  absl::Status RunSend() {
    std::string reply;
    if (absl::Status status = StartPlan("send", &reply); !status.ok()) {
      return status;
    }
    if (flags_.send_windowed()) return RunSendWindowed();
    const uint32_t largest = *std::max_element(sizes_.begin(), sizes_.end());
    // Memory for the largest size, allocated and registered before timing.
    absl::StatusOr<MessageSender> sender =
        MessageSender::Create(connection_, flags_.messages.zero_copy, largest);
    if (!sender.ok()) return sender.status();
    FillPattern(sender->message(largest));
    std::printf("%s\n", Header("Send", /*path=*/true).c_str());
    Marks marks(connection_.env());
    for (uint32_t size : sizes_) {
      const uint64_t count = flags_.Iterations(size);
      const uint64_t warmup = flags_.Warmup(size);
      const uint64_t rendezvous_before = connection_.stats().rendezvous_sent;
      std::span<std::byte> m = sender->message(size);
      // Warm-up, acknowledged, then the timed stream.
      for (uint64_t i = 0; i < warmup; ++i) {
        Stamp(m, StampValue(size, i | (1ull << 32)));
        if (absl::Status status = sender->Send(size, Soon()); !status.ok()) {
          return status;
        }
      }
      if (absl::Status status =
              ExpectText(connection_, scratch_, "ACK", Soon());
          !status.ok()) {
        return status;
      }
      marks.Start(count);
      Deadline deadline = Soon();
      for (uint64_t i = 0; i < count; ++i) {
        Stamp(m, StampValue(size, i));
        if (i % kDeadlineRefresh == 0) {
          deadline = Soon();
        }
        if (absl::Status status = sender->Send(size, deadline); !status.ok()) {
          return status;
        }
        marks.Progress(i + 1);
      }
      if (absl::Status status =
              ExpectText(connection_, scratch_, "ACK", Soon());
          !status.ok()) {
        return status;
      }
      marks.Finish();
      const uint64_t rendezvous_sent =
          connection_.stats().rendezvous_sent - rendezvous_before;
      Print("send", size, count, marks.Compute(size),
            PathName(rendezvous_sent, warmup + count),
            static_cast<uint64_t>(flags_.window), rendezvous_sent);
    }
    return absl::OkStatus();
  }

  // --send_mode=window (zero copy): each size's messages from a ring of
  // RingSlots(--window, size) slots of one region registered once
  // (kRemoteRead: the peer READs those above the slot), kept outstanding
  // by PostSendFrom() (SendWindowed). The server receives as for
  // SendFrom(): it cannot tell the two apart.
  absl::Status RunSendWindowed() {
    const uint64_t flag_ring = static_cast<uint64_t>(flags_.window);
    std::vector<std::byte> local(RingBytes(flag_ring, sizes_));
    FillPattern(local);
    absl::StatusOr<MemoryRegion> region =
        connection_.context().RegisterMemory(local, kRemoteRead);
    if (!region.ok()) return region.status();
    std::printf("%s\n", Header("Send", /*path=*/true).c_str());
    Marks marks(connection_.env());
    for (uint32_t size : sizes_) {
      const uint64_t ring = RingSlots(flag_ring, size);
      const uint64_t count = flags_.Iterations(size);
      const uint64_t warmup = flags_.Warmup(size);
      const uint64_t rendezvous_before = connection_.stats().rendezvous_sent;
      if (absl::Status status = SendWindowed(*region, local, ring, size, warmup,
                                             1ull << 32, nullptr);
          !status.ok()) {
        return status;
      }
      if (absl::Status status =
              ExpectText(connection_, scratch_, "ACK", Soon());
          !status.ok()) {
        return status;
      }
      marks.Start(count);
      if (absl::Status status =
              SendWindowed(*region, local, ring, size, count, 0, &marks);
          !status.ok()) {
        return status;
      }
      if (absl::Status status =
              ExpectText(connection_, scratch_, "ACK", Soon());
          !status.ok()) {
        return status;
      }
      marks.Finish();
      const uint64_t rendezvous_sent =
          connection_.stats().rendezvous_sent - rendezvous_before;
      Print("send", size, count, marks.Compute(size),
            PathName(rendezvous_sent, warmup + count), ring, rendezvous_sent);
    }
    return region->Release();
  }

  // `count` SENDs of `size` bytes, message k from slot k mod `ring` of
  // `local` (registered as `region`), stamped with StampValue(size,
  // stamp_base + k), keeping up to `ring` of them outstanding: a slot is
  // stamped again and posted once the message that last used it has ended
  // (COMPLETED: sent, or by rendezvous read by the peer; a connection's
  // operations end in posting order). A post refused for want of a credit
  // or of room (kResourceExhausted) waits for the engine to make some.
  absl::Status SendWindowed(const MemoryRegion& region,
                            std::span<std::byte> local, uint64_t ring,
                            uint32_t size, uint64_t count, uint64_t stamp_base,
                            Marks* progress) {
    return RunWindow("SEND", size, count, progress,
                     [&](uint64_t& posted, uint64_t done) -> absl::Status {
                       while (posted < count && posted - done < ring) {
                         const size_t offset = (posted % ring) * size;
                         Stamp(local.subspan(offset, size),
                               StampValue(size, stamp_base + posted));
                         absl::StatusOr<OpHandle> handle =
                             connection_.PostSendFrom(region, offset, size);
                         if (absl::IsResourceExhausted(handle.status())) break;
                         if (!handle.ok()) return handle.status();
                         ++posted;
                       }
                       return absl::OkStatus();
                     });
  }

  // The loop of a window of `count` operations of `size` bytes: `refill`
  // (posted, done) posts what it can and advances `posted`; ReapWindow()
  // then takes what has ended into `done`, until all `count` have.
  template <typename Refill>
  absl::Status RunWindow(const char* op, uint32_t size, uint64_t count,
                         Marks* progress, Refill refill) {
    uint64_t posted = 0;
    uint64_t done = 0;
    uint32_t idle = 0;
    Deadline deadline = Soon();
    uint64_t next_refresh = kDeadlineRefresh;
    while (done < count) {
      if (absl::Status status = refill(posted, done); !status.ok()) {
        return status;
      }
      if (absl::Status status = ReapWindow(op, size, posted - done, deadline,
                                           idle, done, progress);
          !status.ok()) {
        return status;
      }
      if (done >= next_refresh) {
        deadline = Soon();
        next_refresh = done + kDeadlineRefresh;
      }
    }
    return absl::OkStatus();
  }

  // One turn of a window's wait: drives the engine and takes every
  // operation it has ended, counting them in `done` (and `progress`); with
  // none, spins as perftest does (in virtual time, waits on the engine: the
  // simulated wire moves only then), looking at the clock now and then:
  // kDeadlineExceeded once `deadline` has passed. An operation that did not
  // end COMPLETED fails the run.
  absl::Status ReapWindow(const char* op, uint32_t size, uint64_t outstanding,
                          Deadline deadline, uint32_t& idle, uint64_t& done,
                          Marks* progress) {
    if (engine_->Progress() == 0 && engine_->completions_ready() == 0) {
      if (connection_.env().virtual_time()) (void)engine_->Wait(deadline);
      if (++idle % 4096 == 0 && connection_.env().Now() >= deadline) {
        return absl::DeadlineExceededError(absl::StrCat(
            op, " size ", size, ": no completion in ", session_.timeout_s,
            " s (", outstanding, " outstanding)"));
      }
      return absl::OkStatus();
    }
    while (std::optional<Completion> c = engine_->NextCompletion()) {
      if (c->outcome != OpOutcome::kCompleted) {
        return absl::Status(c->status.code(),
                            absl::StrCat(op, " ", OpOutcomeName(c->outcome),
                                         ": ", c->status.message()));
      }
      ++done;
      if (progress != nullptr) progress->Progress(done);
    }
    return absl::OkStatus();
  }

  absl::Status RunWrite() {
    std::string reply;
    if (absl::Status status = StartPlan("write", &reply); !status.ok()) {
      return status;
    }
    // "OK region=<hex of RemoteRegion::Encode>".
    const std::string prefix = "OK region=";
    std::optional<std::string> decoded;
    if (reply.rfind(prefix, 0) == 0) {
      decoded = DecodeHex(std::string_view(reply).substr(prefix.size()));
    }
    const std::string encoded = decoded.value_or("");
    if (encoded.size() != RemoteRegion::kEncodedSize) {
      return absl::DataLossError(
          absl::StrCat("malformed WRITE plan reply: ", reply));
    }
    const RemoteRegion remote = RemoteRegion::Decode(
        std::span<const std::byte, RemoteRegion::kEncodedSize>(
            reinterpret_cast<const std::byte*>(encoded.data()),
            RemoteRegion::kEncodedSize));
    // Each size's ring (RingSlots) from the start of one buffer.
    const size_t flag_ring = static_cast<size_t>(flags_.ring());
    std::vector<std::byte> local(RingBytes(flag_ring, sizes_));
    for (size_t i = 0; i < local.size(); ++i) {
      local[i] = static_cast<std::byte>(i * 11 + 3);
    }
    absl::StatusOr<MemoryRegion> region =
        connection_.context().RegisterMemory(local, kLocalOnly);
    if (!region.ok()) return region.status();
    std::printf("%s\n", Header("RDMA Write", /*path=*/false).c_str());

    std::vector<RdmaOp> ops(flag_ring);
    Marks marks(connection_.env());
    for (uint32_t size : sizes_) {
      const size_t ring = RingSlots(flag_ring, size);
      // ops[j] writes local slot j to remote slot j.
      for (size_t j = 0; j < ring; ++j) {
        ops[j] = RdmaOp{&*region, j * size, size, remote, j * uint64_t{size}};
      }
      auto write_range = [&](uint64_t first, uint64_t count,
                             uint64_t stamp_base, Marks* progress) {
        if (flags_.windowed()) {
          return WriteWindowed({local.data(), ring * size},
                               std::span<const RdmaOp>(ops).first(ring), size,
                               count, stamp_base, progress);
        }
        for (uint64_t done = 0; done < count;) {
          const size_t n = std::min<uint64_t>(ring, count - done);
          for (size_t j = 0; j < n; ++j) {
            Stamp({local.data() + j * size, size},
                  StampValue(size, stamp_base + first + done + j));
          }
          if (absl::Status status = connection_.Write({ops.data(), n});
              !status.ok()) {
            return status;
          }
          done += n;
          if (progress != nullptr) progress->Progress(done);
        }
        return absl::OkStatus();
      };
      if (absl::Status status =
              write_range(0, flags_.Warmup(size), 1ull << 32, nullptr);
          !status.ok()) {
        return status;
      }
      const uint64_t count = flags_.Iterations(size);
      marks.Start(count);
      if (absl::Status status = write_range(0, count, 0, &marks);
          !status.ok()) {
        return status;
      }
      marks.Finish();
      // The server checks what landed.
      if (absl::Status status = SendText(
              connection_, absl::StrCat("CHECK ", size, " ", count), Soon());
          !status.ok()) {
        return status;
      }
      if (absl::Status status =
              ExpectText(connection_, scratch_, "ACK", Soon());
          !status.ok()) {
        return status;
      }
      Print("write", size, count, marks.Compute(size), "",
            flags_.windowed() ? ring : std::min<uint64_t>(ring, flags_.batch),
            0);
    }
    return region->Release();
  }

  // --write_mode=window: `count` WRITEs, op k from local slot k mod ring to
  // remote slot k mod ring (`slots`: ops[j] is slot j's), stamped with
  // StampValue(size, stamp_base + k), keeping ring = slots.size() of them
  // outstanding: a slot is stamped again and reposted once the op that last
  // used it has completed (a connection's ops end in posting order).
  absl::Status WriteWindowed(std::span<std::byte> local,
                             std::span<const RdmaOp> slots, uint32_t size,
                             uint64_t count, uint64_t stamp_base,
                             Marks* progress) {
    const uint64_t ring = slots.size();
    return RunWindow(
        "WRITE", size, count, progress,
        [&](uint64_t& posted, uint64_t done) -> absl::Status {
          // Every free slot, as one post, in slot order (a run that wraps
          // round the ring is two posts).
          while (posted < count && posted - done < ring) {
            const uint64_t first_slot = posted % ring;
            uint64_t n = std::min(
                {count - posted, ring - (posted - done), ring - first_slot});
            for (uint64_t j = 0; j < n; ++j) {
              Stamp(local.subspan((first_slot + j) * size, size),
                    StampValue(size, stamp_base + posted + j));
            }
            absl::StatusOr<OpHandle> first =
                connection_.PostWrite(slots.subspan(first_slot, n));
            // Large ops take several work requests each (pieces of the
            // port's max_msg_sz, or of Soft-RoCE's in-flight cap): when the
            // send queue cannot take them all, post half as many, and with
            // one op that does not fit, wait for completions to make room.
            while (absl::IsResourceExhausted(first.status()) && n > 1) {
              n /= 2;
              first = connection_.PostWrite(slots.subspan(first_slot, n));
            }
            if (absl::IsResourceExhausted(first.status()) && posted > done) {
              break;
            }
            if (!first.ok()) return first.status();
            posted += n;
          }
          return absl::OkStatus();
        });
  }

  Connection& connection_;
  Engine* const engine_;
  const double link_gbps_;
  const BackendFlags& backend_flags_;
  const SessionFlags& session_;
  const BwFlags& flags_;
  const std::vector<uint32_t> sizes_;
  std::vector<std::byte> scratch_;
  Report report_;
};

absl::Status Refuse(Connection& connection, const absl::Status& problem,
                    Deadline deadline) {
  (void)SendText(connection, absl::StrCat("ERR ", problem.message()), deadline);
  return problem;
}

// `counts`: the plan's iterations, warmup and scale_ flags (BwFlags::
// Iterations(), Warmup()); `receiver`: memory for the largest size.
absl::Status ServeSend(Connection& connection, MessageReceiver& receiver,
                       const std::vector<uint32_t>& sizes,
                       const BwFlags& counts, const SessionFlags& session) {
  for (uint32_t size : sizes) {
    for (int phase = 0; phase < 2; ++phase) {
      const uint64_t n =
          phase == 0 ? counts.Warmup(size) : counts.Iterations(size);
      const uint64_t base = phase == 0 ? (1ull << 32) : 0;
      Deadline deadline = SessionDeadline(connection, session);
      for (uint64_t i = 0; i < n; ++i) {
        if (i % kDeadlineRefresh == 0)
          deadline = SessionDeadline(connection, session);
        absl::StatusOr<std::span<const std::byte>> got =
            receiver.Receive(size, deadline);
        if (!got.ok()) return got.status();
        const bool stamped = HasStamp(*got, StampValue(size, base | i));
        if (got->size() != size || !stamped) {
          const std::string why = absl::StrFormat(
              "SEND size %u, %s message %u: %u bytes, %s stamp (starts %s, "
              "want %x)",
              size, phase == 0 ? "warm-up" : "timed", i, got->size(),
              stamped ? "right" : "wrong",
              absl::BytesToHexString(
                  absl::string_view(reinterpret_cast<const char*>(got->data()),
                                    std::min<size_t>(got->size(), 8))),
              StampValue(size, base | i));
          receiver.Release();
          return Refuse(connection, absl::DataLossError(why),
                        SessionDeadline(connection, session));
        }
        receiver.Release();
      }
      if (absl::Status status =
              SendText(connection, "ACK", SessionDeadline(connection, session));
          !status.ok()) {
        return status;
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ServeWrite(Connection& connection,
                        const std::vector<uint32_t>& sizes, uint64_t ring,
                        const SessionFlags& session) {
  std::vector<std::byte> target(RingBytes(ring, sizes));
  absl::StatusOr<MemoryRegion> region =
      connection.context().RegisterMemory(target, kRemoteWrite);
  if (!region.ok())
    return Refuse(connection, region.status(),
                  SessionDeadline(connection, session));
  std::array<std::byte, RemoteRegion::kEncodedSize> encoded;
  region->remote().Encode(encoded);
  if (absl::Status status = SendText(
          connection,
          absl::StrCat("OK region=",
                       absl::BytesToHexString(absl::string_view(
                           reinterpret_cast<const char*>(encoded.data()),
                           encoded.size()))),
          SessionDeadline(connection, session));
      !status.ok()) {
    return status;
  }
  std::vector<std::byte> scratch(kControlMessageSize);
  for (uint32_t size : sizes) {
    const uint64_t size_ring = RingSlots(ring, size);
    // The WRITEs of a size take as long as they take (at 0.1 Gb/s, as rxe
    // under TCG, 2000 of 64 KiB take 10 s): no deadline here. A client that
    // vanishes still ends the wait, through the transport's keepalive
    // (kUnavailable after keepalive_interval of silence).
    absl::StatusOr<std::string> check =
        ReceiveText(connection, scratch, kNoDeadline);
    if (!check.ok()) return check.status();
    unsigned checked_size = 0;
    unsigned long long count = 0;
    if (std::sscanf(check->c_str(), "CHECK %u %llu", &checked_size, &count) !=
            2 ||
        checked_size != size) {
      return Refuse(connection,
                    absl::DataLossError(absl::StrCat("expected CHECK ", size,
                                                     ", got \"", *check, "\"")),
                    SessionDeadline(connection, session));
    }
    for (uint64_t j = 0; j < size_ring && j < count; ++j) {
      const uint64_t last = j + size_ring * ((count - 1 - j) / size_ring);
      if (!HasStamp({target.data() + j * size, size}, StampValue(size, last))) {
        return Refuse(connection,
                      absl::DataLossError(absl::StrFormat(
                          "WRITE size %u: slot %u does not hold operation %u",
                          size, j, last)),
                      SessionDeadline(connection, session));
      }
    }
    if (absl::Status status =
            SendText(connection, "ACK", SessionDeadline(connection, session));
        !status.ok()) {
      return status;
    }
  }
  return region->Release();
}

// `slot`: this side's ConnectionOptions::max_message_size.
absl::Status Server(Connection& connection, const SessionFlags& session,
                    uint32_t slot, bool verbose) {
  std::vector<std::byte> scratch(kControlMessageSize);
  while (true) {
    absl::StatusOr<std::string> text =
        ReceiveText(connection, scratch, SessionDeadline(connection, session));
    if (!text.ok()) return text.status();
    if (*text == "DONE") {
      if (absl::Status status = SendText(connection, "DONE",
                                         SessionDeadline(connection, session));
          !status.ok()) {
        return status;
      }
      absl::StatusOr<size_t> after =
          connection.Receive(scratch, SessionDeadline(connection, session));
      if (after.ok()) return absl::DataLossError("a message after DONE");
      if (!absl::IsUnavailable(after.status())) return after.status();
      return connection.Close(SessionDeadline(connection, session));
    }
    absl::StatusOr<Plan> plan = Plan::Decode(*text);
    if (!plan.ok())
      return Refuse(connection, plan.status(),
                    SessionDeadline(connection, session));
    absl::StatusOr<std::vector<uint32_t>> sizes = plan->Sizes("sizes");
    absl::StatusOr<int64_t> iterations = plan->Int("iterations");
    absl::StatusOr<int64_t> warmup = plan->Int("warmup");
    absl::StatusOr<int64_t> ring = plan->Int("ring");
    absl::StatusOr<int64_t> scale_iterations = plan->Int("scale_iterations");
    absl::StatusOr<int64_t> scale_warmup = plan->Int("scale_warmup");
    absl::StatusOr<int64_t> zero_copy = plan->Int("zero_copy");
    absl::StatusOr<int64_t> client_slot = plan->Int("slot_bytes");
    const std::string op = plan->values["op"];
    absl::Status problem =
        plan->test != "bw"       ? absl::InvalidArgumentError(absl::StrCat(
                                       "this is rdma_bw, not ", plan->test))
        : !sizes.ok()            ? sizes.status()
        : !iterations.ok()       ? iterations.status()
        : !warmup.ok()           ? warmup.status()
        : !ring.ok()             ? ring.status()
        : !scale_iterations.ok() ? scale_iterations.status()
        : !scale_warmup.ok()     ? scale_warmup.status()
        : !zero_copy.ok()        ? zero_copy.status()
        : !client_slot.ok()      ? client_slot.status()
        : *ring < 1 ? absl::InvalidArgumentError("test plan: ring < 1")
        : op != "send" && op != "write"
            ? absl::InvalidArgumentError(absl::StrCat("unknown op ", op))
            : absl::OkStatus();
    if (problem.ok() && op == "send") {
      const uint32_t largest = *std::max_element(sizes->begin(), sizes->end());
      if (*client_slot > slot) {
        problem = absl::InvalidArgumentError(absl::StrCat(
            "the client's slot is ", *client_slot, " B, this server's ", slot,
            " B; start it with --slot_bytes=", *client_slot));
      } else if (largest > connection.max_message_size() &&
                 !connection.path().rendezvous) {
        problem = absl::InvalidArgumentError(absl::StrCat(
            "size ", largest, " exceeds this server's slot of ",
            connection.max_message_size(), " B and rendezvous is off"));
      }
    }
    if (!problem.ok()) {
      return Refuse(connection, problem, SessionDeadline(connection, session));
    }
    if (verbose) {
      std::printf("serving %s\n", text->c_str());
      std::fflush(stdout);
    }
    absl::Status served;
    if (op == "send") {
      // Memory for the largest size, before the client starts timing.
      absl::StatusOr<MessageReceiver> receiver = MessageReceiver::Create(
          connection, *zero_copy != 0,
          *std::max_element(sizes->begin(), sizes->end()));
      if (!receiver.ok()) {
        return Refuse(connection, receiver.status(),
                      SessionDeadline(connection, session));
      }
      if (absl::Status status =
              SendText(connection, "OK", SessionDeadline(connection, session));
          !status.ok()) {
        return status;
      }
      BwFlags counts;
      counts.iterations = *iterations;
      counts.warmup = *warmup;
      counts.scale_iterations = *scale_iterations != 0;
      counts.scale_warmup = *scale_warmup != 0;
      served = ServeSend(connection, *receiver, *sizes, counts, session);
    } else {
      served = ServeWrite(connection, *sizes, *ring, session);
    }
    if (!served.ok()) return served;
  }
}

int Main(int argc, char** argv) {
  if (absl::Status status = ParseToolCommandLine(
          argc, argv,
          "streaming SEND and RDMA WRITE bandwidth and message rate "
          "per message size, as ib_send_bw / ib_write_bw report them");
      !status.ok()) {
    std::fprintf(stderr, "rdma_bw: %s\n", status.ToString().c_str());
    return 2;
  }
  const BackendFlags backend_flags = BackendFlags::FromCommandLine();
  const SessionFlags session = SessionFlags::FromCommandLine();
  BwFlags bw = BwFlags::FromCommandLine();
  absl::StatusOr<std::vector<uint32_t>> sizes =
      ParseSizeList(bw.sizes, 1, kMaxBenchMessageSize);
  absl::StatusOr<BenchMode> mode = session.Mode(backend_flags);
  absl::Status bad =
      !sizes.ok() ? absl::InvalidArgumentError(
                        absl::StrCat("--sizes: ", sizes.status().message()))
      : !mode.ok() ? mode.status()
      : bw.op != "send" && bw.op != "write" && bw.op != "both"
          ? absl::InvalidArgumentError("--op: want send, write or both")
      : bw.iterations < kSlices ? absl::InvalidArgumentError(absl::StrCat(
                                      "--iterations must be >= ", kSlices))
      : bw.warmup < 0 ? absl::InvalidArgumentError("--warmup must be >= 0")
      : bw.window < 2 || bw.window > 4096
          ? absl::InvalidArgumentError("--window must be in 2..4096")
      : bw.batch < 1 || bw.batch > 4096
          ? absl::InvalidArgumentError("--batch must be in 1..4096")
      : bw.ops_per_write < 1 || bw.ops_per_write > 65536
          ? absl::InvalidArgumentError("--ops_per_write must be in 1..65536")
      : bw.write_mode != "window" && bw.write_mode != "blocking"
          ? absl::InvalidArgumentError("--write_mode: want window or blocking")
      : bw.send_mode != "window" && bw.send_mode != "blocking"
          ? absl::InvalidArgumentError("--send_mode: want window or blocking")
      : bw.write_window < 1 || bw.write_window > 4096
          ? absl::InvalidArgumentError("--write_window must be in 1..4096")
      : bw.rdma_in_flight < 0
          ? absl::InvalidArgumentError("--rdma_in_flight must be >= 0")
          : bw.messages.Check();
  if (!bad.ok()) {
    std::fprintf(stderr, "rdma_bw: %s\n", bad.ToString().c_str());
    return 2;
  }
  if (bw.virtual_time &&
      (!backend_flags.is_sim() || *mode != BenchMode::kSelf)) {
    std::fprintf(stderr,
                 "rdma_bw: --virtual_time needs --backend=sim and --self (the "
                 "simulator's clock is one process's)\n");
    return 2;
  }
  absl::StatusOr<std::unique_ptr<BenchBackend>> backend = BenchBackend::Open(
      backend_flags, *mode == BenchMode::kSelf,
      bw.virtual_time ? SimClock::kVirtual : SimClock::kWallClock);
  if (!backend.ok()) {
    std::fprintf(stderr, "rdma_bw: error: opening the backend: %s\n",
                 backend.status().ToString().c_str());
    return 1;
  }
  std::printf("rdma_bw on %s\n", (*backend)->description().c_str());

  ConnectionOptions options;
  options.progress = backend_flags.progress_mode();
  options.thread_mode = backend_flags.connection_thread_mode();
  options.busy_poll_yields = backend_flags.busy_poll_yields;
  // The send queue (send_slots + max_rdma_batch + 4 entries) holds the
  // WRITE window too.
  options.send_slots =
      static_cast<uint32_t>(std::max(bw.window, bw.write_window));
  options.recv_slots = static_cast<uint32_t>(bw.window);
  options.max_rdma_batch = static_cast<uint32_t>(bw.batch);
  options.rdma_in_flight_bytes = static_cast<uint64_t>(bw.rdma_in_flight);
  // WRITE needs only control messages (unless --slot_bytes says otherwise);
  // SEND the slot, larger messages going by rendezvous.
  const uint32_t largest = *std::max_element(sizes->begin(), sizes->end());
  bw.slot = bw.op == "write" && bw.messages.slot_bytes == 0
                ? kControlMessageSize
                : bw.messages.Slot(largest);
  options.max_message_size = bw.slot;

  // The WRITE window and the zero-copy SEND window run on an engine of the
  // client's own; other runs keep the connection as it was.
  const bool write_window = bw.op != "send" && bw.windowed();
  const bool send_window = bw.op != "write" && bw.send_windowed();
  std::unique_ptr<Engine> engine;
  if ((write_window || send_window) && *mode != BenchMode::kServer) {
    EngineOptions engine_options;
    engine_options.max_connections = 1;
    engine_options.max_async_ops = static_cast<uint32_t>(std::max(
        write_window ? bw.write_window : 0, send_window ? bw.window : 0));
    absl::StatusOr<std::unique_ptr<Engine>> created =
        Engine::Create((*backend)->local(), engine_options);
    if (!created.ok()) {
      std::fprintf(stderr, "rdma_bw: error: creating the engine: %s\n",
                   created.status().ToString().c_str());
      return 1;
    }
    engine = *std::move(created);
  }

  double link_gbps = 0;
  if (bw.virtual_time) {
    absl::StatusOr<double> rate =
        (*backend)->fabric()->LinkGbps((*backend)->local().device_name());
    if (!rate.ok()) {
      std::fprintf(stderr, "rdma_bw: error: %s\n",
                   rate.status().ToString().c_str());
      return 1;
    }
    link_gbps = *rate;
  }

  BenchRoles roles;
  roles.client_engine = engine.get();
  roles.client = [&](Connection& connection) {
    BwClient client(connection, engine.get(), backend_flags, session, bw,
                    *sizes, link_gbps);
    absl::Status status = client.Run();
    if (status.ok()) status = client.report().Write(session.csv, session.json);
    return status;
  };
  roles.server = [&](Connection& connection) {
    return Server(connection, session, bw.slot, *mode == BenchMode::kServer);
  };
  return RunBench("rdma_bw", *mode, **backend, session, options, roles);
}

}  // namespace
}  // namespace rdma_transport

int main(int argc, char** argv) { return rdma_transport::Main(argc, argv); }
