#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Host-side tests of the packaging: packaging/configure.sh (discovery and refusals), a real dkms
# add/build/install/remove (Debian's dkms), `make install`/`uninstall`, and peermem-rs-explain on
# recorded /proc and /sys trees. Prints KTAP, one line per check.
#
#   tests/infra/in-root tests/packaging/host_tests.sh KDIR OUTDIR
#
# It runs inside the build root, whose /tmp is private to the call: every fake node layout lives in
# /tmp and vanishes with it; /var/lib/dkms is covered by a tmpfs too, so nothing reaches the cached
# root (and /usr/share, where DKMS reads which modules it may install over newer ones, by an overlay).
# The stand-ins and NVIDIA's nvidia-peermem.ko must be built (make module;
# tests/reference/build-nvidia-peermem.sh). OUTDIR receives what the VM tests load
# (tests/selftests/packaging): dkms/peermem_rs.ko and dkms/nvidia-peermem.ko (the drop-in) as dkms
# installed them, nvidia.ko (a proprietary-licensed stub of the NVIDIA exports) and VERSION.
set -uo pipefail

REPO=$(cd "$(dirname "$0")/../.." && pwd)
KDIR=${1:?usage: $0 KDIR OUTDIR}
OUT=${2:?usage: $0 KDIR OUTDIR}
CACHE_WORK=$(dirname "$(dirname "$KDIR")")
NV_OPEN=$CACHE_WORK/src/nvidia-open-kernel-source/modules/nvidia-open-kernel
NV_PROP=$CACHE_WORK/src/nvidia-tesla-535-kernel-source/modules/nvidia-tesla-535-kernel
STANDINS=$REPO/tests/standins
# shellcheck source=node_layout.sh
. "$REPO/tests/packaging/node_layout.sh"
KREL=$(cat "$KDIR/include/config/kernel.release")
VERSION=$(sed -n '/^\[workspace\.package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' "$REPO/Cargo.toml")
WANT_RUSTC=$(sed -n 's/^CONFIG_RUSTC_VERSION_TEXT=//p' "$KDIR/include/config/auto.conf" | tr -d '"')
NV_VERSION=550.163.01
# NVIDIA's nvidia-peermem.ko (550), built against the stand-ins: what a driver package installs.
NV_PEERMEM=$REPO/.build/reference/nvidia-peermem/nvidia-peermem.ko
export REPO KDIR KREL

echo "TAP version 13"
bail() { echo "1..0 # SKIP $*"; exit 4; }
[ "$(id -u)" = 0 ] && command -v dkms >/dev/null ||
    bail "needs root and dkms: run it through tests/infra/in-root"
awk '$5 == "/tmp" { f = 1 } END { exit !f }' /proc/self/mountinfo || bail "/tmp is not private: run it through tests/infra/in-root"
for f in "$STANDINS/nvidia_p2p/Module.symvers" "$STANDINS/peer_mem_host/Module.symvers" \
    "$STANDINS/nvidia_p2p/nvidia_p2p_standin.ko" "$NV_OPEN/nvidia/nv-p2p.h" "$NV_PROP/nvidia/nv-p2p.h" \
    "$NV_PEERMEM"; do
    [ -e "$f" ] || bail "no $f (make module; tests/reference/build-nvidia-peermem.sh; tests/infra/setup-toolchain.sh)"
done
# Whatever dkms might write to its default tree stays in this mount namespace.
mount -t tmpfs tmpfs /var/lib/dkms || bail "cannot mount a tmpfs on /var/lib/dkms"

T=$(mktemp -d /tmp/peermem-packaging.XXXXXX)
LOG=$T/log
n=0
failed=0
ok() { n=$((n + 1)); echo "ok $n $1"; }
notok() {
    n=$((n + 1))
    failed=1
    [ -s "$LOG" ] && tail -n 40 "$LOG" | sed 's/^/# | /'
    echo "not ok $n $1"
}
# check DESC CMD...: passes if CMD succeeds (its output is shown on failure).
check() {
    local d=$1
    shift
    if "$@" > "$LOG" 2>&1; then ok "$d"; else notok "$d"; fi
}
# refusal DESC PATTERN... -- CMD...: CMD must fail, and say every PATTERN (fixed strings).
refusal() {
    local d=$1 pats=() p
    shift
    while [ "$1" != -- ]; do pats+=("$1"); shift; done
    shift
    if "$@" > "$LOG" 2>&1; then
        echo "(the command succeeded)" >> "$LOG"
        notok "$d"
        return
    fi
    for p in "${pats[@]}"; do
        grep -qF -- "$p" "$LOG" || { echo "(not said: $p)" >> "$LOG"; notok "$d"; return; }
    done
    ok "$d"
}
has() { grep -qF -- "$2" "$1" || { echo "$1 does not say: $2"; cat "$1"; return 1; }; }

# --- fake nodes ------------------------------------------------------------------------------------

# node DIR: an empty node for the test kernel: /usr/src, /var/lib/dkms, /lib/modules/KREL/build.
node() {
    rm -rf "$1"
    mkdir -p "$1/usr/src" "$1/var/lib/dkms" "$1/lib/modules/$KREL" "$1/out"
    ln -s "$KDIR" "$1/lib/modules/$KREL/build"
}
# nvidia_src DIR [TREE [VERSION]], dkms_nvidia DIR [VERSION], ofed DIR: the node layouts of
# node_layout.sh with this run's defaults: the cached NVIDIA tree, and the stand-ins' Module.symvers
# and peer_mem.h for nvidia.ko's and MLNX_OFED's.
nvidia_src() { layout_nvidia_src "$1" "${2:-$NV_OPEN}" "${3:-$NV_VERSION}"; }
dkms_nvidia() { layout_nvidia_dkms "$1" "${2:-$NV_VERSION}" "$STANDINS/nvidia_p2p/Module.symvers"; }
ofed() {
    layout_ofed "$1" "$REPO/tests/standins/include/rdma/peer_mem.h" "$STANDINS/peer_mem_host/Module.symvers"
}
# configure DIR [ARGS]: packaging/configure.sh on node DIR, writing DIR/out/config.mk.
configure() {
    local d=$1
    shift
    PEERMEM_SRC_TREE=$d/usr/src PEERMEM_DKMS_TREE=$d/var/lib/dkms PEERMEM_MODULES_TREE=$d/lib/modules \
        "$REPO/packaging/configure.sh" --kdir "${FAKE_KDIR:-$KDIR}" --out "$d/out/config.mk" "$@"
}
# cfg DIR VAR: a value of DIR/out/config.mk.
cfg() { sed -n "s/^PEERMEM_$2 := //p" "$1/out/config.mk"; }
# expect DIR VAR VALUE
expect() {
    local v
    v=$(cfg "$1" "$2")
    [ "$v" = "$3" ] || { echo "PEERMEM_$2 is '$v', expected '$3'"; cat "$1/out/config.mk"; return 1; }
}
# fake_kdir DIR [sed script for auto.conf]: a kernel build dir with the test kernel's configuration
# (edited) and, unless NO_RUST_META is set, its Rust metadata; enough for the configure step.
fake_kdir() {
    rm -rf "$1"
    mkdir -p "$1/include/config" "$1/rust"
    sed "${2:-}" "$KDIR/include/config/auto.conf" > "$1/include/config/auto.conf"
    echo "$KREL" > "$1/include/config/kernel.release"
    cp "$KDIR/Module.symvers" "$1/"
    if [ -z "${NO_RUST_META:-}" ]; then
        ln -s "$KDIR/rust/libkernel.rmeta" "$KDIR/rust/libmacros.so" "$1/rust/"
    fi
}

# --- the proprietary stub (for the refusal of an installed proprietary nvidia.ko, and the VM) ------

