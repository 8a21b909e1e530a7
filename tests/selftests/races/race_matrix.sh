#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# Runs the race windows (races) against each client configuration, loading the stand-ins and the
# client fresh for each: peermem-rs with persistent_api_support {1,0} x peerdirect_support {0,1},
# and NVIDIA's nvidia-peermem 550 in the same configurations, in the windows where it stays clean
# (nvidia_peermem_clean; where it crashes or deadlocks it runs in boots of its own, windows.py).
# The invalidating configurations of both run once more with the NVIDIA stand-in's
# ro_api_lock_free (RM's RmRoApiLock free bit: an explicit free holds the RM API lock for read,
# and the GPUs lock, around the free callbacks; the stand-in's README, "Locks"): the client's
# barrier and every pin and unpin still wait for such a teardown, as writers.
# Every configuration is one KTAP test whose subtests are the windows.
#
#   race_matrix.sh [--client peermem_rs|nvidia_peermem] [--only CLIENT:PAS:PDS:w|r] [--all-windows]
. "$(dirname "$0")/../kselftest/ktap_helpers.sh"
. "$(dirname "$0")/lib.sh"
cd "$(dirname "$0")"

clients="peermem_rs nvidia_peermem"
only=""
all_windows=""
while [ $# -gt 0 ]; do
	case $1 in
	--client) clients=$2; shift ;;
	--only) only=$2; shift ;;
	--all-windows) all_windows=1 ;;
	esac
	shift
done

configs=""
for client in $clients; do
	for pas in 1 0; do
		for pds in 0 1; do
			# The persistent client never invalidates: peerdirect_support changes nothing for it.
			[ $pas = 1 ] && [ $pds = 1 ] && continue
			configs="$configs $client:$pas:$pds:w"
		done
	done
	for pds in 0 1; do
		configs="$configs $client:0:$pds:r"
	done
done
[ -n "$only" ] && configs=$only

ktap_print_header
ktap_set_plan $(echo $configs | wc -w)
for c in $configs; do
	client=${c%%:*}; rest=${c#*:}; pas=${rest%%:*}; rest=${rest#*:}; pds=${rest%%:*}; lock=${rest#*:}
	desc="$client persistent_api_support=$pas peerdirect_support=$pds"
	nv_params=""
	if [ "$lock" = r ]; then
		desc="$desc, frees holding the RM API lock for read"
		nv_params=ro_api_lock_free=1
	fi
	if [ $client = peermem_rs ]; then
		ko=$PEERMEM_MODULES/peermem_rs.ko
		filter=""
	else
		ko=$PEERMEM_MODULES/nvidia-peermem.ko
		# Only the windows where nvidia-peermem stays clean in this configuration.
		key="$pas:$pds"
		filter=$(sed -n "s/^$key //p" nvidia_peermem_clean | tr ' ' '\n' | sed -n 's/./-r race.&/p' | tr '\n' ' ')
		[ -n "$all_windows" ] && filter=""
	fi
	RACE_CLIENT=$client
	export RACE_CLIENT
	run_config "$desc" "load_standins $nv_params && insmod $ko persistent_api_support=$pas peerdirect_support=$pds" \
		./races $filter
done
ktap_finished
