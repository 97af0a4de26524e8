// One engine on one thread serving many connections, on the simulator:
// small messages across all of them, connection setup per connection, and
// the memory each keeps, with and without the engine's shared receive queue.
//
//   bazel run -c opt //transport:engine_benchmark
//   bazel run -c opt //transport:engine_benchmark --
//       --benchmark_filter='BM_EngineMessages/connections:1024'
//
// The shape is ManyConnectionShape() (tests/benchmark_setup.h): 16 credits
// of 256-byte slots, 8 send slots. Both sides are engines on one fabric in
// kImmediate mode, driven by the benchmark's thread (an Acceptor thread
// only accepts during setup), so the figures are the CPU of the transport
// and of the simulated NICs and wire together, on one core.
//
//   BM_EngineMessages/<connections>/<srq>  one 32-byte (inline) message on
//       every connection: client Send() x N, server Receive() x N, then the
//       client engine progressed until empty (credit returns, send
//       completions). msgs_per_s: messages over all connections per second;
//       post_send_calls_per_msg, post_recv_calls_per_msg: verbs calls.
//   BM_EngineArrivals/<connections>/<srq>  the same, sent on the
//       connections in a shuffled order and received as the server's engine
//       reports them (ReadyConnection()): the server does not know which
//       connection a message came on. server_progress_calls_per_msg: the
//       server's own Progress() calls when none was ready.
//   BM_EngineSetup/<connections>/<srq>  N connections made (Connect +
//       Accept, both attached to their engines); us_per_connection. The
//       teardown is not timed.
//   BM_EngineMemory/<connections>/<srq>  N connections made once; per
//       connection: registrations, registered bytes, the engine pool's
//       share, heap bytes kept (counted operator new, the simulator's QP
//       included), and Connection::Footprint()'s figures beside them.
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "benchmark/benchmark.h"
#include "sim/device_profile.h"
#include "sim/fabric.h"
#include "sim/sim_verbs.h"
#include "tests/benchmark_setup.h"
#include "tests/counting_allocator.h"
#include "transport/config.h"
#include "transport/connect.h"
#include "transport/connection.h"
#include "transport/context.h"
#include "transport/engine.h"
#include "transport/listener.h"
#include "verbs_shim/env_thread.h"

namespace rdma_transport {
namespace {

using std::chrono::seconds;

// A thread taking part in the fabric's virtual time that makes Connect()s
// when asked, so that a batch of connections costs no thread start-up: the
// setup time per connection is the handshake's, at 1 as at 1,024. It owns
// the client engine while it dials; Take() hands the connections over.
class Dialer {
 public:
  Dialer(Env& env, const Context& context, std::string address,
         ConnectionOptions options)
      : env_(env),
        context_(context),
        address_(std::move(address)),
        options_(std::move(options)),
        done_(RunInThread(env, [this] { return Loop(); })) {}
  ~Dialer() {
    stop_.store(true);
    env_.Notify();
    Must(done_.Get(), "dialer");
  }

  void Request(uint32_t count) {
    requested_.fetch_add(count);
    env_.Notify();
  }
  // Waits (through the Env) until every requested connection is made.
  std::vector<std::unique_ptr<Connection>> Take() {
    while (true) {
      const uint64_t token = env_.PrepareWait();
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (made_.size() == requested_.load() - taken_) {
          taken_ += made_.size();
          return std::exchange(made_, {});
        }
      }
      env_.Wait(token, {}, env_.DeadlineIn(seconds(1)), WaitKind::kBlock);
    }
  }

 private:
  absl::Status Loop() {
    uint64_t dialled = 0;
    while (true) {
      const uint64_t token = env_.PrepareWait();
      if (stop_.load()) return absl::OkStatus();
      if (dialled < requested_.load()) {
        absl::StatusOr<std::unique_ptr<Connection>> one =
            Connect(context_, address_, options_);
        if (!one.ok()) return one.status();
        ++dialled;
        std::lock_guard<std::mutex> lock(mu_);
        made_.push_back(*std::move(one));
        env_.Notify();
        continue;
      }
      env_.Wait(token, {}, env_.DeadlineIn(seconds(1)), WaitKind::kBlock);
    }
  }

