#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# The Rust metadata of a stock kernel whose headers package leaves it out.
#
#   packaging/rust-metadata.sh [--kdir KDIR] [--kernelrelease RELEASE] [--source linux-source-X.Y_V.deb]
#
# An out-of-tree Rust module is compiled against the kernel crate's metadata (rust/*.rmeta, the
# libmacros proc-macro, the target json ...). Ubuntu ships it (linux-lib-rust-<release>); Debian's
# kernels with CONFIG_RUST=y (trixie-backports 7.x) do not. This step regenerates it, without touching
# the installed kernel or /lib/modules:
#
#   1. KDIR (default /lib/modules/RELEASE/build, RELEASE default `uname -r`) already has
#      rust/libkernel.rmeta and rust/libmacros.so: nothing to do, KDIR is printed. Where Ubuntu's
#      linux-lib-rust-RELEASE is installed but KDIR/rust does not lead to it (its link dangles on
#      kernels of another source package than "linux": HWE, OEM), a tree of links to KDIR's entries
#      with rust/ leading to the installed package's is made in the cache and printed.
#   2. Otherwise the kernel's exact Debian version comes from its headers (include/generated/
#      utsversion.h: "Debian 7.3.4-1~bpo13+1"); its source is Debian's linux-source-X.Y package of
#      exactly that version: --source FILE.deb, else the installed /usr/src/linux-source-X.Y.tar.xz
#      when dpkg says it is that version, else `apt-get download linux-source-X.Y=VERSION` (a download
#      into the cache, nothing installed).
#   3. The tools must be the ones the kernel's .config records: exactly its rustc (and rust-src),
#      its gcc, binutils, pahole and bindgen versions. Anything else refuses, naming the packages.
#   4. `make modules_prepare` (which builds rust/: the .rmeta, libmacros, the exports) runs out of
#      tree (O=) with the headers' .config and KERNELRELEASE, at low priority.
#   5. Verified, also on every later use of the cache: the regenerated .config, rustc_cfg, autoconf.h
#      and utsrelease.h equal the headers'; every symbol the regenerated rust/ exports (the mangled
#      Rust names carry the crate hash) is in the headers' Module.symvers as a vmlinux export with
#      the same CRC (gendwarfksyms' CRCs with CONFIG_MODVERSIONS, else 0x00000000), and every Rust
#      symbol vmlinux exports there is regenerated. Any difference refuses.
#   6. The regenerated tree gets the headers' own Module.symvers (and vmlinux, for BTF), is cached per
#      kernel release, and its path - the KDIR to build against - is printed on stdout.
#
# Cache: PEERMEM_RUST_METADATA_CACHE (DKMS passes /var/cache/peermem-rs/rust-metadata), else
# $PEERMEM_CACHE/rust-metadata, else ~/.cache/peermem-rs/rust-metadata; one directory per release.
# Overrides: RUSTC, BINDGEN (the compilers to use; they are checked all the same), PEERMEM_JOBS.
set -euo pipefail

say() { printf 'peermem-rs: %s\n' "$*" >&2; }
refuse() {
    printf 'peermem-rs: ERROR: %s\n' "$1" >&2
    shift
    local l
    for l in "$@"; do printf '    %s\n' "$l" >&2; done
    exit 1
}

KDIR=
KREL=
SOURCE=
while [ $# -gt 0 ]; do
    case $1 in
        --kdir) KDIR=$2; shift 2 ;;
        --kernelrelease) KREL=$2; shift 2 ;;
        --source) SOURCE=$2; shift 2 ;;
        -h|--help) sed -n '3,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "$0: unknown argument '$1' (see --help)" >&2; exit 64 ;;
    esac
done
if [ -z "$KDIR" ]; then
    KREL=${KREL:-$(uname -r)}
    KDIR=/lib/modules/$KREL/build
fi
[ -d "$KDIR" ] || refuse "no kernel headers at $KDIR" \
    "install them (Debian: apt install linux-headers-${KREL:-<release>}) or pass --kdir"

# --- 1. metadata already there: KDIR, as given ---------------------------------------------------

if [ -e "$KDIR/rust/libkernel.rmeta" ] && [ -e "$KDIR/rust/libmacros.so" ]; then
    echo "$KDIR"
    exit 0
fi
KDIR=$(cd "$KDIR" && pwd -P)

