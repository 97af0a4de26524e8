# Sourced by the tools' shell tests (flags_test.sh, zero_copy_test.sh, ...):
# one check per call, a summary at the end.
#
#   source "${TEST_SRCDIR}/${TEST_WORKSPACE}/tools/cli_expect.sh"
#   expect "unknown flag" nonzero "Unknown command line flag" -- "$bw" --bogus
#   finish

failures=0

# expect NAME WANT_RC PATTERN -- COMMAND...: COMMAND exits WANT_RC ("nonzero"
# for any failure) and prints PATTERN (grep -E) on stdout or stderr. Its
# output stays in $last_output for expect_line.
last_output=""
expect() {
  local name=$1 want=$2 pattern=$3
  shift 4
  local out rc
  out=$("$@" 2>&1)
  rc=$?
  last_output=$out
  if [[ "$want" == nonzero && $rc -eq 0 ]] ||
    [[ "$want" != nonzero && $rc -ne $want ]]; then
    echo "FAIL $name: exit $rc, want $want; output:"
    echo "$out" | head -20
    failures=$((failures + 1))
  elif ! grep -qE -- "$pattern" <<<"$out"; then
    echo "FAIL $name: no /$pattern/ in:"
    echo "$out" | head -20
    failures=$((failures + 1))
  else
    echo "ok   $name"
  fi
}

# expect_line NAME PATTERN: the last expect()'s output has PATTERN (grep -E)
# too, without running its command again.
expect_line() {
  local name=$1 pattern=$2
  if grep -qE -- "$pattern" <<<"$last_output"; then
    echo "ok   $name"
  else
    echo "FAIL $name: no /$pattern/ in:"
    echo "$last_output" | head -30
    failures=$((failures + 1))
  fi
}

# Exits 1 if any check failed.
finish() {
  if [[ $failures -ne 0 ]]; then
    echo "$failures check(s) failed"
    exit 1
  fi
  echo "all checks passed"
}
