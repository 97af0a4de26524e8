#!/usr/bin/env bash
# The Soft-RoCE VM stage of CI (.ci/run calls this after bazel test //...).
#
#   ci/softroce/run_ci_stage.sh [--out-dir DIR] [run_vm.sh arguments...]
#
# Installs the vm packages, builds the project's binaries for the guest
# (bazel -c opt: rdma_devices, the QP pair test, the end-to-end suite over
# libibverbs, and rdma_pingpong / rdma_bw when they exist), fetches (or
# reuses) Debian's kernel, boots the VM and runs guest_ci.sh in it, then
# prints a summary. SOFTROCE_GUEST=smoke runs guest_smoke.sh alone instead
# (rdma-core and perftest only, no build); SOFTROCE_GUEST=e2e runs only the
# e2e suite (guest_e2e.sh; run_loaded_e2e.sh uses it under host load). Artifacts (summary.txt,
# perftest outputs, tcpdump captures and decodings, console log, guest dmesg)
# land in DIR, by default .cache/softroce/ in the checkout, emptied first.
# Further arguments go to run_vm.sh, after the stage's own, so that
#
#   --file bazel-bin/tools/rdma_devices:/usr/local/bin/rdma_devices
#   --guest-script ci/softroce/guest_e2e.sh
#
# add binaries or replace the guest script. Exit status is run_vm.sh's:
# 0 pass, 1..89 test failure, 90 VM infrastructure failure, 91 timeout,
# 92 interrupted, 93 bad invocation (see docs/soft-roce.md).
# $SOFTROCE_TIMEOUT (default 600 s) bounds the VM; $SOFTROCE_SELFTEST=1 runs
# selftest.sh (the runner's own failure modes, about two minutes) first.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
readonly EXIT_INFRA=90

out_dir="$repo/.cache/softroce"
if [[ "${1:-}" == --out-dir ]]; then
  out_dir=${2:?--out-dir needs a value}
  shift 2
else
  rm -rf "$out_dir"
fi
mkdir -p "$out_dir"
out_dir=$(cd "$out_dir" && pwd)

banner() { printf '\n==== Soft-RoCE VM stage: %s\n' "$*"; }
SECONDS=0

banner "packages"
"$repo/ci/install_deps.sh" vm || { echo "run_ci_stage: INFRASTRUCTURE FAILURE: cannot install the vm packages"; exit "$EXIT_INFRA"; }

if [[ "${SOFTROCE_SELFTEST:-0}" == 1 ]]; then
  banner "runner self-test"
  "$here/selftest.sh" || { echo "run_ci_stage: INFRASTRUCTURE FAILURE: run_vm.sh self-test failed"; exit "$EXIT_INFRA"; }
fi

guest_script="$here/guest_ci.sh"
binaries=()
if [[ "${SOFTROCE_GUEST:-ci}" == smoke ]]; then
  guest_script="$here/guest_smoke.sh"
else
  targets=(//tools:rdma_devices //tests:qp_pair_ibverbs_test //tests:e2e_ibverbs_test)
  if [[ "${SOFTROCE_GUEST:-ci}" == e2e ]]; then
    guest_script="$here/guest_e2e.sh"
    targets=(//tests:e2e_ibverbs_test)
  fi
  banner "build (bazel -c opt)"
  if [[ "${SOFTROCE_GUEST:-ci}" != e2e ]]; then
    for optional in rdma_pingpong rdma_bw; do
      if grep -q "name = \"$optional\"" "$repo/tools/BUILD.bazel"; then targets+=("//tools:$optional"); fi
    done
  fi
  # A build failure is the code's, not the VM's: a test failure.
  (cd "$repo" && bazel build -c opt "${targets[@]}") || { echo "run_ci_stage: FAILED to build the guest binaries"; exit 1; }
  bin_dir=$(cd "$repo" && bazel info -c opt bazel-bin 2>/dev/null)
  for target in "${targets[@]}"; do
    path="$bin_dir/${target#//}"
    path=${path/://}
    binaries+=(--file "$path:/usr/local/bin/$(basename "$path")")
  done
fi

banner "kernel"
kernel_dir=$("$here/fetch_kernel.sh") || { echo "run_ci_stage: INFRASTRUCTURE FAILURE: cannot fetch the kernel"; exit "$EXIT_INFRA"; }

banner "VM"
# The runner in the background so that a signal to this script reaches it:
# asynchronous commands of a script ignore SIGINT, so forward SIGTERM always.
run_vm_pid=''
# shellcheck disable=SC2317 # runs from the trap
forward() {
  if [[ -n "$run_vm_pid" ]]; then kill -TERM "$run_vm_pid" 2>/dev/null || true; fi
}
trap forward INT TERM HUP
"$here/run_vm.sh" --guest-script "$guest_script" --kernel-dir "$kernel_dir" \
  --out-dir "$out_dir" --timeout "${SOFTROCE_TIMEOUT:-600}" \
  --env "RDMA_TEST_SCALE=${RDMA_TEST_SCALE:-10}" "${binaries[@]}" "$@" &
run_vm_pid=$!
while :; do
  status=0
  wait "$run_vm_pid" || status=$?
  kill -0 "$run_vm_pid" 2>/dev/null || break # else wait was cut short by a signal
done
trap - INT TERM HUP

case "$status" in
  0) verdict="PASS" ;;
  90) verdict="INFRASTRUCTURE FAILURE (90): the VM itself failed; this says nothing about the code under test" ;;
  91) verdict="TIMEOUT (91): the VM ran past ${SOFTROCE_TIMEOUT:-600}s and was killed" ;;
  92) verdict="INTERRUPTED (92)" ;;
  93) verdict="BAD INVOCATION (93)" ;;
  *) verdict="TEST FAILURE ($status): see the FAIL lines and the artifacts" ;;
esac

banner "summary"
echo "kernel:      $(basename "$kernel_dir") (cached in $(dirname "$kernel_dir"))"
grep -h 'qemu start to guest script' "$out_dir/run_vm.log" 2>/dev/null | sed 's/^run_vm: /boot:        /' || true
if [[ -f "$out_dir/summary.txt" ]]; then
  echo "checks:"
  sed 's/^/  /' "$out_dir/summary.txt"
fi
echo "artifacts:   $out_dir ($(find "$out_dir" -type f | wc -l) files)"
echo "stage time:  ${SECONDS}s"
echo "result:      $verdict"
exit "$status"
