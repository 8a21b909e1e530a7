#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# gdr-doctor in the test VM. The GPU stand-in (ivshmem-plain, 1af4:1110) and the NIC stand-in (edu,
# 1234:11e8) are declared on the command line, and the verdict must match what the VM was booted with
# (tests/vm/topology.toml). That expectation is read here independently of the tool: the layout from
# the QEMU model of the GPU stand-in's parent bridge, the IOMMU mode from the kernel command line.
. "$(dirname "$0")/../kselftest/ktap_helpers.sh"

PEERMEM_MODULES=${PEERMEM_MODULES:-/payload/modules}
doctor=$(dirname "$0")/gdr-doctor
out=/tmp/gdr-doctor.$$

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

# find_fn VENDOR DEVICE: the address of the first PCI function with these IDs.
find_fn() {
	for d in /sys/bus/pci/devices/*; do
		if [ "$(cat "$d/vendor")" = "$1" ] && [ "$(cat "$d/device")" = "$2" ]; then
			basename "$d"
			return 0
		fi
	done
	return 1
}

# show FILE: a report into the test's log (ksft-run.sh turns it into KTAP diagnostics).
show() {
	sed 's/^/# | /' "$1"
}

ktap_print_header
[ -x "$doctor" ] || ktap_exit_fail_msg "no $doctor"

gpu=$(find_fn 0x1af4 0x1110)
nic=$(find_fn 0x1234 0x11e8)
if [ -z "$gpu" ] || [ -z "$nic" ]; then
	ktap_skip_all "no ivshmem/edu stand-ins in this VM"
	exit "$KSFT_SKIP"
fi

parent=$(basename "$(dirname "$(readlink -f "/sys/bus/pci/devices/$gpu")")")
parent_id="$(cat "/sys/bus/pci/devices/$parent/vendor"):$(cat "/sys/bus/pci/devices/$parent/device")"
case "$parent_id" in
0x104c:0x8233) layout=switch link=PIX ;;	# QEMU xio3130-downstream: the "switch" layout
0x1b36:0x000c) layout=split link=PHB ;;	# QEMU pcie-root-port: the "split" layout
*) ktap_exit_fail_msg "GPU stand-in $gpu sits below $parent ($parent_id): no layout of topology.toml" ;;
esac
# vm.py boots the IOMMU variants with intel_iommu=on (translated DMA, no pass-through).
iommu=off
if grep -q 'intel_iommu=on' /proc/cmdline && ! grep -q 'iommu=pt' /proc/cmdline; then
	iommu=translated
fi
want=1
codes=""
[ $layout = split ] && codes="$codes topology-phb"
[ $iommu = translated ] && codes="$codes iommu-translated"
[ $layout = switch ] && [ $iommu = off ] && want=0
ktap_print_msg "GPU stand-in $gpu, NIC stand-in $nic: layout $layout ($link), IOMMU $iommu: expecting exit $want"

ktap_set_plan 6

"$doctor" > "$out" 2>&1
rc=$?
check "without declarations it finds no GPU and no NIC (exit $rc, want 3)" \
	sh -c "[ $rc = 3 ] && grep -q 'no NVIDIA GPU found' '$out' && grep -q 'no RDMA device' '$out'"

declare="--declare-gpu $gpu --declare-nic $nic=edu"
# shellcheck disable=SC2086 # $declare is meant to split
"$doctor" --hardware-only $declare > "$out" 2>&1
rc=$?
show "$out"
check "hardware verdict for the $layout layout with the IOMMU $iommu (exit $rc, want $want)" [ "$rc" = "$want" ]

# shellcheck disable=SC2086
"$doctor" --json --hardware-only $declare > "$out" 2>&1
check "the path $gpu <-> $nic is $link" grep -q "\"link\": \"$link\"" "$out"

if [ -z "$codes" ]; then
	check "no reason against the pair" grep -q '"reasons": \[\]' "$out"
else
	ok=true
	for c in $codes; do
		grep -q "\"code\": \"$c\"" "$out" || ok=false
	done
	check "the reasons name:$codes" $ok
fi

# The driver and peer-memory checks with whatever this boot has loaded: they must cope.
# shellcheck disable=SC2086
"$doctor" $declare > "$out" 2>&1
rc=$?
check "full check with whatever is loaded gives a verdict (exit $rc)" \
	sh -c "[ $rc -le 2 ] && grep -q '^Verdict: ' '$out'"

# With the stand-ins of nvidia.ko and the peer-memory host, and peermem_rs registered as nv_mem, the
# software side is complete and the verdict is the hardware's.
stack() {
	# By exact name: the payload also holds NVIDIA's nvidia-peermem.ko, which needs the host first.
	nv_ko=$PEERMEM_MODULES/nvidia_p2p_standin.ko
	host_ko=$PEERMEM_MODULES/peer_mem_host.ko
	rs_ko=$PEERMEM_MODULES/peermem_rs.ko
	if [ ! -f "$nv_ko" ] || [ ! -f "$host_ko" ] || [ ! -f "$rs_ko" ]; then
		ktap_test_skip "with the stand-ins and peermem_rs loaded: modules not in $PEERMEM_MODULES"
		return
	fi
	loaded=""
	for ko in "$nv_ko" "$host_ko" "$rs_ko"; do
		m=$(basename "$ko" .ko | tr - _)
		grep -q "^$m " /proc/modules && continue
		if ! insmod "$ko"; then
			# The modules are there: failing to load them is a failure, not a reason to skip.
			ktap_test_fail "with the stand-ins and peermem_rs loaded: insmod $m failed"
			for u in $loaded; do rmmod "$u"; done
			return
		fi
		loaded="$m $loaded"
	done
	nv_mod=$(basename "$nv_ko" .ko | tr - _)
	if [ ! -d /sys/kernel/mm/memory_peers/nv_mem ]; then
		ktap_test_fail "with the stand-ins and peermem_rs loaded: peermem_rs registered no nv_mem client"
	else
		# shellcheck disable=SC2086
		"$doctor" --nvidia-module "$nv_mod" $declare > "$out" 2>&1
		rc=$?
		show "$out"
		check "with the stand-ins and peermem_rs loaded (exit $rc, want $want)" [ "$rc" = "$want" ]
	fi
	for u in $loaded; do rmmod "$u"; done
}
stack

rm -f "$out"
ktap_finished
