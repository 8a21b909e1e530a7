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

ktap_set_plan 12

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

# With the stand-ins of nvidia.ko and the peer-memory host (the default one: that of current kernels,
# without memory_peers) and peermem-rs registered as nv_mem: as the drop-in nvidia_peermem the
# software side is complete and the verdict is the hardware's; as peermem_rs, GPUDirect RDMA users
# cannot find it on such a host, which gdr-doctor must say (client-invisible, slow).
# stack_up KO NAME: load the stand-ins and KO (module NAME); fails if that cannot be done.
stack_up() {
	loaded=""
	insmod "$PEERMEM_MODULES/nvidia_p2p_standin.ko" || return 1
	loaded="nvidia_p2p_standin"
	insmod "$PEERMEM_MODULES/peer_mem_host.ko" sysfs=0 || return 1
	loaded="peer_mem_host $loaded"
	insmod "$1" || return 1
	loaded="$2 $loaded"
	# The client is registered: the host stand-in lists it (there is no memory_peers to look in).
	cut -d' ' -f1 /sys/kernel/debug/peer_mem_host/clients | grep -qx nv_mem
}
stack_down() {
	for u in $loaded; do rmmod "$u"; done
	loaded=""
}
# --prometheus while an application holds a registration of 2 MiB of GPU memory: prom_check (a
# parser of the text format written apart from gdr-doctor, docs/prometheus-text-format.md) must
# read the whole output, and the statistics it finds must be the module's own, read at the same time.
prometheus_with_a_registration() {
	size=2097152
	# shellcheck disable=SC2086
	"$(dirname "$0")/hold_registration" $size sh -c \
		"'$doctor' --prometheus --nvidia-module $nv_mod $declare > '$out.prom'; cat /sys/kernel/debug/peermem_rs/stats > '$out.stats'"
	rc=$?
	show "$out.prom"
	"$(dirname "$0")/prom_check" < "$out.prom" > "$out.samples" 2> "$out.err"
	prc=$?
	show "$out.err"
	ktap_print_msg "prom_check read $(wc -l < "$out.samples") samples; hold_registration exit $rc, prom_check exit $prc"
	check "--prometheus with a registration live: prom_check reads all of it" \
		sh -c "[ $rc = 0 ] && [ $prc = 0 ]"
	live=$(sed -n 's/^live_registrations //p' "$out.stats")
	pinned=$(sed -n 's/^pinned_bytes //p' "$out.stats")
	check "peermem-rs's statistics in --prometheus: $live live registration, $pinned bytes pinned, as its stats file says" \
		sh -c "[ '$live' = 1 ] && [ '$pinned' = $size ] &&
			grep -qx 'peermem_rs_live_registrations{module=\"peermem_rs\"} $live' '$out.samples' &&
			grep -qx 'peermem_rs_pinned_bytes{module=\"peermem_rs\"} $pinned' '$out.samples' &&
			grep -q '^peermem_rs_info{module=\"peermem_rs\",' '$out.samples' &&
			grep -qx 'gdr_doctor_findings{code=\"client-invisible\",severity=\"slow\",subject=\"node\"} 1' '$out.samples'"
	rm -f "$out.prom" "$out.stats" "$out.samples" "$out.err"
}

nv_mod=nvidia_p2p_standin
if stack_up "$PEERMEM_MODULES/dropin/nvidia-peermem.ko" nvidia_peermem; then
	# shellcheck disable=SC2086
	"$doctor" --nvidia-module "$nv_mod" $declare > "$out" 2>&1
	rc=$?
	show "$out"
	check "with the stand-ins and the drop-in nvidia_peermem loaded (exit $rc, want $want)" [ "$rc" = "$want" ]
else
	ktap_test_fail "with the stand-ins and the drop-in loaded: the modules did not load and register nv_mem"
fi
stack_down
if stack_up "$PEERMEM_MODULES/peermem_rs.ko" peermem_rs; then
	# shellcheck disable=SC2086
	"$doctor" --json --nvidia-module "$nv_mod" $declare > "$out" 2>&1
	rc=$?
	check "with peermem_rs on a host without memory_peers: applications will not find it (client-invisible, exit $rc)" \
		sh -c "grep -q '\"code\": \"client-invisible\"' '$out' && [ $rc -ge 1 ]"
	prometheus_with_a_registration
