#include "tools/latency_stats.h"

#include "gtest/gtest.h"

namespace rdma_transport {
namespace {

// perftest's order statistics on 1..1000: the 2 largest are dropped, so
// n = 998, t_max = s[998] = 999, the median of an even n is the mean of
// s[499] and s[498], 99% = s[ceil(988.02)] = s[989] = 990.
TEST(LatencyStatsTest, PerftestFigures) {
  std::vector<double> samples;
  for (int i = 1000; i >= 1; --i) samples.push_back(i);  // 1..1000 us
  LatencySummary s = Summarize(samples);
  EXPECT_EQ(s.samples, 1000u);
  EXPECT_DOUBLE_EQ(s.t_min_us, 1);
  EXPECT_DOUBLE_EQ(s.t_max_us, 999);
  EXPECT_DOUBLE_EQ(s.t_typical_us, 499.5);
  EXPECT_DOUBLE_EQ(s.t_avg_us, 499.5);
  EXPECT_NEAR(s.t_stdev_us, 288.097, 0.001);
  EXPECT_DOUBLE_EQ(s.p99_us, 990);
  EXPECT_DOUBLE_EQ(s.p99_9_us, 999);
}

TEST(LatencyStatsTest, OddCountMedianIsTheMiddleSample) {
  std::vector<double> samples = {5, 1, 4, 2, 3, 100, 200};  // n = 5
  LatencySummary s = Summarize(samples);
  EXPECT_DOUBLE_EQ(s.t_typical_us, 3);
  EXPECT_DOUBLE_EQ(s.t_max_us, 100);
}

TEST(LatencyStatsTest, EmptyAndSingle) {
  std::vector<double> none;
  EXPECT_EQ(Summarize(none).samples, 0u);
  std::vector<double> one = {2.5};
  LatencySummary s = Summarize(one);
  EXPECT_DOUBLE_EQ(s.t_min_us, 2.5);
  EXPECT_DOUBLE_EQ(s.p99_9_us, 2.5);
  EXPECT_DOUBLE_EQ(s.t_stdev_us, 0);
}

TEST(LatencyStatsTest, RowHasEveryColumn) {
  std::vector<double> samples = {1, 2, 3};
  std::string row = LatencyRow(64, Summarize(samples));
  EXPECT_NE(row.find("64"), std::string::npos);
  EXPECT_NE(row.find("2.00"), std::string::npos);
}

}  // namespace
}  // namespace rdma_transport
