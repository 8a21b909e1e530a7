#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# Guest side of a test run: runs kselftest programs and prints KTAP like the kernel's kselftest
# runner (runner.sh), with two additions the host relies on:
#   - a marker in the kernel log before and after each test, so the host can tell which test a
#     kernel splat (WARN, BUG, KASAN, lockdep, UBSAN) happened in and fail that test;
#   - the per-test timeout from the collection's `settings` file, with busybox's timeout.
#
#   ksft-run.sh COLLECTION_DIR TEST...      (run from anywhere; tests run in COLLECTION_DIR)

dir=$1
shift
collection=$(basename "$dir")
timeout=45
if [ -r "$dir/settings" ]; then
    t=$(sed -n 's/^timeout=//p' "$dir/settings")
    [ -n "$t" ] && timeout=$t
fi

echo "TAP version 13"
echo "1..$#"
n=0
for test in "$@"; do
    n=$((n + 1))
    hdr="selftests: $collection: $test"
    echo "# $hdr"
    echo "peermem-ksft: begin $collection/$test" > /dev/kmsg
    start=$(cut -d' ' -f1 /proc/uptime)
    if [ ! -x "$dir/$test" ]; then
        echo "# Warning: $dir/$test is missing or not executable"
        rc=1
    else
        rcfile=/tmp/ksft-rc.$$
        ( cd "$dir" && timeout "$timeout" "./$test" 2>&1; echo $? > "$rcfile" ) | sed -e 's/^/# /'
        rc=$(cat "$rcfile")
        rm -f "$rcfile"
    fi
    end=$(cut -d' ' -f1 /proc/uptime)
    echo "peermem-ksft: end $collection/$test rc=$rc" > /dev/kmsg
    secs=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')
    case $rc in
        0) echo "ok $n $hdr # time=${secs}s" ;;
        4) echo "ok $n $hdr # SKIP" ;;
        143|124) echo "not ok $n $hdr # TIMEOUT $timeout seconds" ;;
        *) echo "not ok $n $hdr # exit=$rc time=${secs}s" ;;
    esac
done