conf=$KDIR/.config
[ -f "$conf" ] || conf=$KDIR/include/config/auto.conf
[ -f "$conf" ] || refuse "no kernel configuration in $KDIR (.config or include/config/auto.conf)"
kconf() { sed -n "s/^$1=//p" "$conf" | head -n1 | sed 's/^"\(.*\)"$/\1/'; }
krel_file=$(cat "$KDIR/include/config/kernel.release" 2>/dev/null || true)
KREL=${KREL:-$krel_file}
[ -n "$KREL" ] || refuse "cannot tell the release of the kernel in $KDIR (no include/config/kernel.release)"
[ -z "$krel_file" ] || [ "$krel_file" = "$KREL" ] ||
    refuse "$KDIR is the kernel $krel_file, not $KREL"

# --- 1b. Ubuntu's metadata behind a dangling link ------------------------------------------------
# Ubuntu's linux-lib-rust-RELEASE installs the metadata in /usr/src/linux-lib-rust-RELEASE/rust and
# its headers package links KDIR/rust to it. The packaging (debian/scripts/link-lib-rust) names that
# link's target after the kernel's source package, so on kernels of another source package (HWE,
# OEM: linux-hwe-6.17) it is ../linux-hwe-6.17-lib-rust-RELEASE/rust, which no package installs.
# The module is then built against a tree of links: KDIR's entries, with rust/ the package's.
LIB_RUST=${PEERMEM_SRC_TREE:-/usr/src}/linux-lib-rust-$KREL/rust
if [ -e "$LIB_RUST/libkernel.rmeta" ] && [ -e "$LIB_RUST/libmacros.so" ]; then
    # (Also where KDIR/rust is a directory without the metadata.) Made beside its place and moved
    # there, so that a build running at the same time (DKMS's autoinstall and a manual one) never
    # sees it half made.
    linked=${PEERMEM_RUST_METADATA_CACHE:-${PEERMEM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/peermem-rs}/rust-metadata}/$KREL/linked
    mkdir -p "${linked%/*}"
    new=$(mktemp -d "$linked.XXXXXX")
    for e in "$KDIR"/* "$KDIR"/.[!.]*; do
        [ -e "$e" ] || [ -L "$e" ] || continue
        [ "${e##*/}" = rust ] || ln -s "$e" "$new/"
    done
    ln -s "$LIB_RUST" "$new/rust"
    chmod 755 "$new"
    old=$(mktemp -d "$linked.old.XXXXXX")
    [ ! -e "$linked" ] || mv -T "$linked" "$old/tree"
    mv -T "$new" "$linked"
    rm -rf "$old"
    if [ -L "$KDIR/rust" ]; then how="links to $(readlink "$KDIR/rust"), which does not exist"; else how="is missing"; fi
    say "$KDIR/rust $how; the kernel crate's metadata is in $LIB_RUST (linux-lib-rust-$KREL): building against $linked"
    echo "$linked"
    exit 0
fi

[ "$(kconf CONFIG_RUST)" = y ] || refuse "kernel $KREL was built without Rust support (CONFIG_RUST is not set in $conf)" \
    "No Rust module can be built for it (Debian's default 6.12 kernels are such kernels)."
symvers=$KDIR/Module.symvers
[ -s "$symvers" ] || refuse "no Module.symvers in $KDIR: nothing to verify regenerated metadata against"

if [ -L "$KDIR/rust" ] && [ ! -e "$KDIR/rust" ]; then
    refuse "kernel $KREL has CONFIG_RUST=y, but its Rust metadata is missing: $KDIR/rust links to $(readlink "$KDIR/rust"), which does not exist" \
        "Ubuntu: apt install linux-lib-rust-$KREL (it installs ${LIB_RUST%/rust}, which this build finds itself)"
fi
# (sed fails when one of the two is missing, which it may be: a missing version is said below.)
uts=$( { sed -n 's/^#define UTS_VERSION "\(.*\)"/\1/p' "$KDIR/include/generated/utsversion.h" "$KDIR/include/generated/compile.h" 2>/dev/null || true; } | head -n1)
case $uts in
    *Ubuntu*) refuse "kernel $KREL has CONFIG_RUST=y, but its Rust metadata is missing from $KDIR" \
        "Ubuntu ships it: apt install linux-lib-rust-$KREL" ;;
esac
# Debian's UTS_VERSION: "#1 SMP PREEMPT_DYNAMIC Debian 7.3.4-1~bpo13+1 (2026-11-15)".
DEBVER=$(printf '%s\n' "$uts" | sed -n 's/.* Debian \([^ ]*\) (.*/\1/p')
if [ -z "$DEBVER" ] && command -v dpkg-query >/dev/null; then
    hpkg=$(dpkg-query -S "$KDIR" 2>/dev/null | sed -n '1s/:.*//p' || true)
    [ -z "$hpkg" ] || DEBVER=$(dpkg-query -W -f='${Version}' "$hpkg" 2>/dev/null || true)
