#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Find and check everything a build of peermem_rs.ko for one kernel needs, and write it down as make
# variables. The top-level Makefile runs it for `make KDIR=...`, `make install` and DKMS builds; it
# never changes the system.
#
#   packaging/configure.sh --kdir KDIR [--kernelrelease VERSION] [--out FILE]
#   packaging/configure.sh gen-symvers MODULE.ko [MODULE_NAME]      (the exports of a .ko, as Module.symvers)
#
# What it checks, and refuses with what to install when it is missing:
#   - the kernel: CONFIG_RUST=y, CONFIG_MODULES=y, and its Rust metadata (rust/libkernel.rmeta ...);
#   - the exact rustc that built the kernel (CONFIG_RUSTC_VERSION_TEXT), a working bindgen/libclang,
#     and for a clang-built kernel the matching clang (the LLVM= value);
#   - the NVIDIA driver: the installed nvidia.ko for that kernel and/or the source tree with nv-p2p.h
#     (/usr/src/nvidia*-<version>, the DKMS tree of the nvidia module), refusing the proprietary
#     driver; and the Module.symvers of nvidia.ko for modpost;
#   - the peer-memory host: MLNX_OFED / DOCA-OFED's include/rdma/peer_mem.h and the Module.symvers
#     beside it (/usr/src/ofa_kernel/..., DOCA-OFED's /usr/src/ofa_kernel-dkms/<arch>/<kernel>,
#     /var/lib/dkms/mlnx-ofed-kernel/*/build or mlnx-ofa_kernel/*/build), or an Ubuntu
#     kernel with the peer-memory patches; and the OFED release, which decides whether the build
#     may run the invalidating flavour (before 25.04 it may not; PEERMEM_OFED_RELEASE=YY.MM names it
#     where the tree does not).
#
# Overrides (environment or make command line): NVIDIA_SRC, NVIDIA_SYMVERS, PEER_MEM_INC,
# PEER_MEM_SYMVERS, RUSTC, BINDGEN, LLVM. The trees searched (dkms.conf passes dkms's own):
# PEERMEM_SRC_TREE (/usr/src), PEERMEM_DKMS_TREE (/var/lib/dkms), PEERMEM_MODULES_TREE (/lib/modules).
# PEERMEM_ALLOW_NO_PEER_MEM=1 builds with a peer_mem.h (PEER_MEM_INC) but without the host's
# Module.symvers: the module then loads only where a host with matching symbols is loaded.
set -euo pipefail

SRC_TREE=${PEERMEM_SRC_TREE:-/usr/src}
DKMS_TREE=${PEERMEM_DKMS_TREE:-/var/lib/dkms}
MODULES_TREE=${PEERMEM_MODULES_TREE:-/lib/modules}

say() { printf 'peermem-rs: %s\n' "$*" >&2; }
warn() { printf 'peermem-rs: WARNING: %s\n' "$*" >&2; }
# refuse HEADLINE [DETAIL...]: the build cannot produce a module that loads; say why and what to do.
refuse() {
    printf 'peermem-rs: ERROR: %s\n' "$1" >&2
    shift
    local l
    for l in "$@"; do printf '    %s\n' "$l" >&2; done
    exit 1
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# --- reading modules -------------------------------------------------------------------------------

# ko_plain KO: a path to the uncompressed module.
ko_plain() {
    local out
    case $1 in
        *.ko) echo "$1"; return ;;
        *.zst) out=$tmp/$(basename "$1" .zst); zstd -q -d -c "$1" > "$out" ;;
        *.xz) out=$tmp/$(basename "$1" .xz); xz -d -c "$1" > "$out" ;;
        *.gz) out=$tmp/$(basename "$1" .gz); gzip -d -c "$1" > "$out" ;;
        *) return 1 ;;
    esac
    echo "$out"
}

tool() {
    local t
    for t in "$@"; do command -v "$t" >/dev/null 2>&1 && { echo "$t"; return; }; done
    return 1
}

# ko_modinfo KO FIELD: a .modinfo field of a module file (what `modinfo -F` shows).
ko_modinfo() {
    local ko objcopy
    ko=$(ko_plain "$1") || return 1
    if objcopy=$(tool objcopy llvm-objcopy "llvm-objcopy${LLVM_SUFFIX:-}"); then
        "$objcopy" -O binary --only-section=.modinfo "$ko" "$tmp/modinfo" 2>/dev/null || return 1
        tr '\0' '\n' < "$tmp/modinfo" | sed -n "s/^$2=//p" | head -n1
    else
        modinfo -F "$2" "$ko"
    fi
}

