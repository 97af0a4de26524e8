#!/usr/bin/env bash
# A throw-away Debian unstable (sid) chroot for the Bazel 7 stage: sid has
# bazel-bootstrap 7.x, which needs a newer libc than Debian 12's.
#
#   ci/sid_chroot.sh setup          # make (or reuse) the chroot, print its path
#   ci/sid_chroot.sh run DIR CMD... # run CMD in the chroot, working directory DIR
#                                   # (with DIR and $SID_CHROOT_BIND bind-mounted)
#   ci/sid_chroot.sh remove         # delete it
#
# The chroot is made with debootstrap --variant=minbase from the machine's own
# Debian mirror (ci/apt_suite.sh --mirror; no host name is written into the
# repository) and cached in <cache>/sid-chroot (<cache> as in
# ci/softroce/fetch_kernel.sh). Idempotent: a chroot whose `complete` stamp
# lists exactly the packages below is reused without network; otherwise the
# missing packages are installed, or the chroot is made anew when it is
# unfinished. `run` bind-mounts /proc, /dev, /sys and DIR (at the same path)
# inside a private mount namespace (unshare -m), so that no mount outlives the
# command; the chroot's /root (Bazel's output bases) persists between runs.
# Unstable's Release file on the mirror may be past its Valid-Until date:
# the chroot's apt does not check it. Needs root.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

log() { echo "sid_chroot: $*" >&2; }
die() { log "error: $*"; exit 1; }

packages=(
  bazel-bootstrap bazel-rules-cc bazel-skylib bazel-platforms
  libgtest-dev libgmock-dev libabsl-dev libbenchmark-dev libibverbs-dev
  g++ pkg-config ca-certificates
)

source "$here/cache_root.sh"
root=${SID_CHROOT_DIR:-$(cache_root)/sid-chroot}

# in_chroot CMD...: CMD in the chroot with /proc, /dev, /sys mounted.
in_chroot() {
  unshare --mount --propagation private -- bash -c '
    set -e
    root=$1; shift
    mount -t proc proc "$root/proc"
    mount --rbind /dev "$root/dev"
    mount --rbind /sys "$root/sys"
    exec chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM=dumb \
      PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$@"
  ' _ "$root" "$@"
}

setup() {
  ((EUID == 0)) || die "needs root (debootstrap, chroot)"
  local wanted="${packages[*]}"
  if [[ -f "$root/complete" && "$(<"$root/complete")" == "$wanted" ]]; then
    log "cached: $root"
    echo "$root"
    return
  fi
  exec {lock_fd}>"$(dirname "$root")/.sid-chroot.lock"
  flock "$lock_fd"
  command -v debootstrap >/dev/null || {
    log "installing debootstrap"
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends debootstrap >&2 ||
      { apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends debootstrap >&2; }
  }
  local mirror start=$SECONDS
  mirror=$("$here/apt_suite.sh" --mirror)
  if [[ ! -f "$root/debootstrapped" ]]; then
    rm -rf "$root"
    mkdir -p "$root"
    log "debootstrap --variant=minbase sid from $mirror"
    debootstrap --variant=minbase sid "$root" "$mirror" >&2 || die "debootstrap failed"
    touch "$root/debootstrapped"
  fi
  echo 'Acquire::Check-Valid-Until "false";' >"$root/etc/apt/apt.conf.d/99rdma-transport-ci"
  echo 'Acquire::Languages "none";' >>"$root/etc/apt/apt.conf.d/99rdma-transport-ci"
  log "installing ${packages[*]}"
  in_chroot bash -c 'apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" && apt-get clean' \
    _ "${packages[@]}" >&2 || die "apt-get install in the chroot failed"
  echo "$wanted" >"$root/complete"
  log "ready in $((SECONDS - start)) s: $root ($(in_chroot bazel --version 2>/dev/null || echo 'no bazel'))"
  echo "$root"
}

case "${1:-}" in
  setup) setup ;;
  run)
    (($# >= 3)) || die "usage: $0 run DIR CMD..."
    dir=$(cd "$2" && pwd)
    shift 2
    [[ -f "$root/complete" ]] || setup >/dev/null
    # DIR (and the directories of $SID_CHROOT_BIND, colon-separated) at the
    # same paths inside, so that paths in logs, links and file:// registries
    # match.
    IFS=: read -r -a binds <<<"${SID_CHROOT_BIND:-}"
    binds+=("$dir")
    for bind in "${binds[@]}"; do mkdir -p "$root$bind"; done
    unshare --mount --propagation private -- bash -c '
      set -e
      root=$1 dir=$2 binds=$3; shift 3
      IFS=: read -r -a binds <<<"$binds"
      for bind in "${binds[@]}"; do mount --bind "$bind" "$root$bind"; done
      mount -t proc proc "$root/proc"
      mount --rbind /dev "$root/dev"
      mount --rbind /sys "$root/sys"
      exec chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM=dumb CI="${CI:-}" \
        PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        bash -c "cd \"\$0\" && exec \"\$@\"" "$dir" "$@"
    ' _ "$root" "$dir" "$(IFS=:; echo "${binds[*]}")" "$@"
    ;;
  remove) rm -rf "$root" ;;
  *) sed -n '2,20p' "$0" >&2; exit 2 ;;
esac
