#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# Loading and unloading peermem_rs: identity (version, clients, parameters read-only in sysfs, as
# NCCL/UCX detect GPUDirect RDMA), refusal of bad parameters with an explanation, and what happens
# without a peer-memory host or with nvidia_peermem's client name already taken.
. "$(dirname "$0")/../kselftest/ktap_helpers.sh"
. "$(dirname "$0")/lib.sh"

ko=$PEERMEM_MODULES/peermem_rs.ko
ktap_print_header
[ -f "$ko" ] || ktap_exit_fail_msg "no $ko"
ktap_set_plan 16
unload_all

mark="peermem-selftest: module_load $$"
kmsg_mark "$mark"

# Without a peer-memory host the module must not load, and someone must say why.
check "no peer-memory host: insmod refused" sh -c "! insmod $ko 2>/dev/null"
check "no peer-memory host: the kernel log names the missing host" \
	kmsg_since "$mark" "ib_register_peer_memory_client"

load_standins || ktap_exit_fail_msg "cannot load the stand-ins"

for bad in "persistent_api_support=2" "peerdirect_support=-1" "persistent_api_support=yes"; do
	kmsg_mark "$mark $bad"
	check "$bad refused" sh -c "! insmod $ko $bad 2>/dev/null && ! grep -q '^peermem_rs ' /proc/modules"
done
check "a bad value is explained in the kernel log" kmsg_since "$mark persistent_api_support=2" "invalid persistent_api_support=2"

kmsg_mark "$mark load"
check "insmod peermem_rs.ko (defaults)" insmod "$ko"
version=$(cat /sys/module/peermem_rs/version 2>/dev/null)
check "module version in sysfs ($version)" [ -n "$version" ]
check "client nv_mem registered, with the module's version" \
	[ "$(cat /sys/kernel/mm/memory_peers/nv_mem/version 2>/dev/null)" = "$version" ]
check "persistent_api_support=1: no nv_mem_nc" [ ! -e /sys/kernel/mm/memory_peers/nv_mem_nc ]
check "parameters visible read-only with their defaults" sh -c '
	p=/sys/module/peermem_rs/parameters
	[ "$(cat $p/persistent_api_support)" = 1 ] && [ "$(cat $p/peerdirect_support)" = 0 ] &&
	[ "$(stat -c %a $p/persistent_api_support)" = 444 ] && [ "$(stat -c %a $p/peerdirect_support)" = 444 ]'
check "statistics file in debugfs" grep -q '^live_registrations 0$' /sys/kernel/debug/peermem_rs/stats
check "rmmod peermem_rs" rmmod peermem_rs

check "persistent_api_support=0: nv_mem and nv_mem_nc" sh -c "
	insmod $ko persistent_api_support=0 && [ -d /sys/kernel/mm/memory_peers/nv_mem ] &&
	[ -d /sys/kernel/mm/memory_peers/nv_mem_nc ] && rmmod peermem_rs"

# The name is taken (as when NVIDIA's nvidia_peermem is loaded): refused, and said so.
kmsg_mark "$mark taken"
check "nv_mem already taken: insmod refused and explained" sh -c "
	insmod $PEERMEM_MODULES/peer_test_client.ko names=nv_mem 2>/dev/null || exit 1
	! insmod $ko 2>/dev/null; r=\$?
	rmmod peer_test_client; [ \$r = 0 ]"
check "the refusal names nvidia_peermem" kmsg_since "$mark taken" "rmmod nvidia_peermem"

unload_all
ktap_finished
