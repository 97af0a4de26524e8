#!/usr/bin/env bash
# The Bazel 7 (bzlmod) stage of CI: rdma_transport as a Bazel module, on the
# Bazel that Debian unstable ships (bazel-bootstrap 7.x), in the chroot of
# ci/sid_chroot.sh (made once, cached), offline.
#
#   ci/bazel7_stage.sh [--keep-servers]
#
# Steps, each printing PASS or FAIL:
#   root      bazel test --config=bzlmod --config=werror //... in this
#             checkout: the repository's own tests as the root module
#             (MODULE.bazel, bazel/registry), -Werror with unstable's newer
#             gcc, googletest, Abseil and rdma-core (the warning count is
#             printed for every step)
#   example   examples/downstream_bzlmod (bazel_dep + local_path_override):
#             bazel test //... and bazel run //:hello_rdma printing OK
#   docs      the docs' bzlmod code blocks (ci/doc_examples.sh --bzlmod)
#
# Exit status non-zero if any failed. The Bazel servers (inside the chroot)
# are shut down at the end unless --keep-servers is given.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CHROOT="${ROOT}/ci/sid_chroot.sh"
KEEP_SERVERS=0
[[ "${1:-}" == --keep-servers ]] && KEEP_SERVERS=1

"${CHROOT}" setup >/dev/null || {
  echo "bazel7_stage: FAIL: cannot make the Debian unstable chroot"
  exit 1
}
echo "bazel7_stage: $("${CHROOT}" run "${ROOT}" bazel --version)"

LOG_DIR="$(mktemp -d "${TMPDIR:-/tmp}/bazel7_stage_logs.XXXXXX")"
FAILED=()
run_step() {
  local name="$1" start=$SECONDS
  shift
  local log="${LOG_DIR}/${name}.log"
  echo "=== bazel7_stage: ${name}"
  if "$@" >"${log}" 2>&1; then
    grep -E '^(INFO: Build completed|Executed|//|@)' "${log}" | tail -n 40 || true
    echo "compiler warnings: $(grep -c 'warning: ' "${log}")"
    echo "PASS ${name} ($((SECONDS - start)) s)"
  else
    echo "FAIL ${name} ($((SECONDS - start)) s, log: ${log})"
    tail -n 60 "${log}" | sed 's/^/    /'
    FAILED+=("${name}")
  fi
}

# Bazel 7's disk cache (DOC_EXAMPLES_BZLMOD_DISK_CACHE, which ci/test_all.sh
# points at ci/bazel_disk_cache.sh's directory; else one in the log folder):
# bind-mounted into the chroot. Tests rerun whatever the cache holds.
DISK_CACHE="${DOC_EXAMPLES_BZLMOD_DISK_CACHE:-${LOG_DIR}/disk_cache}"
mkdir -p "${DISK_CACHE}"
CACHE_FLAGS=(--disk_cache="${DISK_CACHE}" --nocache_test_results)

in_chroot() { # DIR CMD...
  SID_CHROOT_BIND="${DISK_CACHE}" "${CHROOT}" run "$@"
}

step_root() {
  in_chroot "${ROOT}" bazel test --config=bzlmod --config=werror \
    "${CACHE_FLAGS[@]}" //... || return 1
}

# The example's local_path_override names ../..: the whole checkout goes in.
in_example() {
  in_chroot "${ROOT}" bash -c 'cd examples/downstream_bzlmod && exec "$@"' _ "$@"
}

step_example() {
  local out
  in_example bazel test "${CACHE_FLAGS[@]}" //... || return 1
  out="$(in_example bazel run //:hello_rdma)" || {
    echo "${out}"
    return 1
  }
  echo "${out}"
  grep -qx "OK" <<<"${out}"
}

step_docs() {
  bash "${ROOT}/ci/doc_examples.sh" --bzlmod
}

run_step root step_root
run_step example step_example
if [[ -f "${ROOT}/ci/doc_examples.sh" ]]; then run_step docs step_docs; fi

if [[ "${KEEP_SERVERS}" == 0 ]]; then
  in_chroot "${ROOT}" bazel shutdown >/dev/null 2>&1
  in_example bazel shutdown >/dev/null 2>&1
fi

if ((${#FAILED[@]} == 0)); then
  echo "bazel7_stage: PASS (logs in ${LOG_DIR})"
  exit 0
fi
echo "bazel7_stage: FAIL: ${FAILED[*]} (logs in ${LOG_DIR})"
exit 1
