// File: transport/memory_region.h
//
// Registered memory: what a peer may read or write with one-sided RDMA, and
// what local work requests gather from and scatter to.
//
//   std::vector<std::byte> buffer(1 << 20);
//   absl::StatusOr<MemoryRegion> region =
//       context.RegisterMemory(buffer, MemoryAccess::kRemoteWrite);
//   RemoteRegion descriptor = region->remote();  // send it to the peer
//
// Access is least privilege: a region can be written by the NIC on this host
// (receives, RDMA READ results) only with kLocalWrite, read by a peer only
// with kRemoteRead, written by a peer only with kRemoteWrite (which implies
// kLocalWrite, as verbs requires). Without a remote flag the region's rkey
// grants nothing, and remote() says so (its `rkey` is 0 and `length` 0).
//
// Ownership: a MemoryRegion owns the registration (not the memory) and
// deregisters when destroyed; it must be destroyed before the Context that
// made it, and the memory must outlive it. Move-only. Thread-safe to read
// from any thread.

#ifndef RDMA_TRANSPORT_TRANSPORT_MEMORY_REGION_H_
#define RDMA_TRANSPORT_TRANSPORT_MEMORY_REGION_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "absl/status/statusor.h"
#include "verbs_shim/verbs.h"

namespace rdma_transport {

// Bit flags; combine with |.
enum MemoryAccess : int {
  kLocalOnly = 0,         // gathered from by local sends/writes only
  kLocalWrite = 1 << 0,   // receive buffers, RDMA READ destinations
  kRemoteRead = 1 << 1,   // a peer may RDMA READ it
  kRemoteWrite = 1 << 2,  // a peer may RDMA WRITE it (implies kLocalWrite)
  // Ranges may be opened to one connection's peer (Connection::BindRegion,
  // peer_region.h): IBV_ACCESS_MW_BIND. Needs kLocalWrite for writable
  // bindings.
  kBindable = 1 << 3,
};

// What a peer needs to address a region: send it over a connection.
struct RemoteRegion {
  uint64_t address = 0;
  uint64_t length = 0;
  uint32_t rkey = 0;

  static constexpr size_t kEncodedSize = 20;
  // 20 bytes, big-endian: address, length, rkey.
  void Encode(std::span<std::byte, kEncodedSize> out) const;
  static RemoteRegion Decode(std::span<const std::byte, kEncodedSize> in);
};

// The ibv_access_flags for a MemoryAccess mask.
int ToIbvAccessFlags(int access);

class MemoryRegion {
 public:
  MemoryRegion() = default;
  MemoryRegion(Verbs* verbs, ibv_mr* mr, int access)
      : verbs_(verbs), mr_(mr), access_(access) {}
  MemoryRegion(MemoryRegion&& other) noexcept { *this = std::move(other); }
  MemoryRegion& operator=(MemoryRegion&& other) noexcept;
  ~MemoryRegion();

  bool valid() const { return mr_ != nullptr; }
  std::byte* data() const { return static_cast<std::byte*>(mr_->addr); }
  size_t size() const { return mr_->length; }
  uint32_t lkey() const { return mr_->lkey; }
  // The registration, for binding windows to it.
  ibv_mr* mr() const { return mr_; }
  int access() const { return access_; }
  bool allows(int access) const { return (access_ & access) == access; }
  // The descriptor a peer uses; empty without remote access.
  RemoteRegion remote() const;

  // Checks that [offset, offset + length) lies inside the region.
  absl::Status CheckRange(size_t offset, size_t length) const;
  // CheckRange(offset, length).ok(), without making a Status.
  bool Holds(size_t offset, size_t length) const {
    return mr_ != nullptr && offset <= mr_->length &&
           length <= mr_->length - offset;
  }

  // Deregisters now; the status is the verbs call's.
  absl::Status Release();

 private:
  Verbs* verbs_ = nullptr;
  ibv_mr* mr_ = nullptr;
  int access_ = 0;
};

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TRANSPORT_MEMORY_REGION_H_
