// SPDX-License-Identifier: GPL-2.0
/*
 * Conformance scenarios: what a user of ib_core can observe of a peer-memory client, printed as
 * observations so that two clients can be compared line by line. conformance.sh runs this once
 * against NVIDIA's nvidia-peermem (550, built against the stand-ins) and once against peermem-rs
 * in the same configuration, and compares the two logs.
 *
 *   conformance TARGET PART [--skip SCENARIO]... [--only SCENARIO]...
 *
 *   TARGET  nvidia_peermem (nvidia-peermem.ko, no parameters: an invalidating nv_mem and a
 *           persistent nv_mem_nc, all 550 has) or peermem_rs (peermem_rs.ko with
 *           persistent_api_support=0: the same two clients)
 *   PART    switch    every scenario that needs GPU and NIC under one PCIe switch
 *           split     the topology refusal (GPU and NIC on different root ports)
 *
 * The program loads and unloads the stand-ins and the target itself (from $PEERMEM_MODULES), so
 * that both targets meet exactly the same sequence of events from freshly loaded stand-ins.
 *
 * Output, one record per line (values never contain spaces):
 *   S <scenario> <description>      a scenario starts
 *   O <scenario> <key> <value>      an observation
 *   X <scenario> <why>              a scenario not run for this target (--skip)
 * Keys starting with "_" (durations) are informative and never compared. At the end of every
 * scenario come the changes of every counter of the NVIDIA stand-in, the host and the
 * memory_peers statistics ("d.<counter>", only those that changed), live objects left behind
 * ("left.<counter>", only non-zero ones) and the target's module reference count.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gpumem.h"
#include "pmh.h"
#include "race.h"

#define GPU_PAGE	NVP2P_GPU_PAGE_SIZE
#define STANDIN_KO	"nvidia_p2p_standin.ko"
#define STANDIN_MOD	"nvidia_p2p_standin"
#define HOST_KO		"peer_mem_host.ko"
#define HOST_MOD	"peer_mem_host"
#define CLIENT_KO	"peer_test_client.ko"
#define CLIENT_MOD	"peer_test_client"
#define STANDIN_PARAMS	"/sys/module/" STANDIN_MOD "/parameters/"
#define NO_INVALIDATION_ID 0xffffffffull

/* The client under test. */
static struct target {
	const char *name;	/* module name */
	const char *ko;		/* file in $PEERMEM_MODULES */
	const char *params;	/* nvidia-peermem 550's configuration */
} target;

static int gpu = -1, pmh = -1;

/* ---- output ---- */

static const char *cur;			/* the running scenario */
static long long cur_start_ns;
static const char *skips[32], *onlys[64];
static int nskips, nonlys;

static long long now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

