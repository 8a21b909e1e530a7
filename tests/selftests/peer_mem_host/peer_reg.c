// SPDX-License-Identifier: GPL-2.0
/*
 * The peer path of memory registration: who is asked and in what order, what the winner is
 * called with, core_context ids, the memory_peers statistics, and how the host fits the client's
 * 64 KiB pages to an unaligned range (trimming the first and last SG entries).
 */
#include "kselftest_harness.h"
#include "pmh_fixture.h"

#define MAX_SGES 64

static int query_sges(int fd, __u64 handle, struct pmh_query_mr *q, struct pmh_sge *sges)
{
	return pmh_query(fd, handle, q, sges, MAX_SGES);
}

TEST_F_TIMEOUT(pmh, gpu_memory_registration, 120)
{
	struct pmh_sge sges[MAX_SGES];
	struct nvp2p_info info;
	struct pmh_query_mr q;
	struct pmh_reg_mr reg;
	__u64 handle;
	unsigned int i;
	void *va;

	LOAD("", "names=gpu");
	va = GPU_ALLOC(4 * GPU_PAGE, &handle);
	ASSERT_EQ(0, gpu_info(self->gpu, handle, &info));
	ASSERT_EQ(0, pmh_reg(self->pmh, va, 4 * GPU_PAGE, PMH_REG_WRITE, &reg));
	ASSERT_STREQ("gpu", reg.client);
	ASSERT_EQ(GPU_PAGE, reg.page_size);
	ASSERT_EQ(0, reg.core_context);
	ASSERT_EQ(4, reg.nmap);
	ASSERT_EQ(1, pmh_counter("live_peer_mrs"));

	/* What the winner was called with: NULL private data and name, write 1, force 0. */
	ASSERT_EQ(1, tc_counter(0, "acquire_calls"));
	ASSERT_EQ(1, tc_log_count("private=0 name=0"));
	ASSERT_EQ(1, tc_counter(0, "get_pages_calls"));
	ASSERT_EQ(1, tc_log_count("sg_head=0 core_context=0"));
	ASSERT_EQ(1, tc_counter(0, "last_write"));
	ASSERT_EQ(0, tc_counter(0, "last_force"));
	ASSERT_EQ(1, tc_counter(0, "dma_map_calls"));
	/* nmap points at the host's own table's nents, not at a separate count. */
	ASSERT_EQ(1, tc_counter(0, "nmap_in_table"));
	ASSERT_EQ(1, tc_log_count("nmap_in_table=1"));
	ASSERT_EQ(0, tc_counter(0, "last_dmasync"));
	ASSERT_EQ(1, tc_counter(0, "get_page_size_calls"));
	ASSERT_EQ(1, tc_log_count("device=" /* the edu NIC */));
	ASSERT_EQ(0, tc_counter(0, "dma_unmap_calls"));
	ASSERT_EQ(0, tc_counter(0, "put_pages_calls"));
	ASSERT_EQ(1, gpu_counter("live_pins"));

	ASSERT_EQ(0, query_sges(self->pmh, reg.handle, &q, sges));
	ASSERT_EQ(4, q.nmap);
	ASSERT_STREQ("gpu", q.client);
	for (i = 0; i < 4; i++) {
		ASSERT_EQ(GPU_PAGE, sges[i].length);
		/* Without an IOMMU the NIC's addresses are the BAR's bus addresses. */
		if (!iommu_present()) {
			ASSERT_EQ(info.phys_addr + i * GPU_PAGE, sges[i].dma_addr);
		}
	}

	ASSERT_EQ(1, peer_stat("gpu", "num_alloc_mrs"));
	ASSERT_EQ(4, peer_stat("gpu", "num_reg_pages"));
	ASSERT_EQ(4 * GPU_PAGE, peer_stat("gpu", "num_reg_bytes"));
	ASSERT_EQ(0, peer_stat("gpu", "num_dealloc_mrs"));

	ASSERT_EQ(0, pmh_dereg(self->pmh, reg.handle));
	ASSERT_EQ(1, tc_counter(0, "dma_unmap_calls"));
	ASSERT_EQ(1, tc_counter(0, "put_pages_calls"));
	ASSERT_EQ(1, tc_counter(0, "release_calls"));
	ASSERT_EQ(0, tc_counter(0, "release_cleanups"));
	ASSERT_EQ(1, peer_stat("gpu", "num_dealloc_mrs"));
	/* MLNX reads the entry count after clearing the table (peer_mem.c:190, 197). */
	ASSERT_EQ(0, peer_stat("gpu", "num_dereg_pages"));
	ASSERT_EQ(4 * GPU_PAGE, peer_stat("gpu", "num_dereg_bytes"));
	ASSERT_EQ(0, peer_stat("gpu", "num_free_callbacks"));
	ASSERT_EQ(0, gpu_counter("live_pins"));
	ASSERT_EQ(0, gpu_free(self->gpu, handle));
	ASSERT_NO_LEAKS();
}

