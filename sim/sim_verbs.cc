#include "sim/sim_verbs.h"

#include <endian.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "sim/internal/fabric_core.h"
#include "sim/internal/qp_transitions.h"
#include "sim/sim_env.h"
#include "verbs_shim/verbs_error.h"
#include "verbs_shim/verbs_names.h"

namespace rdma_transport::sim {
namespace {

// Declared before the fabric's lock in a verbs call that may give another
// thread's wait its answer (a completion, an arrival, a flush): tells the
// fabric's SimEnv once the lock is released.
class NotifyWaitersOnReturn {
 public:
  explicit NotifyWaitersOnReturn(Fabric* fabric) : fabric_(fabric) {}
  ~NotifyWaitersOnReturn() { fabric_->env().Notify(); }

 private:
  Fabric* const fabric_;
};

using CallFault = internal::FaultPlan::CallFault;
using internal::AsyncEventTarget;
using internal::Device;
using internal::FabricCore;
using internal::PendingAsyncEvent;
using internal::RawEnum;
using internal::SimAh;
using internal::SimChannel;
using internal::SimContext;
using internal::SimCq;
using internal::SimMr;
using internal::SimMw;
using internal::SimPd;
using internal::SimQp;
using internal::SimSrq;

absl::Status UnknownHandle(std::string_view call, std::string_view kind) {
  return VerbsError(
      call, EINVAL,
      absl::StrCat("unknown or destroyed ", std::string(kind), " handle"));
}

// PostSend, PostRecv and PostSrqRecv: under the fabric's lock, the queue
// `find` gives (or an unknown-handle refusal of `call`, with *bad_wr the
// first WR), `post` to it, then progress. The caller holds a
// NotifyWaitersOnReturn, so waiters are told once the lock is released.
template <typename Wr, typename Find, typename Post>
absl::Status PostWorkRequests(FabricCore& core, Wr* wr, Wr** bad_wr,
                              std::string_view call, std::string_view kind,
                              Find find, Post post) {
  std::lock_guard<internal::CoreMutex> lock(core.mu);
  auto* queue = find(core);
  if (queue == nullptr) [[unlikely]] {
    if (bad_wr != nullptr) *bad_wr = wr;
    return UnknownHandle(call, kind);
  }
  absl::Status status = post(core, *queue);
  core.ProgressLocked();
  return status;
}

// Fires the first matching control-path fault: returns its errno, after
// counting it down.
template <typename Matches>
std::optional<int> ConsumeCallFault(std::vector<CallFault>& faults,
                                    const Device& device, Matches matches) {
  for (auto it = faults.begin(); it != faults.end(); ++it) {
    if (!it->device.empty() && it->device != device.name) continue;
    if (!matches(*it)) continue;
    const int error = it->error;
    if (it->times != kEveryTime && --it->times <= 0) faults.erase(it);
    return error;
  }
  return std::nullopt;
}

absl::Status InjectedError(std::string_view call, int error) {
  return VerbsError(call, error, "injected by sim::FaultInjector");
}

// Blocking (unless the caller set O_NONBLOCK) read of one eventfd count.
// Returns 0 or an errno.
int ReadOneEvent(int fd) {
  while (true) {
    uint64_t value = 0;
    if (read(fd, &value, sizeof(value)) == sizeof(value)) return 0;
    if (errno != EINTR) return errno;
  }
}

// Checks the values of the attributes `mask` sets, as the kernel and the
// providers do before touching the QP.
absl::Status ValidateQpAttributes(const SimQp& qp, const ibv_qp_attr& attr,
                                  int mask) {
  const Device& device = *qp.device;
  const DeviceProfile& profile = device.profile;
  auto refuse = [](std::string detail) {
    return VerbsError("ibv_modify_qp", EINVAL, detail);
  };
  if ((mask & IBV_QP_PKEY_INDEX) && attr.pkey_index >= profile.max_pkeys) {
    return refuse(absl::StrCat("pkey_index ", attr.pkey_index, " not below ",
                               profile.max_pkeys));
  }
  if ((mask & IBV_QP_PORT) && attr.port_num != 1) {
    return refuse(absl::StrCat("port_num ", attr.port_num,
                               ": the device has port 1 only"));
  }
  if (mask & IBV_QP_AV) {
    const ibv_ah_attr& path = attr.ah_attr;
    if (path.port_num != 1) {
      return refuse(absl::StrCat("ah_attr.port_num ", path.port_num,
                                 ": the device has port 1 only"));
    }
    if (device.is_ethernet() && !path.is_global) {
      return refuse("RoCE needs a GRH: ah_attr.is_global must be 1");
    }
    if (path.is_global) {
      const uint8_t index = path.grh.sgid_index;
      if (index >= device.gid_table.size() || !device.gid_valid[index]) {
        return refuse(absl::StrCat("ah_attr.grh.sgid_index ", index,
                                   " is not a valid GID of ", device.name));
      }
    }
  }
  if (mask & IBV_QP_PATH_MTU) {
    const int path_mtu = RawEnum(attr.path_mtu);
    if (path_mtu < IBV_MTU_256 || path_mtu > profile.active_mtu) {
      return refuse(absl::StrCat("path_mtu ", path_mtu,
                                 " invalid or above the port's active MTU ",
                                 MtuBytes(profile.active_mtu)));
    }
  }
  if ((mask & IBV_QP_PATH_MIG_STATE) &&
      (RawEnum(attr.path_mig_state) < IBV_MIG_MIGRATED ||
       RawEnum(attr.path_mig_state) > IBV_MIG_ARMED)) {
    return refuse("path_mig_state invalid");
  }
  if ((mask & IBV_QP_DEST_QPN) && attr.dest_qp_num > 0xFFFFFF) {
    return refuse(absl::StrCat("dest_qp_num ", attr.dest_qp_num,
                               " is not a 24-bit QP number"));
  }
  if ((mask & IBV_QP_MAX_DEST_RD_ATOMIC) &&
      attr.max_dest_rd_atomic > profile.max_qp_rd_atom) {
    return refuse(absl::StrCat("max_dest_rd_atomic ", attr.max_dest_rd_atomic,
                               " above ", profile.max_qp_rd_atom));
  }
  if ((mask & IBV_QP_MAX_QP_RD_ATOMIC) &&
      attr.max_rd_atomic > profile.max_qp_init_rd_atom) {
    return refuse(absl::StrCat("max_rd_atomic ", attr.max_rd_atomic, " above ",
                               profile.max_qp_init_rd_atom));
  }
  if ((mask & IBV_QP_MIN_RNR_TIMER) && attr.min_rnr_timer > 31) {
    return refuse("min_rnr_timer above 31");
  }
  if ((mask & IBV_QP_TIMEOUT) && attr.timeout > 31) {
    return refuse("timeout above 31");
  }
  if ((mask & IBV_QP_RETRY_CNT) && attr.retry_cnt > 7) {
    return refuse("retry_cnt above 7");
  }
  if ((mask & IBV_QP_RNR_RETRY) && attr.rnr_retry > 7) {
    return refuse("rnr_retry above 7");
  }
  return absl::OkStatus();
}

// Copies the attributes `mask` selects into the QP's record.
void RecordQpAttributes(SimQp& qp, const ibv_qp_attr& attr, int mask) {
  ibv_qp_attr& record = qp.attr;
  if (mask & IBV_QP_CUR_STATE) record.cur_qp_state = attr.cur_qp_state;
  if (mask & IBV_QP_EN_SQD_ASYNC_NOTIFY) {
    record.en_sqd_async_notify = attr.en_sqd_async_notify;
  }
  if (mask & IBV_QP_ACCESS_FLAGS) record.qp_access_flags = attr.qp_access_flags;
  if (mask & IBV_QP_PKEY_INDEX) record.pkey_index = attr.pkey_index;
  if (mask & IBV_QP_PORT) record.port_num = attr.port_num;
  if (mask & IBV_QP_QKEY) record.qkey = attr.qkey;
  if (mask & IBV_QP_AV) {
    record.ah_attr = attr.ah_attr;
    qp.route_device = -1;
  }
  if (mask & IBV_QP_PATH_MTU) record.path_mtu = attr.path_mtu;
  if (mask & IBV_QP_TIMEOUT) record.timeout = attr.timeout;
  if (mask & IBV_QP_RETRY_CNT) record.retry_cnt = attr.retry_cnt;
  if (mask & IBV_QP_RNR_RETRY) record.rnr_retry = attr.rnr_retry;
  if (mask & IBV_QP_RQ_PSN) record.rq_psn = attr.rq_psn & 0xFFFFFF;
  if (mask & IBV_QP_MAX_QP_RD_ATOMIC) record.max_rd_atomic = attr.max_rd_atomic;
  if (mask & IBV_QP_ALT_PATH) {
    record.alt_ah_attr = attr.alt_ah_attr;
    record.alt_pkey_index = attr.alt_pkey_index;
    record.alt_port_num = attr.alt_port_num;
    record.alt_timeout = attr.alt_timeout;
  }
  if (mask & IBV_QP_MIN_RNR_TIMER) record.min_rnr_timer = attr.min_rnr_timer;
  if (mask & IBV_QP_SQ_PSN) record.sq_psn = attr.sq_psn & 0xFFFFFF;
  if (mask & IBV_QP_MAX_DEST_RD_ATOMIC) {
    record.max_dest_rd_atomic = attr.max_dest_rd_atomic;
  }
  if (mask & IBV_QP_PATH_MIG_STATE) record.path_mig_state = attr.path_mig_state;
  if (mask & IBV_QP_DEST_QPN) record.dest_qp_num = attr.dest_qp_num;
  qp.attr_mask_set |= mask;
}

}  // namespace

SimVerbs::SimVerbs(Fabric* fabric) : fabric_(fabric) {}

// --- Devices ---

Env& SimVerbs::env() { return fabric_->env(); }

absl::StatusOr<std::vector<std::string>> SimVerbs::ListDevices() {
  return fabric_->DeviceNames();
}

absl::StatusOr<ibv_context*> SimVerbs::OpenDevice(std::string_view name) {
  FabricCore& core = fabric_->core();
  std::lock_guard<internal::CoreMutex> lock(core.mu);
  Device* device = core.FindDevice(name);
  if (device == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("no RDMA device named \"", std::string(name), "\""));
  }
  const int async_fd = eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
  if (async_fd < 0) return VerbsError("ibv_open_device", errno);
  auto context = std::make_unique<SimContext>();
  context->id = core.next_object_id++;
  context->device = device;
  context->verbs.device = &device->verbs_device;
  context->verbs.cmd_fd = -1;
  context->verbs.async_fd = async_fd;
  context->verbs.num_comp_vectors = device->profile.num_comp_vectors;
  ibv_context* handle = &context->verbs;
  core.contexts.emplace(handle, std::move(context));
  return handle;
}