/* An observation of the running scenario. Spaces in the value become '_'. */
static void ob(const char *key, const char *fmt, ...)
{
	char val[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(val, sizeof(val), fmt, ap);
	va_end(ap);
	for (char *p = val; *p; p++)
		if (*p == ' ' || *p == '\t' || *p == '\n')
			*p = '_';
	printf("O %s %s %s\n", cur, key, val[0] ? val : "''");
	fflush(stdout);
}

/* A return code, by name where it has one. */
static const char *rc_name(int rc)
{
	static char buf[32];
	static const struct { int e; const char *n; } names[] = {
		{ EPERM, "EPERM" }, { ENOENT, "ENOENT" }, { EIO, "EIO" }, { EAGAIN, "EAGAIN" },
		{ ENOMEM, "ENOMEM" }, { EACCES, "EACCES" }, { EFAULT, "EFAULT" }, { EBUSY, "EBUSY" },
		{ EEXIST, "EEXIST" }, { ENODEV, "ENODEV" }, { EINVAL, "EINVAL" }, { ENOSPC, "ENOSPC" },
		{ ERANGE, "ERANGE" }, { ENOEXEC, "ENOEXEC" }, { EOPNOTSUPP, "EOPNOTSUPP" },
		{ 524, "ENOTSUPP" },
	};

	if (rc == 0)
		return "0";
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (-rc == names[i].e)
			return rc < 0 ? (snprintf(buf, sizeof(buf), "-%s", names[i].n), buf) : "?";
	snprintf(buf, sizeof(buf), "%d", rc);
	return buf;
}

static void ob_rc(const char *key, int rc)
{
	ob(key, "%s", rc_name(rc));
}

/* ---- counters: the NVIDIA stand-in, the host, memory_peers ---- */

struct snapshot {
	int n;
	struct {
		char key[96];
		long long v;
	} c[128];
};

static const char *const host_counters[] = {
	"live_mrs", "live_peer_mrs", "live_ordinary_mrs", "registered_clients", "reg_ok",
	"reg_failed", "peer_reg_unwound", "invalidate_calls", "invalidate_unknown", "inline_unmaps",
	"dma_unmap_calls", "put_pages_calls", "release_calls", "dma_ops", "dma_refused",
};
static const char *const peer_stats[] = {
	"num_alloc_mrs", "num_dealloc_mrs", "num_reg_pages", "num_dereg_pages", "num_reg_bytes",
	"num_dereg_bytes", "num_free_callbacks",
};
static const char *const peer_clients[] = { "nv_mem", "nv_mem_nc" };

static void snap_add(struct snapshot *s, const char *key, long long v)
{
	if (s->n >= (int)(sizeof(s->c) / sizeof(s->c[0])))
		return;
	snprintf(s->c[s->n].key, sizeof(s->c[s->n].key), "%s", key);
	s->c[s->n].v = v;
	s->n++;
}

static void take(struct snapshot *s)
{
	char line[128], name[64], key[96];
	long long v;
	FILE *f;

	s->n = 0;
	f = fopen(GPU_DEBUGFS "/counters", "r");
	if (f) {
		while (fgets(line, sizeof(line), f))
			if (sscanf(line, "%63s %lld", name, &v) == 2) {
				/*
				 * Nanoseconds inside each entry point (ns_<fn>, cost_model_ns, for
				 * make bench) differ from run to run: time, not behaviour. The calls
				 * themselves (calls_<fn>) are compared.
				 */
				if (!strncmp(name, "ns_", 3) || !strcmp(name, "cost_model_ns"))
					continue;
				/*
				 * The stand-in's own bookkeeping: kernel_clients are the live persistent
				 * pins (compared through total_persistent_pins and left.gpu.live_pins),
				 * user_clients counts this test's own GPU files, and peak_page_mappings,
				 * a high-water mark since load, depends on what earlier scenarios left
				 * mapped; a client that maps a page more often shows in
				 * total_dma_mappings.
				 */
				if (!strcmp(name, "kernel_clients") || !strcmp(name, "user_clients") ||
				    !strcmp(name, "peak_page_mappings"))
					continue;
				snprintf(key, sizeof(key), "gpu.%s", name);
				snap_add(s, key, v);
			}
		fclose(f);
	}
	for (size_t i = 0; i < sizeof(host_counters) / sizeof(host_counters[0]); i++) {
		v = pmh_counter(host_counters[i]);
		if (v != LLONG_MIN) {
			snprintf(key, sizeof(key), "host.%s", host_counters[i]);
			snap_add(s, key, v);
		}
	}
	for (size_t c = 0; c < 2; c++)
		for (size_t i = 0; i < sizeof(peer_stats) / sizeof(peer_stats[0]); i++) {
			v = peer_stat(peer_clients[c], peer_stats[i]);
			if (v != LLONG_MIN) {
				snprintf(key, sizeof(key), "%s.%s", peer_clients[c], peer_stats[i]);
				snap_add(s, key, v);
			}
		}
}

static long long snap_get(const struct snapshot *s, const char *key, int *found)
{
	for (int i = 0; i < s->n; i++)
		if (!strcmp(s->c[i].key, key)) {
			*found = 1;
			return s->c[i].v;
		}
	*found = 0;
	return 0;
}

/* Counters of objects alive now (reported when non-zero) rather than of events (deltas). */
static int is_live(const char *key)
{
	return !strncmp(key, "gpu.live_", 9) || !strcmp(key, "gpu.bar1_pinned_bytes") ||
	       !strcmp(key, "gpu.allocated_bytes") || !strncmp(key, "host.live_", 10) ||
	       !strcmp(key, "host.registered_clients");
}

static struct snapshot start_snap;

/* The target's module reference count, or "unloaded". */
static void ob_refcnt(const char *key)
{
	char path[256];
	long long v;

	snprintf(path, sizeof(path), "/sys/module/%s/refcnt", target.name);
	v = read_number(path);
	if (v == LLONG_MIN)
		ob(key, "unloaded");
	else
		ob(key, "%lld", v);
}

/*
 * peermem-rs's invalidating client finishes a teardown in its work item, which holds a module
 * reference until the driver's teardown has returned and it has let go of its pins (docs/differences.md,
 * diff-two-pins). Every scenario ends with nothing registered, so end() gives that item up to 5 s
 * before it reads the counters and the refcount: what the item does after the scenario's last call
 * (an unpin, put_pages of the notification pin, the module reference) is then counted the same on a
 * busy host as on an idle one. A reference still held after 5 s counts.
 */
static void wait_work_item(void)
{
	char path[256];

	if (strcmp(target.name, "peermem_rs"))
		return;
	snprintf(path, sizeof(path), "/sys/module/%s/refcnt", target.name);
	for (int i = 0; i < 500 && read_number(path) > 0; i++)
		usleep(10000);
}

/* A counter's change since the scenario began. */
static long long delta(const char *key)
{
	struct snapshot now;
	int found, found0;
	long long v, v0;

	take(&now);
	v = snap_get(&now, key, &found);
	v0 = snap_get(&start_snap, key, &found0);
	return found ? v - v0 : 0;
}

/* ---- scenarios ---- */

/* Is @name in @list? An entry ending in '*' stands for every name it begins. */
static int listed(const char *const *list, int n, const char *name)
{
	for (int i = 0; i < n; i++) {
		size_t len = strlen(list[i]);

		if (len && list[i][len - 1] == '*' ? !strncmp(list[i], name, len - 1) :
						    !strcmp(list[i], name))
			return 1;
	}
	return 0;
}

/* Starts scenario @name; returns 0 if it is not to run here. */
static int begin(const char *name, const char *desc)
{
	if (nonlys && !listed(onlys, nonlys, name))
		return 0;
	if (listed(skips, nskips, name)) {
		printf("S %s %s\nX %s skipped\n", name, desc, name);
		fflush(stdout);
		return 0;
	}
	cur = name;
	printf("S %s %s\n", name, desc);
	fflush(stdout);
	take(&start_snap);
	cur_start_ns = now_ns();
	return 1;
}

/* Ends the running scenario: every counter that moved, every live object left, the refcount. */
static void end(void)
{
	struct snapshot now;
	char key[128];
	int found;

	wait_work_item();
	take(&now);
	for (int i = 0; i < now.n; i++) {
		long long v0 = snap_get(&start_snap, now.c[i].key, &found);

		if (is_live(now.c[i].key)) {
			if (now.c[i].v) {
				snprintf(key, sizeof(key), "left.%s", now.c[i].key);
				ob(key, "%lld", now.c[i].v);
			}
		} else if (now.c[i].v - v0) {
			snprintf(key, sizeof(key), "d.%s", now.c[i].key);
			ob(key, "%lld", now.c[i].v - v0);
		}
	}
	ob_refcnt("end.refcnt");
	ob("_ms", "%lld", (now_ns() - cur_start_ns) / 1000000);
	cur = NULL;
}

/* ---- modules ---- */

static void close_fds(void)
{
	if (pmh >= 0)
		close(pmh);
	if (gpu >= 0)
		close(gpu);
	pmh = gpu = -1;
}

static int unload_all(void)
{
	static const char *const mods[] = {
		"peermem_rs", "nvidia_peermem", CLIENT_MOD, "p2p_probe", HOST_MOD, STANDIN_MOD,
	};
	int ret = 0;

	close_fds();
	for (size_t i = 0; i < sizeof(mods) / sizeof(mods[0]); i++)
		if (mod_unload_wait(mods[i])) {
			fprintf(stderr, "conformance: cannot unload %s\n", mods[i]);
			ret = -EBUSY;
		}
	return ret;
}

static void die(const char *what, int err)
{
	fprintf(stderr, "conformance: %s: %s\n", what, strerror(err < 0 ? -err : err));
	exit(1);
}

/* The target with its configuration and @extra parameters. Returns 0 or -errno. */
static int load_target(const char *extra)
{
	char params[256];

	snprintf(params, sizeof(params), "%s %s", target.params, extra ? extra : "");
	return mod_load(target.ko, params);
}

static int target_loaded(void)
{
	return mod_loaded(target.name);
}

static void must_load(const char *ko, const char *params)
{
	int ret = mod_load(ko, params);

	if (ret)
		die(ko, ret);
}

/*
 * The peer-memory host with @params after those of the run: $CONFORMANCE_HOST, which
 * conformance.sh sets to the host of current kernels (sysfs=0: no memory_peers, a second client
 * of a name accepted) or of kernels before 6.6 (sysfs=1).
 */
static void load_host(const char *params)
{
	const char *host = getenv("CONFORMANCE_HOST");
	char p[256];

	snprintf(p, sizeof(p), "%s %s", host ? host : "", params);
	must_load(HOST_KO, p);
}

static void open_fds(void)
{
	if (gpu < 0) {
		gpu = gpu_open();
		if (gpu < 0)
			die("open " NVP2P_STANDIN_DEVICE, gpu);
	}
	if (pmh < 0) {
		pmh = pmh_open();
		if (pmh < 0)
			die("open " PMH_DEVICE, pmh);
	}
}

/* The host's line for each client, without the use count (which counts the test's own MRs). */
static void ob_clients(const char *key)
{
	char buf[1024], out[1024] = "", *line, *save = NULL;

	if (read_text(PMH_DEBUGFS "/clients", buf, sizeof(buf))) {
		ob(key, "unreadable");
		return;
	}
	for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *u = strstr(line, " usecnt=");

		if (u)
			*u = '\0';
		snprintf(out + strlen(out), sizeof(out) - strlen(out), "%s%s", out[0] ? ";" : "",
			 line);
	}
	ob(key, "%s", out[0] ? out : "none");
}

static void ob_peers_dirs(const char *key)
{
	ob(key, "nv_mem=%d,nv_mem_nc=%d", path_exists(MEMORY_PEERS "/nv_mem"),
	   path_exists(MEMORY_PEERS "/nv_mem_nc"));
}

/* ---- GPU memory and registrations ---- */

