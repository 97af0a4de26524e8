// File: tests/counting_allocator.h
//
// Counts the process's heap: a binary linking //tests:counting_allocator has
// its global operator new/delete replaced by ones that count every
// allocation and the bytes live (allocated and not yet freed). For
// benchmarks (allocations per message) and memory tests (bytes a connection
// keeps).
//
//   const HeapCounts before = CountHeap();
//   ... make a connection ...
//   const uint64_t kept = CountHeap().live_bytes - before.live_bytes;
//
// Thread-safe (relaxed atomics). malloc/aligned_alloc called directly are
// not seen: count those with what they are for (registered memory is counted
// by the simulator's bytes_registered).

#ifndef RDMA_TRANSPORT_TESTS_COUNTING_ALLOCATOR_H_
#define RDMA_TRANSPORT_TESTS_COUNTING_ALLOCATOR_H_

#include <cstdint>

namespace rdma_transport {

struct HeapCounts {
  uint64_t allocations = 0;  // operator new calls since the process started
  int64_t live_bytes = 0;    // bytes allocated by operator new, not freed
};

HeapCounts CountHeap();
// Whether this binary's operator new is the counting one: false when a
// sanitizer runtime's took precedence (link the test statically:
// linkstatic = True, so the executable's definition wins).
bool HeapCountingActive();

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TESTS_COUNTING_ALLOCATOR_H_
