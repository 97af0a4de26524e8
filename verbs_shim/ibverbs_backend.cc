#include "verbs_shim/ibverbs_backend.h"

#include <cerrno>
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "verbs_shim/verbs_error.h"

namespace rdma_transport {
namespace {

// Calls returning 0 or an errno value (ibv_modify_qp, ibv_post_send, ...).
absl::Status FromReturnCode(std::string_view call, int rc) {
  if (rc == 0) return absl::OkStatus();
  // A few providers return -1 and set errno instead of returning it.
  return VerbsError(call, rc > 0 ? rc : errno);
}

// Calls returning a pointer, or null with errno set.
template <typename T>
absl::StatusOr<T*> FromPointer(std::string_view call, T* result) {
  if (result != nullptr) return result;
  return VerbsError(call, errno);
}

// Devices by name; frees the list on every path.
class DeviceList {
 public:
  DeviceList() : devices_(ibv_get_device_list(&count_)) {}
  ~DeviceList() {
    if (devices_ != nullptr) ibv_free_device_list(devices_);
  }
  DeviceList(const DeviceList&) = delete;
  DeviceList& operator=(const DeviceList&) = delete;

  bool ok() const { return devices_ != nullptr; }
  std::span<ibv_device*> devices() const {
    return {devices_, static_cast<size_t>(count_)};
  }

