// File: tests/readable_now.h
//
// ReadableNow(fd): whether `fd` is readable at this moment (poll(2) with no
// timeout), for the tests that check a readiness fd's contract: readable
// exactly while something is ready. Test-only.
//
//   EXPECT_TRUE(ReadableNow(engine->fd()));

#ifndef RDMA_TRANSPORT_TESTS_READABLE_NOW_H_
#define RDMA_TRANSPORT_TESTS_READABLE_NOW_H_

#include <poll.h>

namespace rdma_transport {

inline bool ReadableNow(int fd) {
  pollfd entry = {fd, POLLIN, 0};
  return poll(&entry, 1, 0) == 1;
}

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TESTS_READABLE_NOW_H_