static uint8_t *alloc_gpu(size_t size, __u64 *handle, struct nvp2p_info *info)
{
	uint8_t *va = gpu_alloc(gpu, size, handle);

	if (!va)
		die("gpu_alloc", errno);
	if (info && gpu_info(gpu, *handle, info))
		die("gpu_info", errno);
	return va;
}

static void free_gpu(const char *key, __u64 handle)
{
	int rc = gpu_free(gpu, handle);

	if (key)
		ob_rc(key, rc);
	else if (rc)
		die("gpu_free", rc);
}

static void fill(uint8_t *p, size_t n, unsigned int seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(i * 31 + seed * 7 + (i >> 8));
}

/* What ibv_reg_mr returned: the return code and, on success, what the host recorded. */
static int reg(const char *pfx, const void *va, size_t len, unsigned int flags,
	       struct pmh_reg_mr *mr)
{
	struct pmh_reg_mr r;
	char key[64];
	int rc = pmh_reg(pmh, va, len, flags, &r);

	snprintf(key, sizeof(key), "%s.rc", pfx);
	ob_rc(key, rc);
	if (!rc) {
		snprintf(key, sizeof(key), "%s.client", pfx);
		ob(key, "%s", r.client[0] ? r.client : "ordinary");
		snprintf(key, sizeof(key), "%s.page_size", pfx);
		ob(key, "%llu", (unsigned long long)r.page_size);
		snprintf(key, sizeof(key), "%s.nmap", pfx);
		/*
		 * Host memory is pinned by the host itself, which merges physically contiguous pages:
		 * its entry count says where the kernel put the pages, nothing about the client.
		 */
		if (r.client[0])
			ob(key, "%u", r.nmap);
		else
			ob(key, "by_the_host");
		snprintf(key, sizeof(key), "%s.core_context", pfx);
		ob(key, "%s", r.core_context == NO_INVALIDATION_ID ? "none" : "id");
	}
	if (mr)
		*mr = r;
	return rc;
}

/* The MR as the host sees it: state, invalidation, SG list (DMA addresses relative to @bus). */
static void query(const char *pfx, __u64 handle, __u64 bus, long long t0, long long t1)
{
	struct pmh_sge sges[16];
	struct pmh_query_mr q;
	char key[64], sg[512] = "";
	int rc = pmh_query(pmh, handle, &q, sges, 16);

	snprintf(key, sizeof(key), "%s.query", pfx);
	ob_rc(key, rc);
	if (rc)
		return;
	snprintf(key, sizeof(key), "%s.state", pfx);
	ob(key, "%s", q.state == PMH_MR_MAPPED ? "mapped" :
		      q.state == PMH_MR_INVALIDATED ? "invalidated" : "other");
	snprintf(key, sizeof(key), "%s.invalidations", pfx);
	ob(key, "%u", q.invalidations);
	snprintf(key, sizeof(key), "%s.invalidated", pfx);
	/* When the invalidation reached the host, relative to the cudaFree of the scenario. */
	if (!q.invalidated_ns)
		ob(key, "never");
	else if (t0 && (long long)q.invalidated_ns < t0)
		ob(key, "before_free");
	else if (t0 && (long long)q.invalidated_ns <= t1)
		ob(key, "during_free");
	else
		ob(key, "after_free");
	snprintf(key, sizeof(key), "%s.unmapped_by_invalidation", pfx);
	ob(key, "%u", q.unmapped_by_invalidation);
	if (q.state != PMH_MR_MAPPED)
		return;
	for (unsigned int i = 0; i < q.nmap && i < 16; i++) {
		long long rel = (long long)(sges[i].dma_addr - bus);

		snprintf(sg + strlen(sg), sizeof(sg) - strlen(sg), "%s%s%#llx:%#llx", i ? "," : "",
			 rel < 0 ? "-" : "+", (unsigned long long)(rel < 0 ? -rel : rel),
			 (unsigned long long)sges[i].length);
	}
	snprintf(key, sizeof(key), "%s.sg", pfx);
	ob(key, "%s", q.nmap > 16 ? "too_many" : sg);
}

/*
 * RDMA write of the last bytes of the MR (at most 1 KiB) and RDMA read of its first bytes, checked
 * through the CPU's mapping of the GPU memory at @va (the MR's first byte).
 */
static void round_trip(const char *pfx, __u64 handle, uint8_t *va, size_t len, unsigned int seed)
{
	uint8_t in[1024], out[1024];
	size_t n = len < sizeof(in) ? len : sizeof(in);
	char key[64];
	int rc;

	fill(in, n, seed);
	rc = pmh_dma(pmh, handle, len - n, in, n, PMH_DMA_TO_MR);
	snprintf(key, sizeof(key), "%s.rdma_write", pfx);
	ob_rc(key, rc);
	snprintf(key, sizeof(key), "%s.gpu_has_written_bytes", pfx);
	ob(key, "%s", memcmp(va + len - n, in, n) ? "no" : "yes");
	fill(va, n, seed + 100);
	memset(out, 0, sizeof(out));
	rc = pmh_dma(pmh, handle, 0, out, n, PMH_DMA_FROM_MR);
	snprintf(key, sizeof(key), "%s.rdma_read", pfx);
	ob_rc(key, rc);
	snprintf(key, sizeof(key), "%s.read_matches_gpu", pfx);
	ob(key, "%s", memcmp(out, va, n) ? "no" : "yes");
}

static void dereg(const char *key, __u64 handle)
{
	ob_rc(key, pmh_dereg(pmh, handle));
}

/* ---- loading: identity, parameters, refusals ---- */

static void scenario_load_without_host(void)
{
	int rc;

	if (!begin("load.without_host", "load_with_no_peer-memory_host_(ib_core_without_peer_memory)"))
		return;
	rc = load_target(NULL);
	ob_rc("insmod", rc);
	ob("loaded", "%d", target_loaded());
	if (target_loaded())
		mod_unload_wait(target.name);
	end();
}

static void bad_param(const char *name, const char *params, const char *desc)
{
	int rc;

	if (!begin(name, desc))
		return;
	/* Given alone, so that the bad value is the only value of its parameter. */
	rc = mod_load(target.ko, params);
	ob_rc("insmod", rc);
	ob("loaded", "%d", target_loaded());
	ob_peers_dirs("memory_peers");
	if (target_loaded())
		ob_rc("rmmod", mod_unload_wait(target.name));
	end();
}

static void name_taken(const char *name, const char *taken, const char *desc)
{
	char params[64];
	int rc;

	if (!begin(name, desc))
		return;
	snprintf(params, sizeof(params), "names=%s", taken);
	must_load(CLIENT_KO, params);
	rc = load_target(NULL);
	ob_rc("insmod", rc);
	ob("loaded", "%d", target_loaded());
	ob_clients("clients");
	if (target_loaded())
		mod_unload_wait(target.name);
	ob_rc("rmmod_other_client", mod_unload_wait(CLIENT_MOD));
	end();
}

struct loader {
	int rc;
};

static void *load_in_background(void *arg)
{
	struct loader *l = arg;

	l->rc = load_target(NULL);
	return NULL;
}

/*
 * A registration while a load fails: another client holds the name nv_mem_nc (and claims no
 * memory), so on a host with memory_peers the target's nv_mem registers and its nv_mem_nc is
 * refused, and its init fails. The host holds the refused registration (race point
 * register.refused) while memory is registered: a client that takes it registers memory for a
 * module whose init is failing (the host's unregistration waits for its release, but a pin the
 * driver keeps past a release would call back into the unloaded module).
 */
