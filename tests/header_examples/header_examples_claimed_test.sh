#!/usr/bin/env bash
# Every indented block in the comments of every public header is either
# compiled by a harness of this folder or listed in not_code.txt
# (header_examples.py check).
#
#   header_examples_claimed_test.sh SCRIPT NOT_CODE HARNESS... -- HEADER...
set -euo pipefail
script=$1 not_code=$2
shift 2
harnesses=()
while [[ $1 != -- ]]; do
  harnesses+=("$1")
  shift
done
shift
python3 "$script" check --not-code "$not_code" --harness "${harnesses[@]}" \
  --header "$@"
