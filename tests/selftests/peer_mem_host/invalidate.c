// SPDX-License-Identifier: GPL-2.0
/*
 * Invalidation: GPU memory freed under a live MR (cudaFree) makes the NVIDIA stand-in call the
 * client's free callback, which calls the host's invalidate. The NIC must refuse the MR from then
 * on. An ex client with PEER_MEM_INVALIDATE_UNMAPS on an MLNX_OFED 5.x host gets no dma_unmap or
 * put_pages for it, ever; a legacy one (or any client on a 4.9 host) gets both inline, on the
 * callback's own task, before invalidate returns.
 */
#include <pthread.h>

#include "kselftest_harness.h"
#include "pmh_fixture.h"

#define MR_LEN (2 * GPU_PAGE)

struct live_mr {
	void *va;
	__u64 gpu_handle;
	struct pmh_reg_mr reg;
};

static void register_gpu_mr(struct __test_metadata *_metadata, int pmh, int gpu,
			    struct live_mr *m)
{
	unsigned char buf[256], back[256];

	m->va = gpu_alloc(gpu, MR_LEN, &m->gpu_handle);
	ASSERT_NE(NULL, m->va);
	ASSERT_EQ(0, pmh_reg(pmh, m->va, MR_LEN, PMH_REG_WRITE, &m->reg));
	/* The NIC uses it before the invalidation. */
	fill_pattern(buf, sizeof(buf), 9);
	ASSERT_EQ(0, pmh_dma(pmh, m->reg.handle, 1000, buf, sizeof(buf), PMH_DMA_TO_MR));
	ASSERT_EQ(0, pmh_dma(pmh, m->reg.handle, 1000, back, sizeof(back), PMH_DMA_FROM_MR));
	ASSERT_EQ(0, memcmp(buf, back, sizeof(buf)));
}

/* cudaFree under the MR; checks what every mode has in common. */
static void free_under_mr(struct __test_metadata *_metadata, int pmh, int gpu, struct live_mr *m,
			  const char *client, int legacy)
{
	unsigned long long t0, t1;
	struct pmh_query_mr q;
	char buf[64];

	t0 = now_ns();
	ASSERT_EQ(0, gpu_free(gpu, m->gpu_handle));
	t1 = now_ns();
	ASSERT_EQ(1, tc_counter(0, "free_callbacks"));
	ASSERT_EQ(1, tc_counter(0, "invalidate_calls"));
	ASSERT_EQ(1, peer_stat(client, "num_free_callbacks"));
	ASSERT_EQ(0, pmh_query(pmh, m->reg.handle, &q, NULL, 0));
	ASSERT_EQ(PMH_MR_INVALIDATED, q.state);
	ASSERT_EQ(1, q.invalidations);
	ASSERT_TRUE(q.invalidated_ns >= t0 && q.invalidated_ns <= t1)
		TH_LOG("invalidated at %llu, free between %llu and %llu",
		       (unsigned long long)q.invalidated_ns, t0, t1);
	/* The memory key is revoked. */
	ASSERT_EQ(-EACCES, pmh_dma(pmh, m->reg.handle, 0, buf, sizeof(buf), PMH_DMA_TO_MR));
	ASSERT_EQ(-EACCES, pmh_dma(pmh, m->reg.handle, 0, buf, sizeof(buf), PMH_DMA_FROM_MR));
	ASSERT_LE(2, pmh_counter("dma_refused"));
	/* The driver tore the pin down; nobody called back into it from the callback. */
	ASSERT_EQ(0, gpu_counter("live_pins"));
	ASSERT_EQ(0, gpu_counter("callback_reentries"));
	/*
	 * MLNX counts the MR deallocated when its mapping goes; its bytes deregistered when they
	 * are unmapped: now for a legacy client, at deregistration for an ex one. Its pages never:
	 * it reads the entry count after clearing the table (peer_mem.c:190, 197).
	 */
	ASSERT_EQ(1, peer_stat(client, "num_dealloc_mrs"));
	ASSERT_EQ(0, peer_stat(client, "num_dereg_pages"));
	ASSERT_EQ(legacy ? MR_LEN : 0, peer_stat(client, "num_dereg_bytes"));
}

static void dereg_after_invalidation(struct __test_metadata *_metadata, int pmh,
				     struct live_mr *m, const char *client, int unmaps)
{
	ASSERT_EQ(0, pmh_dereg(pmh, m->reg.handle));
	ASSERT_EQ(unmaps, tc_counter(0, "dma_unmap_calls"));
	ASSERT_EQ(unmaps, tc_counter(0, "put_pages_calls"));
	ASSERT_EQ(1, tc_counter(0, "release_calls"));
	ASSERT_EQ(0, tc_counter(0, "release_cleanups"));
	ASSERT_EQ(1, peer_stat(client, "num_dealloc_mrs"));
	ASSERT_EQ(0, peer_stat(client, "num_dereg_pages"));
	ASSERT_EQ(MR_LEN, peer_stat(client, "num_dereg_bytes"));
	ASSERT_EQ(0, gpu_counter("stale_put_pages"));
	ASSERT_EQ(0, gpu_counter("stale_dma_unmaps"));
}

