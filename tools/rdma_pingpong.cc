// rdma_pingpong: one-way message latency per size over the transport, the way
// perftest's ib_send_lat measures it (round trip / 2; t_min, t_max,
// t_typical, t_avg, t_stdev, 99%, 99.9%; tools/latency_stats.h), plus the
// negotiated inline size, whether each size went inline, and whether it went
// eagerly or by rendezvous.
//
//   rdma_pingpong --self                                   # sim, one process
//   rdma_pingpong --self --zero_copy --sizes=8,4096,1048576,67108864
//   rdma_pingpong --backend=ibverbs --device=mlx5_1 --server
//       --listen=0.0.0.0:18515                          # (one line)
//   rdma_pingpong --backend=ibverbs --device=mlx5_0 --connect=10.0.0.2:18515
//
// Sizes (--sizes): 1 B..64 MiB. A message that fits the receive slot
// (--slot_bytes; by default the largest size, within 512 B..64 KiB) goes
// eagerly, a larger one by rendezvous (the receiver READs it: connection.h).
// The "path" column says which - eager, rndv or mixed - from the
// connection's counters (ConnectionStats::rendezvous_sent over the size's
// pings; "/..." adds the echoes' rendezvous_received when they differ). The
// server's slot must be at least the client's: it refuses the plan
// otherwise, naming the --slot_bytes to start it with. "inline" is about
// the message's own bytes: a rendezvous message's never are
// (ConnectionStats::inline_sends does not count its 20-byte request).
// The CSV/JSON report adds the client's busy-poll service turns over the
// size's round trips, how many of them yielded the CPU and how many looked
// at the fds (ConnectionStats::service_turns, service_yields,
// service_looks): paced by time, not by messages, so a slower run has more
// per round trip. --busy_poll_yields=false: waits never yield, as
// perftest's.
//
// --zero_copy: the messages go by SendFrom() from a region registered once
// (kRemoteRead) and come by ReceiveBorrowed() when they fit a slot (the
// view given back by the next receive) or ReceiveInto() a region registered
// once (kLocalWrite) when larger (tools/bench_common.h, MessageSender and
// MessageReceiver); without it by the copying Send() and Receive(). The
// server does as the client's plan says. With zero copy it answers from its
// own registered message, stamped as the ping should be, instead of echoing
// the bytes it was lent. Memory for the largest size is allocated and
// registered before any timing.
//
// Counts: --iterations (1000) and --warmup (100) per size. Not given on the
// command line, they shrink above 64 KiB, to move as many bytes as 64 KiB does
// (at least 10 and 1: a 64 MiB size makes 11 round trips); given, they hold
// for every size.
//
// The client sends a message stamped with its iteration (first and last 8
// bytes), the server answers with the same stamp and length and then checks
// the ping's (off the timed path; a bad ping is answered by an ERR text),
// the client checks the answer: a transport that
// loses, reorders, truncates or corrupts a message fails the run instead of
// producing a figure. Exit status 0 on success, 1 on any error (printed to
// stderr), 2 on bad flags.
#include <algorithm>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "tools/backend_flags.h"
#include "tools/bench_common.h"
#include "tools/latency_stats.h"
#include "transport/connection.h"
#include "transport/handshake.h"

ABSL_FLAG(std::string, sizes, "8,64,236,1024,4096",
          "message sizes in bytes, a list (1..67108864; above the slot they "
          "go by rendezvous)");
ABSL_FLAG(int64_t, iterations, 1000,
          "measured round trips per size (perftest -n); unless given, fewer "
          "above 64 KiB (at least 10)");
ABSL_FLAG(int64_t, warmup, 100,
          "unmeasured round trips before them, per size; unless given, "
          "fewer above 64 KiB (at least 1)");
ABSL_FLAG(int64_t, test_bad_ping, -1,
          "for tests: the client stamps this round trip's ping wrongly (of "
          "the first size, counting the warm-up from 0), so that the "
          "server's check fails the run; -1: never");

