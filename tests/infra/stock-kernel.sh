#!/usr/bin/env bash
# A distribution kernel as an operator's node has it, for a VM boot of its own (tests/vm/topology.toml
# [kernels]): a Debian stock kernel as shipped, or the Ubuntu-style kernel built here.
#
#   tests/infra/stock-kernel.sh fetch RELEASE VERSION      (tests/infra/setup-toolchain.sh runs it)
#   tests/infra/stock-kernel.sh build RELEASE VERSION OUT  (tests/run_tests.py, per run)
#   tests/infra/stock-kernel.sh build RELEASE ubuntu OUT   (the same for the Ubuntu-style kernel)
#   PEERMEM_KERNEL_FLAVOUR=F tests/infra/stock-kernel.sh build RELEASE built OUT
#                                                          (the same for a kernel built here, Linux
#                                                          6.12 LTS: build-kernel.sh's flavour F)
#
# fetch: `apt-get download` (the build root's own apt configuration; nothing is installed, the host's
#   apt sources are untouched) of the kernel's Debian packages of exactly VERSION into
#   $CACHE_WORK/debs/stock-RELEASE: linux-binary (the image QEMU boots, unpacked to
#   $CACHE_WORK/stock/RELEASE/binary), linux-modules, linux-headers, its -common, linux-kbuild,
#   linux-base, the linux-source of that version (for the Rust metadata) and the two packages the
#   headers depend on that the build root lacks (linux-base, gcc-14-for-host, cpp-14-for-host).
#
# build: into OUT, what the boot needs:
#   OUT/modules/        the stand-ins, NVIDIA's nvidia-peermem 550 (the reference) and the
#                       proprietary stub, built against the kernel's headers with the compiler its
#                       headers name (.kernelvariables: Debian's gcc-14), in the build root;
#                       peermem_rs.ko links to the DKMS-installed module below; dropin/ holds the
#                       drop-in as `make dkms-install` installs it by default, before peermem_rs
#                       (`make dkms-install DROPIN=0`) replaced it
#   OUT/rootfs/lib/modules/RELEASE/   what the guest gets as its /lib/modules: the module tree after
#                       an operator's `apt install` of the kernel's headers and modules packages and
#                       `make dkms-install` (Debian's dkms add/build/install): updates/dkms/peermem_rs.ko,
#                       the stand-ins in extra/ (where nvidia.ko and MLNX_OFED's ib_core would be),
#                       and the modules.* indexes depmod wrote. Debian's own .ko files are left out
#                       (the guest loads none of them: its drivers are built in).
#   The install runs in an overlay over the build root ($CACHE_WORK/stock/RELEASE/overlay, made
#   afresh each time; in-root's IN_ROOT_OVERLAY): installing a kernel's headers, its modules and
#   DKMS's state into the build root itself would change it under the test kernel's builds and
#   under other runs using it at the same time.
#   DKMS regenerates the kernel's missing Rust metadata with packaging/rust-metadata.sh into
#   /var/cache/peermem-rs/rust-metadata, which is $CACHE_WORK/rust-metadata here: built once per
#   kernel (the script keys it on the headers' version, config and tools), then only re-verified.
#
# VERSION "ubuntu": the kernel is tests/infra/build-kernel.sh's PEERMEM_KERNEL_FLAVOUR=ubuntu build
# (Linux 7.3 configured as Ubuntu configures its Rust kernels: CONFIG_MODVERSIONS with gendwarfksyms,
# built with GCC, release RELEASE), and step 1 installs what Ubuntu's linux-headers-RELEASE,
# linux-headers-ABI (the common part) and linux-lib-rust-RELEASE packages install, laid out the way
# Ubuntu's debian/rules.d/2-binary-arch.mk and debian/scripts/link-lib-rust lay them out
# (docs/building.md): /usr/src/linux-headers-RELEASE with the flavour's .config, Module.symvers,
# generated headers and built scripts, links into /usr/src/linux-headers-ABI for the rest, and
# rust -> ../linux-lib-rust-RELEASE/rust, the kernel crate's metadata. The Rust compiler is then
# found only under Ubuntu's versioned name (rustc-1.NN, bindgen-0.NN), as on such a node. Its
# extras, for the symbol-version tests (tests/selftests/packaging/crc_mismatch.sh):
#   OUT/modules/packaging/ofed-next/peer_mem_host.ko   the peer-memory host of "the next OFED": the
#                       same API declared with another name for a type (invalidate_peer_memory's u64
#                       as unsigned long long), so that ib_register_peer_memory_client has another
#                       CRC (an OFED upgrade that peermem-rs was not rebuilt for)
#   OUT/modules/packaging/ofed-next/peermem_rs.ko      peermem-rs as the rebuild command
#                       peermem-rs-explain names (dkms build --force) builds it after that upgrade
#
# VERSION "built": the kernel is tests/infra/build-kernel.sh's PEERMEM_KERNEL_FLAVOUR build (Linux
# 6.12 LTS with the test kernel's debug options, built with clang), installed as an operator who
# builds a kernel installs it: `make modules_install`, which leaves /lib/modules/RELEASE/build
# linked to the build tree, where the kernel crate's metadata (rust/) already is. Every module
# build for it passes the clang it was built with (LLVM=-19); DKMS's gets it from configure.sh.
source "$(dirname "$0")/common.sh"
need_root

