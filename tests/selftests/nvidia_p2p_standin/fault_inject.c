// SPDX-License-Identifier: GPL-2.0
/*
 * Fault injection of the NVIDIA P2P stand-in (debugfs `inject`): the Nth call of a chosen function
 * from now fails with a chosen errno, once, without side effects; calls before and after work.
 */
#include "kselftest_harness.h"
#include "standin_test.h"

FIXTURE(inject) {
	struct standin_env env;
	char *va;
	__u64 handle;
};

FIXTURE_SETUP(inject)
{
	STANDIN_SETUP(&self->env, "");
	self->va = gpu_alloc(self->env.gpu, 4 * GPU_PAGE, &self->handle);
	ASSERT_NE(NULL, self->va);
}

FIXTURE_TEARDOWN(inject)
{
	STANDIN_TEARDOWN(&self->env);
}

TEST_F(inject, nth_get_pages)
{
	uintptr_t va = (uintptr_t)self->va;
	__u64 h[3];
	char armed[128], mark[64];

	snprintf(mark, sizeof(mark), "nvp2p-selftest inject %d", getpid());
	kmsg_mark(mark);
	ASSERT_EQ(0, debugfs_write("inject", "get_pages 3 -12"));
	ASSERT_EQ(0, read_text(GPU_DEBUGFS "/inject", armed, sizeof(armed)));
	EXPECT_STREQ("get_pages 3 -12 0", armed);
	h[0] = probe_pin_ok(self->env.probe, va, GPU_PAGE, 0);
	h[1] = probe_pin_ok(self->env.probe, va + GPU_PAGE, GPU_PAGE, 0);
	EXPECT_NE(0, h[0]);
	EXPECT_NE(0, h[1]);
	/* Other functions do not count towards get_pages's N. */
	EXPECT_EQ(-EINVAL, probe_pin(self->env.probe, va + 4 * GPU_PAGE, GPU_PAGE, P2P_PROBE_PERSISTENT,
				     NULL, NULL, 0));
	EXPECT_EQ(-ENOMEM, probe_pin(self->env.probe, va + 2 * GPU_PAGE, GPU_PAGE, 0, NULL, NULL, 0));
	h[2] = probe_pin_ok(self->env.probe, va + 2 * GPU_PAGE, GPU_PAGE, 0);
	EXPECT_NE(0, h[2]);
	ASSERT_EQ(0, read_text(GPU_DEBUGFS "/inject", armed, sizeof(armed)));
	EXPECT_STREQ("", armed);	/* one-shot */
	EXPECT_EQ(1, gpu_counter("injected_failures"));
	EXPECT_EQ(3, gpu_counter("total_pins"));
	EXPECT_TRUE(kmsg_has_since(mark, "injected -12 into call 3 of get_pages"));
	EXPECT_EQ(0, gpu_free(self->env.gpu, self->handle));
	EXPECT_EQ(3, gpu_counter("free_callbacks"));
}

