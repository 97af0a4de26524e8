// Resource bounds of the transport, measured on the simulator
// (docs/resources.md):
//
//  * Memory per connection. The formula from ConnectionOptions: a send ring
//    and a receive ring, each `slots x slot` rounded up to 4 KiB pages with
//    slot = max(max_message_size, 64), plus the Connection object, its
//    bookkeeping vectors and the QP and CQ. This binary replaces the global
//    operator new to count the heap bytes each side holds (tagged by the
//    thread that allocated them), a VerbsWrapper records the bytes each side
//    registers (the rings, which come from aligned_alloc, not operator new),
//    and the allocator's own statistics give the process-wide total. Each
//    side holds exactly its rings registered, its bookkeeping formula plus
//    under 1 KiB, and under 96 KiB of simulated QP and CQ (defaults: rings +
//    79 KiB).
//
//  * A listener under a flood of half-open TCP connections (silent, or one
//    byte and then silent) keeps serving real peers within a bound, and its
//    stats() account for every flood socket as dropped or timed out.
//
//  * Under a flood of well-formed HELLOs that never send READY, real peers
//    still connect; the flood gets pooled QPs in RESET and no registered
//    memory, and the server's heap grows by at most the pool's bound.
//
// The figures are printed for docs/resources.md:
//   bazel test //transport:resource_bounds_test --test_output=all

#include <arpa/inet.h>
#include <malloc.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <new>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "sim/fabric.h"
#include "sim/sim_verbs.h"
#include "tests/connection_pair.h"
#include "tests/sample_hello.h"
#include "transport/aligned_buffer.h"
#include "transport/connection.h"
#include "transport/context.h"
#include "transport/handshake.h"
#include "transport/listener.h"
#include "verbs_shim/verbs_wrapper.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define RESOURCE_BOUNDS_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define RESOURCE_BOUNDS_SANITIZER 1
#endif
#endif
#ifdef RESOURCE_BOUNDS_SANITIZER
extern "C" size_t __sanitizer_get_current_allocated_bytes();
#endif

// --- Counting operator new ---------------------------------------------------
//
// Every allocation carries a header with its size and the tag of the thread
// that made it, so a free on any thread is charged back to the right side.

namespace {

enum Tag : int { kOther = 0, kClient = 1, kServer = 2, kTags = 3 };

thread_local int current_tag = kOther;
std::atomic<int64_t> held_bytes[kTags];
std::atomic<int64_t> held_blocks[kTags];
// Bytes of headers and alignment padding this file adds, to take out of the
// allocator's process-wide figures.
std::atomic<int64_t> header_bytes{0};

struct Header {
  uint64_t size;
  uint32_t tag;
  uint32_t padding;  // offset from the malloc'd block to the header
};
static_assert(sizeof(Header) == 16);

void* CountedNew(std::size_t size, std::size_t alignment, bool nothrow) {
  alignment = std::max<std::size_t>(alignment, alignof(std::max_align_t));
  // The user block starts `offset` bytes into the malloc'd one, its header
  // just before it; `offset` is a multiple of the alignment.
  const std::size_t offset = std::max<std::size_t>(alignment, sizeof(Header));
  void* base =
      alignment <= alignof(std::max_align_t)
          ? std::malloc(size + offset)
          : std::aligned_alloc(alignment, (size + offset + alignment - 1) /
                                              alignment * alignment);
  if (base == nullptr) {
    if (nothrow) return nullptr;
    throw std::bad_alloc();
  }
  char* user = static_cast<char*>(base) + offset;
  Header* header = reinterpret_cast<Header*>(user) - 1;
  header->size = size;
  header->tag = static_cast<uint32_t>(current_tag);
  header->padding = static_cast<uint32_t>(offset);
  held_bytes[current_tag].fetch_add(size, std::memory_order_relaxed);
  held_blocks[current_tag].fetch_add(1, std::memory_order_relaxed);
  header_bytes.fetch_add(offset, std::memory_order_relaxed);
  return user;
}

void CountedDelete(void* user) noexcept {
  if (user == nullptr) return;
  const Header* header = static_cast<Header*>(user) - 1;
  held_bytes[header->tag].fetch_sub(header->size, std::memory_order_relaxed);
  held_blocks[header->tag].fetch_sub(1, std::memory_order_relaxed);
  header_bytes.fetch_sub(header->padding, std::memory_order_relaxed);
  std::free(static_cast<char*>(user) - header->padding);
}

}  // namespace