TEST_F_TIMEOUT(pmh, read_only_registration_asks_force, 120)
{
	struct pmh_reg_mr reg;
	__u64 handle;
	void *va;

	LOAD("", "names=gpu");
	va = GPU_ALLOC(GPU_PAGE, &handle);
	ASSERT_EQ(0, pmh_reg(self->pmh, va, GPU_PAGE, 0, &reg));
	ASSERT_EQ(1, tc_counter(0, "last_write"));
	ASSERT_EQ(1, tc_counter(0, "last_force"));
	ASSERT_EQ(0, pmh_dereg(self->pmh, reg.handle));
	ASSERT_EQ(0, gpu_free(self->gpu, handle));
}

TEST_F_TIMEOUT(pmh, core_context_ids, 120)
{
	struct pmh_reg_mr r0, r1, r2, r3, rp;
	char *va;
	__u64 handle;

	LOAD("", "names=inv,plain invalidating=1,0");
	ASSERT_EQ(0, tc_set(1, "acquire_mode", ACQ_ALWAYS));
	va = GPU_ALLOC(4 * GPU_PAGE, &handle);
	/* Ids of the invalidating client count up from 0 ... */
	ASSERT_EQ(0, pmh_reg(self->pmh, va, GPU_PAGE, PMH_REG_WRITE, &r0));
	ASSERT_EQ(0, pmh_reg(self->pmh, va + GPU_PAGE, GPU_PAGE, PMH_REG_WRITE, &r1));
	ASSERT_EQ(0, pmh_reg(self->pmh, va + 2 * GPU_PAGE, GPU_PAGE, PMH_REG_WRITE, &r2));
	ASSERT_STREQ("inv", r2.client);
	ASSERT_EQ(0, r0.core_context);
	ASSERT_EQ(1, r1.core_context);
	ASSERT_EQ(2, r2.core_context);
	ASSERT_EQ(2, tc_counter(0, "last_core_context"));
	/* ... and are not reused at once: cyclic allocation. */
	ASSERT_EQ(0, pmh_dereg(self->pmh, r1.handle));
	ASSERT_EQ(0, pmh_reg(self->pmh, va + GPU_PAGE, GPU_PAGE, PMH_REG_WRITE, &r3));
	ASSERT_EQ(3, r3.core_context);
	/* A client that does not invalidate gets U32_MAX. */
	ASSERT_EQ(0, pmh_reg(self->pmh, va + 3 * GPU_PAGE, GPU_PAGE,
			     PMH_REG_WRITE | PMH_REG_NO_INVALIDATE, &rp));
	ASSERT_STREQ("plain", rp.client);
	ASSERT_EQ(NO_INVALIDATION_ID, rp.core_context);
	ASSERT_EQ(NO_INVALIDATION_ID, tc_counter(1, "last_core_context"));
	ASSERT_EQ(0, pmh_dereg(self->pmh, r0.handle));
	ASSERT_EQ(0, pmh_dereg(self->pmh, r2.handle));
	ASSERT_EQ(0, pmh_dereg(self->pmh, r3.handle));
	ASSERT_EQ(0, pmh_dereg(self->pmh, rp.handle));
	ASSERT_EQ(0, gpu_free(self->gpu, handle));
	ASSERT_NO_LEAKS();
}

