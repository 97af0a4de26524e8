// File: transport/ready_queue.h
//
// `ReadyQueue`: the slots of an engine's connections that have messages
// waiting, in the order they became ready, each at most once. An intrusive
// doubly-linked list over the slots: pushing an absent slot, popping the
// oldest and removing any slot (a connection that goes) are O(1), and
// nothing is allocated after Reset().
//
//   ReadyQueue ready;
//   ready.Reset(1024);                // slots 0..1023
//   ready.Push(7);                    // true: 7 is queued
//   ready.Push(7);                    // false: already there, stays put
//   uint32_t slot = ready.Pop();      // 7; ReadyQueue::kNone when empty
//
// Thread-compatible: the engine's thread owns it.

#ifndef RDMA_TRANSPORT_TRANSPORT_READY_QUEUE_H_
#define RDMA_TRANSPORT_TRANSPORT_READY_QUEUE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace rdma_transport {

class ReadyQueue {
 public:
  static constexpr uint32_t kNone = ~uint32_t{0};

  // Empties the queue and sizes it for slots 0..slots-1.
  void Reset(uint32_t slots) {
    next_.assign(slots, kAbsent);
    prev_.assign(slots, kNone);
    head_ = tail_ = kNone;
    size_ = 0;
  }

  // Queues `slot` at the tail unless it is queued; true when it was not.
  bool Push(uint32_t slot) {
    if (next_[slot] != kAbsent) return false;
    next_[slot] = kNone;
    prev_[slot] = tail_;
    if (tail_ == kNone) {
      head_ = slot;
    } else {
      next_[tail_] = slot;
    }
    tail_ = slot;
    ++size_;
    return true;
  }

  // The oldest slot, taken out; kNone when the queue is empty.
  uint32_t Pop() {
    const uint32_t slot = head_;
    if (slot != kNone) Remove(slot);
    return slot;
  }

  // Takes `slot` out wherever it is; nothing when it is not queued.
  void Remove(uint32_t slot) {
    const uint32_t next = next_[slot];
    if (next == kAbsent) return;
    const uint32_t prev = prev_[slot];
    if (prev == kNone) {
      head_ = next;
    } else {
      next_[prev] = next;
    }
    if (next == kNone) {
      tail_ = prev;
    } else {
      prev_[next] = prev;
    }
    next_[slot] = kAbsent;
    prev_[slot] = kNone;
    --size_;
  }

  // The oldest slot, left in place; kNone when the queue is empty.
  uint32_t front() const { return head_; }
  bool contains(uint32_t slot) const { return next_[slot] != kAbsent; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

 private:
  // next_[slot] of a slot that is not queued.
  static constexpr uint32_t kAbsent = kNone - 1;

  std::vector<uint32_t> next_;
  std::vector<uint32_t> prev_;
  uint32_t head_ = kNone;
  uint32_t tail_ = kNone;
  size_t size_ = 0;
};

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TRANSPORT_READY_QUEUE_H_
