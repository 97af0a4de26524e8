// GidSubnet::Contains at prefix edges (byte-aligned and not), for IPv4
// ranges against IPv4-mapped GIDs and IPv6 ranges against raw GIDs.
#include "transport/gid_subnet.h"

#include <arpa/inet.h>

#include "gtest/gtest.h"

namespace rdma_transport {
namespace {

struct Gid {
  uint8_t raw[16] = {};
};

Gid GidOf(const char* address) {
  Gid gid;
  EXPECT_EQ(inet_pton(AF_INET6, address, gid.raw), 1) << address;
  return gid;
}

GidSubnet Subnet(const char* text) {
  absl::StatusOr<GidSubnet> subnet = ParseGidSubnet(text);
  EXPECT_TRUE(subnet.ok()) << subnet.status();
  return subnet.value_or(GidSubnet{});
}

TEST(GidSubnetTest, Ipv4RangeMatchesMappedGidsOnly) {
  const GidSubnet subnet = Subnet("10.1.0.0/16");
  EXPECT_TRUE(subnet.Contains(GidOf("::ffff:10.1.0.1").raw));
  EXPECT_TRUE(subnet.Contains(GidOf("::ffff:10.1.255.255").raw));
  EXPECT_FALSE(subnet.Contains(GidOf("::ffff:10.2.0.1").raw));
  EXPECT_FALSE(subnet.Contains(GidOf("::ffff:11.1.0.1").raw));
  // The same 32 bits outside ::ffff:0:0/96 are not an IPv4 address.
  EXPECT_FALSE(subnet.Contains(GidOf("::10.1.0.1").raw));
  EXPECT_FALSE(subnet.Contains(GidOf("fe80::ffff:a01:1").raw));
}

TEST(GidSubnetTest, PrefixNotOnAByteBoundary) {
  const GidSubnet subnet = Subnet("10.1.64.0/18");  // 10.1.64.0-10.1.127.255
  EXPECT_TRUE(subnet.Contains(GidOf("::ffff:10.1.64.0").raw));
  EXPECT_TRUE(subnet.Contains(GidOf("::ffff:10.1.127.255").raw));
  EXPECT_FALSE(subnet.Contains(GidOf("::ffff:10.1.63.255").raw));
  EXPECT_FALSE(subnet.Contains(GidOf("::ffff:10.1.128.0").raw));
}

TEST(GidSubnetTest, WholeRangesAndSingleAddresses) {
  EXPECT_TRUE(Subnet("0.0.0.0/0").Contains(GidOf("::ffff:192.0.2.1").raw));
  EXPECT_FALSE(Subnet("0.0.0.0/0").Contains(GidOf("2001:db8::1").raw));
  EXPECT_TRUE(Subnet("::/0").Contains(GidOf("2001:db8::1").raw));
  EXPECT_TRUE(Subnet("192.0.2.7/32").Contains(GidOf("::ffff:192.0.2.7").raw));
  EXPECT_FALSE(Subnet("192.0.2.7/32").Contains(GidOf("::ffff:192.0.2.6").raw));
}

TEST(GidSubnetTest, Ipv6Range) {
  const GidSubnet subnet = Subnet("2001:db8:1::/48");
  EXPECT_TRUE(subnet.Contains(GidOf("2001:db8:1::5").raw));
  EXPECT_TRUE(subnet.Contains(GidOf("2001:db8:1:ffff::1").raw));
  EXPECT_FALSE(subnet.Contains(GidOf("2001:db8:2::5").raw));
  // An IPv6 range may name IPv4-mapped GIDs explicitly.
  EXPECT_TRUE(
      Subnet("::ffff:10.0.0.0/104").Contains(GidOf("::ffff:10.9.9.9").raw));
}

}  // namespace
}  // namespace rdma_transport