cmd=${1:-}
REL=${2:?usage: $0 fetch|build RELEASE VERSION [OUT]}
VER=${3:?usage: $0 fetch|build RELEASE VERSION [OUT]}
ABI=${REL%-*}                                   # 7.3.4+deb13, Ubuntu's 7.3.4-1
SERIES=$(echo "${VER%%-*}" | cut -d. -f1,2)     # 7.3
KIND=debian
[ "$VER" = ubuntu ] && KIND=ubuntu
[ "$VER" = built ] && KIND=built
# What every make of a module for the kernel gets: a kernel built here with clang needs the same
# clang; the others' headers name their compiler (Debian's .kernelvariables) or use the default gcc.
KMAKE_CC=
[ "$KIND" = built ] && KMAKE_CC=LLVM=$LLVM_SUFFIX
DEBS=$CACHE_WORK/debs/stock-$REL
S=$CACHE_WORK/stock/$REL
IN_ROOT=$REPO_ROOT/tests/infra/in-root
# The packages of exactly VERSION, and the dependencies of the headers the build root lacks (taken
# at the build root's candidate version). linux-kbuild depends on pahole, which the build root does
# not have (a root debootstrapped on 2026-12-03 lacked it and dpkg left the headers unconfigured);
# pahole brings libdw1t64, the one of its libraries the root lacks.
PKGS=(linux-binary-$REL linux-modules-$REL linux-headers-$REL linux-headers-$ABI-common
      linux-kbuild-$ABI linux-base-$REL linux-source-$SERIES)
DEPS=(linux-base gcc-14-for-host cpp-14-for-host pahole libdw1t64)

