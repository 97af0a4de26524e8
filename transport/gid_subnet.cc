#include "transport/gid_subnet.h"

#include <arpa/inet.h>

#include <cstring>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace rdma_transport {
namespace {

// 1..3 decimal digits without a leading zero ("0" itself aside), nothing
// else.
std::optional<int> ParsePrefixLength(std::string_view text) {
  if (text.empty() || text.size() > 3) return std::nullopt;
  if (text.size() > 1 && text[0] == '0') return std::nullopt;
  int value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + (c - '0');
  }
  return value;
}

bool BitSet(const std::array<uint8_t, 16>& bytes, int bit) {
  return (bytes[bit / 8] >> (7 - bit % 8)) & 1;
}

}  // namespace

bool GidSubnet::Contains(const uint8_t (&raw)[16]) const {
  const int whole = prefix_bits / 8;
  if (std::memcmp(raw, prefix.data(), whole) != 0) return false;
  const int rest = prefix_bits % 8;
  if (rest == 0) return true;
  const uint8_t mask = static_cast<uint8_t>(0xff << (8 - rest));
  return (raw[whole] & mask) == (prefix[whole] & mask);
}

absl::StatusOr<GidSubnet> ParseGidSubnet(std::string_view text) {
  auto invalid = [text](std::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "\"", std::string(text), "\" is invalid: ", std::string(why),
        "; expected an IPv4 range a.b.c.d/0..32 (e.g. 10.1.0.0/16) or an "
        "IPv6 range x:y::/0..128 (e.g. 2001:db8::/32)"));
  };
  if (text.empty()) {
    return invalid("it is set but empty (unset it to consider every address)");
  }
  const size_t slash = text.find('/');
  if (slash == std::string_view::npos) {
    return invalid("no \"/<prefix length>\"");
  }
  const std::string address(text.substr(0, slash));
  const std::string_view length_text = text.substr(slash + 1);

  GidSubnet subnet;
  subnet.text = std::string(text);
  int max_length = 0;
  in_addr v4 = {};
  if (address.find(':') == std::string::npos) {
    if (inet_pton(AF_INET, address.c_str(), &v4) != 1) {
      return invalid(absl::StrCat("\"", address, "\" is not an IPv4 address"));
    }
    subnet.ipv4 = true;
    subnet.prefix[10] = 0xff;
    subnet.prefix[11] = 0xff;
    std::memcpy(subnet.prefix.data() + 12, &v4.s_addr, 4);
    max_length = 32;
  } else {
    if (inet_pton(AF_INET6, address.c_str(), subnet.prefix.data()) != 1) {
      return invalid(absl::StrCat("\"", address, "\" is not an IPv6 address"));
    }
    max_length = 128;
  }
  const std::optional<int> length = ParsePrefixLength(length_text);
  if (!length.has_value() || *length > max_length) {
    return invalid(absl::StrCat("prefix length \"", std::string(length_text),
                                "\" is not an integer 0..", max_length));
  }
  subnet.prefix_bits = (subnet.ipv4 ? 96 : 0) + *length;
  for (int bit = subnet.prefix_bits; bit < 128; ++bit) {
    if (!BitSet(subnet.prefix, bit)) continue;
    // Suggest the range with the host bits cleared.
    std::array<uint8_t, 16> cleared = subnet.prefix;
    for (int b = subnet.prefix_bits; b < 128; ++b) {
      cleared[b / 8] &= static_cast<uint8_t>(~(1 << (7 - b % 8)));
    }
    char printed[INET6_ADDRSTRLEN] = {};
    if (subnet.ipv4) {
      inet_ntop(AF_INET, cleared.data() + 12, printed, sizeof(printed));
    } else {
      inet_ntop(AF_INET6, cleared.data(), printed, sizeof(printed));
    }
    return invalid(absl::StrCat("the address has bits set beyond the first ",
                                *length, " (did you mean ", printed, "/",
                                *length, "?)"));
  }
  return subnet;
}

}  // namespace rdma_transport
