// File: transport/one_test.h
//
// OneTest(condition): a condition combined from several comparisons with
// `|` or `&` (no short cuts), computed whole and then tested by a single
// branch.
//
// Why: on the message path each conditional branch is a block of its own
// for qemu's TCG, and a block run once between two of Soft-RoCE's
// doorbells costs 20-30 ns there, against 0.35 ns for an instruction in a
// straight run (docs/performance.md, "What a branch costs cold"). Written
// with `|` alone, GCC still expands such a condition as one jump per
// comparison on x86 (branches count as cheap there); the empty asm makes
// it materialize the value first, which costs a few flag-setting
// instructions and no branch. Use it only where every operand is cheap
// and safe to evaluate (no side effects, no load that could fault).
//
// Example:
//   if (OneTest((count == 1) & (waiters != 0))) [[unlikely]] Wake();
//
// Header only; no state, thread-compatible.

#ifndef RDMA_TRANSPORT_TRANSPORT_ONE_TEST_H_
#define RDMA_TRANSPORT_TRANSPORT_ONE_TEST_H_

namespace rdma_transport {

[[gnu::always_inline]] inline bool OneTest(bool condition) {
#if defined(__GNUC__)
  asm("" : "+r"(condition));
#endif
  return condition;
}

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TRANSPORT_ONE_TEST_H_
