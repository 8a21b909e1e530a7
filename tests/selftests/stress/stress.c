// SPDX-License-Identifier: GPL-2.0
/*
 * The stress run: many processes and threads registering GPU memory with the peer-memory host
 * stand-in, deregistering it (from the owner, from the host's kworker, from a forked child's last
 * close, from device removal), moving data through the NIC stand-in and comparing every byte,
 * freeing the GPU memory under all of that, forking, exiting and being killed, all at once, with
 * the stand-ins' race points slowed down at random and, if asked, failures injected at random
 * (the NVIDIA stand-in's `inject`, the kernel's failslab scoped to the client's code). It is
 * bounded in operations and in time and stops by itself; then it waits for everything to settle
 * and checks that every live counter is back to zero and that what it counted agrees with what
 * the client (peermem-rs's /sys/kernel/debug/peermem_rs/stats), the host and the NVIDIA stand-in
 * counted. Exit status 0 when every check held, 1 otherwise.
 *
 *   stress --client peermem_rs --ops 200000 --seconds 600 [--procs 3 --threads 3 ...]
 *
 * --ops bounds the run in operations: a registration is one and its end (whichever task ends it)
 * another. The result reports registrations, not operations, with the hold phase's apart, and
 * what raced, each kind on its own: registrations in flight on GPU memory when it was freed,
 * registrations live on it then (cudaFree, UNREGISTER, or process exit with the GPU file closed
 * first), and deregistrations made by a task other than the registering process (the host's
 * kworker, device removal, a forked child's last close). Bytes the NIC moved (DMA, written and
 * read back) are reported apart from bytes the CPU compared.
 *
 * DMA-API debugging warns once per boot at the ninth live mapping of one cacheline, which nine
 * live registrations of one GPU page reach with any client (the NVIDIA driver maps every page of a
 * pin). --max-per-page (default 8) bounds the live registrations of each GPU page so that the
 * warning, and with it every other DMA-API report, stays meaningful, and a check holds the NVIDIA
 * stand-in's count of live mappings per page (peak_page_mappings) to it; --max-per-page 0 lifts
 * the bound, for boots with DMA-API debugging off (dma_debug=off). See docs/stress.md.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gpumem.h"
#include "pmh.h"
#include "race.h"
#include "stress.h"

#define GPU_PAGE NVP2P_GPU_PAGE_SIZE
#define MAX_PROCS 16
#define MAX_THREADS 16
#define MAX_SLOTS 32		/* GPU allocations per worker */
/* In every GPU page, thread t's data slot: bytes only that thread's DMA writes. */
#define SLOT_BASE 4096
#define SLOT_SIZE 256

/* ---- what the run counts, in memory shared by every process ---------------------------------- */

#define COUNTERS(X) \
	X(reg_ok) X(reg_failed) X(reg_eio_removed) X(reg_unexpected) \
	X(reg_nv_mem) X(reg_nv_mem_nc) X(reg_bad_nmap) \
	X(dereg_own) X(dereg_close_own) X(dereg_kworker) X(dereg_child) X(dereg_exit) X(dereg_removed_seen) \
	X(dereg_unexpected) X(removals) X(removal_returned) \
	X(allocs) X(frees) X(unregisters) X(free_live_mrs) X(free_inflight_regs) X(exit_gpu_first_mrs) \
	X(forks) X(worker_exits) X(worker_kills) X(kill_tolerance) \
	X(dma_ok) X(dma_refused) X(dma_refused_alive) X(dma_failed) X(bytes_written) X(bytes_read) \
	X(bytes_compared) X(byte_mismatches) X(cpu_bytes_compared) X(cpu_mismatches) \
	X(alloc_failures) X(hold_registrations) X(hold_threads) X(hold_peak) X(driver_injections_armed) \
	X(max_page_sharing) X(dma_refused_freed) X(dma_reached_freed)

enum counter {
#define X(n) C_##n,
	COUNTERS(X)
#undef X
	C_NR
};

static const char *const counter_names[] = {
#define X(n) #n,
	COUNTERS(X)
#undef X
};

struct worker_slot {
	volatile pid_t pid;
	volatile uint64_t live;		/* MRs this worker holds (recorded) */
	volatile uint64_t inflight;	/* registrations and deregistrations between syscall and record */
	volatile uint64_t live_gpu_first; /* of those, on files that close after the GPU file at exit */
};

struct shared {
	volatile int stop;
	volatile int hold_phase;	/* 1: hold registrations; 2: let go */
	uint64_t c[C_NR];
	struct worker_slot w[MAX_PROCS];
	uint64_t errnos[256];		/* failed registrations by errno */
};

static struct shared *sh;

static void count(enum counter c, uint64_t n)
{
	__atomic_add_fetch(&sh->c[c], n, __ATOMIC_RELAXED);
}

static uint64_t counted(enum counter c)
{
	return __atomic_load_n(&sh->c[c], __ATOMIC_RELAXED);
}

static void count_max(enum counter c, uint64_t v)
{
	uint64_t old = counted(c);

	while (v > old && !__atomic_compare_exchange_n(&sh->c[c], &old, v, 0, __ATOMIC_RELAXED,
						       __ATOMIC_RELAXED))
		;
}

/* ---- options ------------------------------------------------------------------------------- */

static struct {
	const char *client;
	uint64_t ops;
	unsigned int seconds;
	unsigned int procs, threads, slots, alloc_pages;
	unsigned int max_per_page;
	unsigned int delays_us;
	unsigned int slab_permille;	/* randomized failslab, per mille of module-scoped allocations */
	unsigned int driver_inject_ms;	/* arm a random nvidia_p2p_* failure every N ms (0: never) */
	unsigned int remove_ms;		/* device removal every N ms (0: never) */
	unsigned int kill_ms;		/* SIGKILL a random worker every N ms (0: never) */
	unsigned int dma_every;		/* one data transfer per N operations of a thread */
	unsigned int worker_ops;	/* a worker exits after about this many operations */
	unsigned int hold;		/* live registrations held at once in the hold phase */
	uint64_t seed;
	const char *report;
	int quiet;
} opt = {
	.client = "peermem_rs", .ops = 20000, .seconds = 60, .procs = 3, .threads = 3,
	.slots = 4, .alloc_pages = 4, .max_per_page = 8, .delays_us = 200, .slab_permille = 0,
	.driver_inject_ms = 0, .remove_ms = 3000, .kill_ms = 5000, .dma_every = 150,
	.worker_ops = 3000, .hold = 0,
};

static int ours(void)
{
	return !strcmp(opt.client, "peermem_rs") || !strcmp(opt.client, "nvidia_peermem_dropin");
}

static const char *stats_path(void)
{
	return !strcmp(opt.client, "nvidia_peermem_dropin") ? "/sys/kernel/debug/nvidia_peermem/stats"
							    : "/sys/kernel/debug/peermem_rs/stats";
}

static const char *module_name(void)
{
	return !strcmp(opt.client, "peermem_rs") ? "peermem_rs" : "nvidia_peermem";
}

static int client_param(const char *name)
{
	char path[256];

	snprintf(path, sizeof(path), "/sys/module/%s/parameters/%s", module_name(), name);
	return (int)read_number(path);
}

static int invalidating;	/* persistent_api_support=0 */

static void say(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	fflush(stdout);
}

/* ---- randomness: one xorshift state per thread ------------------------------------------------ */

static __thread uint64_t rnd_state;

static uint64_t rnd(void)
{
	uint64_t x = rnd_state;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return rnd_state = x;
}

static unsigned int below(unsigned int n)
{
	return n ? (unsigned int)(rnd() % n) : 0;
}

static void rnd_seed(uint64_t a, uint64_t b)
{
	rnd_state = (opt.seed ^ (a * 0x9e3779b97f4a7c15ull) ^ (b << 32) ^ b) | 1;
	for (int i = 0; i < 8; i++)
		rnd();
}

static long long now_ms(void)
{
	return race_now_ms();
}

/* ---- GPU allocations of a worker ------------------------------------------------------------ */

/* The byte every GPU page holds at @off unless a DMA slot was written: from the allocation's serial. */
static unsigned char background(uint32_t serial, unsigned int page, unsigned int off)
{
	uint32_t x = serial * 2654435761u ^ page * 40503u ^ off * 2246822519u;

	x ^= x >> 15;
	return (unsigned char)(x ^ (x >> 8));
}

/* This process's sequence of completed registrations and frees: a registration that returned
 * before a free was issued was armed (its memory key live) when that free's callbacks ran. */
