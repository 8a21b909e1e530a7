/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Userspace helpers for the peer-memory host stand-in (tests/standins/peer_mem_host): its ioctls
 * used the way ibv_reg_mr / ibv_dereg_mr and RDMA reads and writes are, its counters, the
 * /sys/kernel/mm/memory_peers statistics, and loading and unloading modules from $PEERMEM_MODULES.
 * Header-only, libc only.
 *
 *   int fd = pmh_open();
 *   struct pmh_reg_mr mr;
 *   pmh_reg(fd, addr, len, PMH_REG_WRITE, &mr);          // 0 or -errno
 *   pmh_dma(fd, mr.handle, 0, buf, n, PMH_DMA_TO_MR);     // RDMA write through the NIC
 *   pmh_dereg(fd, mr.handle);
 *
 * Include path: -I tests/standins/include (for uapi/peer_mem_host.h).
 */
#ifndef PEERMEM_SELFTESTS_PMH_H
#define PEERMEM_SELFTESTS_PMH_H

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "files.h"
#include "uapi/peer_mem_host.h"

#define PMH_DEBUGFS "/sys/kernel/debug/peer_mem_host"
#define MEMORY_PEERS "/sys/kernel/mm/memory_peers"

static inline int pmh_open(void)
{
	int fd = open(PMH_DEVICE, O_RDWR | O_CLOEXEC);

	return fd < 0 ? -errno : fd;
}

/* ibv_reg_mr. Returns 0 or -errno; @out (may be NULL) gets the registration's details. */
static inline int pmh_reg(int fd, const void *addr, size_t len, unsigned int flags,
			  struct pmh_reg_mr *out)
{
	struct pmh_reg_mr reg = {
		.addr = (uintptr_t)addr, .length = len, .flags = flags,
	};

	int ret = ioctl(fd, PMH_IOC_REG_MR, &reg) ? -errno : 0;

	if (out)
		*out = reg;
	return ret;
}

static inline int pmh_dereg(int fd, __u64 handle)
{
	return ioctl(fd, PMH_IOC_DEREG_MR, &handle) ? -errno : 0;
}

/* ibv_dereg_mr with PMH_DEREG_* flags (PMH_DEREG_KWORKER: from the host's kworker). */
static inline int pmh_dereg_ex(int fd, __u64 handle, unsigned int flags)
{
	struct pmh_dereg_mr d = { .handle = handle, .flags = flags };

	return ioctl(fd, PMH_IOC_DEREG_MR_EX, &d) ? -errno : 0;
}

/* The NIC goes away: every MR of every open file is deregistered. Returns how many, or -errno. */
static inline int pmh_remove_device(int fd)
{
	int n = ioctl(fd, PMH_IOC_REMOVE_DEVICE);

	return n < 0 ? -errno : n;
}

/* Returns 0 or -errno; up to @max_sges SG entries go to @sges (may be NULL). */
static inline int pmh_query(int fd, __u64 handle, struct pmh_query_mr *q, struct pmh_sge *sges,
			    unsigned int max_sges)
{
	memset(q, 0, sizeof(*q));
	q->handle = handle;
	q->sges = (uintptr_t)sges;
	q->max_sges = sges ? max_sges : 0;
	return ioctl(fd, PMH_IOC_QUERY_MR, q) ? -errno : 0;
}

/* The NIC moves @len bytes between @buf and the MR at @offset. Returns 0 or -errno. */
static inline int pmh_dma(int fd, __u64 handle, __u64 offset, void *buf, __u64 len,
			  unsigned int direction)
{
	struct pmh_dma d = {
		.handle = handle, .offset = offset, .length = len, .buf = (uintptr_t)buf,
		.direction = direction,
	};

	return ioctl(fd, PMH_IOC_DMA, &d) ? -errno : 0;
}

/* The scheduler state of thread @tid of this process ('R', 'S', 'D', ...), or 0. */
static inline char thread_state(pid_t tid)
{
	char path[64], buf[256], *p;

	snprintf(path, sizeof(path), "/proc/self/task/%d/stat", tid);
	if (read_text(path, buf, sizeof(buf)))
		return 0;
	p = strrchr(buf, ')');
	return p && p[1] == ' ' ? p[2] : 0;
}

/* A host-wide counter in /sys/kernel/debug/peer_mem_host/. */
static inline long long pmh_counter(const char *name)
{
	char path[256];

	snprintf(path, sizeof(path), PMH_DEBUGFS "/%s", name);
	return read_number(path);
}

/* A statistic in /sys/kernel/mm/memory_peers/<client>/. */
static inline long long peer_stat(const char *client, const char *stat)
{
	char path[256];

	snprintf(path, sizeof(path), MEMORY_PEERS "/%s/%s", client, stat);
	return read_number(path);
}

static inline int path_exists(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0;
}

/* Where the modules are: $PEERMEM_MODULES, or /payload/modules. */
static inline const char *modules_dir(void)
{
	const char *d = getenv("PEERMEM_MODULES");

	return d && *d ? d : "/payload/modules";
}

#ifndef MODULE_INIT_COMPRESSED_FILE
#define MODULE_INIT_COMPRESSED_FILE 4
#endif

/*
 * insmod $PEERMEM_MODULES/<file> with @params. Returns 0 or -errno (-EEXIST if loaded). A compressed
 * module (xz, zstd, gzip: DKMS compresses what it installs for a kernel with
 * CONFIG_MODULE_COMPRESS_*, as in the stock-kernel boots) is handed to the kernel to decompress, as
 * kmod does.
 */
static inline int mod_load(const char *file, const char *params)
{
	static const unsigned char xz[] = { 0xfd, '7', 'z', 'X', 'Z', 0 };
	static const unsigned char zstd[] = { 0x28, 0xb5, 0x2f, 0xfd };
	static const unsigned char gz[] = { 0x1f, 0x8b };
	unsigned char magic[6] = { 0 };
	char path[512];
	int fd, ret, flags = 0;

	snprintf(path, sizeof(path), "%s/%s", modules_dir(), file);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (pread(fd, magic, sizeof(magic), 0) == (ssize_t)sizeof(magic) &&
	    (!memcmp(magic, xz, sizeof(xz)) || !memcmp(magic, zstd, sizeof(zstd)) || !memcmp(magic, gz, sizeof(gz))))
		flags = MODULE_INIT_COMPRESSED_FILE;
	ret = syscall(SYS_finit_module, fd, params ? params : "", flags) ? -errno : 0;
	close(fd);
	return ret;
}

/* rmmod without waiting. Returns 0, -ENOENT (not loaded) or -errno (e.g. -EAGAIN: in use). */
static inline int mod_unload(const char *name)
{
	return syscall(SYS_delete_module, name, O_NONBLOCK) ? -errno : 0;
}

static inline int mod_loaded(const char *name)
{
	char path[256];

	snprintf(path, sizeof(path), "/sys/module/%s/initstate", name);
	return path_exists(path);
}

/* Unload if loaded, retrying while references drain (closing files, exiting processes). */
static inline int mod_unload_wait(const char *name)
{
	int i, ret = 0;

	for (i = 0; i < 100; i++) {
		ret = mod_unload(name);
		if (ret == 0 || ret == -ENOENT)
			return 0;
		usleep(50 * 1000);
	}
	return ret;
}

#endif /* PEERMEM_SELFTESTS_PMH_H */