namespace rdma_transport {
namespace {

// The fewest round trips a size scaled down (CountFor) makes.
constexpr uint64_t kMinIterations = 10;
constexpr uint64_t kMinWarmup = 1;

// The values of the flags above and of MessageFlags (after
// ParseToolCommandLine).
struct PingpongFlags {
  std::string sizes;
  int64_t iterations = 0;
  int64_t warmup = 0;
  // Not given on the command line: scaled down by size (CountFor).
  bool scale_iterations = false;
  bool scale_warmup = false;
  // --test_bad_ping: the round trip (of the first size) whose ping carries
  // a wrong stamp; -1 none.
  int64_t bad_ping = -1;
  MessageFlags messages;
  uint32_t slot = 0;  // messages.Slot(largest size)
};

std::string Banner(const BenchBackend& backend, const BackendFlags& flags,
                   const Connection& connection, const std::string& role,
                   bool zero_copy) {
  const NegotiatedQp& qp = connection.negotiated_qp();
  const TransportConfig& config = backend.config();
  return absl::StrFormat(
      "-------------------------------------------------------------------"
      "-------------------\n"
      "                    Send Latency Test (rdma_transport)\n"
      " backend          : %s, %s on %s\n"
      " connection       : %s\n"
      " transport        : RC, SEND_WITH_IMM, credit flow control\n"
      " messages         : %s; slot %u B, %s\n"
      " inline           : %s; asked %u B, granted %u B, usable %u B\n"
      " traffic class    : %s   progress : %s\n"
      "-------------------------------------------------------------------"
      "-------------------",
      backend.description(), role, connection.context().device_name(),
      connection.name(),
      zero_copy ? "zero copy (SendFrom; ReceiveBorrowed, ReceiveInto above "
                  "the slot)"
                : "copied (Send, Receive)",
      connection.max_message_size(),
      connection.path().rendezvous ? "larger ones by rendezvous"
                                   : "rendezvous off",
      flags.inline_mode, qp.requested_inline, qp.granted_inline,
      qp.usable_inline,
      config.traffic_class.has_value() ? absl::StrCat(*config.traffic_class)
                                       : "system default",
      flags.progress);
}

// kFailedPrecondition when a size exceeds the slot and rendezvous is off.
absl::Status CheckSizesFit(const Connection& connection,
                           const std::vector<uint32_t>& sizes) {
  const uint32_t largest = *std::max_element(sizes.begin(), sizes.end());
  if (largest <= connection.max_message_size() ||
      connection.path().rendezvous) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(
      absl::StrCat("size ", largest, " exceeds the connection's slot of ",
                   connection.max_message_size(),
                   " B and rendezvous is off (the peer did not offer it)"));
}

// "eager", "rndv" or "mixed" for the pings, and "/..." for the echoes when
// they went otherwise.
std::string Path(uint64_t rendezvous_sent, uint64_t rendezvous_received,
                 uint64_t total) {
  const std::string sent = PathName(rendezvous_sent, total);
  const std::string received = PathName(rendezvous_received, total);
  return sent == received ? sent : absl::StrCat(sent, "/", received);
}

absl::Status Client(Connection& connection, const BenchBackend& backend,
                    const BackendFlags& backend_flags,
                    const SessionFlags& session, const PingpongFlags& flags,
                    const std::vector<uint32_t>& sizes) {
  if (absl::Status status = CheckSizesFit(connection, sizes); !status.ok()) {
    return status;
  }
  const bool zero_copy = flags.messages.zero_copy;
  const uint32_t largest = *std::max_element(sizes.begin(), sizes.end());
  // Memory for the largest size, allocated and registered before timing.
  absl::StatusOr<MessageSender> ping =
      MessageSender::Create(connection, zero_copy, largest);
  if (!ping.ok()) return ping.status();
  absl::StatusOr<MessageReceiver> pong =
      MessageReceiver::Create(connection, zero_copy, largest);
  if (!pong.ok()) return pong.status();
  std::span<std::byte> pattern = ping->message(largest);
  for (size_t i = 0; i < pattern.size(); ++i) {
    pattern[i] = static_cast<std::byte>(i * 7 + 1);
  }
  std::vector<std::byte> scratch(kControlMessageSize);
  Plan plan;
  plan.test = "pingpong";
  plan.values["sizes"] = flags.sizes;
  plan.values["iterations"] = absl::StrCat(flags.iterations);
  plan.values["warmup"] = absl::StrCat(flags.warmup);
  plan.values["scale_iterations"] = flags.scale_iterations ? "1" : "0";
  plan.values["scale_warmup"] = flags.scale_warmup ? "1" : "0";
  plan.values["zero_copy"] = zero_copy ? "1" : "0";
  plan.values["slot_bytes"] = absl::StrCat(flags.slot);
  if (absl::Status status =
          SendText(connection, plan.Encode(), DeadlineIn(session.timeout()));
      !status.ok()) {
    return status;
  }
  absl::StatusOr<std::string> reply =
      ReceiveText(connection, scratch, DeadlineIn(session.timeout()));
  if (!reply.ok()) return reply.status();
  if (reply->rfind("OK", 0) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("the server refused the plan: ", *reply));
  }

