// SPDX-License-Identifier: GPL-2.0
/*
 * The free-callback contract of the NVIDIA P2P stand-in, as nvidia.ko keeps it: on cudaFree
 * (FREE), context teardown (close, process exit) or unregistration (UNREGISTER) the free callback
 * of every non-persistent pin runs in that process's context under the driver's API lock, may
 * sleep, sees its table alive and may unmap its DMA mappings there (dma_unmap_pages takes no
 * driver lock); the table and every mapping left are freed as soon as it returns. A later
 * put_pages on the dead table returns 0 without touching it (RM only compares the pointer); a
 * later dma_unmap_pages would use freed memory, so the probe refuses to make that call here (see
 * stale_use.c). Calling put_pages from inside the callback fails with a WARN: stale_use.c too.
 */
#include <pthread.h>
#include <sys/prctl.h>

#include "kselftest_harness.h"
#include "standin_test.h"

FIXTURE(cb) {
	struct standin_env env;
	char *va;
	__u64 handle;
};

FIXTURE_SETUP(cb)
{
	STANDIN_SETUP(&self->env, "");
	self->va = gpu_alloc(self->env.gpu, 4 * GPU_PAGE, &self->handle);
	ASSERT_NE(NULL, self->va);
}

FIXTURE_TEARDOWN(cb)
{
	STANDIN_TEARDOWN(&self->env);
}

TEST_F(cb, context_and_teardown)
{
	struct p2p_probe_pin_state st;
	struct p2p_probe_map m;
	__u64 h, before, after;

	h = probe_pin_ok(self->env.probe, (uintptr_t)self->va, 3 * GPU_PAGE, 0);
	ASSERT_NE(0, h);
	/* The GPU as its own peer: allowed in every topology. */
	ASSERT_EQ(0, probe_map(self->env.probe, h, P2P_PROBE_PEER_GPU, 0, &m, NULL, 0));
	ASSERT_EQ(0, probe_state(self->env.probe, h, &st));
	EXPECT_EQ(0, st.callbacks);

	before = now_ns();
	ASSERT_EQ(0, ioctl(self->env.gpu, NVP2P_IOC_FREE, &self->handle));
	after = now_ns();

	ASSERT_EQ(0, probe_state(self->env.probe, h, &st));
	EXPECT_EQ(1, st.callbacks);
	EXPECT_EQ(1, st.in_task);
	EXPECT_EQ(1, st.slept);				/* msleep(1) inside returned */
	EXPECT_EQ(getpid(), st.pid);			/* in the process that freed */
	EXPECT_EQ(getpid(), st.tgid);
	EXPECT_EQ(3, st.entries);			/* the table was alive inside */
	EXPECT_EQ(3, st.mapping_entries);		/* and so was its mapping */
	EXPECT_LE(before, st.time_ns);
	EXPECT_GE(after, st.time_ns);
	/* Torn down by the time FREE returned. */
	EXPECT_EQ(1, gpu_counter("free_callbacks"));
	EXPECT_EQ(1, gpu_counter("teardown_page_tables"));
	EXPECT_EQ(1, gpu_counter("teardown_dma_mappings"));
	EXPECT_EQ(0, gpu_counter("live_pins"));
	EXPECT_EQ(0, gpu_counter("live_page_tables"));
	EXPECT_EQ(0, gpu_counter("live_dma_mappings"));
	EXPECT_EQ(0, gpu_counter("bar1_pinned_bytes"));

	/* A late put on the dead table: 0, only its address is compared. */
	EXPECT_EQ(0, probe_put(self->env.probe, h));
	EXPECT_EQ(1, gpu_counter("stale_put_pages"));
	/* A late unmap would be a use after free in the driver: the probe does not make it. */
	EXPECT_EQ(ESTALE, probe_unmap_refused(self->env.probe, m.handle, P2P_PROBE_PEER_GPU));
	EXPECT_EQ(0, gpu_counter("stale_dma_unmaps"));
	EXPECT_EQ(0, munmap(self->va, 4 * GPU_PAGE));
}

