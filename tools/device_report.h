// File: tools/device_report.h
//
// The report `rdma_devices` prints: for every RDMA device a backend sees,
// its identity, ports, GID table and the inline size the transport
// negotiates on it (by creating one RC QP, as the transport would).
//
// Stateless; thread-compatible. Errors: kNotFound when there is no device at
// all, otherwise the first verbs error met (the report printed so far stays
// in `out`).

#ifndef RDMA_TRANSPORT_TOOLS_DEVICE_REPORT_H_
#define RDMA_TRANSPORT_TOOLS_DEVICE_REPORT_H_

#include <ostream>

#include "absl/status/status.h"
#include "transport/config.h"
#include "verbs_shim/verbs.h"

namespace rdma_transport {

absl::Status WriteDeviceReport(Verbs& verbs, const TransportConfig& config,
                               std::ostream& out);

}  // namespace rdma_transport

#endif  // RDMA_TRANSPORT_TOOLS_DEVICE_REPORT_H_