TEST_F_TIMEOUT(pmh, asked_in_registration_order_first_claim_wins, 120)
{
	char log[4096], *pa, *pb;
	struct pmh_reg_mr reg;
	const char *why;
	__u64 handle;
	void *va;

	LOAD("", "names=a,b,c");
	ASSERT_EQ(0, tc_set(0, "acquire_mode", ACQ_ALWAYS));
	ASSERT_EQ(0, tc_set(1, "acquire_mode", ACQ_ALWAYS));
	ASSERT_EQ(0, tc_set(2, "acquire_mode", ACQ_ALWAYS));
	va = GPU_ALLOC(GPU_PAGE, &handle);
	ASSERT_EQ(0, pmh_reg(self->pmh, va, GPU_PAGE, PMH_REG_WRITE, &reg));
	ASSERT_STREQ("a", reg.client);
	ASSERT_EQ(1, tc_counter(0, "acquire_calls"));
	ASSERT_EQ(0, tc_counter(1, "acquire_calls"));
	ASSERT_EQ(0, tc_counter(2, "acquire_calls"));
	ASSERT_EQ(0, pmh_dereg(self->pmh, reg.handle));

	/* a declines: b is asked next and wins; c is never asked. */
	ASSERT_EQ(0, tc_set(0, "acquire_mode", ACQ_NEVER));
	ASSERT_EQ(0, tc_log_clear());
	ASSERT_EQ(0, pmh_reg(self->pmh, va, GPU_PAGE, PMH_REG_WRITE, &reg));
	ASSERT_STREQ("b", reg.client);
	ASSERT_EQ(2, tc_counter(0, "acquire_calls"));
	ASSERT_EQ(1, tc_counter(1, "acquire_calls"));
	ASSERT_EQ(0, tc_counter(2, "acquire_calls"));
	ASSERT_EQ(0, tc_log_read(log, sizeof(log)));
	pa = strstr(log, "a acquire");
	pb = strstr(log, "b acquire");
	ASSERT_TRUE(pa && pb && pa < pb) TH_LOG("%s", log);
	ASSERT_EQ(0, pmh_dereg(self->pmh, reg.handle));
	ASSERT_EQ(0, gpu_free(self->gpu, handle));
	close(self->gpu);
	close(self->pmh);
	self->gpu = -1;
	self->pmh = -1;

	/* The order is the registration order, not the names. */
	ASSERT_EQ(0, env_load("", "names=c,b,a", &why)) TH_LOG("%s", why);
	self->gpu = gpu_open();
	self->pmh = pmh_open();
	ASSERT_LE(0, self->gpu);
	ASSERT_LE(0, self->pmh);
	ASSERT_EQ(0, tc_set(0, "acquire_mode", ACQ_ALWAYS));
	ASSERT_EQ(0, tc_set(1, "acquire_mode", ACQ_ALWAYS));
	ASSERT_EQ(0, tc_set(2, "acquire_mode", ACQ_ALWAYS));
	va = GPU_ALLOC(GPU_PAGE, &handle);
	ASSERT_EQ(0, pmh_reg(self->pmh, va, GPU_PAGE, PMH_REG_WRITE, &reg));
	ASSERT_STREQ("c", reg.client);
	ASSERT_EQ(0, pmh_dereg(self->pmh, reg.handle));
	ASSERT_EQ(0, gpu_free(self->gpu, handle));
	ASSERT_NO_LEAKS();
}

