// File: transport/shared_receive_pool.cc
//
// The engine's shared receive queue and its registered slots
// (shared_receive_pool.h).

#include "transport/shared_receive_pool.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "transport/handshake.h"
#include "transport/wr_id.h"
#include "verbs_shim/verbs_error.h"

namespace rdma_transport {
namespace {

constexpr uint32_t kMinSlotBytes = 64;

}  // namespace

SharedReceivePool::SharedReceivePool(const Context& context, uint32_t slots,
                                     uint32_t slot_bytes)
    : context_(context),
      verbs_(context.verbs()),
      slots_(slots),
      slot_bytes_(slot_bytes) {}

absl::StatusOr<std::unique_ptr<SharedReceivePool>> SharedReceivePool::Create(
    const Context& context, uint32_t slots, uint32_t slot_bytes) {
  const ibv_device_attr& device = context.device_attr();
  if (device.max_srq <= 0) {
    return absl::UnimplementedError(
        absl::StrCat(context.device_name(),
                     " has no shared receive queues (max_srq 0); use an "
                     "engine without srq_slots"));
  }
  if (device.max_srq_wr > 0 &&
      slots > static_cast<uint32_t>(device.max_srq_wr)) {
    return absl::InvalidArgumentError(
        absl::StrCat("srq_slots ", slots, " exceeds ", context.device_name(),
                     "'s max_srq_wr ", device.max_srq_wr));
  }
  if (slot_bytes < kMinSlotBytes || slot_bytes > kMaxSlotSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("srq_slot_bytes ", slot_bytes, " out of range ",
                     kMinSlotBytes, "..", kMaxSlotSize));
  }
  std::unique_ptr<SharedReceivePool> pool(
      new SharedReceivePool(context, slots, slot_bytes));
  pool->buffer_bytes_ = RoundUp(size_t{slots} * slot_bytes, 4096);
  pool->buffer_ = AllocateAligned(4096, pool->buffer_bytes_);
  if (!pool->buffer_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "allocating ", pool->buffer_bytes_, " bytes of shared receive slots"));
  }
  absl::StatusOr<MemoryRegion> region = context.RegisterMemory(
      {pool->buffer_.get(), pool->buffer_bytes_}, MemoryAccess::kLocalWrite);
  if (!region.ok()) return region.status();
  pool->region_ = *std::move(region);

  ibv_srq_init_attr init = {};
  init.srq_context = pool.get();
  init.attr.max_wr = slots;
  init.attr.max_sge = 1;
  absl::StatusOr<ibv_srq*> srq = pool->verbs_.CreateSrq(context.pd(), &init);
  if (!srq.ok()) {
    const int error = VerbsErrno(srq.status());
    if (error == EOPNOTSUPP || error == ENOSYS) {
      return absl::UnimplementedError(absl::StrCat(
          context.device_name(),
          " refused a shared receive queue: ", srq.status().message()));
    }
    return WithContext(srq.status(), "engine: shared receive queue");
  }
  pool->srq_ = *srq;
  if (absl::Status status = pool->PostAllSlots(); !status.ok()) return status;
  return pool;
}

SharedReceivePool::~SharedReceivePool() {
  if (srq_ != nullptr) {
    if (absl::Status status = verbs_.DestroySrq(srq_); !status.ok()) {
      std::fprintf(stderr, "rdma_transport: engine: %s\n",
                   status.ToString().c_str());
    }
  }
  if (absl::Status status = region_.Release(); !status.ok()) {
    std::fprintf(stderr, "rdma_transport: engine: %s\n",
                 status.ToString().c_str());
  }
}

absl::Status SharedReceivePool::Reserve(uint32_t credits) {
  if (reserved_ + credits > slots_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the engine's shared receive pool has ", slots_ - reserved_, " of ",
        slots_, " slots unreserved, the connection needs ", credits,
        " (its recv_slots; raise EngineOptions::srq_slots or lower "
        "ConnectionOptions::recv_slots)"));
  }
  reserved_ += credits;
  return absl::OkStatus();
}

void SharedReceivePool::FillReceive(uint32_t index, ibv_recv_wr& wr,
                                    ibv_sge& sge) const {
  sge.addr = reinterpret_cast<uint64_t>(slot(index));
  sge.length = slot_bytes_;
  sge.lkey = region_.lkey();
  wr = ibv_recv_wr{};
  wr.wr_id = MakeWrId(WrKind::kSrqRecv, 0, index);
  wr.sg_list = &sge;
  wr.num_sge = 1;
}

absl::Status SharedReceivePool::PostAllSlots() {
  // Chains of kChain: 16,384 slots are 256 posts, not 16,384.
  constexpr uint32_t kChain = 64;
  ibv_recv_wr wrs[kChain];
  ibv_sge sges[kChain];
  for (uint32_t first = 0; first < slots_; first += kChain) {
    const uint32_t n = std::min(kChain, slots_ - first);
    for (uint32_t i = 0; i < n; ++i) {
      FillReceive(first + i, wrs[i], sges[i]);
      wrs[i].next = i + 1 < n ? &wrs[i + 1] : nullptr;
    }
    ibv_recv_wr* bad = nullptr;
    if (absl::Status status = verbs_.PostSrqRecv(srq_, wrs, &bad);
        !status.ok()) {
      return WithContext(
          status, absl::StrCat("engine: posting shared receive slots ", first,
                               "..", first + n - 1, " of ", slots_));
    }
  }
  return absl::OkStatus();
}

absl::Status SharedReceivePool::Repost(uint32_t index) {
  ibv_sge sge;
  ibv_recv_wr wr;
  FillReceive(index, wr, sge);
  ibv_recv_wr* bad = nullptr;
  absl::Status status = verbs_.PostSrqRecv(srq_, &wr, &bad);
  if (!status.ok()) [[unlikely]] {
    return WithContext(status, "engine: reposting a shared receive slot");
  }
  if (held_ > 0) --held_;
  return absl::OkStatus();
}

}  // namespace rdma_transport
