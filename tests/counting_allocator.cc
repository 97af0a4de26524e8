// File: tests/counting_allocator.cc
//
// The replaced global operator new/delete of counting_allocator.h. Each
// block carries its size in a header of kHeader bytes (keeping the
// alignment asked for) so that delete can count it off.

#include "tests/counting_allocator.h"

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <new>

namespace {

std::atomic<uint64_t> g_allocations{0};
std::atomic<int64_t> g_live_bytes{0};

// Header: the block's start (for free) and its size, just before the
// pointer handed out.
struct Header {
  void* block;
  std::size_t size;
};

void* Allocate(std::size_t size, std::size_t alignment) {
  alignment = alignment < alignof(std::max_align_t) ? alignof(std::max_align_t)
                                                    : alignment;
  const std::size_t offset =
      (sizeof(Header) + alignment - 1) / alignment * alignment;
  const std::size_t bytes = offset + (size == 0 ? 1 : size);
  // malloc aligns to max_align_t only: an over-aligned block (and so the
  // user block `offset` into it) needs aligned_alloc.
  void* block = alignment <= alignof(std::max_align_t)
                    ? std::malloc(bytes)
                    : std::aligned_alloc(alignment, (bytes + alignment - 1) /
                                                        alignment * alignment);
  if (block == nullptr) return nullptr;
  void* user = static_cast<std::byte*>(block) + offset;
  static_cast<Header*>(user)[-1] = {block, size};
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  g_live_bytes.fetch_add(static_cast<int64_t>(size), std::memory_order_relaxed);
  return user;
}

void* AllocateOrThrow(std::size_t size, std::size_t alignment) {
  if (void* p = Allocate(size, alignment)) return p;
  throw std::bad_alloc();
}

void Free(void* user) noexcept {
  if (user == nullptr) return;
  const Header header = static_cast<Header*>(user)[-1];
  g_live_bytes.fetch_sub(static_cast<int64_t>(header.size),
                         std::memory_order_relaxed);
  std::free(header.block);
}

}  // namespace

namespace rdma_transport {

HeapCounts CountHeap() {
  return {g_allocations.load(std::memory_order_relaxed),
          g_live_bytes.load(std::memory_order_relaxed)};
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