TEST_F_TIMEOUT(pmh, no_invalidate_callers_skip_invalidating_clients, 120)
{
	struct pmh_reg_mr reg;
	__u64 handle;
	void *va;

	LOAD("", "names=inv,plain invalidating=1,0");
	ASSERT_EQ(0, tc_set(0, "acquire_mode", ACQ_ALWAYS));
	ASSERT_EQ(0, tc_set(1, "acquire_mode", ACQ_ALWAYS));
	va = GPU_ALLOC(GPU_PAGE, &handle);
	/* A CQ/QP buffer cannot be invalidated: the invalidating client is not even asked. */
	ASSERT_EQ(0, pmh_reg(self->pmh, va, GPU_PAGE, PMH_REG_WRITE | PMH_REG_NO_INVALIDATE, &reg));
	ASSERT_STREQ("plain", reg.client);
	ASSERT_EQ(0, tc_counter(0, "acquire_calls"));
	ASSERT_EQ(1, tc_counter(1, "acquire_calls"));
	ASSERT_EQ(0, pmh_dereg(self->pmh, reg.handle));
	/* An ordinary MR goes to the first claimer, the invalidating one. */
	ASSERT_EQ(0, pmh_reg(self->pmh, va, GPU_PAGE, PMH_REG_WRITE, &reg));
	ASSERT_STREQ("inv", reg.client);
	ASSERT_EQ(1, tc_counter(1, "acquire_calls"));
	ASSERT_EQ(0, pmh_dereg(self->pmh, reg.handle));
	/* With only invalidating clients willing, a NO_INVALIDATE registration finds nobody. */
	ASSERT_EQ(0, tc_set(1, "acquire_mode", ACQ_NEVER));
	ASSERT_EQ(-EFAULT, pmh_reg(self->pmh, va, GPU_PAGE,
				   PMH_REG_WRITE | PMH_REG_NO_INVALIDATE, &reg));
	ASSERT_EQ(1, tc_counter(0, "acquire_calls"));
	ASSERT_EQ(0, gpu_free(self->gpu, handle));
	ASSERT_NO_LEAKS();
}

TEST_F_TIMEOUT(pmh, probing_client_claims_only_gpu_memory, 120)
{
	struct pmh_reg_mr reg;
	__u64 handle;
	char *va, *hole;

	LOAD("", "names=gpu");
	va = GPU_ALLOC(2 * GPU_PAGE, &handle);
	ASSERT_EQ(0, pmh_reg(self->pmh, va + 10, 100, PMH_REG_WRITE, &reg));
	ASSERT_STREQ("gpu", reg.client);
	ASSERT_EQ(0, pmh_dereg(self->pmh, reg.handle));
	hole = mmap(NULL, GPU_PAGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, hole);
	munmap(hole, GPU_PAGE);
	ASSERT_EQ(-EFAULT, pmh_reg(self->pmh, hole, GPU_PAGE, PMH_REG_WRITE, &reg));
	ASSERT_EQ(2, tc_counter(0, "acquire_calls"));
	ASSERT_EQ(1, tc_counter(0, "acquire_claimed"));
	ASSERT_EQ(0, gpu_free(self->gpu, handle));
	ASSERT_NO_LEAKS();
}

/*
 * An unaligned range inside the second and third GPU pages of an allocation:
 * start 64K + 4096 + 100, length 64K + 8192, so it touches CPU pages [68K, 144K).
 */
#define U_OFF	(GPU_PAGE + 4096 + 100)
#define U_LEN	(GPU_PAGE + 8192)

static void check_lands(struct __test_metadata *_metadata, int pmh, __u64 mr, unsigned char *base,
			size_t mr_off, size_t n, unsigned int seed)
{
	unsigned char buf[512], before, after;

	ASSERT_LE(n, sizeof(buf));
	before = base[mr_off - 1];
	after = base[mr_off + n];
	fill_pattern(buf, n, seed);
	ASSERT_EQ(0, pmh_dma(pmh, mr, mr_off - U_OFF, buf, n, PMH_DMA_TO_MR));
	ASSERT_EQ(0, memcmp(base + mr_off, buf, n)) TH_LOG("MR offset %zu", mr_off - U_OFF);
	ASSERT_EQ(before, base[mr_off - 1]);
	ASSERT_EQ(after, base[mr_off + n]);
}

