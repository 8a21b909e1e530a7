// SPDX-License-Identifier: GPL-2.0
/*
 * What a client does wrong, and what the NVIDIA P2P stand-in then does, as nvidia.ko would: use
 * freed memory (a KASAN report) or WARN. NOT part of `make check` (every case fails a run on
 * purpose): installed as TEST_GEN_PROGS_EXTENDED, run one case at a time in a VM boot of its own
 * by stale_use.py, which checks that each case produced the report it names:
 *
 *   reentry_put_in_callback          WARN: put_pages from inside the free callback (API lock held)
 *   peer_mismatch                    WARN: dma_unmap_pages with another peer than mapped for
 *   put_persistent_on_non_persistent WARN: put_pages_persistent on a non-persistent table
 *   map_after_teardown               KASAN: dma_map_pages on a table the free tore down
 *   persistent_double_put            KASAN: put_pages_persistent twice on one table
 *   unmap_after_teardown             KASAN: dma_unmap_pages after the free tore the table down
 *   dma_map_racing_teardown          KASAN: the free runs between dma_map_pages's API lock and its
 *                                    list insert (race point dma_map.before_insert)
 *
 *   stale_use -r stale.<case>
 *
 * Each case prints "stale_use: <case> <what came back>"; the kernel log has the rest.
 */
#include <pthread.h>

#include "kselftest_harness.h"
#include "standin_test.h"

FIXTURE(stale) {
	struct standin_env env;
	char *va;
	__u64 handle;
};

FIXTURE_SETUP(stale)
{
	char mark[96];

	snprintf(mark, sizeof(mark), "stale_use: begin %s", _metadata->name);
	STANDIN_SETUP(&self->env, "");
	kmsg_mark(mark);
	self->va = gpu_alloc(self->env.gpu, 2 * GPU_PAGE, &self->handle);
	ASSERT_NE(NULL, self->va);
}

/* No leak checks: after a use after free the counters mean little. Unload what can be. */
FIXTURE_TEARDOWN(stale)
{
	char mark[96];

	if (self->env.probe >= 0)
		close(self->env.probe);
	if (self->env.gpu >= 0)
		close(self->env.gpu);
	race_clear(STANDIN);
	snprintf(mark, sizeof(mark), "stale_use: end %s", _metadata->name);
	kmsg_mark(mark);
}

TEST_F(stale, reentry_put_in_callback)
{
	struct p2p_probe_pin_state st;
	__u64 h;

	h = probe_pin_ok(self->env.probe, (uintptr_t)self->va, GPU_PAGE, P2P_PROBE_CB_REENTER);
	ASSERT_NE(0, h);
	EXPECT_EQ(0, gpu_free(self->env.gpu, self->handle));
	ASSERT_EQ(0, probe_state(self->env.probe, h, &st));
	printf("stale_use: reentry_put_in_callback put_pages in the callback returned %d\n",
	       st.reenter_put_ret);
	EXPECT_EQ(-EIO, st.reenter_put_ret);
	EXPECT_EQ(1, gpu_counter("callback_reentries"));
	EXPECT_EQ(0, gpu_counter("live_page_tables"));
	EXPECT_EQ(0, probe_put(self->env.probe, h));
}

TEST_F(stale, peer_mismatch)
{
	struct p2p_probe_map m;
	__u64 h;

	h = probe_pin_ok(self->env.probe, (uintptr_t)self->va, GPU_PAGE, 0);
	ASSERT_NE(0, h);
	ASSERT_EQ(0, probe_map(self->env.probe, h, P2P_PROBE_PEER_GPU, 0, &m, NULL, 0));
	EXPECT_EQ(0, probe_unmap(self->env.probe, m.handle, P2P_PROBE_PEER_NIC, 0));
	printf("stale_use: peer_mismatch unmapped, %lld warning(s)\n",
	       gpu_counter("peer_mismatch_warnings"));
	EXPECT_EQ(1, gpu_counter("peer_mismatch_warnings"));
	EXPECT_EQ(0, gpu_counter("live_dma_mappings"));
	EXPECT_EQ(0, probe_put(self->env.probe, h));
	EXPECT_EQ(0, gpu_free(self->env.gpu, self->handle));
}

