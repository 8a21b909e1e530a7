#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# Shared helpers of the packaging selftests. Sourced after the kernel's ktap_helpers.sh.

PEERMEM_MODULES=${PEERMEM_MODULES:-/payload/modules}
# What the host-side packaging tests left: the DKMS-installed module, the proprietary stub, the version.
PKG=$PEERMEM_MODULES/packaging
DKMS_KO=$PKG/dkms/peermem_rs.ko
DKMS_DROPIN=$PKG/dkms/nvidia-peermem.ko
EXPLAIN=$(dirname "$0")/peermem-rs-explain

# need_payload: skip the whole test when the host-side packaging tests did not run.
need_payload() {
	for f in "$DKMS_KO" "$DKMS_DROPIN" "$PKG/nvidia.ko" "$PKG/VERSION"; do
		if [ ! -f "$f" ]; then
			ktap_skip_all "no $f: the host-side packaging tests (tests/packaging/host_tests.sh) did not run"
			exit "$KSFT_SKIP"
		fi
	done
}

check() {
	desc=$1
	shift
	if "$@"; then ktap_test_pass "$desc"; else ktap_test_fail "$desc"; fi
}

loaded() {
	grep -q "^$1 " /proc/modules
}

# unload_all: peermem_rs, its providers and the proprietary stub (module "nvidia"), quietly.
unload_all() {
	for m in peermem_rs nvidia_peermem peer_test_client p2p_probe peer_mem_host nvidia_p2p_standin nvidia; do
		loaded $m && rmmod $m 2>/dev/null
	done
	for m in peermem_rs peer_mem_host nvidia_p2p_standin nvidia; do
		! loaded $m || return 1
	done
}

kmsg_mark() {
	echo "$1" > /dev/kmsg
}

# kmsg_since MARK PATTERN: does the kernel log after MARK contain PATTERN?
kmsg_since() {
	dmesg | sed -n "/$1/,\$p" | grep -q -- "$2"
}

# run_explain [MODULE]: runs peermem-rs-explain into /tmp/explain.out, shows it as KTAP comments,
# and leaves its exit status in $explain_rc.
run_explain() {
	"$EXPLAIN" "$@" > /tmp/explain.out
	explain_rc=$?
	sed 's/^/# /' /tmp/explain.out
}
