#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine and runs every test rdma_transport has.
# This is the README's test command and what .ci/run calls. Run as root (it
# installs Debian packages). Each stage prints a banner and its duration; the
# script stops at the first failing stage with that stage's status.
#
#   1. bazel test //...                  unit, mock and sim suites (gcc)
#   2. the same under ASan and UBSan     every suite
#   3. TSan                              the threaded suites
#   4. fuzzing                           handshake decoder, MC_* parser
#   5. Soft-RoCE VM                      the e2e suite and tools over rxe
set -euo pipefail
cd "$(dirname "$0")/.."

stage() {
  local name=$1
  shift
  local start=$SECONDS
  echo
  echo "=== stage: ${name} ==="
  "$@"
  echo "=== stage ${name}: passed in $((SECONDS - start)) s ==="
}

# The suites that run threads against each other.
threaded_targets=(
  //sim:threads_test
  //transport:connection_test
  //tests:e2e_sim_test
)

stage "install build dependencies" ci/install_deps.sh build
stage "bazel test //..." bazel test //...
stage "bazel test --config=asan //..." bazel test --config=asan //...
stage "bazel test --config=ubsan //..." bazel test --config=ubsan //...
stage "bazel test --config=tsan (threaded suites)" \
  bazel test --config=tsan "${threaded_targets[@]}"
stage "fuzzing (${FUZZ_SECONDS:-60} s per fuzzer)" tests/fuzz/run_fuzzers.sh
stage "Soft-RoCE VM (rxe)" ci/softroce/run_ci_stage.sh

echo
echo "=== all stages passed in ${SECONDS} s ==="
