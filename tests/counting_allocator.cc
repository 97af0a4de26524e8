// File: tests/counting_allocator.cc
//
// The replaced global operator new/delete of counting_allocator.h. Each
// block carries a header just before the pointer handed out: its size, the
// tag it is charged to, and how far into the malloc'd block it starts (a
// multiple of the alignment asked for), so that delete can count it off the
// right tag and free the block.

#include "tests/counting_allocator.h"

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <new>

namespace {

using rdma_transport::kHeapTags;

std::atomic<uint64_t> g_allocations{0};
std::atomic<int64_t> g_live_bytes[kHeapTags];
std::atomic<int64_t> g_overhead_bytes{0};

// The calling thread's tag. Constant-initialised and in the static TLS
// block: reading it neither allocates nor takes a lock.
constinit thread_local int t_tag __attribute__((tls_model("initial-exec"))) = 0;

struct Header {
  uint64_t size;    // as asked for
  uint32_t tag;     // charged to
  uint32_t offset;  // from the malloc'd block to the user block
};
static_assert(sizeof(Header) == 16);

// The bytes asked of malloc for a user block of `size` bytes `offset` into
// the malloc'd one. malloc aligns to max_align_t only: an over-aligned block
// (and so the user block `offset` into it) comes from aligned_alloc, whose
// size is a multiple of the alignment, which is then `offset` (the header
// is smaller than max_align_t).
std::size_t BlockBytes(std::size_t size, std::size_t offset) {
  const std::size_t bytes = offset + (size == 0 ? 1 : size);
  if (offset <= alignof(std::max_align_t)) return bytes;
  return (bytes + offset - 1) / offset * offset;
}

void* Allocate(std::size_t size, std::size_t alignment) {
  alignment = alignment < alignof(std::max_align_t) ? alignof(std::max_align_t)
                                                    : alignment;
  const std::size_t offset =
      (sizeof(Header) + alignment - 1) / alignment * alignment;
  const std::size_t bytes = BlockBytes(size, offset);
  void* block = alignment <= alignof(std::max_align_t)
                    ? std::malloc(bytes)
                    : std::aligned_alloc(alignment, bytes);
  if (block == nullptr) return nullptr;
  void* user = static_cast<std::byte*>(block) + offset;
  const int tag = t_tag;
  static_cast<Header*>(user)[-1] = {size, static_cast<uint32_t>(tag),
                                    static_cast<uint32_t>(offset)};
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  g_live_bytes[tag].fetch_add(static_cast<int64_t>(size),
                              std::memory_order_relaxed);
  g_overhead_bytes.fetch_add(static_cast<int64_t>(bytes - size),
                             std::memory_order_relaxed);
  return user;
}

void* AllocateOrThrow(std::size_t size, std::size_t alignment) {
  if (void* p = Allocate(size, alignment)) return p;
  throw std::bad_alloc();
}

void Free(void* user) noexcept {
  if (user == nullptr) return;
  const Header header = static_cast<Header*>(user)[-1];
  g_live_bytes[header.tag].fetch_sub(static_cast<int64_t>(header.size),
                                     std::memory_order_relaxed);
  g_overhead_bytes.fetch_sub(
      static_cast<int64_t>(BlockBytes(header.size, header.offset) -
                           header.size),
      std::memory_order_relaxed);
  std::free(static_cast<std::byte*>(user) - header.offset);
}

}  // namespace

namespace rdma_transport {

HeapCounts CountHeap() {
  int64_t live = 0;
  for (const std::atomic<int64_t>& bytes : g_live_bytes) {
    live += bytes.load(std::memory_order_relaxed);
  }
  return {g_allocations.load(std::memory_order_relaxed), live};
}

bool HeapCountingActive() {
  const uint64_t before = CountHeap().allocations;
  // A call of the function itself, which (unlike a new-expression) the
  // compiler may not elide.
  void* probe = ::operator new(16);
  const bool counted = CountHeap().allocations != before;
  ::operator delete(probe);
  return counted;
}

void SetHeapTag(int tag) {
  if (tag < 0 || tag >= kHeapTags) std::abort();
  t_tag = tag;
}

int HeapTag() { return t_tag; }

int64_t LiveBytes(int tag) {
  if (tag < 0 || tag >= kHeapTags) std::abort();
  return g_live_bytes[tag].load(std::memory_order_relaxed);
}

int64_t HeapOverheadBytes() {
  return g_overhead_bytes.load(std::memory_order_relaxed);
}

}  // namespace rdma_transport

void* operator new(std::size_t size) { return AllocateOrThrow(size, 0); }
void* operator new[](std::size_t size) { return AllocateOrThrow(size, 0); }
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  return Allocate(size, 0);
}
void* operator new[](std::size_t size, const std::nothrow_t&) noexcept {
  return Allocate(size, 0);
}
void* operator new(std::size_t size, std::align_val_t alignment) {
  return AllocateOrThrow(size, static_cast<std::size_t>(alignment));
}
void* operator new[](std::size_t size, std::align_val_t alignment) {
  return AllocateOrThrow(size, static_cast<std::size_t>(alignment));
}
void* operator new(std::size_t size, std::align_val_t alignment,
                   const std::nothrow_t&) noexcept {
  return Allocate(size, static_cast<std::size_t>(alignment));
}
void* operator new[](std::size_t size, std::align_val_t alignment,
                     const std::nothrow_t&) noexcept {
  return Allocate(size, static_cast<std::size_t>(alignment));
}
void operator delete(void* p) noexcept { Free(p); }
void operator delete[](void* p) noexcept { Free(p); }
void operator delete(void* p, std::size_t) noexcept { Free(p); }
void operator delete[](void* p, std::size_t) noexcept { Free(p); }
void operator delete(void* p, std::align_val_t) noexcept { Free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { Free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept {
  Free(p);
}
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept {
  Free(p);
}
void operator delete(void* p, const std::nothrow_t&) noexcept { Free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { Free(p); }
void operator delete(void* p, std::align_val_t,
                     const std::nothrow_t&) noexcept {
  Free(p);
}
void operator delete[](void* p, std::align_val_t,
                       const std::nothrow_t&) noexcept {
  Free(p);
}
