#!/usr/bin/env bash
# The message path's instruction budget, checked: counts the transport's own
# instructions a message at 64 B on the simulator (message_instructions.sh,
# copy and zero copy, inline off) and holds them to
# tools/message_instructions_budget.txt (instruction_budget.py: at most 5%
# over, with the compiler the budget names). CI runs it.
#
#   tools/check_instruction_budget.sh [--binary PATH] [--budget FILE]
#                                     [--counts CSV] [--keep-counts CSV]
#
# --binary: a transport_benchmark built -c opt (default: built here).
# --budget: another budget file. --counts: compare a CSV written by
# message_instructions.sh --csv instead of counting. --keep-counts: where to
# keep the counts made. Exit 0 within budget, 1 over it, 2 on bad input.
# Needs valgrind and python3.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
budget=$here/message_instructions_budget.txt
binary=''
counts=''
keep=''
while [[ $# -gt 0 ]]; do
  case $1 in
    --binary) binary=$2; shift ;;
    --budget) budget=$2; shift ;;
    --counts) counts=$2; shift ;;
    --keep-counts) keep=$2; shift ;;
    -h|--help) sed -n '2,/^set /{/^#/p}' "$0"; exit 0 ;;
    *) echo "check_instruction_budget: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[[ -r "$budget" ]] || { echo "check_instruction_budget: no budget file '$budget'" >&2; exit 2; }

if [[ -z "$counts" ]]; then
  counts=${keep:-$(mktemp)}
  [[ -n "$keep" ]] || trap 'rm -f "$counts"' EXIT
  "$here/message_instructions.sh" --sizes 64 ${binary:+--binary "$binary"} \
    --csv "$counts"
fi
# The compiler Bazel's C++ toolchain runs (gcc, as Debian's Bazel finds it).
compiler=$("${CC:-gcc}" --version | head -n 1)
python3 "$here/instruction_budget.py" --budget "$budget" --counts "$counts" \
  --compiler "$compiler"
