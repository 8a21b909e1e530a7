// SPDX-License-Identifier: GPL-2.0
/*
 * Deregistration from a task that is not the registering process: device removal (ib_uverbs
 * disassociating its files: every MR of every open file goes, from a kworker) and a single MR
 * deregistered from the host's kworker. The host calls the client from there; whether a client
 * can undo its pins from there is the client's and the driver's business, so these tests use a
 * client that pins persistently (the driver lets any task unpin those) or memory already freed.
 */
#include "kselftest_harness.h"
#include "pmh_fixture.h"

#define WAIT_MS 10000

TEST_F_TIMEOUT(pmh, device_removal_deregisters_every_file_from_a_kworker, 120)
{
	struct pmh_reg_mr r1, r2, r3, r4, again;
	struct op_thread rm = { }, user = { };
	struct pmh_query_mr q;
	int other, held;
	__u64 handle;
	char *va, *mem;

	LOAD("", "names=plain invalidating=0");
	other = pmh_open();
	ASSERT_LE(0, other);
	va = GPU_ALLOC(4 * GPU_PAGE, &handle);
	ASSERT_EQ(0, pmh_reg(self->pmh, va, GPU_PAGE, PMH_REG_WRITE | PMH_REG_NO_INVALIDATE, &r1));
	ASSERT_EQ(0, pmh_reg(self->pmh, va + GPU_PAGE, GPU_PAGE,
			     PMH_REG_WRITE | PMH_REG_NO_INVALIDATE, &r2));
	ASSERT_EQ(0, pmh_reg(other, va + 2 * GPU_PAGE, GPU_PAGE,
			     PMH_REG_WRITE | PMH_REG_NO_INVALIDATE, &r3));
	mem = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, mem);
	ASSERT_EQ(0, pmh_reg(other, mem, 8192, PMH_REG_WRITE, &r4));
	ASSERT_EQ(4, pmh_counter("live_mrs"));

	/* Hold the first deregistration before the client's release: who runs it? */
	ASSERT_EQ(0, race_gate(HOST_MOD, "dereg.before_release", 0));
	rm.pmh = self->pmh;
	ASSERT_EQ(0, op_start(&rm, op_remove_device_fn));
	held = race_wait_held(HOST_MOD, "dereg.before_release", WAIT_MS);
	ASSERT_LT(0, held);
	ASSERT_NE(rm.tid, held);
	ASSERT_TRUE(pid_is_kworker(held)) TH_LOG("pid %d is not a kworker", held);
	/* The ioctl waits for the kworker. */
	ASSERT_TRUE(op_still_blocked(&rm, 200));
	/* So does the user's own deregistration of an MR the removal took, as ib_uverbs'
	 * uobj_destroy waits on the file's hw_destroy_rwsem: it returns once the MR is gone. */
	user.pmh = self->pmh;
	user.value = r2.handle;
	ASSERT_EQ(0, op_start(&user, op_dereg_fn));
	ASSERT_TRUE(op_still_blocked(&user, 200));
	ASSERT_EQ(0, race_open(HOST_MOD, "dereg.before_release"));
	ASSERT_EQ(0, op_join(&rm));
	ASSERT_EQ(4, rm.ret);
	ASSERT_EQ(0, op_join(&user));
	ASSERT_EQ(-ENOENT, user.ret);

	ASSERT_EQ(0, pmh_counter("live_mrs"));
	ASSERT_EQ(4, pmh_counter("removed_by_device"));
	ASSERT_EQ(4, pmh_counter("kworker_deregs"));
	/* Three peer MRs: dma_unmap, put_pages and release each, all on kernel threads. */
	ASSERT_EQ(3, tc_counter(0, "dma_unmap_calls"));
	ASSERT_EQ(3, tc_counter(0, "put_pages_calls"));
	ASSERT_EQ(3, tc_counter(0, "release_calls"));
	ASSERT_EQ(9, tc_counter(0, "callbacks_in_kthread"));
	ASSERT_EQ(1, tc_log_count("release ctx=1 pid=" /* then its pid */));
	ASSERT_EQ(9, tc_log_count(" comm=kworker/"));
	ASSERT_EQ(0, gpu_counter("live_pins"));

	/* The MRs are gone from both files; the files still work. */
	ASSERT_EQ(-ENOENT, pmh_dereg(self->pmh, r1.handle));
	ASSERT_EQ(-ENOENT, pmh_dereg(self->pmh, r2.handle));
	ASSERT_EQ(-ENOENT, pmh_query(other, r3.handle, &q, NULL, 0));
	ASSERT_EQ(-ENOENT, pmh_dereg(other, r4.handle));
	ASSERT_EQ(0, pmh_reg(other, va, GPU_PAGE, PMH_REG_WRITE | PMH_REG_NO_INVALIDATE, &again));
	ASSERT_EQ(0, pmh_dereg(other, again.handle));
	ASSERT_EQ(0, pmh_remove_device(other));
	close(other);
	munmap(mem, 8192);
	ASSERT_EQ(0, gpu_free(self->gpu, handle));
	ASSERT_NO_LEAKS();
}

