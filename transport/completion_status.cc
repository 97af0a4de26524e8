// File: transport/completion_status.cc
//
// Failed completions and async events, in Status codes and words
// (completion_status.h).

#include "transport/completion_status.h"

#include "absl/strings/str_cat.h"
#include "transport/wr_id.h"
#include "verbs_shim/verbs_names.h"

namespace rdma_transport {

absl::StatusCode CodeForCompletion(ibv_wc_status status) {
  switch (status) {
    case IBV_WC_RETRY_EXC_ERR:
    case IBV_WC_RNR_RETRY_EXC_ERR:
    case IBV_WC_WR_FLUSH_ERR:
    case IBV_WC_RESP_TIMEOUT_ERR:
    case IBV_WC_REM_ABORT_ERR:
    case IBV_WC_FATAL_ERR:
      return absl::StatusCode::kUnavailable;
    case IBV_WC_LOC_PROT_ERR:
    case IBV_WC_LOC_ACCESS_ERR:
    case IBV_WC_REM_ACCESS_ERR:
    case IBV_WC_MW_BIND_ERR:
      return absl::StatusCode::kPermissionDenied;
    case IBV_WC_LOC_LEN_ERR:
    case IBV_WC_REM_INV_REQ_ERR:
    case IBV_WC_REM_INV_RD_REQ_ERR:
      return absl::StatusCode::kInvalidArgument;
    default:
      return absl::StatusCode::kInternal;
  }
}

std::string DescribeFailedCompletion(const std::string& name,
                                     const ibv_wc& wc) {
  std::string detail =
      absl::StrCat(name, ": ", WrKindOperationName(WrIdKind(wc.wr_id)),
                   " completion failed: ", WcStatusName(wc.status), " (",
                   WcStatusDescription(wc.status), "), vendor error 0x",
                   absl::Hex(wc.vendor_err));
  if (wc.status == IBV_WC_RETRY_EXC_ERR) {
    absl::StrAppend(&detail, "; the peer is unreachable or gone");
  }
  return detail;
}

std::string UnexplainedFlushNote() {
  return "; no error completion or async event came before it: the provider "
         "moved the QP to the error state without reporting why (for rxe see "
         "the kernel log; a responder error the peer saw also ends here as a "
         "flush)";
}

const char* AsyncEventMeaning(int type) {
  switch (type) {
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
      return "the QP failed";
    case IBV_EVENT_CQ_ERR:
      return "the completion queue failed";
    case IBV_EVENT_PORT_ERR:
      return "the port went down";
    case IBV_EVENT_DEVICE_FATAL:
      return "the device failed";
    default:
      return "the device reported an error";
  }
}

}  // namespace rdma_transport
