#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# Loading and unloading peermem-rs under both its names: identity (version, clients, parameters
# read-only in sysfs, as NCCL/UCX detect GPUDirect RDMA), refusal of bad parameters with an
# explanation, what happens without a peer-memory host, and next to another nv_mem client: a
# module peermem-rs knows (nvidia_peermem, itself under its other name), which it refuses itself
# on both kinds of host, and an unknown one, which only a host with memory_peers refuses.
#
# The host stand-in's default is the host of current kernels (no memory_peers, a second client of
# the same name accepted); sysfs=1 is the host before 6.6.
. "$(dirname "$0")/../kselftest/ktap_helpers.sh"
. "$(dirname "$0")/lib.sh"

ko=$PEERMEM_MODULES/peermem_rs.ko
dropin=$PEERMEM_MODULES/dropin/nvidia-peermem.ko
nvidia=$PEERMEM_MODULES/nvidia-peermem.ko
ktap_print_header
for f in "$ko" "$dropin" "$nvidia"; do
	[ -f "$f" ] || ktap_exit_fail_msg "no $f"
done
ktap_set_plan 34
unload_all

mark="peermem-selftest: module_load $$"
kmsg_mark "$mark"

# Without a peer-memory host the module must not load, and someone must say why.
check "no peer-memory host: insmod refused" sh -c "! insmod $ko 2>/dev/null"
check "no peer-memory host: the kernel log names the missing host" \
	kmsg_since "$mark" "ib_register_peer_memory_client"

load_standins || ktap_exit_fail_msg "cannot load the stand-ins"
check "the host stand-in's default is the host of current kernels: no memory_peers" \
	[ ! -e /sys/kernel/mm/memory_peers ]

for bad in "persistent_api_support=2" "peerdirect_support=-1" "persistent_api_support=yes"; do
	kmsg_mark "$mark $bad"
	check "$bad refused" sh -c "! insmod $ko $bad 2>/dev/null && ! grep -q '^peermem_rs ' /proc/modules"
done
check "a bad value is explained in the kernel log" kmsg_since "$mark persistent_api_support=2" "invalid persistent_api_support=2"

kmsg_mark "$mark load"
check "insmod peermem_rs.ko (defaults)" insmod "$ko"
version=$(cat /sys/module/peermem_rs/version 2>/dev/null)
check "module version in sysfs ($version)" [ -n "$version" ]
check "client nv_mem registered with the host; persistent_api_support=1: no nv_mem_nc" \
	host_has_clients nv_mem
check "parameters visible read-only with their defaults" sh -c '
	p=/sys/module/peermem_rs/parameters
	[ "$(cat $p/persistent_api_support)" = 1 ] && [ "$(cat $p/peerdirect_support)" = 0 ] &&
	[ "$(stat -c %a $p/persistent_api_support)" = 444 ] && [ "$(stat -c %a $p/peerdirect_support)" = 444 ]'
check "statistics file in debugfs" grep -q '^live_registrations 0$' /sys/kernel/debug/peermem_rs/stats
check "rmmod peermem_rs" rmmod peermem_rs

insmod "$ko" persistent_api_support=0
check "persistent_api_support=0: nv_mem and nv_mem_nc" host_has_clients nv_mem nv_mem_nc
rmmod peermem_rs

# A build for an MLNX_OFED/DOCA-OFED before 25.04 (PEERMEM_OFED_RELEASE=24.10; packaging/configure.sh
# reads it from the OFED tree): that host hangs tearing down an invalidating MR whose registration
# failed, so the build refuses the invalidating flavour at load, and says why; the default loads.
old_ofed=$PEERMEM_MODULES/ofed-24.10/peermem_rs.ko
if [ -f "$old_ofed" ]; then
	kmsg_mark "$mark ofed-24.10"
	check "built for OFED 24.10: persistent_api_support=0 refused" \
		sh -c "! insmod $old_ofed persistent_api_support=0 2>/dev/null && ! grep -q '^peermem_rs ' /proc/modules"
	check "... and the kernel log says why and what to do" \
		kmsg_since "$mark ofed-24.10" "persistent_api_support=0 refused: this build is for an MLNX_OFED/DOCA-OFED before 25.04"
	check "built for OFED 24.10: the default (persistent_api_support=1) loads" \
		sh -c "insmod $old_ofed && rmmod peermem_rs"
else
	# A skip with its reason (ktap_test_skip takes none).
	why="not applicable: no build for OFED 24.10 in this boot (tests/run_tests.py makes it for the test kernel only)"
	for t in "built for OFED 24.10: persistent_api_support=0 refused" \
		"... and the kernel log says why and what to do" \
		"built for OFED 24.10: the default (persistent_api_support=1) loads"; do
		__ktap_test ok "$t" "SKIP $why"
		KTAP_CNT_SKIP=$((KTAP_CNT_SKIP+1))
	done
fi