# gen_symvers KO NAME: the symbols KO exports, in Module.symvers format. Exports are the
# __ksymtab_<sym> symbols (section __ksymtab_gpl for GPL-only ones); with CONFIG_MODVERSIONS each
# has a __crc_<sym>: a 32-bit word in the __kcrctab* section at the symbol's value, or (older
# kernels) an absolute symbol whose value is the CRC. Without CRCs modpost is given 0, which is what
# it records itself for a kernel without CONFIG_MODVERSIONS.
gen_symvers() {
    local ko name readelf objcopy
    ko=$(ko_plain "$1") || return 1
    name=$2
    readelf=$(tool readelf llvm-readelf "llvm-readelf${LLVM_SUFFIX:-}") || { warn "no readelf to read $1"; return 1; }
    objcopy=$(tool objcopy llvm-objcopy "llvm-objcopy${LLVM_SUFFIX:-}") || { warn "no objcopy to read $1"; return 1; }
    # Section index -> name.
    "$readelf" -SW "$ko" | sed -n 's/^ *\[ *\([0-9]*\)\] \([^ ]*\) .*/\1 \2/p' > "$tmp/sections"
    # value ndx name, for the __ksymtab_ and __crc_ symbols.
    "$readelf" -sW "$ko" | awk '$8 ~ /^__(ksymtab|crc)_/ { print $2, $7, $8 }' > "$tmp/syms"
    local value ndx sym sec crc export
    while read -r value ndx sym; do
        [[ $sym == __ksymtab_* ]] || continue
        sym=${sym#__ksymtab_}
        sec=$(awk -v n="$ndx" '$1 == n { print $2 }' "$tmp/sections")
        case $sec in
            __ksymtab_gpl) export=EXPORT_SYMBOL_GPL ;;
            __ksymtab) export=EXPORT_SYMBOL ;;
            *) continue ;;
        esac
        crc=0x00000000
        if read -r value ndx _ < <(awk -v s="__crc_$sym" '$3 == s { print $1, $2 }' "$tmp/syms"); then
            if [ "$ndx" = ABS ]; then
                crc=$(printf '0x%08x' "$((16#$value & 0xffffffff))")
            else
                sec=$(awk -v n="$ndx" '$1 == n { print $2 }' "$tmp/sections")
                "$objcopy" -O binary --only-section="$sec" "$ko" "$tmp/crcs" 2>/dev/null || return 1
                crc=0x$(od -An -tx4 -j "$((16#$value))" -N4 "$tmp/crcs" | tr -d ' \n')
                [ "$crc" != 0x ] || return 1
            fi
        fi
        printf '%s\t%s\t%s\t%s\t\n' "$crc" "$sym" "$name" "$export"
    done < "$tmp/syms"
}

if [ "${1:-}" = gen-symvers ]; then
    [ $# -ge 2 ] || { echo "usage: $0 gen-symvers MODULE.ko [MODULE_NAME]" >&2; exit 64; }
    name=${3:-$(basename "$2" | sed 's/\.ko.*//; s/-/_/g')}
    gen_symvers "$2" "$name"
    exit
fi

# --- arguments -------------------------------------------------------------------------------------

KDIR=
KREL=
OUT=
while [ $# -gt 0 ]; do
    case $1 in
        --kdir) KDIR=$2; shift 2 ;;
        --kernelrelease) KREL=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        -h|--help) sed -n '3,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "$0: unknown argument '$1' (see --help)" >&2; exit 64 ;;
    esac
done
[ -n "$KDIR" ] || { echo "$0: --kdir is required" >&2; exit 64; }

# --- the kernel ------------------------------------------------------------------------------------

[ -d "$KDIR" ] || refuse "no kernel build directory at $KDIR" \
    "install the headers of the target kernel (Debian/Ubuntu: apt install linux-headers-${KREL:-\$(uname -r)};" \
    "RHEL/Fedora: dnf install kernel-devel-${KREL:-\$(uname -r)}), or point KDIR at a kernel build directory"
KDIR=$(cd "$KDIR" && pwd)
conf=$KDIR/include/config/auto.conf
[ -f "$conf" ] || conf=$KDIR/.config
[ -f "$conf" ] || refuse "no kernel configuration in $KDIR (include/config/auto.conf or .config)" \
    "KDIR must be a configured kernel build directory, such as /lib/modules/<version>/build"
# kconf NAME: the value of a config option (quotes removed), or nothing.
kconf() { sed -n "s/^$1=//p" "$conf" | head -n1 | sed 's/^"\(.*\)"$/\1/'; }

krel_file=$(cat "$KDIR/include/config/kernel.release" 2>/dev/null || true)
if [ -z "$KREL" ]; then
    KREL=$krel_file
    [ -n "$KREL" ] || refuse "cannot tell the release of the kernel in $KDIR (no include/config/kernel.release)" \
        "pass it: make KDIR=$KDIR PEERMEM_KERNELRELEASE=<version>"
