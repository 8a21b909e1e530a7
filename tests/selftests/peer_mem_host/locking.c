// SPDX-License-Identifier: GPL-2.0
/*
 * The per-MR mapping lock, held where MLNX_OFED holds it (peer_mem.c at 25.10):
 *
 * - registration takes it before the core_context id exists and keeps it across the client's
 *   get_pages and dma_map, and for an invalidating client until the memory key exists and the
 *   notifier is activated: an invalidation issued meanwhile waits, and then revokes the MR the
 *   registration completed;
 * - a legacy client's invalidation runs dma_unmap and put_pages inline, under the lock, on the
 *   invalidating task; its deregistration does the same under the lock;
 * - an ex client (PEER_MEM_INVALIDATE_UNMAPS) is unmapped at deregistration after the lock is
 *   dropped, so an invalidation does not wait for that.
 *
 * The tests hold a client callback (the test client's gate) or a host race point while the host
 * holds the lock, and look at who waits. Invalidations that do not come from the driver's free
 * callback use ex clients, or legacy MRs already unmapped: a legacy invalidation from outside the
 * callback would make real driver calls under the lock, the order the free callback inverts.
 */
#include "kselftest_harness.h"
#include "pmh_fixture.h"

#define MR_LEN (2 * GPU_PAGE)
#define WAIT_MS 10000
/* How long an operation must stay blocked to count as waiting (TCG is slow, never fast). */
#define BLOCKED_MS 400

/*
 * An invalidation while the registration is inside the client's @cb: it waits for the mapping
 * lock until the memory key exists and the notifier is activated, and then revokes the MR.
 */
static void invalidation_during(struct __test_metadata *_metadata, FIXTURE_DATA(pmh) *self,
				const char *cb)
{
	struct op_thread reg = { }, inv = { };
	struct pmh_query_mr q;
	__u64 handle;
	char buf[64];
	void *va;

	LOAD("", "names=gpu");
	va = GPU_ALLOC(MR_LEN, &handle);
	ASSERT_EQ(0, tc_gate(0, cb));
	ASSERT_EQ(0, race_gate(HOST_MOD, "reg.before_activate", 0));
	reg.pmh = self->pmh;
	reg.addr = va;
	reg.len = MR_LEN;
	reg.flags = PMH_REG_WRITE;
	ASSERT_EQ(0, op_start(&reg, op_reg_fn));
	ASSERT_LT(0, tc_gate_wait_held(0, WAIT_MS)) TH_LOG("the registration never reached %s", cb);

	/* The id was allocated before get_pages: the invalidation finds the MR ... */
	inv.client = 0;
	inv.value = 0;
	ASSERT_EQ(0, op_start(&inv, op_invalidate_fn));
	ASSERT_EQ(0, race_wait_passes(HOST_MOD, "invalidate.entered", 1, WAIT_MS));
	/* ... and waits for the lock the registration holds across the client's call. */
	ASSERT_TRUE(op_still_blocked(&inv, BLOCKED_MS));
	ASSERT_EQ(0, race_passes(HOST_MOD, "invalidate.locked"));

	/* The registration goes on to the memory key; still locked before activation. */
	ASSERT_EQ(0, tc_gate_open(0));
	ASSERT_LT(0, race_wait_held(HOST_MOD, "reg.before_activate", WAIT_MS));
	ASSERT_TRUE(op_still_blocked(&inv, BLOCKED_MS));
	ASSERT_EQ(0, race_passes(HOST_MOD, "invalidate.locked"));
	ASSERT_FALSE(op_done(&reg));

	/* Activation drops the lock: the registration completes, then the invalidation revokes. */
	ASSERT_EQ(0, race_open(HOST_MOD, "reg.before_activate"));
	ASSERT_EQ(0, op_join(&reg));
	ASSERT_EQ(0, op_join(&inv));
	ASSERT_EQ(0, reg.ret);
	ASSERT_EQ(0, reg.reg.core_context);
	ASSERT_EQ(0, inv.ret);
	ASSERT_EQ(0, tc_counter(0, "last_invalidate_ret"));
	ASSERT_EQ(1, race_passes(HOST_MOD, "invalidate.locked"));
	ASSERT_EQ(0, pmh_counter("invalidate_unknown"));
	ASSERT_EQ(0, pmh_query(self->pmh, reg.reg.handle, &q, NULL, 0));
	ASSERT_EQ(PMH_MR_INVALIDATED, q.state);
	ASSERT_EQ(1, q.invalidations);
	ASSERT_EQ(-EACCES, pmh_dma(self->pmh, reg.reg.handle, 0, buf, sizeof(buf),
				   PMH_DMA_FROM_MR));
	/* An ex client: the host left the unmapping to it. */
	ASSERT_EQ(0, tc_counter(0, "dma_unmap_calls"));
	ASSERT_EQ(0, tc_counter(0, "put_pages_calls"));
	ASSERT_EQ(0, pmh_dereg(self->pmh, reg.reg.handle));
	ASSERT_EQ(1, tc_counter(0, "release_cleanups"));
	ASSERT_EQ(0, gpu_free(self->gpu, handle));
	ASSERT_EQ(0, race_gate_timeouts(HOST_MOD));
	ASSERT_EQ(0, tc_counter(0, "gate_timeouts"));
	ASSERT_NO_LEAKS();
}

