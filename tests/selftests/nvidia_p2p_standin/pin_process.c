// SPDX-License-Identifier: GPL-2.0
/*
 * Identity, as nvidia.ko keeps it: nvidia_p2p_get_pages finds only the calling process's GPU
 * memory, so a forked child, another process or a kernel worker gets -EINVAL for the same VA while
 * another thread of the owner finds it; a child does not inherit the mapping and cannot map, free
 * or unregister its parent's allocation. nvidia_p2p_put_pages finds only the calling process's
 * pins: from a forked child or a kworker it returns 0 and unpins nothing, and the free callback
 * stays armed. nvidia_p2p_put_pages_persistent works from any task.
 */
#include <pthread.h>

#include "kselftest_harness.h"
#include "standin_test.h"

FIXTURE(process) {
	struct standin_env env;
	char *va;
	__u64 handle;
};

FIXTURE_SETUP(process)
{
	STANDIN_SETUP(&self->env, "");
	self->va = gpu_alloc(self->env.gpu, 2 * GPU_PAGE, &self->handle);
	ASSERT_NE(NULL, self->va);
}

FIXTURE_TEARDOWN(process)
{
	STANDIN_TEARDOWN(&self->env);
}

/* Run @fn in a forked child; its return value is the child's exit status. */
static int in_child(int (*fn)(void *), void *arg)
{
	int status;
	pid_t pid = fork();

	if (pid == 0)
		_exit(fn(arg));
	if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
		return -1;
	return WEXITSTATUS(status);
}

struct child_arg {
	struct standin_env *env;
	char *va;
	__u64 handle;
	__u64 mmap_offset;
};

/* Is @va inside a mapping of this process? (Prints the mapping if so.) */
static bool mapped_at(uintptr_t va)
{
	unsigned long long start, end;
	char line[512];
	bool found = false;
	FILE *f = fopen("/proc/self/maps", "r");

	if (!f)
		return true;
	while (!found && fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%llx-%llx", &start, &end) == 2 && va >= start && va < end) {
			fprintf(stderr, "# %d: %#lx is mapped: %s", getpid(), (unsigned long)va, line);
			found = true;
		}
	}
	fclose(f);
	return found;
}

/* 0 if the child sees -EINVAL for both kinds of pin on its parent's VA; 1.. otherwise. */
static int child_pins_parent_va(void *p)
{
	struct child_arg *a = p;

	if (probe_pin(a->env->probe, (uintptr_t)a->va, GPU_PAGE, 0, NULL, NULL, 0) != -EINVAL)
		return 1;
	if (probe_pin(a->env->probe, (uintptr_t)a->va, GPU_PAGE, P2P_PROBE_PERSISTENT, NULL, NULL, 0) !=
	    -EINVAL)
		return 2;
	/* The mapping itself did not come along (VM_DONTCOPY): nothing is mapped there. */
	if (mapped_at((uintptr_t)a->va))
		return 3;
	return 0;
}

TEST_F(process, forked_child)
{
	struct child_arg a = { &self->env, self->va };

	EXPECT_EQ(0, in_child(child_pins_parent_va, &a));
	/* The owner still finds it. */
	__u64 h = probe_pin_ok(self->env.probe, (uintptr_t)self->va, GPU_PAGE, 0);

	EXPECT_NE(0, h);
	EXPECT_EQ(0, probe_put(self->env.probe, h));
	EXPECT_EQ(2, gpu_counter("lookup_failures"));
	EXPECT_EQ(0, gpu_free(self->env.gpu, self->handle));
}

/* A second process with GPU memory of its own: its own VA pins, the parent's does not. */
static int child_with_own_memory(void *p)
{
	struct child_arg *a = p;
	__u64 h, mine;
	int gpu = gpu_open(), probe = open(P2P_PROBE_DEVICE, O_RDWR);
	char *va;

	if (gpu < 0 || probe < 0)
		return 10;
	/* Hold the parent's VA (free here) so our own GPU memory cannot land on it. */
	if (mmap(a->va, 2 * GPU_PAGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
		 -1, 0) != a->va)
		return 15;
	va = gpu_alloc(gpu, 2 * GPU_PAGE, &mine);
	if (!va)
		return 11;
	if (probe_pin(probe, (uintptr_t)a->va, GPU_PAGE, 0, NULL, NULL, 0) != -EINVAL)
		return 12;
	h = probe_pin_ok(probe, (uintptr_t)va, 2 * GPU_PAGE, 0);
	if (!h)
		return 13;
	if (probe_put(probe, h))
		return 14;
	/* Exit without freeing: process exit frees it. */
	return 0;
}

