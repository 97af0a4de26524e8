#!/usr/bin/env bash
# The Soft-RoCE VM stage of CI (.ci/run calls this after bazel test //...).
#
#   ci/softroce/run_ci_stage.sh [--out-dir DIR] [run_vm.sh arguments...]
#
# Installs the vm packages, builds the project's binaries for the guest
# (bazel -c opt: rdma_devices, the QP pair test, the end-to-end suite over
# libibverbs, and rdma_pingpong / rdma_bw when they exist), fetches (or
# reuses) Debian's kernel, boots the VM and runs guest_ci.sh in it, then
# prints a summary. It does so once per kernel of $SOFTROCE_KERNELS, one VM
# each, one after the other (default "bookworm trixie sid": Debian 12's 6.1,
# Debian 13's 6.12 and unstable's 7.x; "bookworm" is the machine's own apt,
# the others come from the same mirror through ci/apt_suite.sh), and ends
# with one line per kernel: e2e count, QP pair result, TOS verdict. The
# performance run (guest_perf.sh) runs on the first kernel only.
# SOFTROCE_GUEST=smoke runs guest_smoke.sh alone instead (rdma-core and
# perftest only, no build); SOFTROCE_GUEST=e2e runs only the e2e suite
# (guest_e2e.sh; run_loaded_e2e.sh uses it under host load). Artifacts
# (summary.txt, perftest outputs, tcpdump captures and decodings, console
# log, guest dmesg) land in DIR/<suite>/, DIR by default .cache/softroce/ in
# the checkout, emptied first.
# Further arguments go to run_vm.sh, after the stage's own, so that
#
#   --file bazel-bin/tools/rdma_devices:/usr/local/bin/rdma_devices
#   --guest-script ci/softroce/guest_e2e.sh
#
# add binaries or replace the guest script. Exit status is run_vm.sh's:
# 0 pass, 1..89 test failure, 90 VM infrastructure failure, 91 timeout,
# 92 interrupted, 93 bad invocation (see docs/soft-roce.md).
# $SOFTROCE_TIMEOUT (default 840 s, the bound CI runs with: 6.1's VM took
# 618 s with both host cores busy on 2026-12-04) bounds each VM;
# $SOFTROCE_SELFTEST=1 runs selftest.sh (the runner's own failure modes,
# about two minutes) first.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
vm_timeout=${SOFTROCE_TIMEOUT:-840}
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

banner "capture helpers (guest_lib_test.sh)"
"$here/guest_lib_test.sh" || { echo "run_ci_stage: TEST FAILURE: the guest's capture helpers failed their test"; exit 1; }

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
  else
    # The per-kernel rxe facts (docs/soft-roce.md): a C probe of its own.
    probe="$out_dir/rxe_probe"
    cc -O2 -Wall -Wextra -Werror -o "$probe" "$here/rxe_probe.c" -libverbs ||
      { echo "run_ci_stage: FAILED to build rxe_probe"; exit 1; }
    binaries+=(--file "$probe:/usr/local/bin/rxe_probe")
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

read -r -a kernels <<<"${SOFTROCE_KERNELS:-bookworm trixie sid}"
((${#kernels[@]})) || { echo "run_ci_stage: SOFTROCE_KERNELS is empty"; exit 93; }

# The runner in the background so that a signal to this script reaches it:
# asynchronous commands of a script ignore SIGINT, so forward SIGTERM always.
run_vm_pid=''
interrupted=0
# shellcheck disable=SC2317 # runs from the trap
forward() {
  interrupted=1
  if [[ -n "$run_vm_pid" ]]; then kill -TERM "$run_vm_pid" 2>/dev/null || true; fi
}
trap forward INT TERM HUP

verdict_of() {
  case "$1" in
    0) echo "PASS" ;;
    90) echo "INFRASTRUCTURE FAILURE (90): the VM itself failed; this says nothing about the code under test" ;;
    91) echo "TIMEOUT (91): the VM ran past ${vm_timeout}s and was killed" ;;
    92) echo "INTERRUPTED (92)" ;;
    93) echo "BAD INVOCATION (93)" ;;
    *) echo "TEST FAILURE ($1): see the FAIL lines and the artifacts" ;;
  esac
}

