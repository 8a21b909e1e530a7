#!/usr/bin/env bash
# Compile peermem-rs against Linux 6.12 LTS, the oldest kernel src/kapi.rs covers. A build check
# only: nothing boots it (not part of make check).
#
#   tests/infra/build-6.12.sh [make arguments, e.g. PEERMEM_DROPIN=1 or CLIPPY=1]
#
# Debian's linux-source-6.12 (fetched with apt-get download inside the build root, unpacked in the
# cache), prepared once in $CACHE_WORK/kernel-6.12-prep: tinyconfig plus what the module needs
# (64BIT, MODULES, MODULE_UNLOAD, RUST, PCI, DEBUG_FS; MODVERSIONS off, as 6.12 requires for Rust),
# then modules_prepare, which builds the kernel crate. The module is then built against it with the
# NVIDIA 550 headers and the peer-memory stand-in's header the test build uses. modules_prepare
# writes no Module.symvers for vmlinux, so modpost only warns about every import
# (KBUILD_MODPOST_WARN=1): that they exist is what the 7.x boots check.
source "$(dirname "$0")/common.sh"
need_root

IN_ROOT=$REPO_ROOT/tests/infra/in-root
SRC_PKG=$CACHE_WORK/src/linux-source-6.12
KSRC=$SRC_PKG/linux-source-6.12
O=$CACHE_WORK/kernel-6.12-prep
NVIDIA_SRC=$CACHE_WORK/src/nvidia-open-kernel-source/modules/nvidia-open-kernel/nvidia
[ -f "$NVIDIA_SRC/nv-p2p.h" ] || die "no NVIDIA 550 headers at $NVIDIA_SRC; run tests/infra/setup-toolchain.sh"

if [ ! -f "$KSRC/Makefile" ]; then
    mkdir -p "$CACHE_WORK/debs" "$SRC_PKG"
    deb=$(ls "$CACHE_WORK"/debs/linux-source-6.12_*_all.deb 2>/dev/null | tail -n1 || true)
    if [ -z "$deb" ]; then
        log "fetching linux-source-6.12"
        "$IN_ROOT" bash -c "cd '$CACHE_WORK/debs' && apt-get download -o APT::Sandbox::User=root linux-source-6.12"
        deb=$(ls "$CACHE_WORK"/debs/linux-source-6.12_*_all.deb | tail -n1)
    fi
    log "unpacking $(basename "$deb")"
    tmp=$SRC_PKG/pkg
    rm -rf "$tmp"
    dpkg-deb -x "$deb" "$tmp"
    tar -xf "$tmp"/usr/src/linux-source-6.12.tar.* -C "$SRC_PKG"
    rm -rf "$tmp"
fi

if [ ! -f "$O/.peermem-prepared" ]; then
    mkdir -p "$CACHE_WORK/kernel" "$O"
    frag=$O/peermem.config
    printf '%s\n' CONFIG_64BIT=y CONFIG_MODULES=y CONFIG_MODULE_UNLOAD=y CONFIG_MODVERSIONS=n \
        CONFIG_RUST=y CONFIG_PCI=y CONFIG_DEBUG_FS=y > "$frag"
    log "preparing Linux 6.12 in $O (modules_prepare builds the kernel crate: a few minutes)"
    # One kernel build at a time, as tests/infra/build-kernel.sh.
    "$IN_ROOT" flock "$CACHE_WORK/kernel/.lock" bash -c "
        set -e
        make -s -C '$KSRC' O='$O' LLVM=$LLVM_SUFFIX tinyconfig
        '$KSRC/scripts/kconfig/merge_config.sh' -m -O '$O' '$O/.config' '$frag' >/dev/null
        make -s -C '$KSRC' O='$O' LLVM=$LLVM_SUFFIX olddefconfig
        make -s -C '$KSRC' O='$O' LLVM=$LLVM_SUFFIX rustavailable
        make -s -C '$KSRC' O='$O' LLVM=$LLVM_SUFFIX -j3 modules_prepare"
    for c in 64BIT MODULES MODULE_UNLOAD RUST PCI DEBUG_FS; do
        grep -qx "CONFIG_$c=y" "$O/.config" || die "CONFIG_$c did not stay set in $O/.config"
    done
    touch "$O/.peermem-prepared"
fi

"$IN_ROOT" make -C "$O" LLVM=$LLVM_SUFFIX M="$REPO_ROOT" NVIDIA_SRC="$NVIDIA_SRC" \
    PEER_MEM_INC="$REPO_ROOT/tests/standins/include" KBUILD_MODPOST_WARN=1 "$@" modules
