#include "tests/test_backend.h"

#include <algorithm>
#include <cstdlib>
#include <string>

namespace rdma_transport {

int Scaled(int count) {
  const char* scale = std::getenv("RDMA_TEST_SCALE");
  int percent = scale != nullptr ? std::atoi(scale) : 100;
  if (percent <= 0) percent = 100;
  return std::max(
      1, static_cast<int>(static_cast<long long>(count) * percent / 100));
}

std::string ListenAddress() {
  const char* address = std::getenv("RDMA_TEST_LISTEN");
  return address != nullptr && *address != '\0' ? address : "127.0.0.1:0";
}

ListenerOptions TestListenerOptions() {
  ListenerOptions options;
  options.allow_unauthenticated = true;
  return options;
}

}  // namespace rdma_transport
