#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# Load-time refusal of a proprietary NVIDIA driver: with a module "nvidia" that exports nvidia_p2p_*
# under MODULE_LICENSE("NVIDIA") (tests/packaging/proprietary_nvidia) and the peer-memory host loaded,
# the kernel refuses to link peermem_rs (a Rust module, so a user of GPL-only symbols) to it, and
# peermem-rs-explain says so and what to do instead.
#
# Loading the stub taints the kernel (P), which turns lockdep off for the rest of the boot: this
# collection runs last (runs-last) for that reason.
. "$(dirname "$0")/../kselftest/ktap_helpers.sh"
. "$(dirname "$0")/lib.sh"

ktap_print_header
need_payload
ktap_set_plan 6
unload_all || ktap_exit_fail_msg "cannot unload leftover modules"

check "insmod the proprietary stub (module nvidia)" insmod "$PKG/nvidia.ko"
check "the kernel marks module nvidia proprietary (taint P)" grep -q P /sys/module/nvidia/taint
insmod "$PEERMEM_MODULES/peer_mem_host.ko" || ktap_exit_fail_msg "cannot load the peer-memory host stand-in"

mark="peermem-selftest: proprietary_refusal $$"
kmsg_mark "$mark"
check "insmod peermem_rs.ko refused" sh -c "! insmod '$DKMS_KO' 2>/dev/null && ! grep -q '^peermem_rs ' /proc/modules"
dmesg | sed -n "/$mark/,\$p" | grep peermem_rs | sed 's/^/# kernel: /'
check "the kernel says why: symbols from proprietary module nvidia" kmsg_since "$mark" "peermem_rs: .*from proprietary module nvidia"

run_explain
check "peermem-rs-explain: the proprietary driver, from the taint of the module exporting nvidia_p2p_*" sh -c "
	[ $explain_rc = 1 ] && grep -q '^- \[proprietary-driver\] .*module nvidia has taint flag P' /tmp/explain.out &&
	! grep -Eq 'no-peer-memory-host|no-nvidia-driver' /tmp/explain.out"
check "peermem-rs-explain: says what to do instead (open modules, or nvidia-peermem on P100/V100)" sh -c "
	grep -q 'open kernel modules' /tmp/explain.out && grep -q 'modprobe nvidia-peermem' /tmp/explain.out"

unload_all
ktap_finished
