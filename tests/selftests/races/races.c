// SPDX-License-Identifier: GPL-2.0
/*
 * Race windows: each test drives cudaFree, process exit, a deregistration from another task or
 * rmmod into one window of the real providers' protocol, forced with the stand-ins' race points
 * (a gate holds a task exactly where the real NVIDIA driver or MLNX_OFED host would be between two
 * steps), and checks what a user and an operator can see afterwards: the registration's answer,
 * that the memory key was revoked in time, and that nothing is left behind in the host, the
 * NVIDIA stand-in or the client. The runner (race_matrix.sh) loads one client with one set of
 * parameters and runs this program; RACE_CLIENT names the client (peermem_rs or nvidia_peermem).
 * docs/race-windows.md lists every window with what the real sources decide there, and what each
 * client does in it.
 *
 * A kernel splat (KASAN use-after-free, lockdep, a WARN, a hung task) anywhere in a test fails it:
 * the VM runner attributes the kernel log to the test that was running.
 */
#define _GNU_SOURCE	/* gettid() */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kselftest_harness.h"
#include "gpumem.h"
#include "pmh.h"
#include "race.h"

#define NV "nvidia_p2p_standin"
#define HOST "peer_mem_host"
#define GPU_PAGE NVP2P_GPU_PAGE_SIZE
#define LEN (2 * GPU_PAGE)
#define HELD_MS 10000

static const char *client(void)
{
	const char *c = getenv("RACE_CLIENT");

	return c && *c ? c : "peermem_rs";
}

static int ours(void)
{
	return !strcmp(client(), "peermem_rs");
}

static int param(const char *name)
{
	char path[256];

	snprintf(path, sizeof(path), "/sys/module/%s/parameters/%s", client(), name);
	return (int)read_number(path);
}

/* persistent_api_support=0: the invalidating client nv_mem takes user MRs. nvidia-peermem 550 has
 * no such parameter: its nv_mem is always the invalidating client. */
static int invalidating(void)
{
	return !ours() || param("persistent_api_support") == 0;
}

/* The host unmaps inside the invalidation (a legacy client: peerdirect_support=1). */
static int __attribute__((unused)) legacy(void)
{
	return param("peerdirect_support") == 1;
}

/* A counter of peermem-rs's debugfs stats file; -1 if missing, or the client is not ours. */
static long long client_stat(const char *key)
{
	long long v;

	if (!ours() || read_named("/sys/kernel/debug/peermem_rs/stats", key, &v, NULL) != 1)
		return -1;
	return v;
}

static void sleep_ms(unsigned int ms)
{
	usleep(ms * 1000);
}

static unsigned long long passes(const char *module, const char *point)
{
	struct race_info info;

	return race_read(module, point, &info) ? 0 : info.passes;
}

/* Wait until a task got past @point (@before: the passes counted before it was started). */
static int wait_passed(const char *module, const char *point, unsigned long long before)
{
	for (int i = 0; i < HELD_MS / 10; i++) {
		if (passes(module, point) > before)
			return 0;
		sleep_ms(10);
	}
	return -ETIMEDOUT;
}

/* Everything back to zero: what the fixture's teardown checks, polled (our work item may still
 * be letting go of a pin when the test's last call returns). */
static int settled(char *why, size_t len)
{
	for (int i = 0; i < 300; i++) {
		why[0] = '\0';
		if (pmh_counter("live_mrs") == 0 && !gpu_leaks(why, len) &&
		    (!ours() || (client_stat("live_registrations") == 0 &&
				 client_stat("pinned_bytes") == 0)))
			return 1;
		sleep_ms(10);
	}
	if (!why[0])
		snprintf(why, len, "live_mrs %lld, live_registrations %lld, pinned_bytes %lld",
			 pmh_counter("live_mrs"), client_stat("live_registrations"),
			 client_stat("pinned_bytes"));
	return 0;
}

/* A registration made by another thread of this process, so that it can be held at a gate. */
struct bg_reg {
	pthread_t thread;
	int pmh;
	void *va;
	size_t len;
	unsigned int flags;
	int rc;
	struct pmh_reg_mr mr;
	pid_t tid;		/* the thread's, once it runs */
	int done;		/* set (atomically) when the registration has returned */
};