TEST_F_TIMEOUT(pmh, invalidation_during_get_pages_waits_then_revokes, 120)
{
	invalidation_during(_metadata, self, "get_pages");
}

TEST_F_TIMEOUT(pmh, invalidation_during_dma_map_waits_then_revokes, 120)
{
	invalidation_during(_metadata, self, "dma_map");
}

TEST_F_TIMEOUT(pmh, legacy_invalidation_unmaps_inline_under_the_lock, 120)
{
	struct op_thread q = { }, fr = { };
	struct pmh_reg_mr reg;
	__u64 handle;
	int held;
	void *va;

	LOAD("", "names=gpu ex=0");
	va = GPU_ALLOC(MR_LEN, &handle);
	ASSERT_EQ(0, pmh_reg(self->pmh, va, MR_LEN, PMH_REG_WRITE, &reg));
	ASSERT_EQ(0, tc_gate(0, "dma_unmap"));

	/* cudaFree in a thread: its free callback invalidates, and the host unmaps inline. */
	fr.pmh = self->gpu;
	fr.value = handle;
	ASSERT_EQ(0, op_start(&fr, op_gpu_free_fn));
	/* dma_unmap runs on the task that invalidated (inside the free callback) ... */
	held = tc_gate_wait_held(0, WAIT_MS);
	ASSERT_EQ(fr.tid, held);
	ASSERT_EQ(1, tc_counter(0, "free_callbacks"));
	ASSERT_EQ(1, race_passes(HOST_MOD, "invalidate.locked"));
	/* ... with the mapping lock held: the NIC's driver cannot even look at the MR. */
	q.pmh = self->pmh;
	q.value = reg.handle;
	ASSERT_EQ(0, op_start(&q, op_query_fn));
	ASSERT_TRUE(op_still_blocked(&q, BLOCKED_MS));
	ASSERT_EQ(0, tc_counter(0, "put_pages_calls"));
	ASSERT_FALSE(op_done(&fr));

	ASSERT_EQ(0, tc_gate_open(0));
	ASSERT_EQ(0, op_join(&q));
	ASSERT_EQ(0, op_join(&fr));
	ASSERT_EQ(0, fr.ret);
	ASSERT_EQ(0, q.ret);
	ASSERT_EQ(PMH_MR_INVALIDATED, q.q.state);
	ASSERT_EQ(1, q.q.unmapped_by_invalidation);
	ASSERT_EQ(0, q.q.nmap);
	/* Both calls came inline, in the callback, on the freeing task. */
	ASSERT_EQ(1, tc_counter(0, "dma_unmap_in_callback"));
	ASSERT_EQ(1, tc_counter(0, "put_pages_in_callback"));
	ASSERT_EQ(fr.tid, tc_log_pid("dma_unmap ctx=1 in_callback"));
	ASSERT_EQ(fr.tid, tc_log_pid("put_pages ctx=1 in_callback"));
	ASSERT_EQ(1, pmh_counter("inline_unmaps"));
	ASSERT_EQ(0, pmh_dereg(self->pmh, reg.handle));
	ASSERT_EQ(1, tc_counter(0, "dma_unmap_calls"));
	ASSERT_EQ(1, tc_counter(0, "put_pages_calls"));
	ASSERT_NO_LEAKS();
}

TEST_F_TIMEOUT(pmh, legacy_deregistration_unmaps_under_the_lock, 120)
{
	struct op_thread dereg = { }, inv = { };
	struct pmh_reg_mr reg;
	__u64 handle;
	void *va;

	LOAD("", "names=gpu ex=0");
	va = GPU_ALLOC(MR_LEN, &handle);
	ASSERT_EQ(0, pmh_reg(self->pmh, va, MR_LEN, PMH_REG_WRITE, &reg));
	ASSERT_EQ(0, tc_gate(0, "dma_unmap"));
	dereg.pmh = self->pmh;
	dereg.value = reg.handle;
	ASSERT_EQ(0, op_start(&dereg, op_dereg_fn));
	ASSERT_LT(0, tc_gate_wait_held(0, WAIT_MS));
	ASSERT_EQ(1, race_passes(HOST_MOD, "dereg.before_stop"));
	ASSERT_EQ(0, race_passes(HOST_MOD, "dereg.stopped"));

	/* The id is still known, so an invalidation finds the MR and waits for the lock. */
	inv.client = 0;
	inv.value = reg.core_context;
	ASSERT_EQ(0, op_start(&inv, op_invalidate_fn));
	ASSERT_EQ(0, race_wait_passes(HOST_MOD, "invalidate.entered", 1, WAIT_MS));
	ASSERT_TRUE(op_still_blocked(&inv, BLOCKED_MS));
	ASSERT_EQ(0, race_passes(HOST_MOD, "invalidate.locked"));

	ASSERT_EQ(0, tc_gate_open(0));
	ASSERT_EQ(0, op_join(&dereg));
	ASSERT_EQ(0, op_join(&inv));
	ASSERT_EQ(0, dereg.ret);
	ASSERT_EQ(0, inv.ret);
	/* It found the MR unmapped: nothing to unmap a second time. */
	ASSERT_EQ(1, tc_counter(0, "dma_unmap_calls"));
	ASSERT_EQ(1, tc_counter(0, "put_pages_calls"));
	ASSERT_EQ(0, pmh_counter("inline_unmaps"));
	ASSERT_EQ(1, tc_counter(0, "release_calls"));
	ASSERT_EQ(0, gpu_free(self->gpu, handle));
	ASSERT_NO_LEAKS();
}