void* operator new(std::size_t size) { return CountedNew(size, 0, false); }
void* operator new[](std::size_t size) { return CountedNew(size, 0, false); }
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  return CountedNew(size, 0, true);
}
void* operator new[](std::size_t size, const std::nothrow_t&) noexcept {
  return CountedNew(size, 0, true);
}
void* operator new(std::size_t size, std::align_val_t alignment) {
  return CountedNew(size, static_cast<std::size_t>(alignment), false);
}
void* operator new[](std::size_t size, std::align_val_t alignment) {
  return CountedNew(size, static_cast<std::size_t>(alignment), false);
}
void* operator new(std::size_t size, std::align_val_t alignment,
                   const std::nothrow_t&) noexcept {
  return CountedNew(size, static_cast<std::size_t>(alignment), true);
}
void* operator new[](std::size_t size, std::align_val_t alignment,
                     const std::nothrow_t&) noexcept {
  return CountedNew(size, static_cast<std::size_t>(alignment), true);
}
void operator delete(void* p) noexcept { CountedDelete(p); }
void operator delete[](void* p) noexcept { CountedDelete(p); }
void operator delete(void* p, std::size_t) noexcept { CountedDelete(p); }
void operator delete[](void* p, std::size_t) noexcept { CountedDelete(p); }
void operator delete(void* p, std::align_val_t) noexcept { CountedDelete(p); }
void operator delete[](void* p, std::align_val_t) noexcept { CountedDelete(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept {
  CountedDelete(p);
}
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept {
  CountedDelete(p);
}
void operator delete(void* p, const std::nothrow_t&) noexcept {
  CountedDelete(p);
}
void operator delete[](void* p, const std::nothrow_t&) noexcept {
  CountedDelete(p);
}
void operator delete(void* p, std::align_val_t,
                     const std::nothrow_t&) noexcept {
  CountedDelete(p);
}
void operator delete[](void* p, std::align_val_t,
                       const std::nothrow_t&) noexcept {
  CountedDelete(p);
}

namespace rdma_transport {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr int64_t kKiB = 1024;
// The stated bounds of one side of a connection, beyond the formulas below:
// the transport's own heap is its bookkeeping formula plus the connection's
// name (under 1 KiB); the simulated NIC's QP and CQ stay under 96 KiB (68 KiB
// at the defaults, most of it the 252 inline bytes of each of the send
// queue's 146 slots, as an mlx5 send queue holds them), plus a gather buffer
// as large as the largest message sent that was not inline.
constexpr int64_t kNameBound = 1 * kKiB;
constexpr int64_t kSimQpCqBound = 96 * kKiB;

// Every byte the allocator hands out, process-wide, minus this file's
// headers: glibc's in-use bytes (arenas and mmapped blocks: rings of 128 KiB
// and more are mmapped), or the sanitizer allocator's.
int64_t HeapInUse() {
#ifdef RESOURCE_BOUNDS_SANITIZER
  const int64_t total =
      static_cast<int64_t>(__sanitizer_get_current_allocated_bytes());
#else
  const struct mallinfo2 info = mallinfo2();
  const int64_t total = static_cast<int64_t>(info.uordblks + info.hblkhd);
#endif
  return total - header_bytes.load();
}

// Charges each verbs call's heap bytes and registrations to the calling
// thread's side.
class MeasuringVerbs : public VerbsWrapper {
 public:
  using VerbsWrapper::VerbsWrapper;

  std::atomic<int64_t> registered[kTags] = {};
  std::atomic<int64_t> qp_bytes[kTags] = {};
  std::atomic<int64_t> cq_bytes[kTags] = {};

  absl::StatusOr<ibv_mr*> RegMr(ibv_pd* pd, void* addr, size_t length,
                                int access) override {
    absl::StatusOr<ibv_mr*> mr = target()->RegMr(pd, addr, length, access);
    if (mr.ok()) {
      const int tag = current_tag;
      current_tag = kOther;  // the map's node is the test's, not the side's
      std::lock_guard<std::mutex> lock(mu_);
      mr_tags_[*mr] = tag;
      registered[tag] += static_cast<int64_t>(length);
      current_tag = tag;
    }
    return mr;
  }
  absl::Status DeregMr(ibv_mr* mr) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = mr_tags_.find(mr);
      if (it != mr_tags_.end()) {
        registered[it->second] -= static_cast<int64_t>(mr->length);
        mr_tags_.erase(it);
      }
    }
    return target()->DeregMr(mr);
  }
  absl::StatusOr<ibv_cq*> CreateCq(ibv_context* context, int cqe,
                                   void* cq_context, ibv_comp_channel* channel,
                                   int comp_vector) override {
    const int64_t before = held_bytes[current_tag].load();
    absl::StatusOr<ibv_cq*> cq =
        target()->CreateCq(context, cqe, cq_context, channel, comp_vector);
    cq_bytes[current_tag] += held_bytes[current_tag].load() - before;
    return cq;
  }
  absl::StatusOr<ibv_qp*> CreateQp(ibv_pd* pd,
                                   ibv_qp_init_attr* init_attr) override {
    const int64_t before = held_bytes[current_tag].load();
    absl::StatusOr<ibv_qp*> qp = target()->CreateQp(pd, init_attr);
    qp_bytes[current_tag] += held_bytes[current_tag].load() - before;
    return qp;
  }

 private:
  std::mutex mu_;
  std::map<ibv_mr*, int> mr_tags_;  // the side that registered each region
};

// The registered memory of one connection, from its options: the two rings
// and the 64-byte slot the peer's keepalive probes write into.
int64_t RingBytes(const ConnectionOptions& options) {
  const size_t slot = std::max<uint32_t>(options.max_message_size, 64);
  return static_cast<int64_t>(RoundUp(slot * options.send_slots, 4096) +
                              RoundUp(slot * options.recv_slots, 4096) + 64);
}

// The Connection's own bookkeeping, from its options: the object, the
// arrival queue (8 B a receive slot), the send slots' sequence numbers (8 B
// each), the bytes posted per send queue entry (8 B each, for the watchdog)
// and one Write()/Read() batch of work requests and gather entries.
int64_t BookkeepingBytes(const ConnectionOptions& options) {
  const int64_t sq_depth = options.send_slots + options.max_rdma_batch + 4;
  return static_cast<int64_t>(sizeof(Connection) + 8 * options.recv_slots +
                              8 * options.send_slots + 8 * sq_depth +
                              options.max_rdma_batch *
                                  (sizeof(ibv_send_wr) + sizeof(ibv_sge)));
}

// Everything one side may hold: rings, the transport's bookkeeping and name,
// the simulated QP and CQ, the simulated NIC's gather buffer.
int64_t SideBound(const ConnectionOptions& options) {
  return RingBytes(options) + BookkeepingBytes(options) + kNameBound +
         kSimQpCqBound + options.max_message_size;
}

class TwoDevices : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<SimContexts> opened = OpenTwoSimContexts(fabric_, verbs_);
    ASSERT_TRUE(opened.ok()) << opened.status();
    contexts_ = std::move(opened->contexts);
  }

  void TearDown() override {
    contexts_.clear();
    EXPECT_EQ(LeakReportText(fabric_), "");
  }

  Context& client_context() { return *contexts_[0]; }
  Context& server_context() { return *contexts_[1]; }

  // Real sockets flood the listener and real threads race here: the
  // transport runs on the wall clock and sets up over TCP.
  static sim::FabricOptions WallClock() {
    sim::FabricOptions options;
    options.clock = sim::ClockMode::kWallClock;
    return options;
  }
  sim::Fabric fabric_{WallClock()};
  sim::SimVerbs sim_verbs_{&fabric_};
  MeasuringVerbs verbs_{&sim_verbs_};
  std::vector<std::unique_ptr<Context>> contexts_;
};

