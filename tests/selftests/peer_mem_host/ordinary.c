// SPDX-License-Identifier: GPL-2.0
/*
 * The ordinary memory path: memory with struct pages is pinned and mapped by the host itself and
 * never reaches a peer client; the NIC moves bytes in and out of it. Pinning goes a page of page
 * pointers at a time, as __ib_umem_get does, so huge lengths reach the peers without a large
 * allocation; the checks before pinning refuse what MLNX refuses without asking peers. Also the
 * errors of the userspace interface.
 */
#include "kselftest_harness.h"
#include "pmh_fixture.h"

#define SIZE (5 * 4096)

TEST_F_TIMEOUT(pmh, anonymous_memory_without_clients, 120)
{
	unsigned char *mem, *buf, *back;
	struct pmh_query_mr q;
	struct pmh_reg_mr reg;
	struct pmh_sge sges[16];
	unsigned long long len = 0;
	unsigned int i;

	LOAD("", NULL);
	mem = mmap(NULL, SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, mem);
	memset(mem, 0x5a, SIZE);
	buf = malloc(SIZE);
	back = malloc(SIZE);
	ASSERT_TRUE(buf && back);

	/* Unaligned start and end: the NIC works in the middle of pages. */
	ASSERT_EQ(0, pmh_reg(self->pmh, mem + 100, SIZE - 300, PMH_REG_WRITE, &reg));
	ASSERT_STREQ("", reg.client);
	ASSERT_EQ(0, reg.page_size);
	ASSERT_EQ(NO_INVALIDATION_ID, reg.core_context);
	ASSERT_LE(1, reg.nmap);
	ASSERT_EQ(1, pmh_counter("live_ordinary_mrs"));
	ASSERT_EQ(0, pmh_counter("live_peer_mrs"));

	ASSERT_EQ(0, pmh_query(self->pmh, reg.handle, &q, sges, 16));
	ASSERT_EQ(PMH_MR_MAPPED, q.state);
	ASSERT_EQ(reg.nmap, q.nmap);
	ASSERT_EQ((uintptr_t)mem + 100, q.addr);
	ASSERT_EQ(0, q.invalidations);
	for (i = 0; i < q.nmap && i < 16; i++)
		len += sges[i].length;
	/* Whole pages of the range. */
	ASSERT_EQ(SIZE, len);

	/* RDMA write across page boundaries, then read back through the CPU and through the NIC. */
	fill_pattern(buf, 6000, 1);
	ASSERT_EQ(0, pmh_dma(self->pmh, reg.handle, 3000, buf, 6000, PMH_DMA_TO_MR));
	ASSERT_EQ(0, memcmp(mem + 100 + 3000, buf, 6000));
	ASSERT_EQ(0x5a, mem[100 + 2999]);
	ASSERT_EQ(0x5a, mem[100 + 9000]);
	fill_pattern(mem + 100 + 12000, 4000, 2);
	ASSERT_EQ(0, pmh_dma(self->pmh, reg.handle, 12000, back, 4000, PMH_DMA_FROM_MR));
	ASSERT_EQ(0, memcmp(mem + 100 + 12000, back, 4000));

	ASSERT_EQ(0, pmh_dereg(self->pmh, reg.handle));
	ASSERT_EQ(0, pmh_counter("live_mrs"));
	ASSERT_EQ(-ENOENT, pmh_dereg(self->pmh, reg.handle));
	munmap(mem, SIZE);
	free(buf);
	free(back);
}

TEST_F_TIMEOUT(pmh, ordinary_memory_never_reaches_clients, 120)
{
	struct pmh_reg_mr reg;
	char *mem;

	/* A client that claims everything is never asked about memory that pins. */
	LOAD("", "names=greedy");
	ASSERT_EQ(0, tc_set(0, "acquire_mode", ACQ_ALWAYS));
	mem = mmap(NULL, SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, mem);
	ASSERT_EQ(0, pmh_reg(self->pmh, mem, SIZE, PMH_REG_WRITE, &reg));
	ASSERT_STREQ("", reg.client);
	ASSERT_EQ(0, tc_counter(0, "acquire_calls"));
	ASSERT_EQ(0, peer_stat("greedy", "num_alloc_mrs"));
	ASSERT_EQ(0, pmh_dereg(self->pmh, reg.handle));
	munmap(mem, SIZE);
}

