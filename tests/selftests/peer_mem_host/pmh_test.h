/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Shared by the peer_mem_host selftests: the minimal test client's knobs and counters
 * (/sys/kernel/debug/peer_test_client/) and setting up the modules a test needs.
 */
#ifndef PMH_TEST_H
#define PMH_TEST_H

#include <limits.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>

#include "gpumem.h"
#include "pmh.h"
#include "race.h"

#define TC_DEBUGFS	"/sys/kernel/debug/peer_test_client"
#define HOST_KO		"peer_mem_host.ko"
#define HOST_MOD	"peer_mem_host"
#define CLIENT_KO	"peer_test_client.ko"
#define CLIENT_MOD	"peer_test_client"
#define STANDIN_KO	"nvidia_p2p_standin.ko"
#define STANDIN_MOD	"nvidia_p2p_standin"
#define NVPEERMEM_KO	"nvidia-peermem.ko"
#define NVPEERMEM_MOD	"nvidia_peermem"

#define GPU_PAGE	NVP2P_GPU_PAGE_SIZE
#define NO_INVALIDATION_ID 0xffffffffULL

/* acquire_mode values of the test client */
#define ACQ_PROBE	0
#define ACQ_ALWAYS	1
#define ACQ_NEVER	2
#define ACQ_NEGATIVE	3

static inline long long tc_counter(int client, const char *name)
{
	char path[256];

	snprintf(path, sizeof(path), TC_DEBUGFS "/c%d/%s", client, name);
	return read_number(path);
}

static inline int tc_set(int client, const char *knob, long long value)
{
	char path[256], text[32];

	snprintf(path, sizeof(path), TC_DEBUGFS "/c%d/%s", client, knob);
	snprintf(text, sizeof(text), "%lld", value);
	return write_text(path, text);
}

static inline int tc_log_clear(void)
{
	return write_text(TC_DEBUGFS "/log", "0");
}

