#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# Differential conformance test: the same scenarios against NVIDIA's nvidia-peermem (550, the
# reference) and against peermem-rs in the same configuration (persistent_api_support=0: an
# invalidating nv_mem plus a persistent nv_mem_nc, which is all 550 has), in this one VM boot, from
# freshly loaded stand-ins each time. Every observation that differs must be listed in
# `differences` with its reason and the entry of docs/differences.md that documents it; anything
# else fails.
#
#   conformance.sh              the scenarios of this VM variant's layout (PEERMEM_LAYOUT: switch or split),
#                               on the peer-memory host of current kernels (sysfs=0: no
#                               memory_peers, a second client of a name accepted)
#   conformance.sh --memory-peers  on the host of kernels before 6.6 (sysfs=1), the scenarios where
#                               it shows more: the names it refuses, the memory_peers directories
#                               and the statistics of registrations and invalidations (those
#                               `scenarios` lists for the run memory_peers;
#                               conformance_memory_peers.sh)
#   conformance.sh --findings   only the scenarios that make nvidia-peermem splat (never in make
#                               check: tests/selftests/conformance/findings.py boots a VM for them)
#
# Prints KTAP, one result per scenario. The report (Markdown) and both observation logs go to
# /results when it exists (the VM runner brings them back to the host), else to $TMPDIR.
cd "$(dirname "$0")" || exit 1
variant=${PEERMEM_VARIANT:-switch}
mods=${PEERMEM_MODULES:-/payload/modules}
findings=0
memory_peers=0
[ "${1:-}" = "--findings" ] && findings=1
[ "${1:-}" = "--memory-peers" ] && memory_peers=1
# The scenarios are those of the variant's PCIe layout (PEERMEM_LAYOUT: a stock-kernel boot has the
# switch layout).
layout=${PEERMEM_LAYOUT:-$variant}
case $layout in
switch | split) part=$layout ;;
*)
	echo "TAP version 13"
	echo "1..0 # SKIP the conformance scenarios run in the switch and split layouts, not $layout"
	exit 4
	;;
esac
for ko in nvidia-peermem.ko peermem_rs.ko nvidia_p2p_standin.ko peer_mem_host.ko peer_test_client.ko; do
	if [ ! -f "$mods/$ko" ]; then
		echo "TAP version 13"
		echo "1..0 # SKIP no $ko in $mods (nvidia-peermem.ko is built by tests/reference/build-nvidia-peermem.sh)"
		exit 4
	fi
done

out=/results
[ -d "$out" ] && [ -w "$out" ] || out=${TMPDIR:-/tmp}
name=conformance-$variant
[ $findings = 1 ] && name=conformance-findings
export CONFORMANCE_HOST=sysfs=0
host=no_memory_peers
run=$part
[ $findings = 1 ] && run=findings
if [ $memory_peers = 1 ]; then
	if [ "$part" != switch ]; then
		echo "TAP version 13"
		echo "1..0 # SKIP the memory_peers host runs in the switch variant only (topology is not its business)"
		exit 4
	fi
	CONFORMANCE_HOST=sysfs=1
	host=memory_peers
	run=memory_peers
	name=conformance-$variant-memory_peers
fi

# Scenarios that make nvidia-peermem splat are left out of its run here (the runner fails a boot
# on any splat); the findings run does only those, against both modules.
nv_args=""
rs_args=""
if [ $findings = 1 ]; then
	only=$(awk '$1 == "finding" { printf " --only %s", $2 }' differences)
	[ -n "$only" ] || { echo "TAP version 13"; echo "1..0 # SKIP no findings listed"; exit 4; }
	nv_args=$only
	rs_args=$only
else
	nv_args=$(awk '$1 == "finding" && $3 == "nvidia_peermem" { printf " --skip %s", $2 }' differences)
	if [ $memory_peers = 1 ]; then
		only=$(awk '$1 == "memory_peers" { printf " --only %s", $2 }' scenarios)
		nv_args="$nv_args$only"
		rs_args="$rs_args$only"
	fi
fi

start=$(cut -d' ' -f1 /proc/uptime)
echo "conformance: $name against nvidia_peermem" > /dev/kmsg
set -f	# the arguments hold scenario patterns, for conformance, not the shell
./conformance nvidia_peermem $part $nv_args > "$out/$name-nvidia_peermem.obs" 2> "$out/$name-nvidia_peermem.err"
rca=$?
mid=$(cut -d' ' -f1 /proc/uptime)
echo "conformance: $name against peermem_rs" > /dev/kmsg
./conformance peermem_rs $part $rs_args > "$out/$name-peermem_rs.obs" 2> "$out/$name-peermem_rs.err"
rcb=$?
set +f
stop=$(cut -d' ' -f1 /proc/uptime)

awk -f compare.awk -v variant="$variant" -v run=$run -v host=$host -v report="$out/$name.md" \
	-v rca=$rca -v rcb=$rcb scenarios differences differences.md \
	"$out/$name-nvidia_peermem.obs" "$out/$name-peermem_rs.obs"
rc=$?
awk -v s="$start" -v m="$mid" -v e="$stop" 'BEGIN {
	printf "# durations: nvidia_peermem %.1f s, peermem_rs %.1f s\n", m - s, e - m }' |
	tee -a "$out/$name.md.summary"
for t in nvidia_peermem peermem_rs; do
	[ -s "$out/$name-$t.err" ] && sed -e "s/^/# $t stderr: /" "$out/$name-$t.err"
done
# The report, in the KTAP output too.
sed -e 's/^/# /' "$out/$name.md"
exit $rc
