#!/usr/bin/env bash
# Fetches Debian's own kernel for the Soft-RoCE VM into a cache and prints the
# cache directory of that kernel on stdout (progress goes to stderr).
#
#   ci/softroce/fetch_kernel.sh [--package linux-image-<kver>]
#
# The kernel package is the one linux-image-amd64 depends on, unless --package
# or $SOFTROCE_KERNEL_PACKAGE names another. The .deb is downloaded with
# `apt-get download` and unpacked with `dpkg-deb -x`: it is never installed on
# the host. The cache entry, keyed by kernel version, holds:
#
#   <cache>/kernel/<kver>/root/      the unpacked package, plus modules.dep from depmod
#   <cache>/kernel/<kver>/vmlinux    the ELF kernel, decompressed from the bzImage (PVH boot)
#   <cache>/kernel/<kver>/complete   written last; an entry without it is rebuilt
#
# <cache> is $SOFTROCE_CACHE_DIR, else /var/cache/rdma_transport when writable,
# else ${XDG_CACHE_HOME:-~/.cache}/rdma_transport. Idempotent: a complete entry
# is reused without touching the network, and when apt cannot name the kernel
# (no package lists) the newest complete entry is used.
set -euo pipefail

log() { echo "fetch_kernel: $*" >&2; }
die() { log "error: $*"; exit 1; }

cache_root() {
  if [[ -n "${SOFTROCE_CACHE_DIR:-}" ]]; then
    echo "$SOFTROCE_CACHE_DIR"
  elif mkdir -p /var/cache/rdma_transport 2>/dev/null && [[ -w /var/cache/rdma_transport ]]; then
    echo /var/cache/rdma_transport
  else
    echo "${XDG_CACHE_HOME:-$HOME/.cache}/rdma_transport"
  fi
}

# Prints the name of the package linux-image-amd64 depends on, e.g.
# linux-image-6.1.0-57-amd64, or nothing when apt does not know it.
kernel_package_from_apt() {
  apt-cache depends --no-recommends --no-suggests linux-image-amd64 2>/dev/null |
    awk '$1 == "Depends:" && $2 ~ /^linux-image-[0-9]/ { print $2; exit }'
}

newest_complete_entry() {
  local entry
  entry=$(find "$kernel_cache" -mindepth 2 -maxdepth 2 -name complete -printf '%T@ %h\n' 2>/dev/null |
    sort -rn | head -n 1 | cut -d' ' -f2-)
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
  for name in xz zstd gzip lzma bzip2 lz4; do
    command -v "${decompress[$name]%% *}" >/dev/null || continue
    while IFS=: read -r offset _; do
      # Trailing data after the stream makes the decompressors complain: judge
      # the output, not their status.
      tail -c +"$((offset + 1))" "$bzimage" | ${decompress[$name]} >"$candidate" 2>/dev/null || true
      if [[ "$(head -c 4 "$candidate" | od -An -c | tr -d ' ')" == '177ELF' ]]; then
        mv "$candidate" "$out"
        log "vmlinux: $name stream at offset $offset of $(basename "$bzimage")"
        return 0
      fi
    done < <(LC_ALL=C grep -aboP -- "${magics[$name]}" "$bzimage" 2>/dev/null || true)
  done
  rm -f "$candidate"
  return 1
}

package=${SOFTROCE_KERNEL_PACKAGE:-}
while (($#)); do
  case "$1" in
    --package) package=${2:?--package needs a value}; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) die "unknown argument: $1" ;;
  esac
done

kernel_cache="$(cache_root)/kernel"
mkdir -p "$kernel_cache"

if [[ -z "$package" ]]; then
  package=$(kernel_package_from_apt || true)
fi
if [[ -z "$package" ]]; then
  if entry=$(newest_complete_entry); then
    log "apt names no kernel for linux-image-amd64; using cached $(basename "$entry")"
    echo "$entry"
    exit 0
  fi
  die "apt-cache cannot resolve linux-image-amd64 and the cache $kernel_cache is empty (run apt-get update)"
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
log "downloading $package"
if ! (cd "$entry/download" && apt-get download -q "$package" >&2); then
  log "apt-get download failed; refreshing package lists and retrying"
  apt-get update -q >&2 || true
  (cd "$entry/download" && apt-get download -q "$package" >&2) || die "cannot download $package"
fi
deb=$(find "$entry/download" -name '*.deb' | head -n 1)
[[ -n "$deb" ]] || die "apt-get download left no .deb in $entry/download"

log "unpacking $(basename "$deb")"
dpkg-deb -x "$deb" "$entry/root"
[[ -f "$entry/root/boot/vmlinuz-$kver" ]] || die "$deb has no boot/vmlinuz-$kver"
[[ -d "$entry/root/lib/modules/$kver" ]] || die "$deb has no lib/modules/$kver"

# The package ships no modules.dep (the postinst would run depmod).
depmod -b "$entry/root" "$kver"

extract_vmlinux "$entry/root/boot/vmlinuz-$kver" "$entry/vmlinux" ||
  die "no compressed ELF found in boot/vmlinuz-$kver"
rm -rf "$entry/download"

echo "$kver" >"$entry/complete"
log "ready: $entry"
echo "$entry"