  Env& env_;
  const Context& context_;
  const std::string address_;
  const ConnectionOptions options_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> requested_{0};
  std::mutex mu_;
  std::vector<std::unique_ptr<Connection>> made_;
  uint64_t taken_ = 0;  // Take()'s thread only
  EnvFuture<absl::Status> done_;
};

// Two ConnectX-7 NICs, an engine on each, and the connections between them.
class ManyConnections {
 public:
  explicit ManyConnections(uint32_t connections, bool srq)
      : verbs_(&fabric_),
        engine_options_(ManyConnectionEngine(connections, srq)) {
    // Two sockets per pair (setup streams) and a few per engine.
    rlimit files;
    if (getrlimit(RLIMIT_NOFILE, &files) == 0 &&
        files.rlim_cur < files.rlim_max) {
      files.rlim_cur = files.rlim_max;
      (void)setrlimit(RLIMIT_NOFILE, &files);
    }
    const std::string a = Must(
        fabric_.AddDevice(sim::ConnectX7(), std::nullopt, "10.0.0.1"), "NIC");
    const std::string b = Must(
        fabric_.AddDevice(sim::ConnectX7(), std::nullopt, "10.0.0.2"), "NIC");
    const TransportConfig config =
        Must(LoadTransportConfig(TransportOptions{}), "config");
    contexts_[0] = Must(Context::Open(verbs_, a, config), "open");
    contexts_[1] = Must(Context::Open(verbs_, b, config), "open");
    for (int side = 0; side < 2; ++side) {
      engines_[side] =
          Must(Engine::Create(*contexts_[side], engine_options_), "engine");
    }
    ConnectionOptions server = ManyConnectionShape();
    server.engine = engines_[1].get();
    ListenerOptions listener_options;
    listener_options.allow_unauthenticated = true;
    listener_ = Must(Listener::Create(*contexts_[1], "127.0.0.1:0", server,
                                      listener_options),
                     "listen");
    ConnectionOptions client = ManyConnectionShape();
    client.engine = engines_[0].get();
    dialer_ = std::make_unique<Dialer>(fabric_.env(), *contexts_[0],
                                       listener_->address(), client);
  }

  ~ManyConnections() {
    CloseAll();
    dialer_.reset();
    listener_.reset();
  }

  // `count` Connect()s on the dialer's thread, as many Accept()s on this.
  void Connect(uint32_t count) {
    dialer_->Request(count);
    for (uint32_t i = 0; i < count; ++i) {
      servers_.push_back(Must(
          listener_->Accept(fabric_.env().DeadlineIn(seconds(30))), "accept"));
    }
    for (auto& made : dialer_->Take()) clients_.push_back(std::move(made));
  }

  // No more connections: the dialer goes, so that nothing else waits on
  // the Env (every Notify() would wake it) while messages are timed.
  void StopDialing() { dialer_.reset(); }

  void CloseAll() {
    clients_.clear();
    servers_.clear();
  }

  Engine& engine(int side) { return *engines_[side]; }
  std::vector<std::unique_ptr<Connection>>& clients() { return clients_; }
  std::vector<std::unique_ptr<Connection>>& servers() { return servers_; }
  sim::Fabric& fabric() { return fabric_; }
  const EngineOptions& engine_options() const { return engine_options_; }