static void scenario_registration_while_the_load_fails(const char *name, const char *desc)
{
	struct loader l = { 0 };
	struct pmh_reg_mr mr;
	pthread_t t;
	__u64 handle;
	uint8_t *va;
	int held;

	if (read_number("/sys/module/" HOST_MOD "/parameters/sysfs") != 1)
		return;		/* the host of current kernels refuses no name */
	if (!begin(name, desc))
		return;
	must_load(CLIENT_KO, "names=nv_mem_nc");
	if (write_text("/sys/kernel/debug/" CLIENT_MOD "/c0/acquire_mode", "2"))
		die("acquire_mode", errno);
	open_fds();
	va = alloc_gpu(GPU_PAGE, &handle, NULL);
	if (race_gate(HOST_MOD, "register.refused", 0))
		die("race gate", errno);
	if (pthread_create(&t, NULL, load_in_background, &l))
		die("pthread_create", errno);
	held = race_wait_held(HOST_MOD, "register.refused", 10000) > 0;
	ob("load_held_at_the_refusal", "%s", held ? "yes" : "no");
	if (held && !reg("reg", va, GPU_PAGE, PMH_REG_WRITE, &mr))
		dereg("dereg.rc", mr.handle);
	race_open(HOST_MOD, "register.refused");
	pthread_join(t, NULL);
	ob_rc("insmod", l.rc);
	ob("loaded", "%d", target_loaded());
	if (target_loaded())
		mod_unload_wait(target.name);
	free_gpu(NULL, handle);
	ob_rc("rmmod_other_client", mod_unload_wait(CLIENT_MOD));
	end();
}

/*
 * Another module that registers nv_mem is loaded: peermem-rs (its persistent_api_support=0, the
 * two clients 550 has) when the target is NVIDIA's module, NVIDIA's when it is peermem-rs. A host
 * with memory_peers refuses the second nv_mem; one without accepts it.
 */
static void name_taken_by_module(const char *name, const char *desc)
{
	int rs = !strcmp(target.name, "peermem_rs");
	const char *ko = rs ? "nvidia-peermem.ko" : "peermem_rs.ko";
	const char *mod = rs ? "nvidia_peermem" : "peermem_rs";
	int rc;

	if (!begin(name, desc))
		return;
	must_load(ko, rs ? "" : "persistent_api_support=0");
	rc = load_target(NULL);
	ob_rc("insmod", rc);
	ob("loaded", "%d", target_loaded());
	ob_clients("clients");
	if (target_loaded())
		mod_unload_wait(target.name);
	ob_rc("rmmod_other_module", mod_unload_wait(mod));
	end();
}

/* Loads the target (with @extra parameters) and records what it registered. */
static void scenario_load(const char *name, const char *extra, const char *desc)
{
	char path[256], v1[64] = "", v2[64] = "", perms[16] = "";
	int rc;

	/* A scenario before it may have been left out (--only) with the module still loaded. */
	if (target_loaded() && mod_unload_wait(target.name))
		die("unloading the target", EBUSY);
	if (!begin(name, desc)) {
		/* The scenarios after it need the module anyway. */
		rc = load_target(extra);
		if (rc)
			die("loading the target", rc);
		return;
	}
	rc = load_target(extra);
	ob_rc("insmod", rc);
	if (rc)
		die("loading the target", rc);
	ob_clients("clients");
	ob_peers_dirs("memory_peers");
	snprintf(path, sizeof(path), "/sys/module/%s/version", target.name);
	read_text(path, v1, sizeof(v1));
	read_text(MEMORY_PEERS "/nv_mem/version", v2, sizeof(v2));
	ob("nv_mem_version_is_module_version", "%s", v1[0] && !strcmp(v1, v2) ? "yes" : "no");
	read_text(MEMORY_PEERS "/nv_mem_nc/version", v2, sizeof(v2));
	ob("nv_mem_nc_version_is_module_version", "%s", v1[0] && !strcmp(v1, v2) ? "yes" : "no");
	snprintf(path, sizeof(path), "/sys/module/%s/parameters/peerdirect_support", target.name);
	ob("param.peerdirect_support", "%lld", read_number(path));
	{
		struct stat st;

		if (!stat(path, &st))
			snprintf(perms, sizeof(perms), "%o", st.st_mode & 0777);
	}
	ob("param.peerdirect_support.mode", "%s", perms[0] ? perms : "absent");
	ob_refcnt("refcnt");
	end();
}

static void scenario_unload(const char *name)
{
	if (!begin(name, "rmmod_with_nothing_registered")) {
		mod_unload_wait(target.name);
		return;
	}
	ob_rc("rmmod", mod_unload(target.name));
	ob("loaded", "%d", target_loaded());
	ob_peers_dirs("memory_peers");
	end();
}

/* ---- registration ---- */

static const struct reg_case {
	const char *name;
	size_t off, len;
	int data;		/* also move data through the NIC */
} write_cases[] = {
	{ "one_byte", 0, 1, 1 },
	{ "one_cpu_page", 0, 4096, 0 },
	{ "gpu_page_minus_1", 0, GPU_PAGE - 1, 0 },
	{ "one_gpu_page", 0, GPU_PAGE, 0 },
	{ "gpu_page_plus_1", 0, GPU_PAGE + 1, 0 },
	{ "offset_4k_3_pages", 4096, 3 * GPU_PAGE, 1 },
	{ "two_bytes_across_pages", GPU_PAGE - 1, 2, 1 },
	{ "odd_offset_and_length", 0x1234, 5 * GPU_PAGE + 77, 1 },
	{ "whole_allocation", 0, 8 * GPU_PAGE, 0 },
	{ "last_page_of_allocation", 7 * GPU_PAGE + 100, GPU_PAGE - 100, 0 },
}, persistent_cases[] = {
	{ "one_gpu_page", 0, GPU_PAGE, 0 },
	{ "offset_10_3_pages", 10, 3 * GPU_PAGE, 1 },
	{ "two_bytes_across_pages", GPU_PAGE - 1, 2, 0 },
};

static void reg_cases(const char *prefix, const struct reg_case *cases, size_t n, unsigned int flags,
		      const char *what)
{
	struct nvp2p_info info;
	__u64 handle;
	uint8_t *va;

	for (size_t c = 0; c < n; c++) {
		char name[96], desc[160];
		struct pmh_reg_mr mr;

		snprintf(name, sizeof(name), "%s.%s", prefix, cases[c].name);
		snprintf(desc, sizeof(desc), "%s:_offset_%#zx_length_%#zx%s", what, cases[c].off,
			 cases[c].len, cases[c].data ? ",_RDMA_write_and_read" : "");
		if (!begin(strdup(name), strdup(desc)))
			continue;
		va = alloc_gpu(8 * GPU_PAGE, &handle, &info);
		if (!reg("reg", va + cases[c].off, cases[c].len, flags, &mr)) {
			query("mr", mr.handle, info.phys_addr, 0, 0);
			ob_refcnt("registered.refcnt");
			ob("registered.gpu_live_pins", "%lld", gpu_counter("live_pins"));
			ob("registered.gpu_bar1_pinned_bytes", "%lld", gpu_counter("bar1_pinned_bytes"));
			if (cases[c].data)
				round_trip("data", mr.handle, va + cases[c].off, cases[c].len, c);
			dereg("dereg.rc", mr.handle);
		}
		free_gpu(NULL, handle);
		end();
	}
}

