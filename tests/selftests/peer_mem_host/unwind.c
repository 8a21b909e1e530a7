// SPDX-License-Identifier: GPL-2.0
/*
 * A registration that fails after a client claimed the range is unwound: whatever the client did
 * is undone through its own callbacks, the errno reaches the caller, and nothing is left behind
 * in the host, the client or the NVIDIA stand-in. As in MLNX_OFED: a failing get_pages gets only
 * release, a failing dma_map put_pages (no dma_unmap) and release, both before the MR counts as
 * allocated; a failure after dma_map (the memory key cannot be created: mlx5 refuses the SG
 * list) goes through the deregistration path, stop and release, of an MR that did count.
 */
#include "kselftest_harness.h"
#include "pmh_fixture.h"

/* Callback counts of client 0 after one failed registration. */
struct calls {
	int get_pages, dma_map, page_size, dma_unmap, put_pages, release;
};

static void expect_calls(struct __test_metadata *_metadata, const struct calls *want)
{
	ASSERT_EQ(want->get_pages, tc_counter(0, "get_pages_calls"));
	ASSERT_EQ(want->dma_map, tc_counter(0, "dma_map_calls"));
	ASSERT_EQ(want->page_size, tc_counter(0, "get_page_size_calls"));
	ASSERT_EQ(want->dma_unmap, tc_counter(0, "dma_unmap_calls"));
	ASSERT_EQ(want->put_pages, tc_counter(0, "put_pages_calls"));
	ASSERT_EQ(want->release, tc_counter(0, "release_calls"));
	ASSERT_EQ(0, tc_counter(0, "release_cleanups"));
	ASSERT_EQ(0, tc_counter(0, "live_contexts"));
}

static void expect_nothing_left(struct __test_metadata *_metadata, const char *client)
{
	ASSERT_EQ(0, pmh_counter("live_mrs"));
	ASSERT_EQ(1, pmh_counter("peer_reg_unwound"));
	ASSERT_EQ(1, pmh_counter("reg_failed"));
	ASSERT_EQ(0, gpu_counter("live_pins"));
	ASSERT_EQ(0, gpu_counter("live_dma_mappings"));
	ASSERT_EQ(0, gpu_counter("bar1_pinned_bytes"));
	/* A registration that failed before dma_map is not one in the statistics. */
	ASSERT_EQ(0, peer_stat(client, "num_alloc_mrs"));
	ASSERT_EQ(0, peer_stat(client, "num_reg_pages"));
	ASSERT_EQ(0, peer_stat(client, "num_reg_bytes"));
}

/*
 * After dma_map the peer part of the registration was complete (MLNX counted it) when the memory
 * key failed: the MR is torn down as a deregistration would, and counted as such.
 */
static void expect_torn_down(struct __test_metadata *_metadata, const char *client, __u64 len)
{
	ASSERT_EQ(0, pmh_counter("live_mrs"));
	ASSERT_EQ(1, pmh_counter("peer_reg_unwound"));
	ASSERT_EQ(1, pmh_counter("reg_failed"));
	ASSERT_EQ(1, race_passes(HOST_MOD, "dereg.before_stop"));
	ASSERT_EQ(1, race_passes(HOST_MOD, "dereg.before_release"));
	ASSERT_EQ(0, race_passes(HOST_MOD, "reg.before_activate"));
	ASSERT_EQ(0, gpu_counter("live_pins"));
	ASSERT_EQ(0, gpu_counter("live_dma_mappings"));
	ASSERT_EQ(0, gpu_counter("bar1_pinned_bytes"));
	ASSERT_EQ(1, peer_stat(client, "num_alloc_mrs"));
	ASSERT_EQ(1, peer_stat(client, "num_dealloc_mrs"));
	ASSERT_EQ(len, peer_stat(client, "num_reg_bytes"));
	ASSERT_EQ(len, peer_stat(client, "num_dereg_bytes"));
}

