// SPDX-License-Identifier: GPL-2.0
/*
 * The guest side of `make bench` (tests/bench/bench.py): times what a user of GPUDirect RDMA feels,
 * ibv_reg_mr / ibv_dereg_mr on GPU memory (the peer-memory host stand-in's REG_MR / DEREG_MR on
 * memory of the NVIDIA stand-in), with whichever peer-memory client is loaded, and prints raw
 * records, one a line, that bench.py turns into medians, percentiles and ratios. It measures; it
 * does not judge. Any failure (a registration refused, a counter unreadable, something left
 * live) is fatal: it prints "bench: FATAL ..." and exits 1, and bench.py fails the run.
 *
 *   bench latency-plain LABEL RUNS SIZE...  reg/dereg latency, the calls back to back
 *   bench latency LABEL RUNS SIZE...        the same with the provider's calls and time, read
 *                                           from its debugfs counters around each call
 *   bench latency-first LABEL RUNS SIZE...  as latency-plain, but each run on memory never
 *                                           registered before (a first registration)
 *   bench invalidation LABEL RUNS SIZE...   cudaFree to the NIC's memory key revoked
 *   bench throughput LABEL SECONDS SIZE THREADS...   registrations per second
 *   bench memory LABEL N SIZE               kernel memory per live registration, cache by cache
 *   bench selftest                          the unit checks of this file's helpers
 *
 * Records (space-separated, first word the kind):
 *   latp LABEL SIZE RUN REG_NS DEREG_NS
 *   latf LABEL SIZE RUN REG_NS DEREG_NS     (latency-first)
 *   latfc LABEL SIZE CYCLES cycles C*6 N*6 MODEL   (latency-first: the provider's calls over all
 *       its CYCLES registrations and deregistrations of one size, warm-up included, read before
 *       the first and after the last, so that no reading falls between two timed calls)
 *   latpc LABEL SIZE CYCLES cycles C*6 N*6 MODEL   (latency-plain: the same around its cycles
 *       but the first warm-up, a first registration on a fresh buffer)
 *   lat LABEL SIZE RUN REG_NS DEREG_NS reg C*6 N*6 MODEL dereg C*6 N*6 MODEL
 *       C: calls of get_pages, get_pages_persistent, put_pages, put_pages_persistent,
 *       dma_map_pages, dma_unmap_pages during the registration (reg) or the deregistration
 *       (dereg); N: nanoseconds spent inside each; MODEL: the cost model's share
 *   inv LABEL SIZE RUN NS free C*6 N*6 MODEL    (the provider's calls during the cudaFree: the
 *       client's invalidation calls them from the free callback)
 *   tput LABEL SIZE THREADS REGISTRATIONS NS
 *   mem LABEL SIZE N SUNRECLAIM_KB_BEFORE SUNRECLAIM_KB_AFTER
 *   slab LABEL SIZE N CACHE OBJECT_BYTES ACTIVE_BEFORE ACTIVE_AFTER   (one per slab cache whose
 *       active objects changed over the N registrations, from /proc/slabinfo read after every
 *       cache was shrunk; OBJECT_BYTES is the cache's object size with its alignment and
 *       metadata, what an object really occupies)
 *   clr LABEL KIND SIZE NS   the wait, after a size's runs of KIND (latp, lat, latf, inv), until
 *       nothing of them was live any more (check_clear)
 *   steps LABEL SIZE RUN PHASE NAME:CALLS:NS...   (the counted runs of peermem_rs only: its own
 *       per-step time accounting, PEERMEM_STEPS, "ENTRY.STEP CALLS NS" lines, read around the
 *       registration (PHASE reg) and the deregistration (dereg); the steps whose calls did not
 *       change are left out; timing.clock_read, the cost of that many clock reads, is the
 *       reading's own, not a difference)
 * SIZE accepts K/M/G suffixes (powers of 1024).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "gpumem.h"
#include "pmh.h"

#define NFN 6
static const char *const fn_names[NFN] = {
	"get_pages", "get_pages_persistent", "put_pages", "put_pages_persistent",
	"dma_map_pages", "dma_unmap_pages",
};

struct provider {
	long long calls[NFN];
	long long ns[NFN];
	long long model_ns;
};

static void fatal(const char *fmt, ...)
{
	va_list ap;

	fflush(stdout);
	fprintf(stderr, "bench: FATAL ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
	exit(1);
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

/* "64K", "16M", "1G", "4096": bytes, or 0 if it is not a size. */
static uint64_t parse_size(const char *s)
{
	char *end;
	unsigned long long v;

	if (!s || *s < '0' || *s > '9')
		return 0;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || !v)
		return 0;
	switch (*end) {
	case 'K': v <<= 10; end++; break;
	case 'M': v <<= 20; end++; break;
	case 'G': v <<= 30; end++; break;
	}
	return *end ? 0 : v;
}

