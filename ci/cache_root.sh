# Sourced by CI scripts: cache_root prints the directory where CI keeps what
# it downloads or builds between runs (kernels, apt lists, chroots):
# $SOFTROCE_CACHE_DIR when set, else /var/cache/rdma_transport when it can be
# created and written, else ${XDG_CACHE_HOME:-~/.cache}/rdma_transport.
#
#   source "$(dirname "${BASH_SOURCE[0]}")/cache_root.sh"
#   kernels=$(cache_root)/kernel
cache_root() {
  if [[ -n "${SOFTROCE_CACHE_DIR:-}" ]]; then
    echo "$SOFTROCE_CACHE_DIR"
  elif mkdir -p /var/cache/rdma_transport 2>/dev/null && [[ -w /var/cache/rdma_transport ]]; then
    echo /var/cache/rdma_transport
  else
    echo "${XDG_CACHE_HOME:-$HOME/.cache}/rdma_transport"
  fi
}
