// File: transport/qp_slot_table.h
//
// `QpSlotTable`: the engine's map from a QP number to the slot of the
// connection that owns it, for the completions of the shared receive queue
// (their wr_id names a pool slot, not a connection; engine.h, "Dispatch").
// Open addressing with linear probing over a power-of-two table of at least
// twice the connections it holds, sized once: Find() is O(1) expected
// whatever the number of connections (it was a binary search, O(log n) and
// a mispredicted branch per step, on every receive), and nothing allocates
// after construction. Erase() shifts the entries after it back (no
// tombstones), so a long-lived engine's probes stay short.
//
//   QpSlotTable table(1024);
//   table.Insert(qp_num, slot);
//   uint32_t slot = table.Find(qp_num);  // QpSlotTable::kNone if absent
//   table.Erase(qp_num);
//
// Thread-compatible (the engine's thread).

#ifndef RDMA_TRANSPORT_TRANSPORT_QP_SLOT_TABLE_H_
#define RDMA_TRANSPORT_TRANSPORT_QP_SLOT_TABLE_H_

#include <bit>
#include <cstdint>
#include <vector>

namespace rdma_transport {

class QpSlotTable {
 public:
  static constexpr uint32_t kNone = ~uint32_t{0};

  // Room for `capacity` QPs (at least 1).
  explicit QpSlotTable(uint32_t capacity)
      : entries_(std::bit_ceil(2 * uint64_t{capacity < 1 ? 1 : capacity})),
        mask_(static_cast<uint32_t>(entries_.size() - 1)),
        shift_(64 - std::countr_zero(entries_.size())) {}

  // `qp_num` is not in the table, which holds fewer than its capacity.
  void Insert(uint32_t qp_num, uint32_t slot) {
    uint32_t i = Home(qp_num);
    while (entries_[i].slot != kNone) i = (i + 1) & mask_;
    entries_[i] = {qp_num, slot};
  }

  uint32_t Find(uint32_t qp_num) const {
    for (uint32_t i = Home(qp_num);; i = (i + 1) & mask_) {
      const Entry& entry = entries_[i];
      if (entry.slot == kNone || entry.qp_num == qp_num) return entry.slot;
    }
  }

  // Removes `qp_num` if present.
  void Erase(uint32_t qp_num) {
    uint32_t hole = Home(qp_num);
    while (entries_[hole].slot == kNone || entries_[hole].qp_num != qp_num) {
      if (entries_[hole].slot == kNone) return;
      hole = (hole + 1) & mask_;
    }
    // Backward shift: an entry after the hole moves into it unless its home
    // lies cyclically in (hole, here], where it is still found.
    for (uint32_t here = (hole + 1) & mask_; entries_[here].slot != kNone;
         here = (here + 1) & mask_) {
      const uint32_t home = Home(entries_[here].qp_num);
      const bool stays = hole < here ? (hole < home && home <= here)
                                     : (hole < home || home <= here);
      if (stays) continue;
      entries_[hole] = entries_[here];
      hole = here;
    }
    entries_[hole] = Entry{};
  }

 private:
  struct Entry {
    uint32_t qp_num = 0;
    uint32_t slot = kNone;  // kNone: empty
  };

  // Fibonacci hashing: QP numbers are often consecutive, and this spreads
  // them over the table.
  uint32_t Home(uint32_t qp_num) const {
    return static_cast<uint32_t>((uint64_t{qp_num} * 0x9e3779b97f4a7c15ull) >>
                                 shift_);
  }

  std::vector<Entry> entries_;
  uint32_t mask_;
  int shift_;  // 64 - log2(entries_.size()): Home() takes the top bits
};

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TRANSPORT_QP_SLOT_TABLE_H_
