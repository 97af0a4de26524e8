#!/usr/bin/env bash
# The README's two commands on a fresh Debian 12 system, as the README writes
# them: a bookworm minbase root (debootstrap, the machine's own mirror: no
# sudo, no Bazel, nothing of ours; the machine's DNS settings and local CA
# certificates, as a container gets them) in a chroot of its own, with a clone of
# this checkout's HEAD in it, where ci/readme_commands.sh runs the demo and
# then every test. With --user, as a user who may sudo instead of root (sudo
# installed and granted first, as an administrator would).
#
#   ci/readme_in_fresh_debian.sh [--user] [--demo-only] [--keep]
#
# --demo-only: the first command only. --keep: leave the system in
# <cache>/fresh-debian/run (else it goes when done). The pristine system is
# made once and cached in <cache>/fresh-debian/base (<cache> as in
# ci/cache_root.sh); every run starts from a copy of it. Needs root
# (debootstrap, chroot, mounts); /proc, /dev and /sys are mounted in a
# private mount namespace, so no mount outlives the run.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
log() { echo "fresh_debian: $*" >&2; }
die() { log "error: $*"; exit 1; }

as_user=0 demo_only=0 keep=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --user) as_user=1 ;;
    --demo-only) demo_only=1 ;;
    --keep) keep=1 ;;
    -h|--help) sed -n '2,/^set /{/^#/p}' "$0"; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
  shift
done
((EUID == 0)) || die "needs root (debootstrap, chroot)"

source "$here/cache_root.sh"
top=$(cache_root)/fresh-debian
base=$top/base
run=$top/run
mkdir -p "$top"

if [[ ! -f "$base/complete" ]]; then
  command -v debootstrap >/dev/null || {
    log "installing debootstrap"
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends debootstrap >&2 ||
      { apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends debootstrap >&2; }
  }
  mirror=$("$here/apt_suite.sh" --mirror)
  rm -rf "$base"
  log "debootstrap --variant=minbase bookworm from $mirror"
  debootstrap --variant=minbase --include=git,ca-certificates bookworm "$base" "$mirror" >&2 ||
    die "debootstrap failed"
  # As a container image is: the mirror in its sources, DNS from the host.
  cp /etc/resolv.conf "$base/etc/resolv.conf" 2>/dev/null || true
  touch "$base/complete"
fi

rm -rf "$run"
log "a fresh copy of $base"
cp -a "$base" "$run"
[[ $keep == 1 ]] || trap 'rm -rf "$run"' EXIT
git clone -q "$repo" "$run/work/rdma_transport"
# As a container on this network gets them: the machine's own local CA
# certificates (a network that inspects TLS; the npm registry, from which
# ci/lint.sh takes buildifier, is reached over TLS, the Debian mirror not).
if compgen -G '/usr/local/share/ca-certificates/*.crt' >/dev/null; then
  cp /usr/local/share/ca-certificates/*.crt "$run/usr/local/share/ca-certificates/"
fi
git -C "$run/work/rdma_transport" log --oneline -1 >&2
which=''
[[ $demo_only == 1 ]] && which=--first
if [[ $as_user == 1 ]]; then
  user_setup='apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends sudo >/dev/null &&
    useradd -m -s /bin/bash developer && echo "developer ALL=(ALL) NOPASSWD: ALL" >/etc/sudoers.d/developer &&
    chown -R developer: /work/rdma_transport'
  step="cd /work/rdma_transport && su developer -c 'ci/readme_commands.sh $which'"
else
  user_setup='! command -v sudo'
  step="cd /work/rdma_transport && ci/readme_commands.sh $which"
fi
start=$SECONDS
unshare --mount --propagation private -- bash -c '
  set -e
  root=$1 setup=$2 step=$3
  # Its root a mount point, as a container'"'"'s is (a nested unshare of the
  # Bazel 7 chroot makes "/" private, which a plain directory refuses).
  mount --bind "$root" "$root"
  mount -t proc proc "$root/proc"
  mount --rbind /dev "$root/dev"
  mount --rbind /sys "$root/sys"
  exec chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM=dumb \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    bash -c "set -e; update-ca-certificates >/dev/null; $setup; $step"
' _ "$run" "$user_setup" "$step"
log "passed in $((SECONDS - start)) s ($([[ $as_user == 1 ]] && echo 'as a user with sudo' || echo 'as root, no sudo'))"
