#!/usr/bin/env bash
# instruction_budget.py on counts written here: passes at its budget and up
# to 5% over it, fails above that, fails when the budget was counted with
# another compiler, and refuses files it cannot read as a budget or counts.
set -euo pipefail

tool=${TEST_SRCDIR:+$TEST_SRCDIR/$TEST_WORKSPACE/}tools/instruction_budget.py
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
compiler='gcc (Debian 12.2.0-14+deb12u1) 12.2.0'

budget() {  # budget COPY ZERO_COPY
  printf '# a budget\ncompiler %s\ncopy %s\nzero_copy %s\n' "$compiler" "$1" "$2" >"$work/budget"
}
counts() {  # counts COPY ZERO_COPY: as message_instructions.sh --csv writes them
  {
    echo "bytes,path,inline,transport_own,raw_own,ratio,transport_branches,raw_branches,transport_calls,raw_calls"
    echo "64,copy,0,$1,192.0,3.18,90.1,26.0,5.72,7.05"
    echo "64,zero copy,0,$2,192.0,3.36,99.1,26.0,4.72,7.05"
    echo "4096,copy,0,9999.0,192.0,9.99,90.1,26.0,5.72,7.05"
  } >"$work/counts"
}
check() { python3 "$tool" --budget "$work/budget" --counts "$work/counts" --compiler "${1:-$compiler}"; }

budget 600.0 640.0
counts 600.0 640.0
check >/dev/null || fail "counts equal to the budget failed"
counts 629.9 671.9  # 4.98% and 4.98% over
check >/dev/null || fail "counts within 5% failed"
counts 630.1 640.0  # copy 5.02% over
if out=$(check); then fail "a count 5.02% over passed: $out"; fi
[[ "$out" == *"copy: 630.1 instructions a message is 5.0% over the budget of 600.0"* ]] ||
  fail "unclear refusal: $out"
# The budget lowered below the counts: fails.
counts 600.0 640.0
budget 540.0 576.0
if out=$(check); then fail "a budget 10% below the counts passed: $out"; fi
# Another compiler's budget says nothing of this one's counts.
budget 600.0 640.0
if out=$(check 'clang version 14.0.6'); then fail "another compiler passed: $out"; fi
[[ "$out" == *"counted with 'gcc (Debian 12.2.0-14+deb12u1) 12.2.0', this build's compiler is 'clang version 14.0.6'"* ]] ||
  fail "unclear compiler refusal: $out"
# Files it cannot read.
printf 'compiler %s\ncopy 600\n' "$compiler" >"$work/budget"
set +e
err=$(check 2>&1); status=$?
set -e
((status == 2)) || fail "a budget without zero_copy: exit $status"
[[ "$err" == *"needs a compiler line and a count for zero_copy"* ]] || fail "unclear: $err"
budget 600.0 640.0
echo "bytes,path,inline,transport_own" >"$work/counts"
set +e
err=$(check 2>&1); status=$?
set -e
((status == 2)) || fail "counts without 64 B rows: exit $status"
echo PASS