absl::Status SimVerbs::CloseDevice(ibv_context* context) {
  FabricCore& core = fabric_->core();
  std::lock_guard<internal::CoreMutex> lock(core.mu);
  SimContext* sim = core.FindContext(context);
  if (sim == nullptr) return UnknownHandle("ibv_close_device", "context");
  if (sim->live_pds + sim->live_cqs + sim->live_channels > 0) {
    return VerbsError(
        "ibv_close_device", EBUSY,
        absl::StrCat(sim->live_pds, " PDs, ", sim->live_cqs, " CQs and ",
                     sim->live_channels, " completion channels still alive"));
  }
  close(sim->verbs.async_fd);
  core.contexts.erase(context);
  return absl::OkStatus();
}

// --- Queries ---

absl::Status SimVerbs::QueryDevice(ibv_context* context,
                                   ibv_device_attr* attr) {
  FabricCore& core = fabric_->core();
  std::lock_guard<internal::CoreMutex> lock(core.mu);
  SimContext* sim = core.FindContext(context);
  if (sim == nullptr) return UnknownHandle("ibv_query_device", "context");
  if (attr == nullptr) return VerbsError("ibv_query_device", EINVAL);
  const Device& device = *sim->device;
  const DeviceProfile& profile = device.profile;
  *attr = ibv_device_attr{};
  std::snprintf(attr->fw_ver, sizeof(attr->fw_ver), "%s",
                profile.fw_version.c_str());
  attr->node_guid = htobe64(device.node_guid);
  attr->sys_image_guid = htobe64(device.node_guid);
  attr->max_mr_size = profile.max_mr_size;
  attr->page_size_cap = profile.page_size_cap;
  attr->vendor_id = profile.vendor_id;
  attr->vendor_part_id = profile.vendor_part_id;
  attr->hw_ver = profile.hw_ver;
  attr->max_qp = profile.max_qp;
  attr->max_qp_wr = profile.max_qp_wr;
  attr->device_cap_flags = profile.device_cap_flags;
  attr->max_sge = profile.max_sge;
  attr->max_sge_rd = profile.max_sge_rd;
  attr->max_cq = profile.max_cq;
  attr->max_cqe = profile.max_cqe;
  attr->max_mr = profile.max_mr;
  attr->max_mw = profile.max_mw;
  attr->max_srq = profile.max_srq;
  attr->max_srq_wr = profile.max_srq_wr;
  attr->max_srq_sge = profile.max_srq_sge;
  attr->max_pd = profile.max_pd;
  attr->max_qp_rd_atom = profile.max_qp_rd_atom;
  attr->max_res_rd_atom = profile.max_qp_rd_atom * profile.max_qp;
  attr->max_qp_init_rd_atom = profile.max_qp_init_rd_atom;
  attr->atomic_cap = IBV_ATOMIC_NONE;  // Atomics are not simulated.
  attr->max_pkeys = profile.max_pkeys;
  attr->local_ca_ack_delay = 16;
  attr->phys_port_cnt = 1;
  return absl::OkStatus();
}

