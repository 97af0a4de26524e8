// File: verbs_shim/ib_timer_encodings.h
//
// The IB specification's encodings of the two RC timers, as durations: the
// local ACK timeout (ibv_qp_attr::timeout, 4.096 us * 2^value) and the minimum
// RNR NAK timer (ibv_qp_attr::min_rnr_timer, table 45). One definition for the
// transport (its watchdog budget), the tools (rdma_devices) and the simulated
// NIC (its retransmission and RNR timers). Header-only, constexpr,
// allocation-free, thread-safe.
//
// Encodings past the specification's 5 bits are clamped to 31, never shifted
// past the type: callers that must refuse them (LoadTransportConfig, the sim's
// modify_qp) do so before they get here. Timeout 0 means "wait for ever" in the
// specification; AckTimeoutDuration(0) returns 4.096 us and callers check.
//
//   const auto budget = AckTimeoutDuration(14) * (7 + 1);  // ~537 ms
//   const auto rnr = RnrNakDelay(12);                      // 640 us

#ifndef RDMA_TRANSPORT_VERBS_SHIM_IB_TIMER_ENCODINGS_H_
#define RDMA_TRANSPORT_VERBS_SHIM_IB_TIMER_ENCODINGS_H_

#include <algorithm>
#include <chrono>
#include <cstdint>

namespace rdma_transport {

// 4.096 us * 2^min(encoding, 31): 14 -> 67.1 ms, 18 -> 1.07 s, 31 -> 2.44 h.
constexpr std::chrono::nanoseconds AckTimeoutDuration(int encoding) {
  return std::chrono::nanoseconds(int64_t{4096} << std::clamp(encoding, 0, 31));
}

// The RNR NAK timer of table 45, indexed by min(encoding, 31); 0 is the
// longest (655.36 ms), not "none".
constexpr std::chrono::microseconds RnrNakDelay(int encoding) {
  constexpr int64_t kMicros[32] = {
      655360, 10,    20,    30,     40,     60,     80,     120,
      160,    240,   320,   480,    640,    960,    1280,   1920,
      2560,   3840,  5120,  7680,   10240,  15360,  20480,  30720,
      40960,  61440, 81920, 122880, 163840, 245760, 327680, 491520};
  return std::chrono::microseconds(kMicros[std::clamp(encoding, 0, 31)]);
}

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_VERBS_SHIM_IB_TIMER_ENCODINGS_H_