/*
 * The stand-in's counters file ("name value" lines) into @p. Returns 0, or -1 if a wanted
 * counter is missing (a stand-in without the cost model and entry-point counters).
 */
static int parse_counters(const char *text, struct provider *p)
{
	int found = 0, want = 2 * NFN + 1;
	const char *line = text;

	memset(p, 0, sizeof(*p));
	while (line && *line) {
		char name[64];
		long long v;

		if (sscanf(line, "%63s %lld", name, &v) == 2) {
			for (int i = 0; i < NFN; i++) {
				if (!strncmp(name, "calls_", 6) && !strcmp(name + 6, fn_names[i])) {
					p->calls[i] = v;
					found++;
				} else if (!strncmp(name, "ns_", 3) && !strcmp(name + 3, fn_names[i])) {
					p->ns[i] = v;
					found++;
				}
			}
			if (!strcmp(name, "cost_model_ns")) {
				p->model_ns = v;
				found++;
			}
		}
		line = strchr(line, '\n');
		if (line)
			line++;
	}
	return found == want ? 0 : -1;
}

static void provider_read(struct provider *p)
{
	char buf[8192];

	if (read_text(GPU_DEBUGFS "/counters", buf, sizeof(buf)))
		fatal("cannot read %s/counters", GPU_DEBUGFS);
	if (parse_counters(buf, p))
		fatal("%s/counters lacks calls_*, ns_* or cost_model_ns: a stand-in without them?",
		      GPU_DEBUGFS);
}

static struct provider provider_delta(const struct provider *a, const struct provider *b)
{
	struct provider d;

	for (int i = 0; i < NFN; i++) {
		d.calls[i] = b->calls[i] - a->calls[i];
		d.ns[i] = b->ns[i] - a->ns[i];
	}
	d.model_ns = b->model_ns - a->model_ns;
	return d;
}

static void provider_print(const struct provider *d)
{
	for (int i = 0; i < NFN; i++)
		printf(" %lld", d->calls[i]);
	for (int i = 0; i < NFN; i++)
		printf(" %lld", d->ns[i]);
	printf(" %lld", d->model_ns);
}

struct gpu_buf {
	int fd;
	__u64 handle;
	char *va;
	size_t size;
};

static void buf_alloc(struct gpu_buf *b, int fd, size_t size)
{
	b->fd = fd;
	b->size = size;
	b->va = gpu_alloc(fd, size, &b->handle);
	if (!b->va)
		fatal("cannot allocate %zu bytes of GPU memory: %s", size, strerror(errno));
}

static void buf_free(struct gpu_buf *b)
{
	int ret = gpu_free(b->fd, b->handle);

	if (ret)
		fatal("cudaFree of %zu bytes: %s", b->size, strerror(-ret));
}

static __u64 reg(int pmh, const void *va, size_t len)
{
	struct pmh_reg_mr mr;
	int ret = pmh_reg(pmh, va, len, PMH_REG_WRITE, &mr);

	if (ret)
		fatal("registration of %zu bytes at %p: %s", len, va, strerror(-ret));
	if (!mr.client[0])
		fatal("registration of %zu bytes at %p was not taken by a peer client", len, va);
	return mr.handle;
}

static void dereg(int pmh, __u64 handle)
{
	int ret = pmh_dereg(pmh, handle);

	if (ret)
		fatal("deregistration of MR %llu: %s", (unsigned long long)handle, strerror(-ret));
}

/* Nothing of the run may stay live: a leak would make the next figures wrong. */
/* peermem-rs's registrations still alive: after a free that called back lingering ones, each
 * until its work item has made its put_pages and dropped it (0 when peermem-rs is not loaded). */
static long long peermem_registrations(void)
{
	long long v;

	return read_named("/sys/kernel/debug/peermem_rs/stats", "live_registrations", &v, NULL) == 1 ?
	       v : 0;
}