elif [ -n "$krel_file" ] && [ "$krel_file" != "$KREL" ]; then
    warn "building for kernel $KREL, but $KDIR says it is $krel_file"
fi

[ "$(kconf CONFIG_MODULES)" = y ] || refuse "kernel $KREL does not support loadable modules (CONFIG_MODULES is not set in $conf)"
[ "$(kconf CONFIG_RUST)" = y ] || refuse "kernel $KREL was built without Rust support: CONFIG_RUST is not set in $conf" \
    "peermem-rs is a Rust kernel module; it needs a kernel built with CONFIG_RUST=y" \
    "(check a kernel with: grep CONFIG_RUST= /boot/config-<version>). Install or build such a kernel, or use" \
    "NVIDIA's C module nvidia-peermem on this one."
missing=()
for f in rust/libkernel.rmeta rust/libmacros.so; do
    [ -e "$KDIR/$f" ] || missing+=("$f")
done
[ ${#missing[@]} = 0 ] || refuse "kernel $KREL has CONFIG_RUST=y, but its Rust metadata is missing from $KDIR (${missing[*]})" \
    "Out-of-tree Rust modules are compiled against the kernel crate's metadata, which kernel-headers" \
    "packages do not ship. Ubuntu: apt install linux-lib-rust-$KREL. Debian: packaging/rust-metadata.sh" \
    "regenerates it (make KDIR=... and DKMS run it). Elsewhere: install the package of your distribution" \
    "that provides $KDIR/rust/*.rmeta, or point KDIR at the kernel's own build directory."

# Where the MLNX_OFED kernel tree keeps per-architecture builds: uname -m names (march), which
# MLNX_OFED and DOCA-OFED use. karch is the kernel's own name for the same architecture (kbuild's
# ARCH): NVIDIA's nvidia-peermem Kbuild looked for OFED under that spelling on x86 until its DOCA
# fix (open-gpu-kernel-modules pull request 1018), so trees laid out for it may use it.
if [ "$(kconf CONFIG_X86_64)" = y ]; then march=x86_64 karch=x86
elif [ "$(kconf CONFIG_ARM64)" = y ]; then march=aarch64 karch=arm64
elif [ "$(kconf CONFIG_PPC64)" = y ]; then
    karch=powerpc
    if [ "$(kconf CONFIG_CPU_LITTLE_ENDIAN)" = y ]; then march=ppc64le; else march=ppc64; fi
else march=$(uname -m) karch=$march
fi

# --- the compilers ---------------------------------------------------------------------------------

# The C compiler: a clang-built kernel wants the same clang (dkms appends LLVM=1 for one, which only
# works when a plain `clang` of that version exists; Debian and Ubuntu install clang-<N>).
llvm=
if [ "$(kconf CONFIG_CC_IS_CLANG)" = y ]; then
    clang_major=$(( $(kconf CONFIG_CLANG_VERSION) / 10000 ))
    clang_major_of() { "$1" --version 2>/dev/null | sed -n 's/.*clang version \([0-9]*\).*/\1/p' | head -n1; }
    llvm_ok() {
        case $1 in
            1) command -v clang >/dev/null && [ "$(clang_major_of clang)" = "$clang_major" ] ;;
            -*) command -v "clang$1" >/dev/null && [ "$(clang_major_of "clang$1")" = "$clang_major" ] ;;
            */) [ -x "${1}clang" ] && [ "$(clang_major_of "${1}clang")" = "$clang_major" ] ;;
            *) return 1 ;;
        esac
    }
    if [ -n "${LLVM:-}" ] && llvm_ok "$LLVM"; then llvm=$LLVM
    elif llvm_ok "-$clang_major"; then llvm=-$clang_major
    elif llvm_ok 1; then llvm=1
    elif [ -d "/usr/lib/llvm-$clang_major/bin" ] && llvm_ok "/usr/lib/llvm-$clang_major/bin/"; then llvm=/usr/lib/llvm-$clang_major/bin/
    else
        refuse "kernel $KREL was built with clang $clang_major ($(kconf CONFIG_CC_VERSION_TEXT)), which is not installed" \
            "install clang-$clang_major, lld-$clang_major and llvm-$clang_major (or pass LLVM=<prefix>/ or LLVM=-<suffix>)"
    fi
    [ -z "${LLVM:-}" ] || [ "$LLVM" = "$llvm" ] || say "using LLVM=$llvm instead of LLVM=$LLVM: clang $clang_major built kernel $KREL"
fi
LLVM_SUFFIX=
case $llvm in -*) LLVM_SUFFIX=$llvm ;; esac

