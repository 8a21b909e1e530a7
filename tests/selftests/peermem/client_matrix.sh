#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# Runs client_test once per combination of
#   persistent_api_support {0,1} x peerdirect_support {0,1} x page-table layout {1.2, 2.0}
# loading the stand-ins and peermem_rs fresh for each. Every combination is one KTAP test whose
# subtests are client_test's. The VM variant adds two more dimensions, paired: in "switch" the IOMMU
# is off and the peer-memory host is the default one, that of current kernels (no memory_peers); in
# "switch-iommu" the IOMMU translates and the host has memory_peers (sysfs=1, kernels before 6.6).
# Each combination thus runs on both hosts without a third boot: the host's sysfs changes only how
# clients are named and counted, the IOMMU only the DMA addresses, and neither depends on the other.
# In the "split" variant (GPU and NIC under different root ports) only the topology refusal applies,
# so one combination runs it, on the host of current kernels.
. "$(dirname "$0")/../kselftest/ktap_helpers.sh"
. "$(dirname "$0")/lib.sh"
cd "$(dirname "$0")"

ko=$PEERMEM_MODULES/peermem_rs.ko
host=sysfs=0
[ "${PEERMEM_VARIANT:-}" = switch-iommu ] && host=sysfs=1
combos=""
nv_params=""
if [ "${PEERMEM_VARIANT:-}" = split ]; then
	# Only a 580+ driver on a chipset flagged unable to do P2P refuses peers without a common
	# upstream bridge (the NVIDIA stand-in's README, "Topology").
	combos="1:0:0x00010002"
	nv_params="generation=580 p2p_unsupported_chipset=1"
	filter="-r gpu.topology_refusal_is_explained"
else
	for pas in 1 0; do
		for pds in 0 1; do
			for ptv in 0x00010002 0x00020000; do
				combos="$combos $pas:$pds:$ptv"
			done
		done
	done
	filter="-T topology_refusal_is_explained"
fi

ktap_print_header
ktap_set_plan $(echo $combos | wc -w)
for c in $combos; do
	pas=${c%%:*}; rest=${c#*:}; pds=${rest%%:*}; ptv=${rest#*:}
	[ "$ptv" = 0x00020000 ] && layout=2.0 || layout=1.2
	desc="persistent_api_support=$pas peerdirect_support=$pds page_table=$layout host $host"
	run_config "$desc" \
		"load_standins $nv_params page_table_version=$ptv -- $host &&
		 insmod $ko persistent_api_support=$pas peerdirect_support=$pds" \
		./client_test $filter
done
ktap_finished
