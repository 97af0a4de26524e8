// File: tools/latency_stats.h
//
// Latency figures computed the way perftest's ib_send_lat computes them
// (print_report_lat in perftest_parameters.c), so ours and theirs sit in one
// table: the samples are sorted, the 2 largest dropped (LAT_MEASURE_TAIL),
// and of the n that remain: t_min = s[0], t_max = s[n], t_typical = the
// median (mean of the middle two when n is even), t_avg and t_stdev over the
// n, 99% = s[ceil(0.99 n)], 99.9% = s[ceil(0.999 n)], in microseconds.
// One difference: perftest truncates each deviation to an integer before
// squaring it, which zeroes its t_stdev below 1 us; ours is exact. Round trips
// are halved into one-way latencies by the caller, as perftest does.
//
// Plain functions over a sample vector; thread-compatible.

#ifndef RDMA_TRANSPORT_TOOLS_LATENCY_STATS_H_
#define RDMA_TRANSPORT_TOOLS_LATENCY_STATS_H_

#include <cstddef>
#include <string>
#include <vector>

namespace rdma_transport {

struct LatencySummary {
  size_t samples = 0;
  double t_min_us = 0;
  double t_max_us = 0;
  double t_typical_us = 0;  // median
  double t_avg_us = 0;
  double t_stdev_us = 0;
  double p99_us = 0;
  double p99_9_us = 0;
};

// `samples_us` is sorted in place.
LatencySummary Summarize(std::vector<double>& samples_us);

// perftest's column order, fixed width.
std::string LatencyHeader();
std::string LatencyRow(size_t bytes, const LatencySummary& summary);

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TOOLS_LATENCY_STATS_H_
