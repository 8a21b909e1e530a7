/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Shared by the peer_mem_host selftests: the minimal test client's knobs and counters
 * (/sys/kernel/debug/peer_test_client/) and setting up the modules a test needs.
 */
#ifndef PMH_TEST_H
#define PMH_TEST_H

#include <limits.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>

#include "gpumem.h"
#include "pmh.h"

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

#endif /* PMH_TEST_H */
