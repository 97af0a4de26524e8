#!/usr/bin/bash
# /init of the Soft-RoCE VM (PID 1; copied in by build_initramfs.sh).
#
# Mounts the kernel filesystems, loads the RDMA modules in order, runs
# /softroce/guest_script.sh with /artifacts as its working directory, writes
# /artifacts as a tar onto the raw disk /dev/vdb, then prints the result marker
#
#   SOFTROCE_RESULT=<rc> run=<run id>
#
# and powers off. run_vm.sh on the host turns the marker into its exit status;
# the run id keeps a stray copy of the marker (say, a log cat'ed by the guest
# script) from ending a later run. A failure before the guest script starts is
# reported as
#
#   SOFTROCE_INFRA=<reason> run=<run id>
#
# PID 1 must never exit (the kernel would panic), so no `set -e` here.
set -uo pipefail

export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/usr/libexec/softroce/busybox
export HOME=/root TERM=dumb LANG=C.UTF-8
umask 022

# shellcheck source=/dev/null
source /etc/softroce/init.conf # RUN_ID, KVER, ARTIFACT_DISK

say() { echo "softroce-init: $*"; }

power_off() {
  sync
  echo o >/proc/sysrq-trigger
  sleep 5
  # Still here: panic=-1 plus qemu -no-reboot turn a reboot into an exit too.
  echo b >/proc/sysrq-trigger
  sleep infinity
}

infra_fail() {
  say "INFRASTRUCTURE FAILURE: $*"
  echo "SOFTROCE_INFRA=${*// /_} run=$RUN_ID"
  power_off
}

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null || true
mkdir -p /dev/pts /dev/shm /run /tmp
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
ln -sf /proc/self/fd /dev/fd
ln -sf /proc/self/fd/0 /dev/stdin
ln -sf /proc/self/fd/1 /dev/stdout
ln -sf /proc/self/fd/2 /dev/stderr
exec </dev/null >/dev/console 2>&1

say "kernel $(uname -r) up after $(cut -d' ' -f1 /proc/uptime)s"

# Modules in dependency order (build_initramfs.sh resolved them on the host
# with modprobe --show-depends). crc32_generic comes first: rdma_rxe asks the
# crypto API for crc32 and without it `rdma link add` fails with ENOENT.
while read -r module args; do
  [[ -n "$module" ]] || continue
  # shellcheck disable=SC2086 # args are module parameters, one word each
  insmod "/usr/lib/modules/$KVER/$module" $args || infra_fail "insmod $module failed"
done </etc/softroce/modules
grep -q " /sys/kernel/config " /proc/mounts || mount -t configfs configfs /sys/kernel/config 2>/dev/null || true

ip link set lo up || infra_fail "cannot bring lo up"

mkdir -p /artifacts
chmod 1777 /artifacts # tcpdump -w writes after dropping to user tcpdump
if [[ -f /etc/softroce/env ]]; then
  # shellcheck source=/dev/null
  source /etc/softroce/env
fi
export SOFTROCE_DIR=/softroce ARTIFACTS=/artifacts SOFTROCE_KVER=$KVER

say "starting guest script after $(cut -d' ' -f1 /proc/uptime)s"
echo "SOFTROCE_GUEST_START run=$RUN_ID"
(cd /artifacts && exec bash /softroce/guest_script.sh)
rc=$?
say "guest script exited with status $rc after $(cut -d' ' -f1 /proc/uptime)s"
dmesg >/artifacts/guest-dmesg.txt 2>&1 || true

for _ in {1..50}; do
  [[ -b "$ARTIFACT_DISK" ]] && break
  sleep 0.1
done
if [[ -b "$ARTIFACT_DISK" ]]; then
  if tar -C /artifacts -cf "$ARTIFACT_DISK" . && sync; then
    echo "SOFTROCE_ARTIFACTS=ok run=$RUN_ID"
  else
    say "could not write /artifacts to $ARTIFACT_DISK (too large for the disk?)"
  fi
else
  say "no artifact disk $ARTIFACT_DISK; artifacts stay in the VM"
fi

echo "SOFTROCE_RESULT=$rc run=$RUN_ID"
power_off
