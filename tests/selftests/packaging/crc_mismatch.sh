#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# Symbol versions, on a kernel with CONFIG_MODVERSIONS (the Ubuntu-style boot): after an OFED upgrade
# that peermem-rs was not rebuilt for, the kernel refuses the module, and peermem-rs-explain names the
# cause and the command that fixes it; the module as that command rebuilds it loads.
#
# What it loads (tests/infra/stock-kernel.sh, Ubuntu-style kernel): the DKMS-installed peermem_rs.ko
# in /lib/modules, linked against the host stand-in's ib_register_peer_memory_client;
# ofed-next/peer_mem_host.ko, the host of "the next OFED", whose declaration of the same API gives
# that symbol another CRC (gendwarfksyms); ofed-next/peermem_rs.ko, what `dkms build --force` built
# against the next OFED's headers and Module.symvers. Without them (kernels without symbol
# versions) the test is not applicable and skips; in the Ubuntu-style boot their absence fails.
# gdr-doctor (built by the gdr_doctor collection) reads the same mismatch from the installed files,
# before anything is loaded.
. "$(dirname "$0")/../kselftest/ktap_helpers.sh"
. "$(dirname "$0")/lib.sh"

ktap_print_header
NEXT=$PKG/ofed-next
if [ ! -f "$NEXT/peer_mem_host.ko" ] || [ ! -f "$NEXT/peermem_rs.ko" ]; then
	case "${PEERMEM_VARIANT:-}" in
	ubuntu-*)
		ktap_set_plan 1
		ktap_test_fail "$NEXT/{peer_mem_host,peermem_rs}.ko: the next OFED's host and peermem-rs rebuilt for it (tests/infra/stock-kernel.sh)"
		ktap_finished ;;
	esac
	ktap_skip_all "not applicable: no $NEXT (only the Ubuntu-style boot has symbol versions and the next OFED)"
	exit "$KSFT_SKIP"
fi
need_payload
ktap_set_plan 11
unload_all || ktap_exit_fail_msg "cannot unload leftover modules"
version=$(cat "$PKG/VERSION")
rel=$(uname -r)

DOCTOR=$(dirname "$0")/../gdr_doctor/gdr-doctor
tree=/lib/modules/$rel
# doctor OUT: gdr-doctor --json on this VM's stand-ins (declared: it knows neither device).
doctor() {
	gpu= nic=
	for d in /sys/bus/pci/devices/*; do
		case "$(cat "$d/vendor"):$(cat "$d/device")" in
		0x1af4:0x1110) gpu=${d##*/} ;;
		0x1234:0x11e8) nic=${d##*/} ;;
		esac
	done
	"$DOCTOR" --json --nvidia-module nvidia_p2p_standin --declare-gpu "$gpu" --declare-nic "$nic=edu" > "$1" 2>&1
	grep '"code": "\(stale-build\|symbol-versions\)"' -A3 "$1" | sed 's/^/# | /'
}

insmod "$PEERMEM_MODULES/nvidia_p2p_standin.ko" || ktap_exit_fail_msg "cannot load the NVIDIA stand-in"
# The positive control: the module DKMS installed, against the host it was built for.
check "modprobe peermem_rs against the OFED it was built for" sh -c "
	insmod '$PEERMEM_MODULES/peer_mem_host.ko' sysfs=0 && modprobe peermem_rs && grep -q '^nv_mem ' /sys/kernel/debug/peer_mem_host/clients"
rmmod peermem_rs
doctor /tmp/doctor.ok
check "gdr-doctor: the installed peermem_rs.ko and peer_mem_host.ko agree on their symbol versions" sh -c "
	grep -q '\"code\": \"symbol-versions\"' /tmp/doctor.ok && ! grep -q '\"code\": \"stale-build\"' /tmp/doctor.ok"