static void scenario_read_only(void)
{
	struct nvp2p_info info;
	struct pmh_reg_mr mr;
	uint8_t buf[64];
	__u64 handle;
	uint8_t *va;

	if (!begin("reg.read_only", "registration_without_write_access_(force=1):_RDMA_write_refused,_read_works"))
		return;
	va = alloc_gpu(GPU_PAGE, &handle, &info);
	if (!reg("reg", va, 2 * 4096, 0, &mr)) {
		query("mr", mr.handle, info.phys_addr, 0, 0);
		ob_rc("rdma_write", pmh_dma(pmh, mr.handle, 0, buf, sizeof(buf), PMH_DMA_TO_MR));
		ob_rc("rdma_read", pmh_dma(pmh, mr.handle, 0, buf, sizeof(buf), PMH_DMA_FROM_MR));
		dereg("dereg.rc", mr.handle);
	}
	free_gpu(NULL, handle);
	end();
}

static void scenario_many_live(void)
{
	struct nvp2p_info info;
	struct pmh_reg_mr mr[4];
	int ok[4];
	__u64 handle;
	uint8_t *va;

	if (!begin("reg.four_live_at_once", "four_registrations_alive_together:_two_of_one_range,_one_unaligned,_one_persistent"))
		return;
	va = alloc_gpu(4 * GPU_PAGE, &handle, &info);
	ok[0] = !reg("reg0", va, GPU_PAGE, PMH_REG_WRITE, &mr[0]);
	ok[1] = !reg("reg1", va, GPU_PAGE, PMH_REG_WRITE, &mr[1]);
	ok[2] = !reg("reg2", va + GPU_PAGE + 5, GPU_PAGE, PMH_REG_WRITE, &mr[2]);
	ok[3] = !reg("reg3", va + 3 * GPU_PAGE, 100, PMH_REG_WRITE | PMH_REG_NO_INVALIDATE, &mr[3]);
	ob_refcnt("registered.refcnt");
	ob("registered.gpu_live_pins", "%lld", gpu_counter("live_pins"));
	ob("registered.gpu_bar1_pinned_bytes", "%lld", gpu_counter("bar1_pinned_bytes"));
	for (int i = 0; i < 4; i++) {
		char key[32];

		snprintf(key, sizeof(key), "mr%d", i);
		if (ok[i])
			query(key, mr[i].handle, info.phys_addr, 0, 0);
	}
	for (int i = 3; i >= 0; i--) {
		char key[32];

		snprintf(key, sizeof(key), "dereg%d.rc", i);
		if (ok[i])
			dereg(key, mr[i].handle);
		if (i == 2)
			ob_refcnt("after_two_deregs.refcnt");
	}
	free_gpu(NULL, handle);
	end();
}

/* ---- memory that is not the caller's GPU memory ---- */

static void scenario_host_memory(void)
{
	struct pmh_reg_mr mr;
	void *p = aligned_alloc(4096, 3 * 4096);

	if (!begin("not_gpu.host_memory", "ordinary_host_memory:_the_host_pins_it_itself,_no_client_is_asked"))
		return;
	memset(p, 1, 3 * 4096);
	if (!reg("reg", p, 3 * 4096, PMH_REG_WRITE, &mr)) {
		ob_refcnt("registered.refcnt");
		dereg("dereg.rc", mr.handle);
	}
	free(p);
	end();
}

static void scenario_freed_gpu_memory(void)
{
	__u64 handle;
	uint8_t *va;

	if (!begin("not_gpu.freed", "GPU_memory_already_freed_(cudaFree_unmapped_it)"))
		return;
	va = alloc_gpu(GPU_PAGE, &handle, NULL);
	free_gpu(NULL, handle);
	reg("reg", va, GPU_PAGE, PMH_REG_WRITE, NULL);
	end();
}

static void scenario_beyond_allocation(void)
{
	__u64 handle;
	uint8_t *va;

	if (!begin("not_gpu.beyond_allocation", "a_range_that_runs_past_the_end_of_its_GPU_allocation"))
		return;
	va = alloc_gpu(GPU_PAGE, &handle, NULL);
	reg("reg", va + GPU_PAGE - 8, 16, PMH_REG_WRITE, NULL);
	reg("reg_nc", va + GPU_PAGE - 8, 16, PMH_REG_WRITE | PMH_REG_NO_INVALIDATE, NULL);
	free_gpu(NULL, handle);
	end();
}

static void scenario_unmapped(void)
{
	if (!begin("not_gpu.unmapped_address", "an_address_nothing_is_mapped_at"))
		return;
	reg("reg", (void *)(uintptr_t)0x10000, 4096, PMH_REG_WRITE, NULL);
	end();
}

static void scenario_other_process(void)
{
	uintptr_t child_va;
	pid_t pid;

	if (!begin("not_gpu.other_process", "GPU_memory_of_another_process_(its_VA_means_nothing_here)"))
		return;
	pid = gpu_alloc_in_child(GPU_PAGE, &child_va);
	if (pid < 0)
		die("fork", pid);
	if (!child_va)
		die("the child's allocation", EIO);
	reg("reg", (void *)child_va, GPU_PAGE, PMH_REG_WRITE, NULL);
	reg("reg_nc", (void *)child_va, GPU_PAGE, PMH_REG_WRITE | PMH_REG_NO_INVALIDATE, NULL);
	gpu_child_end(pid);
	end();
}

static void scenario_ranges(void)
{
	__u64 handle;
	uint8_t *va;

	if (begin("range.empty", "length_0")) {
		va = alloc_gpu(GPU_PAGE, &handle, NULL);
		reg("reg", va, 0, PMH_REG_WRITE, NULL);
		free_gpu(NULL, handle);
		end();
	}
	if (begin("range.wraps", "addr_+_length_wraps_past_2^64")) {
		reg("reg", (void *)(uintptr_t)(UINT64_MAX - 4095), 8192, PMH_REG_WRITE, NULL);
		end();
	}
	if (begin("range.rounding_wraps", "a_range_below_2^64_whose_64_KiB_rounding_wraps")) {
		reg("reg", (void *)(uintptr_t)0xffffffffffff8000ull, 0x4000, PMH_REG_WRITE, NULL);
		reg("reg_nc", (void *)(uintptr_t)0xffffffffffff8000ull, 0x4000,
		    PMH_REG_WRITE | PMH_REG_NO_INVALIDATE, NULL);
		end();
	}
	if (begin("range.larger_than_bar", "512_MiB_from_a_GPU_allocation_(the_BAR_is_256_MiB)")) {
		va = alloc_gpu(GPU_PAGE, &handle, NULL);
		reg("reg", va, 512ul << 20, PMH_REG_WRITE, NULL);
		free_gpu(NULL, handle);
		end();
	}
}

/* ---- BAR1 exhaustion ---- */

static void set_bar1_reserve(unsigned int mib)
{
	char v[16];

	snprintf(v, sizeof(v), "%u", mib);
	if (write_text(STANDIN_PARAMS "bar1_reserve_mib", v))
		die("bar1_reserve_mib", errno);
}