static uint64_t reg_seq;

struct galloc {
	char *va;
	__u64 handle;
	unsigned int pages;
	uint32_t serial;
	int refs;			/* the slot's + one per MR and registration in flight */
	int freed;			/* FREE or UNREGISTER issued: the memory may go away */
	int unmapped;			/* the CPU mapping is gone (under cpu) */
	pthread_rwlock_t cpu;		/* CPU reads of the mapping vs munmap */
	pthread_rwlock_t dma;		/* data transfers (read) vs the content check before a free */
	int inflight;			/* registrations in flight */
	int live_mrs;
	int *page_live;			/* live and in-flight registrations per page (DMA-debug bound) */
	uint64_t free_seq;		/* reg_seq when FREE or UNREGISTER was issued */
	int free_done;			/* FREE or UNREGISTER returned: every callback has run */
	unsigned char *shadow;		/* [page][thread][SLOT_SIZE]: what thread's DMA last wrote */
	unsigned char *shadow_valid;	/* [page][thread] */
};

struct worker {
	int idx;
	int gpu;
	pthread_mutex_t lock;		/* the slots */
	/*
	 * Written by op_fork from before its fork() until the child has closed every descriptor it
	 * inherited but its own; read (taken and dropped) before the registrations of a closed host
	 * file are forgotten. A child forked by one thread inherits every other thread's host files
	 * too, and the registrations of such a file stay live while the child holds it: counting them
	 * gone before would let another thread's registrations take their pages past max_per_page.
	 */
	pthread_rwlock_t fork_lock;
	struct galloc *slot[MAX_SLOTS];
	volatile int stop;
	uint64_t ops;
	int gpu_first;			/* at exit the GPU file closes before the host files */
};

static struct worker W;

static void galloc_put(struct galloc *a)
{
	if (__atomic_sub_fetch(&a->refs, 1, __ATOMIC_ACQ_REL))
		return;
	pthread_rwlock_destroy(&a->cpu);
	pthread_rwlock_destroy(&a->dma);
	free(a->page_live);
	free(a->shadow);
	free(a->shadow_valid);
	free(a);
}

static struct galloc *galloc_new(void)
{
	static uint32_t serials;
	struct galloc *a = calloc(1, sizeof(*a));
	size_t size = (size_t)opt.alloc_pages * GPU_PAGE;

	if (!a)
		return NULL;
	a->pages = opt.alloc_pages;
	a->va = gpu_alloc(W.gpu, size, &a->handle);
	if (!a->va) {
		count(C_alloc_failures, 1);
		free(a);
		return NULL;
	}
	a->serial = (uint32_t)(W.idx * 1000003u + __atomic_add_fetch(&serials, 1, __ATOMIC_RELAXED) +
			       (uint32_t)rnd());
	a->refs = 1;
	pthread_rwlock_init(&a->cpu, NULL);
	pthread_rwlock_init(&a->dma, NULL);
	a->page_live = calloc(a->pages, sizeof(int));
	a->shadow = calloc((size_t)a->pages * MAX_THREADS, SLOT_SIZE);
	a->shadow_valid = calloc((size_t)a->pages * MAX_THREADS, 1);
	for (unsigned int p = 0; p < a->pages; p++) {
		unsigned char *pg = (unsigned char *)a->va + (size_t)p * GPU_PAGE;
		unsigned char buf[GPU_PAGE];

		for (unsigned int o = 0; o < GPU_PAGE; o++)
			buf[o] = background(a->serial, p, o);
		memcpy(pg, buf, GPU_PAGE);
	}
	count(C_allocs, 1);
	return a;
}

/* What byte @off of page @p should hold (the CPU's view). */
static unsigned char expected_byte(struct galloc *a, unsigned int p, unsigned int off)
{
	if (off >= SLOT_BASE && off < SLOT_BASE + MAX_THREADS * SLOT_SIZE) {
		unsigned int t = (off - SLOT_BASE) / SLOT_SIZE;

		if (a->shadow_valid[p * MAX_THREADS + t])
			return a->shadow[((size_t)p * MAX_THREADS + t) * SLOT_SIZE +
					 (off - SLOT_BASE) % SLOT_SIZE];
	}
	return background(a->serial, p, off);
}

/* Compares the whole allocation with what it should hold; with a->dma held for writing. */
static void check_allocation(struct galloc *a, const char *when)
{
	unsigned long bad = 0;
	unsigned char page[GPU_PAGE];

	pthread_rwlock_rdlock(&a->cpu);
	if (a->unmapped) {
		pthread_rwlock_unlock(&a->cpu);
		return;
	}
	for (unsigned int p = 0; p < a->pages; p++) {
		memcpy(page, a->va + (size_t)p * GPU_PAGE, GPU_PAGE);
		for (unsigned int o = 0; o < GPU_PAGE; o++) {
			if (page[o] == expected_byte(a, p, o))
				continue;
			if (!bad)
				say("# MISMATCH (%s): allocation %u page %u offset %u: %#x, expected %#x\n",
				    when, a->serial, p, o, page[o], expected_byte(a, p, o));
			bad++;
		}
	}
	pthread_rwlock_unlock(&a->cpu);
	count(C_cpu_bytes_compared, (uint64_t)a->pages * GPU_PAGE);
	count(C_cpu_mismatches, bad);
}

/* cudaFree (or UNREGISTER then FREE) of slot @s's allocation, which is replaced by a new one. */
static void free_slot(unsigned int s)
{
	struct galloc *a;
	int unregister_first = below(4) == 0;

	pthread_mutex_lock(&W.lock);
	a = W.slot[s];
	W.slot[s] = NULL;
	pthread_mutex_unlock(&W.lock);
	if (!a)
		goto refill;
	pthread_rwlock_wrlock(&a->dma);
	check_allocation(a, "before free");
	pthread_rwlock_unlock(&a->dma);
	__atomic_store_n(&a->free_seq, __atomic_add_fetch(&reg_seq, 1, __ATOMIC_SEQ_CST), __ATOMIC_SEQ_CST);
	__atomic_store_n(&a->freed, 1, __ATOMIC_SEQ_CST);
	count(C_free_live_mrs, __atomic_load_n(&a->live_mrs, __ATOMIC_SEQ_CST));
	count(C_free_inflight_regs, __atomic_load_n(&a->inflight, __ATOMIC_SEQ_CST));
	if (unregister_first) {
		/* NV503C_CTRL_CMD_UNREGISTER_VIDMEM: the callbacks run, the memory stays allocated. */
		if (!ioctl(W.gpu, NVP2P_IOC_UNREGISTER, &a->handle)) {
			count(C_unregisters, 1);
			__atomic_store_n(&a->free_done, 1, __ATOMIC_SEQ_CST);
		}
	}
	if (ioctl(W.gpu, NVP2P_IOC_FREE, &a->handle))
		say("# FREE of allocation %u: %s\n", a->serial, strerror(errno));
	else
		__atomic_store_n(&a->free_done, 1, __ATOMIC_SEQ_CST);
	pthread_rwlock_wrlock(&a->cpu);
	munmap(a->va, (size_t)a->pages * GPU_PAGE);
	a->unmapped = 1;
	pthread_rwlock_unlock(&a->cpu);
	count(C_frees, 1);
	galloc_put(a);
refill:
	a = galloc_new();
	pthread_mutex_lock(&W.lock);
	W.slot[s] = a;
	pthread_mutex_unlock(&W.lock);
}

/* A reference to a random live allocation, or NULL. */
static struct galloc *pick_alloc(void)
{
	struct galloc *a;

	pthread_mutex_lock(&W.lock);
	a = W.slot[below(opt.slots)];
	if (a)
		__atomic_add_fetch(&a->refs, 1, __ATOMIC_ACQ_REL);
	pthread_mutex_unlock(&W.lock);
	return a;
}

/* ---- registrations --------------------------------------------------------------------------- */

struct mr {
	__u64 handle;
	struct galloc *a;
	unsigned int first, npages;	/* GPU pages it covers */
	uintptr_t addr;
	size_t len;
	unsigned int flags;
	int nc;				/* taken by nv_mem_nc (no invalidation) */
	uint64_t reg_seq;		/* reg_seq when the registration returned */
};

struct thr {
	int tid;
	int pmh;
	pthread_t thread;
	struct mr *mrs;
	unsigned int nmrs, cap;
	uint64_t ops;
};

static struct worker_slot *me(void)
{
	return &sh->w[W.idx];
}

