// File: sim/internal/ring.h
//
// `Ring<T>`: a FIFO over a vector allocated once, so that steady-state pushes
// and pops allocate nothing (CQs, completion-channel event queues). Push()
// requires room; PushGrowing() doubles the storage when full (for queues whose
// bound is not known up front). Not thread-safe: guarded by the fabric lock.
//
// The ring cycles through a window at the front of its storage that starts
// at kFirstWindow slots and doubles, in place, whenever it fills, up to the
// capacity: a CQ sized for a thousand connections (tens of thousands of
// entries, megabytes) that holds a handful at a time keeps reusing the same
// few cache lines instead of streaming through all of it. The storage is
// still allocated (and counted) whole at construction, as a provider's CQ
// buffer is.

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
  static constexpr size_t kFirstWindow = 64;

  Ring() = default;
  explicit Ring(size_t capacity)
      : slots_(capacity), window_(std::min(capacity, kFirstWindow)) {}

  size_t capacity() const { return slots_.size(); }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  bool full() const { return size_ == slots_.size(); }

  void Push(const T& value) {
    assert(!full());
    if (size_ == window_) WidenWindow();
    slots_[(head_ + size_) % window_] = value;
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
    head_ = (head_ + 1) % window_;
    --size_;
  }
  // The i-th element from the front.
  const T& At(size_t i) const { return slots_[(head_ + i) % window_]; }
  // The slots the ring cycles through now (tests).
  size_t window() const { return window_; }

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
    window_ = slots_.size();
    head_ = 0;
  }
  // The window is full but the storage is not: the elements move to the
  // front, in order (no allocation), and the window doubles.
  void WidenWindow() {
    std::rotate(slots_.begin(), slots_.begin() + head_,
                slots_.begin() + window_);
    head_ = 0;
    window_ = std::min(slots_.size(), 2 * window_);
  }

  std::vector<T> slots_;
  size_t window_ = 0;  // 0 < window_ <= slots_.size() once there is storage.
  size_t head_ = 0;
  size_t size_ = 0;
};

}  // namespace rdma_transport::sim::internal

#endif  // RDMA_TRANSPORT_SIM_INTERNAL_RING_H_