static void scenario_bar1(void)
{
	struct pmh_reg_mr full, more;
	__u64 handle;
	uint8_t *va;
	long long reserve = read_number(STANDIN_PARAMS "bar1_reserve_mib");

	if (!begin("bar1.exhaustion", "BAR1_with_1_MiB_left_(bar1_reserve_mib=255_of_256):_fill_it,_then_one_more_page"))
		return;
	va = alloc_gpu(2 << 20, &handle, NULL);
	set_bar1_reserve(255);
	if (!reg("fill", va, 1 << 20, PMH_REG_WRITE, &full)) {
		ob("filled.gpu_bar1_pinned_bytes", "%lld", gpu_counter("bar1_pinned_bytes"));
		reg("one_more", va + (1 << 20), GPU_PAGE, PMH_REG_WRITE, NULL);
		reg("one_more_nc", va + (1 << 20), GPU_PAGE, PMH_REG_WRITE | PMH_REG_NO_INVALIDATE,
		    NULL);
		dereg("fill.dereg.rc", full.handle);
	}
	/* The whole of it again, for a caller that cannot be invalidated. */
	if (!reg("fill_nc", va, 1 << 20, PMH_REG_WRITE | PMH_REG_NO_INVALIDATE, &full)) {
		if (!reg("one_more_after_nc", va + (1 << 20), GPU_PAGE, PMH_REG_WRITE, &more))
			dereg("one_more_after_nc.dereg.rc", more.handle);
		dereg("fill_nc.dereg.rc", full.handle);
	}
	set_bar1_reserve(reserve);
	free_gpu(NULL, handle);
	end();
}

/* ---- errors of the NVIDIA driver (the stand-in's fault injection) ---- */

static void inject(const char *what)
{
	if (write_text(GPU_DEBUGFS "/inject", what))
		die("inject", errno);
}

static void inject_case(const char *name, const char *desc, const char *fault, unsigned int flags)
{
	struct nvp2p_info info;
	struct pmh_reg_mr mr;
	__u64 handle;
	uint8_t *va;

	if (!begin(name, desc))
		return;
	va = alloc_gpu(GPU_PAGE, &handle, &info);
	inject(fault);
	if (!reg("reg", va, GPU_PAGE, flags, &mr))
		dereg("dereg.rc", mr.handle);
	inject("clear");
	free_gpu(NULL, handle);
	end();
}

static void scenario_driver_errors(void)
{
	struct nvp2p_info info;
	struct pmh_reg_mr mr;
	__u64 handle;
	uint8_t *va;

	inject_case("driver_error.probe_pin_enomem", "the_first_pin_(acquire's_probe)_fails_with_ENOMEM",
		    "get_pages 1 -12", PMH_REG_WRITE);
	inject_case("driver_error.pin_eio", "the_second_pin_(get_pages_of_the_invalidating_client)_fails_with_EIO",
		    "get_pages 2 -5", PMH_REG_WRITE);
	inject_case("driver_error.persistent_pin_eio", "the_persistent_pin_fails_with_EIO_(caller_that_cannot_be_invalidated)",
		    "get_pages_persistent 1 -5", PMH_REG_WRITE | PMH_REG_NO_INVALIDATE);
	inject_case("driver_error.map_enomem", "nvidia_p2p_dma_map_pages_fails_with_ENOMEM",
		    "dma_map_pages 1 -12", PMH_REG_WRITE);
	inject_case("driver_error.map_enotsupp", "nvidia_p2p_dma_map_pages_refuses_the_topology_(ENOTSUPP,_what_nvidia.ko_returns)",
		    "dma_map_pages 1 -524", PMH_REG_WRITE);
	inject_case("driver_error.map_enotsupp_nc", "as_above,_caller_that_cannot_be_invalidated",
		    "dma_map_pages 1 -524", PMH_REG_WRITE | PMH_REG_NO_INVALIDATE);

	/* The first of two pages fails to map: drivers up to 580 unmap the pages before a failed one,
	 * go on, and return the last page's status, so the mapping is reported as made
	 * (osapi.c 550:4425-4440), with DMA_MAPPING_ERROR in the failed page's entry. */
	if (begin("driver_error.map_half", "the_first_of_two_pages_fails_to_map:_the_driver_reports_the_mapping_made")) {
		va = alloc_gpu(2 * GPU_PAGE, &handle, &info);
		if (write_text(GPU_DEBUGFS "/dma_map_fail_page", "1"))
			die("dma_map_fail_page", errno);
		if (!reg("reg", va, 2 * GPU_PAGE, PMH_REG_WRITE, &mr))
			dereg("dereg.rc", mr.handle);
		write_text(GPU_DEBUGFS "/dma_map_fail_page", "0");
		free_gpu(NULL, handle);
		end();
	}
	if (begin("driver_error.unmap_fails", "nvidia_p2p_dma_unmap_pages_fails_at_deregistration")) {
		va = alloc_gpu(GPU_PAGE, &handle, &info);
		if (!reg("reg", va, GPU_PAGE, PMH_REG_WRITE, &mr)) {
			inject("dma_unmap_pages 1 -5");
			dereg("dereg.rc", mr.handle);
			inject("clear");
			ob("after_dereg.gpu_live_pins", "%lld", gpu_counter("live_pins"));
		}
		free_gpu(NULL, handle);
		end();
	}
}

/*
 * A GPU in MIG mode on a 535/550 driver: the driver refuses persistent pins (the stand-in's
 * mig_enabled; 550 p2p.c RmP2PGetGpuByAddress) and pins non-persistently as before.
 */
static void scenario_mig(void)
{
	struct pmh_reg_mr mr;
	__u64 handle;
	uint8_t *va;

	if (!begin("mig.persistent_pins_refused", "MIG_mode_on_a_550_driver:_persistent_pins_refused_(ENOTSUPP)"))
		return;
	va = alloc_gpu(GPU_PAGE, &handle, NULL);
	if (write_text(STANDIN_PARAMS "mig_enabled", "1"))
		die("mig_enabled", errno);
	if (!reg("reg", va, GPU_PAGE, PMH_REG_WRITE, &mr))
		dereg("dereg.rc", mr.handle);
	if (!reg("reg_nc", va, GPU_PAGE, PMH_REG_WRITE | PMH_REG_NO_INVALIDATE, &mr))
		dereg("dereg_nc.rc", mr.handle);
	if (write_text(STANDIN_PARAMS "mig_enabled", "0"))
		die("mig_enabled", errno);
	free_gpu(NULL, handle);
	end();
}

/*
 * The driver refuses the unpin at deregistration (nvidia_p2p_put_pages fails), then the memory
 * is freed, so the driver calls the free callback of a pin whose registration is gone.
 */
static void scenario_unpin_fails_then_free(void)
{
	struct pmh_reg_mr mr;
	__u64 handle;
	uint8_t *va;

	if (!begin("driver_error.unpin_fails_then_free",
		   "nvidia_p2p_put_pages_fails_at_deregistration,_then_cudaFree:_the_driver_calls_the_free_callback_of_the_deregistered_pin"))
		return;
	va = alloc_gpu(GPU_PAGE, &handle, NULL);
	if (!reg("reg", va, GPU_PAGE, PMH_REG_WRITE, &mr)) {
		inject("put_pages 1 -5");
		dereg("dereg.rc", mr.handle);
		inject("clear");
		ob("after_dereg.gpu_live_pins", "%lld", gpu_counter("live_pins"));
		ob_refcnt("after_dereg.refcnt");
	}
	free_gpu("free.rc", handle);
	ob("after_free.gpu_live_pins", "%lld", gpu_counter("live_pins"));
	ob("after_free.num_free_callbacks", "%lld", delta("nv_mem.num_free_callbacks"));
	end();
}

