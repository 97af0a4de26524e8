# shellcheck shell=bash
# Sourced by the scripts that need root (installing Debian packages, chroots,
# the VMs' tools): run as another user, they run themselves again through
# sudo, or stop saying what needs root.
#
#   source ci/root.sh
#   again_as_root NAME WHY [SUDO_OPTION...] -- SCRIPT ARG...
#
# Returns at once when this is root; otherwise execs `sudo [SUDO_OPTION...]
# SCRIPT ARG...`, or exits 1 naming NAME and WHY when there is no sudo.
again_as_root() {
  local name=$1 why=$2
  shift 2
  ((EUID == 0)) && return 0
  local options=()
  while [[ $1 != -- ]]; do
    options+=("$1")
    shift
  done
  shift
  if ! command -v sudo >/dev/null; then
    echo "$name: needs root ($why): run it as root, or as a user who may sudo" >&2
    exit 1
  fi
  echo "$name: not root: running again through sudo ($why)"
  exec sudo "${options[@]}" "$@"
}
