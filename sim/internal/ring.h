// File: sim/internal/ring.h
//
// `Ring<T>`: a FIFO over a vector allocated once, so that steady-state pushes
// and pops allocate nothing (CQs, completion-channel event queues). Push()
// requires room; PushGrowing() doubles the storage when full (for queues whose
// bound is not known up front). Not thread-safe: guarded by the fabric lock.

#ifndef RDMA_TRANSPORT_SIM_INTERNAL_RING_H_
#define RDMA_TRANSPORT_SIM_INTERNAL_RING_H_

#include <algorithm>
#include <cassert>
#include <cstddef>
#include <utility>
#include <vector>

namespace rdma_transport::sim::internal {

template <typename T>
class Ring {
 public:
  Ring() = default;
  explicit Ring(size_t capacity) : slots_(capacity) {}

  size_t capacity() const { return slots_.size(); }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  bool full() const { return size_ == slots_.size(); }

  void Push(const T& value) {
    assert(!full());
    slots_[(head_ + size_) % slots_.size()] = value;
    ++size_;
  }
  void PushGrowing(const T& value) {
    if (full()) Grow();
    Push(value);
  }
  const T& Front() const {
    assert(!empty());
    return slots_[head_];
  }
  void Pop() {
    assert(!empty());
    head_ = (head_ + 1) % slots_.size();
    --size_;
  }
  // The i-th element from the front.
  const T& At(size_t i) const { return slots_[(head_ + i) % slots_.size()]; }

  // Removes every element for which `predicate` holds, keeping the order of
  // the others. Allocates; control path only.
  template <typename Predicate>
  void EraseIf(Predicate predicate) {
    std::vector<T> kept;
    kept.reserve(size_);
    for (size_t i = 0; i < size_; ++i) {
      if (!predicate(At(i))) kept.push_back(At(i));
    }
    std::copy(kept.begin(), kept.end(), slots_.begin());
    head_ = 0;
    size_ = kept.size();
  }

 private:
  void Grow() {
    std::vector<T> bigger(std::max<size_t>(4, 2 * slots_.size()));
    for (size_t i = 0; i < size_; ++i) bigger[i] = At(i);
    slots_ = std::move(bigger);
    head_ = 0;
  }

  std::vector<T> slots_;
  size_t head_ = 0;
  size_t size_ = 0;
};

}  // namespace rdma_transport::sim::internal

#endif  // RDMA_TRANSPORT_SIM_INTERNAL_RING_H_
