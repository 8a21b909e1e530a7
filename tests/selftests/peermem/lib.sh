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
	grep -q "^$1 " /proc/modules
}

# unload_all: peermem_rs and the stand-ins, in dependency order (quietly; absent ones are fine).
unload_all() {
	for m in peermem_rs nvidia_peermem peer_test_client p2p_probe peer_mem_host nvidia_p2p_standin; do
		module_loaded $m && rmmod $m 2>/dev/null
	done
	! module_loaded peermem_rs && ! module_loaded peer_mem_host && ! module_loaded nvidia_p2p_standin
}

# load_standins [NVIDIA stand-in params] -- [host params]
load_standins() {
	nv=""
	while [ $# -gt 0 ] && [ "$1" != "--" ]; do nv="$nv $1"; shift; done
	[ "${1:-}" = "--" ] && shift
	insmod "$PEERMEM_MODULES/nvidia_p2p_standin.ko" $nv && insmod "$PEERMEM_MODULES/peer_mem_host.ko" "$@"
}

# as_diagnostics COMMAND...: runs COMMAND with its output (stdout and stderr) as KTAP diagnostic
# lines, and sets rc to its exit status (a pipeline would give sed's).
as_diagnostics() {
	_rcfile=/tmp/as_diagnostics.rc.$$
	( "$@" 2>&1; echo $? > $_rcfile ) | sed -e 's/^/# /'
	rc=$(cat $_rcfile)
	rm -f $_rcfile
}

# run_config DESCRIPTION LOAD PROGRAM [ARG...]: one KTAP test line for one configuration of a
# matrix (client_matrix.sh, race_matrix.sh). Unloads everything, runs the shell command LOAD (which
# loads the stand-ins and the client in that configuration), runs PROGRAM (a kselftest harness
# program) with its output as KTAP diagnostics, and unloads again. Passes on PROGRAM's exit 0,
# skips on 4 (kselftest's skip), fails on anything else and when loading or unloading fails.
run_config() {
	_desc=$1
	_load=$2
	shift 2
	if ! unload_all || ! eval "$_load"; then
		ktap_test_fail "$_desc # cannot load the modules"
		return
	fi
	echo "# $_desc"
	as_diagnostics "$@"
	_rc=$rc
	if ! unload_all; then
		ktap_test_fail "$_desc # modules could not be unloaded"
	elif [ "$_rc" = 0 ]; then
		ktap_test_pass "$_desc"
	elif [ "$_rc" = 4 ]; then
		ktap_test_skip "$_desc"
	else
		ktap_test_fail "$_desc # ${1##*/} exit $_rc"
	fi
}

# not COMMAND...: COMMAND fails.
not() {
	! "$@"
}

# both COMMAND1... -- COMMAND2...: both succeed.
both() {
	_first=""
	while [ $# -gt 0 ] && [ "$1" != "--" ]; do _first="$_first $(printf '%s' "$1" | sed "s/'/'\\\\''/g; s/^/'/; s/\$/'/")"; shift; done
	shift
	eval "$_first" && "$@"
}

# host_clients: the names of the clients the peer-memory host stand-in has registered, in order.
host_clients() {
	cut -d' ' -f1 /sys/kernel/debug/peer_mem_host/clients 2>/dev/null
}

# host_has_clients NAME...: the host has exactly these clients registered (in this order).
host_has_clients() {
	[ "$(host_clients | tr '\n' ' ')" = "$* " ]
}

# kmsg_mark TEXT: a line in the kernel log to search from.
kmsg_mark() {
	echo "$1" > /dev/kmsg
}

# kmsg_since MARK PATTERN: does the kernel log after MARK contain PATTERN?
kmsg_since() {
	dmesg | sed -n "/$1/,\$p" | grep -q -- "$2"
}