// --- Memory per connection ---------------------------------------------------

struct Snapshot {
  int64_t held[kTags];
  int64_t registered[kTags];
  int64_t qp[kTags];
  int64_t cq[kTags];
  int64_t heap;
};

class MemoryPerConnectionTest : public TwoDevices {
 protected:
  Snapshot Take() {
    Snapshot s;
    for (int t = 0; t < kTags; ++t) {
      s.held[t] = held_bytes[t].load();
      s.registered[t] = verbs_.registered[t].load();
      s.qp[t] = verbs_.qp_bytes[t].load();
      s.cq[t] = verbs_.cq_bytes[t].load();
    }
    s.heap = HeapInUse();
    return s;
  }

  // Establishes a pair: the client side on a thread tagged kClient, the
  // server side (Accept) on this thread tagged kServer.
  void Establish(Listener& listener, const ConnectionOptions& options,
                 std::unique_ptr<Connection>& client,
                 std::unique_ptr<Connection>& server) {
    absl::StatusOr<std::unique_ptr<Connection>> dialed =
        absl::UnknownError("not run");
    std::thread dialer([&] {
      current_tag = kClient;
      dialed = Connect(client_context(), listener.address(), options);
      current_tag = kOther;
    });
    current_tag = kServer;
    absl::StatusOr<std::unique_ptr<Connection>> accepted =
        listener.Accept(DeadlineIn(seconds(30)));
    current_tag = kOther;
    dialer.join();
    ASSERT_TRUE(dialed.ok()) << dialed.status();
    ASSERT_TRUE(accepted.ok()) << accepted.status();
    client = *std::move(dialed);
    server = *std::move(accepted);
  }

