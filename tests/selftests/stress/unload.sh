#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# Unload and reload of peermem-rs:
#   - rmmod is refused while registrations are live, and succeeds once they are gone (persistent
#     client);
#   - the invalidating client (persistent_api_support=0): rmmod is refused while a non-persistent
#     pin is left with the driver because a foreign task (the host's kworker) deregistered it and
#     could not unpin it, and while the pins of registrations the owner deregistered linger (no
#     pin N is ever unpinned by peermem-rs) until their free callbacks; rmmod succeeds once the
#     owner frees the memory;
#   - 100 load/unload cycles of peermem-rs through its configurations, a registration made and
#     ended in every tenth, the stand-ins' live counters zero at the end and the stand-ins unloading
#     with nothing left to free.
. "$(dirname "$0")/../kselftest/ktap_helpers.sh"
. "$(dirname "$0")/lib.sh"
cd "$(dirname "$0")"

ko=$PEERMEM_MODULES/peermem_rs.ko
stat() { sed -n "s/^$1 //p" /sys/kernel/debug/peermem_rs/stats; }
refcnt() { cat /sys/module/peermem_rs/refcnt 2>/dev/null; }

# hold N [--kworker|--owner]: starts holdreg, waits for its line; its stdin is fd 3.
hold() {
	rm -f /tmp/holdreg.in /tmp/holdreg.out
	mkfifo /tmp/holdreg.in
	./holdreg "$@" < /tmp/holdreg.in > /tmp/holdreg.out 2>&1 &
	holder=$!
	exec 3> /tmp/holdreg.in
	local w
	for w in $(seq 300); do
		grep -q "^held" /tmp/holdreg.out && break
		sleep 0.1
	done
	sed 's/^/# holdreg: /' /tmp/holdreg.out
}

# release: closes holdreg's stdin; it frees its memory and exits. Its exit status.
release() {
	exec 3>&-
	wait $holder
	rc=$?
	rm -f /tmp/holdreg.in
	return $rc
}

# none_lingering: no registration of peermem_rs lingers.
none_lingering() {
	[ "$(stat lingering)" = 0 ]
}

# rmmod_refused: peermem_rs has references and rmmod leaves it loaded.
rmmod_refused() {
	[ "$(refcnt)" -gt 0 ] 2>/dev/null && ! rmmod peermem_rs 2>/dev/null && module_loaded peermem_rs
}

# rmmod_after: rmmod succeeds within 5 s (the client's work item may still be letting go).
rmmod_after() {
	local w
	for w in $(seq 50); do
		[ "$(refcnt)" = 0 ] && rmmod peermem_rs && return 0
		sleep 0.1
	done
	echo "# peermem_rs refcnt $(refcnt)"
	return 1
}

nv_live="live_pins live_page_tables live_dma_mappings live_bar1_extents bar1_pinned_bytes live_allocations"
live_zero() {
	bad=""
	for c in $nv_live; do
		v=$(cat /sys/kernel/debug/nvidia_p2p_standin/$c 2>/dev/null)
		[ "$v" = 0 ] || bad="$bad nvidia_p2p_standin.$c=$v"
	done
	v=$(cat /sys/kernel/debug/peer_mem_host/live_mrs 2>/dev/null)
	[ "$v" = 0 ] || bad="$bad peer_mem_host.live_mrs=$v"
	[ -z "$bad" ] && return 0
	echo "# still live:$bad"
	return 1
}

if [ ! -x ./holdreg ] || [ ! -r "$ko" ]; then
	ktap_print_header
	ktap_set_plan 1
	ktap_test_skip "unload: ./holdreg or $ko missing"
	ktap_finished
fi

ktap_print_header
ktap_set_plan 15
kmsg_mark "peermem-unload: begin"

# 1. The persistent client: live registrations hold the module.
unload_all && load_standins && insmod "$ko" persistent_api_support=1
hold 16
check "persistent: 16 registrations live" grep -q "^held 16 live" /tmp/holdreg.out
check "persistent: rmmod refused while they live (refcnt $(refcnt))" rmmod_refused
check "persistent: the holder frees and exits cleanly" release
check "persistent: rmmod succeeds once they are gone" rmmod_after

# 2. The invalidating client, deregistered by the host's kworker: the pin N it cannot unpin.
insmod "$ko" persistent_api_support=0
hold 8 --kworker
foreign=$(stat foreign_unpins)
check "invalidating: 8 deregistered by the kworker, $foreign pins left with the driver" \
	both grep -q "^held 0 live, 8 deregistered" /tmp/holdreg.out -- [ "${foreign:-0}" -ge 8 ]
check "invalidating: rmmod refused while the driver holds them (refcnt $(refcnt))" rmmod_refused
check "invalidating: the owner frees and exits cleanly" release
check "invalidating: rmmod succeeds after the free callbacks" rmmod_after

# 3. The invalidating client, deregistered by the owner: each pin N lingers until the free.
insmod "$ko" persistent_api_support=0
hold 4 --owner
lingering=$(stat lingering)
check "invalidating: 4 deregistered by the owner, $lingering lingering" \
	both grep -q "^held 0 live, 4 deregistered" /tmp/holdreg.out -- [ "${lingering:-0}" = 4 ]
check "invalidating: rmmod refused while they linger (refcnt $(refcnt))" rmmod_refused
check "invalidating: the owner frees and exits cleanly, nothing left lingering" \
	both release -- none_lingering
check "invalidating: rmmod succeeds once nothing lingers" rmmod_after

# 4. 100 load/unload cycles through the configurations; every tenth with a registration.
cycles_ok=0
for i in $(seq 100); do
	case $((i % 3)) in
	0) params="persistent_api_support=1" ;;
	1) params="persistent_api_support=0 peerdirect_support=0" ;;
	2) params="persistent_api_support=0 peerdirect_support=1" ;;
	esac
	insmod "$ko" $params || { echo "# cycle $i: insmod $params failed"; break; }
	if [ $((i % 10)) = 0 ]; then
		hold 1
		grep -q "^held 1 live" /tmp/holdreg.out || { echo "# cycle $i: no registration"; release; break; }
		release || { echo "# cycle $i: holder failed"; break; }
	fi
	rmmod_after || { echo "# cycle $i: rmmod failed"; break; }
	cycles_ok=$i
done
check "100 load/unload cycles ($cycles_ok completed)" [ "$cycles_ok" = 100 ]
check "stand-ins' live counters 0" live_zero
if rmmod peer_mem_host && rmmod nvidia_p2p_standin && ! kmsg_since "peermem-unload: begin" "leaked by its client"; then
	ktap_test_pass "stand-ins unload, nothing leaked"
else
	ktap_test_fail "stand-ins unload, nothing leaked"
fi
unload_all
ktap_finished
