#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# Do applications find GPUDirect RDMA? gdr_detect makes the checks of NCCL, UCX, NVSHMEM and UCC
# exactly as they make them (see gdr_detect.c for the files and functions mirrored), with
#   peermem_rs.ko, the drop-in dropin/nvidia-peermem.ko (module nvidia_peermem), and NVIDIA's own
#   nvidia-peermem.ko (550, the reference)
# on both kinds of peer-memory host:
#   sysfs=0  what MLNX_OFED/DOCA-OFED is on the kernels GPU nodes run (6.6 and later do not export
#            mm_kobj): no /sys/kernel/mm/memory_peers
#   sysfs=1  the same host before 6.6: memory_peers/<client>/version
# and compares each result with the table below. It also writes that table, as found, to
# /results/gdr-detection.md (and into this test's output).
. "$(dirname "$0")/../kselftest/ktap_helpers.sh"
. "$(dirname "$0")/lib.sh"
cd "$(dirname "$0")" || exit 1

# (lib.sh's functions use $m, $nv and $desc: this script's own variables have other names.)

# What each check must conclude. Columns: peermem_rs, the drop-in, NVIDIA's, each on a host
# without memory_peers (sysfs=0) and with it (sysfs=1).
expected() {
	cat <<'EOF'
# check          rs:0 rs:1 dropin:0 dropin:1 nvidia:0 nvidia:1
nccl             no   yes  yes      yes      yes      yes
nccl-gin-gdaki   no   no   yes      yes      yes      yes
nccl-2.22        no   yes  no       yes      no       yes
nccl-2.21        no   yes  no       yes      no       yes
ucx              no   yes  yes      yes      yes      yes
ucx-1.17         no   yes  no       yes      no       yes
nvshmem          no   yes  yes      yes      yes      yes
ucc              no   yes  yes      yes      yes      yes
EOF
}
scenarios="rs:0 rs:1 dropin:0 dropin:1 nvidia:0 nvidia:1"

ko_of() {
	case $1 in
	rs) echo "$PEERMEM_MODULES/peermem_rs.ko" ;;
	dropin) echo "$PEERMEM_MODULES/dropin/nvidia-peermem.ko" ;;
	nvidia) echo "$PEERMEM_MODULES/nvidia-peermem.ko" ;;
	esac
}
name_of() {
	[ "$1" = rs ] && echo peermem_rs || echo nvidia_peermem
}
label_of() {
	case $1 in
	rs) echo "peermem_rs" ;;
	dropin) echo "drop-in nvidia_peermem" ;;
	nvidia) echo "NVIDIA's nvidia_peermem 550" ;;
	esac
}

out=/results
[ -d "$out" ] && [ -w "$out" ] || out=${TMPDIR:-/tmp}
work=$(mktemp -d)

ktap_print_header
for kind in rs dropin nvidia; do
	[ -f "$(ko_of $kind)" ] || ktap_exit_fail_msg "no $(ko_of $kind)"
done
[ -x ./gdr_detect ] || ktap_exit_fail_msg "no gdr_detect"
ktap_set_plan 7

# One load of the stand-ins per host; the three modules in turn on each.
version=
for sysfs in 0 1; do
	if ! unload_all || ! load_standins -- sysfs="$sysfs"; then
		for kind in rs dropin nvidia; do
			ktap_test_fail "$(label_of "$kind"), host sysfs=$sysfs # cannot load the stand-ins"
		done
		continue
	fi
	for kind in rs dropin nvidia; do
		sc=$kind:$sysfs
		name=$(name_of "$kind")
		label="$(label_of "$kind"), host sysfs=$sysfs"
		if ! insmod "$(ko_of "$kind")"; then
			ktap_test_fail "$label # cannot load the module"
			continue
		fi
		./gdr_detect > "$work/$sc"
		sed "s/^/# $sc: /" "$work/$sc"
		bad=""
		# The host is the kind asked for, and the module is what it says it is.
		if [ "$sysfs" = 1 ] && [ ! -d /sys/kernel/mm/memory_peers/nv_mem ]; then
			bad="$bad; sysfs=1 but no memory_peers/nv_mem"
		elif [ "$sysfs" = 0 ] && [ -e /sys/kernel/mm/memory_peers ]; then
			bad="$bad; sysfs=0 but memory_peers exists"
		fi
		v=$(cat "/sys/module/$name/version" 2>/dev/null)
		case $kind in
		rs) [ -n "$version" ] || version=$v ;;
		dropin) [ -n "$v" ] && [ "$v" = "$version" ] ||
			bad="$bad; /sys/module/nvidia_peermem/version is '$v', not peermem-rs's '$version'" ;;
		nvidia) [ -n "$v" ] && [ "$v" != "$version" ] || bad="$bad; NVIDIA's nvidia_peermem has version '$v'" ;;
		esac
		rmmod "$name"
		# Every check against its column of the table, in one awk: processes are slow in the VM.
		bad="$bad$(expected | awk -v sc="$sc" '
			FNR == NR && $1 == "#" { for (i = 3; i <= NF; i++) if ($i == sc) col = i - 1; next }
			FNR == NR { want[$1] = $col; next }
			{
				got = $2 == "found" ? "yes" : "no"
				if (want[$1] != got) printf "; %s: found=%s, expected %s", $1, got, want[$1]
				seen[$1] = 1
			}
			END { for (c in want) if (!(c in seen)) printf "; %s: not checked", c }
		' - "$work/$sc")"
		if [ -z "$bad" ]; then
			ktap_test_pass "$label: every check as expected"
		else
			ktap_test_fail "$label:${bad#;}"
		fi
	done