TEST_F_TIMEOUT(pmh, ex_client_unmaps_itself, 120)
{
	struct pmh_query_mr q;
	struct live_mr m;

	LOAD("", "names=gpu");
	register_gpu_mr(_metadata, self->pmh, self->gpu, &m);
	free_under_mr(_metadata, self->pmh, self->gpu, &m, "gpu", 0);
	ASSERT_EQ(0, pmh_query(self->pmh, m.reg.handle, &q, NULL, 0));
	ASSERT_EQ(0, q.unmapped_by_invalidation);
	ASSERT_EQ(0, tc_counter(0, "dma_unmap_calls"));
	ASSERT_EQ(0, tc_counter(0, "put_pages_calls"));
	ASSERT_EQ(0, pmh_counter("inline_unmaps"));
	ASSERT_EQ(0, pmh_counter("dma_unmap_calls"));
	ASSERT_EQ(0, pmh_counter("put_pages_calls"));
	/* Not at deregistration either. */
	dereg_after_invalidation(_metadata, self->pmh, &m, "gpu", 0);
	ASSERT_NO_LEAKS();
}

/* The log shows dma_unmap and put_pages inside the free callback, before invalidate returned. */
static void expect_inline_sequence(struct __test_metadata *_metadata)
{
	char log[16384];
	char *cb, *unmap, *put, *ret;

	ASSERT_EQ(0, tc_log_read(log, sizeof(log)));
	cb = strstr(log, "free_callback");
	unmap = strstr(log, "dma_unmap ctx=1 in_callback");
	put = strstr(log, "put_pages ctx=1 in_callback");
	ret = strstr(log, "invalidate ctx=1 core_context=0 ret=0");
	ASSERT_TRUE(cb && unmap && put && ret) TH_LOG("%s", log);
	ASSERT_TRUE(cb < unmap && unmap < put && put < ret) TH_LOG("%s", log);
}

static void legacy_flow(struct __test_metadata *_metadata, int pmh, int gpu)
{
	struct pmh_query_mr q;
	struct live_mr m;

	register_gpu_mr(_metadata, pmh, gpu, &m);
	free_under_mr(_metadata, pmh, gpu, &m, "gpu", 1);
	ASSERT_EQ(0, pmh_query(pmh, m.reg.handle, &q, NULL, 0));
	ASSERT_EQ(1, q.unmapped_by_invalidation);
	ASSERT_EQ(1, tc_counter(0, "dma_unmap_calls"));
	ASSERT_EQ(1, tc_counter(0, "dma_unmap_in_callback"));
	ASSERT_EQ(1, tc_counter(0, "put_pages_calls"));
	ASSERT_EQ(1, tc_counter(0, "put_pages_in_callback"));
	ASSERT_EQ(1, pmh_counter("inline_unmaps"));
	expect_inline_sequence(_metadata);
	/* Deregistration does not unmap a second time. */
	dereg_after_invalidation(_metadata, pmh, &m, "gpu", 1);
}

TEST_F_TIMEOUT(pmh, legacy_host_unmaps_inline, 120)
{
	/* MLNX_OFED 4.9 ignores the ex flag of the very same client. */
	LOAD("ex_support=0", "names=gpu");
	legacy_flow(_metadata, self->pmh, self->gpu);
	ASSERT_NO_LEAKS();
}

TEST_F_TIMEOUT(pmh, legacy_client_unmapped_inline, 120)
{
	/* A plain (not ex) invalidating client on a 5.x host: nvidia-peermem peerdirect_support=1. */
	LOAD("", "names=gpu ex=0");
	legacy_flow(_metadata, self->pmh, self->gpu);
	ASSERT_NO_LEAKS();
}

TEST_F_TIMEOUT(pmh, ex_size_short_of_flags_is_legacy, 120)
{
	LOAD("", "names=gpu ex_size=8");
	legacy_flow(_metadata, self->pmh, self->gpu);
	ASSERT_NO_LEAKS();
}

