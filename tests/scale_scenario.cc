// File: tests/scale_scenario.cc

#include "tests/scale_scenario.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "sim/fabric.h"
#include "sim/profile_names.h"
#include "sim/sim_verbs.h"
#include "transport/config.h"
#include "transport/connect.h"
#include "transport/connection.h"
#include "transport/context.h"
#include "transport/engine.h"
#include "transport/listener.h"
#include "transport/memory_region.h"
#include "verbs_shim/env_thread.h"

namespace rdma_transport {
namespace {

using std::chrono::seconds;

// The byte at `offset` of what host `writer` writes into host `target`.
std::byte Pattern(uint32_t writer, uint32_t target, uint64_t offset) {
  return static_cast<std::byte>(
      (writer * 131 + target * 7 + offset * 13 + (offset >> 8)) & 0xff);
}

absl::Status CheckOptions(const ScaleOptions& o) {
  if (o.hosts < 2 || o.hosts > 250) {
    return absl::InvalidArgumentError(
        absl::StrCat("hosts ", o.hosts, " out of range 2..250"));
  }
  if (o.op_bytes < 1 || o.op_bytes > (1u << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat("op_bytes ", o.op_bytes, " out of range 1..1048576"));
  }
  if (o.bytes_per_connection == 0 || o.bytes_per_connection % o.op_bytes != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("bytes_per_connection ", o.bytes_per_connection,
                     " is not a positive multiple of op_bytes ", o.op_bytes));
  }
  if (o.window < 1 || o.window > 12) {
    return absl::InvalidArgumentError(
        absl::StrCat("window ", o.window, " out of range 1..12"));
  }
  return absl::OkStatus();
}

// Every connection side keeps small rings (this run is all WRITEs) and a
// send queue for `window` operations besides its control messages.
ConnectionOptions Shape(Engine* engine) {
  ConnectionOptions options;
  options.recv_slots = 8;
  options.send_slots = 8;
  options.max_message_size = 64;
  options.max_rdma_batch = 4;  // send queue 16: window + 2 control
  options.engine = engine;
  return options;
}

struct Host {
  std::unique_ptr<Context> context;
  // The host's connections as a writer, and as a target: two engines (two
  // progress loops, as a server with a thread for each side would have),
  // so that a host's connection to itself has each side on an engine that
  // one thread drives during setup (engine.h's contract).
  std::unique_ptr<Engine> writer_engine;
  std::unique_ptr<Engine> target_engine;
  std::unique_ptr<Listener> listener;
  // The source of every WRITE to host t: `op_bytes` at offset t * op_bytes.
  std::vector<std::byte> source;
  MemoryRegion source_region;
  // What host w writes lands in a ring of `window` slots of `op_bytes`
  // at offset w * window * op_bytes: op k in slot k mod window (a slot is
  // written again only once the op before in it has completed).
  std::vector<std::byte> target;
  MemoryRegion target_region;
};

struct Flow {
  uint32_t writer = 0;
  uint32_t target = 0;
  std::unique_ptr<Connection> client;  // on the writer's engine
  std::unique_ptr<Connection> server;  // on the target's engine
  uint64_t posted = 0;                 // operations
  uint64_t done = 0;
};

class Scenario {
 public:
  explicit Scenario(const ScaleOptions& options)
      : options_(options), fabric_(Manual()), verbs_(&fabric_) {}

  ~Scenario() {
    flows_.clear();  // connections before their engines and contexts
    for (Host& host : hosts_) {
      (void)host.source_region.Release();
      (void)host.target_region.Release();
    }
    hosts_.clear();
  }

