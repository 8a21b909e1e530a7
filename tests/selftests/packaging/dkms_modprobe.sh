#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# The module where DKMS installed it on a stock kernel: `modprobe peermem_rs` on the kernel's own
# module tree, as an operator loads it. In the stock-kernel boots (tests/infra/stock-kernel.sh) the
# guest's /lib/modules/$(uname -r) is the tree Debian's dkms installed peermem_rs into
# (updates/dkms/) after the kernel's headers and modules packages were installed, with the
# stand-ins of nvidia.ko and MLNX_OFED's ib_core in extra/, indexed by depmod. modprobe must load
# that file, with the stand-ins as its dependencies (modules.dep), and remove all three again.
# Elsewhere (the test kernel has no module tree) it skips; in a stock boot a missing module fails.
. "$(dirname "$0")/../kselftest/ktap_helpers.sh"
. "$(dirname "$0")/lib.sh"

ktap_print_header
rel=$(uname -r)
tree=/lib/modules/$rel
ko=$(ls "$tree"/updates/dkms/peermem_rs.ko* 2>/dev/null | head -n1)
if [ -z "$ko" ]; then
	case "${PEERMEM_VARIANT:-}" in
	stock-*|ubuntu-*)
		# These boots exist to load what DKMS installed: its absence is the failure.
		ktap_set_plan 1
		ktap_test_fail "$tree/updates/dkms/peermem_rs.ko* is where DKMS installed the module"
		ktap_finished ;;
	esac
	ktap_skip_all "no $tree/updates/dkms/peermem_rs.ko*: only the stock-kernel and Ubuntu-style boots have a DKMS-installed module tree"
	exit "$KSFT_SKIP"
fi
ktap_set_plan 8
unload_all || ktap_exit_fail_msg "cannot unload leftover modules"
version=$(cat "$PKG/VERSION")
echo "# kernel $rel ($(cat /proc/version))"
echo "# $(grep -F "updates/dkms/peermem_rs" "$tree/modules.dep")"

check "modules.dep (depmod, run by dkms) lists updates/dkms/$(basename "$ko") with the stand-ins as dependencies" \
	sh -c "grep -q '^updates/dkms/peermem_rs.ko[^:]*:.*extra/nvidia_p2p_standin.ko' '$tree/modules.dep' &&
	grep -q '^updates/dkms/peermem_rs.ko[^:]*:.*extra/peer_mem_host.ko' '$tree/modules.dep'"
check "modinfo: version $version, vermagic of kernel $rel" sh -c "
	[ \"\$(modinfo -F version peermem_rs)\" = '$version' ] && modinfo -F vermagic peermem_rs | grep -q '^$rel '"
mark="peermem-selftest: dkms_modprobe $$"
kmsg_mark "$mark"
check "modprobe peermem_rs" modprobe peermem_rs
check "modprobe loaded its dependencies from the tree: nvidia_p2p_standin and peer_mem_host" \
	sh -c "grep -q '^nvidia_p2p_standin ' /proc/modules && grep -q '^peer_mem_host ' /proc/modules"
check "peermem_rs is loaded, version $version" [ "$(cat /sys/module/peermem_rs/version 2>/dev/null)" = "$version" ]
check "client nv_mem registered with the host" grep -q '^nv_mem ' /sys/kernel/debug/peer_mem_host/clients
dmesg | sed -n "/$mark/,\$p" | grep -v "$mark" | sed 's/^/# kernel: /'
check "the kernel log says peermem-rs $version loaded" kmsg_since "$mark" "peermem-rs $version loaded"
check "modprobe -r peermem_rs removes it and the stand-ins" sh -c "
	modprobe -r peermem_rs && ! grep -Eq '^(peermem_rs|peer_mem_host|nvidia_p2p_standin) ' /proc/modules"
unload_all
ktap_finished