TEST_F(process, second_process)
{
	struct child_arg a = { &self->env, self->va };

	EXPECT_EQ(0, in_child(child_with_own_memory, &a));
	/* The child's allocation went with it; ours is the only one left. */
	EXPECT_EQ(1, gpu_counter("live_allocations"));
	EXPECT_EQ(2, gpu_counter("total_allocations"));
	EXPECT_EQ(0, gpu_free(self->env.gpu, self->handle));
}

/* A child shares the file but not the allocation: it can neither map nor free it. */
static int child_maps_or_frees(void *p)
{
	struct child_arg *a = p;
	__u64 handle = a->handle;
	void *m;

	m = mmap(NULL, 2 * GPU_PAGE, PROT_READ, MAP_SHARED, a->env->gpu, a->mmap_offset);
	if (m != MAP_FAILED || errno != EACCES)
		return 1;
	if (ioctl(a->env->gpu, NVP2P_IOC_FREE, &handle) == 0 || errno != EACCES)
		return 2;
	if (ioctl(a->env->gpu, NVP2P_IOC_UNREGISTER, &handle) == 0 || errno != EACCES)
		return 3;
	return 0;
}

TEST_F(process, child_cannot_map_or_free)
{
	struct child_arg a = { &self->env, self->va, self->handle };
	struct nvp2p_info info;

	ASSERT_EQ(0, gpu_info(self->env.gpu, self->handle, &info));
	a.mmap_offset = info.bar_offset;	/* the offset ALLOC handed out */
	EXPECT_EQ(0, in_child(child_maps_or_frees, &a));
	ASSERT_EQ(0, gpu_info(self->env.gpu, self->handle, &info));
	EXPECT_EQ(0, info.freed);
	EXPECT_EQ(0, gpu_free(self->env.gpu, self->handle));
}

/* From a kworker: no mm, nothing found, as nvidia.ko behaves for workqueue callers. */
TEST_F(process, from_workqueue)
{
	EXPECT_EQ(-EINVAL, probe_pin(self->env.probe, (uintptr_t)self->va, GPU_PAGE,
				     P2P_PROBE_FROM_WORKQUEUE, NULL, NULL, 0));
	EXPECT_EQ(-EINVAL, probe_pin(self->env.probe, (uintptr_t)self->va, GPU_PAGE,
				     P2P_PROBE_FROM_WORKQUEUE | P2P_PROBE_PERSISTENT, NULL, NULL, 0));
	EXPECT_EQ(0, gpu_counter("total_pins"));
	EXPECT_EQ(0, gpu_free(self->env.gpu, self->handle));
}

struct thread_arg {
	int probe;
	char *va;
	int ret;
	__u64 handle;
};

static void *thread_pin(void *p)
{
	struct thread_arg *t = p;
	struct p2p_probe_pin pin;

	t->ret = probe_pin(t->probe, (uintptr_t)t->va, GPU_PAGE, 0, &pin, NULL, 0);
	t->handle = pin.handle;
	return NULL;
}

/* Another thread of the owner shares its mm: found. */
TEST_F(process, other_thread)
{
	struct thread_arg t = { self->env.probe, self->va };
	pthread_t th;

	ASSERT_EQ(0, pthread_create(&th, NULL, thread_pin, &t));
	ASSERT_EQ(0, pthread_join(th, NULL));
	EXPECT_EQ(0, t.ret);
	EXPECT_EQ(0, probe_put(self->env.probe, t.handle));
	EXPECT_EQ(0, gpu_free(self->env.gpu, self->handle));
}

struct put_arg {
	int probe;
	__u64 handle;
	uint32_t flags;
};

/* 0 if the child's put returned 0 and the probe kept the pin (nothing was unpinned). */
static int child_puts(void *p)
{
	struct put_arg *a = p;
	int kept;

	if (probe_put_kept(a->probe, a->handle, a->flags, &kept))
		return 1;
	return kept == 1 ? 0 : 2;
}

/*
 * A non-persistent put from another process than the pinning one, or from a kworker (as when
 * the last close of an inherited uverbs file, a device removal or a NIC reload destroys the MR):
 * 0, nothing unpinned, no BAR1 given back, and the free callback still comes when the owner frees.
 */