static int take_pages(struct galloc *a, unsigned int first, unsigned int n)
{
	for (unsigned int i = 0; i < n; i++) {
		int v = __atomic_add_fetch(&a->page_live[first + i], 1, __ATOMIC_ACQ_REL);

		if (opt.max_per_page && v > (int)opt.max_per_page) {
			for (unsigned int j = 0; j <= i; j++)
				__atomic_sub_fetch(&a->page_live[first + j], 1, __ATOMIC_ACQ_REL);
			return 0;
		}
		count_max(C_max_page_sharing, v);
	}
	return 1;
}

static void give_pages(struct galloc *a, unsigned int first, unsigned int n)
{
	for (unsigned int i = 0; i < n; i++)
		__atomic_sub_fetch(&a->page_live[first + i], 1, __ATOMIC_ACQ_REL);
}

/* The registration has ended (whoever ended it): forget it. */
static void mr_gone(struct thr *t, unsigned int i)
{
	struct mr *m = &t->mrs[i];

	give_pages(m->a, m->first, m->npages);
	__atomic_sub_fetch(&m->a->live_mrs, 1, __ATOMIC_ACQ_REL);
	galloc_put(m->a);
	t->mrs[i] = t->mrs[--t->nmrs];
	__atomic_sub_fetch(&me()->live, 1, __ATOMIC_RELAXED);
}

static const int expected_reg_errnos[] = { EFAULT, ENOMEM, EINVAL, EIO, 524 /* ENOTSUPP */, EBUSY };

static int expected_errno(int e)
{
	for (size_t i = 0; i < sizeof(expected_reg_errnos) / sizeof(expected_reg_errnos[0]); i++)
		if (e == expected_reg_errnos[i])
			return 1;
	return 0;
}

/*
 * The host file was disassociated by a device removal: everything registered through it goes;
 * close it and open a new one. A call that sees the removal can return before the removal has
 * deregistered this file's MRs (ib_uverbs answers -EIO as soon as the device is gone), and until
 * then their pages are mapped; the last close waits for it (the host's destroy_rwsem, as
 * ib_uverbs' hw_destroy_rwsem), or deregisters what the removal has not reached yet. So the MRs
 * are forgotten after the close, and after any fork in progress has let go of its copy of the
 * file.
 */
static void reopen_host(struct thr *t)
{
	close(t->pmh);
	pthread_rwlock_rdlock(&W.fork_lock);
	pthread_rwlock_unlock(&W.fork_lock);
	/* Counted here, not before the close: a worker killed while the close waits has them
	 * counted at its exit, as live. */
	count(C_dereg_removed_seen, t->nmrs);
	while (t->nmrs)
		mr_gone(t, t->nmrs - 1);
	t->pmh = pmh_open();
}

static int disassociated(struct thr *t)
{
	struct pmh_query_mr q;

	return pmh_query(t->pmh, 0, &q, NULL, 0) == -EIO;
}

/*
 * Registers a random range of a random allocation through @fd. Returns 1 and fills @out, or 0.
 * @hold: a page-aligned one-page registration of page @hold_page (the hold phase).
 */
static int do_register(struct thr *t, int fd, struct mr *out, int hold, struct galloc *ha,
		       unsigned int hold_page)
{
	struct galloc *a = hold ? ha : pick_alloc();
	struct pmh_reg_mr reg;
	unsigned int first, n, flags;
	uintptr_t addr;
	size_t len;
	int ret;

	if (!a)
		return 0;
	if (hold) {
		__atomic_add_fetch(&a->refs, 1, __ATOMIC_ACQ_REL);
		first = hold_page;
		n = 1;
	} else {
		n = 1 + below(a->pages < 3 ? a->pages : 3);
		first = below(a->pages - n + 1);
	}
	if (!take_pages(a, first, n)) {
		galloc_put(a);
		return 0;
	}
	addr = (uintptr_t)a->va + (size_t)first * GPU_PAGE;
	len = (size_t)n * GPU_PAGE;
	if (!hold && below(3) == 0) {
		/* Any byte range inside the pages: ibv_reg_mr of a pointer into a cudaMalloc. */
		size_t head = below(GPU_PAGE / 2), tail = below(GPU_PAGE / 2);

		addr += head;
		len -= head + tail;
	}
	flags = PMH_REG_WRITE | (!hold && below(5) == 0 ? PMH_REG_NO_INVALIDATE : 0);
	/*
	 * The registration names memory by address, as ibv_reg_mr does. Once a free has unmapped
	 * this allocation, the next one may be mapped at the same address, and a registration of it
	 * would really be of that one while the test files it under this one (the DMA checks then
	 * see "stray" bytes in the new allocation). So the address must stay this allocation's
	 * until the registration returns: the unmapping waits for registrations in flight (the free
	 * itself, NVP2P_IOC_FREE, does not, so registrations still race it).
	 */
	pthread_rwlock_rdlock(&a->cpu);
	if (a->unmapped) {
		pthread_rwlock_unlock(&a->cpu);
		give_pages(a, first, n);
		galloc_put(a);
		return 0;
	}
	__atomic_add_fetch(&a->inflight, 1, __ATOMIC_ACQ_REL);
	__atomic_add_fetch(&me()->inflight, 1, __ATOMIC_RELAXED);
	ret = pmh_reg(fd, (void *)addr, len, flags, &reg);
	pthread_rwlock_unlock(&a->cpu);
	if (!ret) {
		/* Recorded while still "in flight": a kill in between is within the tolerance. */
		__atomic_add_fetch(&a->live_mrs, 1, __ATOMIC_ACQ_REL);
		__atomic_add_fetch(&me()->live, 1, __ATOMIC_RELAXED);
		count(C_reg_ok, 1);
	}
	__atomic_sub_fetch(&me()->inflight, 1, __ATOMIC_RELAXED);
	__atomic_sub_fetch(&a->inflight, 1, __ATOMIC_ACQ_REL);
	if (ret) {
		give_pages(a, first, n);
		galloc_put(a);
		if (ret == -EIO && fd == t->pmh && disassociated(t)) {
			count(C_reg_eio_removed, 1);
			reopen_host(t);
			return 0;
		}
		count(C_reg_failed, 1);
		__atomic_add_fetch(&sh->errnos[-ret & 255], 1, __ATOMIC_RELAXED);
		if (!expected_errno(-ret)) {
			count(C_reg_unexpected, 1);
			say("# registration of %#lx+%#zx: unexpected %s\n", (unsigned long)addr, len,
			    strerror(-ret));
		}
		return 0;
	}
	if (!strcmp(reg.client, "nv_mem_nc"))
		count(C_reg_nv_mem_nc, 1);
	else
		count(C_reg_nv_mem, 1);
	{
		/* One SG entry per 64 KiB page the range touches. */
		uintptr_t lo = addr & ~((uintptr_t)GPU_PAGE - 1);
		uintptr_t hi = (addr + len + GPU_PAGE - 1) & ~((uintptr_t)GPU_PAGE - 1);

		if (reg.nmap != (hi - lo) / GPU_PAGE) {
			count(C_reg_bad_nmap, 1);
			say("# registration of %#lx+%#zx: %u SG entries, expected %lu\n",
			    (unsigned long)addr, len, reg.nmap, (unsigned long)((hi - lo) / GPU_PAGE));
		}
	}
	*out = (struct mr){ .handle = reg.handle, .a = a, .first = first, .npages = n,
			    .addr = addr, .len = len, .flags = flags,
			    .nc = !strcmp(reg.client, "nv_mem_nc"),
			    .reg_seq = __atomic_add_fetch(&reg_seq, 1, __ATOMIC_SEQ_CST) };
	return 1;
}

static void add_mr(struct thr *t, struct mr *m)
{
	if (t->nmrs == t->cap) {
		t->cap = t->cap ? 2 * t->cap : 64;
		t->mrs = realloc(t->mrs, t->cap * sizeof(*t->mrs));
	}
	t->mrs[t->nmrs++] = *m;
}

static void op_register(struct thr *t)
{
	struct mr m;

	if (do_register(t, t->pmh, &m, 0, NULL, 0))
		add_mr(t, &m);
}

