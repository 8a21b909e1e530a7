#!/usr/bin/env bash
# Build (once) the test kernel and print its build directory (KDIR) on stdout.
#
# Linux 7.3 from Debian's linux-source-7.3, tinyconfig + tests/vm/vm.config +
# tests/selftests/peermem/config, built with LLVM=-19 in the build root. The build is cached under a
# key made of the source version, the config fragments and the toolchain versions, so changing any of
# them builds a new kernel and a warm cache costs nothing.
#
# PEERMEM_KERNEL_FLAVOUR=bench builds the benchmark kernel instead: the same source and fragments with
# tests/bench/kernel.config (the debug options off) and tests/bench/slab.config (/proc/slabinfo) merged
# last, cached under its own key.
# PEERMEM_KERNEL_FLAVOUR=ubuntu builds the Ubuntu-style kernel: the benchmark kernel's fragments, then
# tests/vm/ubuntu.config (symbol versions with gendwarfksyms, an Ubuntu release string), with GCC
# as Ubuntu builds its kernels; tests/infra/stock-kernel.sh lays it out as Ubuntu's packages do.
# PEERMEM_KERNEL_FLAVOUR=lts-6.12 builds the test kernel's config, debug options included, from
# Debian's linux-source-6.12 instead (Linux 6.12 LTS, the oldest kernel src/kapi.rs covers), with
# tests/vm/lts-6.12.config last (what 6.12 needs for Rust: no symbol versions).
source "$(dirname "$0")/common.sh"
need_root

FLAVOUR=${PEERMEM_KERNEL_FLAVOUR:-test}
SERIES=7.3
FRAGMENTS=("$REPO_ROOT/tests/vm/vm.config" "$REPO_ROOT/tests/selftests/peermem/config")
case "$FLAVOUR" in
    test) ;;
    bench) FRAGMENTS+=("$REPO_ROOT/tests/bench/kernel.config" "$REPO_ROOT/tests/bench/slab.config") ;;
    ubuntu) FRAGMENTS+=("$REPO_ROOT/tests/bench/kernel.config" "$REPO_ROOT/tests/vm/ubuntu.config") ;;
    lts-6.12) SERIES=6.12; FRAGMENTS+=("$REPO_ROOT/tests/vm/lts-6.12.config") ;;
    *) die "PEERMEM_KERNEL_FLAVOUR is test, bench, ubuntu or lts-6.12, not '$FLAVOUR'" ;;
esac

KSRC_PKG=$CACHE_WORK/src/linux-source-$SERIES
[ -f "$KSRC_PKG/.version" ] || die "no linux-source-$SERIES in the cache; run tests/infra/setup-toolchain.sh"
KSRC=$KSRC_PKG/linux-source-$SERIES
if [ ! -f "$KSRC/Makefile" ]; then
    log "unpacking $(basename "$KSRC_PKG"/usr/src/linux-source-$SERIES.tar.*)"
    tar -xf "$KSRC_PKG"/usr/src/linux-source-$SERIES.tar.* -C "$KSRC_PKG"
fi
# The compiler: clang for the test kernel (RUST with KASAN needs it) and the benchmark kernel built
# from the same config; GCC for the Ubuntu-style one. CC_ARGS is what every make of the tree gets.
# GCC's version joins the cache key only where GCC builds the kernel.
toolchain=$("$REPO_ROOT/tests/infra/in-root" bash -c 'clang-19 --version | head -1; rustc --version; bindgen --version')
if [ "$FLAVOUR" = ubuntu ]; then
    CC_ARGS="CC=gcc HOSTCC=gcc"
    toolchain+=" $CC_ARGS $("$REPO_ROOT/tests/infra/in-root" gcc --version | head -1)"
else
    CC_ARGS="LLVM=$LLVM_SUFFIX"
fi
key=$( { cat "$KSRC_PKG/.version"; cat "${FRAGMENTS[@]}"; echo "$toolchain"; } | sha256sum | cut -c1-16)
KDIR=$CACHE_WORK/kernel/$key

if [ -f "$KDIR/.peermem-built" ]; then
    echo "$KDIR"
    exit 0
fi

# One kernel build at a time: a second caller waits for the first and then finds it built.
mkdir -p "$CACHE_WORK/kernel"
exec 9>"$CACHE_WORK/kernel/.lock"
if ! flock -n 9; then
    log "another kernel build is running; waiting for it"
    flock 9
fi
if [ -f "$KDIR/.peermem-built" ]; then
    echo "$KDIR"
    exit 0
fi

log "building the test kernel in $KDIR (key $key); a cold build takes a while"
mkdir -p "$KDIR"
start=$(date +%s)
jobs=${PEERMEM_JOBS:-$(( $(nproc) + 1 ))}
"$REPO_ROOT/tests/infra/in-root" bash -c '
    set -euo pipefail
    ksrc=$1; kdir=$2; jobs=$3; cc_args=$4; shift 4
    # shellcheck disable=SC2086 # cc_args is a list of make variables
    mk() { make -s -C "$ksrc" O="$kdir" $cc_args "$@"; }
    mk tinyconfig >/dev/null
    "$ksrc/scripts/kconfig/merge_config.sh" -m -O "$kdir" "$kdir/.config" "$@" >/dev/null
    mk olddefconfig >/dev/null
    # Every requested option must have survived Kconfig: a dropped one would silently weaken the tests.
    # A later fragment overrides an earlier one (as merge_config.sh does), so each option is checked
    # against the last fragment that sets it.
    bad=0
    declare -A want=()
    order=()
    for frag in "$@"; do
        while IFS= read -r line; do
            case "$line" in ""|"#"*) continue ;; esac
            name=${line%%=*}
            [ -n "${want[$name]+x}" ] || order+=("$name")
            want[$name]=$line
        done < "$frag"
    done
    for name in "${order[@]}"; do
        line=${want[$name]}; val=${line#*=}
        if [ "$val" = n ]; then
            grep -qx "$name=y" "$kdir/.config" && { echo "config: $name is y, wanted n" >&2; bad=1; }
        else
            grep -qx "$line" "$kdir/.config" || { echo "config: wanted $line, got: $(grep "^$name=\|^# $name " "$kdir/.config" || echo unset)" >&2; bad=1; }
        fi
    done
    [ $bad = 0 ] || { echo "the kernel config fragments did not apply; see above" >&2; exit 1; }
    [ -n "${PEERMEM_CONFIG_ONLY:-}" ] && exit 0
    # shellcheck disable=SC2086
    make -C "$ksrc" O="$kdir" $cc_args -j"$jobs" all >"$kdir/build.log" 2>&1 ||
        { tail -40 "$kdir/build.log" >&2; echo "kernel build failed; log: $kdir/build.log" >&2; exit 1; }
' build-kernel "$KSRC" "$KDIR" "$jobs" "$CC_ARGS" "${FRAGMENTS[@]}" >&2
[ -n "${PEERMEM_CONFIG_ONLY:-}" ] && { echo "$KDIR"; exit 0; }
log "kernel built in $(( $(date +%s) - start )) s"
touch "$KDIR/.peermem-built"
echo "$KDIR"