  void Measure(const char* label, const ConnectionOptions& options) {
    absl::StatusOr<std::unique_ptr<Listener>> listener =
        Listener::Create(server_context(), "127.0.0.1:0", options);
    ASSERT_TRUE(listener.ok()) << listener.status();

    // A first pair warms up what every later connection shares (the
    // device's inline-size cache, the listener's queue, the fabric's tables).
    {
      std::unique_ptr<Connection> client, server;
      ASSERT_NO_FATAL_FAILURE(Establish(**listener, options, client, server));
    }

    const Snapshot before = Take();
    std::unique_ptr<Connection> client, server;
    ASSERT_NO_FATAL_FAILURE(Establish(**listener, options, client, server));
    const Snapshot established = Take();
    // A full-size message each way, each side's calls charged to it: what
    // first use adds (the simulated NIC's gather buffer for a message that
    // is not inline).
    std::vector<std::byte> message(options.max_message_size);
    std::vector<std::byte> received(options.max_message_size);
    for (auto [from, to] : {std::pair(client.get(), server.get()),
                            std::pair(server.get(), client.get())}) {
      current_tag = from == client.get() ? kClient : kServer;
      ASSERT_TRUE(from->Send(message).ok());
      current_tag = to == client.get() ? kClient : kServer;
      ASSERT_TRUE(to->Receive(received, DeadlineIn(seconds(10))).ok());
      current_tag = kOther;
    }
    const Snapshot used = Take();

    ibv_qp_attr attr = {};
    ibv_qp_init_attr init = {};
    ASSERT_TRUE(verbs_.QueryQp(client->qp(), &attr, IBV_QP_CAP, &init).ok());
    std::printf(
        "[%s] QP as granted: %u send WRs (send_slots + max_rdma_batch + 4 = "
        "%u asked), %u receive WRs, %u B inline; CQ of %d entries\n",
        label, init.cap.max_send_wr,
        options.send_slots + options.max_rdma_batch + 4, init.cap.max_recv_wr,
        init.cap.max_inline_data, client->qp()->send_cq->cqe);

    const int64_t rings = RingBytes(options);
    const int64_t bookkeeping = BookkeepingBytes(options);
    int64_t side_total[kTags] = {};
    for (int side : {kClient, kServer}) {
      const int64_t setup = established.held[side] - before.held[side];
      const int64_t first_use = used.held[side] - established.held[side];
      const int64_t registered =
          used.registered[side] - before.registered[side];
      const int64_t qp = used.qp[side] - before.qp[side];
      const int64_t cq = used.cq[side] - before.cq[side];
      const int64_t transport = setup - qp - cq;
      side_total[side] = registered + setup + first_use;
      std::printf(
          "[%s] %s: rings %lld B registered (formula %lld B) + heap %lld B "
          "[transport %lld B (formula %lld B: Connection object %zu B and "
          "its vectors), sim QP %lld B, sim CQ %lld B, first message +%lld B] "
          "= %lld B = rings + %.1f KiB\n",
          label, side == kClient ? "client" : "server",
          static_cast<long long>(registered), static_cast<long long>(rings),
          static_cast<long long>(setup + first_use),
          static_cast<long long>(transport),
          static_cast<long long>(bookkeeping), sizeof(Connection),
          static_cast<long long>(qp), static_cast<long long>(cq),
          static_cast<long long>(first_use),
          static_cast<long long>(side_total[side]),
          static_cast<double>(side_total[side] - rings) / kKiB);
      EXPECT_EQ(registered, rings) << label;
      EXPECT_GE(transport, bookkeeping) << label;
      EXPECT_LT(transport, bookkeeping + kNameBound) << label;
      EXPECT_LT(qp + cq, kSimQpCqBound) << label;
      EXPECT_GE(first_use, 0) << label;
      EXPECT_LE(first_use, options.max_message_size) << label;
      EXPECT_LT(side_total[side], SideBound(options)) << label;
    }
    // The allocator's view of the whole process agrees with what was
    // counted, give or take its own rounding: exact under ASan; 16 B chunk
    // headers and up to two pages a mmapped ring with glibc (aligned_alloc
    // asks for 4 KiB more, mmap rounds up to a page); size classes and page
    // headers under TSan (about 3 %).
    const int64_t heap = used.heap - before.heap;
    const int64_t counted = side_total[kClient] + side_total[kServer] +
                            (used.held[kOther] - before.held[kOther]);
    std::printf(
        "[%s] pair: the allocator reports %lld B more in use (%lld B "
        "counted above; difference %lld B)\n",
        label, static_cast<long long>(heap), static_cast<long long>(counted),
        static_cast<long long>(heap - counted));
    EXPECT_GE(heap, 2 * rings) << label;
    EXPECT_LT(std::abs(heap - counted), 16 * kKiB + counted / 32) << label;

    // Closing gives it all back (but for growth of tables the fabric shares
    // between connections).
    client.reset();
    server.reset();
    const Snapshot closed = Take();
    for (int side : {kClient, kServer}) {
      EXPECT_EQ(closed.registered[side], before.registered[side]) << label;
      EXPECT_LT(std::abs(closed.held[side] - before.held[side]), 1 * kKiB)
          << label;
    }
  }
};

TEST_F(MemoryPerConnectionTest, DefaultsHoldTheirRingsPlusUnder96KiB) {
  ConnectionOptions options;  // 64 + 64 slots of 4 KiB
  ASSERT_EQ(RingBytes(options), 512 * kKiB + 64);
  ASSERT_LT(SideBound(options), RingBytes(options) + 112 * kKiB);
  Measure("defaults 64x4KiB", options);
}

TEST_F(MemoryPerConnectionTest, OtherShapesFollowTheFormula) {
  ConnectionOptions small;
  small.recv_slots = 8;
  small.send_slots = 8;
  small.max_message_size = 32;  // slot 64 B: one page a ring
  ASSERT_EQ(RingBytes(small), 8 * kKiB + 64);
  Measure("small 8x64B", small);

  ConnectionOptions large;
  large.recv_slots = 16;
  large.send_slots = 32;
  large.max_message_size = 64 * 1024;
  ASSERT_EQ(RingBytes(large), 3 * 1024 * kKiB + 64);
  Measure("large 32+16x64KiB", large);
}

// --- A flood of half-open TCP connections
// -------------------------------------

constexpr int kFloodSockets = 500;
constexpr int kWaves = 10;  // a real Connect() after each wave
// A wave is smaller than max_pending_handshakes (64), so the next wave never
// evicts the real peer that went before it, even one whose READY the
// listener has not read yet (see the disabled test at the end).
static_assert(kFloodSockets / kWaves < 64);
constexpr auto kServerHandshakeTimeout = seconds(3);
constexpr auto kRealConnectBound = seconds(2);

// Connects a non-blocking TCP socket to `address` ("127.0.0.1:port").
int OpenFloodSocket(const std::string& address) {
  const size_t colon = address.rfind(':');
  sockaddr_in peer = {};
  peer.sin_family = AF_INET;
  peer.sin_port = htons(static_cast<uint16_t>(
      std::strtoul(address.substr(colon + 1).c_str(), nullptr, 10)));
  inet_pton(AF_INET, address.substr(0, colon).c_str(), &peer.sin_addr);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (connect(fd, reinterpret_cast<sockaddr*>(&peer), sizeof(peer)) != 0 &&
      errno != EINPROGRESS) {
    close(fd);
    return -1;
  }
  return fd;
}

// Waits until every socket in `fds` is connected (writable); false at the
// deadline.
bool WaitConnected(const std::vector<int>& fds, Deadline deadline) {
  std::vector<pollfd> waiting;
  for (int fd : fds) waiting.push_back({fd, POLLOUT, 0});
  while (!waiting.empty()) {
    if (Clock::now() >= deadline) return false;
    const auto left =
        std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
    if (poll(waiting.data(), waiting.size(),
             static_cast<int>(std::max<int64_t>(left.count(), 0))) < 0 &&
        errno != EINTR) {
      return false;
    }
    std::vector<pollfd> still;
    for (const pollfd& p : waiting) {
      if (p.revents & (POLLERR | POLLHUP)) return false;
      if (!(p.revents & POLLOUT)) still.push_back({p.fd, POLLOUT, 0});
    }
    waiting = std::move(still);
  }
  return true;
}