TEST_F_TIMEOUT(pmh, nobody_claims_gives_pinning_error, 120)
{
	struct pmh_reg_mr reg;
	char *hole;

	LOAD("", "names=a,b");
	ASSERT_EQ(0, tc_set(0, "acquire_mode", ACQ_NEVER));
	ASSERT_EQ(0, tc_set(1, "acquire_mode", ACQ_NEGATIVE));
	/* An address range with nothing mapped: pinning fails with EFAULT, nobody claims. */
	hole = mmap(NULL, SIZE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, hole);
	munmap(hole, SIZE);
	ASSERT_EQ(-EFAULT, pmh_reg(self->pmh, hole, SIZE, PMH_REG_WRITE, &reg));
	/* Both were asked, in order; a negative answer is "not mine". */
	ASSERT_EQ(1, tc_counter(0, "acquire_calls"));
	ASSERT_EQ(1, tc_counter(1, "acquire_calls"));
	ASSERT_EQ(0, tc_counter(0, "get_pages_calls"));
	ASSERT_EQ(0, tc_counter(1, "get_pages_calls"));
	ASSERT_EQ(0, pmh_counter("live_mrs"));
}

TEST_F_TIMEOUT(pmh, read_only_mr_refuses_rdma_write, 120)
{
	struct pmh_reg_mr reg;
	char buf[64];
	char *mem;

	LOAD("", NULL);
	mem = mmap(NULL, SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, mem);
	memset(mem, 7, SIZE);
	ASSERT_EQ(0, pmh_reg(self->pmh, mem, SIZE, 0, &reg));
	ASSERT_EQ(-EACCES, pmh_dma(self->pmh, reg.handle, 0, buf, sizeof(buf), PMH_DMA_TO_MR));
	ASSERT_EQ(0, pmh_dma(self->pmh, reg.handle, 0, buf, sizeof(buf), PMH_DMA_FROM_MR));
	ASSERT_EQ(7, buf[63]);
	ASSERT_EQ(0, pmh_dereg(self->pmh, reg.handle));
	munmap(mem, SIZE);
}

TEST_F_TIMEOUT(pmh, interface_errors, 120)
{
	struct pmh_query_mr q;
	struct pmh_reg_mr reg;
	char buf[64];
	char *mem;
	int other;

	LOAD("", NULL);
	mem = mmap(NULL, SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, mem);
	ASSERT_EQ(-EINVAL, pmh_reg(self->pmh, mem, 0, PMH_REG_WRITE, &reg));
	ASSERT_EQ(-EINVAL, pmh_reg(self->pmh, mem, SIZE, 1u << 7, &reg));
	ASSERT_EQ(0, pmh_reg(self->pmh, mem, SIZE, PMH_REG_WRITE, &reg));
	/* Beyond the MR, zero length, unknown direction, unknown handle. */
	ASSERT_EQ(-EINVAL, pmh_dma(self->pmh, reg.handle, SIZE - 10, buf, 64, PMH_DMA_FROM_MR));
	ASSERT_EQ(-EINVAL, pmh_dma(self->pmh, reg.handle, 0, buf, 0, PMH_DMA_FROM_MR));
	ASSERT_EQ(-EINVAL, pmh_dma(self->pmh, reg.handle, 0, buf, 64, 3));
	ASSERT_EQ(-ENOENT, pmh_dma(self->pmh, reg.handle + 1, 0, buf, 64, PMH_DMA_FROM_MR));
	ASSERT_EQ(-ENOENT, pmh_query(self->pmh, reg.handle + 1, &q, NULL, 0));
	ASSERT_EQ(-EFAULT, pmh_dma(self->pmh, reg.handle, 0, NULL, 64, PMH_DMA_TO_MR));
	/* MRs belong to the file they were registered through. */
	other = pmh_open();
	ASSERT_LE(0, other);
	ASSERT_EQ(-ENOENT, pmh_query(other, reg.handle, &q, NULL, 0));
	ASSERT_EQ(-ENOENT, pmh_dereg(other, reg.handle));
	close(other);
	ASSERT_EQ(0, pmh_dereg(self->pmh, reg.handle));
	munmap(mem, SIZE);
}

#define TIB (1ULL << 40)