absl::Status SimVerbs::QueryPort(ibv_context* context, uint8_t port,
                                 ibv_port_attr* attr) {
  FabricCore& core = fabric_->core();
  std::lock_guard<internal::CoreMutex> lock(core.mu);
  SimContext* sim = core.FindContext(context);
  if (sim == nullptr) return UnknownHandle("ibv_query_port", "context");
  if (attr == nullptr || port != 1) {
    return VerbsError("ibv_query_port", EINVAL,
                      absl::StrCat("port ", port, ": the device has port 1"));
  }
  const Device& device = *sim->device;
  const DeviceProfile& profile = device.profile;
  *attr = ibv_port_attr{};
  attr->state = device.port_state();
  attr->max_mtu = profile.max_mtu;
  attr->active_mtu = profile.active_mtu;
  attr->gid_tbl_len = profile.gid_table_length;
  attr->port_cap_flags = IBV_PORT_CM_SUP;
  attr->max_msg_sz = profile.max_msg_size;
  attr->pkey_tbl_len = profile.max_pkeys;
  attr->lid = device.lid;
  attr->sm_lid = device.is_ethernet() ? 0 : 1;
  attr->max_vl_num = 4;
  attr->active_width = profile.active_width;
  attr->active_speed = profile.active_speed;
  attr->phys_state = device.link_up() ? 5 /* link up */ : 3 /* disabled */;
  attr->link_layer = profile.link_layer;
  return absl::OkStatus();
}

absl::Status SimVerbs::QueryGid(ibv_context* context, uint8_t port,
                                uint32_t index, ibv_gid_entry* entry) {
  FabricCore& core = fabric_->core();
  std::lock_guard<internal::CoreMutex> lock(core.mu);
  SimContext* sim = core.FindContext(context);
  if (sim == nullptr) return UnknownHandle("ibv_query_gid_ex", "context");
  const Device& device = *sim->device;
  if (entry == nullptr || port != 1 || index >= device.gid_table.size()) {
    return VerbsError("ibv_query_gid_ex", EINVAL,
                      absl::StrCat("port ", port, " index ", index));
  }
  if (!device.gid_valid[index]) {
    return VerbsError("ibv_query_gid_ex", ENODATA,
                      absl::StrCat("GID index ", index, " is empty"));
  }
  *entry = device.gid_table[index];
  return absl::OkStatus();
}

absl::StatusOr<size_t> SimVerbs::QueryGidTable(
    ibv_context* context, std::span<ibv_gid_entry> entries) {
  FabricCore& core = fabric_->core();
  std::lock_guard<internal::CoreMutex> lock(core.mu);
  SimContext* sim = core.FindContext(context);
  if (sim == nullptr) return UnknownHandle("ibv_query_gid_table", "context");
  const Device& device = *sim->device;
  size_t written = 0;
  for (size_t i = 0; i < device.gid_table.size() && written < entries.size();
       ++i) {
    if (device.gid_valid[i]) entries[written++] = device.gid_table[i];
  }
  return written;
}

// --- Protection domains and memory regions ---

absl::StatusOr<ibv_pd*> SimVerbs::AllocPd(ibv_context* context) {
  FabricCore& core = fabric_->core();
  std::lock_guard<internal::CoreMutex> lock(core.mu);
  SimContext* sim = core.FindContext(context);
  if (sim == nullptr) return UnknownHandle("ibv_alloc_pd", "context");
  Device& device = *sim->device;
  if (device.live_pds >= static_cast<uint32_t>(device.profile.max_pd)) {
    return VerbsError(
        "ibv_alloc_pd", ENOMEM,
        absl::StrCat("max_pd ", device.profile.max_pd, " reached"));
  }
  auto pd = std::make_unique<SimPd>();
  pd->id = core.next_object_id++;
  pd->context = sim;
  pd->verbs.context = context;
  pd->verbs.handle = pd->id;
  ++sim->live_pds;
  ++device.live_pds;
  ibv_pd* handle = &pd->verbs;
  core.pds.emplace(handle, std::move(pd));
  return handle;
}

absl::Status SimVerbs::DeallocPd(ibv_pd* pd) {
  FabricCore& core = fabric_->core();
  std::lock_guard<internal::CoreMutex> lock(core.mu);
  SimPd* sim = core.FindPd(pd);
  if (sim == nullptr) return UnknownHandle("ibv_dealloc_pd", "PD");
  if (sim->live_mrs + sim->live_qps + sim->live_mws + sim->live_ahs +
          sim->live_srqs >
      0) {
    return VerbsError(
        "ibv_dealloc_pd", EBUSY,
        absl::StrCat(sim->live_mrs, " MRs, ", sim->live_mws, " MWs, ",
                     sim->live_qps, " QPs, ", sim->live_srqs, " SRQs and ",
                     sim->live_ahs, " AHs still use it"));
  }
  --sim->context->live_pds;
  --sim->context->device->live_pds;
  core.pds.erase(pd);
  return absl::OkStatus();
}

absl::StatusOr<ibv_mr*> SimVerbs::RegMr(ibv_pd* pd, void* addr, size_t length,
                                        int access) {
  FabricCore& core = fabric_->core();
  std::lock_guard<internal::CoreMutex> lock(core.mu);
  SimPd* sim_pd = core.FindPd(pd);
  if (sim_pd == nullptr) return UnknownHandle("ibv_reg_mr", "PD");
  Device& device = *sim_pd->context->device;
  if (std::optional<int> error = ConsumeCallFault(
          core.faults.reg_mr, device, [](const CallFault&) { return true; })) {
    return InjectedError("ibv_reg_mr", *error);
  }
  const int remote = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC;
  if ((access & remote) != 0 && (access & IBV_ACCESS_LOCAL_WRITE) == 0) {
    return VerbsError("ibv_reg_mr", EINVAL,
                      "remote write or atomic access needs "
                      "IBV_ACCESS_LOCAL_WRITE");
  }
  if (length == 0 || length > device.profile.max_mr_size) {
    return VerbsError("ibv_reg_mr", EINVAL,
                      absl::StrCat("length ", length, " outside 1..",
                                   device.profile.max_mr_size));
  }
  if (addr == nullptr) return VerbsError("ibv_reg_mr", EFAULT, "null address");
  if (device.live_mrs >= static_cast<uint32_t>(device.profile.max_mr)) {
    return VerbsError(
        "ibv_reg_mr", ENOMEM,
        absl::StrCat("max_mr ", device.profile.max_mr, " reached"));
  }
  auto mr = std::make_unique<SimMr>();
  mr->id = core.next_object_id++;
  mr->pd = sim_pd;
  mr->device = &device;
  mr->access = access;
  const uint32_t key = core.next_mr_key++;
  mr->verbs.context = pd->context;
  mr->verbs.pd = pd;
  mr->verbs.addr = addr;
  mr->verbs.length = length;
  mr->verbs.handle = mr->id;
  mr->verbs.lkey = key;
  mr->verbs.rkey = key;
  ++sim_pd->live_mrs;
  ++device.live_mrs;
  ++device.counters.memory_registrations;
  device.counters.bytes_registered += length;
  device.mrs_by_key.Insert(key, mr.get());
  ibv_mr* handle = &mr->verbs;
  core.mrs.emplace(handle, std::move(mr));
  return handle;
}

