// The transport's own cost on the simulator: what Connection::Send +
// Connection::Receive add per message over the raw verbs they make, the
// handshake codec, connection setup, and heap allocations per message.
//
//   bazel run -c opt //transport:transport_benchmark
//   bazel run -c opt //transport:transport_benchmark --
//       --benchmark_filter=Overhead --benchmark_repetitions=5
//
// Everything runs single-threaded on one simulated fabric in kImmediate mode
// (every post runs the fabric to quiescence, so a SEND's completions are
// there when PostSend returns): the figures are CPU time in the transport
// and the simulator, not a wire.
//
//   BM_TransportMessage/<size>/<inline>  client Send() + server Receive()
//   BM_RawMessage/<size>/<inline>        the same message with SimVerbs
//                                        directly: post SEND_WITH_IMM
//                                        (signalled), poll the sender's CQ,
//                                        poll the receiver's CQ, repost the
//                                        receive
//   BM_Overhead/<size>/<inline>/<zero_copy>/<serialized>
//                                        both, interleaved in blocks of
//                                        256 messages; reports the median ns
//                                        per message of each and their
//                                        ratio. zero_copy 1: SendFrom() a
//                                        registered region +
//                                        ReceiveBorrowed(&view) (one view
//                                        kept: its slot goes back with the
//                                        next receive); slots as large as
//                                        the message on both (4 KiB at
//                                        least). serialized 1: both
//                                        connections in ThreadMode::
//                                        kSerialized (no atomic lock)
//   BM_HandshakeEncode / BM_HandshakeDecode   a HELLO with a 16-byte token
//   BM_ConnectionSetup                   Connect + Accept + both Close()s
//
// <inline> 1: the transport negotiates inline (ConnectX-7: 236 B usable) and
// the raw baseline posts IBV_SEND_INLINE exactly when the transport would;
// 0: max_inline = 0 on both. Every message benchmark reports
// allocs_per_msg: operator new calls during the timed loop (this binary
// replaces the global operator new) divided by messages.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "benchmark/benchmark.h"
#include "sim/device_profile.h"
#include "sim/fabric.h"
#include "sim/sim_verbs.h"
#include "tests/benchmark_setup.h"
#include "tests/counting_allocator.h"
#include "tests/raw_qp_pair.h"
#include "tests/sample_hello.h"
#include "transport/config.h"
#include "transport/connection.h"
#include "transport/context.h"
#include "transport/engine.h"
#include "transport/handshake.h"
#include "transport/inline_size.h"
#include "transport/listener.h"
#include "transport/memory_region.h"

// Allocations per message are counted by //tests:counting_allocator, which
// replaces every operator new of this binary.

namespace rdma_transport {
namespace {

using std::chrono::seconds;

// Two ConnectX-7 NICs on one fabric, their Contexts, and both a transport
// connection and a raw QP pair between them.
class Setup {
 public:
  explicit Setup(bool allow_inline) : verbs_(&fabric_) {
    TransportOptions options;
    if (!allow_inline) options.max_inline = 0;
    const TransportConfig config = Must(LoadTransportConfig(options), "config");
    const std::string a = Must(
        fabric_.AddDevice(sim::ConnectX7(), std::nullopt, "10.0.0.1"), "NIC");
    const std::string b = Must(
        fabric_.AddDevice(sim::ConnectX7(), std::nullopt, "10.0.0.2"), "NIC");
    client_context_ = Must(Context::Open(verbs_, a, config), "open");
    server_context_ = Must(Context::Open(verbs_, b, config), "open");
  }

  ~Setup() {
    client_.reset();
    server_.reset();
    raw_.reset();
    client_context_.reset();
    server_context_.reset();
  }

  // `client_options`: the client's (an engine, say); the server's are the
  // defaults but for `slot_bytes`, the size of its receive slots.
  void ConnectTransport(const ConnectionOptions& client_options = {},
                        uint32_t slot_bytes = 4096) {
    ConnectionOptions server_options;
    server_options.max_message_size = slot_bytes;
    server_options.thread_mode = client_options.thread_mode;
    std::unique_ptr<Listener> listener =
        Must(Listener::Create(*server_context_, "127.0.0.1:0", server_options),
             "listen");
    Acceptor acceptor(*listener);
    client_ =
        Must(Connect(*client_context_, listener->address(), client_options),
             "connect");
    server_ = acceptor.Take();
  }
  // Both connections gone (before an engine the client used).
  void DropTransport() {
    client_.reset();
    server_.reset();
  }

  void ConnectRaw(uint32_t slot_bytes = RawQpPair::kDefaultSlot) {
    raw_ = std::make_unique<RawQpPair>(verbs_, *client_context_,
                                       *server_context_, slot_bytes);
  }

