#!/usr/bin/env bash
# Build (once) the Debian trixie build root that holds the whole kernel toolchain, and fetch the
# Debian source packages the build needs. Idempotent: a finished step leaves a stamp and is skipped.
#
# Why a trixie root: a Rust kernel with KASAN must be built with clang (config RUST depends on
# !KASAN || CC_IS_CLANG) and Linux 7.3 wants LLVM >= 17; bookworm has clang 14. Trixie has clang 19,
# and rustc 1.85.1 with its matching rust-src and bindgen 0.71, so one toolchain builds both the
# kernel and our module and the "exact rustc" rule holds by construction.
#
# The host is never touched beyond two bookworm packages (below): no apt sources are added to it.
source "$(dirname "$0")/common.sh"
need_root

# libdw-dev: scripts/gendwarfksyms, which computes the symbol versions of the Ubuntu-style kernel.
ROOT_PACKAGES=(
    clang-19 lld-19 llvm-19 libclang-19-dev rustc rust-src bindgen
    make flex bison bc libelf-dev libssl-dev cpio kmod xz-utils zstd lz4
    gcc libc6-dev python3 busybox-static qemu-system-x86 ca-certificates
    dkms rsync rustfmt rust-clippy libdw-dev
)
# Source packages unpacked into the cache: name and suite.
SOURCE_PACKAGES=(
    "linux-source-7.3 trixie-backports"
    "linux-source-6.12 trixie"
    "nvidia-open-kernel-source trixie"
    "nvidia-tesla-535-kernel-source trixie"
    "nvidia-tesla-470-kernel-source sid"
)

stamp_dir=$PEERMEM_CACHE/stamps
mkdir -p "$stamp_dir" "$CACHE_WORK"

# The only packages installed on the host itself, both from the host's own (bookworm) sources:
# debootstrap builds the root; libclang lets the host-side `cargo test` run bindgen for its ABI checks.
HOST_PACKAGES=(debootstrap libclang-14-dev)
missing=()
for p in "${HOST_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    log "installing on the host from its own apt sources: ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null || {
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    } || die "apt-get install ${missing[*]} failed"
fi

if [ ! -e "$stamp_dir/debootstrap" ]; then
    log "debootstrap trixie into $BUILD_ROOT"
    rm -rf "$BUILD_ROOT"
    debootstrap --variant=minbase --keyring=/usr/share/keyrings/debian-archive-keyring.gpg \
        trixie "$BUILD_ROOT" "$DEBIAN_MIRROR" >"$PEERMEM_CACHE/debootstrap.log" 2>&1 ||
        { tail -20 "$PEERMEM_CACHE/debootstrap.log"; die "debootstrap failed"; }
    touch "$stamp_dir/debootstrap"
fi

# The build root's own apt sources (the host's stay untouched). Default release trixie; the other
# suites are there only for the source packages fetched below.
cat > "$BUILD_ROOT/etc/apt/sources.list" <<APT
deb $DEBIAN_MIRROR trixie main contrib non-free
deb $DEBIAN_MIRROR trixie-backports main contrib non-free
deb $DEBIAN_MIRROR sid main contrib non-free
APT
cat > "$BUILD_ROOT/etc/apt/preferences.d/peermem" <<APT
Package: *
Pin: release n=trixie
Pin-Priority: 900

Package: *
Pin: release n=trixie-backports
Pin-Priority: 100

Package: *
Pin: release n=sid
Pin-Priority: 50
APT
# The reachable mirror can lag: sid's Release file has been seen past its Valid-Until date.
cat > "$BUILD_ROOT/etc/apt/apt.conf.d/90peermem" <<APT
APT::Install-Recommends "false";
Acquire::Check-Valid-Until "false";
APT

want="${ROOT_PACKAGES[*]}"
if [ "$(cat "$stamp_dir/packages" 2>/dev/null)" != "$want" ]; then
    log "installing the toolchain into the build root"
    IN_ROOT_BOOTSTRAP=1 "$REPO_ROOT/tests/infra/in-root" bash -c "
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq && apt-get install -y -qq $want >/dev/null" ||
        die "apt-get install in the build root failed"
    echo "$want" > "$stamp_dir/packages"
fi

mkdir -p "$CACHE_WORK/debs" "$CACHE_WORK/src"
for entry in "${SOURCE_PACKAGES[@]}"; do
    read -r pkg suite <<< "$entry"
    [ -e "$stamp_dir/src-$pkg" ] && continue
    log "fetching $pkg from $suite"
    "$REPO_ROOT/tests/infra/in-root" bash -c "
        set -e; cd '$CACHE_WORK/debs'
        ver=\$(apt-cache madison $pkg | awk -v s=$suite '\$0 ~ \" \"s\"/\" {print \$3; exit}')
        [ -n \"\$ver\" ] || { echo 'no $pkg in $suite' >&2; exit 1; }
        apt-get download -qq -o APT::Sandbox::User=root $pkg=\$ver
        rm -rf '$CACHE_WORK/src/$pkg'; mkdir -p '$CACHE_WORK/src/$pkg'
        dpkg -x ${pkg}_*.deb '$CACHE_WORK/src/$pkg'
        # The packages carry their sources as tarballs; unpack them next to the package contents.
        for t in '$CACHE_WORK/src/$pkg'/usr/src/*.tar.*; do tar -xf \"\$t\" -C '$CACHE_WORK/src/$pkg'; done
        echo \$ver > '$CACHE_WORK/src/$pkg/.version'
    " || die "fetching $pkg failed"
    touch "$stamp_dir/src-$pkg"
done

# Debian's stock kernels that VM variants boot (tests/vm/topology.toml [kernels]): their packages of
# exactly the version named there. (The Ubuntu-style kernel, version "ubuntu", and Linux 6.12 LTS,
# version "built", are built by the run.)
python3 -c '
import sys, tomllib
for k in tomllib.load(open(sys.argv[1], "rb")).get("kernels", {}).values():
    if k["version"] not in ("ubuntu", "built"):
        print(k["release"], k["version"])' "$REPO_ROOT/tests/vm/topology.toml" |
while read -r rel ver; do
    "$REPO_ROOT/tests/infra/stock-kernel.sh" fetch "$rel" "$ver"
done

"$REPO_ROOT/tests/infra/in-root" bash -c '
    clang-19 --version | head -1; rustc --version; bindgen --version; qemu-system-x86_64 --version | head -1' |
    sed 's/^/  /' >&2
log "build root ready: $BUILD_ROOT"