mkdir -p "$OUT/dkms"
rm -f "$OUT/dkms/peermem_rs.ko" "$OUT/dkms/nvidia-peermem.ko" "$OUT/nvidia.ko" "$OUT/VERSION"
echo "$VERSION" > "$OUT/VERSION"
stub=$T/proprietary_nvidia
cp -r "$REPO/tests/packaging/proprietary_nvidia" "$stub"
check "proprietary stub: builds (a module 'nvidia' exporting nvidia_p2p_* under MODULE_LICENSE(\"NVIDIA\"))" \
    make -s -C "$KDIR" LLVM=-19 M="$stub" NVIDIA_SRC="$NV_OPEN/nvidia" modules
check "proprietary stub: its license is NVIDIA's" bash -c "[ \"\$(modinfo -F license $stub/nvidia.ko)\" = NVIDIA ]"
[ "$(modinfo -F license "$stub/nvidia.ko" 2>/dev/null)" = NVIDIA ] && cp "$stub/nvidia.ko" "$OUT/nvidia.ko"

# --- discovery -------------------------------------------------------------------------------------

N=$T/n1
node "$N"
nvidia_src "$N"
ofed "$N/usr/src/ofa_kernel/x86_64/$KREL"
mkdir -p "$N/lib/modules/$KREL/updates/dkms"
cp "$STANDINS/nvidia_p2p/nvidia_p2p_standin.ko" "$N/lib/modules/$KREL/updates/dkms/nvidia.ko"
check "configure: finds MLNX_OFED in /usr/src/ofa_kernel/x86_64/<kernel>, the NVIDIA tree in /usr/src/nvidia-<version>" \
    bash -c "$(declare -f configure cfg expect); configure $N &&
        expect $N PEER_MEM_INC $N/usr/src/ofa_kernel/x86_64/$KREL/include &&
        expect $N NVIDIA_SRC $N/usr/src/nvidia-$NV_VERSION/nvidia &&
        expect $N EXTRA_SYMBOLS '$N/out/nvidia.symvers $N/usr/src/ofa_kernel/x86_64/$KREL/Module.symvers' &&
        expect $N LLVM -19 && expect $N RUSTC /usr/bin/rustc && expect $N KERNELRELEASE $KREL &&
        expect $N OFED_RELEASE ''"
check "configure: nvidia.ko's symbols, read from the installed module, are those of its Module.symvers" \
    diff <(cut -f1,2,4 "$N/out/nvidia.symvers" | sort) <(cut -f1,2,4 "$STANDINS/nvidia_p2p/Module.symvers" | sort)

N=$T/n2
node "$N"
nvidia_src "$N"
ofed "$N/usr/src/ofa_kernel/$KREL"
dkms_nvidia "$N"
check "configure: finds MLNX_OFED in /usr/src/ofa_kernel/<kernel>, nvidia's Module.symvers in its DKMS tree" \
    bash -c "$(declare -f configure cfg expect); configure $N &&
        expect $N PEER_MEM_INC $N/usr/src/ofa_kernel/$KREL/include &&
        expect $N EXTRA_SYMBOLS '$N/var/lib/dkms/nvidia/$NV_VERSION/build/Module.symvers $N/usr/src/ofa_kernel/$KREL/Module.symvers'"

# The "default" link of MLNX_OFED, here to the build for another kernel: used, with a warning.
N=$T/n3
node "$N"
nvidia_src "$N"
dkms_nvidia "$N"
ofed "$N/usr/src/ofa_kernel/x86_64/6.99.0-other"
ln -s x86_64/6.99.0-other "$N/usr/src/ofa_kernel/default"
check "configure: falls back to /usr/src/ofa_kernel/default, and warns that it is another kernel's build" \
    bash -c "$(declare -f configure cfg expect has); configure $N 2> $N/out/err &&
        expect $N PEER_MEM_INC $N/usr/src/ofa_kernel/default/include &&
        has $N/out/err 'ofa_kernel/default is the OFED build for 6.99.0-other, not $KREL'"

# mlnx-ofed-kernel from DKMS, two versions: the one installed for this kernel wins.
N=$T/n4
node "$N"
nvidia_src "$N"
dkms_nvidia "$N"
for v in 25.04 25.07; do ofed "$N/var/lib/dkms/mlnx-ofed-kernel/$v/build"; done
ln -s "25.04/$KREL/x86_64" "$N/var/lib/dkms/mlnx-ofed-kernel/kernel-$KREL-x86_64"
check "configure: finds mlnx-ofed-kernel's DKMS build tree, the version installed for this kernel" \
    bash -c "$(declare -f configure cfg expect); configure $N &&
        expect $N PEER_MEM_INC $N/var/lib/dkms/mlnx-ofed-kernel/25.04/build/include"
check "configure: the OFED release from the DKMS build's version (25.04: the invalidating flavour allowed)" \
    bash -c "$(declare -f cfg expect); expect $N OFED_RELEASE 25.04"

# The OFED release read from the tree's ofed_scripts/generate_dkms_conf.sh, as MLNX_OFED copies it
# into /usr/src/ofa_kernel: before 25.04 the build refuses persistent_api_support=0, and says so.
N=$T/n4o
node "$N"
nvidia_src "$N"
dkms_nvidia "$N"
ofed "$N/usr/src/ofa_kernel/x86_64/$KREL"
mkdir -p "$N/usr/src/ofa_kernel/x86_64/$KREL/ofed_scripts"
echo 'PACKAGE_VERSION=${PACKAGE_VERSION:-"24.10"}' > "$N/usr/src/ofa_kernel/x86_64/$KREL/ofed_scripts/generate_dkms_conf.sh"
check "configure: the OFED release from ofed_scripts (24.10), and a warning that the build refuses persistent_api_support=0" \
    bash -c "$(declare -f configure cfg expect has); configure $N 2> $N/out/err &&
        expect $N OFED_RELEASE 24.10 && has $N/out/err 'refuses persistent_api_support=0'"
check "configure: PEERMEM_OFED_RELEASE names the release where the tree does not, and must be one" \
    bash -c "$(declare -f configure cfg expect); PEERMEM_OFED_RELEASE=25.10 configure $N && expect $N OFED_RELEASE 25.10 &&
        ! PEERMEM_OFED_RELEASE=latest configure $N 2>/dev/null"

# The same from the RPM packages, whose DKMS module is mlnx-ofa_kernel.
N=$T/n4r
node "$N"
nvidia_src "$N"
dkms_nvidia "$N"
ofed "$N/var/lib/dkms/mlnx-ofa_kernel/25.10/build"
ln -s "25.10/$KREL/x86_64" "$N/var/lib/dkms/mlnx-ofa_kernel/kernel-$KREL-x86_64"
check "configure: finds the DKMS build tree of mlnx-ofa_kernel (the RPM packages' name)" \
    bash -c "$(declare -f configure cfg expect); configure $N &&
        expect $N PEER_MEM_INC $N/var/lib/dkms/mlnx-ofa_kernel/25.10/build/include"

