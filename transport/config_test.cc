#include "transport/config.h"

#include <cstdlib>
#include <map>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rdma_transport {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

EnvironmentLookup FakeEnvironment(std::map<std::string, std::string> values) {
  return [values = std::move(values)](
             std::string_view name) -> std::optional<std::string> {
    auto it = values.find(std::string(name));
    if (it == values.end()) return std::nullopt;
    return it->second;
  };
}

absl::StatusOr<TransportConfig> LoadWith(const std::string& variable,
                                         const std::string& value) {
  return LoadTransportConfig({}, FakeEnvironment({{variable, value}}));
}

TEST(ConfigTest, DefaultsWhenNothingIsSet) {
  absl::StatusOr<TransportConfig> config =
      LoadTransportConfig({}, FakeEnvironment({}));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->traffic_class, std::nullopt);
  EXPECT_EQ(config->service_level, std::nullopt);
  EXPECT_EQ(config->gid_index, std::nullopt);
  EXPECT_EQ(config->port, 1);
  EXPECT_EQ(config->mtu, 4096);
  EXPECT_EQ(config->max_inline, std::nullopt);
  EXPECT_EQ(config->ack_timeout, 14);
  EXPECT_EQ(config->gid_subnet, std::nullopt);
}

TEST(ConfigTest, ReadsEveryVariable) {
  absl::StatusOr<TransportConfig> config =
      LoadTransportConfig({}, FakeEnvironment({{"MC_IB_TC", "136"},
                                               {"MC_IB_SL", "3"},
                                               {"MC_GID_INDEX", "1"},
                                               {"MC_IB_PORT", "2"},
                                               {"MC_MTU", "1024"},
                                               {"MC_MAX_INLINE", "64"},
                                               {"MC_IB_TIMEOUT", "18"}}));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->traffic_class, 136);
  EXPECT_EQ(config->service_level, 3);
  EXPECT_EQ(config->gid_index, 1);
  EXPECT_EQ(config->port, 2);
  EXPECT_EQ(config->mtu, 1024);
  EXPECT_EQ(config->max_inline, 64u);
  EXPECT_EQ(config->ack_timeout, 18);
}

TEST(ConfigTest, MinusOneMeansSystemDefault) {
  absl::StatusOr<TransportConfig> config =
      LoadTransportConfig({}, FakeEnvironment({{"MC_IB_TC", "-1"},
                                               {"MC_IB_SL", "-1"},
                                               {"MC_GID_INDEX", "-1"},
                                               {"MC_MAX_INLINE", "-1"},
                                               {"MC_IB_TIMEOUT", "-1"}}));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->traffic_class, std::nullopt);
  EXPECT_EQ(config->service_level, std::nullopt);
  EXPECT_EQ(config->gid_index, std::nullopt);
  EXPECT_EQ(config->max_inline, std::nullopt);
  EXPECT_EQ(config->ack_timeout, 14);
}

TEST(ConfigTest, RangeEdgesAreAccepted) {
  EXPECT_EQ(LoadWith("MC_IB_TC", "0")->traffic_class, 0);
  EXPECT_EQ(LoadWith("MC_IB_TC", "255")->traffic_class, 255);
  EXPECT_EQ(LoadWith("MC_IB_SL", "15")->service_level, 15);
  EXPECT_EQ(LoadWith("MC_GID_INDEX", "255")->gid_index, 255);
  EXPECT_EQ(LoadWith("MC_IB_PORT", "255")->port, 255);
  EXPECT_EQ(LoadWith("MC_MTU", "512")->mtu, 512);
  EXPECT_EQ(LoadWith("MC_MAX_INLINE", "0")->max_inline, 0u);
  EXPECT_EQ(LoadWith("MC_MAX_INLINE", "1024")->max_inline, 1024u);
  EXPECT_EQ(LoadWith("MC_IB_TIMEOUT", "1")->ack_timeout, 1);
  EXPECT_EQ(LoadWith("MC_IB_TIMEOUT", "31")->ack_timeout, 31);
}

struct InvalidValue {
  const char* variable;
  const char* value;
  const char* expected;  // part of the range text
};

class InvalidValueTest : public ::testing::TestWithParam<InvalidValue> {};

TEST_P(InvalidValueTest, FailsNamingVariableValueAndRange) {
  const InvalidValue& param = GetParam();
  absl::StatusOr<TransportConfig> config =
      LoadWith(param.variable, param.value);
  ASSERT_FALSE(config.ok()) << param.variable << "=" << param.value;
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(
      config.status().message(),
      AllOf(HasSubstr(std::string(param.variable) + "=\"" + param.value + "\""),
            HasSubstr(param.expected)));
}

