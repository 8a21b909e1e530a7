// SPDX-License-Identifier: GPL-2.0
/*
 * The data path: the NIC (QEMU's edu) writes bytes into GPU memory (the ivshmem BAR) at the DMA
 * addresses the peer client mapped, and reads them back, which the CPU checks through the "CUDA"
 * mapping of the same BAR. Without an IOMMU those addresses are the BAR's bus addresses (device
 * to device DMA); with one they are IOVAs mapped for the NIC.
 */
#include "kselftest_harness.h"
#include "pmh_fixture.h"

#define MAX_SGES 16

/* Ranges that cross a GPU page boundary at an odd offset, so chunks split at SG entries. */
#define R_OFF	(GPU_PAGE - 3000)
#define R_LEN	10000

static void round_trip(struct __test_metadata *_metadata, int pmh, __u64 mr, unsigned char *base,
		       size_t len, unsigned int seed)
{
	unsigned char *buf = malloc(len), *back = malloc(len);
	unsigned char before = base[-1], after = base[len];
	long long ops = pmh_counter("dma_ops");

	ASSERT_TRUE(buf && back);
	/* RDMA write: host buffer -> NIC -> GPU memory; the CPU sees it in the BAR. */
	fill_pattern(buf, len, seed);
	ASSERT_EQ(0, pmh_dma(pmh, mr, 0, buf, len, PMH_DMA_TO_MR));
	ASSERT_EQ(0, memcmp(base, buf, len));
	ASSERT_EQ(before, base[-1]);
	ASSERT_EQ(after, base[len]);
	/* RDMA read: what the CPU put into GPU memory comes out through the NIC. */
	fill_pattern(base, len, seed + 1);
	ASSERT_EQ(0, pmh_dma(pmh, mr, 0, back, len, PMH_DMA_FROM_MR));
	ASSERT_EQ(0, memcmp(base, back, len));
	ASSERT_NE(0, memcmp(buf, back, len));
	/* Two edu transfers per chunk of at most 4096 bytes, each way. */
	ASSERT_LE(ops + 4 * (((long long)len + 4095) / 4096), pmh_counter("dma_ops"));
	free(buf);
	free(back);
}

TEST_F_TIMEOUT(pmh, nic_writes_and_reads_gpu_memory, 180)
{
	struct pmh_sge sges[MAX_SGES];
	struct nvp2p_info info;
	struct pmh_query_mr q;
	struct pmh_reg_mr reg;
	unsigned char *va;
	__u64 handle;
	unsigned int i;

	LOAD("", "names=gpu");
	ASSERT_EQ(iommu_present(), pmh_counter("nic_iommu"));
	va = GPU_ALLOC(4 * GPU_PAGE, &handle);
	ASSERT_EQ(0, gpu_info(self->gpu, handle, &info));
	memset(va, 0x11, 4 * GPU_PAGE);
	ASSERT_EQ(0, pmh_reg(self->pmh, va + R_OFF, R_LEN, PMH_REG_WRITE, &reg));
	ASSERT_STREQ("gpu", reg.client);
	ASSERT_EQ(2, reg.nmap);
	ASSERT_EQ(0, pmh_query(self->pmh, reg.handle, &q, sges, MAX_SGES));
	for (i = 0; i < q.nmap; i++) {
		/* The GPU page holding SG entry i, less the trimmed head of the first. */
		unsigned long long page = info.phys_addr + (i + R_OFF / GPU_PAGE) * GPU_PAGE;
		unsigned long long head = i ? 0 : (R_OFF & ~4095ULL) % GPU_PAGE;

		if (iommu_present()) {
			ASSERT_NE(page + head, sges[i].dma_addr) TH_LOG("entry %u is no IOVA", i);
		} else {
			ASSERT_EQ(page + head, sges[i].dma_addr) TH_LOG("entry %u", i);
		}
	}
	round_trip(_metadata, self->pmh, reg.handle, va + R_OFF, R_LEN, 21);
	ASSERT_EQ(0, pmh_dereg(self->pmh, reg.handle));
	ASSERT_EQ(0, gpu_free(self->gpu, handle));
	ASSERT_NO_LEAKS();
}

TEST_F_TIMEOUT(pmh, nic_uses_ordinary_memory_alike, 180)
{
	struct pmh_reg_mr reg;
	unsigned char *mem;

	LOAD("", NULL);
	mem = mmap(NULL, 4 * GPU_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, mem);
	memset(mem, 0x22, 4 * GPU_PAGE);
	ASSERT_EQ(0, pmh_reg(self->pmh, mem + R_OFF, R_LEN, PMH_REG_WRITE, &reg));
	ASSERT_STREQ("", reg.client);
	round_trip(_metadata, self->pmh, reg.handle, mem + R_OFF, R_LEN, 31);
	ASSERT_EQ(0, pmh_dereg(self->pmh, reg.handle));
	munmap(mem, 4 * GPU_PAGE);
}

TEST_F_TIMEOUT(pmh, persistent_pin_outlives_free, 180)
{
	unsigned char buf[3000], back[3000];
	struct nvp2p_info info;
	struct pmh_query_mr q;
	struct pmh_reg_mr reg;
	unsigned char *va;
	__u64 handle;

	/* A client that does not invalidate pins persistently: cudaFree does not touch the MR. */
	LOAD("", "names=plain invalidating=0");
	va = GPU_ALLOC(2 * GPU_PAGE, &handle);
	ASSERT_EQ(0, pmh_reg(self->pmh, va + 100, GPU_PAGE, PMH_REG_WRITE | PMH_REG_NO_INVALIDATE,
			     &reg));
	ASSERT_STREQ("plain", reg.client);
	round_trip(_metadata, self->pmh, reg.handle, va + 100, sizeof(buf), 41);
	ASSERT_EQ(0, gpu_free(self->gpu, handle));
	ASSERT_EQ(0, tc_counter(0, "free_callbacks"));
	ASSERT_EQ(0, pmh_query(self->pmh, reg.handle, &q, NULL, 0));
	ASSERT_EQ(PMH_MR_MAPPED, q.state);
	/* The memory lives on behind the pin: the NIC still writes and reads it. */
	ASSERT_EQ(0, gpu_info(self->gpu, handle, &info));
	ASSERT_EQ(1, info.freed);
	fill_pattern(buf, sizeof(buf), 43);
	ASSERT_EQ(0, pmh_dma(self->pmh, reg.handle, 500, buf, sizeof(buf), PMH_DMA_TO_MR));
	ASSERT_EQ(0, pmh_dma(self->pmh, reg.handle, 500, back, sizeof(back), PMH_DMA_FROM_MR));
	ASSERT_EQ(0, memcmp(buf, back, sizeof(buf)));
	ASSERT_EQ(0, pmh_dereg(self->pmh, reg.handle));
	ASSERT_NO_LEAKS();
}

TEST_HARNESS_MAIN
