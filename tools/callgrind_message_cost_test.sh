#!/usr/bin/env bash
# callgrind_message_cost.py on a profile written by hand
# (testdata/message_cost.callgrind), whose figures are worked out here:
#   transport (Send, Receive; 2 Sends): Send 10 + Receive 20 + Helper 6
#     own, and 100 + 10 + 40 in SimVerbs: own 36 / 2 = 18.0, verbs 75.0;
#     calls made 2 + 2 (Send) + 1 (Helper) + 4 (Receive) = 9 / 2 = 4.50
#   raw (2 Messages): 8 own, 90 in SimVerbs: own 4.0, verbs 45.0; 2 / 2
# and its refusals: a function the profile lacks, an unknown option.
set -euo pipefail

tool=${TEST_SRCDIR:+$TEST_SRCDIR/$TEST_WORKSPACE/}tools/callgrind_message_cost.py
profile=${TEST_SRCDIR:+$TEST_SRCDIR/$TEST_WORKSPACE/}tools/testdata/message_cost.callgrind
fail() { echo "FAIL: $*" >&2; exit 1; }

got=$(python3 "$tool" "$profile" \
  --group transport=ns::Connection::Send,ns::Connection::Receive \
  --group raw=ns::RawQpPair::Message)
want='transport own 18.0 verbs 75.0 made 4.50 calls 2
raw own 4.0 verbs 45.0 made 1.00 calls 2'
[[ "$got" == "$want" ]] || fail "got:
$got
want:
$want"

if err=$(python3 "$tool" "$profile" --group x=ns::Connection::Close 2>&1); then
  fail "a missing function was accepted: $err"
fi
[[ "$err" == *"x: no function ns::Connection::Close in the profile"* ]] ||
  fail "unclear refusal: $err"

if python3 "$tool" "$profile" >/dev/null 2>&1; then
  fail "no --group was accepted"
fi
echo PASS