  absl::StatusOr<ScaleReport> Run() {
    if (absl::Status s = CheckOptions(options_); !s.ok()) return s;
    RaiseFileLimit();
    const auto wall0 = std::chrono::steady_clock::now();
    if (absl::Status s = OpenHosts(); !s.ok()) return s;
    if (absl::Status s = ConnectAll(); !s.ok()) return s;
    const auto wall1 = std::chrono::steady_clock::now();
    std::vector<uint64_t> wire_before;
    if (absl::Status s = WireBytes(wire_before); !s.ok()) return s;
    const uint64_t retransmissions_before = fabric_.Counters().retransmissions;
    const std::chrono::nanoseconds virtual0 = fabric_.Now();
    if (absl::Status s = Traffic(); !s.ok()) return s;
    const std::chrono::nanoseconds virtual1 = fabric_.Now();
    const auto wall2 = std::chrono::steady_clock::now();
    if (absl::Status s = Verify(); !s.ok()) return s;

    ScaleReport report;
    report.hosts = options_.hosts;
    report.connections = static_cast<uint32_t>(flows_.size());
    report.operations = flows_.size() * Ops();
    report.bytes = flows_.size() * options_.bytes_per_connection;
    report.setup_wall_seconds =
        std::chrono::duration<double>(wall1 - wall0).count();
    report.traffic_wall_seconds =
        std::chrono::duration<double>(wall2 - wall1).count();
    report.traffic_virtual_seconds =
        std::chrono::duration<double>(virtual1 - virtual0).count();
    report.throughput_gbps =
        8.0 * report.bytes / report.traffic_virtual_seconds / 1e9;
    absl::StatusOr<double> gbps = fabric_.LinkGbps(names_[0]);
    if (!gbps.ok()) return gbps.status();
    report.link_gbps = *gbps;
    std::vector<uint64_t> wire_after;
    if (absl::Status s = WireBytes(wire_after); !s.ok()) return s;
    for (uint32_t h = 0; h < options_.hosts; ++h) {
      report.link_utilisation.push_back(
          8.0 * static_cast<double>(wire_after[h] - wire_before[h]) /
          (report.link_gbps * 1e9 * report.traffic_virtual_seconds));
    }
    report.retransmissions =
        fabric_.Counters().retransmissions - retransmissions_before;
    report.digest = fabric_.TraceDigest();
    return report;
  }

 private:
  // Posts only queue work; packets move while this thread waits, so every
  // link is busy at once (kImmediate would run each post to its end
  // before the next, one link at a time).
  static sim::FabricOptions Manual() {
    sim::FabricOptions options;
    options.progress_mode = sim::ProgressMode::kManual;
    return options;
  }

  uint64_t RingBytes() const {
    return uint64_t{options_.window} * options_.op_bytes;
  }
  uint64_t Ops() const {
    return options_.bytes_per_connection / options_.op_bytes;
  }

  // Two setup streams per connection and a few fds per engine.
  static void RaiseFileLimit() {
    rlimit files;
    if (getrlimit(RLIMIT_NOFILE, &files) == 0 &&
        files.rlim_cur < files.rlim_max) {
      files.rlim_cur = files.rlim_max;
      (void)setrlimit(RLIMIT_NOFILE, &files);
    }
  }

  absl::Status OpenHosts() {
    absl::StatusOr<sim::DeviceProfile> profile =
        sim::ProfileByName(options_.profile);
    if (!profile.ok()) return profile.status();
    absl::StatusOr<TransportConfig> config =
        LoadTransportConfig(TransportOptions{});
    if (!config.ok()) return config.status();
    EngineOptions engine_options;
    engine_options.max_connections = options_.hosts;
    hosts_.resize(options_.hosts);
    for (uint32_t h = 0; h < options_.hosts; ++h) {
      Host& host = hosts_[h];
      absl::StatusOr<std::string> name =
          fabric_.AddDevice(*profile, std::nullopt,
                            absl::StrCat("10.1.", h / 200, ".", 1 + h % 200));
      if (!name.ok()) return name.status();
      names_.push_back(*name);
      absl::StatusOr<std::unique_ptr<Context>> context =
          Context::Open(verbs_, *name, *config);
      if (!context.ok()) return context.status();
      host.context = *std::move(context);
      for (std::unique_ptr<Engine>* engine :
           {&host.writer_engine, &host.target_engine}) {
        absl::StatusOr<std::unique_ptr<Engine>> made =
            Engine::Create(*host.context, engine_options);
        if (!made.ok()) return made.status();
        *engine = *std::move(made);
      }
      ListenerOptions listener_options;
      listener_options.allow_unauthenticated = true;
      absl::StatusOr<std::unique_ptr<Listener>> listener =
          Listener::Create(*host.context, "127.0.0.1:0",
                           Shape(host.target_engine.get()), listener_options);
      if (!listener.ok()) return listener.status();
      host.listener = *std::move(listener);
      host.source.resize(size_t{options_.hosts} * options_.op_bytes);
      for (uint32_t t = 0; t < options_.hosts; ++t) {
        for (uint32_t i = 0; i < options_.op_bytes; ++i) {
          host.source[size_t{t} * options_.op_bytes + i] = Pattern(h, t, i);
        }
      }
      absl::StatusOr<MemoryRegion> source =
          host.context->RegisterMemory(host.source, kLocalOnly);
      if (!source.ok()) return source.status();
      host.source_region = *std::move(source);
      host.target.assign(size_t{options_.hosts} * RingBytes(), std::byte{0});
      absl::StatusOr<MemoryRegion> target =
          host.context->RegisterMemory(host.target, kRemoteWrite);
      if (!target.ok()) return target.status();
      host.target_region = *std::move(target);
    }
    return absl::OkStatus();
  }

