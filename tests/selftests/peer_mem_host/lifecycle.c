// SPDX-License-Identifier: GPL-2.0
/*
 * Lifetimes: a process that exits with MRs registered gets them deregistered (ib_uverbs closes
 * its context), in either order of closing GPU memory and the host; a forked child that inherited
 * the file and closes it last deregisters them itself, in its own task; a client that holds a
 * module reference per registration (nvidia-peermem does) cannot be unloaded under a live MR; one
 * that does not is held in ib_unregister_peer_memory_client until its last MR goes.
 */
#include "kselftest_harness.h"
#include "pmh_fixture.h"

/*
 * A child registers a GPU MR and an ordinary one, then exits without cleaning up; with
 * @cuda_free it frees the GPU memory first (cudaFree), leaving an invalidated MR to the exit.
 */
static int child_registers_and_exits(int cuda_free)
{
	struct pmh_reg_mr reg;
	__u64 handle;
	void *va, *mem;
	int pmh, gpu;

	/* Its own files: the fixture's, inherited, stay open in the parent. */
	pmh = pmh_open();
	gpu = gpu_open();
	if (pmh < 0 || gpu < 0)
		return 10;
	va = gpu_alloc(gpu, 2 * GPU_PAGE, &handle);
	if (!va)
		return 11;
	if (pmh_reg(pmh, va, 2 * GPU_PAGE, PMH_REG_WRITE, &reg))
		return 12;
	mem = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (mem == MAP_FAILED || pmh_reg(pmh, mem, 8192, PMH_REG_WRITE, &reg))
		return 13;
	if (pmh_counter("live_mrs") != 2)
		return 14;
	if (cuda_free && gpu_free(gpu, handle))
		return 15;
	return 0;	/* exit with everything still registered */
}

static void exit_with_mrs(struct __test_metadata *_metadata, int cuda_free)
{
	int status;
	pid_t pid;

	pid = fork();
	ASSERT_LE(0, pid);
	if (!pid)
		_exit(child_registers_and_exits(cuda_free));
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	ASSERT_TRUE(WIFEXITED(status));
	ASSERT_EQ(0, WEXITSTATUS(status));
	ASSERT_EQ(0, pmh_counter("live_mrs"));
	ASSERT_EQ(0, pmh_counter("live_peer_mrs"));
	ASSERT_EQ(0, pmh_counter("live_ordinary_mrs"));
	ASSERT_EQ(1, tc_counter(0, "release_calls"));
	ASSERT_EQ(0, tc_counter(0, "release_cleanups"));
	ASSERT_EQ(1, peer_stat("gpu", "num_alloc_mrs"));
	ASSERT_EQ(1, peer_stat("gpu", "num_dealloc_mrs"));
	ASSERT_EQ(2 * GPU_PAGE, peer_stat("gpu", "num_dereg_bytes"));
	ASSERT_NO_LEAKS();
}

TEST_F_TIMEOUT(pmh, process_exit_cleans_up, 120)
{
	long long callbacks;

	LOAD("", "names=gpu");
	exit_with_mrs(_metadata, 0);
	/*
	 * Which file's release runs first at exit is up to the kernel (deferred fputs): either the
	 * host deregisters first (put_pages, no invalidation) or the GPU context goes first (an
	 * invalidation, and no put_pages for an ex client). Never both, never neither.
	 */
	callbacks = tc_counter(0, "free_callbacks");
	ASSERT_TRUE(callbacks == 0 || callbacks == 1);
	ASSERT_EQ(1 - callbacks, tc_counter(0, "put_pages_calls"));
	ASSERT_EQ(1 - callbacks, tc_counter(0, "dma_unmap_calls"));
}

TEST_F_TIMEOUT(pmh, process_exit_after_cuda_free, 120)
{
	LOAD("", "names=gpu");
	exit_with_mrs(_metadata, 1);
	/* The invalidated MR is deregistered at exit without unmapping again. */
	ASSERT_EQ(1, tc_counter(0, "free_callbacks"));
	ASSERT_EQ(0, tc_counter(0, "put_pages_calls"));
	ASSERT_EQ(0, tc_counter(0, "dma_unmap_calls"));
}