absl::Status SimVerbs::DeregMr(ibv_mr* mr) {
  FabricCore& core = fabric_->core();
  std::lock_guard<internal::CoreMutex> lock(core.mu);
  SimMr* sim = core.FindMr(mr);
  if (sim == nullptr) return UnknownHandle("ibv_dereg_mr", "MR");
  // IBA 10.6.7.2.6; rxe_dereg_mr() says EINVAL.
  if (sim->bound_mws > 0) {
    return VerbsError(
        "ibv_dereg_mr", EINVAL,
        absl::StrCat(sim->bound_mws, " memory windows are still bound to it"));
  }
  sim->device->mrs_by_key.Erase(sim->verbs.lkey);
  --sim->device->live_mrs;
  --sim->pd->live_mrs;
  core.mrs.erase(mr);
  return absl::OkStatus();
}

// --- Memory windows ---

absl::StatusOr<ibv_mw*> SimVerbs::AllocMw(ibv_pd* pd, ibv_mw_type type) {
  FabricCore& core = fabric_->core();
  std::lock_guard<internal::CoreMutex> lock(core.mu);
  SimPd* sim_pd = core.FindPd(pd);
  if (sim_pd == nullptr) return UnknownHandle("ibv_alloc_mw", "PD");
  Device& device = *sim_pd->context->device;
  if (device.profile.max_mw <= 0) {
    return VerbsError(
        "ibv_alloc_mw", EOPNOTSUPP,
        absl::StrCat(device.profile.model, " has no memory windows"));
  }
  if (RawEnum(type) != IBV_MW_TYPE_2) {
    return VerbsError("ibv_alloc_mw", EOPNOTSUPP,
                      "only type 2 memory windows are simulated");
  }
  if (device.live_mws >= static_cast<uint32_t>(device.profile.max_mw)) {
    return VerbsError(
        "ibv_alloc_mw", ENOMEM,
        absl::StrCat("max_mw ", device.profile.max_mw, " reached"));
  }
  auto mw = std::make_unique<SimMw>();
  mw->id = core.next_object_id++;
  // Indices 0x800000..0xFFFFFF (an rkey's top 24 bits), wrapping after 8 M
  // windows and skipping those still alive on the device.
  uint32_t index = core.next_mw_index;
  while (index > 0xFFFFFF || device.mws_by_index.count(index) > 0) {
    index = index > 0xFFFFFF ? 0x800000 : index + 1;
  }
  core.next_mw_index = index + 1;
  mw->index = index;
  mw->pd = sim_pd;
  mw->device = &device;
  mw->rkey = mw->index << 8;
  mw->verbs.context = pd->context;
  mw->verbs.pd = pd;
  mw->verbs.rkey = mw->rkey;
  mw->verbs.handle = mw->id;
  mw->verbs.type = IBV_MW_TYPE_2;
  ++sim_pd->live_mws;
  ++device.live_mws;
  device.mws_by_index[mw->index] = mw.get();
  ibv_mw* handle = &mw->verbs;
  core.mws.emplace(handle, std::move(mw));
  return handle;
}

absl::Status SimVerbs::DeallocMw(ibv_mw* mw) {
  FabricCore& core = fabric_->core();
  std::lock_guard<internal::CoreMutex> lock(core.mu);
  SimMw* sim = core.FindMw(mw);
  if (sim == nullptr) return UnknownHandle("ibv_dealloc_mw", "MW");
  core.UnbindMwLocked(*sim);
  sim->device->mws_by_index.erase(sim->index);
  --sim->device->live_mws;
  --sim->pd->live_mws;
  core.mws.erase(mw);
  return absl::OkStatus();
}

// --- Completion channels and CQs ---

absl::StatusOr<ibv_comp_channel*> SimVerbs::CreateCompChannel(
    ibv_context* context) {
  FabricCore& core = fabric_->core();
  std::lock_guard<internal::CoreMutex> lock(core.mu);
  SimContext* sim = core.FindContext(context);
  if (sim == nullptr) {
    return UnknownHandle("ibv_create_comp_channel", "context");
  }
  // A semaphore eventfd: one count per pending event, so poll(2) reports it
  // readable while any event is pending and each read takes exactly one.
  const int fd = eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
  if (fd < 0) return VerbsError("ibv_create_comp_channel", errno);
  auto channel = std::make_unique<SimChannel>();
  channel->id = core.next_object_id++;
  channel->context = sim;
  channel->verbs.context = context;
  channel->verbs.fd = fd;
  ++sim->live_channels;
  ibv_comp_channel* handle = &channel->verbs;
  core.channels.emplace(handle, std::move(channel));
  return handle;
}

absl::Status SimVerbs::DestroyCompChannel(ibv_comp_channel* channel) {
  FabricCore& core = fabric_->core();
  std::lock_guard<internal::CoreMutex> lock(core.mu);
  SimChannel* sim = core.FindChannel(channel);
  if (sim == nullptr) {
    return UnknownHandle("ibv_destroy_comp_channel", "completion channel");
  }
  if (sim->live_cqs > 0) {
    return VerbsError("ibv_destroy_comp_channel", EBUSY,
                      absl::StrCat(sim->live_cqs, " CQs still use it"));
  }
  close(sim->verbs.fd);
  --sim->context->live_channels;
  core.channels.erase(channel);
  return absl::OkStatus();
}

absl::StatusOr<ibv_cq*> SimVerbs::CreateCq(ibv_context* context, int cqe,
                                           void* cq_context,
                                           ibv_comp_channel* channel,
                                           int comp_vector) {
  FabricCore& core = fabric_->core();
  std::lock_guard<internal::CoreMutex> lock(core.mu);
  SimContext* sim = core.FindContext(context);
  if (sim == nullptr) return UnknownHandle("ibv_create_cq", "context");
  Device& device = *sim->device;
  SimChannel* sim_channel = nullptr;
  if (channel != nullptr) {
    sim_channel = core.FindChannel(channel);
    if (sim_channel == nullptr) {
      return UnknownHandle("ibv_create_cq", "completion channel");
    }
    if (sim_channel->context != sim) {
      return VerbsError("ibv_create_cq", EINVAL,
                        "the channel belongs to another context");
    }
  }
  if (comp_vector < 0 || comp_vector >= device.profile.num_comp_vectors) {
    return VerbsError("ibv_create_cq", EINVAL,
                      absl::StrCat("comp_vector ", comp_vector, " not below ",
                                   device.profile.num_comp_vectors));
  }
  if (std::optional<int> error =
          ConsumeCallFault(core.faults.create_cq, device,
                           [](const CallFault&) { return true; })) {
    return InjectedError("ibv_create_cq", *error);
  }
  absl::StatusOr<int> depth = GrantCqDepth(device.profile, cqe);
  if (!depth.ok()) return depth.status();
  if (device.live_cqs >= static_cast<uint32_t>(device.profile.max_cq)) {
    return VerbsError(
        "ibv_create_cq", ENOMEM,
        absl::StrCat("max_cq ", device.profile.max_cq, " reached"));
  }
  auto cq = std::make_unique<SimCq>();
  cq->id = core.next_object_id++;
  cq->context = sim;
  cq->channel = sim_channel;
  cq->entries = internal::Ring<internal::CqEntry>(static_cast<size_t>(*depth));
  cq->verbs.context = context;
  cq->verbs.channel = channel;
  cq->verbs.cq_context = cq_context;
  cq->verbs.handle = cq->id;
  cq->verbs.cqe = *depth;
  ++sim->live_cqs;
  ++device.live_cqs;
  if (sim_channel != nullptr) ++sim_channel->live_cqs;
  ibv_cq* handle = &cq->verbs;
  core.cqs_by_id[cq->id] = cq.get();
  core.cqs.emplace(handle, std::move(cq));
  return handle;
}