/*
 * Nothing of the run before still alive, nor still at work: the next timed calls would otherwise
 * share the CPUs with peermem-rs's work items (and count their put_pages as theirs). Returns how
 * long it waited (the clr records). Polls every millisecond: after a free, peermem-rs's
 * invalidating client drops the registrations it called back from a work item, so that client's
 * first look finds something live more often than the others' (BENCHMARKS.md's header counts the
 * waits over 1 ms per client), and with the 100 ms poll this file had before, its blocks paused
 * 100 ms each time where the other clients' went on at once: a difference between the clients'
 * blocks that was the benchmark's, not the client's. Gives up after 10 s, as before.
 */
static uint64_t check_clear(const char *what)
{
	uint64_t t0 = now_ns();
	char why[256] = "";

	while (now_ns() - t0 < 10000000000ull) {
		long long mrs = pmh_counter("live_mrs"), pins = gpu_counter("live_pins");
		long long maps = gpu_counter("live_dma_mappings"), regs = peermem_registrations();

		if (!mrs && !pins && !maps && !regs)
			return now_ns() - t0;
		snprintf(why, sizeof(why),
			 "live_mrs %lld live_pins %lld live_dma_mappings %lld peermem-rs registrations %lld",
			 mrs, pins, maps, regs);
		usleep(1000);
	}
	fatal("after %s: still live: %s", what, why);
	return 0;
}

/* The wait after a size's runs (kind: the runs' record, latp, lat, latf or inv). */
static void print_clear(const char *label, const char *kind, uint64_t size, uint64_t ns)
{
	printf("clr %s %s %llu %llu\n", label, kind, (unsigned long long)size, (unsigned long long)ns);
	fflush(stdout);
}

static int open_both(int *gpu)
{
	int pmh = pmh_open();

	*gpu = gpu_open();
	if (*gpu < 0)
		fatal("open %s: %s", NVP2P_STANDIN_DEVICE, strerror(-*gpu));
	if (pmh < 0)
		fatal("open %s: %s", PMH_DEVICE, strerror(-pmh));
	return pmh;
}

/* peermem_rs's per-step time accounting (its time_accounting parameter): "STEP CALLS NS" lines. */
#define PEERMEM_STEPS "/sys/kernel/debug/peermem_rs/time"
#define MAXSTEPS 256

struct steps {
	int n;
	char name[MAXSTEPS][64];
	long long calls[MAXSTEPS];
	long long ns[MAXSTEPS];
};

/* The whole of a file that may be longer than one page (a seq_file), or -errno. */
static int read_all(const char *path, char *buf, size_t size)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	size_t len = 0;

	if (fd < 0)
		return -errno;
	for (;;) {
		char extra;
		ssize_t n = len + 1 < size ? read(fd, buf + len, size - 1 - len) : read(fd, &extra, 1);

		if (n < 0) {
			int e = errno;

			close(fd);
			return -e;
		}
		if (!n)
			break;
		if (len + 1 == size) {	/* one byte more than the buffer holds */
			close(fd);
			return -EFBIG;
		}
		len += n;
	}
	close(fd);
	buf[len] = '\0';
	return 0;
}

/* "STEP CALLS NS" lines into @st; -1 when a line is not of that shape. */
static int parse_steps(const char *text, struct steps *st)
{
	const char *line = text;

	st->n = 0;
	while (line && *line) {
		if (*line != '\n') {
			if (st->n == MAXSTEPS ||
			    sscanf(line, "%63s %lld %lld", st->name[st->n], &st->calls[st->n],
				   &st->ns[st->n]) != 3)
				return -1;
			st->n++;
		}
		line = strchr(line, '\n');
		if (line)
			line++;
	}
	return 0;
}

/* 0 and @st filled, or -1 when the loaded client has no step accounting (nvidia-peermem). */
static int steps_read(struct steps *st)
{
	static char buf[64 << 10];
	int ret = read_all(PEERMEM_STEPS, buf, sizeof(buf));

	if (ret == -ENOENT)
		return -1;
	if (ret)
		fatal("cannot read %s: %s", PEERMEM_STEPS, strerror(-ret));
	if (parse_steps(buf, st))
		fatal("%s: not \"STEP CALLS NS\" lines", PEERMEM_STEPS);
	return 0;
}

