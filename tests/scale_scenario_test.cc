// The scale scenario, small: every byte lands, the links are kept busy, and
// a rerun gives the same trace digest (the 64-host run is
// //tests:scale_run, in CI's tools stage).
#include "tests/scale_scenario.h"

#include "gtest/gtest.h"

namespace rdma_transport {
namespace {

TEST(ScaleScenarioTest, AllToAllWritesLandAndKeepTheLinksBusy) {
  ScaleOptions options;
  options.hosts = 6;
  options.bytes_per_connection = 1 << 20;
  absl::StatusOr<ScaleReport> report = RunScaleScenario(options);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->connections, 36u);  // itself included
  EXPECT_EQ(report->operations, 36u * 16);
  EXPECT_EQ(report->bytes, 36ull << 20);
  ASSERT_EQ(report->link_utilisation.size(), 6u);
  // Every host sends to six (itself too) through its one egress link: with
  // four 64 KiB WRITEs outstanding per connection, the link never idles
  // (headers and the last round trip are the rest).
  for (double u : report->link_utilisation) {
    EXPECT_GT(u, 0.9) << FormatScaleReport(*report);
    EXPECT_LE(u, 1.0 + 1e-9) << FormatScaleReport(*report);
  }
  EXPECT_GT(report->throughput_gbps, 0.85 * 6 * report->link_gbps)
      << FormatScaleReport(*report);
  std::printf("%s", FormatScaleReport(*report).c_str());
}

TEST(ScaleScenarioTest, SameOptionsSameDigest) {
  ScaleOptions options;
  options.hosts = 4;
  options.bytes_per_connection = 256 << 10;
  absl::StatusOr<ScaleReport> first = RunScaleScenario(options);
  absl::StatusOr<ScaleReport> second = RunScaleScenario(options);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(first->digest, second->digest);
  EXPECT_EQ(first->traffic_virtual_seconds, second->traffic_virtual_seconds);
  options.op_bytes = 16 << 10;  // a different run: a different trace
  absl::StatusOr<ScaleReport> other = RunScaleScenario(options);
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_NE(other->digest, first->digest);
}

TEST(ScaleScenarioTest, BadOptionsAreNamed) {
  ScaleOptions options;
  options.hosts = 1;
  EXPECT_EQ(RunScaleScenario(options).status().message(),
            "hosts 1 out of range 2..250");
  options = {};
  options.bytes_per_connection = 1000;
  EXPECT_EQ(RunScaleScenario(options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options = {};
  options.window = 13;
  EXPECT_EQ(RunScaleScenario(options).status().message(),
            "window 13 out of range 1..12");
}

}  // namespace
}  // namespace rdma_transport