/* ibv_dereg_mr of a random MR: from this task, or (one in five) from the host's kworker. */
static void op_deregister(struct thr *t)
{
	unsigned int i;
	int kworker = below(5) == 0, ret;

	if (!t->nmrs)
		return;
	i = below(t->nmrs);
	__atomic_add_fetch(&me()->inflight, 1, __ATOMIC_RELAXED);
	ret = kworker ? pmh_dereg_ex(t->pmh, t->mrs[i].handle, PMH_DEREG_KWORKER)
		      : pmh_dereg(t->pmh, t->mrs[i].handle);
	if (!ret) {
		count(kworker ? C_dereg_kworker : C_dereg_own, 1);
		mr_gone(t, i);
	}
	__atomic_sub_fetch(&me()->inflight, 1, __ATOMIC_RELAXED);
	/* After a removal the file answers -EIO, or the MR is already gone from it. */
	if (ret && disassociated(t)) {
		reopen_host(t);
	} else if (ret) {
		count(C_dereg_unexpected, 1);
		say("# deregistration of handle %llu: %s\n", (unsigned long long)t->mrs[i].handle,
		    strerror(-ret));
		mr_gone(t, i);
	}
}

/*
 * The data path: the NIC writes a pattern into this thread's slot of one page of a random MR,
 * reads it back, and the CPU reads it too; every byte is compared. On an MR whose memory was
 * freed, an invalidating client's MR is revoked (EACCES) and a persistent pin still works. Once a
 * free (or UNREGISTER) has returned, an invalidating MR that was armed before it was issued must
 * refuse every transfer: its callback revoked the key before the driver let the free go on.
 */
static void op_dma(struct thr *t)
{
	unsigned char out[SLOT_SIZE], in[SLOT_SIZE];
	struct galloc *a;
	struct mr *m;
	uintptr_t slot, lo, hi;
	unsigned int p, off, n;
	int ret, must_refuse;

	if (!t->nmrs)
		return;
	m = &t->mrs[below(t->nmrs)];
	if (!(m->flags & PMH_REG_WRITE))
		return;
	a = m->a;
	p = m->first + below(m->npages);
	slot = (uintptr_t)a->va + (size_t)p * GPU_PAGE + SLOT_BASE + (size_t)t->tid * SLOT_SIZE;
	lo = slot > m->addr ? slot : m->addr;
	hi = slot + SLOT_SIZE < m->addr + m->len ? slot + SLOT_SIZE : m->addr + m->len;
	if (hi <= lo + 16)
		return;
	n = 16 + below((unsigned int)(hi - lo) - 15);
	off = below((unsigned int)(hi - lo) - n + 1);
	lo += off;
	for (unsigned int i = 0; i < n; i++)
		out[i] = (unsigned char)rnd();

	pthread_rwlock_rdlock(&a->dma);
	must_refuse = invalidating && !m->nc && __atomic_load_n(&a->free_done, __ATOMIC_SEQ_CST) &&
		      m->reg_seq < __atomic_load_n(&a->free_seq, __ATOMIC_SEQ_CST);
	ret = pmh_dma(t->pmh, m->handle, lo - m->addr, out, n, PMH_DMA_TO_MR);
	if (must_refuse && !ret) {
		count(C_dma_reached_freed, 1);
		say("# DMA done to an invalidating MR after its memory's free returned (allocation %u)\n",
		    a->serial);
	}
	if (ret == -EACCES) {
		count(C_dma_refused, 1);
		if (must_refuse)
			count(C_dma_refused_freed, 1);
		if (!__atomic_load_n(&a->freed, __ATOMIC_SEQ_CST)) {
			count(C_dma_refused_alive, 1);
			say("# DMA to a revoked MR whose memory was never freed (allocation %u)\n",
			    a->serial);
		}
		goto out;
	}
	if (ret && disassociated(t)) {
		pthread_rwlock_unlock(&a->dma);
		reopen_host(t);
		return;
	}
	if (ret) {
		count(C_dma_failed, 1);
		say("# DMA write: %s\n", strerror(-ret));
		goto out;
	}
	count(C_dma_ok, 1);
	count(C_bytes_written, n);
	{
		unsigned int base = (unsigned int)(lo - slot);
		size_t si = ((size_t)p * MAX_THREADS + t->tid) * SLOT_SIZE;

		if (!a->shadow_valid[p * MAX_THREADS + t->tid]) {
			for (unsigned int i = 0; i < SLOT_SIZE; i++)
				a->shadow[si + i] = background(a->serial, p, SLOT_BASE +
							       t->tid * SLOT_SIZE + i);
			a->shadow_valid[p * MAX_THREADS + t->tid] = 1;
		}
		memcpy(a->shadow + si + base, out, n);
	}
	ret = pmh_dma(t->pmh, m->handle, lo - m->addr, in, n, PMH_DMA_FROM_MR);
	if (ret == -EACCES) {
		count(C_dma_refused, 1);
		if (!__atomic_load_n(&a->freed, __ATOMIC_SEQ_CST))
			count(C_dma_refused_alive, 1);
		goto out;
	}
	if (ret) {
		count(C_dma_failed, 1);
		goto out;
	}
	count(C_dma_ok, 1);
	count(C_bytes_read, n);
	count(C_bytes_compared, n);
	if (memcmp(in, out, n)) {
		unsigned int bad = 0;

		for (unsigned int i = 0; i < n; i++)
			bad += in[i] != out[i];
		count(C_byte_mismatches, bad);
		say("# MISMATCH: NIC read back %u of %u bytes wrong (allocation %u page %u)\n", bad, n,
		    a->serial, p);
	}
	/* The CPU's view of the same bytes, while the memory is still mapped. */
	pthread_rwlock_rdlock(&a->cpu);
	if (!a->unmapped) {
		unsigned int bad = 0;

		memcpy(in, (void *)lo, n);
		for (unsigned int i = 0; i < n; i++)
			bad += in[i] != out[i];
		count(C_cpu_bytes_compared, n);
		count(C_cpu_mismatches, bad);
		if (bad)
			say("# MISMATCH: the CPU sees %u of %u bytes the NIC wrote wrong (allocation %u page %u)\n",
			    bad, n, a->serial, p);
	}
	pthread_rwlock_unlock(&a->cpu);
out:
	pthread_rwlock_unlock(&a->dma);
}

/*
 * In a child just forked: close every descriptor from 3 up but the @n in @keep. Only close_range
 * and close, which a child of a threaded process may call.
 */
static void close_all_but(const int *keep, unsigned int n)
{
	unsigned int from = 3, next;

	for (;;) {
		next = ~0U;
		for (unsigned int i = 0; i < n; i++)
			if ((unsigned int)keep[i] >= from && (unsigned int)keep[i] < next)
				next = keep[i];
		if (next > from && syscall(SYS_close_range, from, next - 1, 0))
			for (unsigned int d = from; d < next && d < 65536; d++)
				close(d);
		if (next == ~0U)
			return;
		from = next + 1;
	}
}

/*
 * fork with registrations on a file the child inherits; the parent closes its copy first, so the
 * child's exit is the last close and deregisters them, from another process; meanwhile (one in
 * two) the parent frees the memory.
 */
static void op_fork(struct thr *t)
{
	struct mr ms[3];
	unsigned int n = 0, want = 1 + below(3);
	int fd = pmh_open(), pipefd[2], ready[2], status;
	struct galloc *freed = NULL;
	pid_t pid;
	char c;

	if (fd < 0)
		return;
	for (unsigned int i = 0; i < want; i++)
		if (do_register(t, fd, &ms[n], 0, NULL, 0))
			n++;
	if (pipe(pipefd)) {
		close(fd);
		count(C_dereg_close_own, n);	/* our close was the last */
		goto gone;
	}
	if (pipe(ready)) {
		close(pipefd[0]);
		close(pipefd[1]);
		close(fd);
		count(C_dereg_close_own, n);
		goto gone;
	}
	__atomic_add_fetch(&me()->inflight, n, __ATOMIC_RELAXED);
	pthread_rwlock_wrlock(&W.fork_lock);
	pid = fork();
	if (pid == 0) {
		int keep[] = { fd, pipefd[0], ready[1] };

		close_all_but(keep, 3);
		close(ready[1]);	/* the parent's EOF: fd is all this process holds now */
		if (read(pipefd[0], &c, 1) < 0)
			_exit(1);
		_exit(0);	/* the last close of fd: the MRs go from this process */
	}
	close(ready[1]);
	while (pid > 0 && read(ready[0], &c, 1) < 0 && errno == EINTR)
		;
	pthread_rwlock_unlock(&W.fork_lock);
	close(ready[0]);
	close(pipefd[0]);
	close(fd);
	if (pid < 0) {
		close(pipefd[1]);
		count(C_dereg_close_own, n);	/* our close was the last */
		__atomic_sub_fetch(&me()->inflight, n, __ATOMIC_RELAXED);
		goto gone;
	}
	count(C_forks, 1);
	if (n && below(2) == 0)
		freed = ms[0].a;
	if (write(pipefd[1], "x", 1) != 1)
		kill(pid, SIGKILL);
	close(pipefd[1]);
	if (freed) {
		/* Race the child's deregistration with a free of the same memory. */
		for (unsigned int s = 0; s < opt.slots; s++) {
			pthread_mutex_lock(&W.lock);
			int hit = W.slot[s] == freed;
			pthread_mutex_unlock(&W.lock);
			if (hit) {
				free_slot(s);
				break;
			}
		}
	}
	waitpid(pid, &status, 0);
	count(C_dereg_child, n);
	__atomic_sub_fetch(&me()->inflight, n, __ATOMIC_RELAXED);
gone:
	/* A child another thread was forking while fd was open has closed its copy once this
	 * returns; none forked since has one. */
	pthread_rwlock_rdlock(&W.fork_lock);
	pthread_rwlock_unlock(&W.fork_lock);
	for (unsigned int i = 0; i < n; i++) {
		give_pages(ms[i].a, ms[i].first, ms[i].npages);
		__atomic_sub_fetch(&ms[i].a->live_mrs, 1, __ATOMIC_ACQ_REL);
		__atomic_sub_fetch(&me()->live, 1, __ATOMIC_RELAXED);
		galloc_put(ms[i].a);
	}
}

