#!/usr/bin/env bash
# Builds the initramfs of the Soft-RoCE VM from the host's own userspace.
#
#   build_initramfs.sh --kernel-dir DIR --guest-script FILE --run-id ID --output FILE
#                      [--file HOST[:GUEST]]... [--env NAME=VALUE]... [--module NAME]...
#
# Host and guest run the same Debian userspace, so the guest gets host binaries
# plus every library ldd lists for them: bash as the shell (busybox ash would
# run its own `ip` applet ahead of PATH), iproute2, kmod, tcpdump, coreutils,
# the rdma-core utilities, perftest, and the rxe verbs provider (dlopen'ed by
# libibverbs, so ldd cannot see it). Static busybox fills in whatever else a
# script may call, last on PATH. Files passed with --file land at GUEST
# (default /usr/local/bin/<basename>); the libraries of any ELF among them are
# added automatically, so a project binary needs nothing but --file.
#
# Kernel modules are resolved on the host with modprobe --show-depends against
# the cached kernel, decompressed when shipped as .ko.xz/.ko.zst, and listed
# in load order in /etc/softroce/modules for guest_init.sh.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

log() { echo "build_initramfs: $*" >&2; }
die() { log "error: $*"; exit 1; }

# Load order matters: crc32_generic first (rdma_rxe needs the crc32 shash and
# there is no usable request_module this early), then the rxe stack, then the
# connection managers, the netdevs of the topology, and the artifact disk.
modules=(
  crc32_generic udp_tunnel ip6_udp_tunnel ib_core ib_uverbs rdma_rxe
  configfs ib_cm iw_cm rdma_cm rdma_ucm veth dummy
  virtio_pci virtio_blk
)
# Modules that only some kernels have: skipped where the kernel has none.
# Linux 7.x computes rxe's ICRC with the crc32 library and has no
# crc32_generic (7.2.13+deb14 ships none).
optional_modules=(crc32_generic)
# Host commands every guest gets; a missing one is an error.
required_commands=(
  bash ip rdma ss tc insmod modprobe lsmod rmmod depmod mount umount dmesg
  sysctl ps pkill pgrep tar gzip grep sed awk find xargs timeout tcpdump
  ibv_devices ibv_devinfo ib_send_lat
)
# Packages whose every binary goes in, and optional extras.
whole_packages=(coreutils perftest ibverbs-utils rdmacm-utils)
optional_commands=(strace perf ethtool xxd hexdump setsid flock taskset nproc free)

kernel_dir='' guest_script='' run_id='' output=''
files=() envs=()
while (($#)); do
  case "$1" in
    --kernel-dir) kernel_dir=$2; shift 2 ;;
    --guest-script) guest_script=$2; shift 2 ;;
    --run-id) run_id=$2; shift 2 ;;
    --output) output=$2; shift 2 ;;
    --file) files+=("$2"); shift 2 ;;
    --env) envs+=("$2"); shift 2 ;;
    --module) modules+=("$2"); shift 2 ;;
    *) die "unknown argument: $1" ;;
  esac
done
[[ -f "$kernel_dir/complete" ]] || die "--kernel-dir $kernel_dir is not a complete fetch_kernel.sh entry"
[[ -f "$guest_script" ]] || die "--guest-script $guest_script not found"
[[ -n "$run_id" && -n "$output" ]] || die "--run-id and --output are required"
kver=$(<"$kernel_dir/complete")
kroot="$kernel_dir/root"

stage=$(mktemp -d "${TMPDIR:-/tmp}/softroce-initramfs.XXXXXX")
ldd_dir=$(mktemp -d "${TMPDIR:-/tmp}/softroce-ldd.XXXXXX")
trap 'rm -rf "$stage" "$ldd_dir"' EXIT

# Merged /usr first, with relative links, so that copying a file to
# $stage/lib/... lands in $stage/usr/lib/... and never on the host's /usr.
mkdir -p "$stage"/usr/{bin,sbin,lib,lib64}
for dir in bin sbin lib lib64; do ln -s "usr/$dir" "$stage/$dir"; done
mkdir -p "$stage"/{dev,proc,sys,tmp,run,root,artifacts,softroce,etc/softroce,etc/libibverbs.d,var/tmp}
chmod 1777 "$stage/tmp" "$stage/var/tmp"

elves=() # every ELF copied in; their libraries are resolved at the end

# Both without forks: a few hundred files go through them.
is_elf() {
  local magic=''
  LC_ALL=C IFS= read -r -N 4 magic <"$1" 2>/dev/null
  [[ "$magic" == $'\x7fELF' ]]
}