fetch() {
    local stamp=$S/.fetched
    local want="$VER ${PKGS[*]} ${DEPS[*]}"
    [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] && return 0
    log "fetching Debian's $REL ($VER) packages into $DEBS"
    mkdir -p "$DEBS" "$S"
    # Packages already in the cache (the test kernel's linux-source may be the same version): no
    # second download.
    local p f
    for p in "${PKGS[@]}"; do
        for f in "$CACHE_WORK/debs/${p}_${VER}_"*.deb; do
            [ -f "$f" ] && ln -f "$f" "$DEBS/"
        done
    done
    "$IN_ROOT" bash -c '
        set -e; cd "$1"; ver=$2; shift 2
        for p in "$@"; do
            [ "$p" = -- ] && { ver=; continue; }
            ls "${p}_"*.deb >/dev/null 2>&1 && continue
            apt-get download -qq -o APT::Sandbox::User=root "$p${ver:+=$ver}" ||
                { echo "cannot download $p${ver:+=$ver}: is it still in the archive?" >&2; exit 1; }
        done' fetch "$DEBS" "$VER" "${PKGS[@]}" -- "${DEPS[@]}" || die "fetching $REL failed"
    rm -rf "$S/binary"
    dpkg-deb -x "$DEBS/linux-binary-${REL}_${VER}_amd64.deb" "$S/binary"
    [ -f "$S/binary/usr/lib/modules/$REL/vmlinuz" ] || die "no /usr/lib/modules/$REL/vmlinuz in linux-binary-$REL"
    echo "$want" > "$stamp"
}

# ubuntu_packages: the Ubuntu-style kernel (built once, cached) and, in $S/pkgs, what its packages
# would install: linux-headers-REL, linux-headers-ABI, linux-lib-rust-REL and linux-modules-REL
# (the module tree); its image in $S/binary,
# where the VM looks for a stock kernel's image. Laid out again only when the kernel changed.
ubuntu_packages() {
    local kdir ksrc
    kdir=$(PEERMEM_KERNEL_FLAVOUR=ubuntu "$REPO_ROOT/tests/infra/build-kernel.sh") ||
        die "building the Ubuntu-style kernel failed"
    ksrc=$(readlink -f "$kdir/source")
    [ "$(cat "$kdir/include/config/kernel.release")" = "$REL" ] ||
        die "the Ubuntu-style kernel is $(cat "$kdir/include/config/kernel.release"), not $REL (tests/vm/ubuntu.config and topology.toml disagree)"
    [ "$(cat "$S/.packaged" 2>/dev/null)" = "$kdir" ] && return 0
    log "$REL: laying out linux-headers-$REL, linux-headers-$ABI and linux-lib-rust-$REL from $kdir"
    rm -rf "$S/pkgs" "$S/binary" "$S/.packaged"
    mkdir -p "$S/pkgs" "$S/binary/usr/lib/modules/$REL"
    cp "$kdir/arch/x86/boot/bzImage" "$S/binary/usr/lib/modules/$REL/vmlinuz"
    "$IN_ROOT" bash -c '
        set -euo pipefail
        kdir=$1; ksrc=$2; rel=$3; abi=$4; p=$5
        # The external-module tree of the kernel itself (what its deb packaging puts in
        # linux-headers), as one tree.
        make -s -C "$ksrc" O="$kdir" CC=gcc HOSTCC=gcc run-command \
            KBUILD_RUN_COMMAND="$ksrc/scripts/package/install-extmod-build $p/all"
        # Split as Ubuntu splits it: the flavour package keeps what the build made (.config,
        # Module.symvers, include/config, the generated headers, the built scripts and tools); the
        # rest is the common package, linked into the flavour tree entry by entry.
        f=$p/usr/src/linux-headers-$rel; c=$p/usr/src/linux-headers-$abi; l=$p/usr/src/linux-lib-rust-$rel
        mkdir -p "$p/usr/src" "$f/include" "$f/arch/x86/include" "$l"
        mv "$p/all" "$c"
        mv "$c/Module.symvers" "$c/scripts" "$f/"
        [ ! -d "$c/tools" ] || mv "$c/tools" "$f/"
        mv "$c/include/config" "$c/include/generated" "$f/include/"
        mv "$c/arch/x86/include/generated" "$f/arch/x86/include/"
        cp "$kdir/.config" "$f/.config"
        # link_into COMMON FLAVOUR UP REL: every entry of COMMON that FLAVOUR lacks becomes a
        # relative link (UP: the way up to /usr/src; REL: COMMON below the common tree).
        link_into() {
            local e n
            for e in "$1"/* "$1"/.[!.]*; do
                [ -e "$e" ] || [ -L "$e" ] || continue
                n=${e##*/}
                if [ -d "$2/$n" ] && [ ! -L "$2/$n" ]; then
                    link_into "$e" "$2/$n" "../$3" "$4$n/"
                elif [ ! -e "$2/$n" ]; then
                    ln -s "$3linux-headers-$abi/$4$n" "$2/$n"
                fi
            done
        }
        link_into "$c" "$f" "../" ""
        # linux-lib-rust: the kernel crate and its dependencies as the build left them in rust/,
        # without the .cmd files and with libmacros.so stripped, as the packaging does; the flavour
        # tree links to it (debian/scripts/link-lib-rust).
        cp -a "$kdir/rust" "$l/rust"
        find "$l/rust" -name ".*.cmd" -delete
        strip -s "$l/rust/libmacros.so"
        ln -s "../linux-lib-rust-$rel/rust" "$f/rust"
        # linux-modules-REL: the module tree of the kernel (its drivers are built in: the indexes
        # and modules.builtin), which DKMS needs to run depmod at all.
        make -s -C "$ksrc" O="$kdir" CC=gcc HOSTCC=gcc INSTALL_MOD_PATH="$p/usr" modules_install
        [ -f "$p/usr/lib/modules/$rel/modules.dep" ] || { echo "modules_install wrote no modules.dep" >&2; exit 1; }
        ln -sfn "/usr/src/linux-headers-$rel" "$p/usr/lib/modules/$rel/build"
    ' ubuntu-packages "$kdir" "$ksrc" "$REL" "$ABI" "$S/pkgs" >&2 || die "laying out the packages of $REL failed"
    echo "$kdir" > "$S/.packaged"
}