/* Write at the start, across the first SG boundary, and at the end: the bytes land right. */
static void check_unaligned_data(struct __test_metadata *_metadata, int pmh, __u64 mr,
				 unsigned char *va, size_t first_sge_len)
{
	size_t boundary = U_OFF - 100 + first_sge_len;	/* where the second SG entry starts */

	memset(va, 0xee, 4 * GPU_PAGE);
	check_lands(_metadata, pmh, mr, va, U_OFF, 200, 1);
	check_lands(_metadata, pmh, mr, va, boundary - 150, 300, 2);
	check_lands(_metadata, pmh, mr, va, U_OFF + U_LEN - 50, 50, 3);
}

TEST_F_TIMEOUT(pmh, page_size_trimming, 120)
{
	struct pmh_sge whole[MAX_SGES], part[MAX_SGES];
	struct pmh_query_mr q;
	struct pmh_reg_mr r0, r1;
	unsigned char *va;
	__u64 handle;

	LOAD("", "names=gpu");
	va = GPU_ALLOC(4 * GPU_PAGE, &handle);
	ASSERT_EQ(0, pmh_reg(self->pmh, va, 4 * GPU_PAGE, PMH_REG_WRITE, &r0));
	ASSERT_EQ(0, query_sges(self->pmh, r0.handle, &q, whole));
	ASSERT_EQ(0, pmh_reg(self->pmh, va + U_OFF, U_LEN, PMH_REG_WRITE, &r1));
	ASSERT_EQ(GPU_PAGE, r1.page_size);
	ASSERT_EQ(2, r1.nmap);
	ASSERT_EQ(0, query_sges(self->pmh, r1.handle, &q, part));
	ASSERT_EQ(2, q.nmap);
	/* First entry: from the CPU page holding the start; last: up to the one holding the end. */
	ASSERT_EQ(GPU_PAGE - 4096, part[0].length);
	ASSERT_EQ(16384, part[1].length);
	ASSERT_EQ(0, part[0].dma_addr % 4096);
	if (!iommu_present()) {
		ASSERT_EQ(whole[1].dma_addr + 4096, part[0].dma_addr);
		ASSERT_EQ(whole[2].dma_addr, part[1].dma_addr);
	}
	check_unaligned_data(_metadata, self->pmh, r1.handle, va, part[0].length);
	ASSERT_EQ(2 + 4, peer_stat("gpu", "num_reg_pages"));
	ASSERT_EQ(4 * GPU_PAGE + U_LEN, peer_stat("gpu", "num_reg_bytes"));
	ASSERT_EQ(0, pmh_dereg(self->pmh, r1.handle));
	ASSERT_EQ(0, peer_stat("gpu", "num_dereg_pages"));
	ASSERT_EQ(U_LEN, peer_stat("gpu", "num_dereg_bytes"));
	ASSERT_EQ(0, pmh_dereg(self->pmh, r0.handle));
	ASSERT_EQ(0, gpu_free(self->gpu, handle));
	ASSERT_NO_LEAKS();
}

TEST_F_TIMEOUT(pmh, no_trimming_for_page_size_pages, 120)
{
	struct pmh_sge part[MAX_SGES];
	struct pmh_query_mr q;
	struct pmh_reg_mr r1;
	unsigned char *va;
	__u64 handle;
	unsigned int i;

	/* A client that maps CPU pages and says so: the host leaves its SG list alone. */
	LOAD("", "names=gpu");
	ASSERT_EQ(0, tc_set(0, "sg_page_size", 4096));
	va = GPU_ALLOC(4 * GPU_PAGE, &handle);
	ASSERT_EQ(0, pmh_reg(self->pmh, va + U_OFF, U_LEN, PMH_REG_WRITE, &r1));
	ASSERT_EQ(4096, r1.page_size);
	ASSERT_EQ(19, r1.nmap);		/* CPU pages [68K, 144K) */
	ASSERT_EQ(0, query_sges(self->pmh, r1.handle, &q, part));
	for (i = 0; i < 19; i++) {
		ASSERT_EQ(4096, part[i].length) TH_LOG("entry %u", i);
	}
	check_unaligned_data(_metadata, self->pmh, r1.handle, va, part[0].length);
	ASSERT_EQ(0, pmh_dereg(self->pmh, r1.handle));
	ASSERT_EQ(0, gpu_free(self->gpu, handle));
	ASSERT_NO_LEAKS();
}

