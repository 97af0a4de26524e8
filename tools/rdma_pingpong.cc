// rdma_pingpong: one-way message latency per size over the transport, the way
// perftest's ib_send_lat measures it (round trip / 2; t_min, t_max,
// t_typical, t_avg, t_stdev, 99%, 99.9%; tools/latency_stats.h), plus the
// negotiated inline size and whether each size went inline.
//
//   rdma_pingpong --self                                   # sim, one process
//   rdma_pingpong --backend=ibverbs --device=mlx5_1 --server
//   --listen=0.0.0.0:18515 rdma_pingpong --backend=ibverbs --device=mlx5_0
//   --connect=10.0.0.2:18515
//
// The client sends a message stamped with its iteration (first and last 8
// bytes), the server checks the stamp and the length and sends it back, the
// client checks the echo: a transport that loses, reorders, truncates or
// corrupts a message fails the run instead of producing a figure. Exit
// status 0 on success, 1 on any error (printed to stderr), 2 on bad flags.
#include <cstdio>
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
          "message sizes in bytes, a list");
ABSL_FLAG(int64_t, iterations, 1000,
          "measured round trips per size (perftest -n)");
ABSL_FLAG(int64_t, warmup, 100, "unmeasured round trips before them, per size");

namespace rdma_transport {
namespace {

// The values of the flags above (after ParseToolCommandLine).
struct PingpongFlags {
  std::string sizes;
  int64_t iterations = 0;
  int64_t warmup = 0;
};

std::string Banner(const BenchBackend& backend, const BackendFlags& flags,
                   const Connection& connection, const std::string& role) {
  const NegotiatedQp& qp = connection.negotiated_qp();
  const TransportConfig& config = backend.config();
  return absl::StrFormat(
      "-------------------------------------------------------------------"
      "-------------------\n"
      "                    Send Latency Test (rdma_transport)\n"
      " backend          : %s, %s on %s\n"
      " connection       : %s\n"
      " transport        : RC, SEND_WITH_IMM, credit flow control\n"
      " inline           : %s; asked %u B, granted %u B, usable %u B\n"
      " traffic class    : %s   progress : %s\n"
      "-------------------------------------------------------------------"
      "-------------------",
      backend.description(), role, connection.context().device_name(),
      connection.name(), flags.inline_mode, qp.requested_inline,
      qp.granted_inline, qp.usable_inline,
      config.traffic_class.has_value() ? absl::StrCat(*config.traffic_class)
                                       : "system default",
      flags.progress);
}

absl::Status Client(Connection& connection, const BenchBackend& backend,
                    const BackendFlags& backend_flags,
                    const SessionFlags& session, const PingpongFlags& flags,
                    const std::vector<uint32_t>& sizes) {
  for (uint32_t size : sizes) {
    if (size > connection.max_message_size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "size ", size, " exceeds the connection's message size ",
          connection.max_message_size(),
          " (the server's --sizes must include the largest size)"));
    }
  }
  std::vector<std::byte> ping(connection.max_message_size());
  std::vector<std::byte> pong(
      std::max<size_t>(connection.max_message_size(), kControlMessageSize));
  for (size_t i = 0; i < ping.size(); ++i) {
    ping[i] = static_cast<std::byte>(i * 7 + 1);
  }
  Plan plan;
  plan.test = "pingpong";
  plan.values["sizes"] = flags.sizes;
  plan.values["iterations"] = absl::StrCat(flags.iterations);
  plan.values["warmup"] = absl::StrCat(flags.warmup);
  if (absl::Status status =
          SendText(connection, plan.Encode(), DeadlineIn(session.timeout()));
      !status.ok()) {
    return status;
  }
  absl::StatusOr<std::string> reply =
      ReceiveText(connection, pong, DeadlineIn(session.timeout()));
  if (!reply.ok()) return reply.status();
  if (reply->rfind("OK", 0) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("the server refused the plan: ", *reply));
  }

  std::printf("%s\n",
              Banner(backend, backend_flags, connection, "client").c_str());
  std::printf(" server           : %s\n", reply->c_str());
  std::printf("%s %10s\n", LatencyHeader().c_str(), "inline");
  std::fflush(stdout);

  Report report;
  const uint64_t total = static_cast<uint64_t>(flags.warmup + flags.iterations);
  std::vector<double> samples;
  samples.reserve(flags.iterations);
  const double us_per_tick = CycleClock::MicrosecondsPerTick();
  for (uint32_t size : sizes) {
    samples.clear();
    const uint64_t inline_before = connection.stats().inline_sends;
    std::span<std::byte> message(ping.data(), size);
    Deadline deadline = DeadlineIn(session.timeout());
    for (uint64_t i = 0; i < total; ++i) {
      const uint64_t value = StampValue(size, i);
      Stamp(message, value);
      if (i % kDeadlineRefresh == 0) deadline = DeadlineIn(session.timeout());
      const uint64_t start = CycleClock::Now();
      if (absl::Status status = connection.Send(message, deadline);
          !status.ok()) {
        return status;
      }
      absl::StatusOr<size_t> n = connection.Receive(pong, deadline);
      const uint64_t end = CycleClock::Now();
      if (!n.ok()) return n.status();
      if (*n != size || !HasStamp({pong.data(), *n}, value)) {
        std::string text(reinterpret_cast<const char*>(pong.data()),
                         std::min<size_t>(*n, 200));
        if (text.rfind("ERR ", 0) == 0) {
          return absl::DataLossError(absl::StrCat("the server: ", text));
        }
        return absl::DataLossError(absl::StrFormat(
            "size %u, iteration %u: the echo has %u bytes and %s stamp", size,
            i, *n,
            HasStamp({pong.data(), *n}, value) ? "the right" : "a wrong"));
      }
      if (i >= static_cast<uint64_t>(flags.warmup)) {
        samples.push_back(static_cast<double>(end - start) * us_per_tick / 2);
      }
    }
    const uint64_t inline_sends =
        connection.stats().inline_sends - inline_before;
    const bool went_inline = inline_sends == total;
    const LatencySummary summary = Summarize(samples);
    std::printf("%s %10s\n", LatencyRow(size, summary).c_str(),
                went_inline ? "yes" : (inline_sends == 0 ? "no" : "partly"));
    std::fflush(stdout);
    const TransportConfig& config = backend.config();
    report.AddRow()
        .Add("tool", "rdma_pingpong")
        .Add("backend", backend_flags.backend)
        .Add("device", connection.context().device_name())
        .Add("bytes", size)
        .Add("iterations", static_cast<uint64_t>(summary.samples))
        .Add("warmup", static_cast<uint64_t>(flags.warmup))
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
        .Add("progress", backend_flags.progress);
  }
  std::printf(
      "-------------------------------------------------------------------"
      "-------------------\n");
  if (absl::Status status =
          ClientFinish(connection, pong, DeadlineIn(session.timeout()));
      !status.ok()) {
    return status;
  }
  return report.Write(session.csv, session.json);
}

