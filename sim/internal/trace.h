// File: sim/internal/trace.h
//
// `Trace` folds what a fabric did into one 64-bit digest, record by record,
// in the order it happened: each event run, each packet lost, each completion
// written or lost, each async event raised (see FabricCore). Two runs of the
// same single-threaded scenario give the same digest; a run that differs in
// any recorded word (one more lost packet, a completion a nanosecond later)
// gives another one, with overwhelming probability. It is a fingerprint for
// comparing runs, not a cryptographic hash.
//
// Only values that are the same from run to run may be recorded: virtual
// times, QP numbers, object ids, enum values. Never addresses.
//
// Thread-compatible: FabricCore keeps one under its mutex. Allocates nothing.

#ifndef RDMA_TRANSPORT_SIM_INTERNAL_TRACE_H_
#define RDMA_TRANSPORT_SIM_INTERNAL_TRACE_H_

#include <cstdint>

namespace rdma_transport::sim::internal {

// What a record describes; the first word mixed into it.
enum class TraceRecord : uint64_t {
  kEvent = 1,
  kPacketLost = 2,
  kCompletion = 3,
  kCompletionLost = 4,
  kAsyncEvent = 5,
};

class Trace {
 public:
  // Mixes one record: its kind, then `words` in order.
  template <typename... Words>
  void Record(TraceRecord kind, Words... words) {
    Mix(static_cast<uint64_t>(kind));
    (Mix(static_cast<uint64_t>(words)), ...);
  }

  uint64_t digest() const { return state_; }

 private:
  // The 64-bit finaliser of SplitMix64 (Steele, Lea and Flood, "Fast
  // splittable pseudorandom number generators", OOPSLA 2014): a bijection in
  // which every input bit affects every output bit.
  static uint64_t Scramble(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Adding the golden-ratio increment before each word keeps a run of zero
  // words from leaving the state where it was.
  void Mix(uint64_t word) {
    state_ = Scramble((state_ + 0x9e3779b97f4a7c15ull) ^ word);
  }

  // FNV-1a's 64-bit offset basis: any fixed non-zero start would do.
  uint64_t state_ = 0xcbf29ce484222325ull;
};

}  // namespace rdma_transport::sim::internal

#endif  // RDMA_TRANSPORT_SIM_INTERNAL_TRACE_H_