// Flood sockets the server has not closed yet (no FIN or RST seen).
int StillOpen(const std::vector<int>& fds) {
  std::vector<pollfd> polled;
  for (int fd : fds) polled.push_back({fd, POLLIN | POLLRDHUP, 0});
  if (poll(polled.data(), polled.size(), 0) < 0) return -1;
  return static_cast<int>(
      std::count_if(polled.begin(), polled.end(), [](const pollfd& p) {
        return (p.revents & (POLLIN | POLLRDHUP | POLLHUP | POLLERR)) == 0;
      }));
}

// The flood's client ends, closed at the end of the test however it ends.
struct FloodSockets {
  std::vector<int> fds;
  ~FloodSockets() {
    for (int fd : fds) close(fd);
  }
};

// Accept() in a loop on its own thread until Stop() (or destruction).
class ServerLoop {
 public:
  ServerLoop(Listener& listener,
             std::vector<std::unique_ptr<Connection>>& accepted)
      : thread_([this, &listener, &accepted] {
          while (!stop_.load()) {
            absl::StatusOr<std::unique_ptr<Connection>> connection =
                listener.Accept(DeadlineIn(milliseconds(50)));
            if (connection.ok()) {
              std::lock_guard<std::mutex> lock(mu_);
              accepted.push_back(*std::move(connection));
            }
          }
        }) {}
  ~ServerLoop() { Stop(); }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::thread thread_;
};

class HalfOpenFloodTest : public TwoDevices {};

TEST_F(HalfOpenFloodTest, RealPeersAreServedWhileTheFloodIsTimedOutOrDropped) {
  // 500 flood sockets, our 10 and the listener's side of both.
  rlimit files = {};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &files), 0);
  files.rlim_cur = files.rlim_max;
  setrlimit(RLIMIT_NOFILE, &files);
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &files), 0);
  if (files.rlim_cur < 2 * kFloodSockets + 200) {
    GTEST_SKIP() << "RLIMIT_NOFILE " << files.rlim_cur << " is below "
                 << 2 * kFloodSockets + 200;
  }

  ConnectionOptions server_options;
  server_options.handshake_timeout = kServerHandshakeTimeout;
  ListenerOptions listener_options;  // max_pending_handshakes 64
  absl::StatusOr<std::unique_ptr<Listener>> listener = Listener::Create(
      server_context(), "127.0.0.1:0", server_options, listener_options);
  ASSERT_TRUE(listener.ok()) << listener.status();
  const std::string address = (*listener)->address();

  // The server: Accept() in a loop until told to stop. The connections
  // outlive the thread (declared first), the flood sockets too.
  std::vector<std::unique_ptr<Connection>> clients;
  std::vector<std::unique_ptr<Connection>> accepted;
  FloodSockets flood;
  ServerLoop server(**listener, accepted);
  std::vector<double> connect_ms;
  std::vector<int> open_at_connect;
  const Clock::time_point flood_start = Clock::now();
  for (int wave = 0; wave < kWaves; ++wave) {
    // Half of each wave stays silent, half sends one byte of a header.
    std::vector<int> fresh;
    for (int i = 0; i < kFloodSockets / kWaves; ++i) {
      int fd = OpenFloodSocket(address);
      ASSERT_GE(fd, 0) << std::strerror(errno);
      fresh.push_back(fd);
      flood.fds.push_back(fd);
    }
    ASSERT_TRUE(WaitConnected(fresh, DeadlineIn(seconds(30))));
    for (size_t i = 0; i < fresh.size(); i += 2) {
      ASSERT_EQ(send(fresh[i], "R", 1, MSG_NOSIGNAL), 1);
    }

    const Clock::time_point start = Clock::now();
    absl::StatusOr<std::unique_ptr<Connection>> client =
        Connect(client_context(), address);
    const Clock::duration took = Clock::now() - start;
    ASSERT_TRUE(client.ok()) << client.status();
    connect_ms.push_back(
        std::chrono::duration<double, std::milli>(took).count());
    EXPECT_LT(took, kRealConnectBound) << "real connect " << wave;
    clients.push_back(*std::move(client));
    // The flood was there: the sockets of this wave (and more) were still
    // unanswered when the real peer got through.
    open_at_connect.push_back(StillOpen(flood.fds));
  }
  const double flood_ms =
      std::chrono::duration<double, std::milli>(Clock::now() - flood_start)
          .count();

  // Every flood socket ends dropped or timed out; the real ones accepted.
  const Deadline settle = DeadlineIn(kServerHandshakeTimeout + seconds(30));
  ListenerStats stats = (*listener)->stats();
  while (stats.dropped + stats.timed_out < kFloodSockets &&
         Clock::now() < settle) {
    pollfd none = {-1, 0, 0};
    poll(&none, 1, 20);  // not synchronisation: the stats are re-read
    stats = (*listener)->stats();
  }
  server.Stop();
  // The listener has closed them all; the last FINs may still be on the way.
  int open_at_end = StillOpen(flood.fds);
  for (const Deadline gone = DeadlineIn(seconds(10));
       open_at_end != 0 && Clock::now() < gone;
       open_at_end = StillOpen(flood.fds)) {
    std::vector<pollfd> polled;
    for (int fd : flood.fds) polled.push_back({fd, POLLIN | POLLRDHUP, 0});
    poll(polled.data(), polled.size(), 20);
  }

  std::vector<double> sorted = connect_ms;
  std::sort(sorted.begin(), sorted.end());
  std::printf(
      "flood: %d half-open sockets (half silent, half 1 byte) in %d waves "
      "over %.0f ms, max_pending_handshakes %zu, server handshake_timeout "
      "%lld ms\n",
      kFloodSockets, kWaves, flood_ms, listener_options.max_pending_handshakes,
      static_cast<long long>(
          std::chrono::duration_cast<milliseconds>(kServerHandshakeTimeout)
              .count()));
  std::printf("real Connect() during the flood (ms):");
  for (double ms : connect_ms) std::printf(" %.1f", ms);
  std::printf(
      "\n  median %.1f ms, max %.1f ms (bound %lld ms)\n",
      sorted[sorted.size() / 2], sorted.back(),
      static_cast<long long>(
          std::chrono::duration_cast<milliseconds>(kRealConnectBound).count()));
  std::printf("flood sockets still unanswered at each real connect:");
  for (int n : open_at_connect) std::printf(" %d", n);
  std::printf(
      "\nlistener stats: accepted %llu, dropped %llu, timed_out %llu, "
      "rejected %llu, abandoned %llu; flood sockets unanswered at the end: "
      "%d\n",
      static_cast<unsigned long long>(stats.accepted),
      static_cast<unsigned long long>(stats.dropped),
      static_cast<unsigned long long>(stats.timed_out),
      static_cast<unsigned long long>(stats.rejected),
      static_cast<unsigned long long>(stats.abandoned), open_at_end);

  EXPECT_EQ(stats.accepted, static_cast<uint64_t>(kWaves));
  EXPECT_EQ(stats.dropped + stats.timed_out,
            static_cast<uint64_t>(kFloodSockets));
  EXPECT_GT(stats.dropped, 0u);    // more than 64 were pending at once
  EXPECT_GT(stats.timed_out, 0u);  // the last ones waited out the timeout
  EXPECT_EQ(stats.rejected, 0u);
  EXPECT_EQ(stats.abandoned, 0u);
  EXPECT_EQ(open_at_end, 0);
  for (int n : open_at_connect) {
    EXPECT_GE(n, kFloodSockets / kWaves / 2) << "the flood was not pending";
  }

  // The real connections work: one message from each client arrives.
  ASSERT_EQ(accepted.size(), clients.size());
  for (size_t i = 0; i < clients.size(); ++i) {
    const uint8_t tag = static_cast<uint8_t>(i);
    ASSERT_TRUE(
        clients[i]->Send({reinterpret_cast<const std::byte*>(&tag), 1}).ok());
  }
  std::set<int> tags;
  for (auto& connection : accepted) {
    std::byte byte{};
    absl::StatusOr<size_t> n =
        connection->Receive({&byte, 1}, DeadlineIn(seconds(10)));
    ASSERT_TRUE(n.ok()) << n.status();
    tags.insert(static_cast<int>(byte));
  }
  EXPECT_EQ(tags.size(), clients.size());
}