/*
 * The steps whose calls changed from @a to @b, matched by name: the file lists only the steps
 * timed since load, so a step can appear between two readings (it had 0 calls before).
 */
static void steps_print(const char *label, uint64_t size, int run, const char *phase,
			const struct steps *a, const struct steps *b)
{
	printf("steps %s %llu %d %s", label, (unsigned long long)size, run, phase);
	for (int i = 0; i < b->n; i++) {
		long long calls = 0, ns = 0;

		for (int j = 0; j < a->n; j++)
			if (!strcmp(a->name[j], b->name[i])) {
				calls = a->calls[j];
				ns = a->ns[j];
				break;
			}
		/* The clock's calibration line is a fresh measurement at each reading, not a
		 * counter: its latest value as it is. */
		if (!strncmp(b->name[i], "timing.", 7))
			printf(" %s:%lld:%lld", b->name[i], b->calls[i], b->ns[i]);
		else if (b->calls[i] != calls)
			printf(" %s:%lld:%lld", b->name[i], b->calls[i] - calls, b->ns[i] - ns);
	}
	printf("\n");
}

#define WARMUP 2

/*
 * @counted: read the provider's counters around each call (lat records, for where the time goes);
 * otherwise time the calls alone, back to back (latp records), as an application makes them:
 * reading debugfs between the calls changes what the calls cost under TCG.
 */
static void latency(const char *label, int runs, char **sizes, int nsizes, bool counted)
{
	int gpu, pmh = open_both(&gpu);

	for (int s = 0; s < nsizes; s++) {
		uint64_t size = parse_size(sizes[s]);
		struct provider pa, pb, d;
		struct gpu_buf b;

		if (!size)
			fatal("not a size: %s", sizes[s]);
		buf_alloc(&b, gpu, size);
		for (int run = -WARMUP; run < runs; run++) {
			struct provider p0, p1, p2, dr, dd;
			static struct steps s0, s1, s2;	/* 20 KiB each: not on the stack */
			bool stepped = false;
			uint64_t t0, t1, t2, t3;
			__u64 h;

			/*
			 * Back to back: the provider's counters only around the cycles, read after the
			 * first warm-up (on a fresh buffer a first registration, unlike the runs timed)
			 * and before the last one (which absorbs whatever the reading does to the next
			 * call), so that they count re-registrations only and no reading falls between
			 * two timed calls.
			 */
			if (!counted && run == 1 - WARMUP)
				provider_read(&pa);

			if (counted) {
				stepped = !steps_read(&s0);
				provider_read(&p0);
			}
			t0 = now_ns();
			h = reg(pmh, b.va, size);
			t1 = now_ns();
			if (counted) {
				provider_read(&p1);
				if (stepped && steps_read(&s1))
					fatal("%s went away", PEERMEM_STEPS);
			}
			t2 = now_ns();
			dereg(pmh, h);
			t3 = now_ns();
			if (run < 0)
				continue;
			if (!counted) {
				printf("latp %s %llu %d %llu %llu\n", label, (unsigned long long)size, run,
				       (unsigned long long)(t1 - t0), (unsigned long long)(t3 - t2));
				continue;
			}
			provider_read(&p2);
			if (stepped) {
				if (steps_read(&s2))
					fatal("%s went away", PEERMEM_STEPS);
				steps_print(label, size, run, "reg", &s0, &s1);
				steps_print(label, size, run, "dereg", &s1, &s2);
			}
			dr = provider_delta(&p0, &p1);
			dd = provider_delta(&p1, &p2);
			printf("lat %s %llu %d %llu %llu reg", label, (unsigned long long)size, run,
			       (unsigned long long)(t1 - t0), (unsigned long long)(t3 - t2));
			provider_print(&dr);
			printf(" dereg");
			provider_print(&dd);
			printf("\n");
		}
		if (!counted) {
			provider_read(&pb);
			d = provider_delta(&pa, &pb);
			printf("latpc %s %llu %d cycles", label, (unsigned long long)size, runs + WARMUP - 1);
			provider_print(&d);
			printf("\n");
		}
		fflush(stdout);
		buf_free(&b);
		print_clear(label, counted ? "lat" : "latp", size, check_clear("latency"));
	}
	close(pmh);
	close(gpu);
}

