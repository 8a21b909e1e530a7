#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# The stress run (stress) against each client configuration, loading the stand-ins and the client
# fresh for each, then checking that it let go of everything:
#   peermem-rs persistent_api_support=1                     (the persistent client)
#   peermem-rs persistent_api_support=0 peerdirect_support=0 on an ex host (MLNX_OFED 5.x)
#   peermem-rs persistent_api_support=0 peerdirect_support=1 on an ex host
#   peermem-rs persistent_api_support=0 peerdirect_support=0 on a 4.9 host (ex_support=0: it always
#                                                           unmaps inside the invalidation)
# on the host kind of the boot (sysfs=0 in switch, sysfs=1 in switch-iommu, as client_matrix.sh).
# Every configuration is five KTAP tests: stress's own checks (every live counter back to zero,
# every byte compared, the counts of the test, the host, the driver and the client agree), the
# client's module reference count 0, rmmod of the client, the stand-ins' live counters zero once
# the client is gone, and the stand-ins unloading with nothing left to free.
#
#   stress.sh [--quick] [--client peermem_rs|nvidia_peermem] [--only PAS:PDS:EX ...]
#             [--ops N] [--seconds S] [--hold N] [--results DIR] [-- more stress options]
#
# The defaults are the bounded run of `make check` (--quick: at most 4,000 operations or 15 s of
# stress per configuration, a hold of 300 live registrations), which the runner starts without
# arguments; the long run (stress.py) passes its own figures. --results keeps each
# configuration's report (stress --report) there. The last line before the KTAP totals is a
# summary: "# stress totals: ...".
. "$(dirname "$0")/../kselftest/ktap_helpers.sh"
. "$(dirname "$0")/lib.sh"
cd "$(dirname "$0")"

client=peermem_rs
only=""
ops=4000
seconds=15
hold=300
results=/tmp/stress-results
while [ $# -gt 0 ]; do
	case $1 in
	--quick) ops=4000; seconds=15; hold=300 ;;
	--client) client=$2; shift ;;
	--only) only="$only $2"; shift ;;
	--ops) ops=$2; shift ;;
	--seconds) seconds=$2; shift ;;
	--hold) hold=$2; shift ;;
	--results) results=$2; shift ;;
	--) shift; break ;;
	*) echo "usage: stress.sh [--quick] [--client C] [--only PAS:PDS:EX] [--ops N] [--seconds S] [--hold N] [--results DIR] [-- stress options]" >&2; exit 2 ;;
	esac
	shift
done
mkdir -p "$results"

host=sysfs=0
[ "${PEERMEM_VARIANT:-}" = switch-iommu ] && host=sysfs=1
configs=${only:-"1:0:1 0:0:1 0:1:1 0:0:0"}
if [ $client = peermem_rs ]; then
	ko=$PEERMEM_MODULES/peermem_rs.ko
	mod=peermem_rs
else
	ko=$PEERMEM_MODULES/nvidia-peermem.ko
	mod=nvidia_peermem
fi

if [ ! -x ./stress ] || [ ! -r "$ko" ]; then
	ktap_print_header
	ktap_set_plan 1
	ktap_test_skip "stress: ./stress or $ko missing"
	ktap_finished
fi
# The randomized failslab of the run needs the fault-injection kernel (tests/selftests/*/config).
# Randomized injection during the run: 1% of the allocations made under peermem-rs's code fail
# (failslab, scoped to its text), and a random nvidia_p2p_* call fails every 2 s.
slab="--slab-permille 10 --driver-inject-ms 2000"
[ -w /sys/kernel/debug/failslab/probability ] || slab="--slab-permille 0 --driver-inject-ms 2000"

