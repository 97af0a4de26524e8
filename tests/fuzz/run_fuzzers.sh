#!/usr/bin/env bash
# Builds libFuzzer targets with clang (outside Bazel's gcc toolchain) and
# runs each for a bounded time on a scratch copy of its seed corpus.
#
#   tests/fuzz/run_fuzzers.sh                  # every fuzzer
#   tests/fuzz/run_fuzzers.sh handshake        # one: tests/fuzz/handshake_fuzzer.cc
#   FUZZ_SECONDS=600 tests/fuzz/run_fuzzers.sh config
#
# The handshake decoder (what a stranger on the network reaches first) runs a
# fixed number of executions instead, FUZZ_HANDSHAKE_RUNS (10 000 000; about
# 60-100 s on this machine kind), bounded by FUZZ_MAX_SECONDS (600), and fails
# when it did not get through them all.
#
# Environment: FUZZ_SECONDS (60) per fuzzer; FUZZ_OUT (/tmp/rdma_transport_fuzz)
# for binaries, logs, scratch corpora and crash artifacts; CXX (clang++).
# Fails on any crash, sanitizer report, leak, timeout (-timeout=5) or OOM
# (-rss_limit_mb=2048); prints executions, exec/s, coverage and corpus size.
# The checked-in corpus is never modified.
#
# Adding a fuzzer: write tests/fuzz/<name>_fuzzer.cc, put its seeds in
# tests/fuzz/corpus/<name>/, optionally a dictionary tests/fuzz/<name>.dict,
# list the library sources it needs in sources_for() below, and add a
# <name>_fuzzer_corpus_test to tests/fuzz/BUILD.bazel.
set -euo pipefail
cd "$(dirname "$0")/../.."

ALL_FUZZERS=(handshake config)
FUZZ_SECONDS=${FUZZ_SECONDS:-60}
FUZZ_OUT=${FUZZ_OUT:-/tmp/rdma_transport_fuzz}
CXX=${CXX:-clang++}

FUZZ_HANDSHAKE_RUNS=${FUZZ_HANDSHAKE_RUNS:-10000000}
FUZZ_MAX_SECONDS=${FUZZ_MAX_SECONDS:-600}

# Executions a fuzzer must complete (0: run for FUZZ_SECONDS instead).
runs_for() {
  case $1 in
    handshake) echo "${FUZZ_HANDSHAKE_RUNS}" ;;
    *) echo 0 ;;
  esac
}

# The library sources a fuzzer links, besides tests/fuzz/<name>_fuzzer.cc.
sources_for() {
  case $1 in
    handshake) echo "transport/handshake.cc transport/handshake_checks.cc transport/handshake_extensions.cc verbs_shim/verbs_names.cc" ;;
    config) echo "transport/config.cc transport/gid_subnet.cc" ;;
    *) return 1 ;;
  esac
}

build() {
  local name=$1 sources
  sources=$(sources_for "${name}") || {
    echo "unknown fuzzer '${name}' (known: ${ALL_FUZZERS[*]})" >&2
    return 2
  }
  # shellcheck disable=SC2046,SC2086  # word splitting is intended
  "${CXX}" -std=c++20 -g -O1 -fno-omit-frame-pointer \
    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
    -I. "tests/fuzz/${name}_fuzzer.cc" ${sources} \
    $(pkg-config --libs absl_status absl_statusor absl_strings absl_str_format) \
    -o "${FUZZ_OUT}/${name}_fuzzer"
}

# Prints the value of a libFuzzer final-stats line "stat::key: value".
final_stat() { sed -n "s/^stat::$2: *//p" "$1" | tail -1; }

run() {
  local name=$1
  local binary="${FUZZ_OUT}/${name}_fuzzer"
  local corpus="${FUZZ_OUT}/${name}_corpus"
  local log="${FUZZ_OUT}/${name}.log"
  local seeds="tests/fuzz/corpus/${name}"
  local dict="tests/fuzz/${name}.dict"
  local -a extra=()
  [[ -f "${dict}" ]] && extra+=("-dict=${dict}")

  rm -rf "${corpus}" "${FUZZ_OUT}/${name}-"*
  mkdir -p "${corpus}"
  # (set -e does not apply here: run is called as `run ... || ...`.)
  cp "${seeds}"/* "${corpus}/" || return 1
  local seed_count
  seed_count=$(find "${corpus}" -type f | wc -l)
  if [[ ${seed_count} -eq 0 ]]; then
    echo "=== ${name}: no seeds in ${seeds}" >&2
    return 1
  fi

  local runs
  local -a budget
  runs=$(runs_for "${name}")
  if [[ ${runs} -gt 0 ]]; then
    budget=(-runs="${runs}" -max_total_time="${FUZZ_MAX_SECONDS}")
    echo "=== ${name}: ${runs} executions (at most ${FUZZ_MAX_SECONDS} s)" \
      "from ${seed_count} seeds (log ${log}) ==="
  else
    budget=(-max_total_time="${FUZZ_SECONDS}")
    echo "=== ${name}: ${FUZZ_SECONDS} s from ${seed_count} seeds (log ${log}) ==="
  fi
  local status=0
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:symbolize=1 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "${binary}" "${corpus}" "${extra[@]}" \
    "${budget[@]}" -timeout=5 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="${FUZZ_OUT}/${name}-" \
    >"${log}" 2>&1 || status=$?

  local artifacts
  artifacts=$(find "${FUZZ_OUT}" -maxdepth 1 -name "${name}-*" -type f)
  if [[ ${status} -ne 0 || -n "${artifacts}" ]]; then
    tail -60 "${log}" >&2
    echo "=== ${name}: FAILED (exit ${status}); artifacts: ${artifacts:-none}" >&2
    return 1
  fi

  local done_line execs rate cov ft corp corpus_count
  done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "${log}" | tail -1)
  execs=$(final_stat "${log}" number_of_executed_units)
  rate=$(final_stat "${log}" average_exec_per_sec)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"${done_line}")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"${done_line}")
  corp=$(sed -n 's/.* corp: \([^ ]*\).*/\1/p' <<<"${done_line}")
  corpus_count=$(find "${corpus}" -type f | wc -l)
  if [[ ${runs} -gt 0 && ${execs:-0} -lt ${runs} ]]; then
    echo "=== ${name}: FAILED: only ${execs:-0} of ${runs} executions within" \
      "${FUZZ_MAX_SECONDS} s (${rate}/s)" >&2
    return 1
  fi
  echo "=== ${name}: passed: ${execs} executions (${rate}/s), cov ${cov}," \
    "ft ${ft}, corpus ${corp} in memory, ${corpus_count} files in" \
    "${corpus} (from ${seed_count} seeds), peak rss" \
    "$(final_stat "${log}" peak_rss_mb) MB"
}

main() {
  local -a fuzzers=("$@")
  if [[ ${#fuzzers[@]} -eq 0 || "${fuzzers[0]}" == all ]]; then
    fuzzers=("${ALL_FUZZERS[@]}")
  fi
  mkdir -p "${FUZZ_OUT}"
  local name failed=()
  for name in "${fuzzers[@]}"; do
    build "${name}" || { failed+=("${name}"); continue; }
    run "${name}" || failed+=("${name}")
  done
  if [[ ${#failed[@]} -gt 0 ]]; then
    echo "fuzzers failed: ${failed[*]}" >&2
    return 1
  fi
}

main "$@"
