// Memory per connection, measured on the simulator (docs/resources.md).
//
// The formula from ConnectionOptions (tests/connection_bounds.h): a send
// ring and a receive ring, each `slots x slot` rounded up to 4 KiB pages
// with slot = max(max_message_size, 64), plus the Connection object, its
// bookkeeping vectors and the QP and CQ. The counting operator new
// (tests/counting_allocator.h) counts the heap bytes each side holds, tagged
// by the thread that allocated them; MeasuringVerbs (tests/measuring_verbs.h)
// records the bytes each side registers (the rings, which come from
// aligned_alloc, not operator new); and the allocator's own statistics give
// the process-wide total. Each side holds exactly its rings registered, its
// bookkeeping formula plus under 1 KiB, and under 96 KiB of simulated QP and
// CQ (defaults: rings + 79 KiB).
//
// The figures are printed for docs/resources.md:
//   bazel test //transport:connection_memory_test --test_output=all

#include <malloc.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <span>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "tests/connection_bounds.h"
#include "tests/counting_allocator.h"
#include "tests/measuring_verbs.h"
#include "transport/connection.h"
#include "transport/listener.h"

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

namespace rdma_transport {
namespace {

using std::chrono::seconds;

// Every byte the allocator hands out, process-wide, minus the counting
// allocator's headers: glibc's in-use bytes (arenas and mmapped blocks:
// rings of 128 KiB and more are mmapped), or the sanitizer allocator's.
int64_t HeapInUse() {
#ifdef RESOURCE_BOUNDS_SANITIZER
  const int64_t total =
      static_cast<int64_t>(__sanitizer_get_current_allocated_bytes());
#else
  const struct mallinfo2 info = mallinfo2();
  const int64_t total = static_cast<int64_t>(info.uordblks + info.hblkhd);
#endif
  return total - HeapOverheadBytes();
}

struct Snapshot {
  int64_t held[kHeapTags];
  int64_t registered[kHeapTags];
  int64_t qp[kHeapTags];
  int64_t cq[kHeapTags];
  int64_t heap;
};

class MemoryPerConnectionTest : public TwoDevices {
 protected:
  Snapshot Take() {
    Snapshot s;
    for (int t = 0; t < kHeapTags; ++t) {
      s.held[t] = LiveBytes(t);
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
      SetHeapTag(kClient);
      dialed = Connect(client_context(), listener.address(), options);
      SetHeapTag(kOther);
    });
    SetHeapTag(kServer);
    absl::StatusOr<std::unique_ptr<Connection>> accepted =
        listener.Accept(DeadlineIn(seconds(30)));
    SetHeapTag(kOther);
    dialer.join();
    ASSERT_TRUE(dialed.ok()) << dialed.status();
    ASSERT_TRUE(accepted.ok()) << accepted.status();
    client = *std::move(dialed);
    server = *std::move(accepted);
  }

  // A full-size message each way, each side's calls charged to it.
  void Exchange(Connection& client, Connection& server,
                std::span<const std::byte> message,
                std::span<std::byte> received) {
    for (auto [from, to] :
         {std::pair(&client, &server), std::pair(&server, &client)}) {
      SetHeapTag(from == &client ? kClient : kServer);
      ASSERT_TRUE(from->Send(message).ok());
      SetHeapTag(to == &client ? kClient : kServer);
      ASSERT_TRUE(to->Receive(received, DeadlineIn(seconds(10))).ok());
      SetHeapTag(kOther);
    }
  }

  void Measure(const char* label, const ConnectionOptions& options) {
    absl::StatusOr<std::unique_ptr<Listener>> listener =
        Listener::Create(server_context(), "127.0.0.1:0", options);
    ASSERT_TRUE(listener.ok()) << listener.status();

    // A first pair warms up what every later connection shares (the
    // device's inline-size cache, the listener's queue, the fabric's tables
    // and its pool of packet payload buffers, sim/internal/payload_pool.h).
    std::vector<std::byte> message(options.max_message_size);
    std::vector<std::byte> received(options.max_message_size);
    {
      std::unique_ptr<Connection> client, server;
      ASSERT_NO_FATAL_FAILURE(Establish(**listener, options, client, server));
      ASSERT_NO_FATAL_FAILURE(Exchange(*client, *server, message, received));
    }

    const Snapshot before = Take();
    std::unique_ptr<Connection> client, server;
    ASSERT_NO_FATAL_FAILURE(Establish(**listener, options, client, server));
    const Snapshot established = Take();
    // A full-size message each way, each side's calls charged to it: what
    // first use adds (nothing the fabric's payload pool already has: the
    // first pair's messages grew it).
    ASSERT_NO_FATAL_FAILURE(Exchange(*client, *server, message, received));
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
    int64_t side_total[kHeapTags] = {};
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

}  // namespace
}  // namespace rdma_transport
