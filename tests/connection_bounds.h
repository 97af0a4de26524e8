// File: tests/connection_bounds.h
//
// The stated memory bounds of one side of a connection on the simulator, as
// docs/resources.md gives them: the registered rings and the Connection's
// bookkeeping by formula from its ConnectionOptions, and the bounds of what
// the formulas leave out (its name; the simulated NIC's QP, CQ and gather
// buffer). The memory test checks each side against them; the flood tests
// bound what a flood may cost the server with them.
//
//   ConnectionOptions options;
//   EXPECT_EQ(registered, RingBytes(options));
//   EXPECT_LT(side_total, SideBound(options));
//
// Deliberately written out here rather than taken from
// Connection::Footprint(): the tests check the transport against the
// documented formula. Pure functions.

#ifndef RDMA_TRANSPORT_TESTS_CONNECTION_BOUNDS_H_
#define RDMA_TRANSPORT_TESTS_CONNECTION_BOUNDS_H_

#include <infiniband/verbs.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "transport/aligned_buffer.h"
#include "transport/connection.h"

namespace rdma_transport {

inline constexpr int64_t kKiB = 1024;
// The stated bounds of one side of a connection, beyond the formulas below:
// the transport's own heap is its bookkeeping formula plus the connection's
// name (under 1 KiB); the simulated NIC's QP and CQ stay under 96 KiB (68 KiB
// at the defaults, most of it the 252 inline bytes of each of the send
// queue's 146 slots, as an mlx5 send queue holds them), plus a gather buffer
// as large as the largest message sent that was not inline.
inline constexpr int64_t kNameBound = 1 * kKiB;
inline constexpr int64_t kSimQpCqBound = 96 * kKiB;

// The registered memory of one connection, from its options: the two rings
// and the 64-byte slot the peer's keepalive probes write into.
inline int64_t RingBytes(const ConnectionOptions& options) {
  const size_t slot = std::max<uint32_t>(options.max_message_size, 64);
  return static_cast<int64_t>(RoundUp(slot * options.send_slots, 4096) +
                              RoundUp(slot * options.recv_slots, 4096) + 64);
}

// The Connection's own bookkeeping, from its options: the object, the
// arrival queue (8 B a receive slot), the send slots' sequence numbers (8 B
// each), the bytes posted per send queue entry (8 B each, for the watchdog)
// and one Write()/Read() batch of work requests and gather entries.
inline int64_t BookkeepingBytes(const ConnectionOptions& options) {
  const int64_t sq_depth = options.send_slots + options.max_rdma_batch + 4;
  return static_cast<int64_t>(sizeof(Connection) + 8 * options.recv_slots +
                              8 * options.send_slots + 8 * sq_depth +
                              options.max_rdma_batch *
                                  (sizeof(ibv_send_wr) + sizeof(ibv_sge)));
}

// Everything one side may hold: rings, the transport's bookkeeping and name,
// the simulated QP and CQ, the simulated NIC's gather buffer.
inline int64_t SideBound(const ConnectionOptions& options) {
  return RingBytes(options) + BookkeepingBytes(options) + kNameBound +
         kSimQpCqBound + options.max_message_size;
}

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TESTS_CONNECTION_BOUNDS_H_