/*
 * Each run registers memory never registered before: run k takes the k-th piece of one allocation
 * of as many pieces as runs. latency() registers one buffer again and again, as a registration
 * cache does when it evicts and re-registers; there peermem-rs's invalidating client adopts the
 * registration that the deregistration before left lingering with its notification pin
 * (docs/design-lingering-n.md) and pins once. Here no registration lingers on a piece, so each
 * run pays for a first registration: both pins. The pieces' lingering registrations stay until
 * the free at the end, as an application's would.
 */
static void latency_first(const char *label, int runs, char **sizes, int nsizes)
{
	int gpu, pmh = open_both(&gpu);

	for (int s = 0; s < nsizes; s++) {
		uint64_t size = parse_size(sizes[s]);
		struct provider p0, p1, d;
		struct gpu_buf b;

		if (!size || runs <= 0)
			fatal("not a size: %s", sizes[s]);
		buf_alloc(&b, gpu, size * (uint64_t)(runs + WARMUP));
		provider_read(&p0);
		for (int run = -WARMUP; run < runs; run++) {
			const char *va = b.va + (size_t)(run + WARMUP) * size;
			uint64_t t0, t1, t2, t3;
			__u64 h;

			t0 = now_ns();
			h = reg(pmh, va, size);
			t1 = now_ns();
			t2 = now_ns();
			dereg(pmh, h);
			t3 = now_ns();
			if (run >= 0)
				printf("latf %s %llu %d %llu %llu\n", label, (unsigned long long)size, run,
				       (unsigned long long)(t1 - t0), (unsigned long long)(t3 - t2));
		}
		provider_read(&p1);
		d = provider_delta(&p0, &p1);
		printf("latfc %s %llu %d cycles", label, (unsigned long long)size, runs + WARMUP);
		provider_print(&d);
		printf("\n");
		fflush(stdout);
		buf_free(&b);
		print_clear(label, "latf", size, check_clear("first-registration latency"));
	}
	close(pmh);
	close(gpu);
}

static void invalidation(const char *label, int runs, char **sizes, int nsizes)
{
	int gpu, pmh = open_both(&gpu);

	for (int s = 0; s < nsizes; s++) {
		uint64_t size = parse_size(sizes[s]);

		if (!size)
			fatal("not a size: %s", sizes[s]);
		for (int run = -WARMUP; run < runs; run++) {
			struct provider p0, p1, d;
			struct pmh_query_mr q;
			struct gpu_buf b;
			uint64_t t0;
			__u64 h;
			int ret;

			buf_alloc(&b, gpu, size);
			h = reg(pmh, b.va, size);
			provider_read(&p0);
			t0 = now_ns();
			if (ioctl(gpu, NVP2P_IOC_FREE, &b.handle))
				fatal("cudaFree: %s", strerror(errno));
			provider_read(&p1);
			ret = pmh_query(pmh, h, &q, NULL, 0);
			if (ret)
				fatal("query of MR %llu: %s", (unsigned long long)h, strerror(-ret));
			if (!q.invalidated_ns || q.state == PMH_MR_MAPPED || q.invalidated_ns < t0)
				fatal("MR of %llu bytes not invalidated by cudaFree (state %u, "
				      "invalidated_ns %llu): is the client an invalidating one?",
				      (unsigned long long)size, q.state,
				      (unsigned long long)q.invalidated_ns);
			dereg(pmh, h);
			if (munmap(b.va, size))
				fatal("munmap: %s", strerror(errno));
			if (run < 0)
				continue;
			d = provider_delta(&p0, &p1);
			printf("inv %s %llu %d %llu free", label, (unsigned long long)size, run,
			       (unsigned long long)(q.invalidated_ns - t0));
			provider_print(&d);
			printf("\n");
		}
		fflush(stdout);
		print_clear(label, "inv", size, check_clear("invalidation"));
	}
	close(pmh);
	close(gpu);
}

struct worker {
	pthread_t thread;
	int pmh;
	char *va;
	size_t size;
	volatile int *stop;
	long long regs;
	const char *error;
	int err;
};

static void *worker_run(void *arg)
{
	struct worker *w = arg;

	while (!*w->stop) {
		struct pmh_reg_mr mr;
		int ret = pmh_reg(w->pmh, w->va, w->size, PMH_REG_WRITE, &mr);

		if (ret || !mr.client[0]) {
			w->error = ret ? "registration failed" : "registration not taken by a peer";
			w->err = -ret;
			return NULL;
		}
		ret = pmh_dereg(w->pmh, mr.handle);
		if (ret) {
			w->error = "deregistration failed";
			w->err = -ret;
			return NULL;
		}
		w->regs++;
	}
	return NULL;
}