INSTANTIATE_TEST_SUITE_P(
    EveryVariable, InvalidValueTest,
    ::testing::Values(InvalidValue{"MC_IB_TC", "abc", "0..255"},
                      InvalidValue{"MC_IB_TC", "256", "0..255"},
                      InvalidValue{"MC_IB_TC", "-2", "0..255"},
                      InvalidValue{"MC_IB_TC", "12x", "0..255"},
                      InvalidValue{"MC_IB_TC", "", "0..255"},
                      InvalidValue{"MC_IB_TC", " 136", "0..255"},
                      InvalidValue{"MC_IB_TC", "136 ", "0..255"},
                      InvalidValue{"MC_IB_TC", "+136", "0..255"},
                      InvalidValue{"MC_IB_TC", "0x88", "0..255"},
                      InvalidValue{"MC_IB_TC", "1.5", "0..255"},
                      InvalidValue{"MC_IB_TC", "-", "0..255"},
                      InvalidValue{"MC_IB_TC", "99999999999999999999",
                                   "0..255"},
                      InvalidValue{"MC_IB_SL", "16", "0..15"},
                      InvalidValue{"MC_IB_SL", "-2", "0..15"},
                      InvalidValue{"MC_IB_SL", "abc", "0..15"},
                      InvalidValue{"MC_IB_SL", "", "0..15"},
                      InvalidValue{"MC_GID_INDEX", "256", "0..255"},
                      InvalidValue{"MC_GID_INDEX", "-2", "0..255"},
                      InvalidValue{"MC_GID_INDEX", "3x", "0..255"},
                      InvalidValue{"MC_IB_PORT", "0", "1..255"},
                      InvalidValue{"MC_IB_PORT", "-1", "1..255"},
                      InvalidValue{"MC_IB_PORT", "256", "1..255"},
                      InvalidValue{"MC_IB_PORT", "", "1..255"},
                      InvalidValue{"MC_MTU", "1500", "512, 1024, 2048, 4096"},
                      InvalidValue{"MC_MTU", "256", "512, 1024, 2048, 4096"},
                      InvalidValue{"MC_MTU", "-1", "512, 1024, 2048, 4096"},
                      InvalidValue{"MC_MTU", "4k", "512, 1024, 2048, 4096"},
                      InvalidValue{"MC_MAX_INLINE", "-2", "0..1024"},
                      InvalidValue{"MC_MAX_INLINE", "1025", "0..1024"},
                      InvalidValue{"MC_MAX_INLINE", "auto", "0..1024"},
                      // 0 is the spec's "wait for ever": never a default.
                      InvalidValue{"MC_IB_TIMEOUT", "0", "1..31"},
                      InvalidValue{"MC_IB_TIMEOUT", "32", "1..31"},
                      InvalidValue{"MC_IB_TIMEOUT", "-2", "1..31"},
                      InvalidValue{"MC_IB_TIMEOUT", "18ms", "1..31"}));

TEST(ConfigTest, EmptyValueSaysItIsEmpty) {
  absl::StatusOr<TransportConfig> config = LoadWith("MC_IB_TC", "");
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(config.status().message(), HasSubstr("set but empty"));
}

TEST(ConfigTest, ValueSetInCodeOverridesEnvironment) {
  TransportOptions options;
  options.traffic_class = 96;
  options.mtu = 2048;
  options.ack_timeout = 17;
  absl::StatusOr<TransportConfig> config = LoadTransportConfig(
      options,
      FakeEnvironment(
          {{"MC_IB_TC", "136"}, {"MC_MTU", "1024"}, {"MC_IB_TIMEOUT", "20"}}));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->traffic_class, 96);
  EXPECT_EQ(config->mtu, 2048);
  EXPECT_EQ(config->ack_timeout, 17);
}

TEST(ConfigTest, CodeMinusOneOverridesEnvironmentToo) {
  TransportOptions options;
  options.traffic_class = -1;
  absl::StatusOr<TransportConfig> config =
      LoadTransportConfig(options, FakeEnvironment({{"MC_IB_TC", "136"}}));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->traffic_class, std::nullopt);
}

TEST(ConfigTest, InvalidValueSetInCodeNamesTheField) {
  TransportOptions options;
  options.traffic_class = 300;
  absl::StatusOr<TransportConfig> config =
      LoadTransportConfig(options, FakeEnvironment({}));
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(config.status().message(),
              HasSubstr("TransportOptions.traffic_class=300"));
}

