#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# The module as DKMS installed it (a real dkms add/build/install against a fake MLNX_OFED/NVIDIA node
# layout, tests/packaging/host_tests.sh), under both its names, loads next to the stand-ins,
# registers nv_mem with Cargo.toml's version, publishes its statistics and unloads, and
# peermem-rs-explain says whether applications will find it, on the host of current kernels (no
# memory_peers) and on the host before 6.6; without a peer-memory host it is refused and
# peermem-rs-explain, reading this kernel's /proc/kallsyms, says that is why.
. "$(dirname "$0")/../kselftest/ktap_helpers.sh"
. "$(dirname "$0")/lib.sh"

ktap_print_header
need_payload
ktap_set_plan 15
unload_all || ktap_exit_fail_msg "cannot unload leftover modules"
version=$(cat "$PKG/VERSION")

# The host of current kernels: no memory_peers.
insmod "$PEERMEM_MODULES/nvidia_p2p_standin.ko" && insmod "$PEERMEM_MODULES/peer_mem_host.ko" sysfs=0 ||
	ktap_exit_fail_msg "cannot load the stand-ins"
check "insmod the DKMS-installed peermem_rs.ko" insmod "$DKMS_KO"
check "module version is Cargo.toml's ($version)" [ "$(cat /sys/module/peermem_rs/version 2>/dev/null)" = "$version" ]
check "client nv_mem registered with the host" grep -q '^nv_mem ' /sys/kernel/debug/peer_mem_host/clients
check "statistics in debugfs" grep -q '^live_registrations 0$' /sys/kernel/debug/peermem_rs/stats
run_explain
check "peermem-rs-explain: loaded (exit 0), but applications will not find it on this host" sh -c "
	[ $explain_rc = 0 ] && grep -q 'peermem_rs $version is loaded; peer-memory clients: not shown' /tmp/explain.out &&
	grep -q '^- \[invisible-to-applications\]' /tmp/explain.out"
check "rmmod peermem_rs" rmmod peermem_rs

# The drop-in, as DKMS built and installed it.
check "insmod the DKMS-installed drop-in nvidia-peermem.ko: /sys/module/nvidia_peermem/version is $version" \
	sh -c "insmod '$DKMS_DROPIN' && [ \"\$(cat /sys/module/nvidia_peermem/version)\" = '$version' ]"
run_explain
check "peermem-rs-explain: the drop-in is loaded, and the current releases find it" sh -c "
	[ $explain_rc = 0 ] && grep -q 'nvidia_peermem (the peermem-rs drop-in) $version is loaded' /tmp/explain.out &&
	grep -q '^applications: NCCL >= 2.23.4, UCX >= 1.18, NVSHMEM >= 3.3.9 and UCC find GPUDirect RDMA' /tmp/explain.out"
check "rmmod nvidia_peermem" rmmod nvidia_peermem

# The host of kernels before 6.6: memory_peers/nv_mem/version.
rmmod peer_mem_host && insmod "$PEERMEM_MODULES/peer_mem_host.ko" sysfs=1 ||
	ktap_exit_fail_msg "cannot reload the host with sysfs=1"
check "memory_peers host: client nv_mem registered with that version" sh -c "
	insmod '$DKMS_KO' && [ \"\$(cat /sys/kernel/mm/memory_peers/nv_mem/version 2>/dev/null)\" = '$version' ]"
check "peermem-rs-explain: loaded (exit 0), clients nv_mem" sh -c "'$EXPLAIN' | grep -q 'peermem_rs $version is loaded; peer-memory clients: nv_mem'"
check "rmmod peermem_rs; nv_mem gone" sh -c "rmmod peermem_rs && [ ! -e /sys/kernel/mm/memory_peers/nv_mem ]"

# Without the peer-memory host: refused by the kernel, explained from /proc/kallsyms.
rmmod peer_mem_host
mark="peermem-selftest: dkms_load $$"
kmsg_mark "$mark"
check "no peer-memory host: insmod refused" sh -c "! insmod '$DKMS_KO' 2>/dev/null && ! grep -q '^peermem_rs ' /proc/modules"
run_explain peermem_rs
check "peermem-rs-explain: exit 1, no peer-memory host (and nothing about the NVIDIA driver)" sh -c "
	[ $explain_rc = 1 ] && grep -q '^- \[no-peer-memory-host\] .*Unknown symbol ib_register_peer_memory_client' /tmp/explain.out &&
	! grep -Eq 'no-nvidia-driver|proprietary-driver' /tmp/explain.out"
check "the kernel log names the missing symbol" kmsg_since "$mark" "peermem_rs: Unknown symbol ib_register_peer_memory_client"

unload_all
ktap_finished