# DOCA-OFED 3.2 and later: the OFED kernel tree is built by DKMS into
# /usr/src/ofa_kernel-dkms/<arch>/<kernel>, and /usr/src/ofa_kernel holds only absolute symlinks to it
# (<arch>/<kernel>, and default through /etc/alternatives/ofa_kernel_headers). Here the links point at
# /usr/src/ofa_kernel-dkms of the machine, as they do inside a driver container that mounts the host's
# /usr/src elsewhere: they dangle, and the DKMS tree must be found by its own name.
N=$T/n4d
node "$N"
nvidia_src "$N"
dkms_nvidia "$N"
ofed "$N/usr/src/ofa_kernel-dkms/x86_64/$KREL"
mkdir -p "$N/usr/src/ofa_kernel/x86_64"
ln -s "/usr/src/ofa_kernel-dkms/x86_64/$KREL.not-here" "$N/usr/src/ofa_kernel/x86_64/$KREL"
ln -s "/etc/alternatives/ofa_kernel_headers.not-here" "$N/usr/src/ofa_kernel/default"
check "configure: finds DOCA-OFED's /usr/src/ofa_kernel-dkms/x86_64/<kernel> behind dangling /usr/src/ofa_kernel links" \
    bash -c "$(declare -f configure cfg expect); configure $N &&
        expect $N PEER_MEM_INC $N/usr/src/ofa_kernel-dkms/x86_64/$KREL/include &&
        expect $N EXTRA_SYMBOLS '$N/var/lib/dkms/nvidia/$NV_VERSION/build/Module.symvers $N/usr/src/ofa_kernel-dkms/x86_64/$KREL/Module.symvers'"
# The same tree under the kernel's name for the architecture (x86), as trees laid out for NVIDIA's
# nvidia-peermem Kbuild before its DOCA fix are.
N=$T/n4k
node "$N"
nvidia_src "$N"
dkms_nvidia "$N"
ofed "$N/usr/src/ofa_kernel-dkms/x86/$KREL"
check "configure: finds /usr/src/ofa_kernel-dkms/x86/<kernel> (the kernel's spelling of the architecture)" \
    bash -c "$(declare -f configure cfg expect); configure $N &&
        expect $N PEER_MEM_INC $N/usr/src/ofa_kernel-dkms/x86/$KREL/include"
# DOCA's default link, to the DKMS build for another kernel: used, with the warning.
N=$T/n4o
node "$N"
nvidia_src "$N"
dkms_nvidia "$N"
ofed "$N/usr/src/ofa_kernel-dkms/x86_64/6.99.0-other"
mkdir -p "$N/usr/src/ofa_kernel"
ln -s "$N/usr/src/ofa_kernel-dkms/x86_64/6.99.0-other" "$N/usr/src/ofa_kernel/default"
check "configure: DOCA's /usr/src/ofa_kernel/default to another kernel's DKMS build is used, with a warning" \
    bash -c "$(declare -f configure cfg expect has); configure $N 2> $N/out/err &&
        expect $N PEER_MEM_INC $N/usr/src/ofa_kernel/default/include &&
        has $N/out/err 'ofa_kernel/default is the OFED build for 6.99.0-other, not $KREL'"

# An Ubuntu kernel carrying the peer-memory patches: header and exports are the kernel's own.
N=$T/n5
node "$N"
nvidia_src "$N"
dkms_nvidia "$N"
F=$T/kdir-sauce
fake_kdir "$F"
mkdir -p "$F/include/rdma"
cp "$REPO/tests/standins/include/rdma/peer_mem.h" "$F/include/rdma/"
printf '0x00000000\tib_register_peer_memory_client\tdrivers/infiniband/core/ib_core\tEXPORT_SYMBOL\t\n' >> "$F/Module.symvers"
check "configure: an Ubuntu kernel with in-tree peer memory (rdma/peer_mem.h and the exports in the kernel's own files)" \
    bash -c "$(declare -f configure cfg expect); FAKE_KDIR=$F configure $N &&
        expect $N PEER_MEM_INC $F/include &&
        expect $N EXTRA_SYMBOLS $N/var/lib/dkms/nvidia/$NV_VERSION/build/Module.symvers"

# CRCs (CONFIG_MODVERSIONS): the test kernel has none, so a module with them is assembled here.
cat > "$T/crcs.s" <<'EOF'
	.section "__ksymtab","a"
__ksymtab_foo:
	.long 0, 0, 0
	.section "__ksymtab_gpl","a"
__ksymtab_bar:
	.long 0, 0, 0
__ksymtab_baz:
	.long 0, 0, 0
	.section "__kcrctab","a"
__crc_bar:
	.long 0xdeadbeef
__crc_foo:
	.long 0x12345678
	.globl __crc_baz
	.set __crc_baz, 0xcafef00d
EOF
printf '0x12345678\tfoo\tfake\tEXPORT_SYMBOL\t\n0xdeadbeef\tbar\tfake\tEXPORT_SYMBOL_GPL\t\n0xcafef00d\tbaz\tfake\tEXPORT_SYMBOL_GPL\t\n' | sort > "$T/crcs.want"
check "configure gen-symvers: exports and CRCs (in __kcrctab, or absolute) of a module with CONFIG_MODVERSIONS" \
    bash -c "clang-19 -c -x assembler $T/crcs.s -o $T/fake.ko && $REPO/packaging/configure.sh gen-symvers $T/fake.ko | sort | diff $T/crcs.want -"

# --- refusals --------------------------------------------------------------------------------------
# Each node has everything a build needs but the one thing refused.

N=$T/r1
node "$N"
nvidia_src "$N"
dkms_nvidia "$N"
ofed "$N/usr/src/ofa_kernel/default"
mkdir -p "$N/fakebin"
printf '#!/bin/sh\necho "rustc 1.80.0 (051478957 2024-07-21)"\n' > "$N/fakebin/rustc"
chmod +x "$N/fakebin/rustc"
refusal "refused: a rustc other than the kernel's, naming the one to install" \
    "kernel $KREL was built by '$WANT_RUSTC'" "found $N/fakebin/rustc: rustc 1.80.0" \
    "apt install rustc-1.85" "rustup toolchain install 1.85.1" \
    -- env PATH="$N/fakebin:$PATH" bash -c "$(declare -f configure); configure $N"
check "refused: no configuration written after a refusal" test ! -e "$N/out/config.mk"

N=$T/r2
node "$N"
nvidia_src "$N"
dkms_nvidia "$N"
refusal "refused: no MLNX_OFED/DOCA-OFED tree, with the places searched and what to install" \
    "no peer-memory host (MLNX_OFED / DOCA-OFED) found for kernel $KREL" \
    "$N/usr/src/ofa_kernel/x86_64/$KREL/include" "$N/usr/src/ofa_kernel/default/include" \
    "mlnx-ofed-kernel-dkms" "could never load" \
    -- configure "$N"

N=$T/r3
node "$N"
nvidia_src "$N"
dkms_nvidia "$N"
ofed "$N/usr/src/ofa_kernel/default"
rm "$N/usr/src/ofa_kernel/default/Module.symvers"
refusal "refused: an OFED header without the Module.symvers that exports the peer-memory API" \
    "no Module.symvers exporting ib_register_peer_memory_client" "PEERMEM_ALLOW_NO_PEER_MEM=1" \
    -- configure "$N"
check "PEERMEM_ALLOW_NO_PEER_MEM=1: configured anyway, loudly, with modpost warnings instead of errors" \
    bash -c "$(declare -f configure cfg expect has); PEERMEM_ALLOW_NO_PEER_MEM=1 configure $N 2> $N/out/err &&
        expect $N MODPOST_WARN 1 && has $N/out/err 'building WITHOUT the peer-memory host' &&
        has $N/out/err 'Do not install this build on GPU nodes'"

N=$T/r4
node "$N"
nvidia_src "$N"
dkms_nvidia "$N"
ofed "$N/usr/src/ofa_kernel/default"
refusal "refused: NVIDIA_SRC at the proprietary driver's tree (Debian's nvidia-tesla-535-kernel-source)" \
    "is NVIDIA's proprietary driver (MODULE_LICENSE(\"NVIDIA\") in $NV_PROP/nvidia/nv-frontend.c)" \
    "GPL-only" "open kernel" "nvidia-peermem" \
    -- env NVIDIA_SRC="$NV_PROP" bash -c "$(declare -f configure); configure $N"

