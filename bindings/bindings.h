/* SPDX-License-Identifier: GPL-2.0 */
/*
 * bindgen input: the C declarations peermem-rs uses. nv-p2p.h comes from the NVIDIA tree named by
 * NVIDIA_SRC, rdma/peer_mem.h from PEER_MEM_INC; neither is part of this repository. No header that
 * defines struct device (pci.h, seq_file.h ...): bindgen would generate everything it holds, even
 * though the type itself is blocklisted (shim.h declares the one kernel function needed instead).
 */
#include <linux/types.h>
#include <linux/scatterlist.h>
#include "nv-p2p.h"
#include <rdma/peer_mem.h>
#include "shim.h"
