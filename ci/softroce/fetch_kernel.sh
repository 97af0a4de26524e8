#!/usr/bin/env bash
# Fetches Debian's own kernel for the Soft-RoCE VM into a cache and prints the
# cache directory of that kernel on stdout (progress goes to stderr).
#
#   ci/softroce/fetch_kernel.sh [--suite SUITE] [--package linux-image-<kver>]
#
# The kernel package is the one linux-image-amd64 depends on, unless --package
# or $SOFTROCE_KERNEL_PACKAGE names another. By default apt uses the machine's
# own sources (Debian 12); --suite (or $SOFTROCE_KERNEL_SUITE) takes the
# package from another suite of the same mirror (trixie, sid) through
# ci/apt_suite.sh's own apt configuration. The kernel's files are those of
# the package and of every dependency named after the same kernel version
# (sid splits linux-image-<kver> into linux-binary-<kver>, the bzImage, and
# linux-modules-<kver>). The .debs are downloaded with `apt-get download`
# and unpacked with `dpkg-deb -x`: they are never installed on the host.
# The cache entry, keyed by kernel version, holds:
#
#   <cache>/kernel/<kver>/root/      the unpacked packages, plus modules.dep from depmod;
#                                    root/lib/modules is a link to usr/lib/modules
#                                    where the packages use merged /usr (trixie on)
#   <cache>/kernel/<kver>/vmlinux    the ELF kernel, decompressed from the bzImage (PVH boot)
#   <cache>/kernel/<kver>/complete   written last; an entry without it is rebuilt
#
# <cache> is $SOFTROCE_CACHE_DIR, else /var/cache/rdma_transport when writable,
# else ${XDG_CACHE_HOME:-~/.cache}/rdma_transport. Idempotent: a complete entry
# is reused without touching the network, and when apt cannot name the kernel
# (no package lists) the newest complete entry (of that suite, with --suite)
# is used.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

log() { echo "fetch_kernel: $*" >&2; }
die() { log "error: $*"; exit 1; }

source "$here/../cache_root.sh"

# Prints the name of the package linux-image-amd64 depends on, e.g.
# linux-image-6.1.0-57-amd64, or nothing when apt does not know it.
kernel_package_from_apt() {
  apt-cache depends --no-recommends --no-suggests linux-image-amd64 2>/dev/null |
    awk '$1 == "Depends:" && $2 ~ /^linux-image-[0-9]/ { print $2; exit }'
}