absl::Status SimVerbs::DestroyCq(ibv_cq* cq) {
  FabricCore& core = fabric_->core();
  std::lock_guard<internal::CoreMutex> lock(core.mu);
  SimCq* sim = core.FindCq(cq);
  if (sim == nullptr) return UnknownHandle("ibv_destroy_cq", "CQ");
  if (sim->live_qps > 0) {
    return VerbsError("ibv_destroy_cq", EBUSY,
                      absl::StrCat(sim->live_qps, " QP queues still use it"));
  }
  // libibverbs would block here until the events are acknowledged; a test
  // is better served by an error it can see.
  if (sim->comp_events_delivered != sim->comp_events_acked ||
      sim->async_events_delivered != sim->async_events_acked) {
    return VerbsError(
        "ibv_destroy_cq", EBUSY,
        "events taken by GetCqEvent/GetAsyncEvent are not yet acknowledged");
  }
  --sim->context->live_cqs;
  --sim->context->device->live_cqs;
  if (sim->channel != nullptr) --sim->channel->live_cqs;
  core.cqs_by_id.erase(sim->id);
  core.cqs.erase(cq);
  return absl::OkStatus();
}

absl::Status SimVerbs::ReqNotifyCq(ibv_cq* cq, bool solicited_only) {
  FabricCore& core = fabric_->core();
  std::lock_guard<internal::CoreMutex> lock(core.mu);
  SimCq* sim = core.FindCq(cq);
  if (sim == nullptr) return UnknownHandle("ibv_req_notify_cq", "CQ");
  // Arming for "next completion" widens an arm for "next solicited".
  sim->armed_solicited_only =
      sim->armed ? (sim->armed_solicited_only && solicited_only)
                 : solicited_only;
  sim->armed = true;
  return absl::OkStatus();
}

absl::Status SimVerbs::GetCqEvent(ibv_comp_channel* channel, ibv_cq** cq,
                                  void** cq_context) {
  FabricCore& core = fabric_->core();
  int fd = -1;
  {
    std::lock_guard<internal::CoreMutex> lock(core.mu);
    SimChannel* sim = core.FindChannel(channel);
    if (sim == nullptr) {
      return UnknownHandle("ibv_get_cq_event", "completion channel");
    }
    if (cq == nullptr || cq_context == nullptr) {
      return VerbsError("ibv_get_cq_event", EINVAL);
    }
    fd = sim->verbs.fd;
  }
  while (true) {
    // Outside the lock: this blocks unless the caller made the fd
    // non-blocking.
    if (int error = ReadOneEvent(fd); error != 0) {
      return VerbsError("ibv_get_cq_event", error);
    }
    std::lock_guard<internal::CoreMutex> lock(core.mu);
    SimChannel* sim = core.FindChannel(channel);
    if (sim == nullptr) {
      return UnknownHandle("ibv_get_cq_event", "completion channel");
    }
    if (sim->pending_cq_ids.empty()) continue;
    const uint32_t cq_id = sim->pending_cq_ids.Front();
    sim->pending_cq_ids.Pop();
    auto it = core.cqs_by_id.find(cq_id);
    if (it == core.cqs_by_id.end()) continue;  // The CQ was destroyed.
    SimCq* sim_cq = it->second;
    ++sim_cq->comp_events_delivered;
    *cq = &sim_cq->verbs;
    *cq_context = sim_cq->verbs.cq_context;
    return absl::OkStatus();
  }
}

void SimVerbs::AckCqEvents(ibv_cq* cq, unsigned int count) {
  FabricCore& core = fabric_->core();
  std::lock_guard<internal::CoreMutex> lock(core.mu);
  SimCq* sim = core.FindCq(cq);
  if (sim == nullptr) return;
  sim->comp_events_acked += count;
  sim->verbs.comp_events_completed += count;
}

// --- Shared receive queues ---

absl::StatusOr<ibv_srq*> SimVerbs::CreateSrq(ibv_pd* pd,
                                             ibv_srq_init_attr* init_attr) {
  FabricCore& core = fabric_->core();
  std::lock_guard<internal::CoreMutex> lock(core.mu);
  SimPd* sim_pd = core.FindPd(pd);
  if (sim_pd == nullptr) return UnknownHandle("ibv_create_srq", "PD");
  if (init_attr == nullptr) return VerbsError("ibv_create_srq", EINVAL);
  Device& device = *sim_pd->context->device;
  const DeviceProfile& profile = device.profile;
  if (profile.max_srq <= 0) {
    return VerbsError(
        "ibv_create_srq", EOPNOTSUPP,
        absl::StrCat(profile.model, " has no shared receive queues"));
  }
  if (device.dead) {
    return VerbsError("ibv_create_srq", EIO,
                      absl::StrCat(device.name, " is dead (injected)"));
  }
  const ibv_srq_attr& asked = init_attr->attr;
  if (asked.max_wr == 0 ||
      asked.max_wr > static_cast<uint32_t>(profile.max_srq_wr) ||
      asked.max_sge == 0 ||
      asked.max_sge > static_cast<uint32_t>(profile.max_srq_sge)) {
    return VerbsError(
        "ibv_create_srq", EINVAL,
        absl::StrCat("max_wr ", asked.max_wr, " / max_sge ", asked.max_sge,
                     " not in 1..", profile.max_srq_wr, " / 1..",
                     profile.max_srq_sge));
  }
  if (asked.srq_limit > asked.max_wr) {
    return VerbsError("ibv_create_srq", EINVAL,
                      absl::StrCat("srq_limit ", asked.srq_limit,
                                   " above max_wr ", asked.max_wr));
  }
  if (device.live_srqs >= static_cast<uint32_t>(profile.max_srq)) {
    return VerbsError("ibv_create_srq", ENOMEM,
                      absl::StrCat("max_srq ", profile.max_srq, " reached"));
  }
  auto srq = std::make_unique<SimSrq>();
  srq->id = core.next_object_id++;
  srq->pd = sim_pd;
  srq->context = sim_pd->context;
  srq->device = &device;
  srq->max_wr = asked.max_wr;
  srq->max_sge = asked.max_sge;
  srq->wqes.resize(asked.max_wr);
  srq->sges.resize(size_t{asked.max_wr} * asked.max_sge);
  srq->limit = asked.srq_limit;
  srq->verbs.context = pd->context;
  srq->verbs.srq_context = init_attr->srq_context;
  srq->verbs.pd = pd;
  srq->verbs.handle = srq->id;
  ++sim_pd->live_srqs;
  ++device.live_srqs;
  ibv_srq* handle = &srq->verbs;
  core.srqs.emplace(handle, std::move(srq));
  return handle;
}

