// File: sim/internal/payload_pool.h
//
// `PayloadPool` holds the payload buffers of the packets a fabric has in
// flight (requests and READ responses): one pool for the whole fabric, in
// power-of-two size classes from 64 B, each class a last-in-first-out free
// list. A packet takes a buffer when its payload is read from host memory
// and gives it back when the packet has arrived (or is lost); the next
// packet of about that size, on any connection, reuses it while it is still
// in the cache. With a thousand connections a pool per QP kept a thousand
// sets of buffers, and each packet missed the cache on its own QP's.
//
// Ownership: the pool owns every buffer it ever made and frees them only
// when it goes; it holds at most, per size class, the most packets of that
// class the fabric had in flight at once. Handles are 32-bit (size class in
// the top 5 bits, index below), never kNoPayload.
//
// Thread-safety: none; FabricCore calls it under its lock.
//
//   PayloadPool pool;
//   const uint32_t buffer = pool.Acquire(1024);   // at least 1,024 bytes
//   std::memcpy(pool.Data(buffer), source, 1024);
//   ...
//   pool.Release(buffer);                          // the next Acquire reuses it

#ifndef RDMA_TRANSPORT_SIM_INTERNAL_PAYLOAD_POOL_H_
#define RDMA_TRANSPORT_SIM_INTERNAL_PAYLOAD_POOL_H_

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace rdma_transport::sim::internal {

class PayloadPool {
 public:
  // The smallest buffer: 64 bytes (2^6).
  static constexpr uint32_t kSmallestClassBits = 6;

  // The bytes of the buffers of the class that `bytes` falls in.
  static constexpr uint64_t ClassBytes(uint32_t bytes) {
    return uint64_t{1} << (ClassOf(bytes) + kSmallestClassBits);
  }

  // A buffer of at least `bytes`: the class's most recently released one,
  // or a new one.
  uint32_t Acquire(uint32_t bytes) {
    const uint32_t size_class = ClassOf(bytes);
    SizeClass& buffers = classes_[size_class];
    uint32_t index;
    if (buffers.free.empty()) {
      index = static_cast<uint32_t>(buffers.buffers.size());
      buffers.buffers.push_back(std::make_unique_for_overwrite<uint8_t[]>(
          uint64_t{1} << (size_class + kSmallestClassBits)));
    } else {
      index = buffers.free.back();
      buffers.free.pop_back();
    }
    return (size_class << kIndexBits) | index;
  }

  uint8_t* Data(uint32_t handle) const {
    return classes_[handle >> kIndexBits].buffers[handle & kIndexMask].get();
  }

  void Release(uint32_t handle) {
    classes_[handle >> kIndexBits].free.push_back(handle & kIndexMask);
  }

  // Buffers made and the bytes they hold, in use or free.
  size_t buffers() const {
    size_t count = 0;
    for (const SizeClass& size_class : classes_) {
      count += size_class.buffers.size();
    }
    return count;
  }
  uint64_t bytes() const {
    uint64_t total = 0;
    for (size_t c = 0; c < classes_.size(); ++c) {
      total += classes_[c].buffers.size() *
               (uint64_t{1} << (c + kSmallestClassBits));
    }
    return total;
  }
  // Buffers handed out and not yet released.
  size_t in_use() const {
    size_t count = 0;
    for (const SizeClass& size_class : classes_) {
      count += size_class.buffers.size() - size_class.free.size();
    }
    return count;
  }

 private:
  static constexpr uint32_t kIndexBits = 27;
  static constexpr uint32_t kIndexMask = (uint32_t{1} << kIndexBits) - 1;
  // Classes 2^6 .. 2^32 bytes: any uint32_t length fits one.
  static constexpr size_t kClasses = 32 - kSmallestClassBits + 1;

  static constexpr uint32_t ClassOf(uint32_t bytes) {
    if (bytes <= (uint32_t{1} << kSmallestClassBits)) return 0;
    return static_cast<uint32_t>(std::bit_width(bytes - 1)) -
           kSmallestClassBits;
  }

  struct SizeClass {
    std::vector<std::unique_ptr<uint8_t[]>> buffers;
    std::vector<uint32_t> free;  // Indices into `buffers`, most recent last.
  };
  std::array<SizeClass, kClasses> classes_;
};

}  // namespace rdma_transport::sim::internal

#endif  // RDMA_TRANSPORT_SIM_INTERNAL_PAYLOAD_POOL_H_