 private:
  sim::Fabric fabric_;
  sim::SimVerbs verbs_;
  const EngineOptions engine_options_;
  std::unique_ptr<Context> contexts_[2];
  std::unique_ptr<Engine> engines_[2];
  std::unique_ptr<Listener> listener_;
  std::unique_ptr<Dialer> dialer_;
  std::vector<std::unique_ptr<Connection>> clients_;
  std::vector<std::unique_ptr<Connection>> servers_;
};

// What the message benchmarks share: state.range(0) connections (with the
// shared receive queue when state.range(1) is not 0), made and dialled,
// a 32-byte message and a buffer for it.
struct MessageRun {
  explicit MessageRun(const benchmark::State& state)
      : n(static_cast<uint32_t>(state.range(0))),
        setup(n, state.range(1) != 0) {
    setup.Connect(n);
    setup.StopDialing();
  }
  const uint32_t n;
  ManyConnections setup;
  std::vector<std::byte> message = std::vector<std::byte>(32, std::byte{0x5a});
  std::vector<std::byte> buffer = std::vector<std::byte>(256);
};

void BM_EngineMessages(benchmark::State& state) {
  MessageRun run(state);
  const uint32_t n = run.n;
  const Deadline deadline = kNoDeadline;
  const sim::SimCounters before = run.setup.fabric().Counters();
  for (auto _ : state) {
    for (auto& client : run.setup.clients()) {
      if (!client->Send(run.message, deadline).ok()) {
        state.SkipWithError("send failed");
        return;
      }
    }
    for (auto& server : run.setup.servers()) {
      absl::StatusOr<size_t> got = server->Receive(run.buffer, deadline);
      if (!got.ok() || *got != run.message.size()) {
        state.SkipWithError("receive failed");
        return;
      }
    }
    while (run.setup.engine(0).Progress() > 0) {
    }
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * n);
  state.counters["msgs_per_s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * n, benchmark::Counter::kIsRate);
  const EngineStats server = run.setup.engine(1).stats();
  const EngineStats client = run.setup.engine(0).stats();
  const double messages = static_cast<double>(state.iterations()) * n;
  state.counters["completions_per_msg"] =
      static_cast<double>(server.completions + client.completions) / messages;
  const sim::SimCounters after = run.setup.fabric().Counters();
  state.counters["rnr_naks"] = static_cast<double>(after.rnr_naks);
  state.counters["post_send_calls_per_msg"] =
      static_cast<double>(after.post_send_calls - before.post_send_calls) /
      messages;
  state.counters["post_recv_calls_per_msg"] =
      static_cast<double>(after.post_recv_calls - before.post_recv_calls) /
      messages;
}
BENCHMARK(BM_EngineMessages)
    ->ArgsProduct({{64, 1024}, {0, 1}})
    ->ArgNames({"connections", "srq"})
    ->Unit(benchmark::kMicrosecond);

// BM_EngineMessages with the server not knowing where messages are: one
// message on every connection in an order shuffled anew each iteration
// (a seeded generator), and the server takes them as the engine reports
// them (ReadyConnection()), progressing its engine when none is ready.
void BM_EngineArrivals(benchmark::State& state) {
  MessageRun run(state);
  const uint32_t n = run.n;
  const Deadline deadline = kNoDeadline;
  std::vector<uint32_t> order(n);
  for (uint32_t i = 0; i < n; ++i) order[i] = i;
  std::mt19937 random(20261207);
  Engine& server_engine = run.setup.engine(1);
  uint64_t progress_calls = 0;
  for (auto _ : state) {
    state.PauseTiming();
    std::shuffle(order.begin(), order.end(), random);
    state.ResumeTiming();
    for (uint32_t i : order) {
      if (!run.setup.clients()[i]->Send(run.message, deadline).ok()) {
        state.SkipWithError("send failed");
        return;
      }
    }
    for (uint32_t received = 0; received < n;) {
      Connection* ready = server_engine.ReadyConnection();
      if (ready == nullptr) {
        ++progress_calls;
        if (server_engine.Progress() == 0) {
          state.SkipWithError("a message never arrived");
          return;
        }
        continue;
      }
      absl::StatusOr<size_t> got = ready->Receive(run.buffer, deadline);
      if (!got.ok() || *got != run.message.size()) {
        state.SkipWithError("receive failed");
        return;
      }
      ++received;
    }
    while (run.setup.engine(0).Progress() > 0) {
    }
  }
  const double messages = static_cast<double>(state.iterations()) * n;
  state.SetItemsProcessed(static_cast<int64_t>(messages));
  state.counters["msgs_per_s"] =
      benchmark::Counter(messages, benchmark::Counter::kIsRate);
  state.counters["server_progress_calls_per_msg"] =
      static_cast<double>(progress_calls) / messages;
}
BENCHMARK(BM_EngineArrivals)
    ->ArgsProduct({{64, 1024}, {0, 1}})
    ->ArgNames({"connections", "srq"})
    ->Unit(benchmark::kMicrosecond);

void BM_EngineSetup(benchmark::State& state) {
  const auto n = static_cast<uint32_t>(state.range(0));
  ManyConnections setup(n, state.range(1) != 0);
  double seconds_total = 0;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    setup.Connect(n);
    seconds_total +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    state.PauseTiming();
    setup.CloseAll();
    state.ResumeTiming();
  }
  state.counters["us_per_connection"] =
      seconds_total * 1e6 / (static_cast<double>(state.iterations()) * n);
}
BENCHMARK(BM_EngineSetup)
    ->ArgsProduct({{1, 64, 1024}, {0, 1}})
    ->ArgNames({"connections", "srq"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(3);

void BM_EngineMemory(benchmark::State& state) {
  const auto n = static_cast<uint32_t>(state.range(0));
  const bool srq = state.range(1) != 0;
  ManyConnections setup(n, srq);
  const sim::SimCounters before = setup.fabric().Counters();
  const HeapCounts heap_before = CountHeap();
  setup.Connect(n);
  const HeapCounts heap_after = CountHeap();
  const sim::SimCounters after = setup.fabric().Counters();
  for (auto _ : state) {
    benchmark::DoNotOptimize(setup.clients().size());
  }
  const double connections = 2.0 * n;  // both sides are in this process
  const ConnectionFootprint formula =
      Connection::Footprint(ManyConnectionShape(), &setup.engine_options());
  state.counters["registrations"] =
      (after.memory_registrations - before.memory_registrations) / connections;
  state.counters["registered_B"] =
      (after.bytes_registered - before.bytes_registered) / connections;
  state.counters["shared_B"] =
      static_cast<double>(formula.shared_receive_bytes);
  state.counters["heap_B"] =
      static_cast<double>(heap_after.live_bytes - heap_before.live_bytes) /
      connections;
  state.counters["formula_registered_B"] =
      static_cast<double>(formula.registered_bytes);
  state.counters["formula_heap_B"] = static_cast<double>(formula.heap_bytes);
}
BENCHMARK(BM_EngineMemory)
    ->ArgsProduct({{1024}, {0, 1}})
    ->ArgNames({"connections", "srq"})
    ->Iterations(1);

}  // namespace
}  // namespace rdma_transport

BENCHMARK_MAIN();
