// File: verbs_shim/verbs_names.h
//
// Names for verbs enums, for error messages and tools, without linking
// libibverbs (the sim and mock backends do not need it). Unknown values give
// "UNKNOWN(<n>)"-style text rather than failing. Thread-safe, allocation-free:
// every function returns a pointer to static storage.

#ifndef RDMA_TRANSPORT_VERBS_SHIM_VERBS_NAMES_H_
#define RDMA_TRANSPORT_VERBS_SHIM_VERBS_NAMES_H_

#include <infiniband/verbs.h>

#include <optional>

namespace rdma_transport {

// "IBV_WC_REM_ACCESS_ERR".
const char* WcStatusName(ibv_wc_status status);
// The text ibv_wc_status_str() gives: "remote access error".
const char* WcStatusDescription(ibv_wc_status status);
// "RDMA_WRITE", "RECV", "RECV_RDMA_WITH_IMM", ...
const char* WcOpcodeName(ibv_wc_opcode opcode);
// "SEND_WITH_IMM", "RDMA_READ", ...
const char* WrOpcodeName(ibv_wr_opcode opcode);
// "RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR".
const char* QpStateName(ibv_qp_state state);
// "IBV_EVENT_QP_FATAL", ...; "IBV_EVENT_UNKNOWN" for a value verbs lacks.
const char* AsyncEventName(ibv_event_type type);
// True for the events whose element is a QP (event.element.qp).
bool IsQpAsyncEvent(ibv_event_type type);

// 256..4096 for a valid ibv_mtu, 0 otherwise.
int MtuBytes(ibv_mtu mtu);
// The ibv_mtu for 256/512/1024/2048/4096 bytes; nullopt for anything else.
std::optional<ibv_mtu> MtuFromBytes(int bytes);

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_VERBS_SHIM_VERBS_NAMES_H_