TEST_F_TIMEOUT(pmh, ex_deregistration_unmaps_after_dropping_the_lock, 120)
{
	struct op_thread dereg = { };
	unsigned long long t0;
	struct pmh_reg_mr reg;
	__u64 handle;
	void *va;

	LOAD("", "names=gpu");
	va = GPU_ALLOC(MR_LEN, &handle);
	ASSERT_EQ(0, pmh_reg(self->pmh, va, MR_LEN, PMH_REG_WRITE, &reg));
	ASSERT_EQ(0, tc_gate(0, "dma_unmap"));
	dereg.pmh = self->pmh;
	dereg.value = reg.handle;
	ASSERT_EQ(0, op_start(&dereg, op_dereg_fn));
	ASSERT_LT(0, tc_gate_wait_held(0, WAIT_MS));
	ASSERT_EQ(1, race_passes(HOST_MOD, "dereg.before_stop"));

	/* dma_unmap is held, yet an invalidation gets the lock at once. */
	t0 = now_ns();
	ASSERT_EQ(0, write_text(TC_DEBUGFS "/c0/invalidate", "0"));
	ASSERT_GT(t0 + 5000000000ULL, now_ns());
	ASSERT_EQ(1, race_passes(HOST_MOD, "invalidate.locked"));
	ASSERT_FALSE(op_done(&dereg));

	ASSERT_EQ(0, tc_gate_open(0));
	ASSERT_EQ(0, op_join(&dereg));
	ASSERT_EQ(0, dereg.ret);
	ASSERT_EQ(1, tc_counter(0, "dma_unmap_calls"));
	ASSERT_EQ(1, tc_counter(0, "put_pages_calls"));
	ASSERT_EQ(0, tc_counter(0, "release_cleanups"));
	ASSERT_EQ(1, peer_stat("gpu", "num_dealloc_mrs"));
	ASSERT_EQ(MR_LEN, peer_stat("gpu", "num_dereg_bytes"));
	ASSERT_EQ(0, gpu_free(self->gpu, handle));
	ASSERT_NO_LEAKS();
}

TEST_F_TIMEOUT(pmh, ex_invalidation_between_stop_and_release, 120)
{
	struct op_thread dereg = { };
	struct pmh_reg_mr reg;
	__u64 handle;
	void *va;

	/*
	 * The id lives until release: an invalidation between stop and release finds the MR
	 * unmapped and, for an ex client, marks it invalidated, calling nothing. MLNX then counts
	 * its bytes deregistered a second time when release moves it to unmapped.
	 */
	LOAD("", "names=gpu");
	va = GPU_ALLOC(MR_LEN, &handle);
	ASSERT_EQ(0, pmh_reg(self->pmh, va, MR_LEN, PMH_REG_WRITE, &reg));
	ASSERT_EQ(0, race_gate(HOST_MOD, "dereg.stopped", 0));
	dereg.pmh = self->pmh;
	dereg.value = reg.handle;
	ASSERT_EQ(0, op_start(&dereg, op_dereg_fn));
	ASSERT_LT(0, race_wait_held(HOST_MOD, "dereg.stopped", WAIT_MS));
	ASSERT_EQ(1, tc_counter(0, "dma_unmap_calls"));
	ASSERT_EQ(0, write_text(TC_DEBUGFS "/c0/invalidate", "0"));
	ASSERT_EQ(0, pmh_counter("invalidate_unknown"));
	ASSERT_EQ(1, race_passes(HOST_MOD, "invalidate.locked"));
	ASSERT_EQ(0, race_open(HOST_MOD, "dereg.stopped"));
	ASSERT_EQ(0, op_join(&dereg));
	ASSERT_EQ(0, dereg.ret);
	ASSERT_EQ(1, tc_counter(0, "dma_unmap_calls"));
	ASSERT_EQ(1, tc_counter(0, "put_pages_calls"));
	ASSERT_EQ(1, peer_stat("gpu", "num_dealloc_mrs"));
	ASSERT_EQ(2 * MR_LEN, peer_stat("gpu", "num_dereg_bytes"));
	/* Afterwards the id is unknown. */
	ASSERT_EQ(0, write_text(TC_DEBUGFS "/c0/invalidate", "0"));
	ASSERT_EQ(1, pmh_counter("invalidate_unknown"));
	ASSERT_EQ(0, gpu_free(self->gpu, handle));
	ASSERT_NO_LEAKS();
}

TEST_HARNESS_MAIN