# built_kernel: the kernel of build-kernel.sh's PEERMEM_KERNEL_FLAVOUR (built once, cached); sets
# BUILT_KDIR, and checks that its release is RELEASE.
built_kernel() {
    [ -n "${PEERMEM_KERNEL_FLAVOUR:-}" ] || die "version built needs PEERMEM_KERNEL_FLAVOUR (tests/infra/build-kernel.sh)"
    BUILT_KDIR=$("$REPO_ROOT/tests/infra/build-kernel.sh") || die "building the $PEERMEM_KERNEL_FLAVOUR kernel failed"
    mkdir -p "$S"
    [ "$(cat "$BUILT_KDIR/include/config/kernel.release")" = "$REL" ] ||
        die "the $PEERMEM_KERNEL_FLAVOUR kernel is $(cat "$BUILT_KDIR/include/config/kernel.release"), not $REL"
}

build() {
    local out=${1:?usage: $0 build RELEASE VERSION OUT}
    case $KIND in
        ubuntu) ubuntu_packages ;;
        built) built_kernel ;;
        *) fetch ;;
    esac
    local kdir=/usr/src/linux-headers-$REL
    [ "$KIND" = built ] && kdir=/lib/modules/$REL/build
    local nv_open=$CACHE_WORK/src/nvidia-open-kernel-source/modules/nvidia-open-kernel
    local inc=$REPO_ROOT/tests/standins/include
    local version
    version=$(sed -n '/^\[workspace\.package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' "$REPO_ROOT/Cargo.toml")
    rm -rf "$out"
    mkdir -p "$out/modules/dropin" "$out/modules/packaging/dkms" "$out/build"
    # One overlay root per kernel, made afresh; one run at a time uses it. Every in-root call below
    # runs in it.
    exec 8>"$CACHE_WORK/stock/$REL.lock"
    flock 8
    rm -rf "$S/overlay"
    export IN_ROOT_OVERLAY=$S/overlay
    local start=$SECONDS

    # 1. As an operator: apt install linux-headers-REL (with -common, linux-kbuild, linux-base) and
    #    linux-modules-REL. linux-image-REL itself is not installed: it only adds an initramfs
    #    generator and the image, and the VM boots the image with busybox instead.
    #    Ubuntu-style: linux-headers-REL, its common linux-headers-ABI and linux-lib-rust-REL, and
    #    the Rust tools only under the names Ubuntu's versioned packages give them (rustc-1.NN,
    #    bindgen-0.NN): the build must find those, as on an Ubuntu node.
    if [ "$KIND" = ubuntu ]; then
        log "$REL: installing Ubuntu's linux-headers, linux-lib-rust and linux-modules layout, in an overlay root"
        "$IN_ROOT" bash -c '
            set -euo pipefail
            rel=$1; p=$2
            cp -a "$p/usr/." /usr/
            [ -f "/lib/modules/$rel/build/Makefile" ] && [ -f "/lib/modules/$rel/build/rust/libkernel.rmeta" ] ||
                { echo "no /lib/modules/$rel/build (with rust/libkernel.rmeta) after installing the layout" >&2; exit 1; }
            rv=$(rustc --version | awk "{ print \$2 }" | cut -d. -f1,2)
            bv=$(bindgen --version | awk "{ print \$2 }" | cut -d. -f1,2)
            mv /usr/bin/rustc "/usr/bin/rustc-$rv"
            mv /usr/bin/bindgen "/usr/bin/bindgen-$bv"
            ! command -v rustc >/dev/null && ! command -v bindgen >/dev/null
            grep -E "^CONFIG_(CC_VERSION_TEXT|MODVERSIONS|GENDWARFKSYMS|EXTENDED_MODVERSIONS|RUSTC_VERSION_TEXT)=" "/lib/modules/$rel/build/.config" >&2
            echo "rust: $(readlink "/lib/modules/$rel/build/rust"); compilers: rustc-$rv, bindgen-$bv" >&2
        ' ubuntu-install "$REL" "$S/pkgs" >&2 || die "installing the layout of $REL failed"
    elif [ "$KIND" = built ]; then
        log "$REL: make modules_install of the kernel built in $BUILT_KDIR, in an overlay root"
        "$IN_ROOT" bash -c '
            set -euo pipefail
            kdir=$1; rel=$2; cc=$3
            make -s -C "$kdir" $cc modules_install
            [ "$(readlink -f "/lib/modules/$rel/build")" = "$kdir" ] ||
                { echo "modules_install left no /lib/modules/$rel/build link to $kdir" >&2; exit 1; }
            [ -f "/lib/modules/$rel/modules.dep" ] && [ -f "/lib/modules/$rel/build/rust/libkernel.rmeta" ] ||
                { echo "no modules.dep or rust/libkernel.rmeta for $rel after modules_install" >&2; exit 1; }
            grep -E "^CONFIG_(CC_VERSION_TEXT|RUSTC_VERSION_TEXT|MODVERSIONS|KASAN)=" "/lib/modules/$rel/build/.config" >&2
        ' built-install "$BUILT_KDIR" "$REL" "$KMAKE_CC" >&2 || die "installing the modules of $REL failed"
    else
        log "$REL: apt install of its headers and modules packages, in an overlay root"
        "$IN_ROOT" bash -c '
            set -euo pipefail
            rel=$1; ver=$2; debs=$3
            export DEBIAN_FRONTEND=noninteractive
            # dpkg -i of the fetched packages: what apt install does, without apt preferring to fetch
            # the same versions from the archive again.
            dpkg -i \
                "$debs"/linux-headers-*_"$ver"_*.deb "$debs"/linux-kbuild-*_"$ver"_*.deb \
                "$debs"/linux-base-"$rel"_*.deb "$debs"/linux-modules-*_"$ver"_*.deb \
                "$debs"/linux-base_*.deb "$debs"/gcc-14-for-host_*.deb "$debs"/cpp-14-for-host_*.deb \
                "$debs"/pahole_*.deb "$debs"/libdw1t64_*.deb >/dev/null
            [ -f "/lib/modules/$rel/build/Makefile" ] || { echo "no /lib/modules/$rel/build after installing the headers" >&2; exit 1; }
            grep CONFIG_CC_VERSION_TEXT "/lib/modules/$rel/build/.config" >&2
        ' stock-apt "$REL" "$VER" "$DEBS" >&2 || die "installing the packages of $REL failed"
    fi

    # 2. The test modules, against the installed headers, with the compiler they name
    #    (.kernelvariables: Debian's gcc-14). In a copy: the stand-ins' own directories hold the
    #    test kernel's build. Each is built against the symbols of those before it, in the
    #    Makefile's order.
    log "$REL: building the stand-ins, NVIDIA's nvidia-peermem and the proprietary stub against its headers"
    cp -r "$REPO_ROOT/tests/standins" "$out/build/standins"
    cp -r "$REPO_ROOT/tests/packaging/proprietary_nvidia" "$out/build/proprietary_nvidia"
    local standins
    standins=$(sed -n 's/^STANDINS := //p' "$REPO_ROOT/Makefile")
    "$IN_ROOT" bash -c '
        set -e; kdir=$1; b=$2; inc=$3; nv=$4; cc=$5; shift 5
        syms=""
        for s in "$@"; do
            [ -f "$b/standins/$s/Kbuild" ] || continue
            make -s -C "$kdir" $cc M="$b/standins/$s" PEER_MEM_INC="$inc" NVIDIA_SRC="$nv" KBUILD_EXTRA_SYMBOLS="$syms" modules
            syms="$syms $b/standins/$s/Module.symvers"
        done
        make -s -C "$kdir" $cc M="$b/proprietary_nvidia" NVIDIA_SRC="$nv" modules
    ' stock-standins "$kdir" "$out/build" "$inc" "$nv_open/nvidia" "$KMAKE_CC" $standins >&2 ||
        die "building the stand-ins for $REL failed"
    cp "$out"/build/standins/*/*.ko "$out/modules/"
    cp "$out/build/proprietary_nvidia/nvidia.ko" "$out/modules/packaging/nvidia.ko"
    if [ "$KIND" = ubuntu ]; then
        # The next OFED: the same API, declared with another type name for the same type
        # (unsigned long long for u64), which changes nothing of the ABI and everything of the
        # symbol version gendwarfksyms computes from the DWARF types of ib_register_peer_memory_client.
        local next=$out/build/ofed-next
        mkdir -p "$next" "$out/modules/packaging/ofed-next"
        cp -r "$inc" "$next/include"
        cp -r "$REPO_ROOT/tests/standins/peer_mem_host" "$next/peer_mem_host"
        cp -r "$REPO_ROOT/tests/standins/common" "$next/common"  # the race engine pmh_race.c includes
        sed -i 's/^\(typedef int (\*invalidate_peer_memory)(void \*reg_handle, \)u64 core_context);$/\1unsigned long long core_context);/' \
            "$next/include/rdma/peer_mem.h"
        grep -q 'invalidate_peer_memory)(void \*reg_handle, unsigned long long core_context);' "$next/include/rdma/peer_mem.h" ||
            die "the invalidate_peer_memory declaration in tests/standins/include/rdma/peer_mem.h changed: update the next OFED here"
        "$IN_ROOT" make -s -C "$kdir" M="$next/peer_mem_host" PEER_MEM_INC="$next/include" \
            KBUILD_EXTRA_SYMBOLS="$out/build/standins/nvidia_p2p/Module.symvers" modules >&2 ||
            die "building the next OFED's host for $REL failed"
        local crc_old crc_new
        crc_old=$(awk '$2 == "ib_register_peer_memory_client" { print $1 }' "$out/build/standins/peer_mem_host/Module.symvers")
        crc_new=$(awk '$2 == "ib_register_peer_memory_client" { print $1 }' "$next/peer_mem_host/Module.symvers")
        log "$REL: ib_register_peer_memory_client has CRC $crc_old in the host stand-in, $crc_new in the next OFED"
        [ -n "$crc_old" ] && [ "$crc_old" != 0x00000000 ] && [ -n "$crc_new" ] && [ "$crc_old" != "$crc_new" ] ||
            die "the next OFED's ib_register_peer_memory_client must carry another, non-zero CRC ($crc_old, $crc_new)"
        cp "$next/peer_mem_host/peer_mem_host.ko" "$out/modules/packaging/ofed-next/"
    fi
    "$REPO_ROOT/tests/reference/build-nvidia-peermem.sh" --kdir "$kdir" ${KMAKE_CC:+--make-arg "$KMAKE_CC"} \
        --standins "$out/build/standins" --out "$out/build/reference" "$out/modules" >/dev/null

    # 3. The NVIDIA driver and MLNX_OFED as their packages lay them out: the open-module source in
    #    /usr/src/nvidia-<version> with the DKMS tree of its build, the OFED kernel headers in
    #    /usr/src/ofa_kernel/<release>; their modules (the stand-ins, built for this kernel) in
    #    /lib/modules/<release>/extra, so that depmod links peermem_rs to them. Then make
    #    dkms-install from the checkout, for that kernel: first the drop-in (kept for the drop-in
    #    tests), then peermem_rs, which makes DKMS remove the drop-in (the Makefile switches module
    #    names that way): the tree ends with peermem_rs only. DKMS regenerates the Rust metadata into
    #    /var/cache/peermem-rs/rust-metadata (dkms.conf), which is linked to the cache here.
    log "$REL: make dkms-install (Debian's dkms add, build, install) in the overlay root"
    # The driver version of the NVIDIA tree, as build-nvidia-peermem.sh reads it.
    local nvver
    nvver=$(sed -n 's/.*-DNV_VERSION_STRING=\\"\([^\\"]*\)\\".*/\1/p' "$nv_open/Kbuild" | head -n1)
    [ -n "$nvver" ] || die "no NV_VERSION_STRING in $nv_open/Kbuild"
    "$IN_ROOT" bash -c '
        set -euo pipefail
        rel=$1; ver=$2; debs=$3; b=$4; nv_open=$5; inc=$6; cache=$7; repo=$8; nvver=$9; kind=${10}; version=${11}
        export DEBIAN_FRONTEND=noninteractive
        # The cache side first: on a cold cache the link would dangle, and the mkdir -p of it in
        # the module build fails with "File exists".
        mkdir -p /var/cache/peermem-rs "$cache/rust-metadata"
        ln -sfn "$cache/rust-metadata" /var/cache/peermem-rs/rust-metadata
        # The kernel source, only when the cache has no tree for this kernel yet (else not read);
        # an Ubuntu kernel has its metadata packaged (linux-lib-rust).
        if [ "$kind" = debian ] && [ ! -e "$cache/rust-metadata/$rel/build/rust/libkernel.rmeta" ]; then
            dpkg -i "$debs"/linux-source-*_"$ver"_all.deb >/dev/null
        fi
        . "$repo/tests/packaging/node_layout.sh"
        layout_nvidia_src "" "$nv_open" "$nvver"
        layout_nvidia_dkms "" "$nvver" "$b/standins/nvidia_p2p/Module.symvers"
        layout_ofed /usr/src/ofa_kernel/$rel "$inc/rdma/peer_mem.h" "$b/standins/peer_mem_host/Module.symvers"
        mkdir -p "/lib/modules/$rel/extra"
        cp "$b"/standins/*/*.ko "/lib/modules/$rel/extra/"
        cd "$repo"
        dkms_install() {
            make -s dkms-install KDIR=/lib/modules/$rel/build "$@" >&2 || {
                cat /var/lib/dkms/peermem-rs/*/"$rel"/*/log/make.log >&2 2>/dev/null || true; return 1; }
        }
        dkms_install                # the default: the drop-in
        mkdir -p "$b/dropin"
        for f in /lib/modules/$rel/updates/dkms/nvidia-peermem.ko*; do
            case $f in *.xz) xz -dc "$f" ;; *.zst) zstd -dcq "$f" ;; *) cat "$f" ;; esac > "$b/dropin/nvidia-peermem.ko"
        done
        dkms_install DROPIN=0
        dkms status -m peermem-rs >&2
        if [ "$kind" = ubuntu ]; then
            # The OFED upgrade peermem-rs was not rebuilt for: the next headers and Module.symvers
            # in its place, then the rebuild peermem-rs-explain names for it. Built, not installed:
            # the tree keeps the module of the old OFED, which the boot loads against the new host.
            layout_ofed /usr/src/ofa_kernel/$rel "$b/ofed-next/include/rdma/peer_mem.h" \
                "$b/ofed-next/peer_mem_host/Module.symvers"
            dkms build --force -m peermem-rs -v "$version" -k "$rel" >&2 || {
                cat /var/lib/dkms/peermem-rs/*/"$rel"/*/log/make.log >&2 2>/dev/null || true; exit 1; }
            for f in /var/lib/dkms/peermem-rs/"$version/$rel"/*/module/peermem_rs.ko*; do
                case $f in *.xz) xz -dc "$f" ;; *.zst) zstd -dcq "$f" ;; *) cat "$f" ;; esac > "$b/ofed-next/peermem_rs.ko"
            done
        fi
    ' stock-dkms "$REL" "$VER" "$DEBS" "$out/build" "$nv_open" "$inc" "$CACHE_WORK" "$REPO_ROOT" "$nvver" "$KIND" "$version" ||
        die "installing peermem-rs with DKMS for $REL failed"
    log "$REL: headers, test modules and DKMS install done in $((SECONDS - start)) s"

    local mods=$S/overlay/upper/usr/lib/modules/$REL
    local ko
    ko=$(cd "$mods" && ls updates/dkms/peermem_rs.ko* 2>/dev/null | head -n1)
    [ -n "$ko" ] || die "DKMS left no updates/dkms/peermem_rs.ko in /lib/modules/$REL"
    mkdir -p "$out/rootfs/lib/modules/$REL"
    (cd "$mods" && cp -a modules.* updates extra "$out/rootfs/lib/modules/$REL/")
    ln -s "/lib/modules/$REL/$ko" "$out/modules/peermem_rs.ko"
    ln -s "/lib/modules/$REL/$ko" "$out/modules/packaging/dkms/peermem_rs.ko"
    [ -s "$out/build/dropin/nvidia-peermem.ko" ] || die "DKMS installed no drop-in nvidia-peermem.ko"
    cp "$out/build/dropin/nvidia-peermem.ko" "$out/modules/dropin/"
    cp "$out/build/dropin/nvidia-peermem.ko" "$out/modules/packaging/dkms/nvidia-peermem.ko"
    echo "$version" > "$out/modules/packaging/VERSION"
    # What DKMS keeps of the module on the node (peermem-rs-explain reads the version from it).
    mkdir -p "$out/rootfs/var/lib/dkms/peermem-rs/$version"
    if [ "$KIND" = ubuntu ]; then
        [ -s "$out/build/ofed-next/peermem_rs.ko" ] || die "dkms build --force left no peermem_rs.ko for the next OFED"
        cp "$out/build/ofed-next/peermem_rs.ko" "$out/modules/packaging/ofed-next/"
    fi
}

case $cmd in
    fetch) [ "$KIND" = debian ] || die "the $REL kernel is built here, not fetched"; fetch ;;
    build) build "${4:-}" ;;
    *) die "usage: $0 fetch|build RELEASE VERSION [OUT]" ;;
esac