/* ---- the hold phase: many live registrations at once ------------------------------------------- */

/* A GPU allocation for the hold phase: @pages pages, no content to check. */
static struct galloc *galloc_plain(unsigned int pages)
{
	struct galloc *a = calloc(1, sizeof(*a));

	if (!a)
		return NULL;
	a->pages = pages;
	a->va = gpu_alloc(W.gpu, (size_t)pages * GPU_PAGE, &a->handle);
	if (!a->va) {
		count(C_alloc_failures, 1);
		free(a);
		return NULL;
	}
	a->refs = 1;
	pthread_rwlock_init(&a->cpu, NULL);
	pthread_rwlock_init(&a->dma, NULL);
	a->page_live = calloc(pages, sizeof(int));
	count(C_allocs, 1);
	return a;
}

/*
 * This thread's share of the registrations held at once: one-page registrations of an allocation
 * of its own, at most max_per_page (8 when unbounded) per page, all live until the supervisor
 * says so; then half deregistered by this task and half from the host's kworker, and the
 * allocation freed.
 */
static void hold_phase(struct thr *t)
{
	unsigned int share = opt.hold / (opt.procs * opt.threads) + 1;
	unsigned int per_page = opt.max_per_page ? opt.max_per_page : 8;
	unsigned int pages = (share + per_page - 1) / per_page, first = t->nmrs, got = 0;
	struct galloc *a = galloc_plain(pages);

	if (!a)
		return;
	for (unsigned int i = 0; i < share && !sh->stop && sh->hold_phase == 1; i++) {
		struct mr m;

		if (do_register(t, t->pmh, &m, 1, a, i % pages)) {
			add_mr(t, &m);
			got++;
			count(C_hold_registrations, 1);
		}
	}
	count(C_hold_threads, 1);
	while (sh->hold_phase == 1 && !sh->stop)
		usleep(20 * 1000);
	/* Let go of the held ones (they are the last of the table). */
	while (t->nmrs > first) {
		unsigned int i = t->nmrs - 1;
		int kworker = i & 1;
		int ret = kworker ? pmh_dereg_ex(t->pmh, t->mrs[i].handle, PMH_DEREG_KWORKER)
				  : pmh_dereg(t->pmh, t->mrs[i].handle);

		if (!ret) {
			count(kworker ? C_dereg_kworker : C_dereg_own, 1);
			mr_gone(t, i);
		} else if (disassociated(t)) {
			reopen_host(t);
			break;
		} else {
			count(C_dereg_unexpected, 1);
			mr_gone(t, i);
		}
	}
	__atomic_store_n(&a->freed, 1, __ATOMIC_SEQ_CST);
	if (ioctl(W.gpu, NVP2P_IOC_FREE, &a->handle) == 0)
		count(C_frees, 1);
	munmap(a->va, (size_t)pages * GPU_PAGE);
	a->unmapped = 1;
	galloc_put(a);
	(void)got;
}

/* ---- a worker process ------------------------------------------------------------------------ */

static void *thread_main(void *arg)
{
	struct thr *t = arg;

	rnd_seed(W.idx * 131 + getpid(), t->tid + 1);
	while (!W.stop && !sh->stop) {
		unsigned int r;

		if (sh->hold_phase == 1) {
			hold_phase(t);
			continue;
		}
		r = below(1000);
		if (opt.dma_every && below(opt.dma_every) == 0)
			op_dma(t);
		else if (r < 470)
			op_register(t);
		else if (r < 470 + 440 || t->nmrs > 64)
			op_deregister(t);
		else if (r < 990)
			free_slot(below(opt.slots));
		else
			op_fork(t);
		t->ops++;
		if (__atomic_add_fetch(&W.ops, 1, __ATOMIC_RELAXED) >= opt.worker_ops)
			W.stop = 1;
	}
	return NULL;
}

/* The worker's end: every MR deregistered and every allocation freed, or (one in two) a plain
 * exit that leaves both to the kernel's closing of the files, in a random order. */
static int worker_main(int idx)
{
	struct thr thr[MAX_THREADS];
	int clean = below(2) == 0;

	memset(&W, 0, sizeof(W));
	W.idx = idx;
	rnd_seed(idx * 7919 + getpid(), 77);
	pthread_mutex_init(&W.lock, NULL);
	pthread_rwlock_init(&W.fork_lock, NULL);
	W.gpu_first = below(2);
	/* The lower descriptor closes first at exit: open the GPU file first to free first. */
	if (W.gpu_first)
		W.gpu = gpu_open();
	for (unsigned int i = 0; i < opt.threads; i++) {
		memset(&thr[i], 0, sizeof(thr[i]));
		thr[i].tid = i;
		thr[i].pmh = pmh_open();
		if (thr[i].pmh < 0) {
			say("# cannot open the host: %s\n", strerror(-thr[i].pmh));
			return 1;
		}
	}
	if (!W.gpu_first)
		W.gpu = gpu_open();
	if (W.gpu < 0) {
		say("# cannot open the GPU: %s\n", strerror(-W.gpu));
		return 1;
	}
	sh->w[idx].live_gpu_first = W.gpu_first;
	for (unsigned int s = 0; s < opt.slots; s++)
		W.slot[s] = galloc_new();
	for (unsigned int i = 0; i < opt.threads; i++)
		pthread_create(&thr[i].thread, NULL, thread_main, &thr[i]);
	for (unsigned int i = 0; i < opt.threads; i++)
		pthread_join(thr[i].thread, NULL);
	if (clean) {
		for (unsigned int i = 0; i < opt.threads; i++) {
			while (thr[i].nmrs) {
				struct thr *t = &thr[i];

				if (!pmh_dereg(t->pmh, t->mrs[t->nmrs - 1].handle)) {
					count(C_dereg_own, 1);
					mr_gone(t, t->nmrs - 1);
				} else if (disassociated(t)) {
					reopen_host(t);
				} else {
					count(C_dereg_unexpected, 1);
					mr_gone(t, t->nmrs - 1);
				}
			}
		}
		for (unsigned int s = 0; s < opt.slots; s++)
			if (W.slot[s]) {
				struct galloc *a = W.slot[s];

				pthread_rwlock_wrlock(&a->dma);
				check_allocation(a, "at exit");
				pthread_rwlock_unlock(&a->dma);
				gpu_free(W.gpu, a->handle);
				count(C_frees, 1);
			}
	} else {
		uint64_t live = 0;

		for (unsigned int s = 0; s < opt.slots; s++)
			if (W.slot[s]) {
				struct galloc *a = W.slot[s];

				pthread_rwlock_wrlock(&a->dma);
				check_allocation(a, "at exit");
				pthread_rwlock_unlock(&a->dma);
				count(C_frees, 1);
			}
		for (unsigned int i = 0; i < opt.threads; i++)
			live += thr[i].nmrs;
		count(C_dereg_exit, live);
		if (W.gpu_first)
			count(C_exit_gpu_first_mrs, live);
		sh->w[idx].live = 0;
	}
	count(C_worker_exits, 1);
	return 0;
}

/* ---- the supervisor ------------------------------------------------------------------------- */