absl::Status SimVerbs::ModifySrq(ibv_srq* srq, ibv_srq_attr* attr,
                                 int attr_mask) {
  FabricCore& core = fabric_->core();
  std::lock_guard<internal::CoreMutex> lock(core.mu);
  SimSrq* sim = core.FindSrq(srq);
  if (sim == nullptr) return UnknownHandle("ibv_modify_srq", "SRQ");
  if (attr == nullptr) return VerbsError("ibv_modify_srq", EINVAL);
  if (attr_mask & IBV_SRQ_MAX_WR) {
    // As mlx5, which has no IBV_DEVICE_SRQ_RESIZE.
    return VerbsError("ibv_modify_srq", EINVAL,
                      "resizing a shared receive queue is not supported");
  }
  if (attr_mask & IBV_SRQ_LIMIT) {
    if (attr->srq_limit > sim->max_wr) {
      return VerbsError("ibv_modify_srq", EINVAL,
                        absl::StrCat("srq_limit ", attr->srq_limit,
                                     " above max_wr ", sim->max_wr));
    }
    sim->limit = attr->srq_limit;
    // Already below it: the event comes at the next receive taken.
  }
  return absl::OkStatus();
}

absl::Status SimVerbs::DestroySrq(ibv_srq* srq) {
  FabricCore& core = fabric_->core();
  std::lock_guard<internal::CoreMutex> lock(core.mu);
  SimSrq* sim = core.FindSrq(srq);
  if (sim == nullptr) return UnknownHandle("ibv_destroy_srq", "SRQ");
  if (!sim->qp_nums.empty()) {
    return VerbsError("ibv_destroy_srq", EBUSY,
                      absl::StrCat(sim->qp_nums.size(),
                                   " QP(s) still take receives from it"));
  }
  if (sim->async_events_delivered != sim->async_events_acked) {
    return VerbsError("ibv_destroy_srq", EBUSY,
                      "async events taken by GetAsyncEvent are not yet "
                      "acknowledged");
  }
  --sim->pd->live_srqs;
  --sim->device->live_srqs;
  core.srqs.erase(srq);
  return absl::OkStatus();
}

// --- Queue pairs ---

absl::StatusOr<ibv_qp*> SimVerbs::CreateQp(ibv_pd* pd,
                                           ibv_qp_init_attr* init_attr) {
  FabricCore& core = fabric_->core();
  std::lock_guard<internal::CoreMutex> lock(core.mu);
  SimPd* sim_pd = core.FindPd(pd);
  if (sim_pd == nullptr) return UnknownHandle("ibv_create_qp", "PD");
  if (init_attr == nullptr) return VerbsError("ibv_create_qp", EINVAL);
  SimContext* context = sim_pd->context;
  Device& device = *context->device;
  if (RawEnum(init_attr->qp_type) != IBV_QPT_RC) {
    return VerbsError("ibv_create_qp", EOPNOTSUPP,
                      "the simulator implements RC QPs only");
  }
  SimSrq* srq = nullptr;
  if (init_attr->srq != nullptr) {
    srq = core.FindSrq(init_attr->srq);
    if (srq == nullptr) return UnknownHandle("ibv_create_qp", "SRQ");
    if (srq->context != context) {
      return VerbsError("ibv_create_qp", EINVAL,
                        "the SRQ and the PD belong to different contexts");
    }
  }
  SimCq* send_cq = core.FindCq(init_attr->send_cq);
  SimCq* recv_cq = core.FindCq(init_attr->recv_cq);
  if (send_cq == nullptr || recv_cq == nullptr) {
    return UnknownHandle("ibv_create_qp", "send_cq/recv_cq");
  }
  if (send_cq->context != context || recv_cq->context != context) {
    return VerbsError("ibv_create_qp", EINVAL,
                      "the CQs and the PD belong to different contexts");
  }
  if (device.dead) {
    return VerbsError("ibv_create_qp", EIO,
                      absl::StrCat(device.name, " is dead (injected)"));
  }
  const uint32_t asked_inline = init_attr->cap.max_inline_data;
  if (std::optional<int> error = ConsumeCallFault(
          core.faults.create_qp, device, [asked_inline](const CallFault& f) {
            return !f.when_inline_above.has_value() ||
                   asked_inline > *f.when_inline_above;
          })) {
    return InjectedError("ibv_create_qp", *error);
  }
  // A QP on an SRQ has no receive queue of its own: the provider ignores
  // max_recv_wr/max_recv_sge and reports 0.
  ibv_qp_cap requested = init_attr->cap;
  if (srq != nullptr) requested.max_recv_wr = requested.max_recv_sge = 0;
  absl::StatusOr<ibv_qp_cap> granted = GrantQpCaps(device.profile, requested);
  if (!granted.ok()) return granted.status();
  if (device.live_qps >= static_cast<uint32_t>(device.profile.max_qp)) {
    return VerbsError(
        "ibv_create_qp", ENOMEM,
        absl::StrCat("max_qp ", device.profile.max_qp, " reached"));
  }
  init_attr->cap = *granted;

  auto qp = std::make_unique<SimQp>();
  qp->id = core.next_object_id++;
  qp->pd = sim_pd;
  qp->context = context;
  qp->device = &device;
  qp->send_cq = send_cq;
  qp->recv_cq = recv_cq;
  qp->srq = srq;
  qp->init_attr = *init_attr;
  const ibv_qp_cap& cap = *granted;
  // Everything the data path needs, allocated once.
  qp->sq.resize(cap.max_send_wr);
  qp->sq_sges.resize(size_t{cap.max_send_wr} * cap.max_send_sge);
  qp->sq_inline.resize(size_t{cap.max_send_wr} * cap.max_inline_data);
  qp->rq.resize(cap.max_recv_wr);
  qp->rq_sges.resize(size_t{cap.max_recv_wr} * cap.max_recv_sge);
  // The index of the packet buffers, for the first packets in flight; the
  // buffers themselves come with the traffic (link.cc).
  ibv_qp& verbs = qp->verbs;
  verbs.context = &context->verbs;
  verbs.qp_context = init_attr->qp_context;
  verbs.pd = pd;
  verbs.send_cq = init_attr->send_cq;
  verbs.recv_cq = init_attr->recv_cq;
  verbs.handle = qp->id;
  verbs.state = IBV_QPS_RESET;
  verbs.qp_type = IBV_QPT_RC;
  ++send_cq->live_qps;
  ++recv_cq->live_qps;
  ++sim_pd->live_qps;
  ++device.live_qps;
  ++device.counters.qps_created;
  core.RegisterQpLocked(*qp);
  verbs.qp_num = qp->qp_num;
  verbs.srq = init_attr->srq;
  if (srq != nullptr) srq->qp_nums.push_back(qp->qp_num);
  ibv_qp* handle = &qp->verbs;
  core.qps.emplace(handle, std::move(qp));
  return handle;
}

