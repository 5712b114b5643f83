#!/bin/bash
# First process in the guest's real root (the host's files, read-only, under a tmpfs overlay): mounts
# what programs expect, makes the harness's kernel modules visible to modprobe, runs the guest script,
# records its exit code in the output folder and powers the machine off.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs tmpfs /run
mkdir -p /usr/lib/modules
mount --bind "$rs_modules" /usr/lib/modules
echo /sbin/modprobe > /proc/sys/kernel/modprobe
hostname verbs-vm
dmesg -n 1
echo "guest: up after $(cut -d' ' -f1 /proc/uptime) s, kernel $(uname -r)"
rc=99
if [ -n "$rs_guest" ]; then
  bash "$rs_guest"
  rc=$?
fi
echo "$rc" > "$rs_out/guest-rc"
sync
echo "guest: exit code $rc, powering off after $(cut -d' ' -f1 /proc/uptime) s"
echo o > /proc/sysrq-trigger
sleep 10