fi
[ -n "$DEBVER" ] || refuse "kernel $KREL has CONFIG_RUST=y, but its Rust metadata is missing from $KDIR" \
    "and it is not a Debian kernel (UTS_VERSION '$uts'), the only kind whose metadata this step regenerates." \
    "Install your distribution's package that provides $KDIR/rust/*.rmeta, or point KDIR at the kernel's own build tree."
UPSTREAM=${DEBVER%%-*}                 # 7.3.4
SERIES=$(echo "$UPSTREAM" | cut -d. -f1,2)
SRCPKG=linux-source-$SERIES

# --- the tools the kernel records ------------------------------------------------------------------

# Kbuild recomputes the tool-dependent options (CC_VERSION_TEXT, GCC_VERSION, LD_VERSION,
# PAHOLE_VERSION, RUSTC_VERSION_TEXT, ...) from the tools it is given: with other tools the .config
# would silently differ from the kernel's. Check each against the record first, and name the package.
want_rustc=$(kconf CONFIG_RUSTC_VERSION_TEXT)
want_rustc_ver=$(echo "$want_rustc" | awk '{ print $2 }')
want_cc=$(kconf CONFIG_CC_VERSION_TEXT)
want_cc_bin=${want_cc%% *}
want_bindgen=$(kconf CONFIG_BINDGEN_VERSION_TEXT)
want_pahole=$(kconf CONFIG_PAHOLE_VERSION)
want_ld=$(kconf CONFIG_LD_VERSION)
[ "$(kconf CONFIG_CC_IS_GCC)" = y ] || refuse "kernel $KREL was not built with gcc ('$want_cc'): not supported by this step"
[ -n "$want_rustc" ] || refuse "kernel $KREL does not record its rustc (no CONFIG_RUSTC_VERSION_TEXT in $conf)"

# madison PKG PREFIX: the newest version of PKG apt knows that starts with PREFIX, for the messages.
madison() {
    command -v apt-cache >/dev/null || return 0
    apt-cache madison "$1" 2>/dev/null | awk -F' *[|] *' -v p="$2" 'index($2, p) == 1 { print $2 }' | sort -V | tail -n1
}
missing=()
# rustc: the exact version text the kernel was built with, and its rust-src (the kernel builds core).
rustc_text() { "$1" --version 2>/dev/null | head -n1; }
rustc=
seen=
for c in ${RUSTC:-rustc "rustc-${want_rustc_ver%.*}" "/usr/lib/rust-${want_rustc_ver%.*}/bin/rustc"}; do
    p=$(command -v "$c" 2>/dev/null) || continue
    if [ "$(rustc_text "$p")" = "$want_rustc" ]; then rustc=$p; break; fi
    seen="$seen $p: '$(rustc_text "$p")';"
done
if [ -z "$rustc" ]; then
    v=$(madison rustc "$want_rustc_ver+")
    missing+=("'$want_rustc' (found:${seen:- none}). Debian: apt install rustc=${v:-<the $want_rustc_ver package>} rust-src=${v:-<same>}")
elif [ ! -f "$("$rustc" --print sysroot)/lib/rustlib/src/rust/library/core/src/lib.rs" ]; then
    v=$(madison rust-src "$want_rustc_ver+")
    missing+=("the Rust standard library sources of $want_rustc. Debian: apt install rust-src=${v:-<the $want_rustc_ver package>}")
fi
# gcc: the kernel records its full version text ("x86_64-linux-gnu-gcc-14 (Debian 14.2.0-19) 14.2.0").
cc_deb=$(echo "$want_cc" | sed -n 's/.*(Debian \([^)]*\)).*/\1/p')
if ! command -v "$want_cc_bin" >/dev/null || [ "$("$want_cc_bin" --version | head -n1)" != "$want_cc" ]; then
    missing+=("'$want_cc' (found: $(command -v "$want_cc_bin" >/dev/null && "$want_cc_bin" --version | head -n1 || echo none)). Debian: apt install ${want_cc_bin#*-linux-gnu-}${cc_deb:+=$cc_deb}")
