// SPDX-License-Identifier: GPL-2.0
/*
 * Persistent pins (nvidia_p2p_get_pages_persistent): no free callback, and the GPU memory stays
 * alive after cudaFree or process exit until the last nvidia_p2p_put_pages_persistent (RM keeps its
 * own duplicate of the memory handle); only then may the BAR range be handed out again. Pins of
 * the same memory share their BAR1 mapping (RM's internal P2P object).
 */
#include "kselftest_harness.h"
#include "standin_test.h"

FIXTURE(persist) {
	struct standin_env env;
};

FIXTURE_SETUP(persist)
{
	STANDIN_SETUP(&self->env, "");
}

FIXTURE_TEARDOWN(persist)
{
	STANDIN_TEARDOWN(&self->env);
}

TEST_F(persist, survives_free)
{
	__u64 handle, h, h2, h3;
	struct nvp2p_info info, info2, info3;
	struct p2p_probe_map m;
	char *va, *va2, *va3;

	va = gpu_alloc(self->env.gpu, 2 * GPU_PAGE, &handle);
	ASSERT_NE(NULL, va);
	ASSERT_EQ(0, gpu_info(self->env.gpu, handle, &info));
	h = probe_pin_ok(self->env.probe, (uintptr_t)va, 2 * GPU_PAGE, P2P_PROBE_PERSISTENT);
	ASSERT_NE(0, h);

	EXPECT_EQ(0, gpu_free(self->env.gpu, handle));
	EXPECT_EQ(0, gpu_counter("free_callbacks"));
	ASSERT_EQ(0, gpu_info(self->env.gpu, handle, &info));
	EXPECT_EQ(1, info.freed);
	EXPECT_EQ(1, info.live_pins);
	EXPECT_EQ(1, gpu_counter("live_allocations"));
	EXPECT_EQ(1, gpu_counter("live_pins"));
	/* The freed VA is no CUDA memory any more: no new pins on it. */
	EXPECT_EQ(-EINVAL, probe_pin(self->env.probe, (uintptr_t)va, GPU_PAGE, P2P_PROBE_PERSISTENT,
				     NULL, NULL, 0));

	/* Its BAR range is not reused while pinned... */
	va2 = gpu_alloc(self->env.gpu, 2 * GPU_PAGE, &h2);
	ASSERT_NE(NULL, va2);
	ASSERT_EQ(0, gpu_info(self->env.gpu, h2, &info2));
	EXPECT_TRUE(info2.bar_offset >= info.bar_offset + info.size ||
		    info2.bar_offset + info2.size <= info.bar_offset);
	/* ...and the table still works for a peer. */
	ASSERT_EQ(0, probe_map(self->env.probe, h, P2P_PROBE_PEER_GPU, 0, &m, NULL, 0));
	EXPECT_EQ(2, m.entries);

	/* The last put releases it, mapping included; the range is free again. */
	EXPECT_EQ(0, probe_put(self->env.probe, h));
	EXPECT_EQ(0, gpu_counter("live_dma_mappings"));
	/* The mapping went with the table: unmapping it now would use freed memory. */
	EXPECT_EQ(ESTALE, probe_unmap_refused(self->env.probe, m.handle, P2P_PROBE_PEER_GPU));
	EXPECT_NE(0, gpu_info(self->env.gpu, handle, &info));	/* gone */
	EXPECT_EQ(1, gpu_counter("live_allocations"));
	va3 = gpu_alloc(self->env.gpu, 2 * GPU_PAGE, &h3);
	ASSERT_NE(NULL, va3);
	ASSERT_EQ(0, gpu_info(self->env.gpu, h3, &info3));
	EXPECT_EQ(info.bar_offset, info3.bar_offset);	/* first fit: the old range */
	EXPECT_EQ(0, gpu_free(self->env.gpu, h2));
	EXPECT_EQ(0, gpu_free(self->env.gpu, h3));
}

