#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# The module loads and unloads cleanly and shows its identity: version, parameters read-only in sysfs.
. "$(dirname "$0")/../kselftest/ktap_helpers.sh"
. "$(dirname "$0")/lib.sh"

ko=$PEERMEM_MODULES/peermem_rs.ko
ktap_print_header
[ -f "$ko" ] || ktap_exit_fail_msg "no $ko"
ktap_set_plan 7

mark="peermem-selftest: skeleton_load $$"
kmsg_mark "$mark"
check "insmod peermem_rs.ko" insmod "$ko"
check "module is listed" module_loaded peermem_rs
version=$(cat /sys/module/peermem_rs/version 2>/dev/null)
check "version in sysfs ($version)" [ -n "$version" ]
check "parameters visible read-only with defaults" sh -c '
	p=/sys/module/peermem_rs/parameters
	[ "$(cat $p/persistent_api_support)" = 1 ] && [ "$(cat $p/peerdirect_support)" = 0 ] &&
	[ "$(stat -c %a $p/persistent_api_support)" = 444 ] && [ "$(stat -c %a $p/peerdirect_support)" = 444 ]'
check "load is announced in the kernel log" sh -c "dmesg | sed -n '/$mark/,\$p' | grep -q 'peermem-rs $version loaded'"
check "rmmod peermem_rs" rmmod peermem_rs
check "module is gone" sh -c '! grep -q "^peermem_rs " /proc/modules'
ktap_finished
