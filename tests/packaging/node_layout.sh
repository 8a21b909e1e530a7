# SPDX-License-Identifier: GPL-2.0
# The NVIDIA driver's and MLNX_OFED's trees as their packages lay them out on a GPU node, in one
# place for the two users: tests/packaging/host_tests.sh (fake nodes below a directory) and
# tests/infra/stock-kernel.sh (the overlay root of a stock-kernel boot, ROOT empty). Sourced by bash.
# The stand-ins stand in for the modules: their Module.symvers for nvidia.ko's and ib_core's, the
# host stand-in's rdma/peer_mem.h for MLNX_OFED's.

# layout_nvidia_src ROOT TREE VERSION: the open modules' source at ROOT/usr/src/nvidia-VERSION, where
# the driver's DKMS packages put it: a link to TREE (a cached tree: nothing writes below it).
layout_nvidia_src() {
    mkdir -p "$1/usr/src"
    ln -s "$2" "$1/usr/src/nvidia-$3"
}

# layout_nvidia_dkms ROOT VERSION SYMVERS: DKMS's tree of that driver's build: source ->
# /usr/src/nvidia-VERSION, and build/Module.symvers, the symbols its build left (SYMVERS).
layout_nvidia_dkms() {
    mkdir -p "$1/var/lib/dkms/nvidia/$2/build"
    ln -s "$1/usr/src/nvidia-$2" "$1/var/lib/dkms/nvidia/$2/source"
    cp "$3" "$1/var/lib/dkms/nvidia/$2/build/"
}

# layout_ofed DIR PEER_MEM_H SYMVERS: an MLNX_OFED kernel tree at DIR (/usr/src/ofa_kernel/<kernel>
# and its variants): include/rdma/peer_mem.h, and the host's Module.symvers beside include/.
layout_ofed() {
    mkdir -p "$1/include/rdma"
    cp "$2" "$1/include/rdma/peer_mem.h"
    cp "$3" "$1/Module.symvers"
}