absl::Status Server(Connection& connection, const BenchBackend& backend,
                    const BackendFlags& backend_flags,
                    const SessionFlags& session, bool verbose) {
  std::vector<std::byte> buffer(
      std::max<size_t>(connection.max_message_size(), kControlMessageSize));
  absl::StatusOr<std::string> text =
      ReceiveText(connection, buffer, DeadlineIn(session.timeout()));
  if (!text.ok()) return text.status();
  absl::StatusOr<Plan> plan = Plan::Decode(*text);
  absl::StatusOr<std::vector<uint32_t>> sizes =
      plan.ok() ? plan->Sizes("sizes") : plan.status();
  absl::StatusOr<int64_t> iterations =
      plan.ok() ? plan->Int("iterations") : plan.status();
  absl::StatusOr<int64_t> warmup =
      plan.ok() ? plan->Int("warmup") : plan.status();
  absl::Status problem = !plan.ok()         ? plan.status()
                         : !sizes.ok()      ? sizes.status()
                         : !iterations.ok() ? iterations.status()
                         : !warmup.ok()     ? warmup.status()
                         : plan->test != "pingpong"
                             ? absl::InvalidArgumentError(absl::StrCat(
                                   "this is rdma_pingpong, not ", plan->test))
                             : absl::OkStatus();
  if (problem.ok()) {
    for (uint32_t size : *sizes) {
      if (size > connection.max_message_size()) {
        problem = absl::InvalidArgumentError(
            absl::StrCat("size ", size, " exceeds this server's message size ",
                         connection.max_message_size(),
                         "; start it with --sizes=", plan->values["sizes"]));
      }
    }
  }
  if (!problem.ok()) {
    (void)SendText(connection, absl::StrCat("ERR ", problem.message()),
                   DeadlineIn(session.timeout()));
    return problem;
  }
  if (absl::Status status = SendText(
          connection,
          absl::StrCat("OK device ", connection.context().device_name(),
                       ", usable inline ", connection.usable_inline(), " B"),
          DeadlineIn(session.timeout()));
      !status.ok()) {
    return status;
  }
  if (verbose) {
    std::printf("%s\n",
                Banner(backend, backend_flags, connection, "server").c_str());
    std::printf(" plan             : %s\n", text->c_str());
    std::fflush(stdout);
  }
  const uint64_t total = static_cast<uint64_t>(*warmup + *iterations);
  for (uint32_t size : *sizes) {
    Deadline deadline = DeadlineIn(session.timeout());
    for (uint64_t i = 0; i < total; ++i) {
      if (i % kDeadlineRefresh == 0) deadline = DeadlineIn(session.timeout());
      absl::StatusOr<size_t> n = connection.Receive(buffer, deadline);
      if (!n.ok()) return n.status();
      if (*n != size || !HasStamp({buffer.data(), *n}, StampValue(size, i))) {
        const std::string why = absl::StrFormat(
            "size %u, iteration %u: the ping has %u bytes and %s stamp", size,
            i, *n,
            HasStamp({buffer.data(), *n}, StampValue(size, i)) ? "the right"
                                                               : "a wrong");
        (void)SendText(connection, absl::StrCat("ERR ", why),
                       DeadlineIn(session.timeout()));
        return absl::DataLossError(why);
      }
      if (absl::Status status = connection.Send({buffer.data(), *n}, deadline);
          !status.ok()) {
        return status;
      }
    }
  }
  absl::Status finished =
      ServerFinish(connection, buffer, DeadlineIn(session.timeout()));
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
  absl::StatusOr<std::vector<uint32_t>> sizes =
      ParseSizeList(pingpong.sizes, 1, kMaxSlotSize);
  absl::StatusOr<BenchMode> mode = session.Mode(backend_flags);
  absl::Status bad = !sizes.ok()  ? sizes.status()
                     : !mode.ok() ? mode.status()
                     : pingpong.iterations < 1 || pingpong.warmup < 0
                         ? absl::InvalidArgumentError(
                               "--iterations must be >= 1, --warmup >= 0")
                         : absl::OkStatus();
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
  options.max_message_size = std::max<uint32_t>(
      *std::max_element(sizes->begin(), sizes->end()), kControlMessageSize);
  BenchRoles roles;
  roles.client = [&](Connection& connection) {
    return Client(connection, **backend, backend_flags, session, pingpong,
                  *sizes);
  };
  roles.server = [&](Connection& connection) {
    return Server(connection, **backend, backend_flags, session,
                  *mode == BenchMode::kServer);
  };
  return RunBench("rdma_pingpong", *mode, **backend, session, options, roles);
}

}  // namespace
}  // namespace rdma_transport

int main(int argc, char** argv) { return rdma_transport::Main(argc, argv); }