/* Every injectable function, first call, with the pin or mapping intact afterwards. */
TEST_F(inject, every_function)
{
	uintptr_t va = (uintptr_t)self->va;
	struct nvp2p_alloc req = { .size = GPU_PAGE };
	struct p2p_probe_map m;
	__u64 h, hp;

	ASSERT_EQ(0, debugfs_write("inject", "alloc 1 -28"));
	EXPECT_NE(0, ioctl(self->env.gpu, NVP2P_IOC_ALLOC, &req));
	EXPECT_EQ(ENOSPC, errno);

	ASSERT_EQ(0, debugfs_write("inject", "get_pages_persistent 1 -5"));
	EXPECT_EQ(-EIO, probe_pin(self->env.probe, va, GPU_PAGE, P2P_PROBE_PERSISTENT, NULL, NULL, 0));
	hp = probe_pin_ok(self->env.probe, va, GPU_PAGE, P2P_PROBE_PERSISTENT);
	ASSERT_NE(0, hp);
	h = probe_pin_ok(self->env.probe, va + GPU_PAGE, 2 * GPU_PAGE, 0);
	ASSERT_NE(0, h);

	ASSERT_EQ(0, debugfs_write("inject", "dma_map_pages 1 -22"));
	EXPECT_EQ(-EINVAL, probe_map(self->env.probe, h, P2P_PROBE_PEER_GPU, 0, NULL, NULL, 0));
	EXPECT_EQ(0, gpu_counter("live_dma_mappings"));
	ASSERT_EQ(0, probe_map(self->env.probe, h, P2P_PROBE_PEER_GPU, 0, &m, NULL, 0));

	ASSERT_EQ(0, debugfs_write("inject", "dma_unmap_pages 1 -16"));
	EXPECT_EQ(-EBUSY, probe_unmap(self->env.probe, m.handle, P2P_PROBE_PEER_GPU, 0));
	EXPECT_EQ(1, gpu_counter("live_dma_mappings"));
	EXPECT_EQ(0, probe_unmap(self->env.probe, m.handle, P2P_PROBE_PEER_GPU, 0));
	EXPECT_EQ(0, gpu_counter("live_dma_mappings"));

	ASSERT_EQ(0, debugfs_write("inject", "put_pages 1 -5"));
	EXPECT_EQ(-EIO, probe_put(self->env.probe, h));
	EXPECT_EQ(2, gpu_counter("live_pins"));
	EXPECT_EQ(0, probe_put(self->env.probe, h));

	ASSERT_EQ(0, debugfs_write("inject", "put_pages_persistent 1 -5"));
	EXPECT_EQ(-EIO, probe_put(self->env.probe, hp));
	EXPECT_EQ(1, gpu_counter("live_pins"));
	EXPECT_EQ(0, probe_put(self->env.probe, hp));

	EXPECT_EQ(6, gpu_counter("injected_failures"));
	EXPECT_EQ(0, gpu_free(self->env.gpu, self->handle));
}

/* Several armed at once; disarming one or all. */
TEST_F(inject, arm_and_disarm)
{
	uintptr_t va = (uintptr_t)self->va;
	char armed[256];
	__u64 h;

	ASSERT_EQ(0, debugfs_write("inject", "get_pages 1 -12"));
	ASSERT_EQ(0, debugfs_write("inject", "put_pages 2 -5"));
	ASSERT_EQ(0, debugfs_write("inject", "dma_map_pages 1 -5"));
	ASSERT_EQ(0, read_text(GPU_DEBUGFS "/inject", armed, sizeof(armed)));
	EXPECT_STREQ("get_pages 1 -12 0\nput_pages 2 -5 0\ndma_map_pages 1 -5 0", armed);
	ASSERT_EQ(0, debugfs_write("inject", "get_pages 0"));
	h = probe_pin_ok(self->env.probe, va, GPU_PAGE, 0);
	EXPECT_NE(0, h);
	ASSERT_EQ(0, debugfs_write("inject", "clear"));
	ASSERT_EQ(0, read_text(GPU_DEBUGFS "/inject", armed, sizeof(armed)));
	EXPECT_STREQ("", armed);
	EXPECT_EQ(0, probe_map(self->env.probe, h, P2P_PROBE_PEER_GPU, 0, NULL, NULL, 0));
	EXPECT_EQ(0, gpu_counter("injected_failures"));
	EXPECT_EQ(0, gpu_free(self->env.gpu, self->handle));
	EXPECT_EQ(0, probe_put(self->env.probe, h));
}

TEST_F(inject, bad_requests)
{
	static const char *const bad[] = {
		"nosuch 1 -5",		/* unknown function */
		"get_pages 1 5",	/* errno must be negative */
		"get_pages 1 -5000",	/* and an errno */
		"get_pages 1",		/* missing errno */
		"get_pages",		/* missing N */
	};
	char armed[64];
	size_t i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int ret = debugfs_write("inject", bad[i]);

		if (ret != -EINVAL)
			TH_LOG("'%s' gave %d", bad[i] ? bad[i] : "", ret);
		EXPECT_EQ(-EINVAL, ret);
	}
	ASSERT_EQ(0, read_text(GPU_DEBUGFS "/inject", armed, sizeof(armed)));
	EXPECT_STREQ("", armed);
	EXPECT_EQ(0, gpu_free(self->env.gpu, self->handle));
}

TEST_HARNESS_MAIN