TEST(ConfigTest, ReadsTheProcessEnvironment) {
  ASSERT_EQ(setenv("MC_IB_TC", "136", 1), 0);
  absl::StatusOr<TransportConfig> config = LoadTransportConfig();
  ASSERT_EQ(unsetenv("MC_IB_TC"), 0);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->traffic_class, 136);

  ASSERT_EQ(setenv("MC_IB_TC", "13six", 1), 0);
  config = LoadTransportConfig();
  ASSERT_EQ(unsetenv("MC_IB_TC"), 0);
  EXPECT_FALSE(config.ok());
}

TEST(ConfigTest, ReadsTheGidSubnet) {
  absl::StatusOr<TransportConfig> config =
      LoadWith("RDMA_TRANSPORT_GID_SUBNET", "10.1.0.0/16");
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_TRUE(config->gid_subnet.has_value());
  EXPECT_TRUE(config->gid_subnet->ipv4);
  EXPECT_EQ(config->gid_subnet->prefix_bits, 96 + 16);
  EXPECT_EQ(config->gid_subnet->text, "10.1.0.0/16");

  config = LoadWith("RDMA_TRANSPORT_GID_SUBNET", "2001:db8::/32");
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_TRUE(config->gid_subnet.has_value());
  EXPECT_FALSE(config->gid_subnet->ipv4);
  EXPECT_EQ(config->gid_subnet->prefix_bits, 32);
}

struct InvalidSubnet {
  const char* value;
  const char* expected;  // what the message must say was wrong
};

class InvalidSubnetTest : public ::testing::TestWithParam<InvalidSubnet> {};

TEST_P(InvalidSubnetTest, FailsNamingVariableValueAndWhatIsWrong) {
  const InvalidSubnet& param = GetParam();
  absl::StatusOr<TransportConfig> config =
      LoadWith("RDMA_TRANSPORT_GID_SUBNET", param.value);
  ASSERT_FALSE(config.ok()) << param.value;
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(config.status().message(),
              AllOf(HasSubstr(std::string("RDMA_TRANSPORT_GID_SUBNET=\"") +
                              param.value + "\" is invalid"),
                    HasSubstr(param.expected), HasSubstr("10.1.0.0/16")));
}

INSTANTIATE_TEST_SUITE_P(
    Malformed, InvalidSubnetTest,
    ::testing::Values(
        InvalidSubnet{"", "set but empty"},
        InvalidSubnet{"10.1.0.0", "no \"/<prefix length>\""},
        InvalidSubnet{"10.1.0/16", "\"10.1.0\" is not an IPv4 address"},
        InvalidSubnet{"10.1.0.256/24", "is not an IPv4 address"},
        InvalidSubnet{" 10.1.0.0/16", "is not an IPv4 address"},
        InvalidSubnet{"10.1.0.0/33",
                      "prefix length \"33\" is not an integer "
                      "0..32"},
        InvalidSubnet{"10.1.0.0/", "prefix length \"\""},
        InvalidSubnet{"10.1.0.0/16 ", "prefix length \"16 \""},
        InvalidSubnet{"10.1.0.0/+16", "prefix length \"+16\""},
        InvalidSubnet{"10.1.0.0/016", "prefix length \"016\""},
        InvalidSubnet{"10.1.0.0/-1", "prefix length \"-1\""},
        InvalidSubnet{"10.1.0.0/16/8", "prefix length \"16/8\""},
        InvalidSubnet{"10.1.2.0/16", "did you mean 10.1.0.0/16?"},
        InvalidSubnet{"2001:db8::1/32", "did you mean 2001:db8::/32?"},
        InvalidSubnet{"2001:db8::/129", "is not an integer 0..128"},
        InvalidSubnet{"2001:db8:::/32", "is not an IPv6 address"},
        InvalidSubnet{"fe80::1%eth0/64", "is not an IPv6 address"}));

TEST(ConfigTest, GidSubnetSetInCodeWinsAndNamesTheField) {
  TransportOptions options;
  options.gid_subnet = "10.2.0.0/16";
  absl::StatusOr<TransportConfig> config = LoadTransportConfig(
      options, FakeEnvironment({{"RDMA_TRANSPORT_GID_SUBNET", "bogus"}}));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->gid_subnet->text, "10.2.0.0/16");

  options.gid_subnet = "10.2.0.0";
  config = LoadTransportConfig(options, FakeEnvironment({}));
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(config.status().message(),
              HasSubstr("TransportOptions.gid_subnet=\"10.2.0.0\""));
}

}  // namespace
}  // namespace rdma_transport
