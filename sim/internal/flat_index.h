// File: sim/internal/flat_index.h
//
// `FlatIndex<Key, Value>` maps keys (pointers or integers) to non-null
// pointers in one open-addressed table, for the simulator's lookups on the
// data path: a QP, CQ or SRQ by its verbs handle (HandleRegistry), an MR by
// its lkey/rkey. A lookup is one probe of a flat array in the common case,
// where an unordered_map was a bucket and a node: two cache misses per call
// with a thousand connections' objects. Keys are only compared and hashed,
// never dereferenced, so an unknown or destroyed handle is found to be so
// safely.
//
// Linear probing, at most half full; deletion shifts the entries after the
// removed one back (no tombstones), so a lookup stops at the first empty
// slot. The table doubles when it would pass half full and never shrinks.
//
// Thread-safety: none; FabricCore calls it under its lock.
//
//   FlatIndex<uint32_t, SimMr*> mrs;
//   mrs.Insert(mr->verbs.lkey, mr);
//   SimMr* found = mrs.Find(lkey);   // nullptr if unknown
//   mrs.Erase(lkey);

#ifndef RDMA_TRANSPORT_SIM_INTERNAL_FLAT_INDEX_H_
#define RDMA_TRANSPORT_SIM_INTERNAL_FLAT_INDEX_H_

#include <bit>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

namespace rdma_transport::sim::internal {

template <typename Key, typename Value>
class FlatIndex {
  static_assert(std::is_pointer_v<Value>, "values are pointers (null: none)");

 public:
  FlatIndex() : slots_(kInitialSlots) {}

  // Adds `key` (which must be absent) -> `value` (not null).
  void Insert(Key key, Value value) {
    if ((size_ + 1) * 2 > slots_.size()) Grow();
    Place(key, value);
    ++size_;
  }

  // Removes `key`; false if it was absent.
  bool Erase(Key key) {
    const size_t mask = slots_.size() - 1;
    size_t hole = Home(key);
    while (true) {
      if (slots_[hole].value == nullptr) return false;
      if (slots_[hole].key == key) break;
      hole = (hole + 1) & mask;
    }
    // Backward shift: an entry later in the probe run moves into the hole
    // unless its home lies (cyclically) after the hole.
    size_t next = (hole + 1) & mask;
    while (slots_[next].value != nullptr) {
      const size_t home = Home(slots_[next].key);
      if (((next - home) & mask) >= ((next - hole) & mask)) {
        slots_[hole] = slots_[next];
        hole = next;
      }
      next = (next + 1) & mask;
    }
    slots_[hole] = Slot{};
    --size_;
    return true;
  }

  // The value of `key`, or nullptr.
  Value Find(Key key) const {
    const size_t mask = slots_.size() - 1;
    for (size_t i = Home(key);; i = (i + 1) & mask) {
      const Slot& slot = slots_[i];
      if (slot.value == nullptr) return nullptr;
      if (slot.key == key) return slot.value;
    }
  }

  size_t size() const { return size_; }

 private:
  static constexpr size_t kInitialSlots = 64;

  struct Slot {
    Key key{};
    Value value = nullptr;
  };

  static uint64_t Bits(Key key) {
    if constexpr (std::is_pointer_v<Key>) {
      return reinterpret_cast<uintptr_t>(key);
    } else {
      return static_cast<uint64_t>(key);
    }
  }
  size_t Home(Key key) const {
    // Fibonacci hashing: the high bits of the product, well mixed.
    return static_cast<size_t>((Bits(key) * 0x9E3779B97F4A7C15ull) >>
                               (64 - shift_bits_));
  }

  void Place(Key key, Value value) {
    const size_t mask = slots_.size() - 1;
    size_t i = Home(key);
    while (slots_[i].value != nullptr) i = (i + 1) & mask;
    slots_[i] = Slot{key, value};
  }

  void Grow() {
    std::vector<Slot> old = std::exchange(slots_, {});
    slots_.resize(old.size() * 2);
    shift_bits_ = std::countr_zero(slots_.size());
    for (const Slot& slot : old) {
      if (slot.value != nullptr) Place(slot.key, slot.value);
    }
  }

  std::vector<Slot> slots_;  // A power of two; at most half full.
  size_t size_ = 0;
  int shift_bits_ = std::countr_zero(kInitialSlots);
};

}  // namespace rdma_transport::sim::internal

#endif  // RDMA_TRANSPORT_SIM_INTERNAL_FLAT_INDEX_H_