  std::printf(
      "%s\n",
      Banner(backend, backend_flags, connection, "client", zero_copy).c_str());
  std::printf(" server           : %s\n", reply->c_str());
  std::printf("%s %10s %10s\n", LatencyHeader().c_str(), "inline", "path");
  std::fflush(stdout);

  Report report;
  std::vector<double> samples;
  const double us_per_tick = CycleClock::MicrosecondsPerTick();
  for (uint32_t size : sizes) {
    const uint64_t iterations = CountFor(
        flags.iterations, flags.scale_iterations, size, kMinIterations);
    const uint64_t warmup =
        CountFor(flags.warmup, flags.scale_warmup, size, kMinWarmup);
    const uint64_t total = warmup + iterations;
    samples.clear();
    samples.reserve(iterations);
    const ConnectionStats before = connection.stats();
    std::span<std::byte> message = ping->message(size);
    Deadline deadline = DeadlineIn(session.timeout());
    for (uint64_t i = 0; i < total; ++i) {
      const uint64_t value = StampValue(size, i);
      const bool bad =
          size == sizes.front() && static_cast<int64_t>(i) == flags.bad_ping;
      Stamp(message, bad ? ~value : value);
      if (i % kDeadlineRefresh == 0) deadline = DeadlineIn(session.timeout());
      const uint64_t start = CycleClock::Now();
      if (absl::Status status = ping->Send(size, deadline); !status.ok()) {
        return status;
      }
      absl::StatusOr<std::span<const std::byte>> echo =
          pong->Receive(size, deadline);
      const uint64_t end = CycleClock::Now();
      if (!echo.ok()) return echo.status();
      if (echo->size() != size || !HasStamp(*echo, value)) {
        std::string text(reinterpret_cast<const char*>(echo->data()),
                         std::min<size_t>(echo->size(), 200));
        if (text.rfind("ERR ", 0) == 0) {
          return absl::DataLossError(absl::StrCat("the server: ", text));
        }
        return absl::DataLossError(absl::StrFormat(
            "size %u, iteration %u: the echo has %u bytes and %s stamp", size,
            i, echo->size(), HasStamp(*echo, value) ? "the right" : "a wrong"));
      }
      pong->Release();
      if (i >= warmup) {
        samples.push_back(static_cast<double>(end - start) * us_per_tick / 2);
      }
    }
    const ConnectionStats after = connection.stats();
    const uint64_t inline_sends = after.inline_sends - before.inline_sends;
    const uint64_t rendezvous_sent =
        after.rendezvous_sent - before.rendezvous_sent;
    const uint64_t rendezvous_received =
        after.rendezvous_received - before.rendezvous_received;
    const uint64_t inline_payloads = inline_sends;
    const bool went_inline = inline_payloads == total;
    const std::string path = Path(rendezvous_sent, rendezvous_received, total);
    const LatencySummary summary = Summarize(samples);
    std::printf("%s %10s %10s\n", LatencyRow(size, summary).c_str(),
                went_inline ? "yes" : (inline_payloads == 0 ? "no" : "partly"),
                path.c_str());
    std::fflush(stdout);
    const TransportConfig& config = backend.config();
    report.AddRow()
        .Add("tool", "rdma_pingpong")
        .Add("backend", backend_flags.backend)
        .Add("device", connection.context().device_name())
        .Add("bytes", size)
        .Add("iterations", static_cast<uint64_t>(summary.samples))
        .Add("warmup", warmup)
        .Add("t_min_us", summary.t_min_us)
        .Add("t_max_us", summary.t_max_us)
        .Add("t_typical_us", summary.t_typical_us)
        .Add("t_avg_us", summary.t_avg_us)
        .Add("t_stdev_us", summary.t_stdev_us)
        .Add("p99_us", summary.p99_us)
        .Add("p99_9_us", summary.p99_9_us)
        .Add("inline_mode", backend_flags.inline_mode)
        .Add("usable_inline", connection.usable_inline())
        .Add("inline", went_inline)
        .Add("tc", config.traffic_class.has_value()
                       ? absl::StrCat(*config.traffic_class)
                       : std::string("default"))
        .Add("progress", backend_flags.progress)
        .Add("zero_copy", zero_copy)
        .Add("slot_bytes", connection.max_message_size())
        .Add("rendezvous_sent", rendezvous_sent)
        .Add("rendezvous_received", rendezvous_received)
        .Add("path", path)
        .Add("service_turns", after.service_turns - before.service_turns)
        .Add("service_yields", after.service_yields - before.service_yields)
        .Add("service_looks", after.service_looks - before.service_looks);
  }
  std::printf(
      "-------------------------------------------------------------------"
      "-------------------\n");
  if (absl::Status status =
          ClientFinish(connection, scratch, DeadlineIn(session.timeout()));
      !status.ok()) {
    return status;
  }
  return report.Write(session.csv, session.json);
}

// `slot`: this side's ConnectionOptions::max_message_size.
absl::Status Server(Connection& connection, const BenchBackend& backend,
                    const BackendFlags& backend_flags,
                    const SessionFlags& session, uint32_t slot, bool verbose) {
  std::vector<std::byte> scratch(
      std::max<size_t>(connection.max_message_size(), kControlMessageSize));
  absl::StatusOr<std::string> text =
      ReceiveText(connection, scratch, DeadlineIn(session.timeout()));
  if (!text.ok()) return text.status();
  absl::StatusOr<Plan> plan = Plan::Decode(*text);
  auto integer = [&](const char* key) -> absl::StatusOr<int64_t> {
    return plan.ok() ? plan->Int(key) : plan.status();
  };
  absl::StatusOr<std::vector<uint32_t>> sizes =
      plan.ok() ? plan->Sizes("sizes") : plan.status();
  const absl::StatusOr<int64_t> iterations = integer("iterations");
  const absl::StatusOr<int64_t> warmup = integer("warmup");
  const absl::StatusOr<int64_t> scale_iterations = integer("scale_iterations");
  const absl::StatusOr<int64_t> scale_warmup = integer("scale_warmup");
  const absl::StatusOr<int64_t> zero_copy = integer("zero_copy");
  const absl::StatusOr<int64_t> client_slot = integer("slot_bytes");
  absl::Status problem =
      !plan.ok()               ? plan.status()
      : !sizes.ok()            ? sizes.status()
      : !iterations.ok()       ? iterations.status()
      : !warmup.ok()           ? warmup.status()
      : !scale_iterations.ok() ? scale_iterations.status()
      : !scale_warmup.ok()     ? scale_warmup.status()
      : !zero_copy.ok()        ? zero_copy.status()
      : !client_slot.ok()      ? client_slot.status()
      : plan->test != "pingpong"
          ? absl::InvalidArgumentError(
                absl::StrCat("this is rdma_pingpong, not ", plan->test))
      : *client_slot > slot
          ? absl::InvalidArgumentError(absl::StrCat(
                "the client's slot is ", *client_slot, " B, this server's ",
                slot, " B; start it with --slot_bytes=", *client_slot))
          : CheckSizesFit(connection, *sizes);
  // Memory for the largest size, before the client starts timing.
  absl::StatusOr<MessageReceiver> receiver = absl::UnknownError("unset");
  absl::StatusOr<MessageSender> sender = absl::UnknownError("unset");
  if (problem.ok()) {
    const uint32_t largest = *std::max_element(sizes->begin(), sizes->end());
    receiver = MessageReceiver::Create(connection, *zero_copy != 0, largest);
    // Copying, the server echoes the bytes it received: no sender memory.
    sender = MessageSender::Create(connection, *zero_copy != 0,
                                   *zero_copy != 0 ? largest : 0);
    problem = !receiver.ok() ? receiver.status() : sender.status();
  }
  if (!problem.ok()) {
    (void)SendText(connection, absl::StrCat("ERR ", problem.message()),
                   DeadlineIn(session.timeout()));
    return problem;
  }
  if (absl::Status status = SendText(
          connection,
          absl::StrCat("OK device ", connection.context().device_name(),
                       ", usable inline ", connection.usable_inline(),
                       " B, slot ", connection.max_message_size(), " B"),
          DeadlineIn(session.timeout()));
      !status.ok()) {
    return status;
  }
  if (verbose) {
    std::printf("%s\n", Banner(backend, backend_flags, connection, "server",
                               *zero_copy != 0)
                            .c_str());
    std::printf(" plan             : %s\n", text->c_str());
    std::fflush(stdout);
  }
  for (uint32_t size : *sizes) {
    const uint64_t total =
        CountFor(*warmup, *scale_warmup != 0, size, kMinWarmup) +
        CountFor(*iterations, *scale_iterations != 0, size, kMinIterations);
    Deadline deadline = DeadlineIn(session.timeout());
    for (uint64_t i = 0; i < total; ++i) {
      if (i % kDeadlineRefresh == 0) deadline = DeadlineIn(session.timeout());
      const uint64_t value = StampValue(size, i);
      absl::StatusOr<std::span<const std::byte>> ping =
          receiver->Receive(size, deadline);
      if (!ping.ok()) return ping.status();
      // The echo goes before the ping is checked, so that the check is not
      // on the round trip (perftest checks nothing): a ping of the wrong
      // length or stamp still fails the run, by the ERR that follows the
      // echo. A lent slot is held until the check, given back by the next
      // receive.
      absl::Status sent;
      if (*zero_copy != 0) {
        // Its own registered message, stamped as the ping should be.
        Stamp(sender->message(size), value);
        sent = sender->Send(size, deadline);
      } else {
        sent = connection.Send(*ping, deadline);  // the echo, copied
      }
      if (ping->size() != size || !HasStamp(*ping, value)) {
        const std::string why = absl::StrFormat(
            "size %u, iteration %u: the ping has %u bytes and %s stamp", size,
            i, ping->size(), HasStamp(*ping, value) ? "the right" : "a wrong");
        receiver->Release();
        (void)SendText(connection, absl::StrCat("ERR ", why),
                       DeadlineIn(session.timeout()));
        return absl::DataLossError(why);
      }
      if (!sent.ok()) return sent;
    }
  }
  absl::Status finished =
      ServerFinish(connection, scratch, DeadlineIn(session.timeout()));
  if (finished.ok() && verbose) std::printf("served %s\n", text->c_str());
  return finished;
}

int Main(int argc, char** argv) {
  if (absl::Status status =
          ParseToolCommandLine(argc, argv,
                               "one-way SEND latency per message size, as "
                               "ib_send_lat reports it, over the transport");
      !status.ok()) {
    std::fprintf(stderr, "rdma_pingpong: %s\n", status.ToString().c_str());
    return 2;
  }
  const BackendFlags backend_flags = BackendFlags::FromCommandLine();
  const SessionFlags session = SessionFlags::FromCommandLine();
  PingpongFlags pingpong;
  pingpong.sizes = absl::GetFlag(FLAGS_sizes);
  pingpong.iterations = absl::GetFlag(FLAGS_iterations);
  pingpong.warmup = absl::GetFlag(FLAGS_warmup);
  pingpong.bad_ping = absl::GetFlag(FLAGS_test_bad_ping);
  pingpong.scale_iterations = !FlagOnCommandLine("iterations");
  pingpong.scale_warmup = !FlagOnCommandLine("warmup");
  pingpong.messages = MessageFlags::FromCommandLine();
  absl::StatusOr<std::vector<uint32_t>> sizes =
      ParseSizeList(pingpong.sizes, 1, kMaxBenchMessageSize);
  absl::StatusOr<BenchMode> mode = session.Mode(backend_flags);
  absl::Status bad = !sizes.ok()  ? absl::InvalidArgumentError(absl::StrCat(
                                        "--sizes: ", sizes.status().message()))
                     : !mode.ok() ? mode.status()
                     : pingpong.iterations < 1 || pingpong.warmup < 0
                         ? absl::InvalidArgumentError(
                               "--iterations must be >= 1, --warmup >= 0")
                         : pingpong.messages.Check();
  if (!bad.ok()) {
    std::fprintf(stderr, "rdma_pingpong: %s\n", bad.ToString().c_str());
    return 2;
  }
  absl::StatusOr<std::unique_ptr<BenchBackend>> backend =
      BenchBackend::Open(backend_flags, *mode == BenchMode::kSelf);
  if (!backend.ok()) {
    std::fprintf(stderr, "rdma_pingpong: error: opening the backend: %s\n",
                 backend.status().ToString().c_str());
    return 1;
  }

  ConnectionOptions options;
  options.progress = backend_flags.progress_mode();
  options.thread_mode = backend_flags.connection_thread_mode();
  options.busy_poll_yields = backend_flags.busy_poll_yields;
  pingpong.slot =
      pingpong.messages.Slot(*std::max_element(sizes->begin(), sizes->end()));
  options.max_message_size = pingpong.slot;
  BenchRoles roles;
  roles.client = [&](Connection& connection) {
    return Client(connection, **backend, backend_flags, session, pingpong,
                  *sizes);
  };
  roles.server = [&](Connection& connection) {
    return Server(connection, **backend, backend_flags, session, pingpong.slot,
                  *mode == BenchMode::kServer);
  };
  return RunBench("rdma_pingpong", *mode, **backend, session, options, roles);
}

}  // namespace
}  // namespace rdma_transport

int main(int argc, char** argv) { return rdma_transport::Main(argc, argv); }
