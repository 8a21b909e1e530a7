#!/bin/busybox sh
# PID 1 of the test VM (packed into the initramfs as /init).
#
# The host packs the payload (modules, test programs, /payload/plan.sh) into the initramfs and reads
# everything back from the second serial port (ttyS1), framed in sections, so the guest needs no
# network or shared filesystem: the plan's output as it runs, its exit status, then every file the
# plan left in /results, then dmesg. The console (ttyS0) is only for people and for post-mortems.
/bin/busybox mkdir -p /bin /sbin /usr/bin /usr/sbin /proc /sys /dev /tmp /results
/bin/busybox --install -s /bin
export PATH=/usr/local/bin:/bin:/sbin:/usr/bin:/usr/sbin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t debugfs debugfs /sys/kernel/debug
mount -t tmpfs tmpfs /tmp
echo "peermem-vm: userspace after $(cut -d' ' -f1 /proc/uptime) s"

if grep -q 'peermem.shell=1' /proc/cmdline; then
    echo "peermem-vm: interactive shell; the payload is in /payload; 'exit' powers off"
    cd /payload && setsid cttyhack sh
else
    out=/dev/ttyS1
    stty -F $out raw -echo 2>/dev/null
    echo "==peermem== section output" > $out
    ( cd /payload && sh /payload/plan.sh ) > $out 2>&1
    rc=$?
    echo "==peermem== rc $rc" > $out
    for f in /results/*; do
        [ -f "$f" ] || continue
        echo "==peermem== section $(basename "$f")" > $out
        cat "$f" > $out
    done
    echo "==peermem== section dmesg" > $out
    dmesg > $out
    # The oldest record the kernel's log still holds ("prio,seq,usec,flags;text"; one read of
    # /dev/kmsg is one record): the host checks that the ring never wrapped (seq 0) and that dmesg
    # began with that record (busybox's dmesg reads at most 16 MiB of the ring, the newest).
    echo "==peermem== section kmsg-first" > $out
    dd if=/dev/kmsg bs=8192 count=1 2>/dev/null > $out
    echo "==peermem== end" > $out
fi
echo "peermem-vm: done after $(cut -d' ' -f1 /proc/uptime) s"
reboot -f
