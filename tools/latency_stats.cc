#include "tools/latency_stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_format.h"

namespace rdma_transport {
namespace {

// perftest drops this many of the largest samples before reporting.
constexpr size_t kMeasureTail = 2;

}  // namespace

LatencySummary Summarize(std::vector<double>& samples_us) {
  LatencySummary summary;
  summary.samples = samples_us.size();
  if (samples_us.empty()) return summary;
  std::sort(samples_us.begin(), samples_us.end());
  const std::vector<double>& s = samples_us;
  const size_t n = s.size() > kMeasureTail ? s.size() - kMeasureTail : s.size();
  auto at = [&](size_t index) { return s[std::min(index, s.size() - 1)]; };
  summary.t_min_us = s[0];
  summary.t_max_us = at(n);
  summary.t_typical_us = n % 2 == 0 ? (s[n / 2] + s[n / 2 - 1]) / 2 : s[n / 2];
  const double sum = std::accumulate(s.begin(), s.begin() + n, 0.0);
  summary.t_avg_us = sum / n;
  double squares = 0;
  for (size_t i = 0; i < n; ++i) {
    squares += (s[i] - summary.t_avg_us) * (s[i] - summary.t_avg_us);
  }
  summary.t_stdev_us = std::sqrt(squares / n);
  summary.p99_us = at(static_cast<size_t>(std::ceil(n * 0.99)));
  summary.p99_9_us = at(static_cast<size_t>(std::ceil(n * 0.999)));
  return summary;
}

std::string LatencyHeader() {
  return absl::StrFormat("%8s %10s %10s %10s %10s %10s %10s %10s %10s",
                         "#bytes", "#iters", "t_min", "t_max", "t_typical",
                         "t_avg", "t_stdev", "99%", "99.9%");
}

std::string LatencyRow(size_t bytes, const LatencySummary& s) {
  return absl::StrFormat(
      "%8u %10u %10.2f %10.2f %10.2f %10.2f %10.2f %10.2f %10.2f", bytes,
      s.samples, s.t_min_us, s.t_max_us, s.t_typical_us, s.t_avg_us,
      s.t_stdev_us, s.p99_us, s.p99_9_us);
}

}  // namespace rdma_transport