# The drop-in: the same module, named nvidia_peermem.
kmsg_mark "$mark dropin"
insmod "$dropin"
check "insmod dropin/nvidia-peermem.ko: module nvidia_peermem, client nv_mem" \
	both module_loaded nvidia_peermem -- host_has_clients nv_mem
check "the drop-in's /sys/module/nvidia_peermem/version is peermem-rs's ($version)" \
	[ "$(cat /sys/module/nvidia_peermem/version 2>/dev/null)" = "$version" ]
check "the drop-in's parameters are nvidia-peermem's, read-only, with their defaults" sh -c '
	p=/sys/module/nvidia_peermem/parameters
	[ "$(cat $p/persistent_api_support)" = 1 ] && [ "$(cat $p/peerdirect_support)" = 0 ] &&
	[ "$(stat -c %a $p/persistent_api_support)" = 444 ] && [ "$(stat -c %a $p/peerdirect_support)" = 444 ]'
check "the drop-in logs as nvidia_peermem, saying it is peermem-rs" \
	kmsg_since "$mark dropin" "nvidia_peermem: peermem-rs $version loaded"
check "the drop-in's statistics are in /sys/kernel/debug/nvidia_peermem/stats" \
	grep -q '^live_registrations 0$' /sys/kernel/debug/nvidia_peermem/stats

# refused KO NAME: insmod KO fails, no module NAME is loaded, and nv_mem is registered once.
refused() {
	! insmod "$1" 2>/dev/null && ! module_loaded "$2" && [ "$(host_clients | grep -cx nv_mem)" = 1 ]
}

# Another module that registers nv_mem. This host would accept a second nv_mem (it has no
# memory_peers to refuse it): peermem-rs refuses itself, in both names, and says which to unload.
kmsg_mark "$mark beside dropin"
check "drop-in loaded: insmod peermem_rs.ko refused, nv_mem registered once" refused "$ko" peermem_rs
check "... and the log names nvidia_peermem to unload" kmsg_since "$mark beside dropin" \
	"peermem_rs: nvidia_peermem (NVIDIA's, or peermem-rs built as its drop-in) is loaded and registers the GPU peer-memory client nv_mem: .*rmmod nvidia_peermem"
rmmod nvidia_peermem
insmod "$ko" || ktap_exit_fail_msg "cannot load peermem_rs.ko"
kmsg_mark "$mark beside rs"
check "peermem_rs loaded: insmod of the drop-in refused, nv_mem registered once" refused "$dropin" nvidia_peermem
check "... and the log names peermem_rs to unload" kmsg_since "$mark beside rs" \
	"nvidia_peermem: peermem_rs (peermem-rs) is loaded and registers the GPU peer-memory client nv_mem: .*rmmod peermem_rs"
rmmod peermem_rs
insmod "$nvidia" || ktap_exit_fail_msg "cannot load NVIDIA's nvidia-peermem.ko"
kmsg_mark "$mark beside nvidia"
check "NVIDIA's nvidia_peermem loaded: insmod peermem_rs.ko refused" refused "$ko" peermem_rs
check "... and said why" kmsg_since "$mark beside nvidia" "peermem_rs: nvidia_peermem .* is loaded and registers"
check "NVIDIA's nvidia_peermem loaded: the kernel refuses a second module named nvidia_peermem" \
	both not insmod "$dropin" -- not [ "$(cat /sys/module/nvidia_peermem/version)" = "$version" ]
rmmod nvidia_peermem

# The host before 6.6: memory_peers/<client>/version, and a second client of a name refused by the
# host itself, which is all that refuses a client peermem-rs does not know (a test client here).
unload_all
load_standins -- sysfs=1 || ktap_exit_fail_msg "cannot load the stand-ins (sysfs=1)"
insmod "$ko"
check "memory_peers host: memory_peers/nv_mem/version is the module's version; no nv_mem_nc" \
	both [ "$(cat /sys/kernel/mm/memory_peers/nv_mem/version 2>/dev/null)" = "$version" ] -- \
	[ ! -e /sys/kernel/mm/memory_peers/nv_mem_nc ]
kmsg_mark "$mark beside rs sysfs"
check "memory_peers host, peermem_rs loaded: the drop-in refuses itself before the host is asked" \
	both refused "$dropin" nvidia_peermem -- kmsg_since "$mark beside rs sysfs" "nvidia_peermem: peermem_rs (peermem-rs) is loaded"
check "... so the host refused nothing" not kmsg_since "$mark beside rs sysfs" "a peer memory client named nv_mem is already registered"
rmmod peermem_rs
kmsg_mark "$mark taken"
insmod "$PEERMEM_MODULES/peer_test_client.ko" names=nv_mem || ktap_exit_fail_msg "cannot load peer_test_client.ko"
check "memory_peers host, nv_mem taken by an unknown module: insmod refused (the host refuses)" \
	not insmod "$ko"
rmmod peer_test_client
check "... and the log says a module other than the known ones holds it" kmsg_since "$mark taken" \
	"refused client 'nv_mem': a client of that name is already registered by a module other than nvidia_peermem, peermem_rs and nv_peer_mem"

unload_all
ktap_finished