/* Pins given back before the free get no callback; every remaining one gets exactly one. */
TEST_F(cb, only_live_non_persistent_pins)
{
	uintptr_t va = (uintptr_t)self->va;
	__u64 gone, a, b, p;
	struct p2p_probe_pin_state st;

	gone = probe_pin_ok(self->env.probe, va, GPU_PAGE, 0);
	a = probe_pin_ok(self->env.probe, va, 2 * GPU_PAGE, 0);
	b = probe_pin_ok(self->env.probe, va + 2 * GPU_PAGE, 2 * GPU_PAGE, 0);
	p = probe_pin_ok(self->env.probe, va + GPU_PAGE, GPU_PAGE, P2P_PROBE_PERSISTENT);
	ASSERT_NE(0, gone);
	ASSERT_NE(0, a);
	ASSERT_NE(0, b);
	ASSERT_NE(0, p);
	ASSERT_EQ(0, probe_put(self->env.probe, gone));
	EXPECT_EQ(0, gpu_free(self->env.gpu, self->handle));
	EXPECT_EQ(2, gpu_counter("free_callbacks"));
	ASSERT_EQ(0, probe_state(self->env.probe, a, &st));
	EXPECT_EQ(1, st.callbacks);
	ASSERT_EQ(0, probe_state(self->env.probe, b, &st));
	EXPECT_EQ(1, st.callbacks);
	ASSERT_EQ(0, probe_state(self->env.probe, p, &st));
	EXPECT_EQ(0, st.callbacks);
	EXPECT_EQ(1, gpu_counter("live_pins"));
	EXPECT_EQ(0, probe_put(self->env.probe, a));
	EXPECT_EQ(0, probe_put(self->env.probe, b));
	EXPECT_EQ(0, probe_put(self->env.probe, p));
	EXPECT_EQ(0, gpu_counter("live_pins"));
}

/*
 * Unmapping from inside the callback works (no driver lock), and the teardown then has no
 * mapping left to free.
 */
TEST_F(cb, unmap_inside_callback)
{
	struct p2p_probe_pin_state st;
	__u64 h;

	h = probe_pin_ok(self->env.probe, (uintptr_t)self->va, 2 * GPU_PAGE, P2P_PROBE_CB_UNMAP);
	ASSERT_NE(0, h);
	ASSERT_EQ(0, probe_map(self->env.probe, h, P2P_PROBE_PEER_GPU, 0, NULL, NULL, 0));
	EXPECT_EQ(1, gpu_counter("live_dma_mappings"));
	EXPECT_EQ(0, gpu_free(self->env.gpu, self->handle));
	ASSERT_EQ(0, probe_state(self->env.probe, h, &st));
	EXPECT_EQ(1, st.callbacks);
	EXPECT_EQ(0, st.reenter_unmap_ret);
	EXPECT_EQ(2, st.mapping_entries);
	EXPECT_EQ(0, gpu_counter("teardown_dma_mappings"));
	EXPECT_EQ(0, gpu_counter("live_dma_mappings"));
	EXPECT_EQ(0, gpu_counter("stale_dma_unmaps"));
	EXPECT_EQ(0, gpu_counter("callback_reentries"));
	EXPECT_EQ(0, probe_put(self->env.probe, h));
}

/*
 * UNREGISTER (NV503C_CTRL_CMD_UNREGISTER_VIDMEM): the callbacks run and the pins go, but the memory
 * stays allocated and mapped; it cannot be pinned until registered again. Persistent pins (RM's
 * own) stay.
 */