# Known failures, "suite:Test.Name" each: a kernel whose only failed check
# is the e2e suite with only these tests failing is reported as
# "KNOWN FAILURE" and does not fail the stage. Each entry names its issue;
# delete it with the fix. $SOFTROCE_KNOWN_FAILURES replaces the list.
# Empty: issue 10's 16 MiB WRITE/READ (the completion watchdog on 6.12 and
# 7.x under TCG) was fixed by pacing rxe's RDMA (connection.h).
read -r -a known_failures <<<"${SOFTROCE_KNOWN_FAILURES-}"

# only_known_failures SUITE DIR: true if every FAIL line of DIR/summary.txt is
# the e2e suite and every test it names is a known failure of SUITE.
only_known_failures() {
  local suite=$1 summary="$2/summary.txt" line test
  [[ -f "$summary" ]] || return 1
  local fails
  fails=$(grep '^FAIL ' "$summary" || true)
  [[ -n "$fails" ]] || return 1
  while IFS= read -r line; do
    [[ "$line" == "FAIL e2e suite over rxe:"*"; failed: "* ]] || return 1
    for test in ${line##*; failed: }; do
      [[ " ${known_failures[*]} " == *" $suite:$test "* ]] || return 1
    done
  done <<<"$fails"
}

# infra_reason DIR: the reason of an infrastructure failure, one line: the
# guest's own INFRASTRUCTURE FAILURE line (topology, modules), else
# run_vm.sh's.
infra_reason() {
  local line
  line=$(LC_ALL=C grep -a -h 'INFRASTRUCTURE FAILURE' "$1/vm-console.log" 2>/dev/null | tail -n 1 | tr -d '\r')
  [[ -n "$line" ]] || line=$(grep -h 'INFRASTRUCTURE FAILURE' "$1/run_vm.log" 2>/dev/null | tail -n 1)
  echo "${line:-no reason recorded (see $1/run_vm.log)}"
}

# run_kernel SUITE: fetch that suite's kernel, boot it, run the guest script.
# Sets kernel_status and appends to the report.
report=()
first_status=0
run_kernel() {
  local suite=$1 dir="$out_dir/$1" kernel_dir start=$SECONDS fetch_args=() extra_env=()
  shift
  mkdir -p "$dir"
  [[ "$suite" == bookworm || "$suite" == host ]] || fetch_args=(--suite "$suite")
  banner "kernel ($suite)"
  if ! kernel_dir=$("$here/fetch_kernel.sh" "${fetch_args[@]}"); then
    echo "run_ci_stage: INFRASTRUCTURE FAILURE: cannot fetch the $suite kernel"
    kernel_status=$EXIT_INFRA
    report+=("$(printf '%-9s %-22s %s' "$suite" "?" "$(verdict_of "$kernel_status")")")
    return
  fi
  # The performance run only on the first kernel: it is not judged, and
  # three of them would cost minutes.
  [[ "$suite" == "${kernels[0]}" ]] || extra_env=(--env SOFTROCE_PERF=0)
  # An infrastructure failure (status 90: qemu, the guest kernel, modules,
  # the topology) says nothing about the code under test: the VM is booted
  # again, up to $SOFTROCE_INFRA_RETRIES more times (default 1), and the
  # report names every such failure and its reason. The failed attempt's
  # artifacts stay in DIR/<suite>.infra-N.
  local attempt=0 retries=${SOFTROCE_INFRA_RETRIES:-1} infra_notes=()
  while :; do
    if ((attempt == 0)); then
      banner "VM ($suite, $(basename "$kernel_dir"))"
    else
      banner "VM ($suite, $(basename "$kernel_dir")), attempt $((attempt + 1)) after an infrastructure failure"
    fi
    "$here/run_vm.sh" --guest-script "$guest_script" --kernel-dir "$kernel_dir" \
      --out-dir "$dir" --timeout "$vm_timeout" \
      --env "RDMA_TEST_SCALE=${RDMA_TEST_SCALE:-10}" "${extra_env[@]}" "${binaries[@]}" "$@" &
    run_vm_pid=$!
    while :; do
      kernel_status=0
      wait "$run_vm_pid" || kernel_status=$?
      kill -0 "$run_vm_pid" 2>/dev/null || break # else wait was cut short by a signal
    done
    run_vm_pid=''
    ((kernel_status == EXIT_INFRA && interrupted == 0)) || break
    local reason
    reason=$(infra_reason "$dir")
    infra_notes+=("attempt $((attempt + 1)): $reason")
    echo "run_ci_stage: INFRASTRUCTURE FAILURE on $suite (attempt $((attempt + 1))): $reason"
    echo "run_ci_stage: last lines of the guest console:"
    tail -n 25 "$dir/vm-console.log" 2>/dev/null | tr -d '\r' | sed 's/^/  | /' || true
    ((attempt < retries)) || break
    attempt=$((attempt + 1))
    rm -rf "$dir.infra-$attempt"
    mv "$dir" "$dir.infra-$attempt"
    mkdir -p "$dir"
  done
  local known=''
  if ((kernel_status >= 1 && kernel_status <= 89)) && only_known_failures "$suite" "$dir"; then
    known=" (KNOWN FAILURE: $(grep '^FAIL ' "$dir/summary.txt" | sed 's/.*; failed: //'), see run_ci_stage.sh)"
    kernel_status=0
  fi

  banner "summary ($suite)"
  echo "kernel:      $(basename "$kernel_dir") (cached in $(dirname "$kernel_dir"))"
  grep -h 'qemu start to guest script' "$dir/run_vm.log" 2>/dev/null | sed 's/^run_vm: /boot:        /' || true
  if [[ -f "$dir/summary.txt" ]]; then
    echo "checks:"
    sed 's/^/  /' "$dir/summary.txt"
  fi
  echo "artifacts:   $dir ($(find "$dir" -type f | wc -l) files)"
  echo "VM time:     $((SECONDS - start))s"
  echo "result:      $(verdict_of "$kernel_status")$known"
  local note
  for note in ${infra_notes[@]+"${infra_notes[@]}"}; do echo "infra:       $note"; done

  # One line for the closing report: e2e count, QP pair, TOS verdict.
  local e2e qp tos
  e2e=$(grep -o 'e2e suite over rxe.*: [0-9]*/[0-9]* tests passed' "$dir/summary.txt" 2>/dev/null |
    grep -o '[0-9]*/[0-9]* tests passed' | head -n 1 || true)
  qp=$(grep -o '^[A-Z]* QP pair, MC_IB_TC=136: [0-9]*/[0-9]*' "$dir/summary.txt" 2>/dev/null |
    sed 's/^\([A-Z]*\) .*: /\1 /' | head -n 1 || true)
  local tos_total tos_pass
  tos_total=$(grep -c 'TOS' "$dir/summary.txt" 2>/dev/null || true)
  tos_pass=$(grep -c '^PASS .*TOS' "$dir/summary.txt" 2>/dev/null || true)
  if ((tos_total == 0)); then
    tos="TOS: no check ran"
  elif ((tos_pass == tos_total)); then
    tos="TOS: PASS ($tos_pass/$tos_total checks)"
  else
    tos="TOS: FAIL ($tos_pass/$tos_total checks passed)"
  fi
  report+=("$(printf '%-9s %-22s e2e %-18s QP pair %-10s %s; %s (%ss)' "$suite" "$(basename "$kernel_dir")" \
    "${e2e:-none}" "${qp:-none}" "$tos" "$(verdict_of "$kernel_status" | cut -d: -f1)${known:+ with known failure}" "$((SECONDS - start))")")
  for note in ${infra_notes[@]+"${infra_notes[@]}"}; do report+=("          infrastructure failure, $note"); done
}

for suite in "${kernels[@]}"; do
  run_kernel "$suite" "$@"
  if ((first_status == 0 && kernel_status != 0)); then first_status=$kernel_status; fi
  ((interrupted == 0)) || break
done
trap - INT TERM HUP

banner "per-kernel report"
printf '%s\n' "${report[@]}" | tee "$out_dir/kernels.txt"
echo "artifacts:   $out_dir"
echo "stage time:  ${SECONDS}s"
echo "result:      $(verdict_of "$first_status")"
exit "$first_status"
