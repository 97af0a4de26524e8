#include "transport/address_handle_probe.h"

#include <cerrno>

#include "verbs_shim/verbs_error.h"

namespace rdma_transport {

absl::Status ProbeAddressHandle(Verbs& verbs, ibv_pd* pd, uint8_t port,
                                uint32_t index, const ibv_gid& gid) {
  ibv_ah_attr attr = {};
  attr.port_num = port;
  attr.is_global = 1;
  attr.grh.dgid = gid;
  attr.grh.sgid_index = static_cast<uint8_t>(index);
  attr.grh.hop_limit = 64;
  absl::StatusOr<ibv_ah*> ah = verbs.CreateAh(pd, &attr);
  if (!ah.ok()) return ah.status();
  return verbs.DestroyAh(*ah);
}

bool AddressHandlesUnsupported(const absl::Status& status) {
  const int error = VerbsErrno(status);
  return error == EOPNOTSUPP || error == ENOSYS;
}

}  // namespace rdma_transport