TEST_F(cb, unregister)
{
	uint8_t *p = (uint8_t *)self->va;
	struct p2p_probe_pin_state st;
	struct nvp2p_info info;
	__u64 h, hp, h2;

	p[0] = 0x5a;
	h = probe_pin_ok(self->env.probe, (uintptr_t)self->va, 2 * GPU_PAGE, 0);
	hp = probe_pin_ok(self->env.probe, (uintptr_t)self->va, GPU_PAGE, P2P_PROBE_PERSISTENT);
	ASSERT_NE(0, h);
	ASSERT_NE(0, hp);
	ASSERT_EQ(0, probe_map(self->env.probe, h, P2P_PROBE_PEER_GPU, 0, NULL, NULL, 0));

	EXPECT_EQ(0, gpu_unregister(self->env.gpu, self->handle));
	ASSERT_EQ(0, probe_state(self->env.probe, h, &st));
	EXPECT_EQ(1, st.callbacks);
	EXPECT_EQ(getpid(), st.tgid);
	EXPECT_EQ(1, gpu_counter("unregisters"));
	EXPECT_EQ(1, gpu_counter("free_callbacks"));
	EXPECT_EQ(1, gpu_counter("teardown_dma_mappings"));
	EXPECT_EQ(1, gpu_counter("live_pins"));		/* the persistent one */
	ASSERT_EQ(0, gpu_info(self->env.gpu, self->handle, &info));
	EXPECT_EQ(0, info.freed);
	EXPECT_EQ((uintptr_t)self->va, info.va);
	EXPECT_EQ(0x5a, p[0]);				/* still mapped, still there */
	/* Not registered with the process's P2P object: not found. Again: nothing to do. */
	EXPECT_EQ(-EINVAL, probe_pin(self->env.probe, (uintptr_t)self->va, GPU_PAGE, 0, NULL, NULL, 0));
	EXPECT_EQ(-EINVAL, probe_pin(self->env.probe, (uintptr_t)self->va, GPU_PAGE,
				     P2P_PROBE_PERSISTENT, NULL, NULL, 0));
	EXPECT_EQ(0, gpu_unregister(self->env.gpu, self->handle));
	EXPECT_EQ(1, gpu_counter("unregisters"));

	/* Registered again, it pins; the free calls back as usual. */
	EXPECT_EQ(0, gpu_register(self->env.gpu, self->handle));
	h2 = probe_pin_ok(self->env.probe, (uintptr_t)self->va, GPU_PAGE, 0);
	ASSERT_NE(0, h2);
	EXPECT_EQ(0, gpu_free(self->env.gpu, self->handle));
	ASSERT_EQ(0, probe_state(self->env.probe, h2, &st));
	EXPECT_EQ(1, st.callbacks);
	EXPECT_EQ(2, gpu_counter("free_callbacks"));
	EXPECT_EQ(1, gpu_counter("live_pins"));
	EXPECT_EQ(0, probe_put(self->env.probe, h));
	EXPECT_EQ(0, probe_put(self->env.probe, h2));
	EXPECT_EQ(0, probe_put(self->env.probe, hp));
	EXPECT_EQ(0, gpu_counter("live_allocations"));
}

/* Closing the file destroys the "context": callbacks run in the closing process. */
TEST_F(cb, on_close)
{
	struct p2p_probe_pin_state st;
	__u64 h, h2;
	int gpu2 = gpu_open();
	char *va;

	ASSERT_LE(0, gpu2);
	va = gpu_alloc(gpu2, GPU_PAGE, &h2);
	ASSERT_NE(NULL, va);
	h = probe_pin_ok(self->env.probe, (uintptr_t)va, GPU_PAGE, 0);
	ASSERT_NE(0, h);
	/* The mapping holds the file too; the last reference goes with it. */
	EXPECT_EQ(0, munmap(va, GPU_PAGE));
	EXPECT_EQ(0, close(gpu2));
	ASSERT_EQ(0, probe_state(self->env.probe, h, &st));
	EXPECT_EQ(1, st.callbacks);
	EXPECT_EQ(getpid(), st.tgid);
	EXPECT_EQ(1, gpu_counter("live_allocations"));	/* only the fixture's */
	EXPECT_EQ(0, probe_put(self->env.probe, h));
	EXPECT_EQ(0, gpu_free(self->env.gpu, self->handle));
}