static void foreign_put(struct __test_metadata *_metadata, struct standin_env *env, char *va,
			__u64 alloc, bool from_child)
{
	struct put_arg a = { env->probe };
	struct p2p_probe_pin_state st;
	struct p2p_probe_map m;
	int kept;

	a.handle = probe_pin_ok(env->probe, (uintptr_t)va, 2 * GPU_PAGE, 0);
	ASSERT_NE(0, a.handle);
	ASSERT_EQ(0, probe_map(env->probe, a.handle, P2P_PROBE_PEER_GPU, 0, &m, NULL, 0));
	if (from_child) {
		EXPECT_EQ(0, in_child(child_puts, &a));
	} else {
		EXPECT_EQ(0, probe_put_kept(env->probe, a.handle, P2P_PROBE_PUT_FROM_WORKQUEUE, &kept));
		EXPECT_EQ(1, kept);
	}
	EXPECT_EQ(1, gpu_counter("foreign_put_pages"));
	EXPECT_EQ(0, gpu_counter("stale_put_pages"));
	EXPECT_EQ(1, gpu_counter("live_pins"));
	EXPECT_EQ(1, gpu_counter("live_page_tables"));
	EXPECT_EQ(1, gpu_counter("live_dma_mappings"));
	EXPECT_EQ(2 * GPU_PAGE, gpu_counter("bar1_pinned_bytes"));
	ASSERT_EQ(0, probe_state(env->probe, a.handle, &st));
	EXPECT_EQ(0, st.callbacks);
	EXPECT_EQ(getpid(), st.pin_tgid);

	/* The callback is still armed: the owner's free runs it, and the teardown unmaps. */
	EXPECT_EQ(0, gpu_free(env->gpu, alloc));
	ASSERT_EQ(0, probe_state(env->probe, a.handle, &st));
	EXPECT_EQ(1, st.callbacks);
	EXPECT_EQ(1, gpu_counter("teardown_dma_mappings"));
	EXPECT_EQ(0, gpu_counter("live_pins"));
	/* The owner's late put finds nothing any more: 0, and nothing is dereferenced. */
	EXPECT_EQ(0, probe_put(env->probe, a.handle));
	EXPECT_EQ(1, gpu_counter("stale_put_pages"));
}

TEST_F(process, foreign_put_from_child)
{
	foreign_put(_metadata, &self->env, self->va, self->handle, true);
}

TEST_F(process, foreign_put_from_workqueue)
{
	foreign_put(_metadata, &self->env, self->va, self->handle, false);
}

struct thread_put {
	int probe;
	__u64 handle;
	int ret, kept;
};

static void *thread_put(void *p)
{
	struct thread_put *t = p;

	t->ret = probe_put_kept(t->probe, t->handle, 0, &t->kept);
	return NULL;
}

/* Another thread of the pinning process is the same process to the driver: it unpins. */
TEST_F(process, put_from_other_thread)
{
	struct thread_put t = { self->env.probe };
	pthread_t th;

	t.handle = probe_pin_ok(self->env.probe, (uintptr_t)self->va, GPU_PAGE, 0);
	ASSERT_NE(0, t.handle);
	ASSERT_EQ(0, pthread_create(&th, NULL, thread_put, &t));
	ASSERT_EQ(0, pthread_join(th, NULL));
	EXPECT_EQ(0, t.ret);
	EXPECT_EQ(0, t.kept);
	EXPECT_EQ(0, gpu_counter("live_pins"));
	EXPECT_EQ(0, gpu_counter("foreign_put_pages"));
	EXPECT_EQ(0, gpu_free(self->env.gpu, self->handle));
	EXPECT_EQ(0, gpu_counter("free_callbacks"));
}

/* 0 if the child's persistent put unpinned (the probe forgot the pin). */
static int child_puts_persistent(void *p)
{
	struct put_arg *a = p;
	int kept;

	if (probe_put_kept(a->probe, a->handle, 0, &kept))
		return 1;
	return kept == 0 ? 0 : 2;
}

/* Persistent pins are found through their table: a child or a kworker can give them back. */
TEST_F(process, persistent_put_from_anywhere)
{
	struct put_arg a = { self->env.probe };
	__u64 h2;
	int kept;

	a.handle = probe_pin_ok(self->env.probe, (uintptr_t)self->va, GPU_PAGE, P2P_PROBE_PERSISTENT);
	h2 = probe_pin_ok(self->env.probe, (uintptr_t)self->va + GPU_PAGE, GPU_PAGE,
			  P2P_PROBE_PERSISTENT);
	ASSERT_NE(0, a.handle);
	ASSERT_NE(0, h2);
	EXPECT_EQ(0, in_child(child_puts_persistent, &a));
	EXPECT_EQ(1, gpu_counter("live_pins"));
	EXPECT_EQ(0, probe_put_kept(self->env.probe, h2, P2P_PROBE_PUT_FROM_WORKQUEUE, &kept));
	EXPECT_EQ(0, kept);
	EXPECT_EQ(0, gpu_counter("live_pins"));
	EXPECT_EQ(0, gpu_counter("live_page_tables"));
	EXPECT_EQ(0, gpu_counter("foreign_put_pages"));
	EXPECT_EQ(0, gpu_free(self->env.gpu, self->handle));
}

TEST_HARNESS_MAIN