# rustc: exactly the one that built the kernel. The kernel crate's metadata (rust/*.rmeta) can only
# be read by the compiler that wrote it; the kernel's own build compares the full version text too.
want_rustc=$(kconf CONFIG_RUSTC_VERSION_TEXT)
want_rustc_num=$(kconf CONFIG_RUSTC_VERSION)
rustc_text() { "$1" --version 2>/dev/null | tr -d '#' | head -n1; }
rustc_num() {
    local v
    v=$(rustc_text "$1" | sed -n 's/^rustc \([0-9]*\)\.\([0-9]*\)\.\([0-9]*\).*/\1 \2 \3/p')
    [ -n "$v" ] && set -- $v && echo $(( $1 * 100000 + $2 * 100 + $3 ))
}
rustc_matches() {
    if [ -n "$want_rustc" ]; then [ "$(rustc_text "$1")" = "$want_rustc" ]
    elif [ -n "$want_rustc_num" ]; then [ "$(rustc_num "$1")" = "$want_rustc_num" ]
    else true
    fi
}
if [ -n "$want_rustc" ]; then
    want_ver=$(echo "$want_rustc" | awk '{ print $2 }')
elif [ -n "$want_rustc_num" ]; then
    want_ver=$((want_rustc_num / 100000)).$((want_rustc_num / 100 % 1000)).$((want_rustc_num % 100))
    want_rustc="rustc $want_ver"
else
    want_ver=
    warn "kernel $KREL does not record which rustc built it; using the rustc found"
fi
want_mm=${want_ver%.*}
if [ -n "${RUSTC:-}" ]; then
    candidates=("$RUSTC")   # asked for: that one or nothing
else
    candidates=(rustc)
    if [ -n "$want_ver" ]; then
        # Ubuntu's versioned packages (rustc-1.80 -> /usr/bin/rustc-1.80), rustup toolchains.
        candidates+=("rustc-$want_mm" "rustc-$want_ver" "/usr/lib/rust-$want_mm/bin/rustc")
        for d in "${HOME:-/root}"/.rustup/toolchains/"$want_ver"-*/bin /root/.rustup/toolchains/"$want_ver"-*/bin; do
            [ -x "$d/rustc" ] && candidates+=("$d/rustc")
        done
    fi
fi
rustc=
seen=()
for c in "${candidates[@]}"; do
    p=$(command -v "$c" 2>/dev/null) || continue
    if rustc_matches "$p"; then rustc=$p; break; fi
    seen+=("$p: $(rustc_text "$p" || echo '(does not run)')")