static void throughput(const char *label, int seconds, uint64_t size, char **threads, int nthreads)
{
	int gpu = gpu_open();

	if (gpu < 0)
		fatal("open %s: %s", NVP2P_STANDIN_DEVICE, strerror(-gpu));
	for (int t = 0; t < nthreads; t++) {
		int n = atoi(threads[t]);
		struct worker *w = calloc(n > 0 ? n : 1, sizeof(*w));
		struct gpu_buf *bufs = calloc(n > 0 ? n : 1, sizeof(*bufs));
		volatile int stop = 0;
		long long regs = 0;
		uint64_t t0, t1;

		if (n <= 0 || !w || !bufs)
			fatal("bad thread count %s", threads[t]);
		/* Each thread its own memory and its own file, as ranks of a job would. */
		for (int i = 0; i < n; i++) {
			buf_alloc(&bufs[i], gpu, size);
			w[i].pmh = pmh_open();
			if (w[i].pmh < 0)
				fatal("open %s: %s", PMH_DEVICE, strerror(-w[i].pmh));
			w[i].va = bufs[i].va;
			w[i].size = size;
			w[i].stop = &stop;
		}
		t0 = now_ns();
		for (int i = 0; i < n; i++)
			if (pthread_create(&w[i].thread, NULL, worker_run, &w[i]))
				fatal("pthread_create");
		usleep(seconds * 1000000u);
		stop = 1;
		for (int i = 0; i < n; i++)
			pthread_join(w[i].thread, NULL);
		t1 = now_ns();
		for (int i = 0; i < n; i++) {
			if (w[i].error)
				fatal("throughput thread %d: %s: %s", i, w[i].error, strerror(w[i].err));
			regs += w[i].regs;
			close(w[i].pmh);
			buf_free(&bufs[i]);
		}
		printf("tput %s %llu %d %lld %llu\n", label, (unsigned long long)size, n, regs,
		       (unsigned long long)(t1 - t0));
		fflush(stdout);
		free(w);
		free(bufs);
		check_clear("throughput");
	}
	close(gpu);
}

/*
 * SUnreclaim of /proc/meminfo, in kB: the unreclaimable slab, where every object of a registration
 * lives (kmalloc and kmem caches of the client, the host and the provider). The reclaimable part
 * (dentries, inodes) moves with whatever else the guest does, and dropping caches to steady it
 * would move it more.
 */
static long long slab_kb(void)
{
	char buf[8192], *p;

	if (read_text("/proc/meminfo", buf, sizeof(buf)))
		fatal("cannot read /proc/meminfo");
	p = strstr(buf, "\nSUnreclaim:");
	if (!p)
		fatal("no SUnreclaim: line in /proc/meminfo");
	return strtoll(p + 12, NULL, 10);
}

#define MAXCACHES 512

struct slabs {
	int n;
	char name[MAXCACHES][64];
	long long active[MAXCACHES];
	long long objsize[MAXCACHES];
};

/*
 * /proc/slabinfo ("slabinfo - version: 2.1", a "# name <active_objs> <num_objs> <objsize> ..."
 * header, then a line per cache) into @sl; -1 when it is not of that shape.
 */
static int parse_slabinfo(const char *text, struct slabs *sl)
{
	const char *line = text;

	sl->n = 0;
	if (strncmp(text, "slabinfo - version: 2.", 22))
		return -1;
	while ((line = strchr(line, '\n')) && *++line) {
		long long active, num, objsize;

		if (*line == '#')
			continue;
		if (sl->n == MAXCACHES)
			fatal("/proc/slabinfo lists more than %d caches", MAXCACHES);
		if (sscanf(line, "%63s %lld %lld %lld", sl->name[sl->n], &active, &num, &objsize) != 4)
			return -1;
		sl->active[sl->n] = active;
		sl->objsize[sl->n] = objsize;
		sl->n++;
	}
	return sl->n ? 0 : -1;
}

/*
 * Every cache's per-CPU slabs and sheaves back to its node lists (kmem_cache_shrink, through each
 * cache's sysfs "shrink"), so that /proc/slabinfo counts their free objects as free: it takes
 * every object a CPU holds for "active", and how many a CPU holds changes with what ran last.
 */