# Copies host file $1 to guest path $2 (following symlinks) and remembers ELFs.
add_file() {
  local src=$1 dst=$2
  [[ -d "$stage${dst%/*}" ]] || mkdir -p "$stage${dst%/*}"
  cp -L --preserve=mode "$src" "$stage$dst"
  if is_elf "$src"; then elves+=("$src"); fi
}

add_command() {
  local path
  path=$(command -v "$1") || return 1
  [[ "$path" == /* ]] || return 1 # a shell builtin or function
  add_file "$path" "$path"
}

for cmd in "${required_commands[@]}"; do
  add_command "$cmd" || die "host command $cmd not found (run ci/install_deps.sh vm)"
done
for cmd in "${optional_commands[@]}"; do
  add_command "$cmd" || true
done
for package in "${whole_packages[@]}"; do
  while read -r path; do
    [[ -f "$path" && -x "$path" ]] && add_file "$path" "$path"
  done < <(dpkg -L "$package" 2>/dev/null | grep -E '^/(usr/)?s?bin/' || true)
done
ln -sf bash "$stage/usr/bin/sh"

# Static busybox, its applets last on PATH (see guest_init.sh).
if busybox=$(command -v busybox); then
  mkdir -p "$stage/usr/libexec/softroce/busybox"
  cp -L "$busybox" "$stage/usr/libexec/softroce/busybox/busybox"
  while read -r applet; do
    [[ -e "$stage/usr/libexec/softroce/busybox/$applet" ]] ||
      ln -s busybox "$stage/usr/libexec/softroce/busybox/$applet"
  done < <("$busybox" --list)
fi

# The rxe verbs provider: libibverbs dlopen()s it from the .driver file.
provider=$(find /usr/lib /lib -path '*/libibverbs/librxe-rdmav*.so' -print -quit 2>/dev/null || true)
[[ -n "$provider" && -f /etc/libibverbs.d/rxe.driver ]] ||
  die "rxe verbs provider not found (install ibverbs-providers)"
add_file "$provider" "$provider"
cp /etc/libibverbs.d/rxe.driver "$stage/etc/libibverbs.d/"

# glibc dlopen()s libgcc_s to unwind on pthread_exit/pthread_cancel (rping,
# any program with threads that exit); ldd does not list it either.
# awk reads to the end: with pipefail, an early exit SIGPIPEs ldconfig (its
# ~60 KB listing) and the assignment fails under set -e without a word - the
# "cannot build the initramfs" infrastructure failures (84 of 200 tries here).
libgcc_s=$(ldconfig -p | awk '$1 == "libgcc_s.so.1" && /x86-64/ && !found { print $NF; found = 1 }')
[[ -n "$libgcc_s" ]] || die "libgcc_s.so.1 not found"
add_file "$libgcc_s" "$libgcc_s"

# Project and test files.
for spec in "${files[@]}"; do
  src=${spec%%:*}
  if [[ "$spec" == *:* ]]; then dst=${spec#*:}; else dst="/usr/local/bin/$(basename "$src")"; fi
  [[ -e "$src" ]] || die "--file $src: no such file"
  [[ "$dst" == /* ]] || die "--file $spec: the guest path must be absolute"
  if [[ -d "$src" ]]; then
    mkdir -p "$stage$dst"
    cp -rL "$src/." "$stage$dst/"
    while IFS= read -r -d '' path; do
      if is_elf "$path"; then elves+=("$path"); fi
    done < <(find -L "$src" -type f -print0)
  else
    add_file "$src" "$dst"
  fi
done

# Every library the ELFs need (ldd lists the whole closure), at the path ldd
# names; the merged-/usr links take care of /lib vs /usr/lib. (ldd is slow on
# long argument lists: run it in parallel batches, each into a file of its
# own: parallel ldds writing to one pipe interleave their lines mid-line,
# and a torn path, e.g. "/lib/x86_64-linux-gnu/libabsl_civ/usr/bin/...",
# failed the build now and then.)
libdirs=()
# shellcheck disable=SC2016 # "$@" and $0 are the inner sh's
printf '%s\0' "${elves[@]}" | xargs -0 -r -P "$(nproc)" -n 16 \
  sh -c 'ldd "$@" >"$(mktemp "$0/batch.XXXXXX")" 2>/dev/null || true' "$ldd_dir"
while read -r lib; do
  add_file "$lib" "$lib"
  libdirs+=("$(dirname "$lib")")
done < <(cat "$ldd_dir"/batch.* |
  awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// && $2 ~ /^\(/ { print $1 }' |
  sort -u)
printf '%s\n' /usr/local/lib "${libdirs[@]}" | sort -u >"$stage/etc/ld.so.conf"
ldconfig -r "$stage" 2>/dev/null || log "warning: ldconfig -r failed; relying on the default search path"

# Kernel modules, in load order, each once.
moddir="$stage/usr/lib/modules/$kver"
mkdir -p "$moddir"
declare -A seen=()
: >"$stage/etc/softroce/modules"
for module in "${modules[@]}"; do
  if ! deps=$(modprobe -d "$kroot" -S "$kver" --show-depends "$module" 2>&1); then
    if [[ " ${optional_modules[*]} " == *" $module "* ]]; then
      log "kernel $kver has no module $module (optional: not loaded)"
      continue
    fi
    die "kernel $kver has no module $module: $deps"
  fi
  while read -r verb path args; do
    [[ "$verb" == insmod ]] || continue # "builtin <name>": nothing to load
    rel=${path#"$kroot/lib/modules/$kver/"}
    rel=${rel%.xz}
    rel=${rel%.zst}
    [[ -z "${seen[$rel]:-}" ]] || continue
    seen[$rel]=1
    mkdir -p "$(dirname "$moddir/$rel")"
    case "$path" in
      *.ko.xz) xz -dc "$path" >"$moddir/$rel" ;;
      *.ko.zst) zstd -dcq "$path" >"$moddir/$rel" ;;
      *) cp "$path" "$moddir/$rel" ;;
    esac
    echo "$rel $args" >>"$stage/etc/softroce/modules"
  done <<<"$deps"
done
# modules.dep for the few modules inside, so request_module() can work too.
cp "$kroot/lib/modules/$kver"/modules.{builtin,builtin.modinfo,order} "$moddir/" 2>/dev/null || true
depmod -b "$stage" "$kver" 2>/dev/null || log "warning: depmod on the initramfs failed"

# /etc: users (tcpdump drops privileges to its own user), name service, and
# the run's configuration.
cat >"$stage/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/usr/bin/bash
tcpdump:x:104:110::/nonexistent:/usr/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
EOF
cat >"$stage/etc/group" <<'EOF'
root:x:0:
tcpdump:x:110:
nogroup:x:65534:
EOF
printf 'passwd: files\ngroup: files\nshadow: files\nhosts: files\nservices: files\nprotocols: files\n' \
  >"$stage/etc/nsswitch.conf"
printf '127.0.0.1 localhost softroce\n10.10.0.1 veth0-host\n10.10.0.2 veth1-host\n' >"$stage/etc/hosts"
echo softroce >"$stage/etc/hostname"
for etc in protocols services; do
  [[ -f "/etc/$etc" ]] && cp "/etc/$etc" "$stage/etc/"
done

cat >"$stage/etc/softroce/init.conf" <<EOF
RUN_ID=$run_id
KVER=$kver
ARTIFACT_DISK=/dev/vda
EOF
: >"$stage/etc/softroce/env"
for assignment in "${envs[@]}"; do
  name=${assignment%%=*}
  [[ "$assignment" == *=* && "$name" =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || die "--env $assignment: want NAME=VALUE"
  printf 'export %s=%q\n' "$name" "${assignment#*=}" >>"$stage/etc/softroce/env"
done

install -m 0755 "$here/guest_init.sh" "$stage/init"
# Every guest script, so that one may source or call the others.
for script in "$here"/guest_*.sh; do
  [[ "$(basename "$script")" == guest_init.sh ]] && continue
  install -m 0755 "$script" "$stage/softroce/$(basename "$script")"
done
install -m 0755 "$guest_script" "$stage/softroce/guest_script.sh"

# The kernel opens /dev/console for /init before devtmpfs is mounted.
if ((EUID == 0)); then mknod -m 0600 "$stage/dev/console" c 5 1; fi

# Uncompressed: under TCG the guest kernel unpacks a plain cpio about a second
# faster than a gzip one, and the host saves the compression too.
(cd "$stage" && find . -print0 | cpio --null -o -H newc -R 0:0 --quiet) >"$output"
log "$(du -sh "$stage" | cut -f1) of files, ${#elves[@]} ELF files, $(wc -l <"$stage/etc/softroce/modules") modules -> $(du -h "$output" | cut -f1) $(basename "$output")"