done
if [ -z "$rustc" ]; then
    found=("found: none")
    [ ${#seen[@]} = 0 ] || { found=(); for s in "${seen[@]}"; do found+=("found $s"); done; }
    refuse "kernel $KREL was built by '$want_rustc'; Rust modules for it must be compiled by exactly that rustc" \
        "${found[@]}" \
        "Install rustc $want_ver, the build the kernel used:" \
        "  Ubuntu: apt install rustc-$want_mm   (found automatically as rustc-$want_mm)" \
        "  Debian, Fedora, ...: the distribution's rustc $want_ver package the kernel was built with" \
        "  rustup (only if the kernel was built with rustup's toolchain): rustup toolchain install $want_ver," \
        "    then build with RUSTC=\$(rustup +$want_ver which rustc)"
fi

# bindgen turns nv-p2p.h and rdma/peer_mem.h into Rust declarations at build time; it needs libclang.
if [ -n "${BINDGEN:-}" ]; then
    bcands=("$BINDGEN")
else
    kb=$(kconf CONFIG_BINDGEN_VERSION_TEXT | awk '{ print $2 }')
    bcands=(bindgen ${kb:+"bindgen-${kb%.*}"})
    for p in $(compgen -c bindgen- 2>/dev/null | sort -rV | uniq); do bcands+=("$p"); done
fi
bindgen=
for c in "${bcands[@]}"; do
    p=$(command -v "$c" 2>/dev/null) && { bindgen=$p; break; }
done
[ -n "$bindgen" ] || refuse "no bindgen found (tried: ${bcands[*]})" \
    "install bindgen (Debian/Ubuntu: apt install bindgen, or a versioned bindgen-0.NN package; cargo install bindgen-cli)"
echo 'int peermem_probe(void);' > "$tmp/probe.h"
if ! "$bindgen" "$tmp/probe.h" > /dev/null 2> "$tmp/bindgen.err"; then
    refuse "$bindgen does not work: $(head -n3 "$tmp/bindgen.err" | tr '\n' ' ')" \
        "bindgen needs libclang: Debian/Ubuntu: apt install libclang-dev (or libclang-<N>-dev); Fedora: dnf install clang-devel"
fi
kb_text=$(kconf CONFIG_BINDGEN_VERSION_TEXT)
b_text=$("$bindgen" --version 2>/dev/null | head -n1)
[ -z "$kb_text" ] || [ "$kb_text" = "$b_text" ] ||
    say "note: $bindgen is '$b_text', the kernel used '$kb_text' (fine: the declarations are generated for rustc $want_ver)"
say "kernel $KREL ($KDIR): CONFIG_RUST=y, $(rustc_text "$rustc") at $rustc${llvm:+, LLVM=$llvm}"

# --- the NVIDIA driver -----------------------------------------------------------------------------

# syms_has FILE SYMBOL: does the Module.symvers FILE export SYMBOL?
syms_has() { [ -f "$1" ] && awk -F'\t' -v s="$2" '$2 == s { f = 1 } END { exit !f }' "$1"; }

# refuse_proprietary WHAT EVIDENCE
refuse_proprietary() {
    refuse "$1 is NVIDIA's proprietary driver ($2)" \
        "peermem-rs cannot use it: every Rust kernel module uses GPL-only kernel symbols, and the kernel does" \
        "not let a module that uses GPL-only symbols use the symbols of a proprietary module (here nvidia_p2p_*)." \
        "That is license enforcement; peermem-rs does not try to get around it." \
        "Instead: on Turing and newer GPUs (T4, A100, H100, H200, L40, B200 ...) install NVIDIA's open kernel" \
        "modules (the -open driver packages, or the .run installer with -m=kernel-open) and build against them;" \
        "on Pascal and Volta GPUs (P100, V100), which only the proprietary driver supports, use NVIDIA's" \
        "nvidia-peermem module (modprobe nvidia-peermem) instead of peermem-rs."
}

# The driver that will be loaded: nvidia.ko installed for this kernel (one below updates/ first, as
# depmod prefers it).
nv_ko=$(find "$MODULES_TREE/$KREL" \( -name nvidia.ko -o -name 'nvidia.ko.*' \) 2>/dev/null |
    awk '{ print (index($0, "/updates/") ? 0 : 1), $0 }' | sort | head -n1 | cut -d' ' -f2- || true)
nv_ko_license=
nv_ko_version=
if [ -n "$nv_ko" ]; then
    nv_ko_license=$(ko_modinfo "$nv_ko" license || true)
    nv_ko_version=$(ko_modinfo "$nv_ko" version || true)
    [ "$nv_ko_license" != NVIDIA ] || refuse_proprietary "the installed $nv_ko" "MODULE_LICENSE(\"NVIDIA\")"
fi

# nv_header DIR: the directory holding nv-p2p.h in an NVIDIA tree: the tree's own nvidia/ (or DIR
# itself), and for the .run installer's layout kernel-open/ first; kernel/ (the proprietary modules
# of that installer) last, so that it is found only to be refused.
nv_header() {
    local d
    for d in "$1/kernel-open/nvidia" "$1/nvidia" "$1" "$1/kernel/nvidia"; do
        [ -f "$d/nv-p2p.h" ] && { (cd "$d" && pwd); return; }
    done
    return 1
}

# The NVIDIA source tree: NVIDIA_SRC, or the DKMS trees and /usr/src/nvidia*-<version> trees,
# preferring the version of the installed nvidia.ko, else the newest.
nv_tree=
nv_hdr=
nv_version=
declare -A nv_dkms_of=()
if [ -n "${NVIDIA_SRC:-}" ]; then
    nv_hdr=$(nv_header "$NVIDIA_SRC") ||
        refuse "NVIDIA_SRC=$NVIDIA_SRC holds no nv-p2p.h (looked in ., nvidia/, kernel-open/nvidia/)"
    nv_tree=$NVIDIA_SRC
else
    list=()
    for d in "$DKMS_TREE"/nvidia*/*/source; do
        [ -d "$d" ] || continue
        v=$(basename "$(dirname "$d")")
        nv_dkms_of[$v]=$(dirname "$d")
        list+=("$v $d")
    done
    for d in "$SRC_TREE"/nvidia*-[0-9]*; do
        [ -d "$d" ] || continue
        list+=("${d##*-} $d")
    done
    best=
    while read -r v d; do
        [ -n "$v" ] || continue
        nv_header "$d" >/dev/null || continue
        if [ -n "$nv_ko_version" ] && [ "$v" = "$nv_ko_version" ]; then best="$v $d"; break; fi
        [ -n "$best" ] || best="$v $d"
    done < <(printf '%s\n' "${list[@]}" | sort -rV -k1,1)
    [ -n "$best" ] || refuse "no NVIDIA kernel-module source tree with nv-p2p.h found for kernel $KREL" \
        "searched $SRC_TREE/nvidia*-<version>/ and $DKMS_TREE/nvidia*/<version>/source" \
        "install the source (or DKMS) package of NVIDIA's open kernel modules for your driver, which provides" \
        "/usr/src/nvidia-<version>, or point NVIDIA_SRC at a tree holding nvidia/nv-p2p.h"
    read -r nv_version nv_tree <<< "$best"
    nv_hdr=$(nv_header "$nv_tree")
    [ -z "$nv_ko_version" ] || [ "$nv_version" = "$nv_ko_version" ] ||
        warn "no NVIDIA tree of the installed driver version $nv_ko_version; using $nv_tree ($nv_version)"
fi

# Open or proprietary: the driver's own MODULE_LICENSE, in the sources next to nv-p2p.h.
prop=$(grep -l 'MODULE_LICENSE *( *"NVIDIA" *)' "$nv_hdr"/*.c 2>/dev/null | head -n1 || true)
[ -z "$prop" ] || refuse_proprietary "the NVIDIA tree $nv_tree" "MODULE_LICENSE(\"NVIDIA\") in $prop"
if grep -qs 'MODULE_LICENSE *( *"Dual MIT/GPL" *)' "$nv_hdr/nv.c"; then
    nv_flavour="open kernel modules"
elif [ "$nv_ko_license" = "Dual MIT/GPL" ]; then
    nv_flavour="open kernel modules (by the installed nvidia.ko)"
else
    nv_flavour="flavour unknown"
    warn "cannot tell whether $nv_tree is NVIDIA's open kernel modules (no nv.c with its license);" \
        "peermem-rs loads only next to the open modules (modinfo -F license nvidia: \"Dual MIT/GPL\")"
fi

# nvidia.ko's exports for modpost (which fails on unknown symbols, and with CONFIG_MODVERSIONS
# records their CRCs, which the kernel checks at load). Best: read them from the installed
# nvidia.ko, the module that will really be loaded. Else a Module.symvers left by its build.
nv_symvers=
if [ -n "${NVIDIA_SYMVERS:-}" ]; then
    syms_has "$NVIDIA_SYMVERS" nvidia_p2p_get_pages ||
        refuse "NVIDIA_SYMVERS=$NVIDIA_SYMVERS does not export nvidia_p2p_get_pages"
    nv_symvers=$NVIDIA_SYMVERS
fi
outdir=$(dirname "${OUT:-$tmp/x}")
mkdir -p "$outdir"
if [ -z "$nv_symvers" ] && [ -n "$nv_ko" ]; then
    if gen_symvers "$nv_ko" nvidia > "$outdir/nvidia.symvers" && syms_has "$outdir/nvidia.symvers" nvidia_p2p_get_pages; then
        nv_symvers=$outdir/nvidia.symvers
    else
        warn "could not read the exports of $nv_ko"
    fi
fi
if [ -z "$nv_symvers" ]; then
    for f in ${nv_version:+"${nv_dkms_of[$nv_version]:-/nonexistent}/build/Module.symvers"} \
        "$nv_tree/Module.symvers" "$nv_hdr/../Module.symvers" "$nv_hdr/Module.symvers"; do
        syms_has "$f" nvidia_p2p_get_pages && { nv_symvers=$(cd "$(dirname "$f")" && pwd)/Module.symvers; break; }
    done
fi
[ -n "$nv_symvers" ] || refuse "no nvidia.ko installed for kernel $KREL and no Module.symvers of the NVIDIA driver" \
    "modpost needs the exports of nvidia.ko (and their CRCs, with CONFIG_MODVERSIONS) to link peermem_rs.ko." \
    "Install the NVIDIA driver (open kernel modules) for kernel $KREL first, or set NVIDIA_SYMVERS to the" \
    "Module.symvers of the build that produced your nvidia.ko."
say "NVIDIA: ${nv_version:+driver $nv_version, }$nv_flavour; nv-p2p.h in $nv_hdr; symbols from $nv_symvers"

# --- the peer-memory host (MLNX_OFED / DOCA-OFED) --------------------------------------------------

# ofed_symvers INCLUDE_DIR: the Module.symvers beside it that exports the peer-memory API.
ofed_symvers() {
    local f
    f=$(dirname "$1")/Module.symvers
    syms_has "$f" ib_register_peer_memory_client && (cd "$(dirname "$f")" && echo "$PWD/Module.symvers")
}

pm_inc=
pm_symvers=
pm_what=
searched=()
if [ -n "${PEER_MEM_INC:-}" ]; then
    [ -f "$PEER_MEM_INC/rdma/peer_mem.h" ] || refuse "PEER_MEM_INC=$PEER_MEM_INC holds no rdma/peer_mem.h"
    pm_inc=$(cd "$PEER_MEM_INC" && pwd)
    pm_what="PEER_MEM_INC"
    if [ -n "${PEER_MEM_SYMVERS:-}" ]; then
        syms_has "$PEER_MEM_SYMVERS" ib_register_peer_memory_client ||
            refuse "PEER_MEM_SYMVERS=$PEER_MEM_SYMVERS does not export ib_register_peer_memory_client"
        pm_symvers=$PEER_MEM_SYMVERS
    else
        pm_symvers=$(ofed_symvers "$pm_inc" || true)
    fi
else
    # The trees built for this very kernel first, then the "default" link (which may be another
    # kernel's), then the DKMS build of mlnx-ofed-kernel for this kernel:
    # - MLNX_OFED: /usr/src/ofa_kernel/<arch>/<kernel>, or /usr/src/ofa_kernel/<kernel>;
    # - DOCA-OFED 3.2 and later build the OFED kernel tree with DKMS into
    #   /usr/src/ofa_kernel-dkms/<arch>/<kernel> and leave only absolute symlinks to it under
    #   /usr/src/ofa_kernel (<arch>/<kernel>, and default through /etc/alternatives). Those links
    #   dangle where /usr/src is mounted elsewhere (a driver container's PEERMEM_SRC_TREE), so the
    #   DKMS tree is looked for by its own name too.
    # Each per-architecture path is tried with the uname -m name, then with the kernel's.
    cands=()
    for a in "$march" "$karch"; do
        cands+=("$SRC_TREE/ofa_kernel/$a/$KREL/include" "$SRC_TREE/ofa_kernel-dkms/$a/$KREL/include")
        [ "$karch" != "$march" ] || break
    done
    cands+=("$SRC_TREE/ofa_kernel/$KREL/include" "$SRC_TREE/ofa_kernel/default/include")
    # The DKMS module is mlnx-ofed-kernel in the Debian/Ubuntu packages and mlnx-ofa_kernel in the
    # RPM ones (mlnx-ofa_kernel-dkms).
    for m in mlnx-ofed-kernel mlnx-ofa_kernel; do
        installed=$(readlink "$DKMS_TREE/$m/kernel-$KREL-$march" 2>/dev/null | cut -d/ -f1 || true)
        [ -z "$installed" ] || cands+=("$DKMS_TREE/$m/$installed/build/include")
        for d in $(ls -d "$DKMS_TREE/$m"/*/build/include 2>/dev/null | sort -rV); do cands+=("$d"); done
    done
    for inc in "${cands[@]}"; do
        searched+=("$inc")
        [ -f "$inc/rdma/peer_mem.h" ] || continue
        pm_inc=$(cd "$inc" && pwd)
        pm_symvers=$(ofed_symvers "$inc" || true)
        pm_what="MLNX_OFED/DOCA-OFED"
        break
    done
    # An Ubuntu kernel with the peer-memory SAUCE patches: the header and the exports are the kernel's.
    if [ -z "$pm_inc" ] && syms_has "$KDIR/Module.symvers" ib_register_peer_memory_client; then
        for inc in "$KDIR/include" "$KDIR/source/include"; do
            [ -f "$inc/rdma/peer_mem.h" ] && { pm_inc=$inc; pm_what="kernel $KREL (in-tree peer memory)"; break; }
        done
    fi
    searched+=("$KDIR/include/rdma/peer_mem.h with ib_register_peer_memory_client in $KDIR/Module.symvers")
fi
modpost_warn=
if [ -z "$pm_inc" ]; then
    refuse "no peer-memory host (MLNX_OFED / DOCA-OFED) found for kernel $KREL" \
        "peermem-rs registers with ib_core's peer-memory API (ib_register_peer_memory_client), which only" \
        "MLNX_OFED/DOCA-OFED (or a kernel carrying the peer-memory patches) provides; mainline ib_core has none." \
        "A module built without it could never load. Searched:" "${searched[@]/#/  }" \
        "Install MLNX_OFED or DOCA-OFED with its kernel sources for this kernel (mlnx-ofed-kernel-dkms or" \
        "mlnx-ofed-kernel-source), or set PEER_MEM_INC=<dir with rdma/peer_mem.h> and PEER_MEM_SYMVERS=<its Module.symvers>."
elif [ -z "$pm_symvers" ] && [ "$pm_what" != "kernel $KREL (in-tree peer memory)" ]; then
    if [ "${PEERMEM_ALLOW_NO_PEER_MEM:-}" = 1 ]; then
        warn "building WITHOUT the peer-memory host's symbols (PEERMEM_ALLOW_NO_PEER_MEM=1): peermem_rs.ko will"
        warn "refuse to load (Unknown symbol ib_register_peer_memory_client, or no symbol version for it)"
        warn "unless a host exporting them without CRCs is loaded. Do not install this build on GPU nodes."
        modpost_warn=1
    else
        refuse "found $pm_inc/rdma/peer_mem.h, but no Module.symvers exporting ib_register_peer_memory_client beside it" \
            "($(dirname "$pm_inc")/Module.symvers). modpost needs it to link peermem_rs.ko to ib_core." \
            "Reinstall the OFED kernel sources for kernel $KREL, or set PEER_MEM_SYMVERS=<the Module.symvers of your ib_core build>." \
            "To build anyway, for a module that will not load: PEERMEM_ALLOW_NO_PEER_MEM=1."
    fi
fi
[ "$pm_what" != "MLNX_OFED/DOCA-OFED" ] || case $pm_inc in
    */ofa_kernel/default/include)
        tgt=$(readlink -f "$SRC_TREE/ofa_kernel/default")
        case $tgt in */"$KREL") ;; */ofa_kernel/*/*|*/ofa_kernel-dkms/*/*) warn "$SRC_TREE/ofa_kernel/default is the OFED build for $(basename "$tgt"), not $KREL: its CRCs may not match" ;; esac ;;
esac
say "peer memory: $pm_what, rdma/peer_mem.h in $pm_inc${pm_symvers:+; symbols from $pm_symvers}"

# The OFED release (YY.MM). ofed_release INCLUDE_DIR: that of the MLNX_OFED/DOCA-OFED tree the
# directory belongs to. Its ofed_scripts/generate_dkms_conf.sh (copied with include/ into
# /usr/src/ofa_kernel*, and part of the DKMS build tree) carries the release as its
# PACKAGE_VERSION default; a DKMS build directory's version names it too.
ofed_release() {
    local d v
    d=$(dirname "$1")
    v=$(sed -n 's/^PACKAGE_VERSION=${PACKAGE_VERSION:-"\([0-9][0-9]*\.[0-9][0-9]*\).*/\1/p' \
        "$d/ofed_scripts/generate_dkms_conf.sh" 2>/dev/null | head -n1)
    if [ -z "$v" ]; then
        case $d in
            */mlnx-ofed-kernel/*/build|*/mlnx-ofa_kernel/*/build)
                v=$(basename "$(dirname "$d")" | sed -n 's/^\([0-9][0-9]*\.[0-9][0-9]*\).*/\1/p') ;;
        esac
    fi
    echo "$v"
}
ofed_rel=${PEERMEM_OFED_RELEASE:-}
if [ -n "$ofed_rel" ]; then
    printf '%s' "$ofed_rel" | grep -Eqx '[0-9]+\.[0-9]+' ||
        refuse "PEERMEM_OFED_RELEASE=$ofed_rel is not a release like 25.04"