  // Every ordered pair, a host with itself included (a loopback QP pair on
  // its NIC), one at a time: the writer's Connect() on a thread taking part
  // in virtual time, the target's Accept() on this one, each on its own
  // engine, so each engine is on one thread at a time (engine.h).
  absl::Status ConnectAll() {
    Env& env = fabric_.env();
    for (uint32_t w = 0; w < options_.hosts; ++w) {
      for (uint32_t t = 0; t < options_.hosts; ++t) {
        const std::string address = hosts_[t].listener->address();
        const ConnectionOptions shape = Shape(hosts_[w].writer_engine.get());
        const Context& context = *hosts_[w].context;
        EnvFuture<absl::StatusOr<std::unique_ptr<Connection>>> dialed =
            RunInThread(env, [&context, address, shape] {
              return Connect(context, address, shape);
            });
        absl::StatusOr<std::unique_ptr<Connection>> accepted =
            hosts_[t].listener->Accept(env.DeadlineIn(seconds(30)));
        absl::StatusOr<std::unique_ptr<Connection>> client = dialed.Get();
        if (!client.ok() || !accepted.ok()) {
          return absl::Status(
              (client.ok() ? accepted.status() : client.status()).code(),
              absl::StrCat("connecting host ", w, " to host ", t, ": ",
                           client.ok() ? accepted.status().message()
                                       : client.status().message()));
        }
        Flow& flow = flows_.emplace_back();
        flow.writer = w;
        flow.target = t;
        flow.client = *std::move(client);
        flow.server = *std::move(accepted);
        flow_of_[flow.client.get()] = flows_.size() - 1;
      }
    }
    return absl::OkStatus();
  }

  absl::Status WireBytes(std::vector<uint64_t>& out) const {
    out.clear();
    for (const std::string& name : names_) {
      absl::StatusOr<sim::SimCounters> counters = fabric_.DeviceCounters(name);
      if (!counters.ok()) return counters.status();
      out.push_back(counters->wire_bytes_sent);
    }
    return absl::OkStatus();
  }

  // Posts the flow's next operations, up to its window.
  absl::Status Refill(Flow& flow) {
    const Host& writer = hosts_[flow.writer];
    const Host& target = hosts_[flow.target];
    RdmaOp ops[12];
    size_t n = 0;
    while (flow.posted + n < Ops() &&
           flow.posted + n - flow.done < options_.window) {
      RdmaOp& op = ops[n];
      op.local = &writer.source_region;
      op.local_offset = size_t{flow.target} * options_.op_bytes;
      op.length = options_.op_bytes;
      op.remote = target.target_region.remote();
      op.remote_offset = flow.writer * RingBytes() + (flow.posted + n) %
                                                         options_.window *
                                                         options_.op_bytes;
      ++n;
    }
    if (n == 0) return absl::OkStatus();
    absl::StatusOr<OpHandle> first =
        flow.client->PostWrite(std::span<const RdmaOp>(ops, n));
    if (!first.ok()) {
      return absl::Status(
          first.status().code(),
          absl::StrCat("host ", flow.writer, " -> host ", flow.target, ": ",
                       first.status().message()));
    }
    flow.posted += n;
    return absl::OkStatus();
  }

