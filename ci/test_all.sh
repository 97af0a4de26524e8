#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine and runs every test rdma_transport has.
# This is the README's test command, which .ci/run runs as the README writes
# it. It runs as root (it installs Debian packages, and the Bazel 7 chroot
# and the Soft-RoCE VMs' tools need root): run by another user, it runs
# itself again through sudo. Each stage prints a banner and its duration;
# the script stops at the first failing stage with that stage's status.
#
#   1. lint                              clang-format, buildifier (ci/lint.sh)
#   2. bazel test --config=werror //...  unit, mock and sim suites (gcc, -Werror)
#      then the swarm's 10,000 seeds      opt mode (docs/testing.md)
#   3. the same under ASan and UBSan     every suite
#   4. TSan                              the threaded suites
#   5. fuzzing                           handshake decoder, MC_* parser
#   6. tools on the sim                  rdma_demo, rdma_pingpong, rdma_bw, benchmarks,
#                                        the 64-host scale run; the message path's
#                                        instruction budget (callgrind, 64 B), and
#                                        the same check failing a lowered budget
#   7. downstream                        a separate workspace consuming rdma_transport,
#                                        and the docs' WORKSPACE code blocks
#   8. Bazel 7 (bzlmod)                  the repository as root module, the bzlmod
#                                        example, the docs' bzlmod code blocks, in a
#                                        Debian unstable chroot (ci/bazel7_stage.sh)
#   9. Soft-RoCE VMs                     the e2e suite, the QP pair test and the wire
#                                        TOS check over rxe on three kernels (6.1,
#                                        6.12, 7.x), one VM each
#  10. Soft-RoCE VM under host load      the e2e suite again on 6.12, every host
#                                        core busy (ci/softroce/run_loaded_e2e.sh;
#                                        SOFTROCE_LOADED_KERNELS picks others)
#
# BAZEL7_STAGE=0 or SOFTROCE_STAGE=0 skip those stages (for a quick local run).
# Every Bazel build shares a disk cache under ci/cache_root.sh's directory
# (ci/bazel_disk_cache.sh): a machine that ran CI before compiles only what
# changed; every test still runs.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=ci/root.sh
source ci/root.sh
# The knobs this script and its stages read, kept through sudo.
knobs=(BAZEL7_STAGE SOFTROCE_STAGE SOFTROCE_CACHE_DIR SOFTROCE_KERNELS
  SOFTROCE_LOADED_KERNELS SOFTROCE_TIMEOUT SOFTROCE_INFRA_RETRIES
  SOFTROCE_KNOWN_FAILURES FUZZ_SECONDS FUZZ_HANDSHAKE_RUNS FUZZ_MAX_SECONDS
  BAZEL_DISK_CACHE_MAX_GB DOC_EXAMPLES_DISK_CACHE
  DOC_EXAMPLES_BZLMOD_DISK_CACHE RDMA_TEST_SCALE DEBIAN_MIRROR)
again_as_root test_all "Debian packages, the Bazel 7 chroot, the Soft-RoCE VMs" \
  --preserve-env="$(IFS=,; echo "${knobs[*]}")" -- "$PWD/ci/test_all.sh" "$@"
source ci/cache_root.sh
source ci/bazel_disk_cache.sh

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
  //transport:biased_mutex_test
  //transport:connection_lock_test
  //transport:connection_test
  //tests:e2e_sim_test
  //tests:engine_readiness_stress_test
  //tests:liveness_test
  //tests:listener_admission_test
)

stage "install build dependencies" ci/install_deps.sh build
use_bazel_disk_cache
export DOC_EXAMPLES_DISK_CACHE=${DOC_EXAMPLES_DISK_CACHE:-$(bazel_disk_cache_dir)}
export DOC_EXAMPLES_BZLMOD_DISK_CACHE=${DOC_EXAMPLES_BZLMOD_DISK_CACHE:-$(bazel7_disk_cache)}
stage "lint (clang-format, buildifier)" ci/lint.sh
stage "bazel test --config=werror //..." bazel test --config=werror //...
# The swarm's CI budget (docs/testing.md): 10,000 seeds in opt mode. The
# swarm_test target above runs 500 of them in each of the three configs.
stage "swarm (10,000 seeds, opt)" \
  bazel run -c opt //tests/swarm:swarm -- --seeds=10000
