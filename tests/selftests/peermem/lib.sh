#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# Shared helpers of the peermem-rs shell selftests. Sourced after the kernel's ktap_helpers.sh.

PEERMEM_MODULES=${PEERMEM_MODULES:-/payload/modules}

# check DESCRIPTION COMMAND...: one KTAP test line from a command's success.
check() {
	desc=$1
	shift
	if "$@"; then
		ktap_test_pass "$desc"
	else
		ktap_test_fail "$desc"
	fi
}

# module_loaded NAME: is the module in the kernel?
module_loaded() {
	[ -d "/sys/module/$1" ] && grep -q "^$1 " /proc/modules
}

# kmsg_since MARK: the kernel log after the line containing MARK.
kmsg_mark() {
	echo "$1" > /dev/kmsg
}
kmsg_since() {
	dmesg | sed -n "/$1/,\$p"
}