static pid_t spawn(int idx)
{
	pid_t pid;

	sh->w[idx].live = 0;
	sh->w[idx].inflight = 0;
	pid = fork();
	if (pid == 0)
		_exit(worker_main(idx));
	sh->w[idx].pid = pid;
	return pid;
}

static const char *const nv_points[] = {
	"get_pages.pinned", "get_pages.return", "get_pages_persistent.return",
	"put_pages.before_lock", "put_pages.unlinked", "put_pages_persistent.before_lock",
	"dma_map.read", "dma_map.locked", "dma_map.before_insert", "dma_map.return",
	"dma_unmap.before_sem", "dma_unmap.removed", "teardown.before_callback",
	"teardown.after_callback",
};
static const char *const host_points[] = {
	"reg.acquired", "reg.locked", "reg.after_get_pages", "reg.after_dma_map",
	"reg.before_activate", "invalidate.entered", "invalidate.locked", "dereg.before_stop",
	"dereg.stopped", "dereg.before_release",
};

/* A new random set of delays: each point slowed (by up to @max_us) with probability 1/3. */
static void shuffle_delays(unsigned int max_us)
{
	for (size_t i = 0; i < sizeof(nv_points) / sizeof(nv_points[0]); i++)
		race_delay_random(NV_MODULE, nv_points[i], below(3) == 0 ? 1 + below(max_us) : 0);
	for (size_t i = 0; i < sizeof(host_points) / sizeof(host_points[0]); i++)
		race_delay_random(HOST_MODULE, host_points[i], below(3) == 0 ? 1 + below(max_us) : 0);
}

/* One nvidia_p2p_* failure, armed for a random call soon. put_pages_persistent is left out: a
 * refused persistent unpin leaves the pin with the driver for good (nothing can call it back),
 * which the fault sweep checks on its own. */
static void arm_driver_failure(void)
{
	static const char *const fns[] = { "get_pages", "get_pages_persistent", "put_pages",
					   "dma_map_pages", "dma_unmap_pages" };
	static const int errnos[] = { -ENOMEM, -EINVAL, -EIO, -EBUSY, -524 };
	char cmd[96];

	snprintf(cmd, sizeof(cmd), "%s %u %d", fns[below(5)], 1 + below(40), errnos[below(5)]);
	if (!write_text(GPU_DEBUGFS "/inject", cmd))
		count(C_driver_injections_armed, 1);
}

static void *remover_main(void *arg)
{
	int fd = pmh_open();

	(void)arg;
	rnd_seed(99, 99);
	while (!sh->stop) {
		usleep((opt.remove_ms / 2 + below(opt.remove_ms)) * 1000);
		if (sh->stop || sh->hold_phase)
			break;
		int n = pmh_remove_device(fd);

		if (n >= 0) {
			count(C_removals, 1);
			count(C_removal_returned, n);
		}
	}
	close(fd);
	return NULL;
}

/* ---- counters of the client and the stand-ins, before and after ------------------------------ */

static const char *const nv_counters[] = {
	"total_pins", "total_persistent_pins", "total_dma_mappings", "free_callbacks",
	"foreign_put_pages", "stale_put_pages", "reused_put_pages", "stale_dma_unmaps",
	"injected_failures", "callback_reentries", "bad_put_pages", "leaked_by_driver",
	"peer_mismatch_warnings", "bar1_refusals", "lookup_failures", "total_allocations",
	"race_gate_timeouts", "internal_put_pages",
};
static const char *const host_counters[] = {
	"reg_ok", "reg_failed", "peer_reg_unwound", "release_calls", "kworker_deregs",
	"removed_by_device", "close_deregs", "invalidate_calls", "invalidate_unknown",
	"inline_unmaps", "dma_ops", "dma_refused", "race_gate_timeouts", "alignment_refusals",
};
static const char *const client_counters[] = {
	"acquired", "registrations", "releases", "invalidations", "invalidations_skipped",
	"late_callbacks", "foreign_unpins", "unproven_unpins", "unpin_failures", "deferred_unpins", "kept_registrations",
	"error_out_of_memory", "error_freed_while_registering", "error_driver_error",
	"error_bar1_exhausted", "error_not_gpu_memory", "error_host_protocol",
};
#define NNV (sizeof(nv_counters) / sizeof(nv_counters[0]))
#define NHOST (sizeof(host_counters) / sizeof(host_counters[0]))
#define NCLIENT (sizeof(client_counters) / sizeof(client_counters[0]))

struct snap {
	long long nv[NNV], host[NHOST], client[NCLIENT];
};

static long long client_stat(const char *key)
{
	char buf[8192], *line, *save = NULL;
	size_t klen = strlen(key);

	if (!ours() || read_text(stats_path(), buf, sizeof(buf)))
		return -1;
	for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
		if (!strncmp(line, key, klen) && line[klen] == ' ')
			return strtoll(line + klen + 1, NULL, 10);
	return -1;
}

static void snapshot(struct snap *s)
{
	for (size_t i = 0; i < NNV; i++)
		s->nv[i] = gpu_counter(nv_counters[i]);
	for (size_t i = 0; i < NHOST; i++)
		s->host[i] = pmh_counter(host_counters[i]);
	for (size_t i = 0; i < NCLIENT; i++)
		s->client[i] = client_stat(client_counters[i]);
}

static long long delta(const struct snap *a, const struct snap *b, const char *name)
{
	for (size_t i = 0; i < NNV; i++)
		if (!strcmp(nv_counters[i], name))
			return b->nv[i] - a->nv[i];
	for (size_t i = 0; i < NHOST; i++)
		if (!strcmp(host_counters[i], name))
			return b->host[i] - a->host[i];
	for (size_t i = 0; i < NCLIENT; i++)
		if (!strcmp(client_counters[i], name))
			return b->client[i] - a->client[i];
	return 0;
}

static int failures;

static void check(int ok, const char *fmt, ...)
{
	va_list ap;

	printf("%s: ", ok ? "ok" : "FAIL");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	if (!ok)
		failures++;
}

/* Everything live back to zero (the client's work item may still be letting go). */
static int settle(char *why, size_t len, int seconds)
{
	for (int i = 0; i < seconds * 10; i++) {
		char refcnt[32] = "";
		char path[128];

		why[0] = '\0';
		snprintf(path, sizeof(path), "/sys/module/%s/refcnt", module_name());
		read_text(path, refcnt, sizeof(refcnt));
		if (pmh_counter("live_mrs") == 0 && !gpu_leaks(why, len) &&
		    (!ours() || (client_stat("live_registrations") == 0 &&
				 client_stat("pinned_bytes") == 0)) &&
		    !strcmp(refcnt, "0"))
			return 1;
		usleep(100 * 1000);
	}
	if (!why[0])
		snprintf(why, len, "live_mrs %lld live_registrations %lld pinned_bytes %lld",
			 pmh_counter("live_mrs"), client_stat("live_registrations"),
			 client_stat("pinned_bytes"));
	return 0;
}

/* failslab at random, scoped to the client's text. */
static uint64_t slab_times_armed;

static void slab_random(int on)
{
	uint64_t start, end;
	char buf[32];

	if (!on) {
		fault_unscope();
		return;
	}
	if (module_text(module_name(), &start, &end)) {
		say("# no text of %s in kallsyms: no failslab injection\n", module_name());
		return;
	}
	fault_scope(start, end);
	/* Only failslab injects at random: fail_page_alloc's filter matches nothing. */
	fault_write_u64(FAIL_PAGE_ALLOC, "require-start", 0, 1);
	fault_write_u64(FAIL_PAGE_ALLOC, "require-end", 0, 1);
	fault_write(FAILSLAB, "verbose", "0");
	slab_times_armed = 100000000;
	fault_write_u64(FAILSLAB, "times", slab_times_armed, 0);
	/* probability is in percent. */
	snprintf(buf, sizeof(buf), "%u", (opt.slab_permille + 9) / 10);
	fault_write(FAILSLAB, "probability", buf);
	say("# failslab: %s%% of allocations under [%#" PRIx64 ", %#" PRIx64 ") (%s's text)\n", buf,
	    start, end, module_name());
}

static uint64_t slab_injected(void)
{
	long long left = read_number(FAILSLAB "/times");

	return slab_times_armed && left >= 0 ? slab_times_armed - (uint64_t)left : 0;
}

