#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Builds peermem_rs.ko against the nv-p2p.h of every NVIDIA source package in the cache (550 open,
# 535 and 470 tesla) and against a header too old for it, and prints KTAP. What each build must
# show: 550 and 535 use the persistent-pin API (the .ko references nvidia_p2p_get_pages_persistent);
# 470 has no such API and builds without it; a header lacking the DMA-mapping API is refused at
# build time with a message naming what is missing.
#
# Each build runs in a private copy of the module's sources under .build/, so it cannot disturb the
# main build.
source "$(dirname "$0")/../infra/common.sh"

KDIR=$("$REPO_ROOT/tests/infra/build-kernel.sh")
SRC=$CACHE_WORK/src
WORK=$REPO_ROOT/.build/nv-headers
SYMVERS="$REPO_ROOT/tests/standins/nvidia_p2p/Module.symvers $REPO_ROOT/tests/standins/peer_mem_host/Module.symvers"
for f in $SYMVERS; do [ -f "$f" ] || die "no $f: run make standins first"; done

rm -rf "$WORK"
mkdir -p "$WORK"

# build NAME NVIDIA_SRC: prints the build's log into $WORK/NAME.log, returns make's status.
build() {
    local name=$1 nv=$2 dir=$WORK/$1
    mkdir -p "$dir"
    cp -r "$REPO_ROOT/Kbuild" "$REPO_ROOT/Cargo.toml" "$REPO_ROOT/src" "$REPO_ROOT/bindings" "$dir/"
    rm -f "$dir/bindings/generated.rs"
    "$REPO_ROOT/tests/infra/in-root" make -C "$KDIR" LLVM="$LLVM_SUFFIX" M="$dir" NVIDIA_SRC="$nv" \
        PEER_MEM_INC="$REPO_ROOT/tests/standins/include" KBUILD_EXTRA_SYMBOLS="$SYMVERS" modules \
        >"$WORK/$name.log" 2>&1
}

# (nm's output is taken whole first: with pipefail, grep -q quitting at the first match could
# fail the pipeline on nm's SIGPIPE, depending on timing.)
uses_persistent() {
    local undefined
    undefined=$("$REPO_ROOT/tests/infra/in-root" nm -u "$WORK/$1/peermem_rs.ko")
    grep -qw nvidia_p2p_get_pages_persistent <<< "$undefined"
}

n=0
ok() { n=$((n + 1)); echo "ok $n $1"; }
notok() { n=$((n + 1)); echo "not ok $n $1"; sed 's/^/# /' "$WORK/$2.log" | tail -15; }

echo "TAP version 13"
echo "1..7"
for entry in "550-open nvidia-open-kernel-source/modules/nvidia-open-kernel yes" \
             "535-tesla nvidia-tesla-535-kernel-source/modules/nvidia-tesla-535-kernel yes" \
             "470-tesla nvidia-tesla-470-kernel-source/modules/nvidia-tesla-470-kernel no"; do
    read -r name dir persistent <<< "$entry"
    nv=$SRC/$dir/nvidia
    if build "$name" "$nv" && [ -f "$WORK/$name/peermem_rs.ko" ]; then
        ok "builds against the nv-p2p.h of $name ($(cat "$SRC/${dir%%/*}/.version"))"
    else
        notok "builds against the nv-p2p.h of $name" "$name"
        n=$((n + 1)); echo "not ok $n $name: persistent API use # not built"
        continue
    fi
    if [ "$persistent" = yes ] && uses_persistent "$name"; then
        ok "$name: the header has the persistent API and the module uses it"
    elif [ "$persistent" = no ] && ! uses_persistent "$name"; then
        ok "$name: the header has no persistent API and the module does without it"
    else
        notok "$name: persistent API use does not follow the header" "$name"
    fi
done

# A header from before the DMA-mapping API: the 550 header without nvidia_p2p_dma_map_pages.
old=$WORK/too-old/nvidia
mkdir -p "$old"
sed '/nvidia_p2p_dma_map_pages/,/;/d' "$SRC/nvidia-open-kernel-source/modules/nvidia-open-kernel/nvidia/nv-p2p.h" > "$old/nv-p2p.h"
if ! build too-old-build "$old" && grep -q "lacks .*nvidia_p2p_dma_map_pages.*too old for peermem-rs" "$WORK/too-old-build.log"; then
    ok "a header without the DMA-mapping API is refused, naming what is missing"
else
    notok "a header without the DMA-mapping API is refused, naming what is missing" too-old-build
fi
