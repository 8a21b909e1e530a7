// SPDX-License-Identifier: GPL-2.0
/*
 * Race points of the NVIDIA P2P stand-in (debugfs `race`, tests/selftests/common/race.h): the
 * interface itself (commands, the state each point shows, gates that hold a task until opened or
 * until their timeout, delays), every point reached where its name says, and the interleavings
 * the real driver allows that a client must live with, each forced with a gate:
 *   - memory freed between get_pages's two API-lock sections: no callback, get_pages fails with
 *     its out-pointer NULL (nvidia.ko leaks the table there; counted);
 *   - the teardown holds the API lock while the callback runs: get_pages and dma_map_pages of
 *     other memory wait, dma_unmap_pages does not;
 *   - a put_pages racing the free finds the table gone and returns 0; one that unlinked the pin
 *     first means no callback for it;
 *   - a dma_unmap_pages that unlinked its mapping finishes after the table is gone.
 * The interleavings that make the driver use freed memory are in stale_use.c.
 */
#include <pthread.h>
#include <sys/syscall.h>

#include "kselftest_harness.h"
#include "standin_test.h"

#define HOLD_MS 20000		/* how long a test waits for a task to reach a gate */
#define BLOCKED_MS 300		/* how long a task must stay blocked to count as blocked */

static const char *const points[] = {
	"get_pages.pinned", "get_pages.return", "get_pages_persistent.return",
	"put_pages.before_lock", "put_pages.unlinked", "put_pages_persistent.before_lock",
	"dma_map.read", "dma_map.locked", "dma_map.before_insert", "dma_map.return",
	"dma_unmap.before_sem", "dma_unmap.removed",
	"teardown.before_callback", "teardown.after_callback",
};
#define N_POINTS (sizeof(points) / sizeof(points[0]))

FIXTURE(racepoint) {
	struct standin_env env;
	char *va;
	__u64 handle;
};

FIXTURE_SETUP(racepoint)
{
	STANDIN_SETUP(&self->env, "");
	self->va = gpu_alloc(self->env.gpu, 4 * GPU_PAGE, &self->handle);
	ASSERT_NE(NULL, self->va);
}

FIXTURE_TEARDOWN(racepoint)
{
	if (module_loaded(STANDIN))
		race_clear(STANDIN);
	STANDIN_TEARDOWN(&self->env);
}

/* ---- an operation run in a thread of its own ---- */

enum op_kind { OP_PIN, OP_PIN_PERSISTENT, OP_PUT, OP_MAP, OP_UNMAP, OP_FREE };

struct op {
	enum op_kind kind;
	int probe, gpu;
	__u64 va, len, handle;	/* what to pin / put / map / unmap / free */
	uint32_t flags;		/* pin flags */
	pthread_t thread;
	pid_t tid;
	int ret;
	struct p2p_probe_pin pin;	/* OP_PIN*: the result */
	__u64 map_handle;		/* OP_MAP: the result */
	int done;
};