static void usage(void)
{
	fprintf(stderr,
		"usage: stress [--client peermem_rs|nvidia_peermem] [--ops N] [--seconds S] [--procs P]\n"
		"              [--threads T] [--slots A] [--alloc-pages K] [--max-per-page M]\n"
		"              [--delays US] [--slab-permille N] [--driver-inject-ms MS] [--remove-ms MS]\n"
		"              [--kill-ms MS] [--dma-every N] [--worker-ops N] [--hold N] [--seed S]\n"
		"              [--report FILE]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	struct snap before, after;
	pthread_t remover;
	long long start, last_shuffle = 0, last_inject = 0, next_kill;
	char why[512];
	int have_remover = 0;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

#define NUM(name, field) if (!strcmp(a, name) && v) { opt.field = strtoull(v, NULL, 0); i++; continue; }
		NUM("--ops", ops) NUM("--seconds", seconds) NUM("--procs", procs)
		NUM("--threads", threads) NUM("--slots", slots) NUM("--alloc-pages", alloc_pages)
		NUM("--max-per-page", max_per_page) NUM("--delays", delays_us)
		NUM("--slab-permille", slab_permille) NUM("--driver-inject-ms", driver_inject_ms)
		NUM("--remove-ms", remove_ms) NUM("--kill-ms", kill_ms) NUM("--dma-every", dma_every)
		NUM("--worker-ops", worker_ops) NUM("--hold", hold) NUM("--seed", seed)
#undef NUM
		if (!strcmp(a, "--client") && v) {
			opt.client = v;
			i++;
			continue;
		}
		if (!strcmp(a, "--report") && v) {
			opt.report = v;
			i++;
			continue;
		}
		usage();
	}
	if (!opt.procs || opt.procs > MAX_PROCS || !opt.threads || opt.threads > MAX_THREADS ||
	    !opt.slots || opt.slots > MAX_SLOTS || !opt.alloc_pages)
		usage();
	if (!opt.seed)
		opt.seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20);
	rnd_seed(1, 1);
	/* nvidia-peermem 550 has no persistent_api_support: its nv_mem always invalidates. */
	invalidating = !ours() || client_param("persistent_api_support") == 0;
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED)
		return 1;
	memset(sh, 0, sizeof(*sh));
	say("# stress: client %s (persistent_api_support=%d peerdirect_support=%d), seed %" PRIu64
	    ", %u processes x %u threads, %u allocations of %u GPU pages each, at most %u live "
	    "registrations per GPU page%s, delays up to %u us, bounded by %" PRIu64
	    " operations or %u s\n", opt.client, client_param("persistent_api_support"),
	    client_param("peerdirect_support"), opt.seed, opt.procs, opt.threads, opt.slots,
	    opt.alloc_pages, opt.max_per_page, opt.max_per_page ? "" : " (unbounded)", opt.delays_us,
	    opt.ops, opt.seconds);
	/* Device removal disassociates the files, as ib_uverbs does. */
	write_text("/sys/module/peer_mem_host/parameters/disassociate", "1");
	race_clear(NV_MODULE);
	race_clear(HOST_MODULE);
	snapshot(&before);
	if (opt.slab_permille)
		slab_random(1);

	start = now_ms();
	for (unsigned int i = 0; i < opt.procs; i++)
		spawn(i);
	if (opt.hold) {
		/* Every worker holds its share at once; then they let go and the churn begins. */
		long long t0 = now_ms();

		sh->hold_phase = 1;
		while (counted(C_hold_threads) < opt.procs * opt.threads &&
		       now_ms() - t0 < 1000LL * opt.seconds)
			usleep(200 * 1000);
		{
			long long live = pmh_counter("live_mrs");

			count_max(C_hold_peak, live);
			say("# hold: %" PRIu64 " registrations made in %lld ms; live at once: %lld in the "
			    "host, %lld in the client, %lld pins and %lld DMA mappings in the driver, "
			    "%lld bytes of BAR1\n", counted(C_hold_registrations), now_ms() - t0, live,
			    client_stat("live_registrations"), gpu_counter("live_pins"),
			    gpu_counter("live_dma_mappings"), gpu_counter("bar1_pinned_bytes"));
		}
		sh->hold_phase = 0;
	}
	if (opt.remove_ms && !pthread_create(&remover, NULL, remover_main, NULL))
		have_remover = 1;
	next_kill = now_ms() + (opt.kill_ms ? opt.kill_ms : 0);
	while (!sh->stop) {
		int status;
		pid_t pid = waitpid(-1, &status, WNOHANG);
		long long t = now_ms();
		uint64_t ops = 2 * counted(C_reg_ok);

		if (pid > 0) {
			for (unsigned int i = 0; i < opt.procs; i++)
				if (sh->w[i].pid == pid) {
					sh->w[i].pid = 0;
					if (WIFSIGNALED(status)) {
						/* Killed: what it held goes at its exit. */
						count(C_dereg_exit, sh->w[i].live);
						if (sh->w[i].live_gpu_first)
							count(C_exit_gpu_first_mrs, sh->w[i].live);
						count(C_kill_tolerance, sh->w[i].inflight);
					}
					if (!sh->stop)
						spawn(i);
				}
			continue;
		}
		if (ops >= opt.ops || t - start >= 1000LL * opt.seconds) {
			sh->stop = 1;
			break;
		}
		if (opt.delays_us && t - last_shuffle > 2000) {
			shuffle_delays(opt.delays_us);
			last_shuffle = t;
		}
		if (opt.driver_inject_ms && t - last_inject > opt.driver_inject_ms) {
			arm_driver_failure();
			last_inject = t;
		}
		if (opt.kill_ms && t >= next_kill) {
			unsigned int i = below(opt.procs);

			if (sh->w[i].pid > 0 && !kill(sh->w[i].pid, SIGKILL))
				count(C_worker_kills, 1);
			next_kill = t + opt.kill_ms / 2 + below(opt.kill_ms);
		}
		usleep(20 * 1000);
	}
	for (unsigned int i = 0; i < opt.procs; i++) {
		int status;

		if (sh->w[i].pid > 0 && waitpid(sh->w[i].pid, &status, 0) > 0 && WIFSIGNALED(status)) {
			count(C_dereg_exit, sh->w[i].live);
			count(C_kill_tolerance, sh->w[i].inflight);
		}
	}
	while (waitpid(-1, NULL, 0) > 0)
		;
	if (have_remover)
		pthread_join(remover, NULL);
	race_clear(NV_MODULE);
	race_clear(HOST_MODULE);
	write_text(GPU_DEBUGFS "/inject", "clear");
	uint64_t slab = slab_injected();

	if (opt.slab_permille)
		slab_random(0);
	long long elapsed = now_ms() - start;

	/* ---- the checks ---- */
	int settled = settle(why, sizeof(why), 60);

	snapshot(&after);
	write_text("/sys/module/peer_mem_host/parameters/disassociate", "0");
	uint64_t reg_ok = counted(C_reg_ok);
	uint64_t ends = counted(C_dereg_own) + counted(C_dereg_close_own) +
			counted(C_dereg_kworker) + counted(C_dereg_child) +
			counted(C_dereg_exit) + counted(C_dereg_removed_seen);
	uint64_t tol = counted(C_kill_tolerance);
	uint64_t foreign = counted(C_dereg_kworker) + counted(C_dereg_child) +
			   (uint64_t)delta(&before, &after, "removed_by_device");
	long long host_ok = delta(&before, &after, "reg_ok");
	long long removed = delta(&before, &after, "removed_by_device");
	long long inflight_removed = removed - (long long)counted(C_removal_returned);

	say("# counted by the test:\n");
	for (int c = 0; c < C_NR; c++)
		say("#   %-24s %" PRIu64 "\n", counter_names[c], counted(c));
	for (int e = 1; e < 256; e++)
		if (sh->errnos[e])
			say("#   registrations failed with %-12s %" PRIu64 "\n", strerror(e),
			    sh->errnos[e]);
	say("# counted by the stand-ins and the client (change over the run):\n");
	for (size_t i = 0; i < NNV; i++)
		say("#   nvidia_p2p_standin %-24s %lld\n", nv_counters[i], after.nv[i] - before.nv[i]);
	for (size_t i = 0; i < NHOST; i++)
		say("#   peer_mem_host %-24s %lld\n", host_counters[i], after.host[i] - before.host[i]);
	if (ours())
		for (size_t i = 0; i < NCLIENT; i++)
			say("#   %s %-24s %lld\n", module_name(), client_counters[i],
			    after.client[i] - before.client[i]);
	say("# failslab injections: %" PRIu64 "\n", slab);

	check(settled, "every live counter back to zero, module reference count 0%s%s",
	      settled ? "" : ": ", settled ? "" : why);
	check(counted(C_reg_unexpected) == 0 && counted(C_dereg_unexpected) == 0,
	      "every failure a proper errno (%" PRIu64 " registrations, %" PRIu64
	      " deregistrations unexpected)", counted(C_reg_unexpected), counted(C_dereg_unexpected));
	check(counted(C_reg_bad_nmap) == 0, "every registration's SG list covers its GPU pages");
	check(counted(C_byte_mismatches) == 0 && counted(C_cpu_mismatches) == 0,
	      "no lost or corrupted bytes (%" PRIu64 " bytes compared through the NIC, %" PRIu64
	      " by the CPU)", counted(C_bytes_compared), counted(C_cpu_bytes_compared));
	check(counted(C_dma_refused_alive) == 0, "no memory key revoked on memory still allocated");
	check(llabs(host_ok - (long long)reg_ok) <= (long long)tol,
	      "registrations: %" PRIu64 " counted, host reg_ok %lld (tolerance %" PRIu64
	      " for operations in flight in killed workers)", reg_ok, host_ok, tol);
	check(llabs((long long)ends - (long long)reg_ok) <= (long long)tol,
	      "every registration ended once: %" PRIu64 " ends counted for %" PRIu64 " registrations",
	      ends, reg_ok);
	{
		long long kw = delta(&before, &after, "kworker_deregs");
		long long ours_kw = (long long)counted(C_dereg_kworker) +
				    (long long)counted(C_removal_returned) + inflight_removed;
		long long host_ended = host_ok + inflight_removed;
		long long own = host_ended - kw - delta(&before, &after, "close_deregs");

		check(kw >= ours_kw && kw - ours_kw <= (long long)tol,
		      "kworker deregistrations: %" PRIu64 " single + %" PRIu64 " by device removal + "
		      "%lld registrations in flight at a removal = host kworker_deregs %lld",
		      counted(C_dereg_kworker), counted(C_removal_returned), inflight_removed, kw);
		check(llabs(own - (long long)counted(C_dereg_own)) <= (long long)tol,
		      "deregistrations by the registering task: %" PRIu64 " counted, host %lld "
		      "(registered - kworker - last close)", counted(C_dereg_own), own);
		/* A device removal may take a forked child's MRs before its last close does. */
		check(delta(&before, &after, "close_deregs") + removed >=
			      (long long)(counted(C_dereg_child) + counted(C_dereg_close_own)),
		      "a forked child's last close deregistered %" PRIu64 " (host close_deregs %lld, "
		      "%lld removed by the device)", counted(C_dereg_child),
		      delta(&before, &after, "close_deregs"), removed);
	}
	if (ours()) {
		long long regs = delta(&before, &after, "registrations");
		long long acq = delta(&before, &after, "acquired");
		long long rel = delta(&before, &after, "releases");

		/* The host may also drop a registration the client completed (its own failure after
		 * dma_map: a handle or the copy back to the user); it counts those in reg_failed. */
		check(regs >= host_ok + inflight_removed &&
			      regs <= host_ok + inflight_removed + delta(&before, &after, "reg_failed"),
		      "client registrations %lld = host reg_ok %lld + %lld removed in flight (+ at most "
		      "%lld the host failed after the client)", regs, host_ok, inflight_removed,
		      delta(&before, &after, "reg_failed"));
		check(acq == rel && rel == delta(&before, &after, "release_calls"),
		      "client acquired %lld = released %lld = host release calls %lld", acq, rel,
		      delta(&before, &after, "release_calls"));
		/* Every acquire pins once, persistently (also the invalidating client's P); a pin
		 * whose registration then failed to be made (an injected allocation failure) was
		 * not acquired. */
		if (!opt.slab_permille && !opt.driver_inject_ms)
			check(delta(&before, &after, "total_persistent_pins") == acq,
			      "one persistent pin per acquire: %lld pins, %lld acquires",
			      delta(&before, &after, "total_persistent_pins"), acq);
	}
	check(delta(&before, &after, "callback_reentries") == 0 &&
	      delta(&before, &after, "bad_put_pages") == 0 &&
	      delta(&before, &after, "reused_put_pages") == 0 &&
	      delta(&before, &after, "internal_put_pages") == 0 &&
	      delta(&before, &after, "peer_mismatch_warnings") == 0,
	      "the driver saw no re-entry, no bad put, no put of a reused table, no unpin of a persistent pin by put_pages and no peer mismatch");
	check(delta(&before, &after, "kept_registrations") == 0,
	      "no registration was kept for a driver barrier that kept failing");
	check(delta(&before, &after, "race_gate_timeouts") == 0, "no race gate timed out");
	/* The stand-ins were loaded for this run: the NVIDIA stand-in's peak is this run's. */
	long long peak = gpu_counter("peak_page_mappings");

	if (opt.max_per_page)
		check(peak >= 0 && peak <= (long long)opt.max_per_page,
		      "no GPU page had more than %u live DMA mappings at once (the NVIDIA stand-in's most: %lld; the most registrations this run let share a page: %" PRIu64 ")",
		      opt.max_per_page, peak, counted(C_max_page_sharing));

	/* What the run did, each figure named for what it counts: registrations made (the hold
	 * phase's apart), and of those live or in flight on memory at the moment it was freed, or
	 * ended by a task other than the registering one; bytes the NIC moved (DMA) apart from bytes
	 * the CPU compared. */
	uint64_t in_flight_at_free = counted(C_free_inflight_regs);
	uint64_t live_at_free = counted(C_free_live_mrs) + counted(C_exit_gpu_first_mrs);
	uint64_t nic_bytes = counted(C_bytes_written) + counted(C_bytes_read);

	check(counted(C_dma_reached_freed) == 0,
	      "no DMA reached an invalidating MR after its memory's free returned (%" PRIu64
	      " such transfers refused)", counted(C_dma_refused_freed));
	say("# stress result: %" PRIu64 " registrations (%" PRIu64 " in the hold phase), %" PRIu64
	    " ends, in %.1f s; at a free: %" PRIu64 " in flight, %" PRIu64 " live; %" PRIu64
	    " deregistered by another task; %" PRIu64 " failed registrations; NIC DMA %" PRIu64
	    " bytes (%" PRIu64 " read back and compared), CPU compared %" PRIu64 " bytes; %" PRIu64
	    " transfers refused after a free, %" PRIu64 " reached freed memory; %" PRIu64
	    " failslab injections, %" PRIu64 " driver failures armed, %d checks failed\n",
	    reg_ok, counted(C_hold_registrations), ends, elapsed / 1000.0, in_flight_at_free,
	    live_at_free, foreign, counted(C_reg_failed) + counted(C_reg_eio_removed), nic_bytes,
	    counted(C_bytes_compared), counted(C_cpu_bytes_compared), counted(C_dma_refused_freed),
	    counted(C_dma_reached_freed), slab, counted(C_driver_injections_armed), failures);
	if (opt.report) {
		FILE *f = fopen(opt.report, "w");

		if (f) {
			fprintf(f, "client %s\npersistent_api_support %d\npeerdirect_support %d\n",
				opt.client, client_param("persistent_api_support"),
				client_param("peerdirect_support"));
			fprintf(f, "seed %" PRIu64 "\nelapsed_ms %lld\nregistrations %" PRIu64
				"\nends %" PRIu64 "\n", opt.seed, elapsed, reg_ok, ends);
			fprintf(f, "in_flight_at_free %" PRIu64 "\nlive_at_free %" PRIu64
				"\nderegistered_by_another_task %" PRIu64 "\nnic_bytes %" PRIu64 "\n",
				in_flight_at_free, live_at_free, foreign, nic_bytes);
			fprintf(f, "slab_injections %" PRIu64 "\nchecks_failed %d\n", slab, failures);
			for (int c = 0; c < C_NR; c++)
				fprintf(f, "%s %" PRIu64 "\n", counter_names[c], counted(c));
			for (size_t i = 0; i < NNV; i++)
				fprintf(f, "nv.%s %lld\n", nv_counters[i], after.nv[i] - before.nv[i]);
			for (size_t i = 0; i < NHOST; i++)
				fprintf(f, "host.%s %lld\n", host_counters[i],
					after.host[i] - before.host[i]);
			for (size_t i = 0; i < NCLIENT; i++)
				fprintf(f, "client.%s %lld\n", client_counters[i],
					ours() ? after.client[i] - before.client[i] : -1);
			fclose(f);
		}
	}
	return failures ? 1 : 0;
}