// A flood that does not stop while real peers connect: another thread opens
// sockets as fast as it can (about 20 000 a second on loopback). With the
// listener's first rule (drop the oldest pending handshake, whatever its
// state) a real peer was evicted when 64 flood sockets arrived between its
// TCP connect and its HELLO, or between the server's ACCEPT and the client's
// READY; in two runs on a 2-core VM 10 and 9 of 20 Connect()s failed, and 2
// of the 11 that returned OK had no server side. Now a newcomer displaces
// only a peer that has sent nothing and has nothing waiting, never a
// handshake in progress, and Connect() sends HELLO right after the TCP
// connect: every real peer must get through, with a server side.
TEST_F(HalfOpenFloodTest, RealPeersSurviveASustainedFlood) {
  rlimit files = {};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &files), 0);
  files.rlim_cur = files.rlim_max;
  setrlimit(RLIMIT_NOFILE, &files);
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &files), 0);
  constexpr size_t kFloodOpen = 2000;  // the flooder's sockets open at once
  if (files.rlim_cur < 2 * kFloodOpen + 200) {
    GTEST_SKIP() << "RLIMIT_NOFILE " << files.rlim_cur << " is too low";
  }
  ConnectionOptions server_options;
  server_options.handshake_timeout = kServerHandshakeTimeout;
  absl::StatusOr<std::unique_ptr<Listener>> listener =
      Listener::Create(server_context(), "127.0.0.1:0", server_options);
  ASSERT_TRUE(listener.ok()) << listener.status();
  const std::string address = (*listener)->address();
  std::vector<std::unique_ptr<Connection>> clients;
  std::vector<std::unique_ptr<Connection>> accepted;
  ServerLoop server(**listener, accepted);

  std::atomic<bool> stop{false};
  std::atomic<int> opened{0};
  std::thread flooder([&] {
    std::deque<int> fds;
    while (!stop.load()) {
      int fd = OpenFloodSocket(address);
      if (fd < 0) continue;
      fds.push_back(fd);
      ++opened;
      if (fds.size() > kFloodOpen) {
        close(fds.front());
        fds.pop_front();
      }
    }
    for (int fd : fds) close(fd);
  });
  // Each real peer comes after another 1000 flood sockets (at most 5 s), so
  // the flood is at full rate before the first and throughout.
  auto flood_on = [&](int more) {
    const int target = opened.load() + more;
    const Deadline give_up = DeadlineIn(seconds(5));
    while (opened.load() < target && Clock::now() < give_up) {
      std::this_thread::yield();
    }
  };
  int refused = 0;
  for (int i = 0; i < 20; ++i) {
    flood_on(1000);
    const Clock::time_point start = Clock::now();
    absl::StatusOr<std::unique_ptr<Connection>> client =
        Connect(client_context(), address);
    std::printf(
        "real Connect() %d: %.1f ms, %s\n", i,
        std::chrono::duration<double, std::milli>(Clock::now() - start).count(),
        client.ok() ? "OK" : client.status().ToString().c_str());
    if (client.ok()) {
      clients.push_back(*std::move(client));
    } else {
      ++refused;
    }
  }
  stop = true;
  flooder.join();
  int dead = 0;
  for (auto& client : clients) {
    if (!client->Check(DeadlineIn(seconds(5))).ok()) ++dead;
  }
  server.Stop();
  const ListenerStats stats = (*listener)->stats();
  std::printf(
      "sustained flood: %d sockets; real Connect()s: %zu OK (%d of them with "
      "no server side), %d failed; listener: accepted %llu, dropped %llu, "
      "timed_out %llu, abandoned %llu\n",
      opened.load(), clients.size(), dead, refused,
      static_cast<unsigned long long>(stats.accepted),
      static_cast<unsigned long long>(stats.dropped),
      static_cast<unsigned long long>(stats.timed_out),
      static_cast<unsigned long long>(stats.abandoned));
  EXPECT_GT(stats.dropped, 0u);
  EXPECT_GE(opened.load(), 20000) << "the flood did not reach its rate";
  EXPECT_EQ(refused, 0);
  EXPECT_EQ(dead, 0);
}