TEST_F(persist, survives_process_exit)
{
	struct { __u64 pin, alloc, bar_offset; } msg = { 0 };
	struct nvp2p_info info;
	int pipefd[2], status;
	__u64 h2;
	char *va2;
	pid_t pid;

	ASSERT_EQ(0, pipe(pipefd));
	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		struct nvp2p_info ci;
		int gpu = gpu_open();
		char *va = gpu >= 0 ? gpu_alloc(gpu, 4 * GPU_PAGE, &msg.alloc) : NULL;

		if (va && !gpu_info(gpu, msg.alloc, &ci)) {
			msg.bar_offset = ci.bar_offset;
			msg.pin = probe_pin_ok(self->env.probe, (uintptr_t)va + GPU_PAGE, 2 * GPU_PAGE,
					       P2P_PROBE_PERSISTENT);
		}
		if (write(pipefd[1], &msg, sizeof(msg)) != sizeof(msg))
			_exit(2);
		_exit(msg.pin ? 0 : 1);
	}
	close(pipefd[1]);
	ASSERT_EQ(sizeof(msg), read(pipefd[0], &msg, sizeof(msg)));
	close(pipefd[0]);
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	ASSERT_TRUE(WIFEXITED(status));
	ASSERT_EQ(0, WEXITSTATUS(status));

	/* The child is gone; its memory is not. */
	ASSERT_EQ(0, gpu_info(self->env.gpu, msg.alloc, &info));
	EXPECT_EQ(1, info.freed);
	EXPECT_EQ(0, info.va);
	EXPECT_EQ(1, info.live_pins);
	EXPECT_EQ(4 * GPU_PAGE, info.size);
	EXPECT_EQ(1, gpu_counter("live_allocations"));
	EXPECT_EQ(2 * GPU_PAGE, gpu_counter("bar1_pinned_bytes"));
	EXPECT_EQ(0, gpu_counter("free_callbacks"));
	va2 = gpu_alloc(self->env.gpu, 4 * GPU_PAGE, &h2);
	ASSERT_NE(NULL, va2);
	ASSERT_EQ(0, gpu_info(self->env.gpu, h2, &info));
	EXPECT_NE(msg.bar_offset, info.bar_offset);

	/* Another process (us) gives it back. */
	EXPECT_EQ(0, probe_put(self->env.probe, msg.pin));
	EXPECT_NE(0, gpu_info(self->env.gpu, msg.alloc, &info));
	EXPECT_EQ(1, gpu_counter("live_allocations"));
	EXPECT_EQ(0, gpu_free(self->env.gpu, h2));
}

/* Two persistent pins of one range: each keeps the memory alive on its own; one BAR1 mapping. */
TEST_F(persist, two_pins)
{
	__u64 handle, h;
	char *va;

	va = gpu_alloc(self->env.gpu, GPU_PAGE, &handle);
	ASSERT_NE(NULL, va);
	h = probe_pin_ok(self->env.probe, (uintptr_t)va, GPU_PAGE, P2P_PROBE_PERSISTENT);
	ASSERT_NE(0, h);
	__u64 h2 = probe_pin_ok(self->env.probe, (uintptr_t)va, GPU_PAGE, P2P_PROBE_PERSISTENT);

	ASSERT_NE(0, h2);
	EXPECT_EQ(GPU_PAGE, gpu_counter("bar1_pinned_bytes"));
	EXPECT_EQ(1, gpu_counter("live_bar1_extents"));
	EXPECT_EQ(0, gpu_free(self->env.gpu, handle));
	EXPECT_EQ(0, probe_put(self->env.probe, h));
	EXPECT_EQ(1, gpu_counter("live_allocations"));
	EXPECT_EQ(GPU_PAGE, gpu_counter("bar1_pinned_bytes"));
	EXPECT_EQ(0, probe_put(self->env.probe, h2));
	EXPECT_EQ(0, gpu_counter("live_allocations"));
	EXPECT_EQ(0, gpu_counter("bad_put_pages"));
}

TEST_HARNESS_MAIN
