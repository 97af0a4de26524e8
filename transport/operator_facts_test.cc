// Operator facts at start-up, on the simulator: the GID the transport picks
// from tables that do not start at index 0, the address-range filter, the
// address-handle probe, and a host traffic-class override that replaces
// MC_IB_TC on the wire.
#include <arpa/inet.h>

#include <cerrno>
#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sim/fabric.h"
#include "sim/sim_verbs.h"
#include "tests/connection_pair.h"
#include "transport/config.h"
#include "transport/context.h"

namespace rdma_transport {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

// A ConnectX-7 whose table starts with a link-local RoCE v2 entry, a RoCE v1
// one and a global IPv6 one, with its first IPv4 RoCE v2 entry at index 3.
sim::DeviceProfile LateIpv4Profile(const std::string& ipv6) {
  sim::DeviceProfile profile = sim::ConnectX7();
  profile.gid_layout = {
      {0, sim::kLinkLocalGid, IBV_GID_TYPE_ROCE_V2},
      {1, "fe80::5", IBV_GID_TYPE_ROCE_V1},
      {2, ipv6, IBV_GID_TYPE_ROCE_V2},
      {3, sim::kDeviceIpv4Gid, IBV_GID_TYPE_ROCE_V2},
  };
  return profile;
}

TransportConfig Config(const TransportOptions& options) {
  absl::StatusOr<TransportConfig> config = LoadTransportConfig(
      options, [](std::string_view) { return std::optional<std::string>(); });
  EXPECT_TRUE(config.ok()) << config.status();
  return config.value_or(TransportConfig{});
}

// A client and a server context on two new devices of `fabric`.
struct ContextPair {
  std::unique_ptr<Context> client;
  std::unique_ptr<Context> server;
};
absl::StatusOr<ContextPair> OpenPair(sim::Fabric& fabric, Verbs& verbs,
                                     const sim::DeviceProfile& client_device,
                                     const sim::DeviceProfile& server_device,
                                     const TransportConfig& config) {
  ContextPair pair;
  for (auto [profile, context] : {std::pair{&client_device, &pair.client},
                                  std::pair{&server_device, &pair.server}}) {
    absl::StatusOr<std::string> device = fabric.AddDevice(*profile);
    if (!device.ok()) return device.status();
    absl::StatusOr<std::unique_ptr<Context>> opened =
        Context::Open(verbs, *device, config);
    if (!opened.ok()) return opened.status();
    *context = *std::move(opened);
  }
  return pair;
}

TEST(OperatorFactsTest, FirstIpv4EntryAtIndexThreeIsChosenAndExplained) {
  sim::Fabric fabric;
  sim::SimVerbs verbs(&fabric);
  absl::StatusOr<std::string> device = fabric.AddDevice(
      LateIpv4Profile("2001:db8::1"), std::nullopt, "10.1.0.5");
  ASSERT_TRUE(device.ok()) << device.status();
  absl::StatusOr<std::unique_ptr<Context>> context =
      Context::Open(verbs, *device, TransportConfig{});
  ASSERT_TRUE(context.ok()) << context.status();
  EXPECT_EQ((*context)->gid().index, 3u);
  EXPECT_EQ(FormatGid((*context)->gid().gid), "::ffff:10.1.0.5");
  const std::string why = (*context)->gid().why;
  EXPECT_THAT(why, HasSubstr("GID 3 chosen: the first RoCE v2 IPv4 entry of "
                             "sim_cx7_0 port 1 that forms an address handle"));
  EXPECT_THAT(why, HasSubstr("0=fe80::53:49ff:fe4d:0 (RoCE v2): skipped, "
                             "link-local"));
  EXPECT_THAT(why, HasSubstr("1=fe80::5 (RoCE v1): skipped, not RoCE v2"));
  EXPECT_THAT(why, HasSubstr("2=2001:db8::1 (RoCE v2): IPv6 global, ranked "
                             "below IPv4"));
}

// Two IPv4 RoCE v2 entries in different subnets: the lower index without a
// filter, the matching one with it.
sim::DeviceProfile TwoNetworksProfile(int host) {
  sim::DeviceProfile profile = sim::ConnectX7();
  profile.gid_layout = {
      {0, sim::kLinkLocalGid, IBV_GID_TYPE_ROCE_V1},
      {1, "::ffff:192.168.7." + std::to_string(host), IBV_GID_TYPE_ROCE_V2},
      {2, "::ffff:10.1.0." + std::to_string(host), IBV_GID_TYPE_ROCE_V2},
  };
  return profile;
}

TEST(OperatorFactsTest, AddressRangeFilterPicksTheMatchingIpv4Entry) {
  sim::Fabric fabric;
  sim::SimVerbs verbs(&fabric);
  absl::StatusOr<std::string> device = fabric.AddDevice(TwoNetworksProfile(5));
  ASSERT_TRUE(device.ok()) << device.status();

  absl::StatusOr<std::unique_ptr<Context>> unfiltered =
      Context::Open(verbs, *device, TransportConfig{});
  ASSERT_TRUE(unfiltered.ok()) << unfiltered.status();
  EXPECT_EQ((*unfiltered)->gid().index, 1u);

  TransportOptions options;
  options.gid_subnet = "10.1.0.0/16";
  absl::StatusOr<std::unique_ptr<Context>> filtered =
      Context::Open(verbs, *device, Config(options));
  ASSERT_TRUE(filtered.ok()) << filtered.status();
  EXPECT_EQ((*filtered)->gid().index, 2u);
  EXPECT_EQ(FormatGid((*filtered)->gid().gid), "::ffff:10.1.0.5");
  EXPECT_THAT((*filtered)->gid().why,
              HasSubstr("GID 2 chosen: the first RoCE v2 IPv4 entry in "
                        "RDMA_TRANSPORT_GID_SUBNET=10.1.0.0/16"));
  EXPECT_THAT((*filtered)->gid().why,
              HasSubstr("1=::ffff:192.168.7.5 (RoCE v2): skipped, outside "
                        "RDMA_TRANSPORT_GID_SUBNET=10.1.0.0/16"));

  options.gid_subnet = "172.16.0.0/12";
  absl::StatusOr<std::unique_ptr<Context>> none =
      Context::Open(verbs, *device, Config(options));
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(none.status().message(),
              HasSubstr("widen RDMA_TRANSPORT_GID_SUBNET"));
}

TEST(OperatorFactsTest, FilteredConnectionUsesTheMatchingNetwork) {
  sim::Fabric fabric;
  sim::SimVerbs verbs(&fabric);
  TransportOptions options;
  options.gid_subnet = "10.1.0.0/24";
  absl::StatusOr<ContextPair> pair =
      OpenPair(fabric, verbs, TwoNetworksProfile(1), TwoNetworksProfile(2),
               Config(options));
  ASSERT_TRUE(pair.ok()) << pair.status();
  DialResult dial = Dial(*pair->client, *pair->server, ConnectionOptions{});
  ASSERT_TRUE(dial.client.ok()) << dial.client.status();
  ASSERT_TRUE(dial.server.ok()) << dial.server.status();
  ibv_qp_attr attr = {};
  ibv_qp_init_attr init = {};
  ASSERT_TRUE(
      verbs.QueryQp((*dial.client)->qp(), &attr, IBV_QP_AV, &init).ok());
  EXPECT_EQ(attr.ah_attr.grh.sgid_index, 2);
  ibv_gid expected = {};
  ASSERT_EQ(inet_pton(AF_INET6, "::ffff:10.1.0.2", expected.raw), 1);
  EXPECT_EQ(FormatGid(attr.ah_attr.grh.dgid), FormatGid(expected));
}

TEST(OperatorFactsTest, EntryThatCannotFormAnAddressHandleIsSkipped) {
  sim::Fabric fabric;
  sim::SimVerbs verbs(&fabric);
  sim::DeviceProfile profile = TwoNetworksProfile(5);
  profile.gid_layout[1].create_ah_errno = ENETUNREACH;
  absl::StatusOr<std::string> device = fabric.AddDevice(profile);
  ASSERT_TRUE(device.ok()) << device.status();
  absl::StatusOr<std::unique_ptr<Context>> context =
      Context::Open(verbs, *device, TransportConfig{});
  ASSERT_TRUE(context.ok()) << context.status();
  EXPECT_EQ((*context)->gid().index, 2u);
  EXPECT_THAT((*context)->gid().why,
              HasSubstr("1=::ffff:192.168.7.5 (RoCE v2): skipped, cannot form "
                        "an address handle: ibv_create_ah"));
  EXPECT_THAT((*context)->gid().why, HasSubstr("Network is unreachable"));

  // Asked for by index, it is an error, not a silent fallback.
  TransportOptions options;
  options.gid_index = 1;
  absl::StatusOr<std::unique_ptr<Context>> configured =
      Context::Open(verbs, *device, Config(options));
  ASSERT_FALSE(configured.ok());
  EXPECT_EQ(configured.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(configured.status().message(),
              HasSubstr("MC_GID_INDEX=1 (1=::ffff:192.168.7.5 (RoCE v2)) on "
                        "sim_cx7_0 port 1 cannot form an address handle"));
  // The failed Open released its PD and device; the probes left no AH.
  context->reset();
  EXPECT_THAT(LeakReportText(fabric), IsEmpty());
}

// Sends one message each way and returns the fabric's counters.
sim::SimCounters OneRoundTrip(sim::Fabric& fabric, const Context& client,
                              const Context& server) {
  DialResult dial = Dial(client, server, ConnectionOptions{});
  EXPECT_TRUE(dial.client.ok()) << dial.client.status();
  EXPECT_TRUE(dial.server.ok()) << dial.server.status();
  if (!dial.client.ok() || !dial.server.ok()) return {};
  std::vector<std::byte> message(64, std::byte{7});
  std::vector<std::byte> buffer(64);
  EXPECT_TRUE((*dial.client)->Send(message).ok());
  EXPECT_TRUE((*dial.server)->Receive(buffer).ok());
  EXPECT_TRUE((*dial.server)->Send(message).ok());
  EXPECT_TRUE((*dial.client)->Receive(buffer).ok());
  ibv_qp_attr attr = {};
  ibv_qp_init_attr init = {};
  EXPECT_TRUE(client.verbs()
                  .QueryQp((*dial.client)->qp(), &attr, IBV_QP_AV, &init)
                  .ok());
  // The QP keeps what the application asked for, whatever the wire says.
  EXPECT_EQ(attr.ah_attr.grh.traffic_class, 136);
  return fabric.Counters();
}

TEST(OperatorFactsTest, HostTrafficClassOverrideWinsOnTheWireAndIsWarned) {
  sim::Fabric fabric;
  sim::SimVerbs verbs(&fabric);
  sim::DeviceProfile profile = sim::ConnectX7();
  profile.traffic_class_override = 106;
  TransportOptions options;
  options.traffic_class = 136;
  absl::StatusOr<ContextPair> pair =
      OpenPair(fabric, verbs, profile, profile, Config(options));
  ASSERT_TRUE(pair.ok()) << pair.status();
  const std::unique_ptr<Context>& client = pair->client;
  const std::unique_ptr<Context>& server = pair->server;

  ASSERT_TRUE(client->traffic_class_override().has_value());
  EXPECT_EQ(client->traffic_class_override()->traffic_class, 106);
  EXPECT_EQ(client->traffic_class_override()->path,
            "/sys/class/infiniband/sim_cx7_0/tc/1/traffic_class");
  ASSERT_THAT(client->warnings(), SizeIs(1));
  EXPECT_THAT(client->warnings()[0],
              HasSubstr("sim_cx7_0 port 1: /sys/class/infiniband/sim_cx7_0/tc/"
                        "1/traffic_class holds \"Global tclass=106\""));
  EXPECT_THAT(client->warnings()[0], HasSubstr("overriding MC_IB_TC=136"));

  const sim::SimCounters counters = OneRoundTrip(fabric, *client, *server);
  EXPECT_GT(counters.packets_sent, 0u);
  EXPECT_EQ(counters.packets_with_traffic_class(106), counters.packets_sent);
  EXPECT_EQ(counters.packets_with_traffic_class(136), 0u);
  EXPECT_EQ(client->qps_under_traffic_class_override(), 1u);
  EXPECT_EQ(server->qps_under_traffic_class_override(), 1u);
}

TEST(OperatorFactsTest, WithoutAnOverrideTheWireCarriesMcIbTc) {
  sim::Fabric fabric;
  sim::SimVerbs verbs(&fabric);
  TransportOptions options;
  options.traffic_class = 136;
  absl::StatusOr<ContextPair> pair = OpenPair(
      fabric, verbs, sim::ConnectX7(), sim::ConnectX7(), Config(options));
  ASSERT_TRUE(pair.ok()) << pair.status();
  const std::unique_ptr<Context>& client = pair->client;
  const std::unique_ptr<Context>& server = pair->server;
  EXPECT_FALSE(client->traffic_class_override().has_value());
  EXPECT_THAT(client->warnings(), IsEmpty());

  const sim::SimCounters counters = OneRoundTrip(fabric, *client, *server);
  EXPECT_GT(counters.packets_sent, 0u);
  EXPECT_EQ(counters.packets_with_traffic_class(136), counters.packets_sent);
  EXPECT_EQ(client->qps_under_traffic_class_override(), 0u);
}

}  // namespace
}  // namespace rdma_transport