  Connection& client() { return *client_; }
  Connection& server() { return *server_; }
  RawQpPair& raw() { return *raw_; }
  Context& client_context() { return *client_context_; }
  Context& server_context() { return *server_context_; }

 private:
  // A benchmark measures real time: the transport on the wall clock.
  static sim::FabricOptions WallClock() {
    sim::FabricOptions options;
    options.clock = sim::ClockMode::kWallClock;
    return options;
  }
  sim::Fabric fabric_{WallClock()};
  sim::SimVerbs verbs_;
  std::unique_ptr<Context> client_context_;
  std::unique_ptr<Context> server_context_;
  std::unique_ptr<Connection> client_;
  std::unique_ptr<Connection> server_;
  std::unique_ptr<RawQpPair> raw_;
};

// One transport message: the client sends, the server receives.
inline bool TransportMessage(Setup& setup, std::span<const std::byte> message,
                             std::span<std::byte> buffer) {
  if (!setup.client().Send(message).ok()) return false;
  absl::StatusOr<size_t> n = setup.server().Receive(buffer);
  return n.ok() && *n == message.size();
}

// The same with no copy: sent from a registered region, received in place
// into one view kept across messages (its slot goes back with the next
// receive, as a receive loop does it).
inline bool ZeroCopyMessage(Setup& setup, const MemoryRegion& message,
                            size_t size, ReceivedMessage& view) {
  if (!setup.client().SendFrom(message, 0, size).ok()) return false;
  return setup.server().ReceiveBorrowed(&view).ok() && view.size() == size;
}

void SetMessageCounters(benchmark::State& state, uint64_t allocations,
                        uint64_t messages) {
  state.counters["allocs_per_msg"] =
      static_cast<double>(allocations) / std::max<uint64_t>(messages, 1);
  state.SetItemsProcessed(static_cast<int64_t>(messages));
  state.SetBytesProcessed(static_cast<int64_t>(messages * state.range(0)));
}

void BM_TransportMessage(benchmark::State& state) {
  const uint32_t size = static_cast<uint32_t>(state.range(0));
  Setup setup(state.range(1) != 0);
  setup.ConnectTransport();
  std::vector<std::byte> message(size, std::byte{0x5a});
  std::vector<std::byte> buffer(4096);
  // Reach steady state (credit returns, slot reuse) before counting.
  for (int i = 0; i < 1000; ++i) {
    if (!TransportMessage(setup, message, buffer)) {
      state.SkipWithError("warm-up failed");
      return;
    }
  }
  const uint64_t inline_before = setup.client().stats().inline_sends;
  const uint64_t allocations = CountHeap().allocations;
  uint64_t messages = 0;
  for (auto _ : state) {
    if (!TransportMessage(setup, message, buffer)) {
      state.SkipWithError(setup.client().status().ToString().c_str());
      break;
    }
    ++messages;
  }
  SetMessageCounters(state, CountHeap().allocations - allocations, messages);
  state.counters["inline"] =
      setup.client().stats().inline_sends - inline_before == messages ? 1 : 0;
}

void BM_RawMessage(benchmark::State& state) {
  const uint32_t size = static_cast<uint32_t>(state.range(0));
  Setup setup(state.range(1) != 0);
  setup.ConnectRaw();
  for (int i = 0; i < 1000; ++i) {
    if (!setup.raw().Message(size)) {
      state.SkipWithError("warm-up failed");
      return;
    }
  }
  const uint64_t allocations = CountHeap().allocations;
  uint64_t messages = 0;
  for (auto _ : state) {
    if (!setup.raw().Message(size)) {
      state.SkipWithError("raw message failed");
      break;
    }
    ++messages;
  }
  SetMessageCounters(state, CountHeap().allocations - allocations, messages);
  state.counters["inline"] =
      ShouldSendInline(size, setup.raw().usable_inline()) ? 1 : 0;
}

double Median(std::vector<double>& values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

// Transport and raw side by side: each iteration is a block of kBlock
// transport messages then kBlock raw ones, timed separately, on the same
// fabric and NICs; machine noise hits both alike.
void BM_Overhead(benchmark::State& state) {
  constexpr int kBlock = 256;
  const uint32_t size = static_cast<uint32_t>(state.range(0));
  const bool zero_copy = state.range(2) != 0;
  // Slots as large as the message (4 KiB at least), on both.
  const uint32_t slot = std::max<uint32_t>(size, RawQpPair::kDefaultSlot);
  Setup setup(state.range(1) != 0);
  ConnectionOptions client_options;
  client_options.max_message_size = slot;
  if (state.range(3) != 0) client_options.thread_mode = ThreadMode::kSerialized;
  setup.ConnectTransport(client_options, slot);
  setup.ConnectRaw(slot);
  std::vector<std::byte> message(size, std::byte{0x5a});
  std::vector<std::byte> buffer(slot);
  MemoryRegion registered = Must(
      setup.client_context().RegisterMemory(message, kLocalOnly), "region");
  ReceivedMessage view;
  auto transport_message = [&] {
    return zero_copy ? ZeroCopyMessage(setup, registered, size, view)
                     : TransportMessage(setup, message, buffer);
  };
  for (int i = 0; i < 1000; ++i) {
    if (!transport_message() || !setup.raw().Message(size)) {
      state.SkipWithError("warm-up failed");
      return;
    }
  }
  std::vector<double> transport_ns;
  std::vector<double> raw_ns;
  // Room for the samples up front: only the blocks' allocations count.
  transport_ns.reserve(1 << 20);
  raw_ns.reserve(1 << 20);
  uint64_t allocations = 0;
  for (auto _ : state) {
    const uint64_t allocations_before = CountHeap().allocations;
    const auto t0 = Clock::now();
    for (int i = 0; i < kBlock; ++i) {
      if (!transport_message()) {
        state.SkipWithError("transport message failed");
        return;
      }
    }
    const auto t1 = Clock::now();
    for (int i = 0; i < kBlock; ++i) {
      if (!setup.raw().Message(size)) {
        state.SkipWithError("raw message failed");
        return;
      }
    }
    const auto t2 = Clock::now();
    allocations += CountHeap().allocations - allocations_before;
    transport_ns.push_back(
        std::chrono::duration<double, std::nano>(t1 - t0).count() / kBlock);
    raw_ns.push_back(std::chrono::duration<double, std::nano>(t2 - t1).count() /
                     kBlock);
  }
  const uint64_t messages = 2ull * kBlock * transport_ns.size();
  state.counters["allocs_per_msg"] =
      static_cast<double>(allocations) / std::max<uint64_t>(messages, 1);
  const double transport = Median(transport_ns);
  const double raw = Median(raw_ns);
  state.counters["transport_ns"] = transport;
  state.counters["raw_ns"] = raw;
  state.counters["ratio"] = raw > 0 ? transport / raw : 0;
}

void MessageArgs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"size", "inline"});
  for (int size : {8, 64, 256, 4096}) {
    for (int allow_inline : {1, 0}) b->Args({size, allow_inline});
  }
}