# Prints package $1 and, transitively, every dependency whose name ends in
# -$2 (the kernel version), one a line.
kernel_packages() {
  local -a todo=("$1")
  local -A seen=()
  local name dep
  while ((${#todo[@]})); do
    name=${todo[0]}
    todo=("${todo[@]:1}")
    [[ -z "${seen[$name]:-}" ]] || continue
    seen[$name]=1
    echo "$name"
    while read -r dep; do
      [[ "$dep" == *"-$2" ]] && todo+=("$dep")
    done < <(apt-cache depends --no-recommends --no-suggests "$name" 2>/dev/null |
      awk '($1 == "Depends:" || $1 == "PreDepends:" || $1 == "|Depends:") && $2 !~ /^</ { print $2 }')
  done
}

# The newest complete entry of suite $1 (default: the machine's own).
newest_complete_entry() {
  local entry
  entry=$(find "$kernel_cache" -mindepth 2 -maxdepth 2 -name complete -printf '%T@ %h\n' 2>/dev/null |
    sort -rn | cut -d' ' -f2- | while read -r dir; do
      if [[ "$(cat "$dir/suite" 2>/dev/null || echo host)" == "${1:-host}" ]]; then echo "$dir"; break; fi
    done)
  [[ -n "$entry" ]] && echo "$entry"
}

# Writes the ELF vmlinux inside bzImage $1 to $2. The bzImage is a boot stub
# followed by the compressed ELF; try every compressor magic at every offset it
# occurs and keep the first stream that decompresses to an ELF image.
extract_vmlinux() {
  local bzimage=$1 out=$2 candidate="$2.tmp" name offset
  # grep -P byte patterns (LC_ALL=C), in the order Debian is likeliest to use.
  local -A magics=(
    [xz]='\xfd7zXZ\x00' [zstd]='\x28\xb5\x2f\xfd' [gzip]='\x1f\x8b\x08'
    [lzma]='\x5d\x00\x00\x00' [bzip2]='BZh' [lz4]='\x02\x21\x4c\x18'
  )
  local -A decompress=(
    [xz]='xz -dc' [zstd]='zstd -dcq' [gzip]='gzip -dc'
    [lzma]='xz -dc --format=lzma' [bzip2]='bzip2 -dc' [lz4]='lz4 -dc'
  )
  # Only the offsets reach `read`: in a UTF-8 locale bash 5.2's read fails on
  # a line holding the magic's bytes (0xfd is no UTF-8), and that stream was
  # never tried (trixie's zstd bzImage).
  for name in xz zstd gzip lzma bzip2 lz4; do
    command -v "${decompress[$name]%% *}" >/dev/null || continue
    while read -r offset; do
      # Trailing data after the stream makes the decompressors complain: judge
      # the output, not their status.
      tail -c +"$((offset + 1))" "$bzimage" | ${decompress[$name]} >"$candidate" 2>/dev/null || true
      if [[ "$(head -c 4 "$candidate" | od -An -c | tr -d ' ')" == '177ELF' ]]; then
        mv "$candidate" "$out"
        log "vmlinux: $name stream at offset $offset of $(basename "$bzimage")"
        return 0
      fi
    done < <(LC_ALL=C grep -aboP -- "${magics[$name]}" "$bzimage" 2>/dev/null | cut -d: -f1 || true)
  done
  rm -f "$candidate"
  return 1
}

package=${SOFTROCE_KERNEL_PACKAGE:-}
suite=${SOFTROCE_KERNEL_SUITE:-}
while (($#)); do
  case "$1" in
    --package) package=${2:?--package needs a value}; shift 2 ;;
    --suite) suite=${2:?--suite needs a value}; shift 2 ;;
    -h|--help) sed -n '2,31p' "$0"; exit 0 ;;
    *) die "unknown argument: $1" ;;
  esac
done

kernel_cache="$(cache_root)/kernel"
mkdir -p "$kernel_cache"

if [[ -n "$suite" ]]; then
  if APT_CONFIG=$("$here/../apt_suite.sh" "$suite"); then
    export APT_CONFIG
  else
    log "warning: no apt configuration for $suite"
    unset APT_CONFIG
    package=${package:-none}
  fi
fi
if [[ -z "$package" ]]; then
  package=$(kernel_package_from_apt || true)
fi
if [[ -z "$package" || "$package" == none ]]; then
  if entry=$(newest_complete_entry "$suite"); then
    log "apt names no kernel for linux-image-amd64${suite:+ in $suite}; using cached $(basename "$entry")"
    echo "$entry"
    exit 0
  fi
  die "apt-cache cannot resolve linux-image-amd64${suite:+ in $suite} and the cache $kernel_cache has no entry for it (run apt-get update)"
fi

kver=${package#linux-image-}
entry="$kernel_cache/$kver"
if [[ -f "$entry/complete" ]]; then
  log "cached: $entry"
  echo "$entry"
  exit 0
fi

for tool in apt-get dpkg-deb depmod xz od; do
  command -v "$tool" >/dev/null || die "$tool not found (run ci/install_deps.sh vm)"
done

# One fetcher at a time per cache; a second caller waits, then finds the entry.
exec {lock_fd}>"$kernel_cache/.lock"
flock "$lock_fd"
if [[ -f "$entry/complete" ]]; then
  echo "$entry"
  exit 0
fi

rm -rf "$entry"
mkdir -p "$entry/download"
# apt drops to the _apt user for downloads; let it write here.
chmod 0777 "$entry/download"
mapfile -t packages < <(kernel_packages "$package" "$kver")
log "downloading ${packages[*]}${suite:+ from $suite}"
if ! (cd "$entry/download" && apt-get download -q "${packages[@]}" >&2); then
  if [[ -z "$suite" ]]; then
    log "apt-get download failed; refreshing package lists and retrying"
    apt-get update -q >&2 || true
  else
    log "apt-get download failed; refreshing $suite's package lists and retrying"
    APT_SUITE_MAX_AGE=0 "$here/../apt_suite.sh" "$suite" >/dev/null || true
  fi
  (cd "$entry/download" && apt-get download -q "${packages[@]}" >&2) || die "cannot download ${packages[*]}"
fi
debs=("$entry"/download/*.deb)
[[ -f "${debs[0]}" ]] || die "apt-get download left no .deb in $entry/download"

for deb in "${debs[@]}"; do
  log "unpacking $(basename "$deb")"
  dpkg-deb -x "$deb" "$entry/root"
done
# Merged /usr (trixie on): the modules are under usr/lib/modules; modprobe
# and depmod -b look under lib/modules.
if [[ ! -e "$entry/root/lib" && -d "$entry/root/usr/lib/modules/$kver" ]]; then
  ln -s usr/lib "$entry/root/lib"
fi
[[ -d "$entry/root/lib/modules/$kver" ]] || die "${packages[*]}: no lib/modules/$kver nor usr/lib/modules/$kver"
bzimage=''
for candidate in boot/vmlinuz-"$kver" usr/lib/modules/"$kver"/vmlinuz lib/modules/"$kver"/vmlinuz; do
  if [[ -f "$entry/root/$candidate" ]]; then
    bzimage=$candidate
    break
  fi
done
[[ -n "$bzimage" ]] || die "${packages[*]}: no boot/vmlinuz-$kver nor usr/lib/modules/$kver/vmlinuz"

# The package ships no modules.dep (the postinst would run depmod).
depmod -b "$entry/root" "$kver"

extract_vmlinux "$entry/root/$bzimage" "$entry/vmlinux" ||
  die "no compressed ELF found in $bzimage"
rm -rf "$entry/download"

echo "${suite:-host}" >"$entry/suite"
echo "$kver" >"$entry/complete"
log "ready: $entry"
echo "$entry"
