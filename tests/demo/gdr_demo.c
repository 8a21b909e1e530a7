// SPDX-License-Identifier: GPL-2.0
/*
 * GPUDirect RDMA, step by step, in the test VM: what `make demo` shows.
 *
 * The "GPU" is the NVIDIA stand-in (GPU memory = a PCI BAR), the "NIC" the peer-memory host stand-in
 * (a DMA engine), and between them peermem-rs, the peer-memory client that lets the NIC reach GPU
 * memory. This program plays an RDMA application: cudaMalloc, ibv_reg_mr, RDMA write and read,
 * cudaFree, ibv_dereg_mr, and says at each step what happened underneath.
 *
 *   gdr_demo        (peermem_rs, peer_mem_host and nvidia_p2p_standin loaded)
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpumem.h"
#include "pmh.h"

#define GPU_PAGE NVP2P_GPU_PAGE_SIZE

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	fflush(stdout);
}

static void die(const char *what, int err)
{
	printf("FAILED: %s: %s\n", what, strerror(err < 0 ? -err : err));
	exit(1);
}

static void show_stats(void)
{
	char buf[4096];

	say("\n  peermem-rs statistics (/sys/kernel/debug/peermem_rs/stats):\n");
	if (read_text("/sys/kernel/debug/peermem_rs/stats", buf, sizeof(buf)) == 0) {
		for (char *l = strtok(buf, "\n"); l; l = strtok(NULL, "\n"))
			if (strncmp(l, "error_", 6) || strcmp(strchr(l, ' '), " 0"))
				say("    %s\n", l);
	}
}

int main(void)
{
	int invalidating = (int)read_number("/sys/module/peermem_rs/parameters/persistent_api_support") == 0;
	const char *client = "nv_mem";
	const size_t size = 1 << 20;
	struct pmh_sge sges[4];
	struct pmh_query_mr q;
	struct pmh_reg_mr mr;
	struct nvp2p_info info;
	char msg[160], back[160], version[32] = "?";
	__u64 handle;
	int gpu, nic, ret;
	char *va;

	read_text("/sys/kernel/mm/memory_peers/nv_mem/version", version, sizeof(version));
	say("\n=== peermem-rs %s in %s mode (persistent_api_support=%d) ===\n", version,
	    invalidating ? "invalidating" : "persistent", !invalidating);
	if (invalidating)
		say("  Clients registered with ib_core: nv_mem (invalidating, asked first) and nv_mem_nc\n"
		    "  (persistent, for buffers that cannot be invalidated).\n");
	else
		say("  Client registered with ib_core: nv_mem (persistent pins: memory outlives cudaFree\n"
		    "  until deregistered; what NCCL and most applications use).\n");

	gpu = gpu_open();
	nic = pmh_open();
	if (gpu < 0 || nic < 0)
		die("opening the stand-ins", gpu < 0 ? gpu : nic);

	va = gpu_alloc(gpu, size, &handle);
	if (!va)
		die("cudaMalloc", errno);
	gpu_info(gpu, handle, &info);
	say("\n1. cudaMalloc(1 MiB) -> GPU virtual address %p\n"
	    "   (GPU memory is the GPU's BAR: bus address 0x%llx; the CPU can map it, but it has no\n"
	    "   struct pages, so the kernel cannot pin it like ordinary memory)\n",
	    va, (unsigned long long)info.phys_addr);

	ret = pmh_reg(nic, va, size, PMH_REG_WRITE, &mr);
	if (ret)
		die("ibv_reg_mr", ret);
	pmh_query(nic, mr.handle, &q, sges, 4);
	say("\n2. ibv_reg_mr(GPU memory): ordinary pinning fails, so ib_core asks its peer-memory clients.\n"
	    "   '%s' (peermem-rs) recognised the range, pinned it through %s and had\n"
	    "   it DMA-mapped for the NIC: %u SG entries of %llu KiB, core_context %llu%s.\n",
	    mr.client, invalidating ? "nvidia_p2p_get_pages (with a free callback)" :
	    "nvidia_p2p_get_pages_persistent (one pin: acquire's probe pin is kept for the registration)",
	    mr.nmap, (unsigned long long)mr.page_size / 1024, (unsigned long long)mr.core_context,
	    invalidating ? " (the id the host will be asked to invalidate)" : " (none: never invalidated)");
	for (unsigned int i = 0; i < 2 && i < q.nmap; i++)
		say("   SG[%u]: DMA address 0x%llx, %llu bytes%s\n", i, (unsigned long long)sges[i].dma_addr,
		    (unsigned long long)sges[i].length,
		    sges[i].dma_addr == info.phys_addr + i * GPU_PAGE ? " (= the GPU BAR address: no IOMMU)" : " (an IOVA)");
	client = mr.client;

	snprintf(msg, sizeof(msg), "Hello GPU, this is the NIC (RDMA write through peermem-rs, pid %d)", getpid());
	ret = pmh_dma(nic, mr.handle, 4096, msg, sizeof(msg), PMH_DMA_TO_MR);
	if (ret)
		die("RDMA write", ret);
	say("\n3. RDMA write: the NIC's DMA engine copied a message from host memory straight into GPU\n"
	    "   memory (device to device, no CPU copy). The CPU reads it back through the GPU's BAR:\n"
	    "   \"%s\" -> %s\n", va + 4096, memcmp(va + 4096, msg, sizeof(msg)) ? "MISMATCH" : "matches");

	snprintf(va + 8192, 160, "Hello NIC, this is the GPU (RDMA read through peermem-rs)");
	ret = pmh_dma(nic, mr.handle, 8192, back, sizeof(back), PMH_DMA_FROM_MR);
	if (ret)
		die("RDMA read", ret);
	say("\n4. RDMA read: the GPU side wrote a reply into GPU memory; the NIC read it into host memory:\n"
	    "   \"%s\" -> %s\n", back, memcmp(back, va + 8192, sizeof(back)) ? "MISMATCH" : "matches");

	ret = gpu_free(gpu, handle);
	if (ret)
		die("cudaFree", ret);
	pmh_query(nic, mr.handle, &q, NULL, 0);
	if (invalidating) {
		ret = pmh_dma(nic, mr.handle, 0, msg, 64, PMH_DMA_TO_MR);
		say("\n5. cudaFree while still registered: the NVIDIA driver called peermem-rs's free callback,\n"
		    "   which asked ib_core to invalidate the MR *before* the driver released the memory.\n"
		    "   The MR is now %s (invalidations: %u); an RDMA write to it fails: %s, as with a\n"
		    "   revoked memory key. (num_free_callbacks of %s: %lld)\n",
		    q.state == PMH_MR_INVALIDATED ? "invalidated" : "STILL MAPPED", q.invalidations,
		    ret ? strerror(-ret) : "it did NOT fail", client, peer_stat(client, "num_free_callbacks"));
	} else {
		ret = pmh_dma(nic, mr.handle, 0, msg, 64, PMH_DMA_TO_MR);
		say("\n5. cudaFree while still registered: the pin is persistent, so the memory stays alive and\n"
		    "   usable by the NIC (RDMA write now: %s) until the MR is deregistered.\n",
		    ret ? strerror(-ret) : "works");
	}

	ret = pmh_dereg(nic, mr.handle);
	if (ret)
		die("ibv_dereg_mr", ret);
	say("\n6. ibv_dereg_mr: peermem-rs %s, and released the registration.\n",
	    invalidating ? "knew the driver had already torn the pages down and did not touch them" :
	    "unpinned the pages");
	say("   memory_peers/%s: num_alloc_mrs %lld, num_dealloc_mrs %lld, num_reg_bytes %lld\n", client,
	    peer_stat(client, "num_alloc_mrs"), peer_stat(client, "num_dealloc_mrs"),
	    peer_stat(client, "num_reg_bytes"));
	show_stats();
	close(nic);
	close(gpu);
	return 0;
}
