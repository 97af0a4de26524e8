// File: sim/internal/trace.h
//
// `Trace` folds what a fabric did into one 64-bit digest, record by record,
// in the order it happened: each event run, each packet lost, each completion
// written or lost, each async event raised (see FabricCore). Two runs of the
// same single-threaded scenario give the same digest. Two traces of as many
// records that differ in one recorded word (a completion a nanosecond later,
// another status) always give different digests; traces that differ more
// (one more lost packet, and so more records) give different digests with
// overwhelming probability. It is a fingerprint for comparing runs, not a
// cryptographic hash, and cheap enough for the data path.
//
// Only values that are the same from run to run may be recorded: virtual
// times, QP numbers, object ids, enum values. Never addresses.
//
// Thread-compatible: FabricCore keeps one under its mutex. Allocates nothing.

#ifndef RDMA_TRANSPORT_SIM_INTERNAL_TRACE_H_
#define RDMA_TRANSPORT_SIM_INTERNAL_TRACE_H_

#include <cstddef>
#include <cstdint>

namespace rdma_transport::sim::internal {

// What a record describes; folded into it with its words.
enum class TraceRecord : uint64_t {
  kEvent = 1,
  kPacketLost = 2,
  kCompletion = 3,
  kCompletionLost = 4,
  kAsyncEvent = 5,
};

// Two 32-bit fields in one record word (fewer words, a cheaper record).
constexpr uint64_t TraceWord(uint32_t low, uint32_t high) {
  return uint64_t{low} | (uint64_t{high} << 32);
}
// Four small fields (enum values below 256) in one 32-bit half.
template <typename A, typename B, typename C, typename D>
constexpr uint32_t TraceBytes(A a, B b, C c, D d) {
  return (static_cast<uint32_t>(a) & 0xff) |
         ((static_cast<uint32_t>(b) & 0xff) << 8) |
         ((static_cast<uint32_t>(c) & 0xff) << 16) |
         ((static_cast<uint32_t>(d) & 0xff) << 24);
}

class Trace {
 public:
  // Mixes one record: its kind and `words` (at most kMaxWords), in order.
  template <typename... Words>
  void Record(TraceRecord kind, Words... words) {
    static_assert(sizeof...(Words) <= kMaxWords);
    // The words of a record are folded with independent multiplications (so
    // the CPU overlaps them), and only the fold goes through the chained
    // step: a record costs a few nanoseconds. Each position has its own odd
    // multiplier, so a change in any one word always changes the fold.
    uint64_t fold = static_cast<uint64_t>(kind);
    size_t position = 0;
    ((fold += static_cast<uint64_t>(words) * Multiplier(++position)), ...);
    // xor, multiply by an odd constant and xorshift are each invertible, so
    // two traces that differ in one record never meet again.
    state_ = (state_ ^ fold) * 0xd6e8feb86659fd93ull;
    state_ ^= state_ >> 32;
  }

  // The state through SplitMix64's finaliser (Steele, Lea and Flood, "Fast
  // splittable pseudorandom number generators", OOPSLA 2014), so that every
  // bit of it depends on every bit of the state.
  uint64_t digest() const {
    uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }

 private:
  static constexpr size_t kMaxWords = 6;
  // Odd multiples of the 64-bit golden ratio, one per word position.
  static constexpr uint64_t Multiplier(size_t position) {
    return 0x9e3779b97f4a7c15ull * (2 * position + 1);
  }

  // FNV-1a's 64-bit offset basis: any fixed non-zero start would do.
  uint64_t state_ = 0xcbf29ce484222325ull;
};

}  // namespace rdma_transport::sim::internal

#endif  // RDMA_TRANSPORT_SIM_INTERNAL_TRACE_H_