static void *bg_reg_run(void *arg)
{
	struct bg_reg *r = arg;

	__atomic_store_n(&r->tid, gettid(), __ATOMIC_RELEASE);
	r->rc = pmh_reg(r->pmh, r->va, r->len, r->flags, &r->mr);
	__atomic_store_n(&r->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

static void bg_reg_start(struct bg_reg *r, int pmh, void *va, size_t len, unsigned int flags)
{
	*r = (struct bg_reg){ .pmh = pmh, .va = va, .len = len, .flags = flags };
	pthread_create(&r->thread, NULL, bg_reg_run, r);
}

static int bg_reg_join(struct bg_reg *r)
{
	pthread_join(r->thread, NULL);
	return r->rc;
}

/* Any host call made by another thread. */
struct bg_call {
	pthread_t thread;
	int (*fn)(void *);
	void *arg;
	int rc;
	pid_t tid;		/* the thread's, once it runs */
	int done;		/* set (atomically) when fn has returned */
};

static void *bg_call_run(void *arg)
{
	struct bg_call *c = arg;

	__atomic_store_n(&c->tid, gettid(), __ATOMIC_RELEASE);
	c->rc = c->fn(c->arg);
	__atomic_store_n(&c->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

static void bg_call_start(struct bg_call *c, int (*fn)(void *), void *arg)
{
	c->fn = fn;
	c->arg = arg;
	c->done = 0;
	c->tid = 0;
	pthread_create(&c->thread, NULL, bg_call_run, c);
}

static int bg_call_join(struct bg_call *c)
{
	pthread_join(c->thread, NULL);
	return c->rc;
}

/*
 * The second checkpoint of a window: the task raced against the held one must have come to the
 * point the window needs before the held task is let go. A racing task that was only slow would
 * make the window an ordinary sequence, and a test that passed anyway would prove nothing. It is
 * there when it is blocked at one of the providers' locks, as the top frame of its kernel stack
 * shows (/proc/self/task/<tid>/stack): the driver's RM API lock (the stand-in's rm_api_lock, where
 * RM takes rmapiLockAcquire), or the MR's mapping lock in the host's invalidation
 * (pmh_invalidate_peer_memory, where MLNX's ib_invalidate_peer_memory takes the umem's mapping_lock
 * after a moment on the umem_xa spinlock: the only lock it sleeps on itself, peer_mem.c 267-275 of
 * DOCA 3.2.1); or when it has finished (the whole of it ran inside the window).
 */
/* Is task @tid blocked in @fn: the top frame of its kernel stack (the scheduler's own functions,
 * the lock's slow path among them, are not listed there)? 1, 0 or -errno. */
static int blocked_in(pid_t tid, const char *fn)
{
	char path[64], buf[8192], want[96], *top;
	int n;

	snprintf(path, sizeof(path), "/proc/self/task/%d/stack", tid);
	n = read_text(path, buf, sizeof(buf));
	if (n)
		return n;
	top = strchr(buf, ']');
	snprintf(want, sizeof(want), "] %s+", fn);
	return top && !strncmp(top, want, strlen(want));
}

/* The first lines of task @tid's kernel stack, for a failure's log. */
static const char *stack_of(pid_t tid)
{
	static char buf[8192];
	char path[64];
	int n;

	snprintf(path, sizeof(path), "/proc/self/task/%d/stack", tid);
	n = read_text(path, buf, sizeof(buf));
	if (n)
		snprintf(buf, sizeof(buf), "(%s: %s)", path, strerror(-n));
	return buf;
}

/* Is task @tid blocked on a mutex of peermem-rs: in uninterruptible sleep (a mutex's wait) with
 * peermem-rs's own code as the top frame (mutex_lock's slow path is a scheduler function, not
 * listed; rustc inlines the lock call into its caller)? */
static int blocked_in_our_mutex(pid_t tid)
{
	const char *stack = stack_of(tid);
	const char *eol = strchr(stack, '\n');

	if (!eol || thread_state(tid) != 'D')
		return 0;
	return memmem(stack, eol - stack, "[peermem_rs]", 12) != NULL;
}

static const char *blocked_where(pid_t tid)
{
	if (blocked_in(tid, "rm_api_lock") == 1)
		return "waits for the driver's API lock";
	if (blocked_in(tid, "pmh_invalidate_peer_memory") == 1)
		return "waits for the MR's mapping lock in the host's invalidation";
	if (ours() && blocked_in_our_mutex(tid))
		return "waits for a mutex of peermem-rs";
	return NULL;
}

static long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

/* The racing task @tid (0: not started yet) is blocked at a lock, or @done: where, or NULL
 * after HELD_MS. */
static const char *racer_arrived(const pid_t *tid, const int *done)
{
	long long deadline = now_ms() + HELD_MS;
	const char *where;

	while (now_ms() < deadline) {
		if (__atomic_load_n(done, __ATOMIC_ACQUIRE))
			return "finished";
		if (__atomic_load_n(tid, __ATOMIC_ACQUIRE) && (where = blocked_where(*tid)))
			return where;
		sleep_ms(10);
	}
	return NULL;
}

/* The task @tid is blocked on the driver's API lock, within HELD_MS. */
static int waits_for_api_lock(const pid_t *tid)
{
	long long deadline = now_ms() + HELD_MS;

	while (now_ms() < deadline) {
		if (__atomic_load_n(tid, __ATOMIC_ACQUIRE) && blocked_in(*tid, "rm_api_lock") == 1)
			return 1;
		sleep_ms(10);
	}
	return 0;
}

struct free_arg {
	int gpu;
	__u64 handle;
};

static int do_free(void *arg)
{
	struct free_arg *f = arg;

	return gpu_free(f->gpu, f->handle);
}

struct dereg_arg {
	int pmh;
	__u64 mr;
};

static int do_dereg(void *arg)
{
	struct dereg_arg *d = arg;

	return pmh_dereg(d->pmh, d->mr);
}

FIXTURE(race) {
	int gpu;
	int pmh;
	__u64 handle;
	uint8_t *va;
	long long gate_timeouts;	/* of both stand-ins, before the test */
};

/* A gate that timed out let its task go on its own: the window was not forced as the test says. */
static long long gate_timeouts(void)
{
	return gpu_counter("race_gate_timeouts") + pmh_counter("race_gate_timeouts");
}

FIXTURE_SETUP(race)
{
	race_clear(NV);
	race_clear(HOST);
	self->gpu = gpu_open();
	self->pmh = pmh_open();
	ASSERT_LE(0, self->gpu) TH_LOG("NVIDIA stand-in not loaded: %s", strerror(-self->gpu));
	ASSERT_LE(0, self->pmh) TH_LOG("peer-memory host not loaded: %s", strerror(-self->pmh));
	ASSERT_TRUE(mod_loaded(client())) TH_LOG("%s is not loaded", client());
	self->va = gpu_alloc(self->gpu, LEN, &self->handle);
	ASSERT_NE(NULL, self->va);
	self->gate_timeouts = gate_timeouts();
}

FIXTURE_TEARDOWN(race)
{
	char why[256];

	race_clear(NV);
	race_clear(HOST);
	write_text("/sys/kernel/debug/" NV "/recycle_freed_pins", "0");
	write_text("/sys/kernel/debug/" NV "/recycle_into_persistent", "0");
	write_text("/sys/module/" NV "/parameters/internal_object_pid", "0");
	write_text("/sys/module/" NV "/parameters/mps_departed_tgid", "0");
	write_text("/sys/module/" HOST "/parameters/stop_notifier_before_25_04", "0");
	write_text("/sys/module/" HOST "/parameters/fail_mkey", "0");
	if (self->pmh >= 0)
		close(self->pmh);
	/* The allocation, unless the test freed it (its mapping would keep it alive). */
	if (self->gpu >= 0)
		gpu_free(self->gpu, self->handle);
	munmap(self->va, LEN);
	if (self->gpu >= 0)
		close(self->gpu);
	EXPECT_TRUE(settled(why, sizeof(why))) TH_LOG("left behind: %s", why);
	EXPECT_EQ(self->gate_timeouts, gate_timeouts()) TH_LOG("a race gate timed out: a held task went on by itself");
}

/* The registration, held by the host right after acquire said "mine" (mapping lock taken), then by
 * the NVIDIA stand-in at @point of the call that comes next: the registration's own calls, not
 * acquire's probe. */
static int hold_registration_at(struct bg_reg *r, int pmh, void *va, const char *point)
{
	int ret = race_gate(HOST, "reg.locked", 0);

	if (ret)
		return ret;
	bg_reg_start(r, pmh, va, LEN, PMH_REG_WRITE);
	if (race_wait_held(HOST, "reg.locked", HELD_MS) < 0)
		return -ETIMEDOUT;
	ret = race_gate(NV, point, 0);
	race_open(HOST, "reg.locked");
	if (ret)
		return ret;
	return race_wait_held(NV, point, HELD_MS) < 0 ? -ETIMEDOUT : 0;
}

/* cudaFree while the registration's get_pages is between the driver's two API-lock sections (the
 * pin exists, its callback is not registered yet): the driver drops the pin silently, get_pages
 * fails, and the registration with it. */
TEST_F(race, free_during_get_pages_before_callback)
{
	struct bg_reg r;

	if (!invalidating())
		SKIP(return, "not applicable: the persistent client makes no get_pages in the registration");
	ASSERT_EQ(0, hold_registration_at(&r, self->pmh, self->va, "get_pages.pinned"));
	ASSERT_EQ(0, gpu_free(self->gpu, self->handle));
	race_open(NV, "get_pages.pinned");
	EXPECT_GT(0, bg_reg_join(&r));
	if (ours()) {
		EXPECT_EQ(-EFAULT, r.rc) TH_LOG("freed while registering: EFAULT");
	}
}

/* cudaFree after get_pages registered the callback, before it returned to the client: the
 * callback comes while the registration holds the host's mapping lock. */
TEST_F(race, free_while_get_pages_returns)
{
	unsigned long long cb = passes(NV, "teardown.before_callback");
	const char *where;
	struct free_arg f = { self->gpu, self->handle };
	struct bg_call c;
	struct bg_reg r;

	if (!invalidating())
		SKIP(return, "not applicable: the persistent client makes no get_pages in the registration");
	ASSERT_EQ(0, hold_registration_at(&r, self->pmh, self->va, "get_pages.return"));
	bg_call_start(&c, do_free, &f);
	ASSERT_EQ(0, wait_passed(NV, "teardown.before_callback", cb));
	where = racer_arrived(&c.tid, &c.done);
	EXPECT_NE(NULL, where) TH_LOG("the free neither finished nor came to a lock; its stack:\n%s", stack_of(c.tid));
	TH_LOG("the free %s", where ? where : "(nowhere)");
	race_open(NV, "get_pages.return");
	EXPECT_EQ(0, bg_call_join(&c));
	EXPECT_GT(0, bg_reg_join(&r));
	if (ours()) {
		EXPECT_EQ(-EFAULT, r.rc);
	}
}

/* cudaFree while dma_map_pages is at @point (the registration holds the host's mapping lock): the
 * callback runs with the driver's API lock held. With @api_lock, dma_map_pages has read the page
 * table and must then wait for that lock while the teardown holds it (the teardown is held after
 * our callback, before it frees the pin); otherwise the free runs to its end (or to a lock) first. */
static void free_during_dma_map(struct __test_metadata *_metadata, FIXTURE_DATA(race) *self,
				const char *point, int api_lock)
{
	unsigned long long cb = passes(NV, "teardown.before_callback");
	struct free_arg f = { self->gpu, self->handle };
	int hold_teardown = api_lock && invalidating();
	const char *where;
	struct bg_call c;
	struct bg_reg r;

	race_gate(NV, point, 0);
	bg_reg_start(&r, self->pmh, self->va, LEN, PMH_REG_WRITE);
	ASSERT_LT(0, race_wait_held(NV, point, HELD_MS));
	if (hold_teardown)
		race_gate(NV, "teardown.after_callback", 0);
	bg_call_start(&c, do_free, &f);
	if (invalidating()) {
		ASSERT_EQ(0, wait_passed(NV, "teardown.before_callback", cb));
	}
	if (hold_teardown) {
		/* The teardown is held with the API lock, or (a client whose callback waits for the
		 * host) its callback waits for the mapping lock the registration holds. */
		where = race_wait_held(NV, "teardown.after_callback", HELD_MS) == c.tid ?
			"is held after the callback" : blocked_where(c.tid);
	} else {
		where = racer_arrived(&c.tid, &c.done);
	}
	EXPECT_NE(NULL, where) TH_LOG("the free came to none of the window's points");
	TH_LOG("the free %s", where ? where : "(nowhere)");
	race_open(NV, point);
	if (hold_teardown) {
		EXPECT_TRUE(waits_for_api_lock(&r.tid))
			TH_LOG("dma_map_pages did not wait for the API lock the teardown holds; its stack:\n%s", stack_of(r.tid));
		race_open(NV, "teardown.after_callback");
	}
	EXPECT_EQ(0, bg_call_join(&c));
	bg_reg_join(&r);
	if (!invalidating()) {
		/* Persistent: the memory outlives cudaFree; the registration completes and works. */
		EXPECT_EQ(0, r.rc);
		if (!r.rc) {
			struct pmh_query_mr q;

			ASSERT_EQ(0, pmh_query(self->pmh, r.mr.handle, &q, NULL, 0));
			EXPECT_EQ(PMH_MR_MAPPED, q.state);
			EXPECT_EQ(0, pmh_dereg(self->pmh, r.mr.handle));
		}
		return;
	}
	if (ours()) {
		/* The memory was freed while dma_map was in flight: refused as such. */
		EXPECT_EQ(-EFAULT, r.rc);
	} else if (!r.rc) {
		EXPECT_EQ(0, pmh_dereg(self->pmh, r.mr.handle));
	}
}

TEST_F(race, free_while_dma_map_waits_for_the_api_lock)
{
	free_during_dma_map(_metadata, self, "dma_map.read", 1);
}

TEST_F(race, free_while_dma_map_links_its_mapping)
{
	free_during_dma_map(_metadata, self, "dma_map.before_insert", 0);
}

/* cudaFree between the end of dma_map and the memory key being armed (the host still holds the
 * mapping lock): the invalidation waits, then revokes the completed registration. */
TEST_F(race, free_before_the_key_is_armed)
{
	unsigned long long cb = passes(NV, "teardown.before_callback");
	const char *where;
	struct free_arg f = { self->gpu, self->handle };
	struct pmh_query_mr q;
	struct bg_call c;
	struct bg_reg r;

	race_gate(HOST, "reg.before_activate", 0);
	bg_reg_start(&r, self->pmh, self->va, LEN, PMH_REG_WRITE);
	ASSERT_LT(0, race_wait_held(HOST, "reg.before_activate", HELD_MS));
	bg_call_start(&c, do_free, &f);
	if (invalidating()) {
		ASSERT_EQ(0, wait_passed(NV, "teardown.before_callback", cb));
	}
	where = racer_arrived(&c.tid, &c.done);
	EXPECT_NE(NULL, where) TH_LOG("the free neither finished nor came to a lock; its stack:\n%s", stack_of(c.tid));
	TH_LOG("the free %s", where ? where : "(nowhere)");
	race_open(HOST, "reg.before_activate");
	EXPECT_EQ(0, bg_reg_join(&r));
	EXPECT_EQ(0, bg_call_join(&c));
	ASSERT_EQ(0, pmh_query(self->pmh, r.mr.handle, &q, NULL, 0));
	EXPECT_EQ(invalidating() ? PMH_MR_INVALIDATED : PMH_MR_MAPPED, q.state);
	EXPECT_EQ(0, pmh_dereg(self->pmh, r.mr.handle));
}

/* cudaFree while the deregistration's dma_unmap_pages is about to take the pin's semaphore. */
TEST_F(race, free_while_dma_unmap_takes_the_semaphore)
{
	unsigned long long cb = passes(NV, "teardown.before_callback");
	const char *where;
	struct free_arg f = { self->gpu, self->handle };
	struct dereg_arg d = { self->pmh };
	struct pmh_reg_mr mr;
	struct bg_call c, dc;

	ASSERT_EQ(0, pmh_reg(self->pmh, self->va, LEN, PMH_REG_WRITE, &mr));
	d.mr = mr.handle;
	race_gate(NV, "dma_unmap.before_sem", 0);
	bg_call_start(&dc, do_dereg, &d);
	ASSERT_LT(0, race_wait_held(NV, "dma_unmap.before_sem", HELD_MS));
	bg_call_start(&c, do_free, &f);
	if (invalidating()) {
		ASSERT_EQ(0, wait_passed(NV, "teardown.before_callback", cb));
	}
	where = racer_arrived(&c.tid, &c.done);
	EXPECT_NE(NULL, where) TH_LOG("the free neither finished nor came to a lock; its stack:\n%s", stack_of(c.tid));
	TH_LOG("the free %s", where ? where : "(nowhere)");
	race_open(NV, "dma_unmap.before_sem");
	EXPECT_EQ(0, bg_call_join(&dc));
	EXPECT_EQ(0, bg_call_join(&c));
}

/* cudaFree while the deregistration's unpin waits for the driver's API lock: nvidia-peermem's
 * put_pages of its pin; peermem-rs's put_pages_persistent of P (it makes no put_pages: its N
 * lingers until this very free calls it back). */
TEST_F(race, free_while_put_pages_waits_for_the_api_lock)
{
	unsigned long long cb = passes(NV, "teardown.before_callback");
	struct free_arg f = { self->gpu, self->handle };
	struct dereg_arg d = { self->pmh };
	const char *point = invalidating() && !ours() ? "put_pages.before_lock" : "put_pages_persistent.before_lock";
	struct pmh_reg_mr mr;
	struct bg_call c, dc;
	const char *where;

	ASSERT_EQ(0, pmh_reg(self->pmh, self->va, LEN, PMH_REG_WRITE, &mr));
	d.mr = mr.handle;
	race_gate(NV, point, 0);
	bg_call_start(&dc, do_dereg, &d);
	ASSERT_LT(0, race_wait_held(NV, point, HELD_MS));
	if (invalidating()) {
		/* The teardown held with the API lock, after the callback and before the frees. */
		race_gate(NV, "teardown.after_callback", 0);
		bg_call_start(&c, do_free, &f);
		ASSERT_EQ(0, wait_passed(NV, "teardown.before_callback", cb));
		ASSERT_LT(0, race_wait_held(NV, "teardown.after_callback", HELD_MS))
			TH_LOG("the free's teardown did not come to the end of the callback");
		race_open(NV, point);
		EXPECT_TRUE(waits_for_api_lock(&dc.tid))
			TH_LOG("put_pages did not wait for the API lock the teardown holds; its stack:\n%s", stack_of(dc.tid));
		race_open(NV, "teardown.after_callback");
	} else {
		/* A persistent pin has no teardown to hold: the free runs to its end, or to a lock. */
		bg_call_start(&c, do_free, &f);
		where = racer_arrived(&c.tid, &c.done);
		EXPECT_NE(NULL, where) TH_LOG("the free neither finished nor came to a lock; its stack:\n%s", stack_of(c.tid));
		TH_LOG("the free %s", where ? where : "(nowhere)");
		race_open(NV, point);
	}
	EXPECT_EQ(0, bg_call_join(&dc));
	EXPECT_EQ(0, bg_call_join(&c));
}

/* A deregistration while the driver's teardown holds its API lock between our callback's return
 * and its freeing of the pin. */
TEST_F(race, deregistration_while_the_teardown_frees)
{
	unsigned long long cb = passes(NV, "teardown.after_callback");
	const char *where;
	struct free_arg f = { self->gpu, self->handle };
	struct dereg_arg d = { self->pmh };
	struct pmh_reg_mr mr;
	struct bg_call c, dc;

	if (!invalidating())
		SKIP(return, "not applicable: the driver tears down no persistent pin");
	ASSERT_EQ(0, pmh_reg(self->pmh, self->va, LEN, PMH_REG_WRITE, &mr));
	d.mr = mr.handle;
	race_gate(NV, "teardown.after_callback", 0);
	bg_call_start(&c, do_free, &f);
	ASSERT_LT(0, race_wait_held(NV, "teardown.after_callback", HELD_MS));
	(void)cb;
	bg_call_start(&dc, do_dereg, &d);
	where = racer_arrived(&dc.tid, &dc.done);
	EXPECT_NE(NULL, where) TH_LOG("the deregistration neither finished nor came to a lock; its stack:\n%s", stack_of(dc.tid));
	TH_LOG("the deregistration %s", where ? where : "(nowhere)");
	race_open(NV, "teardown.after_callback");
	EXPECT_EQ(0, bg_call_join(&c));
	EXPECT_EQ(0, bg_call_join(&dc));
}

/* cudaFree of the fixture's memory, which must run to its end while another task is held at
 * @held. 1 when it did (and was joined); 0, logged, when it came to a lock or did not return. */
static int free_to_its_end(struct __test_metadata *_metadata, FIXTURE_DATA(race) *self,
			   const char *held)
{
	struct free_arg f = { self->gpu, self->handle };
	struct bg_call c;
	const char *where;

	bg_call_start(&c, do_free, &f);
	where = racer_arrived(&c.tid, &c.done);
	if (!where || strcmp(where, "finished")) {
		TH_LOG("the free did not run to its end while %s was held (%s); its stack:\n%s", held,
		       where ? where : "nowhere", stack_of(c.tid));
		return 0;
	}
	return bg_call_join(&c) == 0;
}

/* The stale-unpin windows' common part: a registration of the fixture's memory, its
 * deregistration's put_pages held before the driver's API lock, cudaFree of that memory run to its
 * end (our callback, then the pin's table freed and, with the stand-in's recycle_freed_pins, kept
 * for the next pin), then a registration of @other started, which pins now or waits, and the held
 * put_pages let go. @r is the other registration, joined. */
static void hold_a_stale_unpin(struct __test_metadata *_metadata, FIXTURE_DATA(race) *self,
			       uint8_t *other, struct bg_reg *r)
{
	struct dereg_arg d = { self->pmh };
	long long callbacks = gpu_counter("free_callbacks");
	struct pmh_reg_mr mr;
	struct bg_call dc;
	const char *where;

	ASSERT_EQ(0, pmh_reg(self->pmh, self->va, LEN, PMH_REG_WRITE, &mr));
	d.mr = mr.handle;
	race_gate(NV, "put_pages.before_lock", 0);
	bg_call_start(&dc, do_dereg, &d);
	ASSERT_LT(0, race_wait_held(NV, "put_pages.before_lock", HELD_MS));
	/* The free runs to its end: the callback, then the table freed (and kept for the next pin). */
	ASSERT_TRUE(free_to_its_end(_metadata, self, "the put_pages"));
	EXPECT_EQ(callbacks + 1, gpu_counter("free_callbacks"));
	/* The other registration pins now, or waits until the held put_pages has returned. */
	bg_reg_start(r, self->pmh, other, LEN, PMH_REG_WRITE);
	where = racer_arrived(&r->tid, &r->done);
	EXPECT_NE(NULL, where) TH_LOG("the other registration neither finished nor came to a lock; its stack:\n%s",
				      stack_of(r->tid));
	TH_LOG("the other registration %s", where ? where : "(nowhere)");
	race_open(NV, "put_pages.before_lock");
	EXPECT_EQ(0, bg_call_join(&dc));
	EXPECT_EQ(0, bg_reg_join(r));
}

/* peermem-rs's side of the stale-unpin windows: its deregistration makes no put_pages of the pin
 * the free calls back (N lingers until then: src/logic/registration.rs, rule 2), so there is no
 * unpin to hold and none to go stale. Registers the fixture's memory and deregisters it (no
 * put_pages made, the registration lingering), frees it (the callback comes, late; the driver
 * frees N's table and, with recycle_freed_pins, keeps it for the next pin), then registers
 * @other, which takes that table's address. @r is the other registration, joined. */
static void no_unpin_to_go_stale(struct __test_metadata *_metadata, FIXTURE_DATA(race) *self,
				 uint8_t *other, struct bg_reg *r)
{
	unsigned long long unpins = passes(NV, "put_pages.before_lock");
	long long callbacks = gpu_counter("free_callbacks");
	long long lingering = client_stat("lingering");
	long long late = client_stat("late_callbacks");
	struct pmh_reg_mr mr;

	ASSERT_EQ(0, pmh_reg(self->pmh, self->va, LEN, PMH_REG_WRITE, &mr));
	EXPECT_EQ(0, pmh_dereg(self->pmh, mr.handle));
	EXPECT_EQ(unpins, passes(NV, "put_pages.before_lock"))
		TH_LOG("the deregistration made a put_pages of a pin");
	EXPECT_EQ(lingering + 1, client_stat("lingering"));
	EXPECT_EQ(0, gpu_free(self->gpu, self->handle));
	EXPECT_EQ(callbacks + 1, gpu_counter("free_callbacks"));
	EXPECT_EQ(lingering, client_stat("lingering"));
	EXPECT_EQ(late + 1, client_stat("late_callbacks"));
	bg_reg_start(r, self->pmh, other, LEN, PMH_REG_WRITE);
	EXPECT_EQ(0, bg_reg_join(r));
}

/* After a stale-unpin window: the other registration (@r, of the memory @other_handle) is whole:
 * mapped, revoked by its own free's callback, deregistered cleanly; and that memory is freed. */
static void other_registration_is_whole(struct __test_metadata *_metadata, FIXTURE_DATA(race) *self,
					struct bg_reg *r, __u64 other_handle)
{
	long long callbacks = gpu_counter("free_callbacks");
	struct pmh_query_mr q;

	if (r->rc) {
		gpu_free(self->gpu, other_handle);
		return;
	}
	ASSERT_EQ(0, pmh_query(self->pmh, r->mr.handle, &q, NULL, 0));
	EXPECT_EQ(PMH_MR_MAPPED, q.state);
	EXPECT_EQ(0, gpu_free(self->gpu, other_handle));
	EXPECT_LT(callbacks, gpu_counter("free_callbacks"))
		TH_LOG("freeing the other memory called back none of its pins: its pin was unpinned");
	ASSERT_EQ(0, pmh_query(self->pmh, r->mr.handle, &q, NULL, 0));
	EXPECT_EQ(PMH_MR_INVALIDATED, q.state);
	EXPECT_EQ(0, pmh_dereg(self->pmh, r->mr.handle));
}

/* The stale unpin: the deregistration's put_pages of the pin it made for the callback is held
 * before the driver's API lock; cudaFree tears that pin down (our callback runs, the driver frees
 * its table); then a registration of other memory in the same process pins, and the driver gives
 * its table the freed one's address (the stand-in's recycle_freed_pins: what a slab allocator
 * without KASAN's quarantine does, as the benchmark kernel's did in `make stress`). The driver
 * finds a pin by that address only (550 p2p.c:1455-1493): had the new pin been made before the
 * held put_pages goes on, it would unpin the other registration's pin without its callback and
 * free its table under it. peermem-rs makes no such put_pages (`no_unpin_to_go_stale`; the
 * client before N lingered took a mutex, N_PINS, around its pins and unpins of N, and the new
 * registration waited). Fails when a put_pages unpins the new registration's pin (the stand-in's
 * reused_put_pages, a WARN), or when the other registration's pin is gone or its callback lost. */
TEST_F(race, stale_unpin_while_another_registration_pins)
{
	long long reused = gpu_counter("reused_put_pages");
	long long recycled = gpu_counter("recycled_pins");
	long long stale = gpu_counter("stale_put_pages");
	struct bg_reg r;
	uint8_t *other;
	__u64 other_handle;

	if (!invalidating())
		SKIP(return, "not applicable: the persistent client's pins are torn down by no free");
	other = gpu_alloc(self->gpu, LEN, &other_handle);
	ASSERT_NE(NULL, other);
	ASSERT_EQ(0, write_text("/sys/kernel/debug/" NV "/recycle_freed_pins", "1"));
	if (ours())
		no_unpin_to_go_stale(_metadata, self, other, &r);
	else
		hold_a_stale_unpin(_metadata, self, other, &r);
	/* The window was there: the other registration's pin got the torn-down table's address. */
	EXPECT_LT(recycled, gpu_counter("recycled_pins"));
	EXPECT_EQ(reused, gpu_counter("reused_put_pages"))
		TH_LOG("a put_pages unpinned a pin made after it began: the other registration's");
	if (!ours()) {
		/* The held put_pages found nothing. */
		EXPECT_LT(stale, gpu_counter("stale_put_pages"));
	}
	other_registration_is_whole(_metadata, self, &r, other_handle);
	munmap(other, LEN);
}

/* The stale unpin again, with a persistent pin as the one that takes the torn-down table's
 * address. Here the registering process is the one that created RM's internal P2P object (the
 * GPU's first opener, as a CUDA job is on a node without nvidia-persistenced), so its put_pages
 * searches that object's persistent pins too (the stand-in's internal_object_pid; 550
 * third_party_p2p.c:75, 153-164, 300-342). The deregistration's put_pages is held before the API
 * lock; cudaFree tears its callback pin down; then a registration of other memory in the same
 * process makes its persistent pin (acquire's) and gets the freed table's address. Had that pin
 * been made before the held put_pages goes on, the put_pages would unpin it and free its live
 * table (the stand-in's reused_put_pages and internal_put_pages; a use after free at that
 * registration's deregistration). peermem-rs makes no such put_pages (`no_unpin_to_go_stale`; the
 * client before N lingered took N_PINS around its persistent pins as well). nvidia-peermem 550
 * makes no persistent pin. */
TEST_F(race, stale_unpin_while_another_registration_acquires)
{
	long long reused = gpu_counter("reused_put_pages");
	long long internal = gpu_counter("internal_put_pages");
	long long recycled = gpu_counter("recycled_pins");
	struct bg_reg r;
	uint8_t *other;
	__u64 other_handle;
	char pid[16];

	if (!invalidating())
		SKIP(return, "not applicable: the persistent client's pins are torn down by no free");
	if (!ours())
		SKIP(return, "not applicable: nvidia-peermem 550 makes no persistent pin");
	other = gpu_alloc(self->gpu, LEN, &other_handle);
	ASSERT_NE(NULL, other);
	snprintf(pid, sizeof(pid), "%d", getpid());
	ASSERT_EQ(0, write_text("/sys/module/" NV "/parameters/internal_object_pid", pid));
	ASSERT_EQ(0, write_text("/sys/kernel/debug/" NV "/recycle_into_persistent", "1"));
	ASSERT_EQ(0, write_text("/sys/kernel/debug/" NV "/recycle_freed_pins", "1"));
	no_unpin_to_go_stale(_metadata, self, other, &r);
	/* The window was there: the other registration's persistent pin got the freed address. */
	EXPECT_LT(recycled, gpu_counter("recycled_pins"));
	EXPECT_EQ(reused, gpu_counter("reused_put_pages"))
		TH_LOG("a put_pages unpinned a pin made after it began: the other registration's persistent pin");
	EXPECT_EQ(internal, gpu_counter("internal_put_pages"))
		TH_LOG("a put_pages found a persistent pin in RM's internal object");
	other_registration_is_whole(_metadata, self, &r, other_handle);
	munmap(other, LEN);
}

/* Deregistration from another task first (a forked child that inherited the uverbs file and
 * closes it last; a device-removal kworker), then the owner frees the memory. With token 0 the
 * driver unpins only for the pinning process, so the other task's put_pages finds nothing and the
 * free callback stays armed with the client's data until the owner's free. */
enum foreign { FORKED_CHILD, DEVICE_REMOVAL };

static void foreign_dereg_then_free(struct __test_metadata *_metadata, FIXTURE_DATA(race) *self,
				    enum foreign how, int try_rmmod)
{
	long long foreign = client_stat("foreign_unpins");
	struct pmh_reg_mr mr;
	int status;
	pid_t pid;

	ASSERT_EQ(0, pmh_reg(self->pmh, self->va, LEN, PMH_REG_WRITE, &mr));
	if (how == FORKED_CHILD) {
		/* The child inherits the file; the parent closes its copy; the child's exit is the
		 * last close and deregisters, in the child. */
		pid = fork();
		ASSERT_LE(0, pid);
		if (pid == 0) {
			usleep(100 * 1000);
			_exit(0);
		}
		close(self->pmh);
		self->pmh = -1;
		ASSERT_EQ(pid, waitpid(pid, &status, 0));
		ASSERT_TRUE(WIFEXITED(status));
	} else {
		ASSERT_EQ(1, pmh_remove_device(self->pmh));
	}
	EXPECT_EQ(0, pmh_counter("live_mrs"));
	if (ours() && invalidating()) {
		EXPECT_EQ(foreign + 1, client_stat("foreign_unpins"));
	}
	if (try_rmmod && ours()) {
		/* The driver still holds the registration's pin and our callback: we must stay. */
		if (invalidating()) {
			EXPECT_EQ(-EAGAIN, mod_unload(client()));
		} else {
			EXPECT_EQ(0, client_stat("live_registrations"));
		}
	}
	/* The owner frees the memory: the driver calls back now. */
	EXPECT_EQ(0, gpu_free(self->gpu, self->handle));
	if (ours() && invalidating()) {
		char why[256];

		EXPECT_TRUE(settled(why, sizeof(why))) TH_LOG("%s", why);
		EXPECT_LT(0, client_stat("late_callbacks"));
	}
}

TEST_F(race, forked_child_deregisters_then_the_owner_frees)
{
	foreign_dereg_then_free(_metadata, self, FORKED_CHILD, 0);
}

TEST_F(race, device_removal_deregisters_then_the_owner_frees)
{
	foreign_dereg_then_free(_metadata, self, DEVICE_REMOVAL, 0);
}

/* MPS: the client process leaves the server's P2P object (its RM client is freed: its
 * close of /dev/nvidiactl, or an exit that closes that file before the uverbs one), then
 * deregisters, then the server frees the memory. The client's put_pages finds no pin any more and
 * answers 0 while the pin stays armed (RM took only the pid out of the object's list), so a client
 * that takes that 0 for an unpin lets go of what the driver's callback still names. peermem-rs
 * makes no put_pages of it: the registration lingers for the callback. No window to force: the
 * three steps happen one after the other. */
TEST_F(race, mps_client_leaves_then_deregisters_then_the_server_frees)
{
	long long lingering = client_stat("lingering");
	long long departed = gpu_counter("departed_lookups");
	unsigned long long unpins = passes(NV, "put_pages.before_lock");
	char pid[16];
	struct pmh_reg_mr mr;

	ASSERT_EQ(0, pmh_reg(self->pmh, self->va, LEN, PMH_REG_WRITE, &mr));
	snprintf(pid, sizeof(pid), "%d", getpid());
	ASSERT_EQ(0, write_text("/sys/module/" NV "/parameters/mps_departed_tgid", pid));
	EXPECT_EQ(0, pmh_dereg(self->pmh, mr.handle));
	EXPECT_EQ(0, pmh_counter("live_mrs"));
	if (invalidating() && !ours()) {
		/* The client's put_pages of its non-persistent pin looked in vain. */
		EXPECT_LT(departed, gpu_counter("departed_lookups"));
	}
	if (ours() && invalidating()) {
		/* No put_pages, so no lookup: the registration, its module reference with it, lingers
		 * for the callback. */
		EXPECT_EQ(unpins, passes(NV, "put_pages.before_lock"));
		EXPECT_EQ(departed, gpu_counter("departed_lookups"));
		EXPECT_EQ(lingering + 1, client_stat("lingering"));
		EXPECT_EQ(1, client_stat("live_registrations"));
	}
	/* The server frees the memory (the stand-in's owner file stands for it): the driver calls
	 * back every pin of it now. */
	EXPECT_EQ(0, gpu_free(self->gpu, self->handle));
	if (ours() && invalidating()) {
		char why[256];

		EXPECT_TRUE(settled(why, sizeof(why))) TH_LOG("%s", why);
		EXPECT_LT(0, client_stat("late_callbacks"));
		EXPECT_EQ(lingering, client_stat("lingering"));
	}
}

/* The window a proof leaves open (issue 22, item 1): the owner's deregistration has proven it
 * reaches its memory, and its RM client goes (its pid leaves the server's P2P object) before its
 * put_pages of N looks N up. put_pages finds nothing and answers 0, N stays armed with the
 * client's data, and a client that takes the 0 for the unpin lets the server's free call back a
 * registration that is gone. Forced on nvidia-peermem's side: its put_pages held at its start
 * while the leave happens; nvidia-peermem 550 takes the 0 so (a use after free under KASAN:
 * docs/open-windows.md), so only `windows.py --open-windows` runs it for nvidia-peermem
 * (RACE_OPEN_WINDOW=1). peermem-rs makes neither the proof nor the put_pages (its N lingers): the
 * owner deregisters, leaves, and the server's free calls the lingering registration back; it runs
 * in make check. (The client before N lingered proved and then unpinned: KASAN found the use
 * after free here, docs/open-windows.md.) */
TEST_F(race, mps_client_leaves_between_the_proof_and_its_unpin)
{
	struct dereg_arg d = { self->pmh };
	struct pmh_reg_mr mr;
	struct bg_call dc;
	char pid[16];

	if (!invalidating())
		SKIP(return, "not applicable: the persistent flavour has no pin the driver calls back");
	if (!ours() && !getenv("RACE_OPEN_WINDOW"))
		SKIP(return, "not applicable in make check: nvidia-peermem's MPS window crashes the kernel (windows.py --open-windows runs it)");
	snprintf(pid, sizeof(pid), "%d", getpid());
	ASSERT_EQ(0, pmh_reg(self->pmh, self->va, LEN, PMH_REG_WRITE, &mr));
	if (ours()) {
		unsigned long long unpins = passes(NV, "put_pages.before_lock");
		unsigned long long pins = passes(NV, "get_pages_persistent.return");
		long long lingering = client_stat("lingering");
		long long late = client_stat("late_callbacks");
		char why[256];

		EXPECT_EQ(0, pmh_dereg(self->pmh, mr.handle));
		/* No proof (a persistent pin) and no put_pages: nothing for the leave to fall between. */
		EXPECT_EQ(pins, passes(NV, "get_pages_persistent.return"));
		EXPECT_EQ(unpins, passes(NV, "put_pages.before_lock"));
		EXPECT_EQ(lingering + 1, client_stat("lingering"));
		ASSERT_EQ(0, write_text("/sys/module/" NV "/parameters/mps_departed_tgid", pid));
		/* The server frees the memory: the driver calls the lingering registration back. */
		EXPECT_EQ(0, gpu_free(self->gpu, self->handle));
		EXPECT_TRUE(settled(why, sizeof(why))) TH_LOG("%s", why);
		EXPECT_EQ(late + 1, client_stat("late_callbacks"));
		EXPECT_EQ(lingering, client_stat("lingering"));
		return;
	}
	d.mr = mr.handle;
	race_gate(NV, "put_pages.before_lock", 0);
	bg_call_start(&dc, do_dereg, &d);
	ASSERT_LT(0, race_wait_held(NV, "put_pages.before_lock", HELD_MS));
	/* The owner is past its unpin's start; now its pid leaves the server's P2P object. */
	ASSERT_EQ(0, write_text("/sys/module/" NV "/parameters/mps_departed_tgid", pid));
	race_open(NV, "put_pages.before_lock");
	EXPECT_EQ(0, bg_call_join(&dc));
	EXPECT_EQ(0, pmh_counter("live_mrs"));
	/* The server frees the memory: the driver calls back every pin of it. */
	EXPECT_EQ(0, gpu_free(self->gpu, self->handle));
}

/* Adoption (docs/design-lingering-n.md): the owner deregisters (peermem-rs's pin N lingers),
 * then registers the same range again: its acquire takes the lingering registration over, with
 * no new pin of that page, and the free's callback then invalidates the adopting MR. No window:
 * the steps follow one another. nvidia-peermem has nothing to adopt (its deregistration unpinned)
 * and pins anew. */
TEST_F(race, a_registration_adopts_the_lingering_one_then_the_free_invalidates_it)
{
	long long adoptions = client_stat("adoptions");
	long long lingering = client_stat("lingering");
	long long callbacks = gpu_counter("free_callbacks");
	unsigned long long pins;
	struct pmh_reg_mr mr, mr2;
	struct pmh_query_mr q;
	char why[256];

	if (!invalidating())
		SKIP(return, "not applicable: the persistent flavour has no pin the driver calls back");
	ASSERT_EQ(0, pmh_reg(self->pmh, self->va, LEN, PMH_REG_WRITE, &mr));
	EXPECT_EQ(0, pmh_dereg(self->pmh, mr.handle));
	if (ours())
		EXPECT_EQ(lingering + 1, client_stat("lingering"));
	pins = passes(NV, "get_pages.return");
	ASSERT_EQ(0, pmh_reg(self->pmh, self->va, LEN, PMH_REG_WRITE, &mr2));
	if (ours()) {
		EXPECT_EQ(adoptions + 1, client_stat("adoptions"));
		EXPECT_EQ(lingering, client_stat("lingering"));
		EXPECT_EQ(pins, passes(NV, "get_pages.return"))
			TH_LOG("the registration pinned a page for the callback instead of adopting");
	}
	EXPECT_EQ(0, gpu_free(self->gpu, self->handle));
	EXPECT_EQ(callbacks + 1, gpu_counter("free_callbacks"));
	ASSERT_EQ(0, pmh_query(self->pmh, mr2.handle, &q, NULL, 0));
	EXPECT_EQ(PMH_MR_INVALIDATED, q.state) TH_LOG("the adopting MR was not invalidated by the free");
	EXPECT_EQ(0, pmh_dereg(self->pmh, mr2.handle));
	EXPECT_TRUE(settled(why, sizeof(why))) TH_LOG("%s", why);
}

/* The free of a lingering registration's memory between the new registration's persistent pin
 * and its look for a registration to adopt: the acquire held after its pin
 * (get_pages_persistent.return), the free run to its end meanwhile (its callback claims the
 * lingering registration's N under the lock the adoption looks under, and takes it off the list),
 * then the acquire let go: it finds nothing to adopt, and its own pin of the callback page finds
 * no memory any more, so the registration fails (the persistent pin it made kept the memory
 * alive only for itself, and is unpinned). Fails if it adopts a registration whose N was called
 * back (the adopted MR would never be invalidated). nvidia-peermem makes no persistent pin and
 * adopts nothing. */
TEST_F(race, free_between_the_pin_and_the_adoption)
{
	long long adoptions = client_stat("adoptions");
	long long lingering = client_stat("lingering");
	long long late = client_stat("late_callbacks");
	struct pmh_reg_mr mr;
	struct bg_reg r;
	char why[256];

	if (!invalidating())
		SKIP(return, "not applicable: the persistent flavour has no pin the driver calls back");
	if (!ours())
		SKIP(return, "not applicable: nvidia-peermem makes no persistent pin and adopts nothing");
	ASSERT_EQ(0, pmh_reg(self->pmh, self->va, LEN, PMH_REG_WRITE, &mr));
	EXPECT_EQ(0, pmh_dereg(self->pmh, mr.handle));
	EXPECT_EQ(lingering + 1, client_stat("lingering"));
	race_gate(NV, "get_pages_persistent.return", 0);
	bg_reg_start(&r, self->pmh, self->va, LEN, PMH_REG_WRITE);
	ASSERT_LT(0, race_wait_held(NV, "get_pages_persistent.return", HELD_MS));
	/* The free runs to its end: the lingering registration's callback, late. */
	ASSERT_TRUE(free_to_its_end(_metadata, self, "the acquire"));
	EXPECT_EQ(late + 1, client_stat("late_callbacks"));
	EXPECT_EQ(lingering, client_stat("lingering")) TH_LOG("the callback left it on the list");
	race_open(NV, "get_pages_persistent.return");
	EXPECT_NE(0, bg_reg_join(&r)) TH_LOG("registered memory that was freed");
	EXPECT_EQ(adoptions, client_stat("adoptions")) TH_LOG("adopted a registration whose pin was called back");
	EXPECT_TRUE(settled(why, sizeof(why))) TH_LOG("%s", why);
}

/* MLNX_OFED/DOCA-OFED up to 25.01 (the host stand-in's stop_notifier_before_25_04): a memory key
 * that fails tears the MR down before its notifier was activated, and the host's stop takes the
 * MR's mapping lock, which the registration still holds, a second time (peer_mem.c:337 at
 * c89c74ee): with an invalidating client the registering task hangs on itself, and the free that
 * follows hangs the driver's teardown in the client's invalidation, API lock held. With a client
 * that does not invalidate the host unlocks a lock it never took (silent without mutex
 * debugging). peermem-rs built for such a host refuses the invalidating flavour at load
 * (module_load.sh); this window shows why. It hangs its boot by design, so only
 * `windows.py --old-host` runs it (RACE_OLD_HOST=1). */
TEST_F(race, old_host_tears_down_a_registration_whose_memory_key_failed)
{
	if (!getenv("RACE_OLD_HOST"))
		SKIP(return, "not applicable in make check: the host of MLNX_OFED before 25.04 deadlocks here by design (windows.py --old-host runs it)");
	ASSERT_EQ(0, write_text("/sys/module/" HOST "/parameters/stop_notifier_before_25_04", "1"));
	ASSERT_EQ(0, write_text("/sys/module/" HOST "/parameters/fail_mkey", "1"));
	EXPECT_EQ(-ENOMEM, pmh_reg(self->pmh, self->va, LEN, PMH_REG_WRITE, NULL));
	/* The memory is freed: the driver calls back every pin of it. */
	EXPECT_EQ(0, gpu_free(self->gpu, self->handle));
}

/* As above, with rmmod tried in between: refused while the driver holds our callback. The
 * runner reloads the module after this test. */
TEST_F(race, rmmod_while_the_driver_holds_a_callback)
{
	foreign_dereg_then_free(_metadata, self, DEVICE_REMOVAL, 1);
}

/* The callback's reference goes to our work item, which lets it go only after the driver's
 * teardown is over (its API lock released): rmmod is refused until then. */
TEST_F(race, rmmod_waits_for_the_work_item_after_a_callback)
{
	struct free_arg f = { self->gpu, self->handle };
	struct pmh_reg_mr mr;
	struct bg_call c;

	if (!ours() || !invalidating())
		SKIP(return, "not applicable: peermem-rs's invalidating client only");
	ASSERT_EQ(0, pmh_reg(self->pmh, self->va, LEN, PMH_REG_WRITE, &mr));
	ASSERT_EQ(1, pmh_remove_device(self->pmh));
	race_gate(NV, "teardown.after_callback", 0);
	bg_call_start(&c, do_free, &f);
	ASSERT_LT(0, race_wait_held(NV, "teardown.after_callback", HELD_MS));
	sleep_ms(200);
	/* Our callback has returned; the work item holds the registration until the teardown ends. */
	EXPECT_EQ(-EAGAIN, mod_unload(client()));
	race_open(NV, "teardown.after_callback");
	EXPECT_EQ(0, bg_call_join(&c));
}

/* Fork with a registration: the child does the last close of the uverbs file, or the child exits
 * first, or the parent exits first (its exit frees the GPU memory: the owner's context dies). */
TEST_F(race, fork_parent_exits_first)
{
	int pipefd[2], status;
	pid_t parent, child;

	ASSERT_EQ(0, pipe(pipefd));
	parent = fork();
	ASSERT_LE(0, parent);
	if (parent == 0) {
		/* A process of its own: it allocates, registers, forks, and exits first. Only the
		 * test keeps the pipe's write end: its close tells the grandchild to go. */
		int gpu, pmh;

		close(pipefd[1]);
		gpu = gpu_open();
		pmh = pmh_open();
		__u64 h;
		uint8_t *va = gpu_alloc(gpu, LEN, &h);
		char c = 0;

		if (!va || pmh_reg(pmh, va, LEN, PMH_REG_WRITE, NULL))
			_exit(1);
		child = fork();
		if (child == 0) {
			/* Outlive the parent, then close the inherited file last. */
			read(pipefd[0], &c, 1);
			_exit(0);
		}
		_exit(0);
	}
	ASSERT_EQ(parent, waitpid(parent, &status, 0));
	ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	/* The parent's exit freed its GPU memory (callback) before the child let go of the MR. */
	sleep_ms(200);
	close(pipefd[1]);
	close(pipefd[0]);
	sleep_ms(500);
}

TEST_HARNESS_MAIN
