#!/usr/bin/env bash
# Runs the two commands at the top of README.md exactly as the README writes
# them, one after the other: the demo on the simulator, then every test.
# .ci/run calls it on a fresh clone (as root, on a machine with no sudo), so
# a README command that does not work as written fails CI.
#
#   ci/readme_commands.sh           # run them
#   ci/readme_commands.sh --first   # run the first only (the demo)
#   ci/readme_commands.sh --list    # print them
set -euo pipefail
cd "$(dirname "$0")/.."

# The first fenced block of README.md, its commands without their comments.
mapfile -t commands < <(awk '
  /^```/ { if (inside) exit; inside = 1; next }
  inside { sub(/[[:space:]]+#.*$/, ""); if ($0 != "") print }
' README.md)
if ((${#commands[@]} != 2)); then
  echo "readme_commands: README.md's first code block holds ${#commands[@]}" \
    "commands; it must hold two (the demo, then every test)" >&2
  exit 1
fi
case "${1:-}" in
  --list) printf '%s\n' "${commands[@]}"; exit 0 ;;
  --first) commands=("${commands[0]}") ;;
  "") ;;
  *) echo "usage: $0 [--first|--list]" >&2; exit 2 ;;
esac
for command in "${commands[@]}"; do
  echo "=== README: ${command}"
  bash -c "set -euo pipefail; ${command}"
done