// <zero_copy> 1: SendFrom() a registered region and ReceiveBorrowed();
// 0: Send() and Receive(), copying. <serialized> 1: both connections in
// ThreadMode::kSerialized (no atomic lock; zero copy only). Sizes to 64 KiB,
// slots as large.
void OverheadArgs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"size", "inline", "zero_copy", "serialized"});
  for (int size : {8, 64, 256, 4096, 65536}) {
    for (int allow_inline : {1, 0}) {
      b->Args({size, allow_inline, 1, 0});
      b->Args({size, allow_inline, 1, 1});
      b->Args({size, allow_inline, 0, 0});
    }
  }
}

BENCHMARK(BM_TransportMessage)->Apply(MessageArgs);
BENCHMARK(BM_RawMessage)->Apply(MessageArgs);
BENCHMARK(BM_Overhead)->Apply(OverheadArgs);

constexpr char kSampleToken[] = "0123456789abcdef";

void BM_HandshakeEncode(benchmark::State& state) {
  const HandshakeMessage hello = SampleHello(kSampleToken);
  for (auto _ : state) {
    absl::StatusOr<std::vector<uint8_t>> frame = EncodeHandshake(hello);
    benchmark::DoNotOptimize(frame);
  }
}
BENCHMARK(BM_HandshakeEncode);

void BM_HandshakeDecode(benchmark::State& state) {
  const std::vector<uint8_t> frame =
      Must(EncodeHandshake(SampleHello(kSampleToken)), "encode");
  for (auto _ : state) {
    absl::StatusOr<HandshakeMessage> message = DecodeHandshakeFrame(frame);
    benchmark::DoNotOptimize(message);
  }
}
BENCHMARK(BM_HandshakeDecode);

