#include "sim/counters.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "verbs_shim/verbs_names.h"

namespace rdma_transport::sim {
namespace {

// The ibv_event_type enumerator names, in enum order.
constexpr const char* kAsyncEventNames[kAsyncEventTypeCount] = {
    "IBV_EVENT_CQ_ERR",
    "IBV_EVENT_QP_FATAL",
    "IBV_EVENT_QP_REQ_ERR",
    "IBV_EVENT_QP_ACCESS_ERR",
    "IBV_EVENT_COMM_EST",
    "IBV_EVENT_SQ_DRAINED",
    "IBV_EVENT_PATH_MIG",
    "IBV_EVENT_PATH_MIG_ERR",
    "IBV_EVENT_DEVICE_FATAL",
    "IBV_EVENT_PORT_ACTIVE",
    "IBV_EVENT_PORT_ERR",
    "IBV_EVENT_LID_CHANGE",
    "IBV_EVENT_PKEY_CHANGE",
    "IBV_EVENT_SM_CHANGE",
    "IBV_EVENT_SRQ_ERR",
    "IBV_EVENT_SRQ_LIMIT_REACHED",
    "IBV_EVENT_QP_LAST_WQE_REACHED",
    "IBV_EVENT_CLIENT_REREGISTER",
    "IBV_EVENT_GID_CHANGE",
    "IBV_EVENT_WQ_FATAL",
};

}  // namespace

uint64_t SimCounters::total_completions() const {
  uint64_t total = 0;
  for (uint64_t count : completions_by_status) total += count;
  return total;
}

uint64_t SimCounters::total_async_events() const {
  uint64_t total = 0;
  for (uint64_t count : async_events_by_type) total += count;
  return total;
}

SimCounters& SimCounters::operator+=(const SimCounters& other) {
  send_wrs_posted += other.send_wrs_posted;
  recv_wrs_posted += other.recv_wrs_posted;
  post_send_calls += other.post_send_calls;
  post_recv_calls += other.post_recv_calls;
  inline_sends += other.inline_sends;
  payload_bytes_delivered += other.payload_bytes_delivered;
  dma_read_bytes += other.dma_read_bytes;
  packets_sent += other.packets_sent;
  wire_bytes_sent += other.wire_bytes_sent;
  packets_dropped += other.packets_dropped;
  retransmissions += other.retransmissions;
  rnr_naks += other.rnr_naks;
  cq_overruns += other.cq_overruns;
  completions_lost += other.completions_lost;
  memory_registrations += other.memory_registrations;
  bytes_registered += other.bytes_registered;
  qps_created += other.qps_created;
  for (size_t i = 0; i < kWcStatusCount; ++i) {
    completions_by_status[i] += other.completions_by_status[i];
  }
  for (size_t i = 0; i < kAsyncEventTypeCount; ++i) {
    async_events_by_type[i] += other.async_events_by_type[i];
  }
  for (size_t i = 0; i < packets_by_traffic_class.size(); ++i) {
    packets_by_traffic_class[i] += other.packets_by_traffic_class[i];
  }
  return *this;
}

std::string SimCounters::ToString() const {
  std::string text;
  auto add = [&text](const char* name, uint64_t value) {
    if (value == 0) return;
    absl::StrAppend(&text, text.empty() ? "" : " ", name, "=", value);
  };
  add("send_wrs_posted", send_wrs_posted);
  add("recv_wrs_posted", recv_wrs_posted);
  add("post_send_calls", post_send_calls);
  add("post_recv_calls", post_recv_calls);
  add("inline_sends", inline_sends);
  add("memory_registrations", memory_registrations);
  add("bytes_registered", bytes_registered);
  add("qps_created", qps_created);
  add("payload_bytes_delivered", payload_bytes_delivered);
  add("dma_read_bytes", dma_read_bytes);
  add("packets_sent", packets_sent);
  add("wire_bytes_sent", wire_bytes_sent);
  for (size_t i = 0; i < packets_by_traffic_class.size(); ++i) {
    // Class 0 is every packet of a default QP: not worth a line.
    if (i == 0) continue;
    add(absl::StrCat("packets_sent_tc_", i).c_str(),
        packets_by_traffic_class[i]);
  }
  add("packets_dropped", packets_dropped);
  add("retransmissions", retransmissions);
  add("rnr_naks", rnr_naks);
  add("cq_overruns", cq_overruns);
  add("completions_lost", completions_lost);
  for (size_t i = 0; i < kWcStatusCount; ++i) {
    add(WcStatusName(static_cast<ibv_wc_status>(i)), completions_by_status[i]);
  }
  for (size_t i = 0; i < kAsyncEventTypeCount; ++i) {
    add(kAsyncEventNames[i], async_events_by_type[i]);
  }
  return text.empty() ? "(all zero)" : text;
}

}  // namespace rdma_transport::sim