done
unload_all

# The drop-in is, to every check, what NVIDIA's module is.
same=true
for sysfs in 0 1; do
	diff "$work/dropin:$sysfs" "$work/nvidia:$sysfs" > /dev/null || same=false
done
check "the drop-in answers every check as NVIDIA's nvidia-peermem does, on both hosts" $same

# The table, as found: each check, the function it mirrors, its paths, and what it found.
cat > "$work/sources" <<'EOF'
nccl gdr.cc:ibGdrSupportInitOnce memory_peers/nv_mem,memory_peers/nv_mem_nc,module/nvidia_peermem
nccl-gin-gdaki gdr.cc:ibPeerMemSupportInitOnce module/nvidia_peermem
nccl-2.22 net_ib.cc:ncclIbGdrSupport memory_peers/nv_mem,memory_peers/nv_mem_nc
nccl-2.21 net_ib.cc:ncclIbGdrSupport memory_peers/nv_mem,memory_peers/nvidia-peermem
ucx ib_md.c:uct_ib_check_gpudirect_driver memory_peers/nv_mem,module/nvidia_peermem,module/nv_peer_mem
ucx-1.17 ib_md.c:uct_ib_check_gpudirect_driver memory_peers/nv_mem
nvshmem transport_ib_common.cpp:nvshmemt_ib_common_nv_peer_mem_available memory_peers/nv_mem,memory_peers/nvidia-peermem,module/nvidia_peermem
ucc tl_mlx5_context.c:ucc_tl_mlx5_check_gpudirect_driver_cuda memory_peers/nv_mem,module/nvidia_peermem,module/nv_peer_mem
EOF
for sc in $scenarios; do
	[ -f "$work/$sc" ] || : > "$work/$sc"
done
# shellcheck disable=SC2086 # the scenarios are words
awk -v scenarios="$scenarios" -v work="$work" '
	BEGIN {
		n = split(scenarios, sc, " ")
		print "| check (source: function) | paths, in order | peermem_rs, no memory_peers | peermem_rs, memory_peers | drop-in nvidia_peermem, no memory_peers | drop-in nvidia_peermem, memory_peers | NVIDIA nvidia_peermem 550, no memory_peers | NVIDIA nvidia_peermem 550, memory_peers |"
		print "|---|---|---|---|---|---|---|---|"
	}
	FILENAME == work "/sources" { order[++nc] = $1; src[$1] = $2; paths[$1] = $3; next }
	{
		for (i = 1; i <= n; i++)
			if (FILENAME == work "/" sc[i])
				s = i
		p = $3
		sub(/^\/sys\/kernel\/mm\//, "", p)
		sub(/^\/sys\//, "", p)
		sub(/\/version$/, "", p)
		cell[$1, s] = $2 == "found" ? "found (" p ")" : "not found"
	}
	END {
		for (c = 1; c <= nc; c++) {
			k = order[c]
			line = "| " k " (" src[k] ") | " paths[k] " |"
			for (i = 1; i <= n; i++)
				line = line " " (((k, i) in cell) ? cell[k, i] : "?") " |"
			print line
		}
	}
' "$work/sources" $(for sc in $scenarios; do echo "$work/$sc"; done) > "$out/gdr-detection.md"
sed 's/^/# | /' "$out/gdr-detection.md"
rm -rf "$work"
ktap_finished