TEST_F_TIMEOUT(pmh, last_close_in_forked_child_deregisters, 120)
{
	struct pmh_reg_mr gpu_mr, mem_mr;
	int go[2], status;
	__u64 handle;
	char *mem, c;
	void *va;
	pid_t pid;

	/*
	 * Persistent pins (a client that does not invalidate): the driver lets any task unpin
	 * them, so what this shows is the host's part only. An invalidating client's non-persistent
	 * pin could not be unpinned from the child (the driver looks pins up by process).
	 */
	LOAD("", "names=plain invalidating=0");
	va = GPU_ALLOC(2 * GPU_PAGE, &handle);
	ASSERT_EQ(0, pmh_reg(self->pmh, va, 2 * GPU_PAGE, PMH_REG_WRITE | PMH_REG_NO_INVALIDATE,
			     &gpu_mr));
	mem = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, mem);
	ASSERT_EQ(0, pmh_reg(self->pmh, mem, 8192, PMH_REG_WRITE, &mem_mr));
	ASSERT_EQ(0, pipe(go));
	pid = fork();
	ASSERT_LE(0, pid);
	if (!pid) {
		/* The child inherited the file; once the parent closed its copy, ours is the last. */
		close(go[1]);
		if (read(go[0], &c, 1) != 1)
			_exit(2);
		close(self->pmh);
		_exit(pmh_counter("live_mrs") == 0 ? 0 : 3);
	}
	close(go[0]);
	close(self->pmh);
	self->pmh = -1;
	/* Not the last close: the MRs live on in the child's copy. */
	ASSERT_EQ(2, pmh_counter("live_mrs"));
	ASSERT_EQ(0, tc_counter(0, "release_calls"));
	ASSERT_EQ(1, write(go[1], "x", 1));
	close(go[1]);
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	ASSERT_TRUE(WIFEXITED(status));
	ASSERT_EQ(0, WEXITSTATUS(status)) TH_LOG("the child's close did not deregister");
	/* The child's task called the client. */
	ASSERT_EQ(1, tc_counter(0, "dma_unmap_calls"));
	ASSERT_EQ(1, tc_counter(0, "put_pages_calls"));
	ASSERT_EQ(1, tc_counter(0, "release_calls"));
	ASSERT_EQ(0, tc_counter(0, "callbacks_in_kthread"));
	ASSERT_EQ(pid, tc_log_pid("dma_unmap ctx=1"));
	ASSERT_EQ(pid, tc_log_pid("put_pages ctx=1"));
	ASSERT_EQ(pid, tc_log_pid("release ctx=1"));
	ASSERT_EQ(0, pmh_counter("live_ordinary_mrs"));
	munmap(mem, 8192);
	ASSERT_EQ(0, gpu_free(self->gpu, handle));
	ASSERT_NO_LEAKS();
}

TEST_F_TIMEOUT(pmh, module_reference_per_registration, 120)
{
	struct pmh_reg_mr reg;
	__u64 handle;
	void *va;

	LOAD("", "names=gpu");
	va = GPU_ALLOC(GPU_PAGE, &handle);
	ASSERT_EQ(0, pmh_reg(self->pmh, va, GPU_PAGE, PMH_REG_WRITE, &reg));
	/* In use: rmmod is refused (EWOULDBLOCK), the module and its MR stay. */
	ASSERT_EQ(-EAGAIN, mod_unload(CLIENT_MOD));
	ASSERT_TRUE(mod_loaded(CLIENT_MOD));
	/* Nor can the host go while a client uses its symbols. */
	ASSERT_EQ(-EAGAIN, mod_unload(HOST_MOD));
	ASSERT_EQ(0, pmh_dereg(self->pmh, reg.handle));
	ASSERT_EQ(0, gpu_free(self->gpu, handle));
	ASSERT_EQ(0, mod_unload(CLIENT_MOD));
	ASSERT_FALSE(mod_loaded(CLIENT_MOD));
	/* An open host file holds the host. */
	ASSERT_EQ(-EAGAIN, mod_unload(HOST_MOD));
	close(self->pmh);
	self->pmh = -1;
	ASSERT_EQ(0, mod_unload_wait(HOST_MOD));
}

TEST_F_TIMEOUT(pmh, unregister_waits_for_last_mr, 120)
{
	char state[32], buf[128];
	struct pmh_reg_mr reg;
	int status, i;
	__u64 handle;
	pid_t pid;
	void *va;

	/* A client without module references: rmmod starts, and unregistering waits. */
	LOAD("", "names=gpu hold_module_ref=0");
	va = GPU_ALLOC(2 * GPU_PAGE, &handle);
	ASSERT_EQ(0, pmh_reg(self->pmh, va, GPU_PAGE, PMH_REG_WRITE, &reg));
	pid = fork();
	ASSERT_LE(0, pid);
	if (!pid)
		_exit(syscall(SYS_delete_module, CLIENT_MOD, 0) ? errno : 0);
	usleep(1500 * 1000);
	ASSERT_EQ(0, waitpid(pid, &status, WNOHANG)) TH_LOG("rmmod returned while an MR lived");
	ASSERT_EQ(0, read_text("/sys/module/" CLIENT_MOD "/initstate", state, sizeof(state)));
	ASSERT_STREQ("going", state);
	/* The client is off the list already: nobody takes new GPU memory ... */
	ASSERT_EQ(-EFAULT, pmh_reg(self->pmh, (char *)va + GPU_PAGE, GPU_PAGE, PMH_REG_WRITE, NULL));
	/* ... while the existing MR still works. */
	fill_pattern((unsigned char *)buf, sizeof(buf), 3);
	ASSERT_EQ(0, pmh_dma(self->pmh, reg.handle, 0, buf, sizeof(buf), PMH_DMA_TO_MR));
	ASSERT_EQ(0, memcmp(va, buf, sizeof(buf)));
	/* The last MR goes: the unregistration and the rmmod complete. */
	ASSERT_EQ(0, pmh_dereg(self->pmh, reg.handle));
	for (i = 0; i < 100 && waitpid(pid, &status, WNOHANG) == 0; i++)
		usleep(50 * 1000);
	ASSERT_GT(100, i) TH_LOG("rmmod still blocked after the last MR went");
	ASSERT_TRUE(WIFEXITED(status));
	ASSERT_EQ(0, WEXITSTATUS(status));
	ASSERT_FALSE(mod_loaded(CLIENT_MOD));
	ASSERT_EQ(0, pmh_counter("registered_clients"));
	ASSERT_EQ(0, gpu_free(self->gpu, handle));
	ASSERT_NO_LEAKS();
}

TEST_HARNESS_MAIN
