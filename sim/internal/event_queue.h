// File: sim/internal/event_queue.h
//
// `EventQueue<E>` is the fabric's queue of scheduled events, earliest first
// and, among events of the same time, first scheduled first. The events
// live in slots that do not move (a deque); the heap orders 16-byte keys
// (time, then sequence and slot packed in one word). So an event is written
// once, where it stays, and its handler reads it there: with a thousand
// connections the stores that build an event are still in the CPU's store
// buffer, behind stores to lines that missed the cache, when the fabric
// runs it a few hundred instructions later, and a wide load that a single
// store cannot forward (copying a 136-byte event, sifting it through a heap
// of events) waits for that buffer to drain. The handler's loads are of
// single fields, each within one earlier store.
//
// E has `Nanos time` and `uint64_t sequence` members; the queue sets
// `sequence`. Limits: 2^24 events at once and 2^40 events over the queue's
// life; passing either aborts with a message (the simulator's other limits,
// virtual time and deadlock, abort too).
//
// Thread-safety: none; FabricCore calls it under its lock.
//
//   EventQueue<Event> queue;
//   Event& event = queue.Start();    // a blank event in a free slot
//   event.time = now + latency; ...
//   queue.Commit();                  // ordered; nothing may come between
//   ...
//   const uint32_t slot = queue.PopTop();
//   Handle(queue.at(slot));          // may Start()/Push() more events
//   queue.Release(slot);

#ifndef RDMA_TRANSPORT_SIM_INTERNAL_EVENT_QUEUE_H_
#define RDMA_TRANSPORT_SIM_INTERNAL_EVENT_QUEUE_H_

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace rdma_transport::sim::internal {

template <typename E>
class EventQueue {
 public:
  using Nanos = std::chrono::nanoseconds;

  EventQueue() { heap_.reserve(256); }

  // A blank event (E{}) in a free slot, for the caller to fill in and then
  // Commit(). Nothing else may touch the queue in between.
  E& Start() {
    if (free_.empty()) {
      building_ = static_cast<uint32_t>(slots_.size());
      if (building_ >= kMaxSlots) {
        Abort("more than 2^24 events scheduled at once");
      }
      return slots_.emplace_back();
    }
    building_ = free_.back();
    free_.pop_back();
    E& event = slots_[building_];
    event = E();
    return event;
  }

  // Orders the event Start() returned, by its time and then by the order
  // of Commit() calls.
  void Commit() {
    E& event = slots_[building_];
    const uint64_t sequence = next_sequence_++;
    if (sequence >= kMaxSequence) {
      Abort("more than 2^40 events scheduled over the fabric's life");
    }
    event.sequence = sequence;
    const Key key =
        MakeKey(event.time.count(), (sequence << kSlotBits) | building_);
    size_t hole = heap_.size();
    heap_.emplace_back();
    while (hole > 0) {
      const size_t parent = (hole - 1) / 2;
      if (!Earlier(key, heap_[parent])) break;
      heap_[hole] = heap_[parent];
      hole = parent;
    }
    Store(heap_[hole], key);
  }

  // Start(), a copy of `event`, Commit().
  void Push(const E& event) {
    Start() = event;
    Commit();
  }

  bool empty() const { return heap_.empty(); }
  size_t size() const { return heap_.size(); }
  // The earliest event; the queue must not be empty.
  const E& Top() const { return slots_[SlotOf(heap_.front())]; }
  Nanos TopTime() const { return Nanos(heap_.front().time); }

  // Takes the earliest event out of the order and returns its slot: the
  // event stays there, unchanged, until Release(slot).
  uint32_t PopTop() {
    const uint32_t slot = SlotOf(heap_.front());
    const Key last = heap_.back();
    heap_.pop_back();
    if (!heap_.empty()) {
      // Sift `last` down from the root.
      const size_t count = heap_.size();
      size_t hole = 0;
      while (true) {
        size_t child = 2 * hole + 1;
        if (child >= count) break;
        if (child + 1 < count && Earlier(heap_[child + 1], heap_[child])) {
          ++child;
        }
        if (!Earlier(heap_[child], last)) break;
        heap_[hole] = heap_[child];
        hole = child;
      }
      heap_[hole] = last;
    }
    return slot;
  }

  const E& at(uint32_t slot) const { return slots_[slot]; }
  void Release(uint32_t slot) { free_.push_back(slot); }

  // Calls f(event) for every event still ordered, in no particular order.
  template <typename F>
  void ForEach(F f) const {
    for (const Key& key : heap_) f(slots_[SlotOf(key)]);
  }

 private:
  static constexpr uint32_t kSlotBits = 24;
  static constexpr uint32_t kMaxSlots = uint32_t{1} << kSlotBits;
  static constexpr uint64_t kMaxSequence = uint64_t{1} << (64 - kSlotBits);

  // Compared as (time, order); order = sequence << kSlotBits | slot, so
  // equal times keep the order of Commit().
  struct alignas(16) Key {
    int64_t time;
    uint64_t order;
  };

  static Key MakeKey(int64_t time, uint64_t order) { return Key{time, order}; }
  // One 16-byte store, which the 16-byte loads of PopTop() and the sifts can
  // be forwarded from (two 8-byte stores could not).
  static void Store(Key& to, const Key& key) {
#if defined(__SSE2__)
    _mm_store_si128(reinterpret_cast<__m128i*>(&to),
                    _mm_set_epi64x(static_cast<int64_t>(key.order), key.time));
#else
    to = key;
#endif
  }
  static bool Earlier(const Key& a, const Key& b) {
    return a.time < b.time || (a.time == b.time && a.order < b.order);
  }
  static uint32_t SlotOf(const Key& key) {
    return static_cast<uint32_t>(key.order & (kMaxSlots - 1));
  }
  [[noreturn]] static void Abort(const char* what) {
    std::fprintf(stderr, "sim: event queue limit: %s\n", what);
    std::abort();
  }

  std::deque<E> slots_;
  std::vector<uint32_t> free_;  // Slots released, most recent last.
  std::vector<Key> heap_;       // Min-heap on Earlier().
  uint32_t building_ = 0;       // The slot Start() returned.
  uint64_t next_sequence_ = 0;
};

}  // namespace rdma_transport::sim::internal

#endif  // RDMA_TRANSPORT_SIM_INTERNAL_EVENT_QUEUE_H_
