// File: transport/wr_id.cc
//
// Names of the work request kinds of wr_id.h, for error messages.

#include "transport/wr_id.h"

namespace rdma_transport {

const char* WrKindOperationName(uint8_t kind) {
  switch (static_cast<WrKind>(kind)) {
    case WrKind::kRecv:
      return "RECV";
    case WrKind::kSendData:
      return "SEND_WITH_IMM";
    case WrKind::kSendCredit:
      return "SEND_WITH_IMM (credit return)";
    case WrKind::kClose:
      return "RDMA_WRITE_WITH_IMM (close)";
    case WrKind::kWrite:
      return "RDMA_WRITE";
    case WrKind::kRead:
      return "RDMA_READ";
    case WrKind::kKeepalive:
      return "RDMA_WRITE (liveness probe)";
    case WrKind::kBind:
      return "BIND_MW (BindRegion)";
    case WrKind::kSrqRecv:
      return "RECV (shared receive queue)";
  }
  return "unknown operation";
}

}  // namespace rdma_transport