# Tests only: the benchmarks and tools no test runs were compiled (-Werror)
# above; building them again instrumented would test nothing (CI time).
stage "bazel test --config=asan_ubsan //..." bazel test --config=asan_ubsan --build_tests_only //...
# The 1 GiB transfer (2 GiB of buffers, copied once) would need several
# times that in TSan's shadow memory: it runs in the other stages only.
stage "bazel test --config=tsan (threaded suites)" \
  bazel test --config=tsan --test_arg=--gtest_filter=-*Gibibyte* \
  "${threaded_targets[@]}"
stage "fuzzing (handshake 10 M executions, config ${FUZZ_SECONDS:-60} s)" \
  tests/fuzz/run_fuzzers.sh
tools_on_the_sim() {
  bazel build -c opt //tools:rdma_demo //tools:rdma_pingpong //tools:rdma_bw \
    //transport:transport_benchmark //tests:scale_run
  local bin
  bin=$(bazel info -c opt bazel-bin 2>/dev/null)
  "$bin/tools/rdma_demo"
  "$bin/tools/rdma_pingpong" --self --iterations=2000
  "$bin/tools/rdma_bw" --self --iterations=2000
  "$bin/transport/transport_benchmark" --benchmark_min_time=0.05
  # 64 hosts, 4,096 connections, all-to-all WRITEs in virtual time.
  "$bin/tests/scale_run"
  instruction_budget "$bin/transport/transport_benchmark"
}

# The message path's own instructions a message within 5% of
# tools/message_instructions_budget.txt; then the same counts against that
# budget lowered by a tenth, which must fail: the check can fail.
instruction_budget() {
  local counts lowered status
  counts=$(mktemp)
  lowered=$(mktemp)
  tools/check_instruction_budget.sh --binary "$1" --keep-counts "$counts"
  awk '$1 == "copy" || $1 == "zero_copy" {$2 = $2 * 0.9} {print}' \
    tools/message_instructions_budget.txt >"$lowered"
  set +e
  tools/check_instruction_budget.sh --counts "$counts" --budget "$lowered" >/dev/null
  status=$?
  set -e
  rm -f "$counts" "$lowered"
  if ((status != 1)); then
    echo "instruction budget: FAIL: a budget a tenth below the counts gave exit ${status}, not 1" >&2
    return 1
  fi
  echo "instruction budget: a budget a tenth below the counts fails, as it must"
}

downstream() {
  # Bazel skips its own output links only in the main workspace: a
  # downstream build descends into every bazel-* link of this checkout that
  # .bazelignore does not list. It lists those of a checkout named main or
  # rdma_transport; CI clones under any name, so its execroot link goes.
  local link
  link="bazel-$(basename "$PWD")"
  if [[ -L "$link" ]] && ! grep -qx "$link" .bazelignore; then
    echo "removing this checkout's $link link (not in .bazelignore)"
    rm -f "$link"
  fi
  ci/downstream_check.sh && ci/doc_examples.sh
}

stage "tools on the simulator" tools_on_the_sim
stage "downstream workspace and the docs' examples (Bazel 4)" downstream
if [[ "${BAZEL7_STAGE:-1}" != 0 ]]; then
  stage "Bazel 7 bzlmod (Debian unstable chroot)" ci/bazel7_stage.sh
fi
if [[ "${SOFTROCE_STAGE:-1}" != 0 ]]; then
  # Each VM's own bound: run_ci_stage.sh's default, 840 s ($SOFTROCE_TIMEOUT).
  stage "Soft-RoCE VMs (rxe on 6.1, 6.12, 7.x)" ci/softroce/run_ci_stage.sh
  stage "Soft-RoCE VM, e2e with every host core busy (${SOFTROCE_LOADED_KERNELS:-trixie})" \
    ci/softroce/run_loaded_e2e.sh
fi

echo
echo "=== all stages passed in ${SECONDS} s ==="
