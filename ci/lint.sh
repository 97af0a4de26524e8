#!/usr/bin/env bash
# Formatting and lint checks of the repository's own files:
#
#   clang-format   every tracked .cc/.h is as clang-format (.clang-format) writes it
#   buildifier     every BUILD, .bzl, WORKSPACE and MODULE.bazel file is formatted
#                  and lint-clean (buildifier --lint=warn)
#
#   ci/lint.sh         check; non-zero exit with the offending files
#   ci/lint.sh --fix   rewrite the files in place
#
# buildifier comes from the npm registry's @bazel/buildifier (its package
# carries the Linux binary), installed into <cache>/npm by this script;
# clang-format is Debian's (ci/install_deps.sh build).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1

BUILDIFIER_VERSION=8.2.1
fix=0
[[ "${1:-}" == --fix ]] && fix=1

cache=/var/cache/rdma_transport
mkdir -p "$cache" 2>/dev/null && [[ -w "$cache" ]] || cache="${XDG_CACHE_HOME:-$HOME/.cache}/rdma_transport"
buildifier="$cache/npm/node_modules/@bazel/buildifier/buildifier-linux_amd64"
# The version read whole before the match: grep -q would stop reading
# early, and the pipe's SIGPIPE (pipefail) would look like a wrong version.
if [[ ! -x "$buildifier" ]] || [[ "$("$buildifier" --version 2>/dev/null)" != *"version: $BUILDIFIER_VERSION"* ]]; then
  command -v npm >/dev/null || { echo "lint: FAIL: npm not found (apt-get install npm)"; exit 1; }
  echo "lint: installing @bazel/buildifier@$BUILDIFIER_VERSION into $cache/npm"
  npm install --no-save --no-audit --no-fund --prefix "$cache/npm" "@bazel/buildifier@$BUILDIFIER_VERSION" >/dev/null ||
    { echo "lint: FAIL: npm install @bazel/buildifier failed"; exit 1; }
fi

failed=0
mapfile -t sources < <(git ls-files '*.cc' '*.h' '*.c')
if ((fix)); then
  clang-format -i "${sources[@]}"
elif ! clang-format --dry-run --Werror "${sources[@]}" 2>/tmp/lint-clang-format.$$; then
  echo "lint: FAIL clang-format: run ci/lint.sh --fix"
  grep -o '^[^:]*:[0-9]*' /tmp/lint-clang-format.$$ | sort -u | head -n 40 | sed 's/^/    /'
  failed=1
else
  echo "lint: PASS clang-format (${#sources[@]} files)"
fi
rm -f /tmp/lint-clang-format.$$

# Symlinks (bazel/modules/) are checked where they point.
mapfile -t bazel_files < <(git ls-files | grep -E '(^|/)(BUILD(\.bazel)?|WORKSPACE|MODULE\.bazel|[^/]*\.bzl|[^/]*\.BUILD)$' |
  while read -r f; do [[ -L "$f" ]] || echo "$f"; done)
if ((fix)); then
  "$buildifier" --lint=fix --mode=fix "${bazel_files[@]}"
elif ! "$buildifier" --lint=warn --mode=check "${bazel_files[@]}"; then
  echo "lint: FAIL buildifier: run ci/lint.sh --fix"
  failed=1
else
  echo "lint: PASS buildifier $BUILDIFIER_VERSION (${#bazel_files[@]} files)"
fi
exit "$failed"
