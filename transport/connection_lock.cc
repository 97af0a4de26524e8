// File: transport/connection_lock.cc
//
// The abort of a broken kSerialized promise (connection_lock.h).

#include "transport/connection_lock.h"

#include <cstdio>
#include <cstdlib>

namespace rdma_transport {

void ConnectionLock::Overlapped() {
  std::fprintf(stderr,
               "rdma_transport: two calls at once on a connection made with "
               "ThreadMode::kSerialized (its calls, status(), stats(), its "
               "views' Release() and its engine's calls must not overlap; use "
               "ThreadMode::kShared for a receiving and a sending thread)\n");
  std::abort();
}

}  // namespace rdma_transport