fi
cross=$(echo "$want_cc_bin" | sed -n 's/^\(.*-\)gcc[-0-9.]*$/\1/p')
if [ -n "$want_ld" ]; then
    ld_ver=$("${cross}ld" --version 2>/dev/null | head -n1 | sed -n 's/.* \([0-9][0-9.]*\)$/\1/p')
    ld_num=$(echo "${ld_ver:-0}" | awk -F. '{ printf "%d", $1 * 10000 + $2 * 100 + $3 }')
    [ "$ld_num" = "$want_ld" ] || missing+=("binutils with ld $((want_ld / 10000)).$((want_ld / 100 % 100)) (CONFIG_LD_VERSION=$want_ld; found: ${ld_ver:-none}). Debian: apt install binutils")
fi
if [ -n "$want_pahole" ] && [ "$want_pahole" != 0 ]; then
    ph=$(pahole --version 2>/dev/null | tr -d 'v.' || true)
    [ "$ph" = "$want_pahole" ] || {
        pv=$((want_pahole / 100)).$((want_pahole % 100))
        missing+=("pahole $pv (CONFIG_PAHOLE_VERSION=$want_pahole; found: ${ph:-none}). Debian: apt install dwarves$(v=$(madison dwarves "$pv-"); echo "${v:+=$v}")")
    }
fi
bindgen=
for c in ${BINDGEN:-bindgen}; do p=$(command -v "$c" 2>/dev/null) && bindgen=$p; done
if [ -n "$want_bindgen" ] && { [ -z "$bindgen" ] || [ "$("$bindgen" --version 2>/dev/null | head -n1)" != "$want_bindgen" ]; }; then
    bv=$(echo "$want_bindgen" | awk '{ print $2 }')
    missing+=("'$want_bindgen' (found: ${bindgen:-none}). Debian: apt install bindgen$(v=$(madison bindgen "$bv-"); echo "${v:+=$v}") libclang-dev")