N=$T/r5
node "$N"
nvidia_src "$N" "$NV_PROP" 535.247.01
dkms_nvidia "$N" 535.247.01
ofed "$N/usr/src/ofa_kernel/default"
# Found as /usr/src/nvidia-<version> or as the DKMS tree's source link to it: either may be named.
refusal "refused: the proprietary tree when it is the one found in /usr/src or the DKMS tree" \
    "535.247.01" "is NVIDIA's proprietary driver (MODULE_LICENSE(\"NVIDIA\")" "nvidia-peermem" \
    -- configure "$N"

N=$T/r6
node "$N"
nvidia_src "$N"
dkms_nvidia "$N"
ofed "$N/usr/src/ofa_kernel/default"
mkdir -p "$N/lib/modules/$KREL/updates/dkms"
if [ -f "$OUT/nvidia.ko" ]; then
    xz -c "$OUT/nvidia.ko" > "$N/lib/modules/$KREL/updates/dkms/nvidia.ko.xz"
    refusal "refused: a proprietary nvidia.ko installed for the kernel (compressed), even next to an open tree" \
        "the installed $N/lib/modules/$KREL/updates/dkms/nvidia.ko.xz is NVIDIA's proprietary driver" \
        -- configure "$N"
else
    notok "refused: a proprietary nvidia.ko installed for the kernel # no stub built"
fi

N=$T/r7
node "$N"
nvidia_src "$N"
dkms_nvidia "$N"
ofed "$N/usr/src/ofa_kernel/default"
F=$T/kdir-norust
fake_kdir "$F" '/^CONFIG_RUST=/d'
refusal "refused: a kernel without CONFIG_RUST" \
    "kernel $KREL was built without Rust support: CONFIG_RUST is not set" \
    -- env FAKE_KDIR="$F" bash -c "$(declare -f configure); configure $N"
F=$T/kdir-nometa
NO_RUST_META=1 fake_kdir "$F"
refusal "refused: CONFIG_RUST=y without the kernel's Rust metadata, naming linux-lib-rust" \
    "has CONFIG_RUST=y, but its Rust metadata is missing" "rust/libkernel.rmeta" \
    "apt install linux-lib-rust-$KREL" \
    -- env FAKE_KDIR="$F" bash -c "$(declare -f configure); configure $N"