// The price of memory for one peer (peer_region.h): one BindRegion() (a
// window allocated, one signalled IBV_WR_BIND_MW posted and waited for) and
// its Release() (the window deallocated), against one 8-byte RDMA WRITE
// waited for, on the same connection.
void BM_BindRegion(benchmark::State& state) {
  Setup setup(true);
  setup.ConnectTransport();
  std::vector<std::byte> memory(1 << 20);
  MemoryRegion region = Must(
      setup.server_context().RegisterMemory(memory, kLocalWrite | kBindable),
      "register");
  for (auto _ : state) {
    absl::StatusOr<PeerRegion> peer =
        setup.server().BindRegion(region, 4096, 65536, kRemoteWrite);
    if (!peer.ok() || !peer->Release().ok()) {
      state.SkipWithError(peer.status().ToString().c_str());
      break;
    }
  }
}
BENCHMARK(BM_BindRegion);

// An 8-byte WRITE from the client's 4 KiB region into the server's 1 MiB
// one, both registered for as long as this lives.
struct EightByteWrite {
  explicit EightByteWrite(Setup& setup)
      : remote_memory(1 << 20),
        local_memory(4096),
        remote(Must(
            setup.server_context().RegisterMemory(remote_memory, kRemoteWrite),
            "register")),
        local(Must(
            setup.client_context().RegisterMemory(local_memory, kLocalOnly),
            "register")),
        op{&local, 0, 8, remote.remote(), 4096} {}

  std::vector<std::byte> remote_memory;
  std::vector<std::byte> local_memory;
  MemoryRegion remote;
  MemoryRegion local;
  RdmaOp op;
};

void BM_Write8(benchmark::State& state) {
  Setup setup(true);
  setup.ConnectTransport();
  const EightByteWrite write(setup);
  const RdmaOp& op = write.op;
  for (auto _ : state) {
    if (absl::Status status = setup.client().Write({&op, 1}); !status.ok()) {
      state.SkipWithError(status.ToString().c_str());
      break;
    }
  }
}
BENCHMARK(BM_Write8);

// The engine's hot path as rdma_bw --write_mode=window drives it: a window
// of 64 eight-byte WRITEs kept outstanding, one PostWrite() for each
// completion taken (Progress() dispatch, NextCompletion()). Per op: time
// and allocs_per_msg (0 in steady state, the target).
void BM_EngineWriteWindow(benchmark::State& state) {
  constexpr int kWindow = 64;
  Setup setup(true);
  std::unique_ptr<Engine> engine =
      Must(Engine::Create(setup.client_context()), "engine");
  ConnectionOptions options;
  options.engine = engine.get();
  setup.ConnectTransport(options);
  const EightByteWrite write(setup);
  const RdmaOp& op = write.op;
  Connection& client = setup.client();
  for (int i = 0; i < kWindow; ++i) Must(client.PostWrite({&op, 1}), "post");
  const uint64_t allocations = CountHeap().allocations;
  uint64_t ops = 0;
  for (auto _ : state) {
    std::optional<Completion> done = engine->NextCompletion();
    while (!done) {
      engine->Progress();
      done = engine->NextCompletion();
    }
    if (done->outcome != OpOutcome::kCompleted) {
      state.SkipWithError(done->status.ToString().c_str());
      break;
    }
    if (absl::StatusOr<OpHandle> posted = client.PostWrite({&op, 1});
        !posted.ok()) {
      state.SkipWithError(posted.status().ToString().c_str());
      break;
    }
    ++ops;
  }
  state.counters["allocs_per_msg"] =
      static_cast<double>(CountHeap().allocations - allocations) /
      std::max<uint64_t>(ops, 1);
  state.SetItemsProcessed(static_cast<int64_t>(ops));
  while (client.async_ops_in_flight() > 0 || engine->completions_ready() > 0) {
    engine->Progress();
    while (engine->NextCompletion()) {
    }
  }
  setup.DropTransport();
}
BENCHMARK(BM_EngineWriteWindow);

// One connection, made and torn down: TCP connect, HELLO/ACCEPT/READY, two
// QPs, CQs and four registered rings brought up, then both sides closed.
void BM_ConnectionSetup(benchmark::State& state) {
  Setup setup(true);
  std::unique_ptr<Listener> listener =
      Must(Listener::Create(setup.server_context(), "127.0.0.1:0"), "listen");
  Acceptor acceptor(*listener);
  for (auto _ : state) {
    absl::StatusOr<std::unique_ptr<Connection>> client =
        Connect(setup.client_context(), listener->address());
    if (!client.ok()) {
      state.SkipWithError(client.status().ToString().c_str());
      break;
    }
    std::unique_ptr<Connection> server = acceptor.Take();
    if (!(*client)->Close(DeadlineIn(seconds(5))).ok() ||
        !server->Close(DeadlineIn(seconds(5))).ok()) {
      state.SkipWithError("close failed");
      break;
    }
  }
}
BENCHMARK(BM_ConnectionSetup)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace
}  // namespace rdma_transport

BENCHMARK_MAIN();