/* ---- freeing registered memory ---- */

static void free_while_registered(const char *name, const char *desc, unsigned int flags)
{
	struct nvp2p_info info;
	struct pmh_reg_mr mr;
	long long t0, t1;
	uint8_t buf[256];
	__u64 handle;
	uint8_t *va;

	if (!begin(name, desc))
		return;
	va = alloc_gpu(2 * GPU_PAGE, &handle, &info);
	if (!reg("reg", va + 100, 2 * GPU_PAGE - 200, flags, &mr)) {
		t0 = now_ns();
		free_gpu("free.rc", handle);
		t1 = now_ns();
		query("after_free", mr.handle, info.phys_addr, t0, t1);
		/* peermem-rs's invalidating client lets go of its persistent pin from its work item, a
		 * moment after the callback (docs/differences.md, diff-two-pins): on a busy host that moment was
		 * later than this read once. Give it up to 5 s; what is still pinned then counts. */
		for (int i = 0; i < 500 && !strcmp(target.name, "peermem_rs") &&
				!(flags & PMH_REG_NO_INVALIDATE) && gpu_counter("live_pins") > 0; i++)
			usleep(10000);
		ob("after_free.gpu_live_pins", "%lld", gpu_counter("live_pins"));
		ob("after_free.gpu_live_allocations", "%lld", gpu_counter("live_allocations"));
		ob_refcnt("after_free.refcnt");
		fill(buf, sizeof(buf), 5);
		ob_rc("after_free.rdma_write", pmh_dma(pmh, mr.handle, 0, buf, sizeof(buf), PMH_DMA_TO_MR));
		dereg("dereg.rc", mr.handle);
		ob("after_dereg.gpu_live_allocations", "%lld", gpu_counter("live_allocations"));
	} else {
		free_gpu(NULL, handle);
	}
	end();
}

static void scenario_free_after_dereg(void)
{
	struct pmh_reg_mr mr;
	__u64 handle;
	uint8_t *va;

	if (!begin("free.after_deregistration", "cudaFree_after_the_deregistration:_nothing_left_to_invalidate"))
		return;
	va = alloc_gpu(GPU_PAGE, &handle, NULL);
	if (!reg("reg", va, GPU_PAGE, PMH_REG_WRITE, &mr))
		dereg("dereg.rc", mr.handle);
	free_gpu("free.rc", handle);
	end();
}

struct racer {
	__u64 handle;
	pid_t tid;
	int rc;
};

static void *race_free(void *arg)
{
	struct racer *r = arg;

	__atomic_store_n(&r->tid, (pid_t)syscall(SYS_gettid), __ATOMIC_RELEASE);
	r->rc = gpu_free(gpu, r->handle);
	return NULL;
}

/*
 * cudaFree and deregistration of the same memory at once, made deterministic with the stand-in's
 * delay: the free has unlinked the pin and sleeps (holding the driver's lock, as nvidia.ko holds
 * its locks around free callbacks) when the deregistration starts, so the deregistration's
 * dma_unmap waits for the driver while the free callback runs.
 */
static void scenario_free_races_dereg(void)
{
	struct racer r = { 0 };
	struct pmh_reg_mr mr;
	pthread_t t;
	int waited = 0;
	uint8_t *va;

	if (!begin("free.races_deregistration",
		   "cudaFree_starts,_then_the_deregistration_of_the_same_memory_while_the_driver_holds_its_lock"))
		return;
	va = alloc_gpu(2 * GPU_PAGE, &r.handle, NULL);
	if (reg("reg", va, 2 * GPU_PAGE, PMH_REG_WRITE, &mr)) {
		free_gpu(NULL, r.handle);
		end();
		return;
	}
	if (write_text(GPU_DEBUGFS "/free_callback_delay_ms", "500"))
		die("free_callback_delay_ms", errno);
	if (pthread_create(&t, NULL, race_free, &r))
		die("pthread_create", errno);
	/* Wait until the free sleeps in the driver (uninterruptible sleep) with the pin unlinked. */
	while (waited < 3000) {
		pid_t tid = __atomic_load_n(&r.tid, __ATOMIC_ACQUIRE);

		if (tid && thread_state(tid) == 'D')
			break;
		usleep(2000);
		waited += 2;
	}
	ob("free_was_in_the_driver", "%s", waited < 3000 ? "yes" : "no");
	dereg("dereg.rc", mr.handle);
	pthread_join(t, NULL);
	ob_rc("free.rc", r.rc);
	write_text(GPU_DEBUGFS "/free_callback_delay_ms", "0");
	end();
}

/* A process exits with memory registered and allocated; its files close in the order opened. */
static void scenario_exit(const char *name, const char *desc, int gpu_first)
{
	int status;
	pid_t pid;

	if (!begin(name, desc))
		return;
	pid = fork();
	if (pid < 0)
		die("fork", errno);
	if (pid == 0) {
		int a = gpu_first ? gpu_open() : pmh_open();
		int b = gpu_first ? pmh_open() : gpu_open();
		int g = gpu_first ? a : b, p = gpu_first ? b : a;
		__u64 h;
		uint8_t *v = g >= 0 ? gpu_alloc(g, 3 * GPU_PAGE, &h) : NULL;

		if (!v || p < 0 || pmh_reg(p, v, 3 * GPU_PAGE, PMH_REG_WRITE, NULL) ||
		    pmh_reg(p, v + GPU_PAGE, 100, PMH_REG_WRITE | PMH_REG_NO_INVALIDATE, NULL))
			_exit(1);
		_exit(0);
	}
	waitpid(pid, &status, 0);
	ob("child", "%s", WIFEXITED(status) && !WEXITSTATUS(status) ? "exited" : "failed");
	end();
}

/* ---- the module's lifetime ---- */

static void rmmod_while_registered(const char *name, const char *desc, unsigned int flags,
				   int reload)
{
	struct pmh_reg_mr mr;
	__u64 handle;
	uint8_t *va;

	if (!begin(name, desc)) {
		if (!reload)
			mod_unload_wait(target.name);
		return;
	}
	va = alloc_gpu(GPU_PAGE, &handle, NULL);
	if (!reg("reg", va, GPU_PAGE, flags, &mr)) {
		ob_rc("rmmod", mod_unload(target.name));
		ob("still_loaded", "%d", target_loaded());
		ob_refcnt("refcnt");
		dereg("dereg.rc", mr.handle);
		/* An invalidating registration of peermem-rs lingers, its module reference with it,
		 * until the free calls its pin back. */
		ob_refcnt("after_dereg.refcnt");
	}
	free_gpu(NULL, handle);
	/* The lingering registration's last reference goes in the work item, after the callback. */
	wait_work_item();
	ob_rc("rmmod_after_dereg", mod_unload(target.name));
	ob_peers_dirs("memory_peers");
	ob("host_registered_clients", "%lld", pmh_counter("registered_clients"));
	end();
	if (reload && !target_loaded() && load_target(NULL))
		die("reloading the target", errno);
}

/* ---- the parts ---- */