static void *op_thread(void *p)
{
	struct op *o = p;
	struct p2p_probe_map m;

	__atomic_store_n(&o->tid, (pid_t)syscall(SYS_gettid), __ATOMIC_RELEASE);
	switch (o->kind) {
	case OP_PIN:
	case OP_PIN_PERSISTENT:
		o->ret = probe_pin(o->probe, o->va, o->len,
				   o->flags | (o->kind == OP_PIN_PERSISTENT ? P2P_PROBE_PERSISTENT : 0),
				   &o->pin, NULL, 0);
		break;
	case OP_PUT:
		o->ret = probe_put(o->probe, o->handle);
		break;
	case OP_MAP:
		o->ret = probe_map(o->probe, o->handle, P2P_PROBE_PEER_GPU, 0, &m, NULL, 0);
		o->map_handle = m.handle;
		break;
	case OP_UNMAP:
		o->ret = probe_unmap(o->probe, o->handle, P2P_PROBE_PEER_GPU, 0);
		break;
	case OP_FREE:
		o->ret = ioctl(o->gpu, NVP2P_IOC_FREE, &o->handle) ? -errno : 0;
		break;
	}
	__atomic_store_n(&o->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

static int op_start(struct op *o)
{
	return pthread_create(&o->thread, NULL, op_thread, o);
}

static int op_join(struct op *o)
{
	pthread_join(o->thread, NULL);
	return o->ret;
}

static bool op_done(struct op *o)
{
	return __atomic_load_n(&o->done, __ATOMIC_ACQUIRE);
}

/* Is @o still running after BLOCKED_MS, asleep in the kernel (D: the API lock or a gate)? */
static bool op_blocked(struct op *o)
{
	usleep(BLOCKED_MS * 1000);
	return !op_done(o) && task_state(__atomic_load_n(&o->tid, __ATOMIC_ACQUIRE)) == 'D';
}

/* ---- the interface ---- */

TEST_F(racepoint, interface)
{
	static const char *const bad[] = {
		"gate nosuch.point", "gate", "open", "frob get_pages.return",
		"delay get_pages.return", "delay get_pages.return random",
		"delay get_pages.return 20000000", "delay get_pages.return x",
		"gate get_pages.return 0", "gate get_pages.return 100 more", "clear more",
		"open get_pages.return now",
	};
	struct race_info st;
	char path[128], line[256];
	size_t i = 0;
	FILE *f;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		EXPECT_EQ(-EINVAL, race_write(STANDIN, bad[i]))
			TH_LOG("'%s'", bad[i] ? bad[i] : "");
	/* One line per point, in a fixed order, all idle. */
	snprintf(path, sizeof(path), RACE_DEBUGFS "/%s/race", STANDIN);
	f = fopen(path, "re");
	ASSERT_NE(NULL, f);
	for (i = 0; fgets(line, sizeof(line), f); i++) {
		char name[96];

		ASSERT_LT(i, N_POINTS);
		ASSERT_EQ(5, sscanf(line, "%95s %15s %d %llu %31s", name, st.state, &st.held_pid,
				    &st.passes, st.delay));
		EXPECT_STREQ(points[i], name);
		EXPECT_STREQ("idle", st.state);
		EXPECT_EQ(0, st.held_pid);
		EXPECT_EQ(0, st.passes);
		EXPECT_STREQ("0", st.delay);
	}
	fclose(f);
	EXPECT_EQ(N_POINTS, i);

	ASSERT_EQ(0, race_gate(STANDIN, "dma_map.read", 0));
	ASSERT_EQ(0, race_read(STANDIN, "dma_map.read", &st));
	EXPECT_STREQ("armed", st.state);
	ASSERT_EQ(0, race_open(STANDIN, "dma_map.read"));	/* disarms: nobody was there */
	ASSERT_EQ(0, race_read(STANDIN, "dma_map.read", &st));
	EXPECT_STREQ("idle", st.state);
	ASSERT_EQ(0, race_delay(STANDIN, "dma_map.read", 150));
	ASSERT_EQ(0, race_read(STANDIN, "dma_map.read", &st));
	EXPECT_STREQ("150", st.delay);
	ASSERT_EQ(0, race_delay_random(STANDIN, "dma_unmap.removed", 300));
	ASSERT_EQ(0, race_read(STANDIN, "dma_unmap.removed", &st));
	EXPECT_STREQ("random:300", st.delay);
	ASSERT_EQ(0, race_gate(STANDIN, "get_pages.return", 5000));
	ASSERT_EQ(0, race_clear(STANDIN));
	for (i = 0; i < N_POINTS; i++) {
		ASSERT_EQ(0, race_read(STANDIN, points[i], &st));
		EXPECT_STREQ("idle", st.state) TH_LOG("%s", points[i]);
		EXPECT_STREQ("0", st.delay) TH_LOG("%s", points[i]);
	}
	EXPECT_EQ(0, gpu_free(self->env.gpu, self->handle));
}

/*
 * Every point holds a task where its name says: gate it, start an operation that passes it, see
 * the task held there (and not done), open, and the operation completes and the point counts it.
 */
TEST_F(racepoint, every_point_gates)
{
	uintptr_t va = (uintptr_t)self->va;
	int probe = self->env.probe;
	struct race_info st;
	size_t i;

	for (i = 0; i < N_POINTS; i++) {
		const char *point = points[i];
		struct op o = { .probe = probe, .gpu = self->env.gpu };
		__u64 pin = 0, map = 0, alloc = 0;
		struct p2p_probe_map m;
		char *b = NULL;
		pid_t held;

		/* What the operation needs, made before the gate is armed. */
		if (!strncmp(point, "put_pages.", 10) || !strncmp(point, "dma_", 4) ||
		    !strncmp(point, "teardown.", 9)) {
			if (!strncmp(point, "teardown.", 9)) {
				b = gpu_alloc(self->env.gpu, GPU_PAGE, &alloc);
				ASSERT_NE(NULL, b);
				pin = probe_pin_ok(probe, (uintptr_t)b, GPU_PAGE, 0);
			} else {
				pin = probe_pin_ok(probe, va, GPU_PAGE, 0);
			}
			ASSERT_NE(0, pin);
		}
		if (!strncmp(point, "put_pages_persistent.", 21)) {
			pin = probe_pin_ok(probe, va, GPU_PAGE, P2P_PROBE_PERSISTENT);
			ASSERT_NE(0, pin);
		}
		if (!strncmp(point, "dma_unmap.", 10)) {
			ASSERT_EQ(0, probe_map(probe, pin, P2P_PROBE_PEER_GPU, 0, &m, NULL, 0));
			map = m.handle;
		}

		if (!strncmp(point, "get_pages_persistent.", 21)) {
			o.kind = OP_PIN_PERSISTENT;
		} else if (!strncmp(point, "get_pages.", 10)) {
			o.kind = OP_PIN;
		} else if (!strncmp(point, "put_pages", 9)) {
			o.kind = OP_PUT;
			o.handle = pin;
		} else if (!strncmp(point, "dma_map.", 8)) {
			o.kind = OP_MAP;
			o.handle = pin;
		} else if (!strncmp(point, "dma_unmap.", 10)) {
			o.kind = OP_UNMAP;
			o.handle = map;
		} else {
			o.kind = OP_FREE;
			o.handle = alloc;
		}
		o.va = va;
		o.len = GPU_PAGE;

		ASSERT_EQ(0, race_gate(STANDIN, point, HOLD_MS));
		ASSERT_EQ(0, op_start(&o));
		held = race_wait_held(STANDIN, point, HOLD_MS);
		EXPECT_LT(0, held) TH_LOG("%s: nobody held", point);
		EXPECT_EQ(__atomic_load_n(&o.tid, __ATOMIC_ACQUIRE), held) TH_LOG("%s", point);
		EXPECT_TRUE(op_blocked(&o)) TH_LOG("%s: the operation did not wait", point);
		ASSERT_EQ(0, race_open(STANDIN, point));
		EXPECT_EQ(0, op_join(&o)) TH_LOG("%s", point);
		ASSERT_EQ(0, race_read(STANDIN, point, &st));
		EXPECT_STREQ("open", st.state) TH_LOG("%s", point);
		EXPECT_EQ(0, st.held_pid);
		EXPECT_LE(1, st.passes) TH_LOG("%s", point);

		/* Give back what the step made. */
		if (o.kind == OP_PIN || o.kind == OP_PIN_PERSISTENT)
			EXPECT_EQ(0, probe_put(probe, o.pin.handle));
		if (o.kind == OP_MAP)
			EXPECT_EQ(0, probe_unmap(probe, o.map_handle, P2P_PROBE_PEER_GPU, 0));
		if (pin && o.kind != OP_PUT)
			EXPECT_EQ(0, probe_put(probe, pin));
		if (b)
			EXPECT_EQ(0, munmap(b, GPU_PAGE));
		EXPECT_EQ(0, gpu_counter("live_pins")) TH_LOG("after %s", point);
		EXPECT_EQ(0, gpu_counter("live_dma_mappings")) TH_LOG("after %s", point);
	}
	EXPECT_EQ(0, gpu_counter("race_gate_timeouts"));
	EXPECT_EQ(0, gpu_free(self->env.gpu, self->handle));
}

/* Nobody opens: the task goes on after the timeout, which is counted and said. */
TEST_F(racepoint, gate_timeout)
{
	struct race_info st;
	__u64 t0, t1, h;
	char mark[64];

	snprintf(mark, sizeof(mark), "nvp2p-selftest race timeout %d", getpid());
	kmsg_mark(mark);
	ASSERT_EQ(0, race_gate(STANDIN, "get_pages.pinned", 300));
	t0 = now_ns();
	h = probe_pin_ok(self->env.probe, (uintptr_t)self->va, GPU_PAGE, 0);
	t1 = now_ns();
	EXPECT_NE(0, h);
	EXPECT_LE(300000000ull, t1 - t0);
	EXPECT_EQ(1, gpu_counter("race_gate_timeouts"));
	ASSERT_EQ(0, race_read(STANDIN, "get_pages.pinned", &st));
	EXPECT_STREQ("idle", st.state);
	EXPECT_EQ(1, st.passes);
	EXPECT_TRUE(kmsg_has_since(mark, "nobody opened it within 300 ms"));
	EXPECT_EQ(0, probe_put(self->env.probe, h));
	EXPECT_EQ(0, gpu_free(self->env.gpu, self->handle));
}

/* A delay slows every task passing the point, and passes are counted. */
TEST_F(racepoint, delay)
{
	__u64 t0, h;

	h = probe_pin_ok(self->env.probe, (uintptr_t)self->va, GPU_PAGE, 0);
	ASSERT_NE(0, h);
	ASSERT_EQ(0, race_delay(STANDIN, "put_pages.before_lock", 200000));
	t0 = now_ns();
	EXPECT_EQ(0, probe_put(self->env.probe, h));
	EXPECT_LE(200000000ull, now_ns() - t0);
	ASSERT_EQ(0, race_delay(STANDIN, "put_pages.before_lock", 0));
	EXPECT_EQ(1, race_passes(STANDIN, "put_pages.before_lock"));
	EXPECT_EQ(1, race_passes(STANDIN, "get_pages.return"));
	EXPECT_EQ(0, race_passes(STANDIN, "get_pages_persistent.return"));
	EXPECT_EQ(0, gpu_free(self->env.gpu, self->handle));
}

/* ---- interleavings ---- */

/*
 * cudaFree between get_pages's two API-lock sections: the pin has no callback yet, so RM drops it
 * silently; registering the callback then finds nothing and get_pages fails with -EINVAL and its
 * out-pointer NULL.
 */
TEST_F(racepoint, free_between_get_pages_sections)
{
	struct op o = { .kind = OP_PIN, .probe = self->env.probe, .va = (uintptr_t)self->va,
			.len = 2 * GPU_PAGE };

	ASSERT_EQ(0, race_gate(STANDIN, "get_pages.pinned", HOLD_MS));
	ASSERT_EQ(0, op_start(&o));
	ASSERT_LT(0, race_wait_held(STANDIN, "get_pages.pinned", HOLD_MS));
	EXPECT_EQ(1, gpu_counter("live_pins"));
	/* The API lock is not held there: the free goes through. */
	EXPECT_EQ(0, gpu_free(self->env.gpu, self->handle));
	EXPECT_EQ(0, gpu_counter("free_callbacks"));
	EXPECT_EQ(0, gpu_counter("live_pins"));
	EXPECT_EQ(1, gpu_counter("live_page_tables"));	/* get_pages still holds it */
	ASSERT_EQ(0, race_open(STANDIN, "get_pages.pinned"));
	EXPECT_EQ(-EINVAL, op_join(&o));
	EXPECT_EQ(P2P_PROBE_PT_NULL, o.pin.pt_out);
	EXPECT_EQ(1, gpu_counter("leaked_by_driver"));
	EXPECT_EQ(0, gpu_counter("live_page_tables"));
	EXPECT_EQ(0, gpu_counter("bar1_pinned_bytes"));
	EXPECT_EQ(0, gpu_counter("free_callbacks"));
}

/*
 * While the teardown holds the API lock around a free callback, get_pages and dma_map_pages of
 * other memory wait for it; dma_unmap_pages (no API lock) does not, and may unmap the very table
 * whose callback is about to run.
 */
TEST_F(racepoint, teardown_holds_api_lock)
{
	struct op free_op = { .kind = OP_FREE, .gpu = self->env.gpu, .handle = self->handle };
	struct op pin_b = { .kind = OP_PIN, .probe = self->env.probe, .len = GPU_PAGE };
	struct op map_b = { .kind = OP_MAP, .probe = self->env.probe };
	struct op unmap_a = { .kind = OP_UNMAP, .probe = self->env.probe };
	struct p2p_probe_pin_state st;
	struct p2p_probe_map m;
	__u64 a, b, hb;
	char *vb;

	vb = gpu_alloc(self->env.gpu, 2 * GPU_PAGE, &hb);
	ASSERT_NE(NULL, vb);
	a = probe_pin_ok(self->env.probe, (uintptr_t)self->va, GPU_PAGE, 0);
	b = probe_pin_ok(self->env.probe, (uintptr_t)vb, GPU_PAGE, 0);
	ASSERT_NE(0, a);
	ASSERT_NE(0, b);
	ASSERT_EQ(0, probe_map(self->env.probe, a, P2P_PROBE_PEER_GPU, 0, &m, NULL, 0));
	unmap_a.handle = m.handle;
	pin_b.va = (uintptr_t)vb + GPU_PAGE;
	map_b.handle = b;

	ASSERT_EQ(0, race_gate(STANDIN, "teardown.before_callback", HOLD_MS));
	ASSERT_EQ(0, op_start(&free_op));
	ASSERT_LT(0, race_wait_held(STANDIN, "teardown.before_callback", HOLD_MS));
	ASSERT_EQ(0, op_start(&pin_b));
	ASSERT_EQ(0, op_start(&map_b));
	ASSERT_EQ(0, op_start(&unmap_a));
	EXPECT_TRUE(op_blocked(&pin_b));
	EXPECT_TRUE(op_blocked(&map_b));
	EXPECT_EQ(0, op_join(&unmap_a));	/* done while the lock is held */
	EXPECT_EQ(0, gpu_counter("live_dma_mappings"));
	ASSERT_EQ(0, probe_state(self->env.probe, a, &st));
	EXPECT_EQ(0, st.callbacks);

	ASSERT_EQ(0, race_open(STANDIN, "teardown.before_callback"));
	EXPECT_EQ(0, op_join(&free_op));
	EXPECT_EQ(0, op_join(&pin_b));
	EXPECT_EQ(0, op_join(&map_b));
	ASSERT_EQ(0, probe_state(self->env.probe, a, &st));
	EXPECT_EQ(1, st.callbacks);
	EXPECT_EQ(0, gpu_counter("teardown_dma_mappings"));	/* unmapped before */
	EXPECT_EQ(0, probe_put(self->env.probe, a));
	EXPECT_EQ(0, probe_unmap(self->env.probe, map_b.map_handle, P2P_PROBE_PEER_GPU, 0));
	EXPECT_EQ(0, probe_put(self->env.probe, b));
	EXPECT_EQ(0, probe_put(self->env.probe, pin_b.pin.handle));
	EXPECT_EQ(0, munmap(self->va, 4 * GPU_PAGE));
	EXPECT_EQ(0, gpu_free(self->env.gpu, hb));
}

/*
 * With ro_api_lock_free (RM's RmRoApiLock free bit), a FREE holds the API lock for read, and the
 * GPUs lock, around its callbacks: a second free waits for it on the GPUs lock, and a pin or an
 * unpin (writers) of other memory waits on the API lock. So a client's barrier, a put_pages that waits for the
 * API lock, still waits for a callback that runs under a read-held lock.
 */
TEST_F(racepoint, teardown_holds_api_lock_for_read)
{
	struct op free_a = { .kind = OP_FREE, .gpu = self->env.gpu, .handle = self->handle };
	struct op free_b = { .kind = OP_FREE, .gpu = self->env.gpu };
	struct op pin_c = { .kind = OP_PIN, .probe = self->env.probe, .len = GPU_PAGE };
	struct op put_c = { .kind = OP_PUT, .probe = self->env.probe };
	struct p2p_probe_pin_state st;
	__u64 a, b, c, hb, hc;
	char *vb, *vc;

	ASSERT_EQ(0, write_text(STANDIN_PARAMS "ro_api_lock_free", "1"));
	vb = gpu_alloc(self->env.gpu, GPU_PAGE, &hb);
	vc = gpu_alloc(self->env.gpu, 2 * GPU_PAGE, &hc);
	ASSERT_NE(NULL, vb);
	ASSERT_NE(NULL, vc);
	a = probe_pin_ok(self->env.probe, (uintptr_t)self->va, GPU_PAGE, 0);
	b = probe_pin_ok(self->env.probe, (uintptr_t)vb, GPU_PAGE, 0);
	c = probe_pin_ok(self->env.probe, (uintptr_t)vc, GPU_PAGE, 0);
	ASSERT_NE(0, a);
	ASSERT_NE(0, b);
	ASSERT_NE(0, c);
	free_b.handle = hb;
	pin_c.va = (uintptr_t)vc + GPU_PAGE;
	put_c.handle = c;

	ASSERT_EQ(0, race_gate(STANDIN, "teardown.before_callback", HOLD_MS));
	ASSERT_EQ(0, op_start(&free_a));
	ASSERT_LT(0, race_wait_held(STANDIN, "teardown.before_callback", HOLD_MS));
	/* The second free first, alone: no writer is queued on the API lock that it could wait
	 * behind, so what holds it is the GPUs lock. */
	ASSERT_EQ(0, op_start(&free_b));
	EXPECT_TRUE(op_blocked(&free_b));
	EXPECT_EQ(0, gpu_counter("free_callbacks"));
	ASSERT_EQ(0, op_start(&pin_c));
	ASSERT_EQ(0, op_start(&put_c));
	EXPECT_TRUE(op_blocked(&pin_c));	/* on the API lock, a writer */
	EXPECT_TRUE(op_blocked(&put_c));
	ASSERT_EQ(0, probe_state(self->env.probe, a, &st));
	EXPECT_EQ(0, st.callbacks);
	ASSERT_EQ(0, probe_state(self->env.probe, b, &st));
	EXPECT_EQ(0, st.callbacks);

	ASSERT_EQ(0, race_open(STANDIN, "teardown.before_callback"));	/* free_b then passes it */
	EXPECT_EQ(0, op_join(&free_a));
	EXPECT_EQ(0, op_join(&free_b));
	EXPECT_EQ(0, op_join(&pin_c));
	EXPECT_EQ(0, op_join(&put_c));
	ASSERT_EQ(0, probe_state(self->env.probe, a, &st));
	EXPECT_EQ(1, st.callbacks);
	ASSERT_EQ(0, probe_state(self->env.probe, b, &st));
	EXPECT_EQ(1, st.callbacks);
	EXPECT_EQ(0, gpu_counter("callback_reentries"));
	EXPECT_EQ(0, probe_put(self->env.probe, a));
	EXPECT_EQ(0, probe_put(self->env.probe, b));
	EXPECT_EQ(0, probe_put(self->env.probe, pin_c.pin.handle));
	EXPECT_EQ(0, munmap(self->va, 4 * GPU_PAGE));
	EXPECT_EQ(0, munmap(vb, GPU_PAGE));
	EXPECT_EQ(0, gpu_free(self->env.gpu, hc));
}

/* dma_map_pages reads the table before it takes the API lock: held there, it blocks nobody. */
TEST_F(racepoint, dma_map_reads_before_the_lock)
{
	struct op map = { .kind = OP_MAP, .probe = self->env.probe };
	__u64 a, b;

	a = probe_pin_ok(self->env.probe, (uintptr_t)self->va, GPU_PAGE, 0);
	ASSERT_NE(0, a);
	map.handle = a;
	ASSERT_EQ(0, race_gate(STANDIN, "dma_map.read", HOLD_MS));
	ASSERT_EQ(0, op_start(&map));
	ASSERT_LT(0, race_wait_held(STANDIN, "dma_map.read", HOLD_MS));
	b = probe_pin_ok(self->env.probe, (uintptr_t)self->va + GPU_PAGE, GPU_PAGE, 0);
	EXPECT_NE(0, b);
	EXPECT_EQ(0, probe_put(self->env.probe, b));
	ASSERT_EQ(0, race_open(STANDIN, "dma_map.read"));
	EXPECT_EQ(0, op_join(&map));
	EXPECT_EQ(0, probe_unmap(self->env.probe, map.map_handle, P2P_PROBE_PEER_GPU, 0));
	EXPECT_EQ(0, probe_put(self->env.probe, a));
	EXPECT_EQ(0, gpu_free(self->env.gpu, self->handle));
}

/*
 * A put_pages that has not taken the API lock yet when the free starts: the callback runs, the
 * table goes, and the put then finds nothing and returns 0.
 */
TEST_F(racepoint, put_pages_after_teardown)
{
	struct op put = { .kind = OP_PUT, .probe = self->env.probe };
	struct p2p_probe_pin_state st;

	put.handle = probe_pin_ok(self->env.probe, (uintptr_t)self->va, GPU_PAGE, 0);
	ASSERT_NE(0, put.handle);
	ASSERT_EQ(0, race_gate(STANDIN, "put_pages.before_lock", HOLD_MS));
	ASSERT_EQ(0, op_start(&put));
	ASSERT_LT(0, race_wait_held(STANDIN, "put_pages.before_lock", HOLD_MS));
	EXPECT_EQ(0, ioctl(self->env.gpu, NVP2P_IOC_FREE, &self->handle));
	ASSERT_EQ(0, probe_state(self->env.probe, put.handle, &st));
	EXPECT_EQ(1, st.callbacks);
	ASSERT_EQ(0, race_open(STANDIN, "put_pages.before_lock"));
	EXPECT_EQ(0, op_join(&put));
	EXPECT_EQ(1, gpu_counter("stale_put_pages"));
	EXPECT_EQ(0, gpu_counter("live_page_tables"));
	EXPECT_EQ(0, munmap(self->va, 4 * GPU_PAGE));
}

/*
 * A put_pages that unlinked the pin before the free: no callback for it; put_pages frees the table
 * after the free has finished.
 */
TEST_F(racepoint, put_pages_unlinked_before_free)
{
	struct op put = { .kind = OP_PUT, .probe = self->env.probe };

	put.handle = probe_pin_ok(self->env.probe, (uintptr_t)self->va, GPU_PAGE, 0);
	ASSERT_NE(0, put.handle);
	ASSERT_EQ(0, probe_map(self->env.probe, put.handle, P2P_PROBE_PEER_GPU, 0, NULL, NULL, 0));
	ASSERT_EQ(0, race_gate(STANDIN, "put_pages.unlinked", HOLD_MS));
	ASSERT_EQ(0, op_start(&put));
	ASSERT_LT(0, race_wait_held(STANDIN, "put_pages.unlinked", HOLD_MS));
	EXPECT_EQ(0, gpu_counter("live_pins"));
	EXPECT_EQ(0, gpu_counter("bar1_pinned_bytes"));
	EXPECT_EQ(1, gpu_counter("live_page_tables"));
	EXPECT_EQ(0, gpu_free(self->env.gpu, self->handle));
	EXPECT_EQ(0, gpu_counter("free_callbacks"));
	ASSERT_EQ(0, race_open(STANDIN, "put_pages.unlinked"));
	EXPECT_EQ(0, op_join(&put));
	EXPECT_EQ(0, gpu_counter("live_page_tables"));
	EXPECT_EQ(0, gpu_counter("live_dma_mappings"));
}

/*
 * A dma_unmap_pages that has taken its mapping off the list before the free: the teardown does
 * not see it; the unmap finishes with the table gone, touching only the mapping.
 */
TEST_F(racepoint, dma_unmap_removed_before_free)
{
	struct op unmap = { .kind = OP_UNMAP, .probe = self->env.probe };
	struct p2p_probe_map m;
	__u64 h;

	h = probe_pin_ok(self->env.probe, (uintptr_t)self->va, GPU_PAGE, 0);
	ASSERT_NE(0, h);
	ASSERT_EQ(0, probe_map(self->env.probe, h, P2P_PROBE_PEER_GPU, 0, &m, NULL, 0));
	unmap.handle = m.handle;
	ASSERT_EQ(0, race_gate(STANDIN, "dma_unmap.removed", HOLD_MS));
	ASSERT_EQ(0, op_start(&unmap));
	ASSERT_LT(0, race_wait_held(STANDIN, "dma_unmap.removed", HOLD_MS));
	EXPECT_EQ(0, gpu_free(self->env.gpu, self->handle));
	EXPECT_EQ(1, gpu_counter("free_callbacks"));
	EXPECT_EQ(0, gpu_counter("teardown_dma_mappings"));
	EXPECT_EQ(0, gpu_counter("live_page_tables"));
	EXPECT_EQ(1, gpu_counter("live_dma_mappings"));
	ASSERT_EQ(0, race_open(STANDIN, "dma_unmap.removed"));
	EXPECT_EQ(0, op_join(&unmap));
	EXPECT_EQ(0, gpu_counter("live_dma_mappings"));
	EXPECT_EQ(0, probe_put(self->env.probe, h));
}

TEST_HARNESS_MAIN
