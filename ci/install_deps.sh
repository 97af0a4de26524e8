#!/usr/bin/env bash
# Installs the Debian 12 packages rdma_transport needs. Idempotent: packages
# already present are not touched, and apt's lists are refreshed only when
# something must be installed.
#
#   ci/install_deps.sh            build + test with Bazel (the default)
#   ci/install_deps.sh vm         also the Soft-RoCE VM stage (qemu, kernel tools, perftest)
#   ci/install_deps.sh all        everything
#
# Installing needs root: run by another user, it runs itself again through
# sudo when something is missing (and says so when there is no sudo).
set -euo pipefail

build_packages=(
  bazel-bootstrap bazel-rules-cc bazel-rules-java bazel-skylib
  libgtest-dev libgmock-dev libbenchmark-dev libabsl-dev libibverbs-dev
  g++ clang clang-format libclang-rt-14-dev pkg-config
  valgrind python3
)
vm_packages=(
  qemu-system-x86 busybox-static kmod cpio xz-utils zstd
  rdma-core ibverbs-providers ibverbs-utils perftest rdmacm-utils
  iproute2 tcpdump procps
)

case "${1:-build}" in
  build) wanted=("${build_packages[@]}") ;;
  vm) wanted=("${build_packages[@]}" "${vm_packages[@]}") ;;
  all) wanted=("${build_packages[@]}" "${vm_packages[@]}") ;;
  *) echo "usage: $0 [build|vm|all]" >&2; exit 2 ;;
esac
# ci/lint.sh takes buildifier from the npm registry: Debian's npm, unless
# the machine has an npm already (a nodejs package with npm in it, which
# Debian's npm would conflict with).
command -v npm >/dev/null || wanted+=(npm)

missing=()
for package in "${wanted[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$package")
done
if ((${#missing[@]} == 0)); then
  echo "install_deps: all ${#wanted[@]} packages present"
  exit 0
fi
# shellcheck source=ci/root.sh
source "$(dirname "${BASH_SOURCE[0]}")/root.sh"
again_as_root install_deps "installing ${missing[*]}" -- "$0" "$@"
echo "install_deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y --no-install-recommends "${missing[@]}"; then
  apt-get update
  apt-get install -y --no-install-recommends "${missing[@]}"
fi