/* After the failure the same range registers and deregisters fine. */
static void expect_recovery(struct __test_metadata *_metadata, int pmh, void *va,
			    __u64 core_context)
{
	struct pmh_reg_mr reg;

	ASSERT_EQ(0, pmh_reg(pmh, va, 2 * GPU_PAGE, PMH_REG_WRITE, &reg));
	ASSERT_EQ(core_context, reg.core_context);
	ASSERT_EQ(0, pmh_dereg(pmh, reg.handle));
}

TEST_F_TIMEOUT(pmh, get_pages_fails, 120)
{
	static const struct calls want = { .get_pages = 1, .release = 1 };
	__u64 handle;
	void *va;

	LOAD("", "names=gpu");
	ASSERT_EQ(0, tc_set(0, "fail_get_pages", ENOMEM));
	va = GPU_ALLOC(2 * GPU_PAGE, &handle);
	ASSERT_EQ(-ENOMEM, pmh_reg(self->pmh, va, 2 * GPU_PAGE, PMH_REG_WRITE, NULL));
	expect_calls(_metadata, &want);
	expect_nothing_left(_metadata, "gpu");
	ASSERT_EQ(0, tc_set(0, "fail_get_pages", 0));
	/* The failed registration used id 0: ids are allocated cyclically. */
	expect_recovery(_metadata, self->pmh, va, 1);
	ASSERT_EQ(0, gpu_free(self->gpu, handle));
	ASSERT_NO_LEAKS();
}

TEST_F_TIMEOUT(pmh, dma_map_fails, 120)
{
	static const struct calls want = {
		.get_pages = 1, .dma_map = 1, .put_pages = 1, .release = 1,
	};
	__u64 handle;
	void *va;

	LOAD("", "names=gpu");
	ASSERT_EQ(0, tc_set(0, "fail_dma_map", EIO));
	va = GPU_ALLOC(2 * GPU_PAGE, &handle);
	ASSERT_EQ(-EIO, pmh_reg(self->pmh, va, 2 * GPU_PAGE, PMH_REG_WRITE, NULL));
	expect_calls(_metadata, &want);
	expect_nothing_left(_metadata, "gpu");
	ASSERT_EQ(0, tc_set(0, "fail_dma_map", 0));
	expect_recovery(_metadata, self->pmh, va, 1);
	ASSERT_EQ(0, gpu_free(self->gpu, handle));
	ASSERT_NO_LEAKS();
}

TEST_F_TIMEOUT(pmh, dma_map_fails_page_size_first, 120)
{
	static const struct calls want = {
		.get_pages = 1, .page_size = 1, .dma_map = 1, .put_pages = 1, .release = 1,
	};
	__u64 handle;
	void *va;

	LOAD("page_size_before_dma_map=1", "names=gpu");
	ASSERT_EQ(0, tc_set(0, "fail_dma_map", EREMOTEIO));
	va = GPU_ALLOC(2 * GPU_PAGE, &handle);
	ASSERT_EQ(-EREMOTEIO, pmh_reg(self->pmh, va, 2 * GPU_PAGE, PMH_REG_WRITE, NULL));
	expect_calls(_metadata, &want);
	expect_nothing_left(_metadata, "gpu");
	ASSERT_EQ(0, gpu_free(self->gpu, handle));
	ASSERT_NO_LEAKS();
}

TEST_F_TIMEOUT(pmh, bad_page_size_unmaps, 120)
{
	static const struct calls want = {
		.get_pages = 1, .dma_map = 1, .page_size = 1, .dma_unmap = 1, .put_pages = 1,
		.release = 1,
	};
	__u64 handle;
	void *va;

	/* A page size that is no power of two: the host refuses the mapping it got. */
	LOAD("", "names=gpu");
	ASSERT_EQ(0, tc_set(0, "report_page_size", 3000));
	va = GPU_ALLOC(2 * GPU_PAGE, &handle);
	ASSERT_EQ(-EINVAL, pmh_reg(self->pmh, va, 2 * GPU_PAGE, PMH_REG_WRITE, NULL));
	expect_calls(_metadata, &want);
	expect_torn_down(_metadata, "gpu", 2 * GPU_PAGE);
	ASSERT_EQ(0, pmh_counter("alignment_refusals"));
	ASSERT_EQ(0, gpu_free(self->gpu, handle));
	ASSERT_NO_LEAKS();
}