else
	ktap_test_fail "with the stand-ins and peermem_rs loaded: the modules did not load and register nv_mem"
	ktap_test_fail "--prometheus with a registration live: the modules did not load"
	ktap_test_fail "peermem-rs's statistics in --prometheus: the modules did not load"
fi
stack_down

# NVIDIA's nvidia-peermem as NVIDIA's build makes it when the driver is installed before the OFED
# (tests/reference/build-nvidia-peermem.sh --without-peer-memory): the kernel runs its init, which
# fails with EINVAL. Installed for this kernel (modules.dep, as DKMS installs it), gdr-doctor must
# say why it does not load and how to rebuild it. Then NVIDIA's module built with the OFED loads,
# and gdr-doctor must tell it from the drop-in.
rel=$(uname -r)
lib=/lib/modules/$rel
[ -e "$lib/modules.dep" ] && cp "$lib/modules.dep" /tmp/modules.dep.saved
installed_without_ofed() {
	mkdir -p "$lib/updates/dkms" &&
		cp "$PEERMEM_MODULES/without-ofed/nvidia-peermem.ko" "$lib/updates/dkms/" &&
		echo "updates/dkms/nvidia-peermem.ko:" >> "$lib/modules.dep"
}
if insmod "$PEERMEM_MODULES/nvidia_p2p_standin.ko" && insmod "$PEERMEM_MODULES/peer_mem_host.ko" sysfs=0 &&
	installed_without_ofed; then
	loaded="peer_mem_host nvidia_p2p_standin"
	insmod "$lib/updates/dkms/nvidia-peermem.ko" > "$out.err" 2>&1
	rc=$?
	ktap_print_msg "insmod of NVIDIA's nvidia-peermem built without the OFED: exit $rc: $(cat "$out.err")"
	check "NVIDIA's nvidia-peermem built without the OFED does not load (Invalid argument)" \
		sh -c "[ $rc != 0 ] && grep -q 'Invalid argument' '$out.err' && ! grep -q '^nvidia_peermem ' /proc/modules"
	rm -f "$out.err"
	# shellcheck disable=SC2086
	"$doctor" --json --nvidia-module "$nv_mod" $declare > "$out" 2>&1
	grep -B1 -A3 '"code": "\(client-without-peer-memory\|no-peer-memory-client\)"' "$out" | sed 's/^/# | /'
	check "gdr-doctor: it was built without the peer-memory API (FAIL), with the rebuild, and no client can load" \
		sh -c "grep -B1 '\"code\": \"client-without-peer-memory\"' '$out' | grep -q '\"severity\": \"fail\"' &&
			grep -q 'rebuild the NVIDIA driver.s kernel modules so that nvidia-peermem is built against its ib_core' '$out' &&
			grep -q 'fix the \[FAIL\] line about $lib/updates/dkms/nvidia-peermem.ko above' '$out'"
	if insmod "$PEERMEM_MODULES/nvidia-peermem.ko"; then
		loaded="nvidia_peermem $loaded"
		# shellcheck disable=SC2086
		"$doctor" --json --nvidia-module "$nv_mod" $declare > "$out" 2>&1
		check "gdr-doctor tells NVIDIA's nvidia_peermem (loaded) from the drop-in" \
			sh -c "grep -q '\"nvidia_peermem_is\": \"nvidia\"' '$out' && ! grep -q '\"code\": \"client-without-peer-memory\"' '$out'"
	else
		ktap_test_fail "gdr-doctor tells NVIDIA's nvidia_peermem (loaded) from the drop-in: it did not load"
	fi
else
	ktap_test_fail "NVIDIA's nvidia-peermem built without the OFED does not load: the stand-ins did not load"
	ktap_test_fail "gdr-doctor: it was built without the peer-memory API: the stand-ins did not load"
	ktap_test_fail "gdr-doctor tells NVIDIA's nvidia_peermem (loaded) from the drop-in: the stand-ins did not load"
fi
stack_down
rm -f "$lib/updates/dkms/nvidia-peermem.ko"
if [ -e /tmp/modules.dep.saved ]; then
	mv /tmp/modules.dep.saved "$lib/modules.dep"
else
	rm -f "$lib/modules.dep"
fi

rm -f "$out"
ktap_finished
