// File: sim/internal/handle_registry.h
//
// `HandleRegistry<Handle, Object>` owns the simulator's objects of one kind
// (QPs, CQs, SRQs) by the verbs handle the application holds, and finds one
// from its handle in one probe of a flat table: the data path looks a QP up
// on every post and a CQ on every poll, and with a thousand connections an
// unordered_map's bucket and node were two cache misses per call. The handle
// is only compared, never dereferenced, so an unknown or destroyed handle is
// found to be so safely.
//
// The table is open-addressed with linear probing, at most half full, and
// deletes by shifting the entries after a removed one back (no tombstones):
// a lookup stops at the first empty slot. Iteration (begin/end) is over the
// owning map, in no particular order.
//
// Thread-safety: none; FabricCore calls it under its lock.
//
//   HandleRegistry<ibv_qp, SimQp> qps;
//   qps.emplace(&qp->verbs, std::move(qp));
//   SimQp* found = qps.Find(handle);      // nullptr if unknown
//   qps.erase(handle);                    // frees the QP

#ifndef RDMA_TRANSPORT_SIM_INTERNAL_HANDLE_REGISTRY_H_
#define RDMA_TRANSPORT_SIM_INTERNAL_HANDLE_REGISTRY_H_

#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

namespace rdma_transport::sim::internal {

template <typename Handle, typename Object>
class HandleRegistry {
 public:
  using Map = std::unordered_map<const Handle*, std::unique_ptr<Object>>;

  HandleRegistry() : slots_(kInitialSlots) {}

  // Takes `object`, found by `handle` from now on (which must be new).
  void emplace(const Handle* handle, std::unique_ptr<Object> object) {
    Object* raw = object.get();
    owned_.emplace(handle, std::move(object));
    if ((owned_.size()) * 2 > slots_.size()) Grow();
    Insert(handle, raw);
  }

  // Forgets and frees the object of `handle`, if there is one.
  void erase(const Handle* handle) {
    if (owned_.erase(handle) == 0) return;
    const size_t mask = slots_.size() - 1;
    size_t hole = Home(handle);
    while (slots_[hole].handle != handle) hole = (hole + 1) & mask;
    // Backward shift: move later entries of the probe run into the hole
    // when their home does not lie (cyclically) after it.
    size_t next = (hole + 1) & mask;
    while (slots_[next].handle != nullptr) {
      const size_t home = Home(slots_[next].handle);
      if (((next - home) & mask) >= ((next - hole) & mask)) {
        slots_[hole] = slots_[next];
        hole = next;
      }
      next = (next + 1) & mask;
    }
    slots_[hole] = Slot{};
  }

  // The object of `handle`, or nullptr.
  Object* Find(const Handle* handle) const {
    if (handle == nullptr) return nullptr;
    const size_t mask = slots_.size() - 1;
    for (size_t i = Home(handle);; i = (i + 1) & mask) {
      const Slot& slot = slots_[i];
      if (slot.handle == handle) return slot.object;
      if (slot.handle == nullptr) return nullptr;
    }
  }

  size_t size() const { return owned_.size(); }
  bool empty() const { return owned_.empty(); }
  typename Map::iterator begin() { return owned_.begin(); }
  typename Map::iterator end() { return owned_.end(); }
  typename Map::const_iterator begin() const { return owned_.begin(); }
  typename Map::const_iterator end() const { return owned_.end(); }

 private:
  static constexpr size_t kInitialSlots = 64;

  struct Slot {
    const Handle* handle = nullptr;
    Object* object = nullptr;
  };

  size_t Home(const Handle* handle) const {
    // Fibonacci hashing of the address: its high bits, well mixed.
    const uint64_t key = reinterpret_cast<uintptr_t>(handle);
    const uint64_t mixed = key * 0x9E3779B97F4A7C15ull;
    return static_cast<size_t>(mixed >> (64 - shift_bits_));
  }

  void Insert(const Handle* handle, Object* object) {
    const size_t mask = slots_.size() - 1;
    size_t i = Home(handle);
    while (slots_[i].handle != nullptr) i = (i + 1) & mask;
    slots_[i] = Slot{handle, object};
  }

  void Grow() {
    std::vector<Slot> old = std::exchange(slots_, {});
    slots_.resize(old.size() * 2);
    shift_bits_ = std::countr_zero(slots_.size());
    for (const Slot& slot : old) {
      if (slot.handle != nullptr) Insert(slot.handle, slot.object);
    }
  }

  Map owned_;
  std::vector<Slot> slots_;  // A power of two; at most half full.
  int shift_bits_ = std::countr_zero(kInitialSlots);
};

}  // namespace rdma_transport::sim::internal

#endif  // RDMA_TRANSPORT_SIM_INTERNAL_HANDLE_REGISTRY_H_
