// The mlx5 traffic_class file's format: "Global tclass=N" when a host-wide
// class is set, possibly followed by rule lines; empty when unset.
#include "transport/traffic_class_override.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rdma_transport {
namespace {

using ::testing::HasSubstr;

std::optional<uint8_t> Parsed(std::string_view text) {
  absl::StatusOr<std::optional<uint8_t>> value = ParseTrafficClassFile(text);
  EXPECT_TRUE(value.ok()) << value.status();
  return value.value_or(std::nullopt);
}

TEST(TrafficClassFileTest, GlobalLineSetsTheOverride) {
  EXPECT_EQ(Parsed("Global tclass=106\n"), 106);
  EXPECT_EQ(Parsed("Global tclass=0\n"), 0);
  EXPECT_EQ(Parsed("Global tclass=255"), 255);
  // Rule lines after the global one are the driver's per-destination rules.
  EXPECT_EQ(Parsed("Global tclass=160\ntclass=96,dst_ip=10.0.0.0/8\n"), 160);
}

TEST(TrafficClassFileTest, EmptyOrRulesOnlyIsNoOverride) {
  EXPECT_EQ(Parsed(""), std::nullopt);
  EXPECT_EQ(Parsed("\n"), std::nullopt);
  EXPECT_EQ(Parsed("tclass=96,dst_ip=10.0.0.0/8\n"), std::nullopt);
}

TEST(TrafficClassFileTest, MalformedGlobalLineIsAnError) {
  for (const char* text :
       {"Global tclass=256\n", "Global tclass=\n", "Global tclass=1o6\n",
        "Global tclass=-1\n", "Global tclass=106 \n"}) {
    absl::StatusOr<std::optional<uint8_t>> value = ParseTrafficClassFile(text);
    ASSERT_FALSE(value.ok()) << text;
    EXPECT_THAT(value.status().message(),
                HasSubstr("expected \"Global tclass=<0..255>\""));
  }
}

TEST(TrafficClassFileTest, WarningNamesFileValueAndWhatItOverrides) {
  TrafficClassOverride found{"/sys/class/infiniband/mlx5_0/tc/1/traffic_class",
                             "Global tclass=106", 106};
  std::optional<std::string> warning =
      TrafficClassOverrideWarning("mlx5_0", 1, found, 136);
  ASSERT_TRUE(warning.has_value());
  EXPECT_THAT(*warning,
              HasSubstr("mlx5_0 port 1: /sys/class/infiniband/mlx5_0/tc/1/"
                        "traffic_class holds \"Global tclass=106\""));
  EXPECT_THAT(*warning,
              HasSubstr("traffic class 106, overriding MC_IB_TC=136"));
  EXPECT_EQ(TrafficClassOverrideWarning("mlx5_0", 1, found, 106), std::nullopt);
  EXPECT_EQ(TrafficClassOverrideWarning("mlx5_0", 1, found, std::nullopt),
            std::nullopt);
  EXPECT_EQ(TrafficClassOverrideWarning("mlx5_0", 1, std::nullopt, 136),
            std::nullopt);
}

}  // namespace
}  // namespace rdma_transport
