# Shared settings for the build-root, kernel and VM scripts. Sourced, not run.
#
# Everything large lives in the cache, outside the repository, so that a clean clone stays small and
# a warm cache makes every later run fast. PEERMEM_CACHE overrides the location.

set -euo pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PEERMEM_CACHE=${PEERMEM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/peermem-rs}
# The Debian trixie build root: clang/lld/llvm 19, rustc 1.85 with its rust-src, bindgen, QEMU 10.
BUILD_ROOT=$PEERMEM_CACHE/root
# Everything else (downloaded packages, unpacked sources, kernel builds) lives here. It is bind-mounted
# into the build root at the same path, so paths mean the same thing inside and outside.
CACHE_WORK=$PEERMEM_CACHE/work
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

# The LLVM suffix used for every kernel and module build (make LLVM=-19).
LLVM_SUFFIX=-19

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

need_root() {
    [ "$(id -u)" = 0 ] || die "this step needs root (it uses chroot and bind mounts); run it as root"
}
