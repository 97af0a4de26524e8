#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine and runs every test rdma_transport has.
# This is the README's test command and what .ci/run calls. Run as root (it
# installs Debian packages). Each stage prints a banner and its duration; the
# script stops at the first failing stage with that stage's status.
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

stage "install build dependencies" ci/install_deps.sh build
stage "bazel test //..." bazel test //...
stage "bazel test --config=asan //..." bazel test --config=asan //...
stage "bazel test --config=ubsan //..." bazel test --config=ubsan //...

echo
echo "=== all stages passed in ${SECONDS} s ==="