# The upgrade installed: the next OFED's host in the module tree, as its package would put it.
cp "$tree/extra/peer_mem_host.ko" /tmp/peer_mem_host.ko.old && cp "$NEXT/peer_mem_host.ko" "$tree/extra/peer_mem_host.ko"
doctor /tmp/doctor.stale
check "gdr-doctor: stale-build, the symbol, both CRCs' files, and DKMS's rebuild" sh -c "
	grep -q '\"code\": \"stale-build\"' /tmp/doctor.stale &&
	grep -F 'peermem_rs ($tree/updates/dkms/peermem_rs.ko) was built against other builds of its providers' /tmp/doctor.stale |
		grep -F 'ib_register_peer_memory_client: linked against 0x' | grep -qF 'peer_mem_host ($tree/extra/peer_mem_host.ko) exports 0x' &&
	grep -qF 'dkms build --force -m peermem-rs -v $version -k \$(uname -r)' /tmp/doctor.stale"
cp /tmp/peer_mem_host.ko.old "$tree/extra/peer_mem_host.ko"
rmmod peer_mem_host

# The upgrade: the next OFED's host is loaded, peermem-rs is not rebuilt.
check "the next OFED's host loads (ib_register_peer_memory_client with another CRC)" \
	insmod "$NEXT/peer_mem_host.ko" sysfs=0
mark="peermem-selftest: crc_mismatch $$"
kmsg_mark "$mark"
check "modprobe peermem_rs, built for the old OFED, is refused" sh -c "! modprobe peermem_rs 2>/dev/null && ! grep -q '^peermem_rs ' /proc/modules"
dmesg | sed -n "/$mark/,\$p" | grep -v "$mark" | sed 's/^/# kernel: /'
check "the kernel says: peermem_rs: disagrees about version of symbol ib_register_peer_memory_client" \
	kmsg_since "$mark" "peermem_rs: disagrees about version of symbol ib_register_peer_memory_client"
run_explain peermem_rs
check "peermem-rs-explain: a stale build (exit 1), the symbol and the host that provides it" sh -c "
	[ $explain_rc = 1 ] && grep -q '^- \[stale-build\] peermem_rs was linked against other builds of its providers' /tmp/explain.out &&
	grep -q 'symbol version mismatch: ib_register_peer_memory_client (from the peer-memory host, MLNX_OFED/DOCA-OFED.s ib_core, loaded as peer_mem_host)' /tmp/explain.out &&
	! grep -Eq 'no-peer-memory-host|no-nvidia-driver|proprietary-driver' /tmp/explain.out"
check "peermem-rs-explain: the fix is DKMS's rebuild of peermem-rs $version for kernel $rel" \
	grep -qxF "    dkms build --force -m peermem-rs -v $version -k $rel && dkms install --force -m peermem-rs -v $version -k $rel" /tmp/explain.out

# The fix: peermem-rs as that command rebuilt it against the next OFED.
check "peermem_rs as dkms build --force rebuilt it loads against the next OFED and registers nv_mem" sh -c "
	insmod '$NEXT/peermem_rs.ko' && grep -q '^nv_mem ' /sys/kernel/debug/peer_mem_host/clients &&
	[ \"\$(cat /sys/module/peermem_rs/version)\" = '$version' ]"
rmmod peermem_rs

# And the check is the CRC's: the rebuilt module is refused by the old host in turn.
rmmod peer_mem_host && insmod "$PEERMEM_MODULES/peer_mem_host.ko" sysfs=0 ||
	ktap_exit_fail_msg "cannot reload the old host"
mark="peermem-selftest: crc_mismatch back $$"
kmsg_mark "$mark"
check "the rebuilt module is refused by the old OFED's host" sh -c "! insmod '$NEXT/peermem_rs.ko' 2>/dev/null && ! grep -q '^peermem_rs ' /proc/modules"
check "the kernel says: disagrees about version of symbol ib_register_peer_memory_client" \
	kmsg_since "$mark" "peermem_rs: disagrees about version of symbol ib_register_peer_memory_client"

unload_all
ktap_finished
