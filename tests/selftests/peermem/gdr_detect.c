// SPDX-License-Identifier: GPL-2.0
/*
 * gdr_detect: the checks by which GPUDirect RDMA users decide whether a GPU peer-memory client is
 * there, made exactly as they make them, one line per check:
 *
 *   <check> found <the path that answered>
 *   <check> not-found -
 *
 * None of them asks the module, reads /proc/modules or parses a file: each tests whether a sysfs
 * path exists, in order, and stops at the first that does. Mirrored from (path: function, the
 * revision read):
 *
 *   nccl            NVIDIA/nccl src/transport/net_ib/gdr.cc: ibGdrSupportInitOnce(), behind
 *                   ncclIbGdrSupport() (master 5067397c; the same body in src/transport/net_ib.cc
 *                   from v2.23.4 to v2.28). Decides NCCL_PTR_CUDA for every IB device and GIN's
 *                   proxy mode.
 *   nccl-gin-gdaki  the same file: ibPeerMemSupportInitOnce(), behind ncclIbPeerMemSupport(), which
 *                   src/transport/net_ib/gin.cc asks for GIN's GDAKI mode ("GDAKI does not support
 *                   nv_peer_mem"), v2.29.7 and later.
 *   nccl-2.22       src/transport/net_ib.cc: ncclIbGdrSupport() of v2.22.3.
 *   nccl-2.21       src/transport/net_ib.cc: ncclIbGdrSupport() of v2.12 to v2.21.5 (its second path,
 *                   memory_peers/nvidia-peermem, is made by no released driver).
 *   ucx             openucx/ucx src/uct/ib/base/ib_md.c: uct_ib_md_open_common() calling
 *                   uct_ib_check_gpudirect_driver() for each path (v1.18.0 to master 9466d104),
 *                   once per IB memory domain, unless UCX_IB_GPU_DIRECT_RDMA=no.
 *   ucx-1.17        the same, v1.17.0 and before: memory_peers/nv_mem only.
 *   nvshmem         NVIDIA/nvshmem src/modules/transport/common/transport_ib_common.cpp:
 *                   nvshmemt_ib_common_nv_peer_mem_available() (3.4.5, 2d7d25f0), which the ibrc,
 *                   ibdevx and ibgda transports ask when DMA-BUF is not usable.
 *   ucc             openucx/ucc src/components/tl/mlx5/tl_mlx5_context.c:
 *                   ucc_tl_mlx5_check_gpudirect_driver_cuda() (master 8263de47): CUDA memory in
 *                   tl/mlx5.
 */
#include <stdio.h>
#include <unistd.h>

#define NV_MEM		"/sys/kernel/mm/memory_peers/nv_mem/version"
#define NV_MEM_NC	"/sys/kernel/mm/memory_peers/nv_mem_nc/version"
#define NVIDIA_PEERMEM_DIR "/sys/kernel/mm/memory_peers/nvidia-peermem/version"
#define NVIDIA_PEERMEM	"/sys/module/nvidia_peermem/version"
#define NV_PEER_MEM	"/sys/module/nv_peer_mem/version"

struct check {
	const char *name;
	const char *paths[4];	/* tried in order; the first that exists answers */
};

static const struct check checks[] = {
	{ "nccl", { NV_MEM, NV_MEM_NC, NVIDIA_PEERMEM } },
	{ "nccl-gin-gdaki", { NVIDIA_PEERMEM } },
	{ "nccl-2.22", { NV_MEM, NV_MEM_NC } },
	{ "nccl-2.21", { NV_MEM, NVIDIA_PEERMEM_DIR } },
	{ "ucx", { NV_MEM, NVIDIA_PEERMEM, NV_PEER_MEM } },
	{ "ucx-1.17", { NV_MEM } },
	{ "nvshmem", { NV_MEM, NVIDIA_PEERMEM_DIR, NVIDIA_PEERMEM } },
	{ "ucc", { NV_MEM, NVIDIA_PEERMEM, NV_PEER_MEM } },
};

int main(void)
{
	for (size_t i = 0; i < sizeof(checks) / sizeof(checks[0]); i++) {
		const char *found = NULL;

		/* Every one of them: access(path, F_OK), nothing else. */
		for (size_t p = 0; p < 4 && checks[i].paths[p] && !found; p++)
			if (access(checks[i].paths[p], F_OK) == 0)
				found = checks[i].paths[p];
		printf("%s %s %s\n", checks[i].name, found ? "found" : "not-found", found ? found : "-");
	}
	return 0;
}