/* An SG list that is not PAGE_SIZE aligned: mlx5 could not create the memory key. */
static void misaligned_list(struct __test_metadata *_metadata, FIXTURE_DATA(pmh) *self,
			    const char *client_params)
{
	static const struct calls want = {
		.get_pages = 1, .dma_map = 1, .page_size = 1, .dma_unmap = 1, .put_pages = 1,
		.release = 1,
	};
	int logged = kmsg_count("client gpu: SG entry 0 of 2 ");
	__u64 handle;
	void *va;

	LOAD("", client_params);
	ASSERT_EQ(0, tc_set(0, "sg_shift", 256));
	va = GPU_ALLOC(2 * GPU_PAGE, &handle);
	ASSERT_EQ(-EINVAL, pmh_reg(self->pmh, va, 2 * GPU_PAGE, PMH_REG_WRITE, NULL));
	expect_calls(_metadata, &want);
	expect_torn_down(_metadata, "gpu", 2 * GPU_PAGE);
	ASSERT_EQ(1, pmh_counter("alignment_refusals"));
	/* The log names the client and says who would refuse it. */
	ASSERT_EQ(logged + 1, kmsg_count("client gpu: SG entry 0 of 2 "));
	ASSERT_LE(1, kmsg_count("is not PAGE_SIZE aligned: mlx5 would refuse this in reg_create"));
	ASSERT_EQ(0, pmh_counter("inline_unmaps"));
	ASSERT_EQ(0, tc_set(0, "sg_shift", 0));
	/* The same range registers once the list is right. */
	ASSERT_EQ(0, pmh_reg(self->pmh, va, 2 * GPU_PAGE, PMH_REG_WRITE, NULL));
	ASSERT_EQ(0, gpu_free(self->gpu, handle));
	close(self->pmh);
	self->pmh = -1;
	ASSERT_NO_LEAKS();
}

TEST_F_TIMEOUT(pmh, misaligned_sg_list_refused_ex_client, 120)
{
	misaligned_list(_metadata, self, "names=gpu");
}

TEST_F_TIMEOUT(pmh, misaligned_sg_list_refused_legacy_client, 120)
{
	misaligned_list(_metadata, self, "names=gpu ex=0");
}

TEST_F_TIMEOUT(pmh, misaligned_sg_list_refused_persistent_client, 120)
{
	static const struct calls want = {
		.get_pages = 1, .dma_map = 1, .page_size = 1, .dma_unmap = 1, .put_pages = 1,
		.release = 1,
	};
	__u64 handle;
	void *va;

	/* A client that does not invalidate: its lock was dropped at the end of get; stop retakes it. */
	LOAD("", "names=gpu invalidating=0");
	ASSERT_EQ(0, tc_set(0, "sg_shift", 4096 + 512));
	va = GPU_ALLOC(2 * GPU_PAGE, &handle);
	ASSERT_EQ(-EINVAL, pmh_reg(self->pmh, va, GPU_PAGE, PMH_REG_WRITE | PMH_REG_NO_INVALIDATE,
				   NULL));
	expect_calls(_metadata, &want);
	expect_torn_down(_metadata, "gpu", GPU_PAGE);
	ASSERT_EQ(1, pmh_counter("alignment_refusals"));
	ASSERT_EQ(0, gpu_free(self->gpu, handle));
	ASSERT_NO_LEAKS();
}

