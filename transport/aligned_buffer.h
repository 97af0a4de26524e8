// File: transport/aligned_buffer.h
//
// `AlignedBuffer`: an owned block of memory at an alignment, for what the
// transport registers with the NIC (message rings, the engine's shared
// receive pool, probe slots). AllocateAligned() rounds the size up to a
// multiple of the alignment, as aligned_alloc requires, and returns an
// empty buffer when memory is short (the caller says what it was for).
// A plain owner: movable, not copyable, no locking.
//
//   AlignedBuffer ring = AllocateAligned(4096, RoundUp(slots * slot, 4096));
//   if (!ring) return absl::ResourceExhaustedError("allocating the ring");

#ifndef RDMA_TRANSPORT_TRANSPORT_ALIGNED_BUFFER_H_
#define RDMA_TRANSPORT_TRANSPORT_ALIGNED_BUFFER_H_

#include <cstddef>
#include <cstdlib>
#include <memory>

namespace rdma_transport {

// `value` rounded up to a multiple of `multiple` (> 0).
inline size_t RoundUp(size_t value, size_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

struct AlignedFree {
  void operator()(std::byte* p) const { std::free(p); }
};
using AlignedBuffer = std::unique_ptr<std::byte, AlignedFree>;

// At least `bytes` at `alignment` (a power of two); empty when out of memory.
inline AlignedBuffer AllocateAligned(size_t alignment, size_t bytes) {
  return AlignedBuffer(static_cast<std::byte*>(
      std::aligned_alloc(alignment, RoundUp(bytes, alignment))));
}

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TRANSPORT_ALIGNED_BUFFER_H_
