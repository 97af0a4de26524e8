#!/usr/bin/env bash
# An apt configuration of CI's own for another Debian suite (trixie, sid...)
# of the mirror this machine already uses. Prints the configuration file's
# path on stdout, for APT_CONFIG=... apt-cache / apt-get download; progress
# goes to stderr.
#
#   ci/apt_suite.sh SUITE           # e.g. trixie, sid
#   ci/apt_suite.sh --mirror        # print the mirror's address only
#
# The machine's own apt configuration is never changed: the suite gets its
# own source list, package lists and cache under
# <cache>/apt/<suite>/ (<cache> as in softroce/fetch_kernel.sh). The mirror
# is read at run time from the machine's apt sources (the entry that serves
# Debian 12, "bookworm"), or taken from $DEBIAN_MIRROR; no host name is
# written into this repository. The lists are refreshed when older than
# $APT_SUITE_MAX_AGE seconds (default 86400) or missing; when a refresh
# fails, lists of an earlier run are used. Unstable's Release file on the
# mirror may be past its Valid-Until date, so that check is off here.
set -euo pipefail

log() { echo "apt_suite: $*" >&2; }
die() { log "error: $*"; exit 1; }

source "$(dirname "${BASH_SOURCE[0]}")/cache_root.sh"

# The URI of the machine's Debian (not -security) archive, from deb822
# .sources files or one-line sources.list entries naming bookworm.
machine_mirror() {
  if [[ -n "${DEBIAN_MIRROR:-}" ]]; then
    echo "${DEBIAN_MIRROR%/}"
    return
  fi
  local file uri
  for file in /etc/apt/sources.list.d/*.sources; do
    [[ -f "$file" ]] || continue
    uri=$(awk '
      /^[[:space:]]*$/ { if (u != "" && s ~ /(^| )bookworm( |$)/ && u !~ /security/) { print u; exit } u = ""; s = ""; next }
      /^URIs:/ { u = $2 }
      /^Suites:/ { $1 = ""; s = $0 " " }
      END { if (u != "" && s ~ /(^| )bookworm( |$)/ && u !~ /security/) print u }
    ' "$file" | head -n 1)
    if [[ -n "$uri" ]]; then
      echo "${uri%/}"
      return
    fi
  done
  for file in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [[ -f "$file" ]] || continue
    uri=$(awk '$1 == "deb" {
        i = 2; if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
        if ($(i + 1) == "bookworm" && $i !~ /security/) { print $i; exit }
      }' "$file")
    if [[ -n "$uri" ]]; then
      echo "${uri%/}"
      return
    fi
  done
  return 1
}

[[ $# == 1 ]] || die "usage: $0 SUITE | --mirror"
mirror=$(machine_mirror) || die "no Debian 12 (bookworm) archive in /etc/apt/sources*; set DEBIAN_MIRROR"
if [[ "$1" == --mirror ]]; then
  echo "$mirror"
  exit 0
fi
suite=$1
[[ "$suite" =~ ^[a-z0-9-]+$ ]] || die "bad suite name: $suite"

dir="$(cache_root)/apt/$suite"
mkdir -p "$dir"/{lists/partial,cache/archives/partial,parts,prefs}
# apt drops to the _apt user for downloads.
chmod 0755 "$dir" "$dir/lists" "$dir/cache"
if id _apt >/dev/null 2>&1; then chown _apt "$dir/lists/partial" "$dir/cache/archives/partial" 2>/dev/null || true; fi

keyring=/usr/share/keyrings/debian-archive-keyring.gpg
cat >"$dir/sources.list.new" <<EOF
deb [signed-by=$keyring] $mirror $suite main
EOF
mv "$dir/sources.list.new" "$dir/sources.list"
cat >"$dir/apt.conf.new" <<EOF
// Written by ci/apt_suite.sh: Debian $suite from this machine's mirror.
Dir::Etc::sourcelist "$dir/sources.list";
Dir::Etc::sourceparts "$dir/parts";
Dir::Etc::preferencesparts "$dir/prefs";
Dir::State::lists "$dir/lists";
Dir::Cache "$dir/cache";
Acquire::Check-Valid-Until "false";
Acquire::Languages "none";
APT::Get::List-Cleanup "true";
EOF
mv "$dir/apt.conf.new" "$dir/apt.conf"

max_age=${APT_SUITE_MAX_AGE:-86400}
stamp="$dir/updated"
if [[ ! -f "$stamp" ]] || (($(date +%s) - $(stat -c %Y "$stamp") > max_age)); then
  exec {lock_fd}>"$dir/.lock"
  flock "$lock_fd"
  log "apt-get update for $suite from $mirror"
  if APT_CONFIG="$dir/apt.conf" apt-get update -q >&2; then
    touch "$stamp"
  elif compgen -G "$dir/lists/*_Packages*" >/dev/null; then
    log "warning: apt-get update for $suite failed; using the lists of an earlier run"
  else
    die "apt-get update for $suite failed and there are no earlier lists"
  fi
fi
echo "$dir/apt.conf"