# Ubuntu's HWE and OEM kernels: the headers' rust link is named after the source package
# (../linux-hwe-7.3-lib-rust-RELEASE/rust) and dangles, while linux-lib-rust-RELEASE is installed.
F=$T/kdir-ubuntu-hwe
NO_RUST_META=1 fake_kdir "$F"
rmdir "$F/rust"
ln -s "../linux-hwe-7.3-lib-rust-$KREL/rust" "$F/rust"
U=$T/ubuntu-src
mkdir -p "$U/linux-lib-rust-$KREL"
ln -s "$KDIR/rust" "$U/linux-lib-rust-$KREL/rust"
check "rust-metadata: an Ubuntu HWE kernel whose rust link dangles is built against linux-lib-rust-RELEASE's metadata" \
    bash -c "out=\$(PEERMEM_SRC_TREE=$U PEERMEM_RUST_METADATA_CACHE=$T/rmc $REPO/packaging/rust-metadata.sh --kdir $F --kernelrelease $KREL) &&
        echo \$out && [ \$out = $T/rmc/$KREL/linked ] && [ \"\$(readlink \$out/rust)\" = $U/linux-lib-rust-$KREL/rust ] &&
        [ -e \$out/rust/libkernel.rmeta ] && [ -e \$out/rust/libmacros.so ] && [ -e \$out/include/config/auto.conf ] &&
        [ -e \$out/Module.symvers ]"
refusal "rust-metadata: the same kernel without linux-lib-rust-RELEASE: refused, naming the dangling link and the package" \
    "has CONFIG_RUST=y, but its Rust metadata is missing: $F/rust links to ../linux-hwe-7.3-lib-rust-$KREL/rust, which does not exist" \
    "apt install linux-lib-rust-$KREL" \
    -- env PEERMEM_SRC_TREE="$T/none" PEERMEM_RUST_METADATA_CACHE="$T/rmc" "$REPO/packaging/rust-metadata.sh" --kdir "$F" --kernelrelease "$KREL"

# Through the Makefile: the build stops before compiling anything.
N=$T/r8
node "$N"
nvidia_src "$N"
dkms_nvidia "$N"
make -s -C "$REPO" dkms-source DESTDIR="$N" > "$LOG" 2>&1
SRC=$N/usr/src/peermem-rs-$VERSION
refusal "refused by make KDIR=...: without OFED the build fails before compiling" \
    "no peer-memory host (MLNX_OFED / DOCA-OFED) found" \
    -- make -C "$SRC" KDIR="$KDIR" PEERMEM_SRC_TREE="$N/usr/src" PEERMEM_DKMS_TREE="$N/var/lib/dkms" \
        PEERMEM_MODULES_TREE="$N/lib/modules" module
check "refused by make KDIR=...: no peermem_rs.ko and no object was produced" \
    bash -c "! ls $SRC/*.ko $SRC/src/*.o 2>/dev/null | grep ."

# --- DKMS ------------------------------------------------------------------------------------------

# A node with MLNX_OFED installed through DKMS (mlnx-ofed-kernel 25.07, "installed" for the test kernel:
# its source, build tree with include/ and Module.symvers, and dkms's installed-link) and the NVIDIA
# driver's DKMS tree (source -> /usr/src/nvidia-<version>, a build/Module.symvers).
N=$T/dkms
node "$N"
D=$N/var/lib/dkms
nvidia_src "$N"
dkms_nvidia "$N"
O=$N/usr/src/mlnx-ofed-kernel-25.07
mkdir -p "$O" "$D/mlnx-ofed-kernel/25.07/$KREL/x86_64/module"
printf 'PACKAGE_NAME=mlnx-ofed-kernel\nPACKAGE_VERSION=25.07\nBUILT_MODULE_NAME[0]=ib_core\nDEST_MODULE_LOCATION[0]=/updates/dkms\n' > "$O/dkms.conf"
ln -s "$O" "$D/mlnx-ofed-kernel/25.07/source"
ln -s "25.07/$KREL/x86_64" "$D/mlnx-ofed-kernel/kernel-$KREL-x86_64"
ofed "$D/mlnx-ofed-kernel/25.07/build"
DKMS_MAKE=(make -C "$REPO" DESTDIR="$N" KDIR="$KDIR" DKMS_ARGS="--dkmstree $D --installtree $N/lib/modules")
dstatus() { dkms status -m peermem-rs --dkmstree "$D" --sourcetree "$N/usr/src" --installtree "$N/lib/modules"; }
KO=$N/lib/modules/$KREL/updates/dkms/peermem_rs.ko
start=$(date +%s)
check "dkms: make dkms-install DROPIN=0 (dkms add, build, install; the peermem_rs name) for the test kernel" "${DKMS_MAKE[@]}" DROPIN=0 dkms-install
dkms_s=$(( $(date +%s) - start ))
check "dkms: dkms.conf made from the template, with Cargo.toml's version $VERSION" \
    bash -c "grep -qx 'PACKAGE_VERSION=\"$VERSION\"' $N/usr/src/peermem-rs-$VERSION/dkms.conf &&
        grep -q '^BUILD_EXCLUSIVE_CONFIG=\"CONFIG_RUST ' $N/usr/src/peermem-rs-$VERSION/dkms.conf"
check "dkms: status says installed for $KREL" bash -c "$(declare -f dstatus); D=$D N=$N KREL=$KREL; dstatus | tee /dev/stderr | grep -q 'peermem-rs/$VERSION, $KREL, x86_64: installed'"
check "dkms: the installed module is version $VERSION for kernel $KREL, linked to the fake OFED and NVIDIA trees" \
    bash -c "[ \"\$(modinfo -F version $KO)\" = $VERSION ] && modinfo -F vermagic $KO | grep -q '^$KREL ' &&
        [ \"\$(modinfo -F depends $KO | tr , '\\n' | sort | paste -sd,)\" = nvidia_p2p_standin,peer_mem_host ]"
check "dkms: the build found OFED and NVIDIA in dkms's own trees" \
    has "$D/peermem-rs/$VERSION/$KREL/x86_64/log/make.log" \
    "rdma/peer_mem.h in $D/mlnx-ofed-kernel/25.07/build/include; symbols from $D/mlnx-ofed-kernel/25.07/build/Module.symvers"
check "dkms: the rebuild dependency on mlnx-ofed-kernel is recorded (BUILD_DEPENDS, version 25.07)" \
    bash -c "[ \"\$(cat $D/peermem-rs/$VERSION/$KREL/x86_64/.dep_mlnx-ofed-kernel)\" = 25.07 ]"
check "dkms: the modprobe.d snippet is installed and parsed by modprobe (softdep, install hook)" \
    bash -c "modprobe -c -C $N/lib/modprobe.d > $N/out/modprobe.c; cat $N/out/modprobe.c | grep peermem;
        grep -qx 'softdep peermem_rs pre: nvidia ib_core ib_uverbs' $N/out/modprobe.c &&
        grep -q '^install peermem_rs /sbin/modprobe --ignore-install peermem_rs .* /usr/sbin/peermem-rs-explain' $N/out/modprobe.c &&
        [ -x $N/usr/sbin/peermem-rs-explain ]"
[ -f "$KO" ] && cp "$KO" "$OUT/dkms/peermem_rs.ko"
# A second kernel, built without Rust: dkms skips it (BUILD_EXCLUSIVE_CONFIG) instead of failing.
F=$T/kdir-norust-dkms
fake_kdir "$F" '/^CONFIG_RUST=/d'
echo "$KREL-norust" > "$F/include/config/kernel.release"
mkdir -p "$N/lib/modules/$KREL-norust"
ln -s "$F" "$N/lib/modules/$KREL-norust/build"
check "dkms: a kernel without CONFIG_RUST is skipped by BUILD_EXCLUSIVE_CONFIG (exit 77), not failed" \
    bash -c "dkms build -m peermem-rs -v $VERSION -k $KREL-norust --dkmstree $D --sourcetree $N/usr/src \
        --installtree $N/lib/modules; rc=\$?; echo rc=\$rc; [ \$rc = 77 ]"

# --- DKMS: the drop-in next to NVIDIA's nvidia-peermem.ko ------------------------------------------
# The same node, now with NVIDIA's nvidia-peermem.ko (550.163.01, built from NVIDIA's source) where
# the .run installer puts it. `make dkms-install DROPIN=1` replaces the installed peermem_rs build
# with the drop-in. dkms never runs depmod here (its --installtree is not /lib/modules, and it would
# run depmod on the build root's own tree): depmod_node does, and no_depmod removes its output again
# before the next dkms call.
VID=$N/lib/modules/$KREL/kernel/drivers/video
DKO=$N/lib/modules/$KREL/updates/dkms/nvidia-peermem.ko
ORIG=$D/peermem-rs/original_module/$KREL/x86_64
mkdir -p "$VID"
cp "$NV_PEERMEM" "$VID/nvidia-peermem.ko"
depmod_node() { depmod -b "$N" "$KREL" 2>/dev/null; }
no_depmod() { rm -f "$N/lib/modules/$KREL"/modules.*; }
# peermem_of: the file modules.dep resolves nvidia_peermem to.
peermem_of() { depmod_node; sed -n 's/^\([^:]*nvidia-peermem\.ko\):.*/\1/p' "$N/lib/modules/$KREL/modules.dep"; no_depmod; }
verinfo() { echo "$(modinfo -F name "$1") $(modinfo -F version "$1")"; }
# DKMS reads /usr/share/dkms/modules_to_force_install, outside DESTDIR: an overlay on /usr/share (so
# that nothing reaches the build root) shows the node's at that place.
mkdir -p "$T/share-up" "$T/share-work" "$N/usr/share/dkms"
mount -t overlay overlay -o "lowerdir=/usr/share,upperdir=$T/share-up,workdir=$T/share-work" /usr/share ||
    notok "drop-in dkms: cannot mount an overlay on /usr/share"
check "drop-in: NVIDIA's nvidia-peermem.ko ($NV_VERSION) is what modules.dep resolves nvidia_peermem to, before" \
    bash -c "$(declare -f depmod_node no_depmod peermem_of); N=$N KREL=$KREL; [ \"\$(peermem_of)\" = kernel/drivers/video/nvidia-peermem.ko ] &&
        [ \"\$(modinfo -F version $VID/nvidia-peermem.ko)\" = $NV_VERSION ]"
# Without the version override DKMS refuses: 0.1.0 is "not newer" than 550.163.01.
refusal "drop-in dkms: switching from peermem_rs removes it first; without DKMS's version override the install is refused" \
    "under the other module name: removing it first" "is not newer than what is already found in kernel $KREL" \
    -- "${DKMS_MAKE[@]}" DROPIN=1 dkms-install
check "drop-in dkms: after the refusal, NVIDIA's module is untouched" test -f "$VID/nvidia-peermem.ko"
ln -s "$N/usr/share/dkms" /usr/share/dkms
start=$(date +%s)
check "drop-in dkms: make dkms-install (the drop-in by default) writes the override, and DKMS installs it and archives NVIDIA's" \
    bash -c "${DKMS_MAKE[*]@Q} dkms-install > $T/dropin-install.log 2>&1; rc=\$?; cat $T/dropin-install.log; [ \$rc = 0 ] &&
        grep -q 'Found pre-existing $VID/nvidia-peermem.ko, archiving for uninstallation' $T/dropin-install.log &&
        [ \"\$(cat $N/usr/share/dkms/modules_to_force_install/peermem-rs)\" = peermem-rs_version-override ]"
dropin_s=$(( $(date +%s) - start ))
check "drop-in dkms: dkms.conf says PEERMEM_DROPIN=\"1\"; the build made nvidia-peermem.ko" \
    bash -c "grep -qx 'PEERMEM_DROPIN=\"1\"' $N/usr/src/peermem-rs-$VERSION/dkms.conf &&
        grep -q 'LD \[M\]  *nvidia-peermem.ko' $D/peermem-rs/$VERSION/$KREL/x86_64/log/make.log"
check "drop-in dkms: updates/dkms/nvidia-peermem.ko is module nvidia_peermem, version $VERSION; peermem_rs.ko is gone" \
    bash -c "$(declare -f verinfo); [ \"\$(verinfo $DKO)\" = 'nvidia_peermem $VERSION' ] && [ ! -e $KO ]"
check "drop-in dkms: NVIDIA's ($NV_VERSION) is archived in DKMS's original_module, with where it came from" \
    bash -c "[ ! -e $VID/nvidia-peermem.ko ] && [ \"\$(modinfo -F version $ORIG/nvidia-peermem.ko)\" = $NV_VERSION ] &&
        [ \"\$(cat $ORIG/nvidia-peermem.ko.origin)\" = $VID/nvidia-peermem.ko ]"
check "drop-in dkms: modules.dep resolves nvidia_peermem to the drop-in (updates/dkms)" \
    bash -c "$(declare -f depmod_node no_depmod peermem_of); N=$N KREL=$KREL; [ \"\$(peermem_of)\" = updates/dkms/nvidia-peermem.ko ]"
check "drop-in dkms: modprobe nvidia-peermem (dry run) runs our install hook, which inserts the drop-in" \
    bash -c "depmod -b $N $KREL 2>/dev/null
        modprobe -n -v -d $N -S $KREL -C $N/lib/modprobe.d nvidia-peermem | tee /dev/stderr |
            grep -q '^install /sbin/modprobe --ignore-install nvidia_peermem .*peermem-rs-explain nvidia_peermem' &&
        modprobe -n -v --ignore-install -d $N -S $KREL -C $N/lib/modprobe.d nvidia-peermem | tee /dev/stderr |
            grep -q '^insmod $DKO' &&
        grep -qx 'softdep nvidia_peermem pre: nvidia ib_core ib_uverbs' $N/lib/modules/$KREL/modules.softdep; rc=\$?
        rm -f $N/lib/modules/$KREL/modules.*; exit \$rc"
[ -f "$DKO" ] && cp "$DKO" "$OUT/dkms/nvidia-peermem.ko"
check "drop-in dkms: dkms uninstall puts NVIDIA's back where it was" \
    bash -c "$(declare -f depmod_node no_depmod peermem_of); N=$N KREL=$KREL
        dkms uninstall -m peermem-rs -v $VERSION -k $KREL --dkmstree $D --sourcetree $N/usr/src --installtree $N/lib/modules &&
        [ ! -e $DKO ] && [ \"\$(modinfo -F version $VID/nvidia-peermem.ko)\" = $NV_VERSION ] &&
        [ \"\$(peermem_of)\" = kernel/drivers/video/nvidia-peermem.ko ]"
# NVIDIA's own DKMS package installs its nvidia-peermem.ko at the drop-in's place: archived and put
# back the same way.
mkdir -p "$(dirname "$DKO")"
mv "$VID/nvidia-peermem.ko" "$DKO"
check "drop-in dkms: NVIDIA's in updates/dkms (its DKMS package): replaced by the drop-in, and back after uninstall" \
    bash -c "$(declare -f verinfo depmod_node no_depmod peermem_of); N=$N KREL=$KREL
        dkms install -m peermem-rs -v $VERSION -k $KREL --dkmstree $D --sourcetree $N/usr/src --installtree $N/lib/modules &&
        [ \"\$(verinfo $DKO)\" = 'nvidia_peermem $VERSION' ] && [ \"\$(modinfo -F version $ORIG/nvidia-peermem.ko)\" = $NV_VERSION ] &&
        dkms uninstall -m peermem-rs -v $VERSION -k $KREL --dkmstree $D --sourcetree $N/usr/src --installtree $N/lib/modules &&
        [ \"\$(verinfo $DKO)\" = 'nvidia_peermem $NV_VERSION' ] && [ \"\$(peermem_of)\" = updates/dkms/nvidia-peermem.ko ]"
KO=$DKO
check "dkms: make dkms-uninstall removes the module, its dkms entry, the sources, the snippet and the override" \
    bash -c "$(declare -f dstatus); D=$D N=$N KREL=$KREL; ${DKMS_MAKE[*]@Q} DROPIN=1 dkms-uninstall &&
        [ -z \"\$(dstatus)\" ] && [ ! -e $N/usr/src/peermem-rs-$VERSION ] &&
        [ ! -e $N/lib/modprobe.d/peermem-rs.conf ] && [ ! -e $N/usr/sbin/peermem-rs-explain ] &&
        [ ! -e $N/usr/share/dkms/modules_to_force_install/peermem-rs ] &&
        [ \"\$(modinfo -F version $KO)\" = $NV_VERSION ]"
rm -f /usr/share/dkms

# --- DKMS: an OFED upgrade rebuilds peermem-rs ---------------------------------------------------
# MLNX_OFED's kernel modules as a DKMS package that dkms really adds, builds and installs
# (mlnx-ofed-kernel): its build stands in for OFED's (its ib_core.ko is the host stand-in built for
# the test kernel) and, as OFED's ofed_scripts/dkms_ofed_post_build.sh does, leaves its include/ and
# Module.symvers in /usr/src/ofa_kernel/<arch>/<kernel>, where peermem-rs's configure step finds
# them (dkms 3.x deletes the build directory itself). Upgrading it from 25.07 to 25.10 the way its
# package scripts do (dkms remove, add, install) must make DKMS rebuild and reinstall peermem-rs
# against 25.10 by itself: dkms.conf's BUILD_DEPENDS with BUILD_DEPENDS_REBUILD.
N=$T/ofed-upgrade
node "$N"
D=$N/var/lib/dkms
nvidia_src "$N"
dkms_nvidia "$N"
DK=(--dkmstree "$D" --sourcetree "$N/usr/src" --installtree "$N/lib/modules")
# ofed_dkms_source VERSION: /usr/src/mlnx-ofed-kernel-VERSION with its dkms.conf and build script.
ofed_dkms_source() {
    local o=$N/usr/src/mlnx-ofed-kernel-$1
    mkdir -p "$o"
    ofed "$o"
    printf '#!/bin/sh\nset -e\ncp %s ib_core.ko\nd=%s/usr/src/ofa_kernel/x86_64/$1\nrm -rf "$d"\nmkdir -p "$d"\ncp -r include Module.symvers "$d/"\necho %s > "$d/ofed-version"\n' \
        "$STANDINS/peer_mem_host/peer_mem_host.ko" "$N" "$1" > "$o/build.sh"
    printf 'PACKAGE_NAME=mlnx-ofed-kernel\nPACKAGE_VERSION=%s\nMAKE[0]="sh build.sh ${kernelver}"\nBUILT_MODULE_NAME[0]=ib_core\nDEST_MODULE_LOCATION[0]=/updates/dkms\nAUTOINSTALL=yes\n' "$1" > "$o/dkms.conf"
}
KO=$N/lib/modules/$KREL/updates/dkms/peermem_rs.ko
ofed_dkms_source 25.07
check "ofed upgrade: dkms add, build, install of mlnx-ofed-kernel 25.07 (headers to /usr/src/ofa_kernel/x86_64/$KREL)" \
    bash -c "dkms add -m mlnx-ofed-kernel -v 25.07 ${DK[*]@Q} && dkms install -m mlnx-ofed-kernel -v 25.07 -k $KREL ${DK[*]@Q} &&
        [ -f $N/lib/modules/$KREL/updates/dkms/ib_core.ko ] && [ -f $N/usr/src/ofa_kernel/x86_64/$KREL/include/rdma/peer_mem.h ]"
check "ofed upgrade: make dkms-install DROPIN=0 builds peermem-rs against it (BUILD_DEPENDS recorded: 25.07)" \
    bash -c "make -C $REPO DESTDIR=$N KDIR=$KDIR DKMS_ARGS='${DK[*]}' DROPIN=0 dkms-install &&
        grep -q 'rdma/peer_mem.h in $N/usr/src/ofa_kernel/x86_64/$KREL/include' $D/peermem-rs/$VERSION/$KREL/x86_64/log/make.log &&
        [ \"\$(cat $D/peermem-rs/$VERSION/$KREL/x86_64/.dep_mlnx-ofed-kernel)\" = 25.07 ] && [ -f $KO ]"
before=$(stat -c %Y.%i "$KO" 2>/dev/null)
sleep 1
ofed_dkms_source 25.10
start=$(date +%s)
check "ofed upgrade: installing mlnx-ofed-kernel 25.10 makes DKMS rebuild and reinstall peermem-rs by itself" \
    bash -c "dkms remove -m mlnx-ofed-kernel -v 25.07 --all ${DK[*]@Q} && dkms add -m mlnx-ofed-kernel -v 25.10 ${DK[*]@Q} &&
        dkms install -m mlnx-ofed-kernel -v 25.10 -k $KREL ${DK[*]@Q} > $T/ofed-upgrade.log 2>&1; rc=\$?; cat $T/ofed-upgrade.log;
        [ \$rc = 0 ] && grep -q 'Rebuilding module peermem-rs/$VERSION due to updated dependencies' $T/ofed-upgrade.log"
upgrade_s=$(( $(date +%s) - start ))
check "ofed upgrade: peermem-rs is installed again, built after the upgrade (BUILD_DEPENDS now 25.10)" \
    bash -c "$(declare -f dstatus); D=$D N=$N; dstatus; cat $D/peermem-rs/$VERSION/$KREL/x86_64/.dep_mlnx-ofed-kernel; stat -c '%Y.%i (before: $before)' $KO
        dstatus | grep -q 'peermem-rs/$VERSION, $KREL, x86_64: installed' &&
        [ \"\$(cat $D/peermem-rs/$VERSION/$KREL/x86_64/.dep_mlnx-ofed-kernel)\" = 25.10 ] &&
        [ -f $KO ] && [ \"\$(stat -c %Y.%i $KO)\" != '$before' ] && [ \"\$(cat $N/usr/src/ofa_kernel/x86_64/$KREL/ofed-version)\" = 25.10 ]"

# --- make install (without DKMS) -------------------------------------------------------------------

N=$T/inst
node "$N"
nvidia_src "$N"
ofed "$N/usr/src/ofa_kernel/x86_64/$KREL"
dkms_nvidia "$N"
make -s -C "$REPO" dkms-source DESTDIR="$N/stage" > "$LOG" 2>&1
check "make dkms-source: the DKMS source tree builds the drop-in by default (PEERMEM_DROPIN=\"1\")" \
    grep -qx 'PEERMEM_DROPIN="1"' "$N/stage/usr/src/peermem-rs-$VERSION/dkms.conf"
SRC=$N/stage/usr/src/peermem-rs-$VERSION
R=$N/root
mkdir -p "$R/lib/modules/$KREL"
INST=(make -C "$SRC" KDIR="$KDIR" DESTDIR="$R" PEERMEM_SRC_TREE="$N/usr/src" PEERMEM_DKMS_TREE="$N/var/lib/dkms"
      PEERMEM_MODULES_TREE="$N/lib/modules")
start=$(date +%s)
check "make install DROPIN=0 MODULES_LOAD=1: builds and installs peermem_rs, the modprobe.d snippet, the explain script, modules-load.d" \
    bash -c "${INST[*]@Q} DROPIN=0 MODULES_LOAD=1 install && [ -f $R/lib/modules/$KREL/updates/peermem_rs.ko ] &&
        [ -f $R/lib/modprobe.d/peermem-rs.conf ] && [ -x $R/usr/sbin/peermem-rs-explain ] &&
        grep -qx peermem_rs $R/etc/modules-load.d/peermem-rs.conf"
install_s=$(( $(date +%s) - start ))
check "make install: depmod indexed it, with the module's own soft dependencies" \
    bash -c "grep -q '^updates/peermem_rs.ko:' $R/lib/modules/$KREL/modules.dep &&
        grep -qx 'softdep peermem_rs pre: nvidia ib_core ib_uverbs' $R/lib/modules/$KREL/modules.softdep"
check "make install: modprobe (dry run) would run the install hook, which inserts updates/peermem_rs.ko" \
    bash -c "modprobe -n -v -d $R -S $KREL -C $R/lib/modprobe.d peermem_rs | tee /dev/stderr |
            grep -q '^install /sbin/modprobe --ignore-install peermem_rs .*peermem-rs-explain' &&
        modprobe -n -v --ignore-install -d $R -S $KREL -C $R/lib/modprobe.d peermem_rs | tee /dev/stderr |
            grep -q '^insmod $R/lib/modules/$KREL/updates/peermem_rs.ko'"
check "make uninstall DROPIN=0: everything installed is gone" \
    bash -c "${INST[*]@Q} DROPIN=0 uninstall && [ ! -e $R/lib/modules/$KREL/updates/peermem_rs.ko ] &&
        [ ! -e $R/lib/modprobe.d/peermem-rs.conf ] && [ ! -e $R/usr/sbin/peermem-rs-explain ] &&
        [ ! -e $R/etc/modules-load.d/peermem-rs.conf ] && ! grep -q peermem_rs $R/lib/modules/$KREL/modules.dep"

# The drop-in without DKMS, next to NVIDIA's nvidia-peermem.ko where its DKMS package puts it
# (updates/dkms): depmod has no order between two files below updates/ (here it takes NVIDIA's),
# so make install adds a depmod.d rule for the drop-in's; make uninstall takes it away again.
MD=$R/lib/modules/$KREL
mkdir -p "$MD/updates/dkms" "$T/no-depmod.d"
cp "$NV_PEERMEM" "$MD/updates/dkms/nvidia-peermem.ko"
check "make install (the drop-in by default): updates/nvidia-peermem.ko (module nvidia_peermem, $VERSION) and a depmod.d rule" \
    bash -c "$(declare -f verinfo); ${INST[*]@Q} install && [ \"\$(verinfo $MD/updates/nvidia-peermem.ko)\" = 'nvidia_peermem $VERSION' ] &&
        grep -qx 'override nvidia-peermem \* updates' $R/etc/depmod.d/peermem-rs.conf &&
        grep -qx 'softdep nvidia_peermem pre: nvidia ib_core ib_uverbs' $R/lib/modprobe.d/peermem-rs.conf"
check "make install DROPIN=1: without the rule depmod takes NVIDIA's in updates/dkms; with it, modprobe nvidia-peermem inserts the drop-in" \
    bash -c "depmod -b $R -C $T/no-depmod.d $KREL && grep '^updates/dkms/nvidia-peermem.ko:' $MD/modules.dep &&
        depmod -b $R -C $R/etc/depmod.d $KREL && grep -c nvidia-peermem $MD/modules.dep | grep -qx 1 &&
        modprobe -n -v --ignore-install -d $R -S $KREL -C $R/lib/modprobe.d nvidia-peermem | tee /dev/stderr |
            grep -q '^insmod $MD/updates/nvidia-peermem.ko'"
check "make uninstall (the drop-in by default): the drop-in and the rule are gone, and nvidia_peermem is NVIDIA's again" \
    bash -c "${INST[*]@Q} uninstall && [ ! -e $MD/updates/nvidia-peermem.ko ] && [ ! -e $R/etc/depmod.d/peermem-rs.conf ] &&
        grep -q '^updates/dkms/nvidia-peermem.ko:' $MD/modules.dep"

# --- peermem-rs-explain on recorded /proc and /sys -------------------------------------------------

EX=$REPO/packaging/peermem-rs-explain
# state DIR: an empty recorded system; then fill DIR/proc/modules, DIR/proc/kallsyms, DIR/dmesg ...
state() {
    rm -rf "$1"
    mkdir -p "$1/proc" "$1/sys/module" "$1/sys/kernel/mm/memory_peers"
    : > "$1/proc/modules"
    : > "$1/proc/kallsyms"
    : > "$1/dmesg"
}
fake_mod() { echo "$2 16384 0 - Live 0x0000000000000000" >> "$1/proc/modules"; mkdir -p "$1/sys/module/$2"; echo "${3:-}" > "$1/sys/module/$2/taint"; }
ksym() { printf '0000000000000000 T %s\t[%s]\n' "$2" "$3" >> "$1/proc/kallsyms"; }
S=$T/explain
state "$S"
fake_mod "$S" nvidia PO
fake_mod "$S" ib_core O
ksym "$S" nvidia_p2p_get_pages nvidia
ksym "$S" ib_register_peer_memory_client ib_core
echo "[  12.5] peermem_rs: module using GPL-only symbols uses symbols nvidia_p2p_get_pages from proprietary module nvidia." > "$S/dmesg"
check "explain: the proprietary driver (taint P of the module exporting nvidia_p2p_*), with what to do" \
    bash -c "PEERMEM_ROOT=$S $EX > $S/out; rc=\$?; cat $S/out; [ \$rc = 1 ] &&
        grep -q '\[proprietary-driver\] .*module nvidia has taint flag P' $S/out && grep -q 'nvidia-peermem' $S/out &&
        ! grep -q 'no-peer-memory-host\|no-nvidia-driver' $S/out"
state "$S"
fake_mod "$S" nvidia O
ksym "$S" nvidia_p2p_get_pages nvidia
echo "[  3.1] peermem_rs: Unknown symbol ib_register_peer_memory_client (err -2)" > "$S/dmesg"
check "explain: no peer-memory host" \
    bash -c "PEERMEM_ROOT=$S $EX > $S/out; cat $S/out;
        grep -q '\[no-peer-memory-host\] .*Unknown symbol ib_register_peer_memory_client' $S/out &&
        ! grep -q 'proprietary-driver' $S/out"
state "$S"
fake_mod "$S" nvidia O
fake_mod "$S" ib_core O
fake_mod "$S" nvidia_peermem O
ksym "$S" nvidia_p2p_get_pages nvidia
ksym "$S" ib_register_peer_memory_client ib_core
mkdir -p "$S/sys/kernel/mm/memory_peers/nv_mem"
check "explain: nvidia_peermem holds the client name" \
    bash -c "PEERMEM_ROOT=$S $EX > $S/out; cat $S/out; grep -q '\[client-name-taken\] NVIDIA.s nvidia_peermem is loaded' $S/out &&
        grep -q 'rmmod nvidia_peermem' $S/out"
state "$S"
fake_mod "$S" nvidia O
fake_mod "$S" ib_core O
ksym "$S" nvidia_p2p_get_pages nvidia
ksym "$S" ib_register_peer_memory_client ib_core
printf '%s\n' "[  3.1] peermem_rs: disagrees about version of symbol ib_register_peer_memory_client" \
    "[  3.1] peermem_rs: Unknown symbol ib_register_peer_memory_client (err -22)" > "$S/dmesg"
mkdir -p "$S/proc/sys/kernel" && echo "$KREL" > "$S/proc/sys/kernel/osrelease"
check "explain: a stale build from make install (CRC mismatch after an OFED upgrade): the provider and the rebuild" \
    bash -c "PEERMEM_ROOT=$S $EX > $S/out; cat $S/out; grep -q '\[stale-build\] .*symbol version mismatch: ib_register_peer_memory_client (from the peer-memory host, MLNX_OFED/DOCA-OFED.s ib_core, loaded as ib_core)' $S/out &&
        grep -qxF '    from the peermem-rs sources: make KDIR=/lib/modules/$KREL/build && make install' $S/out"
mkdir -p "$S/var/lib/dkms/peermem-rs/$VERSION"
printf '%s\n' "[  3.2] peermem_rs: disagrees about version of symbol nvidia_p2p_get_pages" \
    "[  3.2] peermem_rs: Unknown symbol nvidia_p2p_get_pages (err -22)" >> "$S/dmesg"
check "explain: a stale DKMS build (both providers changed): each symbol's provider, and DKMS's rebuild command for this version and kernel" \
    bash -c "PEERMEM_ROOT=$S $EX > $S/out; cat $S/out; grep -q 'mismatch: ib_register_peer_memory_client (from the peer-memory host.*); nvidia_p2p_get_pages (from the NVIDIA driver, loaded as nvidia)' $S/out &&
        grep -qxF '    dkms build --force -m peermem-rs -v $VERSION -k $KREL && dkms install --force -m peermem-rs -v $VERSION -k $KREL' $S/out"
# A later attempt refused for another reason (here the symbol missing: err -2) ends the mismatch.
printf '%s\n' "[  9.0] peermem_rs: Unknown symbol ib_register_peer_memory_client (err -2)" >> "$S/dmesg"
check "explain: an older CRC mismatch, then a refusal for another reason: no stale-build" \
    bash -c "PEERMEM_ROOT=$S $EX > $S/out; cat $S/out; ! grep -q stale-build $S/out"
rm -r "$S/var/lib/dkms" "$S/proc/sys"
fake_mod "$S" peermem_rs O
echo "$VERSION" > "$S/sys/module/peermem_rs/version"
mkdir -p "$S/sys/kernel/mm/memory_peers/nv_mem"
check "explain: peermem_rs loaded: exit 0, version and clients" \
    bash -c "PEERMEM_ROOT=$S $EX > $S/out; rc=\$?; cat $S/out; [ \$rc = 0 ] &&
        grep -q 'peermem_rs $VERSION is loaded; peer-memory clients: nv_mem' $S/out"

# A host without memory_peers (a kernel that does not export mm_kobj): peermem_rs is loaded, but
# applications will not find it; the drop-in is found through /sys/module/nvidia_peermem.
rm -r "$S/sys/kernel/mm/memory_peers"
check "explain: peermem_rs without memory_peers: loaded, but invisible to applications, and what to do" \
    bash -c "PEERMEM_ROOT=$S $EX > $S/out; rc=\$?; cat $S/out; [ \$rc = 0 ] &&
        grep -q 'peermem_rs $VERSION is loaded; peer-memory clients: not shown (this host has no /sys/kernel/mm/memory_peers)' $S/out &&
        grep -q '\[invisible-to-applications\] applications will not find GPUDirect RDMA' $S/out &&
        grep -q 'make dkms-install (the drop-in is the default' $S/out"
state "$S"
rm -r "$S/sys/kernel/mm/memory_peers"
fake_mod "$S" nvidia O
fake_mod "$S" ib_core O
fake_mod "$S" nvidia_peermem O
ksym "$S" nvidia_p2p_get_pages nvidia
ksym "$S" ib_register_peer_memory_client ib_core
echo "$VERSION" > "$S/sys/module/nvidia_peermem/version"
echo "$NV_VERSION" > "$S/sys/module/nvidia/version"
check "explain: the drop-in without memory_peers (told from NVIDIA's by its version): found by applications" \
    bash -c "PEERMEM_ROOT=$S $EX > $S/out; rc=\$?; cat $S/out; [ \$rc = 0 ] &&
        grep -q 'nvidia_peermem (the peermem-rs drop-in) $VERSION is loaded' $S/out &&
        grep -q 'applications: NCCL >= 2.23.4, UCX >= 1.18, NVSHMEM >= 3.3.9 and UCC find GPUDirect RDMA' $S/out &&
        ! grep -q invisible $S/out"
echo "$NV_VERSION" > "$S/sys/module/nvidia_peermem/version"
echo "[  7.2] peermem_rs: nvidia_peermem (NVIDIA's, or peermem-rs built as its drop-in) is loaded and registers the GPU peer-memory client nv_mem: refusing to register a second one" > "$S/dmesg"
check "explain peermem_rs: NVIDIA's nvidia_peermem (the driver's version) holds nv_mem" \
    bash -c "PEERMEM_ROOT=$S $EX peermem_rs > $S/out; rc=\$?; cat $S/out; [ \$rc = 1 ] &&
        grep -q '^peermem_rs is not loaded' $S/out &&
        grep -q '\[client-name-taken\] NVIDIA.s nvidia_peermem is loaded and holds the client name nv_mem' $S/out &&
        grep -q 'rmmod nvidia_peermem' $S/out"

echo "# dkms add+build+install ${dkms_s:-?} s, drop-in install ${dropin_s:-?} s, OFED upgrade with the rebuild ${upgrade_s:-?} s, make install (build included) ${install_s:-?} s"
echo "1..$n"
exit $failed