static void slabs_shrink(void)
{
	DIR *d = opendir("/sys/kernel/slab");
	struct dirent *e;
	int done = 0;

	if (!d)
		fatal("cannot open /sys/kernel/slab: %s", strerror(errno));
	while ((e = readdir(d))) {
		char path[512];

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/sys/kernel/slab/%s/shrink", e->d_name);
		if (!write_text(path, "1"))
			done++;
	}
	closedir(d);
	if (!done)
		fatal("no cache of /sys/kernel/slab could be shrunk");
}

static void slabs_read(struct slabs *sl)
{
	static char buf[128 << 10];
	int ret;

	slabs_shrink();
	ret = read_all("/proc/slabinfo", buf, sizeof(buf));

	if (ret)
		fatal("cannot read /proc/slabinfo (%s): a kernel without CONFIG_SLUB_DEBUG? "
		      "(tests/bench/slab.config)", strerror(-ret));
	if (parse_slabinfo(buf, sl))
		fatal("/proc/slabinfo is not of the 2.x format");
}

/* Let deferred frees (RCU, work items) finish before a reading. */
static void settle(void)
{
	usleep(500 * 1000);
}

static void memory(const char *label, int n, uint64_t size)
{
	int gpu, pmh = open_both(&gpu);
	__u64 *handles = calloc(n, sizeof(*handles));
	static struct slabs sb, sa;
	long long before, after;
	struct gpu_buf b;

	if (!handles || n <= 0)
		fatal("bad count %d", n);
	/* One allocation, registered a piece at a time: n distinct live registrations. */
	buf_alloc(&b, gpu, (size_t)n * size);
	/* One registration first, so that caches that grow once per boot are not counted. */
	dereg(pmh, reg(pmh, b.va, size));
	settle();
	before = slab_kb();
	slabs_read(&sb);
	for (int i = 0; i < n; i++)
		handles[i] = reg(pmh, b.va + (size_t)i * size, size);
	settle();
	after = slab_kb();
	slabs_read(&sa);
	printf("mem %s %llu %d %lld %lld\n", label, (unsigned long long)size, n, before, after);
	/* Caches are never destroyed while the registrations live, so both readings list them in
	 * the same order but for caches created in between, which start from nothing. */
	for (int j = 0; j < sa.n; j++) {
		long long was = 0;

		for (int i = 0; i < sb.n; i++)
			if (!strcmp(sb.name[i], sa.name[j])) {
				was = sb.active[i];
				break;
			}
		if (sa.active[j] != was)
			printf("slab %s %llu %d %s %lld %lld %lld\n", label, (unsigned long long)size, n,
			       sa.name[j], sa.objsize[j], was, sa.active[j]);
	}
	fflush(stdout);
	for (int i = 0; i < n; i++)
		dereg(pmh, handles[i]);
	buf_free(&b);
	free(handles);
	check_clear("memory");
	close(pmh);
	close(gpu);
}

/* ---- unit checks of the helpers above (bench selftest; bench.py runs it on the host) ---- */

static int failures;

#define CHECK(cond) do { \
	if (!(cond)) { \
		fprintf(stderr, "selftest: %s:%d: %s\n", __FILE__, __LINE__, #cond); \
		failures++; \
	} \
} while (0)

