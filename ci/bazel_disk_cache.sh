# shellcheck shell=bash
# Sourced by ci/test_all.sh: every Bazel 4 build CI runs (this checkout, the
# downstream workspaces, the docs' examples, the guest binaries) shares one
# disk cache under cache_root, so that a CI run on a machine that built the
# same sources before compiles only what changed. Tests still run every time:
# the cache keeps build outputs, and --nocache_test_results makes Bazel rerun
# every test instead of reporting a result it cached.
#
# How: a `bazel` in front of /usr/bin/bazel on PATH (in cache_root/bin) that
# adds `--bazelrc=cache_root/bazel_ci.bazelrc` (the per-user rc slot; each
# workspace's own .bazelrc is still read). The chroot's Bazel 7 takes its own
# cache directory from bazel7_disk_cache (ci/bazel7_stage.sh).
# A cache grown past BAZEL_DISK_CACHE_MAX_GB (default 20) is emptied first:
# Bazel 4 never trims one.
#
#   source ci/bazel_disk_cache.sh  # sources ci/cache_root.sh itself
#   use_bazel_disk_cache          # then plain `bazel ...` uses the cache
#   dir=$(bazel7_disk_cache)

# shellcheck source=ci/cache_root.sh
source "$(dirname "${BASH_SOURCE[0]}")/cache_root.sh"
bazel_disk_cache_dir() { echo "$(cache_root)/bazel_disk_cache"; }
bazel7_disk_cache() { echo "$(cache_root)/bazel7_disk_cache"; }

# trim_disk_cache DIR: empties DIR when it holds more than the bound.
trim_disk_cache() {
  local dir=$1 max_gb=${BAZEL_DISK_CACHE_MAX_GB:-20} kb
  [[ -d "$dir" ]] || return 0
  kb=$(du -sk "$dir" | cut -f1)
  if ((kb > max_gb * 1024 * 1024)); then
    echo "bazel_disk_cache: $dir holds $((kb / 1024 / 1024)) GiB > ${max_gb} GiB: emptied"
    rm -rf "$dir"
  fi
}

use_bazel_disk_cache() {
  local root real dir
  root=$(cache_root)
  if [[ "$root" != /?* ]]; then
    echo "bazel_disk_cache: cache_root gave '$root', not an absolute directory" >&2
    return 1
  fi
  dir=$(bazel_disk_cache_dir)
  # The real bazel: the first on PATH that is not such a wrapper (this one may
  # be on PATH already, more than once, and under another name via symlinks).
  local entry
  real=
  local IFS=:
  for entry in $PATH; do
    if [[ -x "$entry/bazel" && ! "$entry/bazel" -ef "$root/bin/bazel" ]] &&
      ! grep -qs 'Written by ci/bazel_disk_cache.sh' "$entry/bazel"; then
      real="$entry/bazel"
      break
    fi
  done
  unset IFS
  if [[ -z "$real" ]]; then
    echo "bazel_disk_cache: no bazel on PATH" >&2
    return 1
  fi
  trim_disk_cache "$dir"
  trim_disk_cache "$(bazel7_disk_cache)"
  mkdir -p "$root/bin" "$dir" "$(bazel7_disk_cache)"
  cat >"$root/bazel_ci.bazelrc" <<EOF
# Written by ci/bazel_disk_cache.sh for CI's Bazel 4 runs.
build --disk_cache=$dir
test --nocache_test_results
EOF
  cat >"$root/bin/bazel.new" <<EOF
#!/bin/sh
# Written by ci/bazel_disk_cache.sh: Bazel with CI's shared disk cache.
exec "$real" --bazelrc="$root/bazel_ci.bazelrc" "\$@"
EOF
  chmod +x "$root/bin/bazel.new"
  mv "$root/bin/bazel.new" "$root/bin/bazel"
  case ":$PATH:" in
    *":$root/bin:"*) ;;
    *) export PATH="$root/bin:$PATH" ;;
  esac
  echo "bazel_disk_cache: $dir ($(du -sh "$dir" | cut -f1))"
}