/* Process exit destroys the context: callbacks run in the exiting process. */
TEST_F(cb, on_process_exit)
{
	struct p2p_probe_pin_state st;
	int pipefd[2], status;
	__u64 h = 0;
	pid_t pid;

	ASSERT_EQ(0, pipe(pipefd));
	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		__u64 mine, hc;
		int gpu = gpu_open();
		char *va = gpu >= 0 ? gpu_alloc(gpu, 2 * GPU_PAGE, &mine) : NULL;

		prctl(PR_SET_NAME, "nvp2p-exiter");
		hc = va ? probe_pin_ok(self->env.probe, (uintptr_t)va, 2 * GPU_PAGE, 0) : 0;
		if (write(pipefd[1], &hc, sizeof(hc)) != sizeof(hc))
			_exit(2);
		_exit(hc ? 0 : 1);	/* no FREE, no close: exit does it */
	}
	close(pipefd[1]);
	ASSERT_EQ(sizeof(h), read(pipefd[0], &h, sizeof(h)));
	close(pipefd[0]);
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	ASSERT_TRUE(WIFEXITED(status));
	ASSERT_EQ(0, WEXITSTATUS(status));
	ASSERT_NE(0, h);
	ASSERT_EQ(0, probe_state(self->env.probe, h, &st));
	EXPECT_EQ(1, st.callbacks);
	EXPECT_EQ(pid, st.tgid);
	EXPECT_STREQ("nvp2p-exiter", st.comm);
	EXPECT_EQ(1, st.in_task);
	EXPECT_EQ(1, st.slept);
	EXPECT_EQ(1, gpu_counter("live_allocations"));
	EXPECT_EQ(0, gpu_counter("live_pins"));
	EXPECT_EQ(0, probe_put(self->env.probe, h));
	EXPECT_EQ(0, gpu_free(self->env.gpu, self->handle));
}

struct racer {
	int probe;
	__u64 handle;
	__u64 start_delay_ms;
	int ret;
	__u64 done_ns;
};

static void *put_racer(void *p)
{
	struct racer *r = p;

	usleep(r->start_delay_ms * 1000);
	r->ret = probe_put(r->probe, r->handle);
	r->done_ns = now_ns();
	return NULL;
}

/*
 * The delay knob widens the window before the callback: a put_pages racing with the free waits
 * for the driver's lock, finds the table gone and returns 0 after the callback has run.
 */
TEST_F(cb, delay_and_racing_put)
{
	struct p2p_probe_pin_state st;
	struct racer r = { .probe = self->env.probe, .start_delay_ms = 100 };
	__u64 before, after;
	pthread_t th;

	r.handle = probe_pin_ok(self->env.probe, (uintptr_t)self->va, GPU_PAGE, 0);
	ASSERT_NE(0, r.handle);
	ASSERT_EQ(0, debugfs_write("free_callback_delay_ms", "400"));
	ASSERT_EQ(0, pthread_create(&th, NULL, put_racer, &r));
	before = now_ns();
	ASSERT_EQ(0, ioctl(self->env.gpu, NVP2P_IOC_FREE, &self->handle));
	after = now_ns();
	ASSERT_EQ(0, pthread_join(th, NULL));
	ASSERT_EQ(0, debugfs_write("free_callback_delay_ms", "0"));

	TH_LOG("FREE took %.1f ms", (after - before) / 1e6);
	EXPECT_LE(400000000ull, after - before);
	/* The put found the table gone and returned 0 (so the probe forgot the pin). */
	EXPECT_EQ(0, r.ret);
	EXPECT_EQ(-ENOENT, probe_state(self->env.probe, r.handle, &st));
	EXPECT_EQ(1, gpu_counter("free_callbacks"));
	EXPECT_EQ(1, gpu_counter("stale_put_pages"));
	EXPECT_LE(before + 400000000ull, r.done_ns);	/* it waited for the teardown */
	EXPECT_EQ(0, munmap(self->va, 4 * GPU_PAGE));
}

TEST_HARNESS_MAIN