static int selftest(void)
{
	struct provider p, q, d;
	char text[2048];
	int len = 0;

	CHECK(parse_size("64K") == 65536);
	CHECK(parse_size("16M") == 16ull << 20);
	CHECK(parse_size("1G") == 1ull << 30);
	CHECK(parse_size("4096") == 4096);
	CHECK(parse_size("0") == 0);
	CHECK(parse_size("") == 0);
	CHECK(parse_size("K") == 0);
	CHECK(parse_size("64KB") == 0);
	CHECK(parse_size("-1") == 0);

	len += snprintf(text + len, sizeof(text) - len, "live_pins 0\nleaked_at_unload 0\n");
	for (int i = 0; i < NFN; i++)
		len += snprintf(text + len, sizeof(text) - len, "calls_%s %d\n", fn_names[i], i + 1);
	for (int i = 0; i < NFN; i++)
		len += snprintf(text + len, sizeof(text) - len, "ns_%s %d\n", fn_names[i], 1000 * (i + 1));
	CHECK(parse_counters(text, &p) == -1);	/* no cost_model_ns */
	snprintf(text + len, sizeof(text) - len, "cost_model_ns 77\n");
	CHECK(parse_counters(text, &p) == 0);
	CHECK(p.calls[0] == 1 && p.calls[5] == 6);
	CHECK(p.ns[1] == 2000 && p.ns[4] == 5000);
	CHECK(p.model_ns == 77);
	/* "calls_get_pages" must not be taken for "calls_get_pages_persistent" or back. */
	CHECK(p.calls[1] == 2);
	q = p;
	q.calls[4] += 3;
	q.ns[4] += 500;
	q.model_ns += 70000;
	d = provider_delta(&p, &q);
	CHECK(d.calls[4] == 3 && d.ns[4] == 500 && d.model_ns == 70000 && d.calls[0] == 0);
	CHECK(parse_counters("", &p) == -1);
	{
		static struct slabs sl;
		static struct steps st;

		CHECK(parse_slabinfo("slabinfo - version: 2.1\n"
				     "# name            <active_objs> <num_objs> <objsize> <objperslab>\n"
				     "kmalloc-256 1024 1056 256 16 1 : tunables 0 0 0 : slabdata 66 66 0\n"
				     "nvp2p_pin 7 40 200 20 1 : tunables 0 0 0 : slabdata 2 2 0\n", &sl) == 0);
		CHECK(sl.n == 2 && !strcmp(sl.name[1], "nvp2p_pin") && sl.active[0] == 1024 &&
		      sl.objsize[0] == 256 && sl.objsize[1] == 200);
		CHECK(parse_slabinfo("kmalloc-256 1 1 256\n", &sl) == -1);
		CHECK(parse_slabinfo("slabinfo - version: 2.1\nkmalloc-256 x\n", &sl) == -1);
		CHECK(parse_steps("acquire 3 900\nget_pages 2 4000\n", &st) == 0);
		CHECK(st.n == 2 && !strcmp(st.name[1], "get_pages") && st.calls[0] == 3 &&
		      st.ns[1] == 4000);
		CHECK(parse_steps("acquire 3\n", &st) == -1);
	}
	{
		char path[] = "/tmp/bench-selftest-XXXXXX", buf[8];
		int fd = mkstemp(path);

		CHECK(fd >= 0 && write(fd, "1234567", 7) == 7);
		if (fd >= 0)
			close(fd);
		CHECK(read_all(path, buf, sizeof(buf)) == 0 && !strcmp(buf, "1234567"));
		CHECK(read_all(path, buf, 7) == -EFBIG);
		CHECK(read_all("/nonexistent/bench", buf, sizeof(buf)) == -ENOENT);
		unlink(path);
	}
	if (failures)
		fprintf(stderr, "selftest: %d check(s) failed\n", failures);
	else
		printf("selftest: ok\n");
	return failures ? 1 : 0;
}

static void usage(void)
{
	fprintf(stderr,
		"usage: bench latency LABEL RUNS SIZE...\n"
		"       bench latency-plain LABEL RUNS SIZE...\n"
		"       bench latency-first LABEL RUNS SIZE...\n"
		"       bench invalidation LABEL RUNS SIZE...\n"
		"       bench throughput LABEL SECONDS SIZE THREADS...\n"
		"       bench memory LABEL N SIZE\n"
		"       bench selftest\n");
	exit(2);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 2 && !strcmp(argv[1], "selftest"))
		return selftest();
	if (argc < 5)
		usage();
	if (!strcmp(argv[1], "latency"))
		latency(argv[2], atoi(argv[3]), argv + 4, argc - 4, true);
	else if (!strcmp(argv[1], "latency-plain"))
		latency(argv[2], atoi(argv[3]), argv + 4, argc - 4, false);
	else if (!strcmp(argv[1], "latency-first"))
		latency_first(argv[2], atoi(argv[3]), argv + 4, argc - 4);
	else if (!strcmp(argv[1], "invalidation"))
		invalidation(argv[2], atoi(argv[3]), argv + 4, argc - 4);
	else if (!strcmp(argv[1], "throughput") && argc >= 6)
		throughput(argv[2], atoi(argv[3]), parse_size(argv[4]), argv + 5, argc - 5);
	else if (!strcmp(argv[1], "memory") && argc == 5)
		memory(argv[2], atoi(argv[3]), parse_size(argv[4]));
	else
		usage();
	return 0;
}
