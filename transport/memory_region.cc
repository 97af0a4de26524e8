#include "transport/memory_region.h"

#include <cstdio>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace rdma_transport {
namespace {

void PutBigEndian(std::byte* out, uint64_t value, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) {
    out[i] = static_cast<std::byte>(value & 0xff);
    value >>= 8;
  }
}

uint64_t GetBigEndian(const std::byte* in, int bytes) {
  uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) {
    value = (value << 8) | static_cast<uint8_t>(in[i]);
  }
  return value;
}

}  // namespace

void RemoteRegion::Encode(std::span<std::byte, kEncodedSize> out) const {
  PutBigEndian(out.data(), address, 8);
  PutBigEndian(out.data() + 8, length, 8);
  PutBigEndian(out.data() + 16, rkey, 4);
}

RemoteRegion RemoteRegion::Decode(std::span<const std::byte, kEncodedSize> in) {
  RemoteRegion region;
  region.address = GetBigEndian(in.data(), 8);
  region.length = GetBigEndian(in.data() + 8, 8);
  region.rkey = static_cast<uint32_t>(GetBigEndian(in.data() + 16, 4));
  return region;
}

int ToIbvAccessFlags(int access) {
  int flags = 0;
  if (access & (kLocalWrite | kRemoteWrite)) flags |= IBV_ACCESS_LOCAL_WRITE;
  if (access & kRemoteRead) flags |= IBV_ACCESS_REMOTE_READ;
  if (access & kRemoteWrite) flags |= IBV_ACCESS_REMOTE_WRITE;
  if (access & kBindable) flags |= IBV_ACCESS_MW_BIND;
  return flags;
}

MemoryRegion& MemoryRegion::operator=(MemoryRegion&& other) noexcept {
  if (this != &other) {
    (void)Release();
    verbs_ = std::exchange(other.verbs_, nullptr);
    mr_ = std::exchange(other.mr_, nullptr);
    access_ = std::exchange(other.access_, 0);
  }
  return *this;
}

MemoryRegion::~MemoryRegion() {
  if (absl::Status status = Release(); !status.ok()) {
    std::fprintf(stderr, "rdma_transport: deregistering memory: %s\n",
                 status.ToString().c_str());
  }
}

RemoteRegion MemoryRegion::remote() const {
  if (mr_ == nullptr || !(access_ & (kRemoteRead | kRemoteWrite))) return {};
  return RemoteRegion{reinterpret_cast<uint64_t>(mr_->addr), mr_->length,
                      mr_->rkey};
}

absl::Status MemoryRegion::CheckRange(size_t offset, size_t length) const {
  if (mr_ == nullptr) {
    return absl::FailedPreconditionError("memory region is not registered");
  }
  if (offset > mr_->length || length > mr_->length - offset) {
    return absl::OutOfRangeError(
        absl::StrCat("range [", offset, ", ", offset + length,
                     ") is outside the ", mr_->length, "-byte memory region"));
  }
  return absl::OkStatus();
}

absl::Status MemoryRegion::Release() {
  if (mr_ == nullptr) return absl::OkStatus();
  ibv_mr* mr = std::exchange(mr_, nullptr);
  return verbs_->DeregMr(mr);
}

}  // namespace rdma_transport