absl::Status SimVerbs::ModifyQp(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask) {
  const NotifyWaitersOnReturn notify(fabric_);
  FabricCore& core = fabric_->core();
  std::lock_guard<internal::CoreMutex> lock(core.mu);
  SimQp* sim = core.FindQp(qp);
  if (sim == nullptr) return UnknownHandle("ibv_modify_qp", "QP");
  if (attr == nullptr) return VerbsError("ibv_modify_qp", EINVAL);
  const ibv_qp_state from = sim->state;
  const int requested = (attr_mask & IBV_QP_STATE) ? RawEnum(attr->qp_state)
                                                   : static_cast<int>(from);
  if (requested < IBV_QPS_RESET || requested > IBV_QPS_ERR) {
    return VerbsError("ibv_modify_qp", EINVAL,
                      absl::StrCat("qp_state ", requested));
  }
  const auto to = static_cast<ibv_qp_state>(requested);
  const std::string move =
      absl::StrCat(QpStateName(from), "->", QpStateName(to));
  if ((attr_mask & IBV_QP_CUR_STATE) &&
      RawEnum(attr->cur_qp_state) != static_cast<int>(from)) {
    return VerbsError(
        "ibv_modify_qp", EINVAL,
        absl::StrCat(move, ": cur_qp_state is ", RawEnum(attr->cur_qp_state)));
  }
  const internal::QpTransition rule = internal::RcQpTransition(from, to);
  if (!rule.legal) {
    return VerbsError("ibv_modify_qp", EINVAL,
                      absl::StrCat(move, " is not a legal RC transition"));
  }
  if (const int missing = rule.required_mask & ~attr_mask; missing != 0) {
    return VerbsError(
        "ibv_modify_qp", EINVAL,
        absl::StrCat(move, " needs ", internal::QpAttrMaskNames(missing)));
  }
  if (const int extra =
          attr_mask & ~(rule.required_mask | rule.optional_mask | IBV_QP_STATE);
      extra != 0) {
    return VerbsError("ibv_modify_qp", EINVAL,
                      absl::StrCat(move, " does not take ",
                                   internal::QpAttrMaskNames(extra)));
  }
  if (absl::Status valid = ValidateQpAttributes(*sim, *attr, attr_mask);
      !valid.ok()) {
    return valid;
  }
  Device& device = *sim->device;
  if (device.dead && to != IBV_QPS_RESET && to != IBV_QPS_ERR) {
    return VerbsError("ibv_modify_qp", EIO,
                      absl::StrCat(device.name, " is dead (injected)"));
  }
  if (std::optional<int> error = ConsumeCallFault(
          core.faults.modify_qp, device, [from, to](const CallFault& f) {
            return f.from == from && f.to == to;
          })) {
    return InjectedError("ibv_modify_qp", *error);
  }

  RecordQpAttributes(*sim, *attr, attr_mask);
  if (attr_mask & IBV_QP_STATE) {
    switch (to) {
      case IBV_QPS_RESET:
        core.ResetQpLocked(*sim);
        break;
      case IBV_QPS_ERR:
        core.EnterErrorLocked(*sim);
        break;
      case IBV_QPS_RTR:
        if (from == IBV_QPS_INIT) sim->expected_psn = sim->attr.rq_psn;
        sim->state = to;
        break;
      case IBV_QPS_RTS:
        if (from == IBV_QPS_RTR) {
          sim->next_psn = sim->una_psn = sim->attr.sq_psn;
        }
        sim->state = to;
        break;
      default:
        sim->state = to;
        break;
    }
    sim->verbs.state = sim->state;
    core.KickSendQueueLocked(*sim);
  }
  core.ProgressLocked();
  return absl::OkStatus();
}

absl::Status SimVerbs::QueryQp(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask,
                               ibv_qp_init_attr* init_attr) {
  FabricCore& core = fabric_->core();
  std::lock_guard<internal::CoreMutex> lock(core.mu);
  SimQp* sim = core.FindQp(qp);
  if (sim == nullptr) return UnknownHandle("ibv_query_qp", "QP");
  if (attr == nullptr || init_attr == nullptr) {
    return VerbsError("ibv_query_qp", EINVAL);
  }
  // Like the providers, every attribute is returned whatever the mask.
  *attr = sim->attr;
  attr->qp_state = sim->state;
  attr->cur_qp_state = sim->state;
  attr->cap = sim->init_attr.cap;
  attr->sq_draining = 0;
  *init_attr = sim->init_attr;
  return absl::OkStatus();
}

absl::Status SimVerbs::DestroyQp(ibv_qp* qp) {
  const NotifyWaitersOnReturn notify(fabric_);
  FabricCore& core = fabric_->core();
  std::lock_guard<internal::CoreMutex> lock(core.mu);
  SimQp* sim = core.FindQp(qp);
  if (sim == nullptr) return UnknownHandle("ibv_destroy_qp", "QP");
  // libibverbs would block until the QP's async events are acknowledged.
  if (sim->async_events_delivered != sim->async_events_acked) {
    return VerbsError("ibv_destroy_qp", EBUSY,
                      "async events taken by GetAsyncEvent are not yet "
                      "acknowledged");
  }
  core.RemoveQpLocked(*sim);
  core.ProgressLocked();
  return absl::OkStatus();
}

// --- Data path ---

absl::Status SimVerbs::PostSend(ibv_qp* qp, ibv_send_wr* wr,
                                ibv_send_wr** bad_wr) {
  const NotifyWaitersOnReturn notify(fabric_);
  return PostWorkRequests(
      fabric_->core(), wr, bad_wr, "ibv_post_send", "QP",
      [qp](FabricCore& core) { return core.FindQp(qp); },
      [wr, bad_wr](FabricCore& core, SimQp& sim) {
        return core.PostSendLocked(sim, wr, bad_wr);
      });
}

absl::Status SimVerbs::PostRecv(ibv_qp* qp, ibv_recv_wr* wr,
                                ibv_recv_wr** bad_wr) {
  const NotifyWaitersOnReturn notify(fabric_);
  return PostWorkRequests(
      fabric_->core(), wr, bad_wr, "ibv_post_recv", "QP",
      [qp](FabricCore& core) { return core.FindQp(qp); },
      [wr, bad_wr](FabricCore& core, SimQp& sim) {
        return core.PostRecvLocked(sim, wr, bad_wr);
      });
}

absl::Status SimVerbs::PostSrqRecv(ibv_srq* srq, ibv_recv_wr* wr,
                                   ibv_recv_wr** bad_wr) {
  const NotifyWaitersOnReturn notify(fabric_);
  return PostWorkRequests(
      fabric_->core(), wr, bad_wr, "ibv_post_srq_recv", "SRQ",
      [srq](FabricCore& core) { return core.FindSrq(srq); },
      [wr, bad_wr](FabricCore& core, SimSrq& sim) {
        return core.PostSrqRecvLocked(sim, wr, bad_wr);
      });
}