TEST_F_TIMEOUT(pmh, unknown_core_context, 120)
{
	struct pmh_query_mr q;
	struct live_mr m;

	LOAD("", "names=gpu");
	register_gpu_mr(_metadata, self->pmh, self->gpu, &m);
	/* Ids no MR has: answered 0 and counted, and the live MR is untouched. */
	ASSERT_EQ(0, write_text(TC_DEBUGFS "/c0/invalidate", "12345"));
	ASSERT_EQ(0, tc_counter(0, "last_invalidate_ret"));
	ASSERT_EQ(0, write_text(TC_DEBUGFS "/c0/invalidate", "4294967295"));
	ASSERT_EQ(0, tc_counter(0, "last_invalidate_ret"));
	ASSERT_EQ(2, pmh_counter("invalidate_unknown"));
	ASSERT_EQ(2, peer_stat("gpu", "num_free_callbacks"));
	ASSERT_EQ(0, pmh_query(self->pmh, m.reg.handle, &q, NULL, 0));
	ASSERT_EQ(PMH_MR_MAPPED, q.state);
	ASSERT_EQ(0, q.invalidations);
	ASSERT_EQ(0, pmh_dereg(self->pmh, m.reg.handle));
	/* A deregistered MR's id is unknown too. */
	ASSERT_EQ(0, write_text(TC_DEBUGFS "/c0/invalidate", "0"));
	ASSERT_EQ(3, pmh_counter("invalidate_unknown"));
	ASSERT_EQ(0, gpu_free(self->gpu, m.gpu_handle));
	ASSERT_NO_LEAKS();
}

TEST_F_TIMEOUT(pmh, ex_invalidation_without_driver_teardown, 120)
{
	struct pmh_query_mr q;
	struct live_mr m;
	char buf[16];

	/*
	 * An ex client's invalidation, with the pages still pinned: the host leaves them to the
	 * client for good, so it is the client's release that finds them.
	 */
	LOAD("", "names=gpu");
	register_gpu_mr(_metadata, self->pmh, self->gpu, &m);
	ASSERT_EQ(0, write_text(TC_DEBUGFS "/c0/invalidate", "0"));
	ASSERT_EQ(0, pmh_query(self->pmh, m.reg.handle, &q, NULL, 0));
	ASSERT_EQ(PMH_MR_INVALIDATED, q.state);
	ASSERT_EQ(-EACCES, pmh_dma(self->pmh, m.reg.handle, 0, buf, sizeof(buf), PMH_DMA_FROM_MR));
	ASSERT_EQ(0, pmh_dereg(self->pmh, m.reg.handle));
	ASSERT_EQ(0, tc_counter(0, "dma_unmap_calls"));
	ASSERT_EQ(0, tc_counter(0, "put_pages_calls"));
	ASSERT_EQ(1, tc_counter(0, "release_cleanups"));
	ASSERT_EQ(0, gpu_free(self->gpu, m.gpu_handle));
	ASSERT_NO_LEAKS();
}

struct dma_thread {
	int pmh;
	__u64 handle;
	size_t len;
	int ret;
};

static void *dma_thread_fn(void *arg)
{
	struct dma_thread *t = arg;
	void *buf = malloc(t->len);

	fill_pattern(buf, t->len, 11);
	t->ret = pmh_dma(t->pmh, t->handle, 0, buf, t->len, PMH_DMA_TO_MR);
	free(buf);
	return NULL;
}

TEST_F_TIMEOUT(pmh, invalidation_waits_for_nic, 120)
{
	unsigned long long start_ns;
	struct pmh_query_mr q;
	struct dma_thread t;
	struct live_mr m;
	pthread_t th;

	/*
	 * The client may only return from its free callback once the NIC no longer touches the
	 * memory: an invalidation arriving mid-transfer waits for the transfer to end. The
	 * transfer takes 16 edu operations of 100 ms; the free comes 0.4 s into it.
	 */
	LOAD("", "names=gpu");
	register_gpu_mr(_metadata, self->pmh, self->gpu, &m);
	t.pmh = self->pmh;
	t.handle = m.reg.handle;
	t.len = 8 * 4096;
	start_ns = now_ns();
	ASSERT_EQ(0, pthread_create(&th, NULL, dma_thread_fn, &t));
	usleep(400 * 1000);
	ASSERT_EQ(0, gpu_free(self->gpu, m.gpu_handle));
	ASSERT_EQ(0, pthread_join(th, NULL));
	/* The transfer was not cut short ... */
	ASSERT_EQ(0, t.ret);
	/* ... and the invalidation got through only after it. */
	ASSERT_EQ(0, pmh_query(self->pmh, m.reg.handle, &q, NULL, 0));
	ASSERT_EQ(PMH_MR_INVALIDATED, q.state);
	ASSERT_LE(start_ns + 1200000000ULL, q.invalidated_ns)
		TH_LOG("invalidation %.2f s after the transfer started",
		       (q.invalidated_ns - start_ns) / 1e9);
	ASSERT_EQ(0, pmh_dereg(self->pmh, m.reg.handle));
	ASSERT_NO_LEAKS();
}

TEST_HARNESS_MAIN