// --- A flood of HELLOs that never send READY ---------------------------------

// Connects a non-blocking socket to `address` from `source` ("127.0.0.2"),
// or from the kernel's choice when `source` is empty.
int OpenFloodSocketFrom(const std::string& address, const std::string& source) {
  if (source.empty()) return OpenFloodSocket(address);
  const size_t colon = address.rfind(':');
  sockaddr_in peer = {};
  peer.sin_family = AF_INET;
  peer.sin_port = htons(static_cast<uint16_t>(
      std::strtoul(address.substr(colon + 1).c_str(), nullptr, 10)));
  inet_pton(AF_INET, address.substr(0, colon).c_str(), &peer.sin_addr);
  sockaddr_in local = {};
  local.sin_family = AF_INET;
  inet_pton(AF_INET, source.c_str(), &local.sin_addr);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof(local)) != 0 ||
      (connect(fd, reinterpret_cast<sockaddr*>(&peer), sizeof(peer)) != 0 &&
       errno != EINPROGRESS)) {
    close(fd);
    return -1;
  }
  return fd;
}

struct NeverReadyFlood {
  std::string source;  // empty: 127.0.0.1, the real clients' own address
  int total = 0;       // HELLOs in all; 0: until the clients are done
};

// Issue 13's scenario on the wall clock with real sockets: a flooder thread
// opens connections to the listener and sends each a well-formed HELLO with
// the server's token (the worst case: a peer that passes every check) and
// never READY, while 20 real clients connect one after another. Every real
// client must connect; what the flood cost the server is counted. How long
// each real Connect() took (first attempt to connected, retries included)
// is printed, not asserted (these machines are shared; docs/resources.md
// has the figures).
class NeverReadyFloodTest : public TwoDevices {
 protected:
  void Run(const char* label, const NeverReadyFlood& flood) {
    rlimit files = {};
    ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &files), 0);
    files.rlim_cur = files.rlim_max;
    setrlimit(RLIMIT_NOFILE, &files);
    ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &files), 0);
    constexpr size_t kFloodOpen = 1500;
    if (files.rlim_cur < 2 * kFloodOpen + 200) {
      GTEST_SKIP() << "RLIMIT_NOFILE " << files.rlim_cur << " is too low";
    }
    ConnectionOptions options;
    options.token = "secret";
    absl::StatusOr<std::unique_ptr<Listener>> listener =
        Listener::Create(server_context(), "127.0.0.1:0", options);
    ASSERT_TRUE(listener.ok()) << listener.status();
    const std::string address = (*listener)->address();
    const std::vector<uint8_t> hello = *EncodeHandshake(SampleHello("secret"));
    const int64_t registered_before = verbs_.registered[kServer].load();
    const int64_t held_before = held_bytes[kServer].load();

    std::vector<std::unique_ptr<Connection>> accepted;
    std::atomic<bool> serving{true};
    std::mutex accepted_mu;
    std::thread server([&] {
      current_tag = kServer;
      while (serving.load()) {
        absl::StatusOr<std::unique_ptr<Connection>> connection =
            (*listener)->Accept(DeadlineIn(milliseconds(50)));
        if (connection.ok()) {
          std::lock_guard<std::mutex> lock(accepted_mu);
          accepted.push_back(*std::move(connection));
        }
      }
      current_tag = kOther;
    });

    std::atomic<bool> stop{false};
    std::atomic<int> sent{0};
    std::thread flooder([&] {
      std::deque<int> fds;
      while (!stop.load() && (flood.total == 0 || sent.load() < flood.total)) {
        int fd = OpenFloodSocketFrom(address, flood.source);
        if (fd < 0) continue;
        if (!WaitConnected({fd}, DeadlineIn(seconds(1))) ||
            send(fd, hello.data(), hello.size(), MSG_NOSIGNAL) !=
                static_cast<ssize_t>(hello.size())) {
          close(fd);
          continue;
        }
        fds.push_back(fd);
        ++sent;
        if (fds.size() > kFloodOpen) {
          close(fds.front());
          fds.pop_front();
        }
      }
      while (!stop.load()) std::this_thread::sleep_for(milliseconds(1));
      for (int fd : fds) close(fd);
    });
    // The first real client once the flood is under way.
    const Deadline give_up = DeadlineIn(seconds(5));
    while (sent.load() < 100 && Clock::now() < give_up) {
      std::this_thread::yield();
    }
    std::vector<std::unique_ptr<Connection>> clients;
    std::vector<double> took_ms;
    int failed = 0;
    for (int i = 0; i < 20; ++i) {
      const Clock::time_point start = Clock::now();
      absl::StatusOr<std::unique_ptr<Connection>> client =
          Connect(client_context(), address, options);
      const double ms =
          std::chrono::duration<double, std::milli>(Clock::now() - start)
              .count();
      if (client.ok()) {
        clients.push_back(*std::move(client));
        took_ms.push_back(ms);
      } else {
        ++failed;
        std::printf("[%s] real Connect() %d failed after %.1f ms: %s\n", label,
                    i, ms, client.status().ToString().c_str());
      }
    }
    const int sent_meanwhile = sent.load();
    stop = true;
    flooder.join();
    const Deadline all_in = DeadlineIn(seconds(10));
    while (Clock::now() < all_in) {
      std::lock_guard<std::mutex> lock(accepted_mu);
      if (accepted.size() >= clients.size()) break;
    }
    serving = false;
    server.join();
    const ListenerStats stats = (*listener)->stats();
    const int64_t registered =
        verbs_.registered[kServer].load() - registered_before;
    // The flood's share of the server's heap: the accepted connections gone,
    // the listener still holding the last of the flood.
    current_tag = kServer;
    accepted.clear();
    current_tag = kOther;
    const int64_t flood_heap = held_bytes[kServer].load() - held_before;
    const int64_t shell_bound =
        BookkeepingBytes(options) + kNameBound + kSimQpCqBound;
    std::sort(took_ms.begin(), took_ms.end());
    const double median = took_ms.empty() ? 0 : took_ms[took_ms.size() / 2];
    const double slowest = took_ms.empty() ? 0 : took_ms.back();
    const int within_100ms = static_cast<int>(std::count_if(
        took_ms.begin(), took_ms.end(), [](double ms) { return ms <= 100; }));
    std::printf(
        "[%s] %d HELLOs with the token from %s, %d of them while 20 real "
        "clients connected: %zu connected (%d within 100 ms of the first "
        "attempt; median %.2f ms, slowest %.2f ms), %d failed; listener: "
        "accepted %llu, dropped %llu, timed_out %llu, abandoned %llu, pooled "
        "QPs created %llu; server registered %lld B (%llu connections x %lld "
        "B); the flood's heap on the server %lld B (bound: 64 shells x %lld B "
        "= %lld B)\n",
        label, sent.load(),
        flood.source.empty() ? "127.0.0.1" : flood.source.c_str(),
        sent_meanwhile, clients.size(), within_100ms, median, slowest, failed,
        static_cast<unsigned long long>(stats.accepted),
        static_cast<unsigned long long>(stats.dropped),
        static_cast<unsigned long long>(stats.timed_out),
        static_cast<unsigned long long>(stats.abandoned),
        static_cast<unsigned long long>(stats.shells_created),
        static_cast<long long>(registered),
        static_cast<unsigned long long>(stats.accepted),
        static_cast<long long>(RingBytes(options)),
        static_cast<long long>(flood_heap), static_cast<long long>(shell_bound),
        static_cast<long long>(64 * shell_bound));
    if (flood.total > 0) {
      EXPECT_EQ(sent.load(), flood.total) << label;
    }
    EXPECT_GE(clients.size(), 19u) << label;
    EXPECT_EQ(stats.accepted, clients.size()) << label;
    // Registered memory only for the peers that sent READY.
    EXPECT_EQ(registered,
              static_cast<int64_t>(stats.accepted) * RingBytes(options))
        << label;
    EXPECT_LE(stats.shells_created, 64u + stats.accepted) << label;
    EXPECT_LE(flood_heap, 64 * shell_bound) << label;
    clients.clear();
    listener->reset();
  }
};

// The issue's figure: 1000 HELLOs from the clients' own address.
TEST_F(NeverReadyFloodTest, AThousandHellosFromTheClientsOwnAddress) {
  Run("1000 from 127.0.0.1", {"", 1000});
}

// A flooding host apart from the clients, flooding for as long as they
// connect: the per-source limit keeps its handshakes from displacing theirs.
TEST_F(NeverReadyFloodTest, ASustainedFloodFromAnotherAddress) {
  Run("sustained from 127.0.0.2", {"127.0.0.2", 0});
}

// The worst case: a sustained flood from the clients' own address, which
// no per-source limit can tell apart from them.
TEST_F(NeverReadyFloodTest, ASustainedFloodFromTheClientsOwnAddress) {
  Run("sustained from 127.0.0.1", {"", 0});
}

}  // namespace
}  // namespace rdma_transport