absl::StatusOr<int> SimVerbs::PollCq(ibv_cq* cq, int num_entries, ibv_wc* wc) {
  FabricCore& core = fabric_->core();
  std::lock_guard<internal::CoreMutex> lock(core.mu);
  SimCq* sim = core.FindCq(cq);
  if (sim == nullptr) [[unlikely]] {
    return UnknownHandle("ibv_poll_cq", "CQ");
  }
  return core.PollCqLocked(*sim, num_entries, wc);
}

// --- Asynchronous events ---

absl::StatusOr<ibv_ah*> SimVerbs::CreateAh(ibv_pd* pd, ibv_ah_attr* attr) {
  FabricCore& core = fabric_->core();
  std::lock_guard<internal::CoreMutex> lock(core.mu);
  SimPd* sim_pd = core.FindPd(pd);
  if (sim_pd == nullptr) return UnknownHandle("ibv_create_ah", "PD");
  const Device& device = *sim_pd->context->device;
  if (!device.profile.supports_address_handles) {
    return VerbsError(
        "ibv_create_ah", EOPNOTSUPP,
        absl::StrCat(device.profile.model, " has no address handles"));
  }
  if (attr == nullptr || attr->port_num != 1) {
    return VerbsError("ibv_create_ah", EINVAL,
                      "port_num must be 1 (the device has port 1 only)");
  }
  if (device.is_ethernet() && !attr->is_global) {
    return VerbsError("ibv_create_ah", EINVAL,
                      "RoCE needs a GRH: is_global must be 1");
  }
  if (attr->is_global) {
    const uint8_t index = attr->grh.sgid_index;
    if (index >= device.gid_table.size() || !device.gid_valid[index]) {
      return VerbsError("ibv_create_ah", EINVAL,
                        absl::StrCat("grh.sgid_index ", index,
                                     " is not a valid GID of ", device.name));
    }
    if (int error = device.gid_create_ah_errno[index]; error != 0) {
      return VerbsError("ibv_create_ah", error,
                        absl::StrCat("no route from GID ", index, " of ",
                                     device.name, " (DeviceProfile)"));
    }
  }
  auto ah = std::make_unique<SimAh>();
  ah->id = core.next_object_id++;
  ah->pd = sim_pd;
  ah->attr = *attr;
  ah->verbs.context = pd->context;
  ah->verbs.pd = pd;
  ah->verbs.handle = ah->id;
  ++sim_pd->live_ahs;
  ibv_ah* handle = &ah->verbs;
  core.ahs.emplace(handle, std::move(ah));
  return handle;
}

absl::Status SimVerbs::DestroyAh(ibv_ah* ah) {
  FabricCore& core = fabric_->core();
  std::lock_guard<internal::CoreMutex> lock(core.mu);
  SimAh* sim = core.FindAh(ah);
  if (sim == nullptr) return UnknownHandle("ibv_destroy_ah", "AH");
  --sim->pd->live_ahs;
  core.ahs.erase(ah);
  return absl::OkStatus();
}

absl::StatusOr<Verbs::TrafficClassFile> SimVerbs::ReadTrafficClassFile(
    ibv_context* context, uint8_t port) {
  FabricCore& core = fabric_->core();
  std::lock_guard<internal::CoreMutex> lock(core.mu);
  SimContext* sim = core.FindContext(context);
  if (sim == nullptr) return UnknownHandle("read traffic_class", "context");
  const DeviceProfile& profile = sim->device->profile;
  TrafficClassFile file;
  file.path = absl::StrCat("/sys/class/infiniband/", sim->device->name, "/tc/",
                           port, "/traffic_class");
  if (port != 1) return file;  // one port: no such directory
  if (profile.traffic_class_override.has_value()) {
    file.contents = absl::StrCat(
        "Global tclass=", int{*profile.traffic_class_override}, "\n");
  } else if (profile.has_traffic_class_file) {
    file.contents = "";
  }
  return file;
}

absl::Status SimVerbs::GetAsyncEvent(ibv_context* context,
                                     ibv_async_event* event) {
  FabricCore& core = fabric_->core();
  int fd = -1;
  {
    std::lock_guard<internal::CoreMutex> lock(core.mu);
    SimContext* sim = core.FindContext(context);
    if (sim == nullptr) return UnknownHandle("ibv_get_async_event", "context");
    if (event == nullptr) return VerbsError("ibv_get_async_event", EINVAL);
    fd = sim->verbs.async_fd;
  }
  while (true) {
    if (int error = ReadOneEvent(fd); error != 0) {
      return VerbsError("ibv_get_async_event", error);
    }
    std::lock_guard<internal::CoreMutex> lock(core.mu);
    SimContext* sim = core.FindContext(context);
    if (sim == nullptr) return UnknownHandle("ibv_get_async_event", "context");
    if (sim->async_events.empty()) continue;
    const PendingAsyncEvent pending = sim->async_events.front();
    sim->async_events.pop_front();
    // Events of objects destroyed since are dropped, as the kernel does.
    if (pending.target == AsyncEventTarget::kQp) {
      SimQp* qp = core.FindQpByNum(pending.target_id);
      if (qp == nullptr || &qp->verbs != pending.event.element.qp) continue;
      ++qp->async_events_delivered;
    } else if (pending.target == AsyncEventTarget::kCq) {
      auto it = core.cqs_by_id.find(pending.target_id);
      if (it == core.cqs_by_id.end()) continue;
      ++it->second->async_events_delivered;
    } else if (pending.target == AsyncEventTarget::kSrq) {
      SimSrq* srq = core.FindSrqById(pending.target_id);
      if (srq == nullptr) continue;
      ++srq->async_events_delivered;
    }
    *event = pending.event;
    return absl::OkStatus();
  }
}

void SimVerbs::AckAsyncEvent(ibv_async_event* event) {
  if (event == nullptr) return;
  FabricCore& core = fabric_->core();
  std::lock_guard<internal::CoreMutex> lock(core.mu);
  if (IsQpAsyncEvent(event->event_type)) {
    if (SimQp* qp = core.FindQp(event->element.qp); qp != nullptr) {
      ++qp->async_events_acked;
      ++qp->verbs.events_completed;
    }
  } else if (event->event_type == IBV_EVENT_CQ_ERR) {
    if (SimCq* cq = core.FindCq(event->element.cq); cq != nullptr) {
      ++cq->async_events_acked;
      ++cq->verbs.async_events_completed;
    }
  } else if (event->event_type == IBV_EVENT_SRQ_LIMIT_REACHED ||
             event->event_type == IBV_EVENT_SRQ_ERR) {
    if (SimSrq* srq = core.FindSrq(event->element.srq); srq != nullptr) {
      ++srq->async_events_acked;
      ++srq->verbs.events_completed;
    }
  }
}

}  // namespace rdma_transport::sim