static void part_switch(void)
{
	if (unload_all())
		die("cleaning up", EBUSY);
	must_load(STANDIN_KO, "");
	scenario_load_without_host();
	load_host("");
	bad_param("load.bad_param.peerdirect_support_2", "peerdirect_support=2",
		  "peerdirect_support=2_(only_0_and_1_exist)");
	bad_param("load.bad_param.peerdirect_support_negative", "peerdirect_support=-1",
		  "peerdirect_support=-1");
	bad_param("load.bad_param.peerdirect_support_word", "peerdirect_support=yes",
		  "peerdirect_support=yes_(not_a_number)");
	bad_param("load.bad_param.persistent_api_support_2", "persistent_api_support=2",
		  "persistent_api_support=2");
	name_taken("load.name_taken.nv_mem", "nv_mem",
		   "another_client_already_registered_as_nv_mem");
	name_taken("load.name_taken.nv_mem_nc", "nv_mem_nc",
		   "another_client_already_registered_as_nv_mem_nc");
	scenario_registration_while_the_load_fails("load.registration_while_the_load_fails",
		"memory_registered_while_the_host_refuses_nv_mem_nc_(the_name_taken)_and_the_load_fails");
	name_taken_by_module("load.name_taken.by_module",
			     "the_other_of_nvidia-peermem_and_peermem-rs_already_loaded");
	scenario_load("load", NULL, "load_with_nvidia-peermem_550's_configuration_on_an_MLNX_OFED_5.x_host");
	open_fds();

	reg_cases("reg.invalidating", write_cases, sizeof(write_cases) / sizeof(write_cases[0]),
		  PMH_REG_WRITE, "ibv_reg_mr_of_GPU_memory");
	reg_cases("reg.persistent", persistent_cases,
		  sizeof(persistent_cases) / sizeof(persistent_cases[0]),
		  PMH_REG_WRITE | PMH_REG_NO_INVALIDATE,
		  "registration_by_a_caller_that_cannot_be_invalidated_(CQ/QP_buffer)");
	scenario_read_only();
	scenario_many_live();

	scenario_host_memory();
	scenario_freed_gpu_memory();
	scenario_beyond_allocation();
	scenario_unmapped();
	scenario_other_process();
	scenario_ranges();

	scenario_bar1();
	scenario_driver_errors();
	scenario_mig();
	scenario_unpin_fails_then_free();

	free_while_registered("free.invalidating", "cudaFree_while_registered_(invalidating_client,_ex_client_on_a_5.x_host)",
			      PMH_REG_WRITE);
	free_while_registered("free.persistent", "cudaFree_while_registered_(persistent_client)",
			      PMH_REG_WRITE | PMH_REG_NO_INVALIDATE);
	scenario_free_after_dereg();
	scenario_free_races_dereg();
	scenario_exit("exit.gpu_file_first", "process_exit_with_registrations:_the_GPU_memory_goes_first", 1);
	scenario_exit("exit.host_file_first", "process_exit_with_registrations:_the_registrations_go_first", 0);

	rmmod_while_registered("rmmod.while_registered", "rmmod_while_a_registration_lives",
			       PMH_REG_WRITE, 1);
	/* The last one leaves the module unloaded, for the legacy configuration. */
	rmmod_while_registered("rmmod.while_registered_persistent",
			       "rmmod_while_a_persistent_registration_lives",
			       PMH_REG_WRITE | PMH_REG_NO_INVALIDATE, 0);

	/* MLNX_OFED 4.9 semantics: the client asks the host to unmap inside the invalidation. */
	scenario_load("legacy.load", "peerdirect_support=1",
		      "peerdirect_support=1_(legacy_client,_MLNX_OFED_4.9_semantics)");
	reg_cases("legacy.reg", write_cases + 7, 1, PMH_REG_WRITE, "ibv_reg_mr_of_GPU_memory");
	free_while_registered("legacy.free.invalidating", "cudaFree_while_registered,_peerdirect_support=1:_the_host_unmaps_inside_the_invalidation",
			      PMH_REG_WRITE);
	scenario_exit("legacy.exit.gpu_file_first", "process_exit,_GPU_memory_first,_peerdirect_support=1", 1);
	close_fds();
	scenario_unload("legacy.unload");

	/* A host that knows nothing of "ex" clients (MLNX_OFED 4.9). */
	if (mod_unload_wait(HOST_MOD))
		die("unloading the host", EBUSY);
	load_host("ex_support=0");
	scenario_load("host_4_9.load", NULL, "an_MLNX_OFED_4.9_host_(no_ex_clients)");
	open_fds();
	free_while_registered("host_4_9.free.invalidating", "cudaFree_while_registered_on_a_4.9_host:_it_unmaps_inside_the_invalidation",
			      PMH_REG_WRITE);
	close_fds();
	scenario_unload("host_4_9.unload");
	unload_all();
}

static void part_split(void)
{
	struct nvp2p_info info;
	struct pmh_reg_mr mr;
	__u64 handle;
	uint8_t *va;

	if (unload_all())
		die("cleaning up", EBUSY);
	/* Only a 580+ driver on a chipset flagged unable to do P2P refuses this topology. */
	must_load(STANDIN_KO, "generation=580 p2p_unsupported_chipset=1");
	load_host("");
	scenario_load("load", NULL, "load_(GPU_and_NIC_on_different_root_ports)");
	open_fds();
	if (begin("topology.refused", "GPU_and_NIC_meet_only_at_the_root_complex:_the_driver_refuses_peer-to-peer_DMA")) {
		va = alloc_gpu(GPU_PAGE, &handle, NULL);
		reg("reg", va, GPU_PAGE, PMH_REG_WRITE, NULL);
		reg("reg_nc", va, GPU_PAGE, PMH_REG_WRITE | PMH_REG_NO_INVALIDATE, NULL);
		free_gpu(NULL, handle);
		end();
	}
	if (begin("topology.override", "the_same_with_the_check_overridden_(NVreg_GrdmaPciTopoCheckOverride):_RDMA_write_and_read")) {
		if (write_text(STANDIN_PARAMS "grdma_pci_topo_check_override", "1"))
			die("grdma_pci_topo_check_override", errno);
		va = alloc_gpu(GPU_PAGE, &handle, &info);
		if (!reg("reg", va + 64, 512, PMH_REG_WRITE, &mr)) {
			query("mr", mr.handle, info.phys_addr, 0, 0);
			round_trip("data", mr.handle, va + 64, 512, 7);
			dereg("dereg.rc", mr.handle);
		}
		free_gpu(NULL, handle);
		write_text(STANDIN_PARAMS "grdma_pci_topo_check_override", "0");
		end();
	}
	close_fds();
	scenario_unload("unload");
	unload_all();
}

int main(int argc, char **argv)
{
	const char *part;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 3) {
		fprintf(stderr, "usage: %s nvidia_peermem|peermem_rs switch|split [--skip S]... [--only S]...\n",
			argv[0]);
		return 2;
	}
	if (!strcmp(argv[1], "nvidia_peermem"))
		target = (struct target){ "nvidia_peermem", "nvidia-peermem.ko", "" };
	else if (!strcmp(argv[1], "peermem_rs"))
		target = (struct target){ "peermem_rs", "peermem_rs.ko", "persistent_api_support=0" };
	else
		return 2;
	part = argv[2];
	for (int i = 3; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--skip") && nskips < 32)
			skips[nskips++] = argv[i + 1];
		else if (!strcmp(argv[i], "--only") && nonlys < 64)
			onlys[nonlys++] = argv[i + 1];
		else
			return 2;
	}
	printf("T %s %s\n", target.name, part);
	if (!strcmp(part, "switch"))
		part_switch();
	else if (!strcmp(part, "split"))
		part_split();
	else
		return 2;
	printf("E %s %s\n", target.name, part);
	return 0;
}