TEST_F_TIMEOUT(pmh, device_removal_after_invalidation_only_releases, 120)
{
	struct pmh_reg_mr reg;
	__u64 handle;
	void *va;

	/* An ex client's MR invalidated by cudaFree: removal has nothing to unmap, only release. */
	LOAD("", "names=gpu");
	va = GPU_ALLOC(2 * GPU_PAGE, &handle);
	ASSERT_EQ(0, pmh_reg(self->pmh, va, 2 * GPU_PAGE, PMH_REG_WRITE, &reg));
	ASSERT_EQ(0, gpu_free(self->gpu, handle));
	ASSERT_EQ(1, tc_counter(0, "free_callbacks"));
	ASSERT_EQ(1, pmh_remove_device(self->pmh));
	ASSERT_EQ(0, tc_counter(0, "dma_unmap_calls"));
	ASSERT_EQ(0, tc_counter(0, "put_pages_calls"));
	ASSERT_EQ(1, tc_counter(0, "release_calls"));
	ASSERT_EQ(1, tc_counter(0, "callbacks_in_kthread"));
	ASSERT_EQ(0, tc_counter(0, "release_cleanups"));
	ASSERT_EQ(-ENOENT, pmh_dereg(self->pmh, reg.handle));
	/* Its id is gone with it. */
	ASSERT_EQ(0, write_text(TC_DEBUGFS "/c0/invalidate", "0"));
	ASSERT_EQ(1, pmh_counter("invalidate_unknown"));
	ASSERT_NO_LEAKS();
}

TEST_F_TIMEOUT(pmh, one_mr_deregistered_from_a_kworker, 120)
{
	struct pmh_reg_mr reg, kept;
	struct op_thread dereg = { };
	__u64 handle;
	int held;
	void *va;

	LOAD("", "names=plain invalidating=0");
	va = GPU_ALLOC(2 * GPU_PAGE, &handle);
	ASSERT_EQ(0, pmh_reg(self->pmh, va, GPU_PAGE, PMH_REG_WRITE | PMH_REG_NO_INVALIDATE, &reg));
	ASSERT_EQ(0, pmh_reg(self->pmh, (char *)va + GPU_PAGE, GPU_PAGE,
			     PMH_REG_WRITE | PMH_REG_NO_INVALIDATE, &kept));
	ASSERT_EQ(0, race_gate(HOST_MOD, "dereg.before_stop", 0));
	dereg.pmh = self->pmh;
	dereg.value = reg.handle;
	dereg.flags = PMH_DEREG_KWORKER;
	ASSERT_EQ(0, op_start(&dereg, op_dereg_fn));
	held = race_wait_held(HOST_MOD, "dereg.before_stop", WAIT_MS);
	ASSERT_LT(0, held);
	ASSERT_TRUE(pid_is_kworker(held)) TH_LOG("pid %d is not a kworker", held);
	ASSERT_TRUE(op_still_blocked(&dereg, 200));
	ASSERT_EQ(0, race_open(HOST_MOD, "dereg.before_stop"));
	ASSERT_EQ(0, op_join(&dereg));
	ASSERT_EQ(0, dereg.ret);
	ASSERT_EQ(1, pmh_counter("kworker_deregs"));
	ASSERT_EQ(0, pmh_counter("removed_by_device"));
	ASSERT_EQ(3, tc_counter(0, "callbacks_in_kthread"));
	ASSERT_EQ(1, pmh_counter("live_mrs"));
	ASSERT_EQ(-ENOENT, pmh_dereg_ex(self->pmh, reg.handle, PMH_DEREG_KWORKER));
	ASSERT_EQ(-EINVAL, pmh_dereg_ex(self->pmh, kept.handle, 1u << 5));
	/* The other one is deregistered by the caller as usual. */
	ASSERT_EQ(0, pmh_dereg_ex(self->pmh, kept.handle, 0));
	ASSERT_EQ(3, tc_counter(0, "callbacks_in_kthread"));
	ASSERT_EQ(0, gpu_free(self->gpu, handle));
	ASSERT_NO_LEAKS();
}

TEST_HARNESS_MAIN