elif [ "$pm_what" != "kernel $KREL (in-tree peer memory)" ]; then
    ofed_rel=$(ofed_release "$pm_inc")
fi
# Up to 25.01 the host hangs tearing down an invalidating MR whose registration failed after
# mapping (Kbuild says where): such a build refuses persistent_api_support=0 at load.
if [ -n "$ofed_rel" ] && [ "$(printf '%s\n25.04\n' "$ofed_rel" | sort -V | head -n1)" != 25.04 ]; then
    warn "MLNX_OFED/DOCA-OFED $ofed_rel is before 25.04: its peer-memory host hangs tearing down an"
    warn "invalidating memory registration that failed, so this build refuses persistent_api_support=0"
    warn "(the default, persistent_api_support=1, is not affected). Upgrade to 25.04 or later for it."
elif [ -n "$ofed_rel" ]; then
    say "OFED release: $ofed_rel"
elif [ "$pm_what" = "MLNX_OFED/DOCA-OFED" ]; then
    warn "the MLNX_OFED/DOCA-OFED release was not found beside $pm_inc: persistent_api_support=0 is"
    warn "allowed, and needs 25.04 or later (set PEERMEM_OFED_RELEASE=YY.MM to have it checked)"
fi

# --- the result ------------------------------------------------------------------------------------

result() {
    cat <<EOF
# Generated by packaging/configure.sh for kernel $KREL; rerun by the Makefile on every build.
PEERMEM_KDIR := $KDIR
PEERMEM_KERNELRELEASE := $KREL
PEERMEM_LLVM := $llvm
PEERMEM_RUSTC := $rustc
PEERMEM_BINDGEN := $bindgen
PEERMEM_NVIDIA_SRC := $nv_hdr
PEERMEM_PEER_MEM_INC := $pm_inc
PEERMEM_EXTRA_SYMBOLS := $nv_symvers${pm_symvers:+ $pm_symvers}
PEERMEM_MODPOST_WARN := $modpost_warn
PEERMEM_OFED_RELEASE := $ofed_rel
EOF
}
if [ -n "$OUT" ]; then
    result > "$OUT.tmp"
    mv "$OUT.tmp" "$OUT"
else
    result
fi