fi
for t in make flex bison bc perl; do command -v "$t" >/dev/null || missing+=("$t. Debian: apt install $t"); done
[ ${#missing[@]} = 0 ] || refuse "cannot regenerate the Rust metadata of kernel $KREL: it must be built with the tools that built the kernel" \
    "${missing[@]}" \
    "(also needed: libelf-dev libssl-dev, the build dependencies of kernel scripts)"

# --- the cache -------------------------------------------------------------------------------------

CACHE_ROOT=${PEERMEM_RUST_METADATA_CACHE:-${PEERMEM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/peermem-rs}/rust-metadata}
C=$CACHE_ROOT/$KREL
OBJ=$C/build
# What the cached tree was made from: it is reused only for exactly the same inputs.
key=$(printf '%s\n' "$SRCPKG=$DEBVER" "$want_rustc" "$want_cc" "$(sha256sum < "$conf" | cut -d' ' -f1)")
mkdir -p "$C"
exec 9> "$C/.lock"
flock 9

if [ "$(cat "$C/inputs" 2>/dev/null)" != "$key" ] || [ ! -e "$OBJ/rust/libkernel.rmeta" ]; then
    say "kernel $KREL has CONFIG_RUST=y but no Rust metadata in $KDIR: regenerating it from Debian's"
    say "$SRCPKG $DEBVER with its .config and $want_rustc, into $C (a few minutes, once per kernel)"

    # --- 2. the source package of exactly this version ---
    deb=
    if [ -n "$SOURCE" ]; then
        deb=$SOURCE
    elif [ -f "/usr/src/$SRCPKG.tar.xz" ] &&
         [ "$(dpkg-query -W -f='${Version}' "$SRCPKG" 2>/dev/null || true)" = "$DEBVER" ]; then
        tarball=/usr/src/$SRCPKG.tar.xz
    else
        mkdir -p "$C/debs"
        say "downloading $SRCPKG=$DEBVER (apt-get download: nothing is installed)"
        if (cd "$C/debs" && apt-get download -q $( [ "$(id -u)" = 0 ] && echo -o APT::Sandbox::User=root ) \
                "$SRCPKG=$DEBVER" >&2); then
            deb=$(ls "$C"/debs/"${SRCPKG}_"*.deb | head -n1)
        else
            refuse "the source of kernel $KREL is not available: Debian package $SRCPKG version $DEBVER" \
                "install it (apt install $SRCPKG=$DEBVER, from the suite the kernel came from, e.g." \
                "apt install -t trixie-backports $SRCPKG=$DEBVER), or pass its .deb: --source ${SRCPKG}_${DEBVER}_all.deb"
        fi
    fi
    if [ -n "$deb" ]; then
        [ -f "$deb" ] || refuse "--source $deb: no such file"
        p=$(dpkg-deb -f "$deb" Package) v=$(dpkg-deb -f "$deb" Version)
        [ "$p" = "$SRCPKG" ] && [ "$v" = "$DEBVER" ] ||
            refuse "$deb is $p $v, but kernel $KREL is $SRCPKG $DEBVER: the source must be of exactly that version"
    fi
    # Only now that the source is there: the old tree goes.
    rm -rf "$C/src" "$OBJ" "$C/inputs"
    mkdir -p "$C/src"
    start=$(date +%s)
    if [ -n "$deb" ]; then
        say "unpacking $deb"
        dpkg-deb --fsys-tarfile "$deb" | tar -xO "./usr/src/$SRCPKG.tar.xz" | tar -xJ -C "$C/src" --strip-components=1
    else
        say "unpacking $tarball"
        tar -xJf "$tarball" -C "$C/src" --strip-components=1
    fi
    say "unpacked in $(( $(date +%s) - start )) s"

    # --- 4. modules_prepare, out of tree ---
    arch=$(sed -n 's/^override ARCH = //p' "$KDIR/.kernelvariables" 2>/dev/null)
    [ -n "$arch" ] || { [ "$(kconf CONFIG_X86_64)" = y ] && arch=x86; } ||
        { [ "$(kconf CONFIG_ARM64)" = y ] && arch=arm64; } || refuse "cannot tell the architecture of $KREL"
    mkdir -p "$OBJ"
    cp "$KDIR/.config" "$OBJ/.config"
    # Debian's own make variables of the kernel (CC, CROSS_COMPILE, KERNELRELEASE), which its top
    # Makefile includes from the output tree.
    [ ! -f "$KDIR/.kernelvariables" ] || cp "$KDIR/.kernelvariables" "$OBJ/.kernelvariables"
    # The kernel's make must not see the flags of a calling make (KDIR=, DROPIN=, LLVM= ...).
    kmake=(env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL -u MAKEOVERRIDES nice make -C "$C/src" O="$OBJ"
        ARCH="$arch" CROSS_COMPILE="$cross" CC="$want_cc_bin" HOSTCC="${want_cc_bin#"$cross"}" KERNELRELEASE="$KREL" RUSTC="$rustc" HOSTRUSTC="$rustc"
        BINDGEN="$bindgen" -j"${PEERMEM_JOBS:-$(nproc)}")
    start=$(date +%s)
    "${kmake[@]}" olddefconfig >&2
    "${kmake[@]}" modules_prepare >&2 ||
        refuse "make modules_prepare failed in $OBJ (see above); the kernel scripts also need libelf-dev and libssl-dev"
    say "olddefconfig and modules_prepare: $(( $(date +%s) - start )) s"
    echo "$key" > "$C/inputs"
fi

# --- 5. verify, on every use ---------------------------------------------------------------------

fail=()
for f in include/generated/rustc_cfg include/generated/autoconf.h include/generated/utsrelease.h include/config/kernel.release; do
    [ ! -f "$KDIR/$f" ] || cmp -s "$KDIR/$f" "$OBJ/$f" || fail+=("$f differs from the kernel's")
done
if ! diff <(grep '^CONFIG_' "$KDIR/.config" | sort) <(grep '^CONFIG_' "$OBJ/.config" | sort) > "$C/config.diff"; then
    fail+=(".config differs from the kernel's ($C/config.diff): $(grep -c '^[<>]' "$C/config.diff") lines")
fi

# The regenerated exports, with the CRCs kbuild would give them: gendwarfksyms' (#SYMVER lines in
# the .cmd files) with CONFIG_MODVERSIONS, else none, which modpost records as 0x00000000.
ours=$C/rust-exports
sed -n 's/^EXPORT_SYMBOL_RUST_GPL(\(.*\));$/\1/p' "$OBJ"/rust/exports_*_generated.h | sort -u > "$ours.names"
[ -s "$ours.names" ] || refuse "no Rust exports were regenerated in $OBJ/rust (exports_*_generated.h)"
if [ "$(kconf CONFIG_MODVERSIONS)" = y ]; then
    cat "$OBJ"/rust/.*.o.cmd "$OBJ"/rust/helpers/.*.o.cmd 2>/dev/null | awk '$1 == "#SYMVER" { print $2, $3 }' | sort -u > "$ours.crcs"
else
    : > "$ours.crcs"
fi
awk 'FILENAME == ARGV[1] { crc[$1] = $2; next } { print $1, ($1 in crc ? crc[$1] : "0x00000000") }' "$ours.crcs" "$ours.names" > "$ours"
# name crc of every vmlinux export in Module.symvers.
awk -F'\t' '$3 == "vmlinux" { print $2, $1 }' "$symvers" | sort -u > "$C/vmlinux-exports"
checked=$(wc -l < "$ours")
read -r named crcok < <(awk 'FILENAME == ARGV[1] { k[$1] = $2; next } ($1 in k) { n++; if (k[$1] == $2) c++ } END { print n + 0, c + 0 }' "$C/vmlinux-exports" "$ours")
notfound=$(awk 'FILENAME == ARGV[1] { k[$1]; next } !($1 in k) { print $1 }' "$C/vmlinux-exports" "$ours")
badcrc=$(awk 'FILENAME == ARGV[1] { k[$1] = $2; next } ($1 in k) && k[$1] != $2 { print $1 ": kernel " k[$1] ", regenerated " $2 }' "$C/vmlinux-exports" "$ours")
# The other way round: Rust (v0-mangled, _R) exports of vmlinux that the regenerated crates lack.
extra=$(awk 'FILENAME == ARGV[1] { k[$1]; next } $1 ~ /^_R/ && !($1 in k) { print $1 }' "$ours" "$C/vmlinux-exports")
rust_vmlinux=$(awk '$1 ~ /^_R/' "$C/vmlinux-exports" | wc -l)
# The crates of the mangled names (crate root: Cs<hash>_<length><name>) and how many exports of each.
hashes() {
    awk '$1 ~ /^_R/ {
            s = $1; split("", seen)
            while (match(s, /Cs[0-9A-Za-z]*_[0-9]+[a-z_]+/)) {
                c = substr(s, RSTART, RLENGTH); s = substr(s, RSTART + RLENGTH)
                if (!(c in seen)) { seen[c]; n[c]++ }
            }
        }
        END { for (c in n) { h = c; sub(/_[0-9]+.*/, "", h); m = c; sub(/^[^_]*_[0-9]+/, "", m); print m, h, n[c] } }' "$1" |
        sort | awk '{ printf "%s %s (%d symbols); ", $1, $2, $3 }'
}
say "verified against $symvers: $checked regenerated Rust exports (kernel crate and its dependencies," \
    "bindings, helpers); $named by name in vmlinux's exports, $crcok with the same CRC" \
    "($( [ "$(kconf CONFIG_MODVERSIONS)" = y ] && echo "CONFIG_MODVERSIONS=y: gendwarfksyms CRCs" || echo "CONFIG_MODVERSIONS off: all 0x00000000" ));" \
    "vmlinux exports $rust_vmlinux Rust symbols, $(echo -n "$extra" | grep -c . || true) of them not regenerated"
say "crates (name, hash, exports naming it): $(hashes "$ours")"
[ -z "$notfound" ] || fail+=("$(echo "$notfound" | wc -l) regenerated exports are not exported by the kernel (another crate hash or config), e.g.:" $(echo "$notfound" | head -n5))
[ -z "$badcrc" ] || fail+=("$(echo "$badcrc" | wc -l) exports have another CRC than the kernel's, e.g.:" "$(echo "$badcrc" | head -n5)")
[ -z "$extra" ] || fail+=("$(echo "$extra" | wc -l) Rust exports of the kernel were not regenerated, e.g.:" $(echo "$extra" | head -n5))
[ ${#fail[@]} = 0 ] || refuse "the regenerated Rust metadata in $OBJ does NOT match kernel $KREL ($KDIR): not using it" \
    "${fail[@]}" \
    "A module built against it might not load, or might misbehave: refusing. The source ($SRCPKG $DEBVER)," \
    "the .config and the tools must be exactly the kernel's, and $symvers the kernel's own." \
    "If the headers are right and the cache is suspect: remove $C to regenerate."

# --- 6. the tree to build against: the regenerated one with the kernel's own symbol table ---------

cp "$symvers" "$OBJ/Module.symvers"
[ ! -f "$KDIR/.kernelvariables" ] || cp "$KDIR/.kernelvariables" "$OBJ/.kernelvariables"
[ ! -f "$KDIR/vmlinux" ] || cp "$KDIR/vmlinux" "$OBJ/vmlinux"
say "kernel $KREL: building against the regenerated Rust metadata in $OBJ"
echo "$OBJ"