TEST_F_TIMEOUT(pmh, untrimmed_host_offsets_into_first_page, 120)
{
	struct pmh_sge part[MAX_SGES];
	struct pmh_query_mr q;
	struct pmh_reg_mr r1;
	unsigned char *va;
	__u64 handle;

	/* Hosts without trimming (SAUCE, early 5.x) keep whole pages; the NIC starts inside. */
	LOAD("trim_sgl=0", "names=gpu");
	va = GPU_ALLOC(4 * GPU_PAGE, &handle);
	ASSERT_EQ(0, pmh_reg(self->pmh, va + U_OFF, U_LEN, PMH_REG_WRITE, &r1));
	ASSERT_EQ(0, query_sges(self->pmh, r1.handle, &q, part));
	ASSERT_EQ(2, q.nmap);
	ASSERT_EQ(GPU_PAGE, part[0].length);
	ASSERT_EQ(GPU_PAGE, part[1].length);
	ASSERT_EQ(0, part[0].dma_addr % GPU_PAGE);
	/* The first SG entry starts U_OFF - GPU_PAGE before the MR's first byte. */
	memset(va, 0xee, 4 * GPU_PAGE);
	check_lands(_metadata, self->pmh, r1.handle, va, U_OFF, 200, 4);
	check_lands(_metadata, self->pmh, r1.handle, va, 2 * GPU_PAGE - 150, 300, 5);
	check_lands(_metadata, self->pmh, r1.handle, va, U_OFF + U_LEN - 50, 50, 6);
	ASSERT_EQ(0, pmh_dereg(self->pmh, r1.handle));
	ASSERT_EQ(0, gpu_free(self->gpu, handle));
	ASSERT_NO_LEAKS();
}

TEST_F_TIMEOUT(pmh, page_size_asked_before_or_after_dma_map, 120)
{
	struct pmh_reg_mr reg;
	const char *why;
	__u64 handle;
	void *va;

	LOAD("", "names=gpu");
	va = GPU_ALLOC(GPU_PAGE, &handle);
	ASSERT_EQ(0, pmh_reg(self->pmh, va, GPU_PAGE, PMH_REG_WRITE, &reg));
	ASSERT_EQ(1, tc_log_count("get_page_size"));
	ASSERT_EQ(1, tc_log_count(" after dma_map"));
	ASSERT_EQ(0, pmh_dereg(self->pmh, reg.handle));
	ASSERT_EQ(0, gpu_free(self->gpu, handle));
	close(self->pmh);
	close(self->gpu);
	self->pmh = self->gpu = -1;

	ASSERT_EQ(0, env_load("page_size_before_dma_map=1", "names=gpu", &why)) TH_LOG("%s", why);
	self->pmh = pmh_open();
	self->gpu = gpu_open();
	ASSERT_LE(0, self->pmh);
	ASSERT_LE(0, self->gpu);
	va = GPU_ALLOC(GPU_PAGE, &handle);
	ASSERT_EQ(0, pmh_reg(self->pmh, va, GPU_PAGE, PMH_REG_WRITE, &reg));
	ASSERT_EQ(1, tc_log_count("get_page_size"));
	ASSERT_EQ(1, tc_log_count(" before dma_map"));
	ASSERT_EQ(GPU_PAGE, reg.page_size);
	ASSERT_EQ(0, pmh_dereg(self->pmh, reg.handle));
	ASSERT_EQ(0, gpu_free(self->gpu, handle));
	ASSERT_NO_LEAKS();
}

TEST_HARNESS_MAIN
