// SPDX-License-Identifier: GPL-2.0
/*
 * C shim of peermem-rs; see shim.h for why it exists. Parameter names and meanings follow
 * nvidia-peermem, so that existing modprobe.d options keep working.
 */
#include <linux/module.h>
#include <linux/moduleparam.h>
#include "shim.h"

#ifndef PEERMEM_VERSION
#error "PEERMEM_VERSION must be defined by the build"
#endif

int peermem_param_persistent_api_support = 1;
module_param_named(persistent_api_support, peermem_param_persistent_api_support, int, 0444);
MODULE_PARM_DESC(persistent_api_support,
		 "1 [default]: one persistent client 'nv_mem' (no invalidation); "
		 "0: an invalidating client 'nv_mem' plus a persistent client 'nv_mem_nc'");

int peermem_param_peerdirect_support;
module_param_named(peerdirect_support, peermem_param_peerdirect_support, int, 0444);
MODULE_PARM_DESC(peerdirect_support,
		 "0 [default]: the invalidating client asks the host not to unmap on invalidation; "
		 "1: legacy client, for MLNX_OFED 4.9 LTS hosts");

const char peermem_param_version[] = PEERMEM_VERSION;
MODULE_VERSION(PEERMEM_VERSION);

/* Load the providers first when modprobe is used: the NVIDIA driver and the peer-memory host. */
MODULE_SOFTDEP("pre: nvidia ib_core ib_uverbs");