  // Every flow's window kept full until every operation has ended; this
  // thread alone drives the engines and so virtual time.
  absl::Status Traffic() {
    Env& env = fabric_.env();
    for (Flow& flow : flows_) {
      if (absl::Status s = Refill(flow); !s.ok()) return s;
    }
    uint64_t done = 0;
    const uint64_t total = flows_.size() * Ops();
    const Deadline give_up = env.DeadlineIn(seconds(600));
    while (done < total) {
      const uint64_t token = env.PrepareWait();
      int progressed = 0;
      for (Host& host : hosts_) {
        // The targets' engines see no completions of these WRITEs: only
        // their liveness (keepalive probes) to serve.
        progressed += host.target_engine->Progress();
        progressed += host.writer_engine->Progress();
        while (std::optional<Completion> c =
                   host.writer_engine->NextCompletion()) {
          ++progressed;
          Flow& flow = flows_[flow_of_.at(c->connection)];
          if (c->outcome != OpOutcome::kCompleted) {
            return absl::Status(
                c->status.code(),
                absl::StrCat("host ", flow.writer, " -> host ", flow.target,
                             ": WRITE ", OpOutcomeName(c->outcome), ": ",
                             c->status.message()));
          }
          ++flow.done;
          ++done;
          if (absl::Status s = Refill(flow); !s.ok()) return s;
        }
      }
      if (progressed > 0) continue;
      if (env.Now() >= give_up) {
        return absl::DeadlineExceededError(
            absl::StrCat("traffic: ", total - done, " of ", total,
                         " WRITEs not done after 600 s of virtual time"));
      }
      (void)env.Wait(token, {}, give_up, WaitKind::kBlock);
    }
    return absl::OkStatus();
  }

  absl::Status Verify() const {
    for (const Flow& flow : flows_) {
      const Host& target = hosts_[flow.target];
      // Every slot of the ring that was written holds the pattern.
      const uint64_t base = flow.writer * RingBytes();
      const uint64_t written =
          std::min<uint64_t>(Ops(), options_.window) * options_.op_bytes;
      for (uint64_t i = 0; i < written; ++i) {
        const std::byte want =
            Pattern(flow.writer, flow.target, i % options_.op_bytes);
        if (target.target[base + i] != want) {
          return absl::DataLossError(absl::StrFormat(
              "host %u -> host %u: target byte %u is 0x%02x, wrote 0x%02x",
              flow.writer, flow.target, i,
              static_cast<int>(target.target[base + i]),
              static_cast<int>(want)));
        }
      }
    }
    return absl::OkStatus();
  }

  const ScaleOptions options_;
  sim::Fabric fabric_;  // virtual time, kManual
  sim::SimVerbs verbs_;
  std::vector<std::string> names_;
  std::vector<Host> hosts_;
  std::vector<Flow> flows_;
  std::map<const Connection*, size_t> flow_of_;
};

}  // namespace

absl::StatusOr<ScaleReport> RunScaleScenario(const ScaleOptions& options) {
  Scenario scenario(options);
  return scenario.Run();
}

std::string FormatScaleReport(const ScaleReport& r) {
  std::vector<double> u = r.link_utilisation;
  std::sort(u.begin(), u.end());
  const double median = u.empty() ? 0 : u[u.size() / 2];
  return absl::StrFormat(
      "scale run: %u hosts, %u connections (every host to every host), "
      "all-to-all "
      "RDMA WRITE\n"
      "  payload            %.1f MiB in %u WRITEs\n"
      "  setup              %.2f s wall\n"
      "  traffic            %.3f ms virtual, %.2f s wall\n"
      "  throughput         %.1f Gb/s virtual, all links (%.1f Gb/s a "
      "host)\n"
      "  link utilisation   min %.1f%% / median %.1f%% / max %.1f%% of %.0f "
      "Gb/s per host egress (wire bytes, headers included)\n"
      "  retransmissions    %u\n"
      "  trace digest       %016x\n",
      r.hosts, r.connections, static_cast<double>(r.bytes) / (1 << 20),
      r.operations, r.setup_wall_seconds, r.traffic_virtual_seconds * 1e3,
      r.traffic_wall_seconds, r.throughput_gbps,
      r.throughput_gbps / std::max<uint32_t>(r.hosts, 1),
      u.empty() ? 0 : 100 * u.front(), 100 * median,
      u.empty() ? 0 : 100 * u.back(), r.link_gbps, r.retransmissions, r.digest);
}

}  // namespace rdma_transport
