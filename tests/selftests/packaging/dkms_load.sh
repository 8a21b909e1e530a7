#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# The module as DKMS installed it (a real dkms add/build/install against a fake MLNX_OFED/NVIDIA node
# layout, tests/packaging/host_tests.sh) loads next to the stand-ins, registers nv_mem with Cargo.toml's
# version, publishes its statistics and unloads; without a peer-memory host it is refused and
# peermem-rs-explain, reading this kernel's /proc/kallsyms, says that is why.
. "$(dirname "$0")/../kselftest/ktap_helpers.sh"
. "$(dirname "$0")/lib.sh"

ktap_print_header
need_payload
ktap_set_plan 9
unload_all || ktap_exit_fail_msg "cannot unload leftover modules"
version=$(cat "$PKG/VERSION")

insmod "$PEERMEM_MODULES/nvidia_p2p_standin.ko" && insmod "$PEERMEM_MODULES/peer_mem_host.ko" ||
	ktap_exit_fail_msg "cannot load the stand-ins"
check "insmod the DKMS-installed peermem_rs.ko" insmod "$DKMS_KO"
check "module version is Cargo.toml's ($version)" [ "$(cat /sys/module/peermem_rs/version 2>/dev/null)" = "$version" ]
check "client nv_mem registered with that version" \
	[ "$(cat /sys/kernel/mm/memory_peers/nv_mem/version 2>/dev/null)" = "$version" ]
check "statistics in debugfs" grep -q '^live_registrations 0$' /sys/kernel/debug/peermem_rs/stats
check "peermem-rs-explain: loaded (exit 0)" sh -c "'$EXPLAIN' | grep -q 'peermem_rs $version is loaded; peer-memory clients: nv_mem'"
check "rmmod peermem_rs; nv_mem gone" sh -c "rmmod peermem_rs && [ ! -e /sys/kernel/mm/memory_peers/nv_mem ]"

# Without the peer-memory host: refused by the kernel, explained from /proc/kallsyms.
rmmod peer_mem_host
mark="peermem-selftest: dkms_load $$"
kmsg_mark "$mark"
check "no peer-memory host: insmod refused" sh -c "! insmod '$DKMS_KO' 2>/dev/null && ! grep -q '^peermem_rs ' /proc/modules"
run_explain
check "peermem-rs-explain: exit 1, no peer-memory host (and nothing about the NVIDIA driver)" sh -c "
	[ $explain_rc = 1 ] && grep -q '^- \[no-peer-memory-host\] .*Unknown symbol ib_register_peer_memory_client' /tmp/explain.out &&
	! grep -Eq 'no-nvidia-driver|proprietary-driver' /tmp/explain.out"
check "the kernel log names the missing symbol" kmsg_since "$mark" "peermem_rs: Unknown symbol ib_register_peer_memory_client"

unload_all
ktap_finished
