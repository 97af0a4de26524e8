#!/usr/bin/env bash
# callgrind_message_cost.py on a profile written by hand
# (testdata/message_cost.callgrind), whose figures are worked out here:
#   transport (Send, Receive; 2 Sends): Send 10 + Receive 20 + Helper 6
#     own, and 100 + 10 + 40 in SimVerbs: own 36 / 2 = 18.0, verbs 75.0;
#     calls made 2 + 2 (Send) + 1 (Helper) + 4 (Receive) = 9 / 2 = 4.50
#   raw (2 Messages): 8 own, 90 in SimVerbs: own 4.0, verbs 45.0; 2 / 2
# and, from the profile's second event (Bc, as --branch-sim=yes writes
# it), the conditional branches: transport Send 3 + Helper 2 + Receive 5
# own = 10 / 2 = 5.0 (the 50 + 2 + 8 in SimVerbs are not its own); raw
# 4 / 2 = 2.0. The same profile cut to its first event prints no
# branches. Then its refusals: a function the profile lacks, no --group.
set -euo pipefail

tool=${TEST_SRCDIR:+$TEST_SRCDIR/$TEST_WORKSPACE/}tools/callgrind_message_cost.py
profile=${TEST_SRCDIR:+$TEST_SRCDIR/$TEST_WORKSPACE/}tools/testdata/message_cost.callgrind
fail() { echo "FAIL: $*" >&2; exit 1; }

got=$(python3 "$tool" "$profile" \
  --group transport=ns::Connection::Send,ns::Connection::Receive \
  --group raw=ns::RawQpPair::Message)
want='transport own 18.0 verbs 75.0 made 4.50 calls 2 branches 5.0
raw own 4.0 verbs 45.0 made 1.00 calls 2 branches 2.0'
[[ "$got" == "$want" ]] || fail "got:
$got
want:
$want"

ir_only=$(mktemp)
trap 'rm -f "$ir_only"' EXIT
sed 's/^events: Ir Bc$/events: Ir/' "$profile" >"$ir_only"
got=$(python3 "$tool" "$ir_only" \
  --group transport=ns::Connection::Send,ns::Connection::Receive)
[[ "$got" == 'transport own 18.0 verbs 75.0 made 4.50 calls 2' ]] ||
  fail "one event: got: $got"

if err=$(python3 "$tool" "$profile" --group x=ns::Connection::Close 2>&1); then
  fail "a missing function was accepted: $err"
fi
[[ "$err" == *"x: no function ns::Connection::Close in the profile"* ]] ||
  fail "unclear refusal: $err"

if python3 "$tool" "$profile" >/dev/null 2>&1; then
  fail "no --group was accepted"
fi
echo PASS