TEST_F(stale, put_persistent_on_non_persistent)
{
	__u64 h;
	int ret;

	h = probe_pin_ok(self->env.probe, (uintptr_t)self->va, GPU_PAGE, 0);
	ASSERT_NE(0, h);
	ret = probe_put_ex(self->env.probe, h, P2P_PROBE_PUT_OTHER, 0, 0);
	printf("stale_use: put_persistent_on_non_persistent returned %d\n", ret);
	EXPECT_EQ(-EINVAL, ret);
	EXPECT_EQ(1, gpu_counter("bad_put_pages"));
	EXPECT_EQ(0, probe_put(self->env.probe, h));
	EXPECT_EQ(0, gpu_free(self->env.gpu, self->handle));
}

TEST_F(stale, map_after_teardown)
{
	struct p2p_probe_map m = { 0 };
	__u64 h;
	int ret;

	h = probe_pin_ok(self->env.probe, (uintptr_t)self->va, GPU_PAGE, 0);
	ASSERT_NE(0, h);
	EXPECT_EQ(0, gpu_free(self->env.gpu, self->handle));
	m.pin = h;
	m.peer = P2P_PROBE_PEER_GPU;
	m.flags = P2P_PROBE_STALE;
	ASSERT_EQ(0, ioctl(self->env.probe, P2P_PROBE_IOC_MAP, &m));
	ret = m.ret;
	printf("stale_use: map_after_teardown dma_map_pages returned %d\n", ret);
	if (!ret)	/* it linked a mapping into the freed list: take it out the same way */
		probe_unmap_ex(self->env.probe, m.handle, P2P_PROBE_PEER_GPU, 0, P2P_PROBE_STALE);
	probe_put(self->env.probe, h);
}

TEST_F(stale, persistent_double_put)
{
	__u64 h;
	int ret;

	h = probe_pin_ok(self->env.probe, (uintptr_t)self->va, GPU_PAGE, P2P_PROBE_PERSISTENT);
	ASSERT_NE(0, h);
	ASSERT_EQ(0, probe_put_ex(self->env.probe, h, P2P_PROBE_PUT_KEEP, 0, 0));
	ret = probe_put(self->env.probe, h);
	printf("stale_use: persistent_double_put the second put returned %d\n", ret);
	EXPECT_EQ(0, gpu_free(self->env.gpu, self->handle));
}

TEST_F(stale, unmap_after_teardown)
{
	struct p2p_probe_map m;
	__u64 h;
	int ret;

	h = probe_pin_ok(self->env.probe, (uintptr_t)self->va, GPU_PAGE, 0);
	ASSERT_NE(0, h);
	ASSERT_EQ(0, probe_map(self->env.probe, h, P2P_PROBE_PEER_GPU, 0, &m, NULL, 0));
	EXPECT_EQ(0, gpu_free(self->env.gpu, self->handle));
	ret = probe_unmap_ex(self->env.probe, m.handle, P2P_PROBE_PEER_GPU, 0, P2P_PROBE_STALE);
	printf("stale_use: unmap_after_teardown dma_unmap_pages returned %d\n", ret);
	probe_put(self->env.probe, h);
}

struct map_arg {
	int probe;
	__u64 pin;
	int ret;
	__u64 map;
};

static void *map_thread(void *p)
{
	struct map_arg *a = p;
	struct p2p_probe_map m;

	a->ret = probe_map(a->probe, a->pin, P2P_PROBE_PEER_GPU, 0, &m, NULL, 0);
	a->map = m.handle;
	return NULL;
}

TEST_F(stale, dma_map_racing_teardown)
{
	struct map_arg a = { self->env.probe };
	pthread_t th;

	a.pin = probe_pin_ok(self->env.probe, (uintptr_t)self->va, GPU_PAGE, 0);
	ASSERT_NE(0, a.pin);
	ASSERT_EQ(0, race_gate(STANDIN, "dma_map.before_insert", 20000));
	ASSERT_EQ(0, pthread_create(&th, NULL, map_thread, &a));
	ASSERT_LT(0, race_wait_held(STANDIN, "dma_map.before_insert", 20000));
	/* The pages are mapped and the API lock dropped: the free tears the table down now. */
	EXPECT_EQ(0, gpu_free(self->env.gpu, self->handle));
	ASSERT_EQ(0, race_open(STANDIN, "dma_map.before_insert"));
	pthread_join(th, NULL);
	printf("stale_use: dma_map_racing_teardown dma_map_pages returned %d\n", a.ret);
	probe_put(self->env.probe, a.pin);
}

TEST_HARNESS_MAIN