TEST_F_TIMEOUT(pmh, invalidation_waits_for_a_registration_that_fails, 120)
{
	static const struct calls want = {
		.get_pages = 1, .dma_map = 1, .put_pages = 1, .release = 1,
	};
	struct op_thread reg = { }, inv = { };
	__u64 handle;
	void *va;

	/*
	 * An invalidation that finds the MR while its registration holds the mapping lock waits;
	 * the registration's dma_map fails and unwinds (put_pages, the id, the lock, release); the
	 * invalidation then finds nothing mapped and calls nothing.
	 */
	LOAD("", "names=gpu");
	ASSERT_EQ(0, tc_set(0, "fail_dma_map", EIO));
	va = GPU_ALLOC(2 * GPU_PAGE, &handle);
	ASSERT_EQ(0, race_gate(HOST_MOD, "reg.after_get_pages", 0));
	reg.pmh = self->pmh;
	reg.addr = va;
	reg.len = 2 * GPU_PAGE;
	reg.flags = PMH_REG_WRITE;
	ASSERT_EQ(0, op_start(&reg, op_reg_fn));
	ASSERT_LT(0, race_wait_held(HOST_MOD, "reg.after_get_pages", 10000));
	inv.client = 0;
	inv.value = 0;
	ASSERT_EQ(0, op_start(&inv, op_invalidate_fn));
	ASSERT_EQ(0, race_wait_passes(HOST_MOD, "invalidate.entered", 1, 10000));
	ASSERT_TRUE(op_still_blocked(&inv, 400));
	ASSERT_EQ(0, race_open(HOST_MOD, "reg.after_get_pages"));
	ASSERT_EQ(0, op_join(&reg));
	ASSERT_EQ(0, op_join(&inv));
	ASSERT_EQ(-EIO, reg.ret);
	ASSERT_EQ(0, inv.ret);
	ASSERT_EQ(1, race_passes(HOST_MOD, "invalidate.locked"));
	ASSERT_EQ(0, pmh_counter("invalidate_unknown"));
	ASSERT_EQ(1, peer_stat("gpu", "num_free_callbacks"));
	expect_calls(_metadata, &want);
	expect_nothing_left(_metadata, "gpu");
	ASSERT_EQ(0, gpu_free(self->gpu, handle));
	ASSERT_NO_LEAKS();
}

TEST_F_TIMEOUT(pmh, driver_error_reaches_caller, 120)
{
	static const struct calls want = { .get_pages = 1, .release = 1 };
	char *hole;

	/* A client that claims what it cannot pin: the driver's errno, not EFAULT, comes back. */
	LOAD("", "names=gpu");
	ASSERT_EQ(0, tc_set(0, "acquire_mode", ACQ_ALWAYS));
	hole = mmap(NULL, 2 * GPU_PAGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, hole);
	munmap(hole, 2 * GPU_PAGE);
	ASSERT_EQ(-EINVAL, pmh_reg(self->pmh, hole, GPU_PAGE, PMH_REG_WRITE, NULL));
	expect_calls(_metadata, &want);
	expect_nothing_left(_metadata, "gpu");
	ASSERT_NO_LEAKS();
}

TEST_F_TIMEOUT(pmh, unwinding_non_invalidating_client, 120)
{
	static const struct calls want = {
		.get_pages = 1, .dma_map = 1, .put_pages = 1, .release = 1,
	};
	__u64 handle;
	void *va;

	/* Persistent pins, no core_context id: the same unwinding. */
	LOAD("", "names=plain invalidating=0");
	ASSERT_EQ(0, tc_set(0, "fail_dma_map", ENOSPC));
	va = GPU_ALLOC(2 * GPU_PAGE, &handle);
	ASSERT_EQ(-ENOSPC, pmh_reg(self->pmh, va, 2 * GPU_PAGE, PMH_REG_WRITE, NULL));
	expect_calls(_metadata, &want);
	expect_nothing_left(_metadata, "plain");
	ASSERT_EQ(0, tc_set(0, "fail_dma_map", 0));
	expect_recovery(_metadata, self->pmh, va, NO_INVALIDATION_ID);
	ASSERT_EQ(0, gpu_free(self->gpu, handle));
	ASSERT_NO_LEAKS();
}

TEST_HARNESS_MAIN
