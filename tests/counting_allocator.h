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
// Heap tags tell apart who holds the bytes when several parties share the
// process (a connection's client side and its server side, each on its own
// thread). Each thread has a tag, 0 until it sets another; every block is
// charged to the tag of the thread that allocated it, and given back to that
// same tag when it is freed, on whatever thread.
//
//   std::thread server([&] {
//     SetHeapTag(2);                 // or: ScopedHeapTag tag(2);
//     accepted = listener.Accept(deadline);
//     SetHeapTag(0);
//   });
//   ...
//   const int64_t server_holds = LiveBytes(2) - server_before;
//
// HeapOverheadBytes() is what this allocator itself adds to the live blocks
// (a header in front of each, alignment padding): take it off the malloc
// implementation's own figures (mallinfo2(), a sanitizer's allocated bytes)
// to compare those with the bytes counted here.
//
// Thread-safe (relaxed atomics; the tag is thread-local): no lock, and no
// allocation of its own. malloc/aligned_alloc called directly are not seen:
// count those with what they are for (registered memory is counted by the
// simulator's bytes_registered).
//
// A binary that links this with a sanitizer must link it statically
// (linkstatic = True) so that the executable's operator new wins over the
// sanitizer runtime's; HeapCountingActive() tells.

#ifndef RDMA_TRANSPORT_TESTS_COUNTING_ALLOCATOR_H_
#define RDMA_TRANSPORT_TESTS_COUNTING_ALLOCATOR_H_

#include <cstdint>

namespace rdma_transport {

struct HeapCounts {
  uint64_t allocations = 0;  // operator new calls since the process started
  int64_t live_bytes = 0;    // bytes allocated by operator new, not freed
};

// Process-wide, whatever the tags.
HeapCounts CountHeap();
// Whether this binary's operator new is the counting one: false when a
// sanitizer runtime's took precedence (link the test statically:
// linkstatic = True, so the executable's definition wins).
bool HeapCountingActive();

// Tags are 0 to kHeapTags - 1; what each means is the test's choice.
inline constexpr int kHeapTags = 4;

// The calling thread's tag, which its allocations are charged to from now
// on. A tag out of range aborts.
void SetHeapTag(int tag);
int HeapTag();

// Bytes allocated under `tag` (on any thread) and not yet freed. The sum
// over the tags is CountHeap().live_bytes.
int64_t LiveBytes(int tag);

// Bytes of headers and alignment padding this allocator asks of malloc
// beyond the live blocks' own sizes.
int64_t HeapOverheadBytes();

// Sets the calling thread's tag for a scope, and puts the previous one back.
class ScopedHeapTag {
 public:
  explicit ScopedHeapTag(int tag) : previous_(HeapTag()) { SetHeapTag(tag); }
  ~ScopedHeapTag() { SetHeapTag(previous_); }
  ScopedHeapTag(const ScopedHeapTag&) = delete;
  ScopedHeapTag& operator=(const ScopedHeapTag&) = delete;

 private:
  int previous_;
};

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TESTS_COUNTING_ALLOCATOR_H_