/* The client's callback log into @buf (NUL-terminated). Returns 0 or -errno. */
static inline int tc_log_read(char *buf, size_t size)
{
	size_t off = 0;
	ssize_t n;
	int fd = open(TC_DEBUGFS "/log", O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	while (off < size - 1 && (n = read(fd, buf + off, size - 1 - off)) > 0)
		off += n;
	close(fd);
	buf[off] = '\0';
	return 0;
}

/* How many lines of the client log contain @what. */
static inline int tc_log_count(const char *what)
{
	static char buf[64 * 1024];
	const char *p;
	int n = 0;

	if (tc_log_read(buf, sizeof(buf)))
		return -1;
	for (p = buf; (p = strstr(p, what)); p += strlen(what))
		n++;
	return n;
}

/* The client's gate (c<i>/gate): hold the next call of @cb ("get_pages", ..., "release"). */
static inline int tc_gate(int client, const char *cb)
{
	char path[256];

	snprintf(path, sizeof(path), TC_DEBUGFS "/c%d/gate", client);
	return write_text(path, cb);
}

static inline int tc_gate_open(int client)
{
	return tc_gate(client, "open");
}

/* Wait until a call is held at the client's gate. Returns its pid, or -1 after @timeout_ms. */
static inline int tc_gate_wait_held(int client, int timeout_ms)
{
	long long end = race_now_ms() + timeout_ms;
	char path[256], text[64], cb[32];
	int pid;

	snprintf(path, sizeof(path), TC_DEBUGFS "/c%d/gate", client);
	do {
		if (!read_text(path, text, sizeof(text)) &&
		    sscanf(text, "held %31s %d", cb, &pid) == 2)
			return pid;
		usleep(10 * 1000);
	} while (race_now_ms() < end);
	return -1;
}

/* The test client's log lines containing @what: the pid= of the first, or -1. */
static inline int tc_log_pid(const char *what)
{
	static char buf[64 * 1024];
	const char *p, *eol, *pid;

	if (tc_log_read(buf, sizeof(buf)))
		return -1;
	p = strstr(buf, what);
	if (!p)
		return -1;
	eol = strchr(p, '\n');
	pid = strstr(p, " pid=");
	if (!pid || (eol && pid > eol))
		return -1;
	return atoi(pid + 5);
}

/* How many kernel log records (all of them, from boot) contain @what; -errno on error. */
static inline int kmsg_count(const char *what)
{
	char rec[2048];
	ssize_t n;
	int fd, found = 0;

	fd = open("/dev/kmsg", O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	for (;;) {
		n = read(fd, rec, sizeof(rec) - 1);
		if (n < 0 && errno == EPIPE)
			continue;	/* overwritten records: go on with the next */
		if (n <= 0)
			break;
		rec[n] = '\0';
		if (strstr(rec, what))
			found++;
	}
	close(fd);
	return found;
}

/* Is @pid a kernel thread of the host's workqueue (a kworker)? */
static inline int pid_is_kworker(int pid)
{
	char path[64], comm[64];

	snprintf(path, sizeof(path), "/proc/%d/comm", pid);
	return !read_text(path, comm, sizeof(comm)) && !strncmp(comm, "kworker/", 8);
}

/* Is the module file there? Tests that need it skip loudly without it. */
static inline int module_available(const char *file)
{
	char path[512];

	snprintf(path, sizeof(path), "%s/%s", modules_dir(), file);
	return path_exists(path);
}

/* Unload every peer-memory client and the host (the NVIDIA stand-in stays). Returns 0 or -errno. */
static inline int env_unload(void)
{
	int ret;

	/* A test that failed half-way may have left a gate armed. */
	if (mod_loaded(HOST_MOD))
		race_clear(HOST_MOD);

	ret = mod_unload_wait(CLIENT_MOD);
	if (!ret)
		ret = mod_unload_wait(NVPEERMEM_MOD);
	if (!ret)
		ret = mod_unload_wait(HOST_MOD);
	return ret;
}

/*
 * A fresh host with @host_params and, unless @client_params is NULL, the test client with them
 * (loaded after the NVIDIA stand-in). Returns 0 or a negative errno; @why says which step failed.
 */
static inline int env_load(const char *host_params, const char *client_params, const char **why)
{
	char params[256];
	int ret;

	*why = "unloading what was loaded";
	ret = env_unload();
	if (ret)
		return ret;
	if (client_params && !mod_loaded(STANDIN_MOD)) {
		*why = "loading " STANDIN_KO;
		ret = mod_load(STANDIN_KO, "");
		if (ret && ret != -EEXIST)
			return ret;
	}
	/*
	 * These tests read the host's memory_peers statistics, which only the host of kernels before
	 * 6.6 has (sysfs=1); the stand-in's default is the host of current kernels. A test that asks
	 * for sysfs=0 gets it.
	 */
	snprintf(params, sizeof(params), "%s%s", strstr(host_params, "sysfs=") ? "" : "sysfs=1 ",
		 host_params);
	*why = "loading " HOST_KO;
	ret = mod_load(HOST_KO, params);
	if (ret)
		return ret;
	if (client_params) {
		*why = "loading " CLIENT_KO;
		ret = mod_load(CLIENT_KO, client_params);
		if (ret)
			return ret;
		tc_log_clear();
	}
	*why = "";
	return 0;
}

/* A byte pattern that differs per position and per seed. */
static inline void fill_pattern(unsigned char *p, size_t n, unsigned int seed)
{
	size_t i;

	for (i = 0; i < n; i++)
		p[i] = (unsigned char)((i * 131 + seed * 7 + (i >> 8)) ^ (seed >> 3));
}

static inline unsigned long long now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

/* Does the machine translate DMA (an IOMMU is present and in use)? */
static inline int iommu_present(void)
{
	return path_exists("/sys/class/iommu") && system("ls /sys/class/iommu | grep -q .") == 0;
}

/*
 * Operations that block in the kernel while a test holds a gate run in threads: each records its
 * result, the thread's id (as the kernel's task pid) and when it finished.
 */
struct op_thread {
	pthread_t th;
	int pmh;			/* /dev/peer_mem_host (gpu_free: the stand-in's fd) */
	int client;			/* test client index (invalidate) */
	const void *addr;		/* register */
	size_t len;
	unsigned int flags;		/* PMH_REG_* or PMH_DEREG_* */
	__u64 value;			/* handle (dereg, query) or core_context (invalidate) */
	struct pmh_reg_mr reg;		/* out: register */
	struct pmh_query_mr q;		/* out: query */
	int tid;			/* out */
	int ret;			/* out */
	int done;			/* out: set (atomically) when the operation returned */
	unsigned long long done_ns;	/* out */
};

static inline void op_finish(struct op_thread *t, int ret)
{
	t->ret = ret;
	t->done_ns = now_ns();
	__atomic_store_n(&t->done, 1, __ATOMIC_SEQ_CST);
}

static inline int op_done(struct op_thread *t)
{
	return __atomic_load_n(&t->done, __ATOMIC_SEQ_CST);
}

static inline void *op_reg_fn(void *arg)
{
	struct op_thread *t = arg;

	t->tid = gettid();
	op_finish(t, pmh_reg(t->pmh, t->addr, t->len, t->flags, &t->reg));
	return NULL;
}

static inline void *op_dereg_fn(void *arg)
{
	struct op_thread *t = arg;

	t->tid = gettid();
	op_finish(t, pmh_dereg_ex(t->pmh, t->value, t->flags));
	return NULL;
}

static inline void *op_query_fn(void *arg)
{
	struct op_thread *t = arg;

	t->tid = gettid();
	op_finish(t, pmh_query(t->pmh, t->value, &t->q, NULL, 0));
	return NULL;
}

/* The client calls the host's invalidate with core_context t->value, as its free callback would. */
static inline void *op_invalidate_fn(void *arg)
{
	struct op_thread *t = arg;
	char path[256], text[32];

	t->tid = gettid();
	snprintf(path, sizeof(path), TC_DEBUGFS "/c%d/invalidate", t->client);
	snprintf(text, sizeof(text), "%llu", (unsigned long long)t->value);
	op_finish(t, write_text(path, text));
	return NULL;
}

/* cudaFree of allocation t->value through the NVIDIA stand-in's fd t->pmh. */
static inline void *op_gpu_free_fn(void *arg)
{
	struct op_thread *t = arg;

	t->tid = gettid();
	op_finish(t, gpu_free(t->pmh, t->value));
	return NULL;
}

static inline void *op_remove_device_fn(void *arg)
{
	struct op_thread *t = arg;

	t->tid = gettid();
	op_finish(t, pmh_remove_device(t->pmh));
	return NULL;
}

static inline int op_start(struct op_thread *t, void *(*fn)(void *))
{
	t->done = 0;
	t->done_ns = 0;
	return pthread_create(&t->th, NULL, fn, t);
}

static inline int op_join(struct op_thread *t)
{
	return pthread_join(t->th, NULL);
}

/* Is the operation still blocked @ms milliseconds from now? */
static inline int op_still_blocked(struct op_thread *t, int ms)
{
	usleep(ms * 1000);
	return !op_done(t);
}

#endif /* PMH_TEST_H */