TEST_F_TIMEOUT(pmh, huge_lengths_reach_the_peers, 120)
{
	int warnings = kmsg_count("WARNING:");
	char what[64];
	__u64 handle;
	char *va, *mem;

	/*
	 * 1 TiB and 10 TiB from GPU memory: the first chunk of pinning fails at once (VM_PFNMAP)
	 * and the client is asked about the whole length, which its probe finds is not GPU memory
	 * of this process. No allocation grows with the length (kvmalloc would warn above 2 GiB).
	 */
	LOAD("", "names=gpu");
	va = GPU_ALLOC(GPU_PAGE, &handle);
	ASSERT_EQ(-EFAULT, pmh_reg(self->pmh, va, TIB, PMH_REG_WRITE, NULL));
	ASSERT_EQ(1, tc_counter(0, "acquire_calls"));
	snprintf(what, sizeof(what), "acquire addr=%#lx size=%#llx ", (unsigned long)va, TIB);
	ASSERT_EQ(1, tc_log_count(what));
	ASSERT_EQ(-EFAULT, pmh_reg(self->pmh, va, 10 * TIB, PMH_REG_WRITE, NULL));
	ASSERT_EQ(2, tc_counter(0, "acquire_calls"));
	snprintf(what, sizeof(what), "size=%#llx ", 10 * TIB);
	ASSERT_EQ(1, tc_log_count(what));
	/* A client that claims it gets get_pages for all of it; the driver refuses the pin. */
	ASSERT_EQ(0, tc_set(0, "acquire_mode", ACQ_ALWAYS));
	ASSERT_EQ(-EINVAL, pmh_reg(self->pmh, va, 10 * TIB, PMH_REG_WRITE, NULL));
	ASSERT_EQ(1, tc_counter(0, "get_pages_calls"));
	ASSERT_EQ(1, tc_counter(0, "release_calls"));
	ASSERT_EQ(0, tc_set(0, "acquire_mode", ACQ_PROBE));

	/* Ordinary memory followed by nothing: two pages pin, the rest does not; peers are asked. */
	mem = mmap(NULL, 3 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, mem);
	ASSERT_EQ(0, munmap(mem + 2 * 4096, 4096));
	mem[0] = mem[4096] = 1;
	ASSERT_EQ(-EFAULT, pmh_reg(self->pmh, mem, TIB, PMH_REG_WRITE, NULL));
	ASSERT_EQ(4, tc_counter(0, "acquire_calls"));
	ASSERT_EQ(0, pmh_counter("live_mrs"));
	munmap(mem, 2 * 4096);
	ASSERT_EQ(0, gpu_free(self->gpu, handle));
	ASSERT_EQ(warnings, kmsg_count("WARNING:"));
	ASSERT_NO_LEAKS();
}

TEST_F_TIMEOUT(pmh, refused_before_any_peer_is_asked, 120)
{
	__u64 handle;
	char *va;

	LOAD("", "names=greedy");
	ASSERT_EQ(0, tc_set(0, "acquire_mode", ACQ_ALWAYS));
	va = GPU_ALLOC(GPU_PAGE, &handle);
	/* umem.c: no pages; more than UINT_MAX pages (16 TiB and up); a range that wraps. */
	ASSERT_EQ(-EINVAL, pmh_reg(self->pmh, va, 0, PMH_REG_WRITE, NULL));
	ASSERT_EQ(-EINVAL, pmh_reg(self->pmh, va, 16 * TIB, PMH_REG_WRITE, NULL));
	ASSERT_EQ(-EINVAL, pmh_reg(self->pmh, va, ~0ULL - (uintptr_t)va + 2, PMH_REG_WRITE,
				   NULL));
	ASSERT_EQ(-EINVAL, pmh_reg(self->pmh, (void *)(~0UL - 4095), 8192, PMH_REG_WRITE, NULL));
	ASSERT_EQ(0, tc_counter(0, "acquire_calls"));
	/* Just under the limit the peer is asked. */
	ASSERT_EQ(-EINVAL, pmh_reg(self->pmh, va, 16 * TIB - 2 * 4096, PMH_REG_WRITE, NULL));
	ASSERT_EQ(1, tc_counter(0, "acquire_calls"));
	ASSERT_EQ(0, pmh_counter("live_mrs"));
	ASSERT_EQ(0, gpu_free(self->gpu, handle));
	ASSERT_NO_LEAKS();
}

TEST_HARNESS_MAIN