 private:
  int count_ = 0;
  ibv_device** devices_;
};

}  // namespace

absl::StatusOr<std::vector<std::string>> IbverbsBackend::ListDevices() {
  DeviceList list;
  if (!list.ok()) {
    // ENOSYS: no kernel RDMA support at all; that is "no devices", not a
    // failure of the caller's.
    if (errno == ENOSYS) return std::vector<std::string>{};
    return VerbsError("ibv_get_device_list", errno);
  }
  std::vector<std::string> names;
  for (ibv_device* device : list.devices()) {
    names.emplace_back(ibv_get_device_name(device));
  }
  return names;
}

absl::StatusOr<ibv_context*> IbverbsBackend::OpenDevice(std::string_view name) {
  DeviceList list;
  if (!list.ok()) return VerbsError("ibv_get_device_list", errno);
  for (ibv_device* device : list.devices()) {
    if (name != ibv_get_device_name(device)) continue;
    return FromPointer("ibv_open_device", ibv_open_device(device));
  }
  return absl::NotFoundError(
      absl::StrCat("no RDMA device named \"", std::string(name), "\""));
}

absl::Status IbverbsBackend::CloseDevice(ibv_context* context) {
  return FromReturnCode("ibv_close_device", ibv_close_device(context));
}

absl::Status IbverbsBackend::QueryDevice(ibv_context* context,
                                         ibv_device_attr* attr) {
  return FromReturnCode("ibv_query_device", ibv_query_device(context, attr));
}

absl::Status IbverbsBackend::QueryPort(ibv_context* context, uint8_t port,
                                       ibv_port_attr* attr) {
  return FromReturnCode("ibv_query_port", ibv_query_port(context, port, attr));
}

absl::Status IbverbsBackend::QueryGid(ibv_context* context, uint8_t port,
                                      uint32_t index, ibv_gid_entry* entry) {
  return FromReturnCode("ibv_query_gid_ex",
                        ibv_query_gid_ex(context, port, index, entry, 0));
}

absl::StatusOr<size_t> IbverbsBackend::QueryGidTable(
    ibv_context* context, std::span<ibv_gid_entry> entries) {
  ssize_t count =
      ibv_query_gid_table(context, entries.data(), entries.size(), 0);
  if (count < 0)
    return VerbsError("ibv_query_gid_table", static_cast<int>(-count));
  return static_cast<size_t>(count);
}

absl::StatusOr<ibv_pd*> IbverbsBackend::AllocPd(ibv_context* context) {
  return FromPointer("ibv_alloc_pd", ibv_alloc_pd(context));
}

absl::Status IbverbsBackend::DeallocPd(ibv_pd* pd) {
  return FromReturnCode("ibv_dealloc_pd", ibv_dealloc_pd(pd));
}

absl::StatusOr<ibv_mr*> IbverbsBackend::RegMr(ibv_pd* pd, void* addr,
                                              size_t length, int access) {
  return FromPointer("ibv_reg_mr", ibv_reg_mr(pd, addr, length, access));
}

absl::Status IbverbsBackend::DeregMr(ibv_mr* mr) {
  return FromReturnCode("ibv_dereg_mr", ibv_dereg_mr(mr));
}

absl::StatusOr<ibv_mw*> IbverbsBackend::AllocMw(ibv_pd* pd, ibv_mw_type type) {
  return FromPointer("ibv_alloc_mw", ibv_alloc_mw(pd, type));
}

absl::Status IbverbsBackend::DeallocMw(ibv_mw* mw) {
  return FromReturnCode("ibv_dealloc_mw", ibv_dealloc_mw(mw));
}

absl::StatusOr<ibv_comp_channel*> IbverbsBackend::CreateCompChannel(
    ibv_context* context) {
  return FromPointer("ibv_create_comp_channel",
                     ibv_create_comp_channel(context));
}

absl::Status IbverbsBackend::DestroyCompChannel(ibv_comp_channel* channel) {
  return FromReturnCode("ibv_destroy_comp_channel",
                        ibv_destroy_comp_channel(channel));
}

absl::StatusOr<ibv_cq*> IbverbsBackend::CreateCq(ibv_context* context, int cqe,
                                                 void* cq_context,
                                                 ibv_comp_channel* channel,
                                                 int comp_vector) {
  return FromPointer("ibv_create_cq", ibv_create_cq(context, cqe, cq_context,
                                                    channel, comp_vector));
}

absl::Status IbverbsBackend::DestroyCq(ibv_cq* cq) {
  return FromReturnCode("ibv_destroy_cq", ibv_destroy_cq(cq));
}

absl::Status IbverbsBackend::ReqNotifyCq(ibv_cq* cq, bool solicited_only) {
  return FromReturnCode("ibv_req_notify_cq",
                        ibv_req_notify_cq(cq, solicited_only ? 1 : 0));
}

absl::Status IbverbsBackend::GetCqEvent(ibv_comp_channel* channel, ibv_cq** cq,
                                        void** cq_context) {
  if (ibv_get_cq_event(channel, cq, cq_context) == 0) return absl::OkStatus();
  return VerbsError("ibv_get_cq_event", errno);
}

void IbverbsBackend::AckCqEvents(ibv_cq* cq, unsigned int count) {
  ibv_ack_cq_events(cq, count);
}

absl::StatusOr<ibv_qp*> IbverbsBackend::CreateQp(ibv_pd* pd,
                                                 ibv_qp_init_attr* init_attr) {
  return FromPointer("ibv_create_qp", ibv_create_qp(pd, init_attr));
}

absl::Status IbverbsBackend::ModifyQp(ibv_qp* qp, ibv_qp_attr* attr,
                                      int attr_mask) {
  return FromReturnCode("ibv_modify_qp", ibv_modify_qp(qp, attr, attr_mask));
}

absl::Status IbverbsBackend::QueryQp(ibv_qp* qp, ibv_qp_attr* attr,
                                     int attr_mask,
                                     ibv_qp_init_attr* init_attr) {
  return FromReturnCode("ibv_query_qp",
                        ibv_query_qp(qp, attr, attr_mask, init_attr));
}

absl::Status IbverbsBackend::DestroyQp(ibv_qp* qp) {
  return FromReturnCode("ibv_destroy_qp", ibv_destroy_qp(qp));
}

absl::Status IbverbsBackend::PostSend(ibv_qp* qp, ibv_send_wr* wr,
                                      ibv_send_wr** bad_wr) {
  int rc = ibv_post_send(qp, wr, bad_wr);
  if (rc == 0) [[likely]]
    return absl::OkStatus();
  return FromReturnCode("ibv_post_send", rc);
}

absl::Status IbverbsBackend::PostRecv(ibv_qp* qp, ibv_recv_wr* wr,
                                      ibv_recv_wr** bad_wr) {
  int rc = ibv_post_recv(qp, wr, bad_wr);
  if (rc == 0) [[likely]]
    return absl::OkStatus();
  return FromReturnCode("ibv_post_recv", rc);
}

absl::StatusOr<int> IbverbsBackend::PollCq(ibv_cq* cq, int num_entries,
                                           ibv_wc* wc) {
  int count = ibv_poll_cq(cq, num_entries, wc);
  if (count >= 0) [[likely]]
    return count;
  // ibv_poll_cq returns a negative value on error; providers differ on
  // whether it is -errno or -1.
  return VerbsError("ibv_poll_cq", count < -1 ? -count : EIO);
}

absl::StatusOr<ibv_srq*> IbverbsBackend::CreateSrq(
    ibv_pd* pd, ibv_srq_init_attr* init_attr) {
  return FromPointer("ibv_create_srq", ibv_create_srq(pd, init_attr));
}

absl::Status IbverbsBackend::ModifySrq(ibv_srq* srq, ibv_srq_attr* attr,
                                       int attr_mask) {
  return FromReturnCode("ibv_modify_srq", ibv_modify_srq(srq, attr, attr_mask));
}

absl::Status IbverbsBackend::DestroySrq(ibv_srq* srq) {
  return FromReturnCode("ibv_destroy_srq", ibv_destroy_srq(srq));
}

absl::Status IbverbsBackend::PostSrqRecv(ibv_srq* srq, ibv_recv_wr* wr,
                                         ibv_recv_wr** bad_wr) {
  int rc = ibv_post_srq_recv(srq, wr, bad_wr);
  if (rc == 0) [[likely]]
    return absl::OkStatus();
  return FromReturnCode("ibv_post_srq_recv", rc);
}

absl::StatusOr<ibv_ah*> IbverbsBackend::CreateAh(ibv_pd* pd,
                                                 ibv_ah_attr* attr) {
  return FromPointer("ibv_create_ah", ibv_create_ah(pd, attr));
}

absl::Status IbverbsBackend::DestroyAh(ibv_ah* ah) {
  return FromReturnCode("ibv_destroy_ah", ibv_destroy_ah(ah));
}

absl::StatusOr<Verbs::TrafficClassFile> IbverbsBackend::ReadTrafficClassFile(
    ibv_context* context, uint8_t port) {
  TrafficClassFile file;
  file.path = absl::StrCat("/sys/class/infiniband/",
                           ibv_get_device_name(context->device), "/tc/", port,
                           "/traffic_class");
  std::FILE* stream = std::fopen(file.path.c_str(), "r");
  if (stream == nullptr) {
    if (errno == ENOENT || errno == ENOTDIR) return file;  // no such file
    return VerbsError("open", errno, file.path);
  }
  std::string text;
  char buffer[512];
  size_t read = 0;
  while ((read = std::fread(buffer, 1, sizeof(buffer), stream)) > 0) {
    text.append(buffer, read);
  }
  const bool failed = std::ferror(stream) != 0;
  const int error = errno;
  std::fclose(stream);
  if (failed) return VerbsError("read", error, file.path);
  file.contents = std::move(text);
  return file;
}

absl::Status IbverbsBackend::GetAsyncEvent(ibv_context* context,
                                           ibv_async_event* event) {
  if (ibv_get_async_event(context, event) == 0) return absl::OkStatus();
  return VerbsError("ibv_get_async_event", errno);
}

void IbverbsBackend::AckAsyncEvent(ibv_async_event* event) {
  ibv_ack_async_event(event);
}

}  // namespace rdma_transport