# live_zero: the NVIDIA stand-in's and the host's live counters are all zero.
nv_live="live_pins live_page_tables live_dma_mappings live_bar1_extents bar1_pinned_bytes live_allocations"
live_zero() {
	bad=""
	for c in $nv_live; do
		v=$(cat /sys/kernel/debug/nvidia_p2p_standin/$c 2>/dev/null)
		[ "$v" = 0 ] || bad="$bad nvidia_p2p_standin.$c=$v"
	done
	for c in live_mrs live_peer_mrs registered_clients; do
		v=$(cat /sys/kernel/debug/peer_mem_host/$c 2>/dev/null)
		[ "$v" = 0 ] || bad="$bad peer_mem_host.$c=$v"
	done
	[ -z "$bad" ] && return 0
	echo "# still live:$bad"
	return 1
}

ktap_print_header
ktap_set_plan $(($(echo $configs | wc -w) * 5))
tot_regs=0; tot_hold=0; tot_inflight=0; tot_live=0; tot_foreign=0; tot_nic=0; tot_cpu=0; tot_slab=0; tot_fail=0; tot_ms=0
n=0
for c in $configs; do
	n=$((n + 1))
	pas=${c%%:*}; rest=${c#*:}; pds=${rest%%:*}; ex=${rest#*:}
	cdesc="$client persistent_api_support=$pas peerdirect_support=$pds host ex_support=$ex $host"
	report=$results/$client-$pas$pds$ex-${PEERMEM_VARIANT:-none}.report
	rm -f "$report"
	if ! unload_all || ! load_standins -- $host ex_support=$ex ||
	   ! insmod "$ko" persistent_api_support=$pas peerdirect_support=$pds; then
		for t in stress refcount rmmod live unload; do
			ktap_test_fail "$cdesc: $t # cannot load the modules"
		done
		continue
	fi
	echo "# $cdesc"
	kmsg_mark "peermem-stress: begin $n"
	as_diagnostics ./stress --client $client --ops $ops --seconds $seconds --hold $hold \
		--seed $((n * 7919 + $(date +%s))) --dma-every 20 $slab --report "$report" "$@"
	check "$cdesc: stress checks (exit $rc)" [ "$rc" = 0 ]
	check "$cdesc: $mod reference count 0" [ "$(cat /sys/module/$mod/refcnt 2>/dev/null)" = 0 ]
	check "$cdesc: rmmod $mod" rmmod $mod
	check "$cdesc: stand-ins' live counters 0 without the client" live_zero
	# The NVIDIA stand-in frees, with a pr_err, every pin a client left behind at its unload.
	if rmmod peer_mem_host && rmmod nvidia_p2p_standin &&
	   ! kmsg_since "peermem-stress: begin $n" "leaked by its client"; then
		ktap_test_pass "$cdesc: stand-ins unload, nothing leaked"
	else
		ktap_test_fail "$cdesc: stand-ins unload, nothing leaked"
		dmesg | sed -n "/peermem-stress: begin $n/,\$p" | grep "leaked by its client" | head -5 | sed 's/^/# /'
	fi
	if [ -r "$report" ]; then
		v() { sed -n "s/^$1 //p" "$report"; }
		tot_regs=$((tot_regs + $(v registrations))); tot_hold=$((tot_hold + $(v hold_registrations)))
		tot_inflight=$((tot_inflight + $(v in_flight_at_free))); tot_live=$((tot_live + $(v live_at_free)))
		tot_foreign=$((tot_foreign + $(v deregistered_by_another_task)))
		tot_nic=$((tot_nic + $(v nic_bytes))); tot_cpu=$((tot_cpu + $(v cpu_bytes_compared)))
		tot_slab=$((tot_slab + $(v slab_injections))); tot_fail=$((tot_fail + $(v checks_failed)))
		tot_ms=$((tot_ms + $(v elapsed_ms)))
	fi
done
unload_all
echo "# stress totals: client $client, $(echo $configs | wc -w) configurations, $tot_regs registrations ($tot_hold in the hold phase), at a free $tot_inflight in flight and $tot_live live, $tot_foreign deregistered by another task, NIC DMA $tot_nic bytes, CPU compared $tot_cpu bytes, $tot_slab failslab injections, $tot_fail stress checks failed, $((tot_ms / 1000)) s of stress"
ktap_finished
