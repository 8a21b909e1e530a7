/* SPDX-License-Identifier: GPL-2.0 */
/*
 * "GPU memory" for userspace tests: the NVIDIA P2P stand-in (tests/standins/nvidia_p2p) used the
 * way CUDA applications use cudaMalloc/cudaFree. Header-only, no dependencies beyond libc.
 *
 *   int fd = gpu_open();                       // -errno on failure (module not loaded: -ENOENT)
 *   __u64 handle;
 *   char *p = gpu_alloc(fd, 1 << 20, &handle);  // 64 KiB-aligned "CUDA VA", or NULL with errno set
 *   p[0] = 1;                                  // reads and writes go to the GPU BAR
 *   gpu_free(fd, handle);                      // cudaFree: free callbacks run; also unmaps the VA
 *   close(fd);                                 // process exit does the same for what is left
 *
 * The stand-in's debugfs counters (/sys/kernel/debug/nvidia_p2p_standin/<name>) are read with
 * gpu_counter(); gpu_leaks() tells whether any live object (pin, page table, DMA mapping,
 * allocation, pinned BAR1 byte) is left, which every test should check at its end.
 *
 * Include path: -I tests/standins/include (for uapi/nvidia_p2p_standin.h).
 */
#ifndef PEERMEM_SELFTESTS_GPUMEM_H
#define PEERMEM_SELFTESTS_GPUMEM_H

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <signal.h>
#include <unistd.h>

#include "files.h"
#include "uapi/nvidia_p2p_standin.h"

#define GPU_DEBUGFS "/sys/kernel/debug/nvidia_p2p_standin"

/* The counters of live objects; all of them must be back to zero when a test ends. */
static const char *const gpu_live_counters[] = {
	"live_pins", "live_page_tables", "live_dma_mappings", "live_allocations",
	"bar1_pinned_bytes",
};

/* Open the stand-in's device. Returns the fd, or -errno. */
static inline int gpu_open(void)
{
	int fd = open(NVP2P_STANDIN_DEVICE, O_RDWR | O_CLOEXEC);

	return fd < 0 ? -errno : fd;
}

/*
 * Allocate @size bytes (rounded up to 64 KiB) of GPU memory and map them at a 64 KiB-aligned
 * address, which becomes the allocation's "CUDA VA" (nvidia_p2p_get_pages looks it up there).
 * mmap only promises page alignment, so reserve size + 64 KiB of PROT_NONE address space, map the
 * allocation MAP_FIXED over its aligned part and give back the rest.
 * Returns the VA, or NULL with errno set (the allocation is freed again on a mapping failure).
 */
static inline void *gpu_alloc(int fd, size_t size, __u64 *handle)
{
	struct nvp2p_alloc req = { .size = size };
	size_t len, span;
	uintptr_t base, va;
	void *res, *map;
	int err;

	if (ioctl(fd, NVP2P_IOC_ALLOC, &req))
		return NULL;
	len = req.size;
	span = len + NVP2P_GPU_PAGE_SIZE;
	res = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (res == MAP_FAILED)
		goto err_free;
	base = (uintptr_t)res;
	va = (base + NVP2P_GPU_PAGE_SIZE - 1) & ~((uintptr_t)NVP2P_GPU_PAGE_SIZE - 1);
	map = mmap((void *)va, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd,
		   req.mmap_offset);
	if (map == MAP_FAILED) {
		err = errno;
		munmap(res, span);
		errno = err;
		goto err_free;
	}
	if (va > base)
		munmap(res, va - base);
	if (base + span > va + len)
		munmap((void *)(va + len), base + span - (va + len));
	if (handle)
		*handle = req.handle;
	return map;

err_free:
	err = errno;
	ioctl(fd, NVP2P_IOC_FREE, &req.handle);
	errno = err;
	return NULL;
}

/* NVP2P_IOC_INFO. Returns 0 or -errno. */
static inline int gpu_info(int fd, __u64 handle, struct nvp2p_info *info)
{
	memset(info, 0, sizeof(*info));
	info->handle = handle;
	return ioctl(fd, NVP2P_IOC_INFO, info) ? -errno : 0;
}

/*
 * cudaFree: NVP2P_IOC_FREE (free callbacks of non-persistent pins run before it returns), then
 * unmap the VA. Returns 0 or -errno of the first step that failed.
 */
static inline int gpu_free(int fd, __u64 handle)
{
	struct nvp2p_info info;
	int ret = gpu_info(fd, handle, &info);

	if (ret)
		return ret;
	if (ioctl(fd, NVP2P_IOC_FREE, &handle))
		return -errno;
	if (info.va && munmap((void *)(uintptr_t)info.va, info.size))
		return -errno;
	return 0;
}

/* A debugfs counter of the stand-in; -1 if it cannot be read (module not loaded, no debugfs). */
/*
 * Allocates @size bytes of GPU memory in a child process, for tests of "memory of another process".
 * Returns the child's pid and its VA in *@child_va (0 when the child could not allocate), or
 * -errno. The child keeps the memory until gpu_child_end() kills it. It reports through a pipe
 * and then sleeps: reading the pipe itself could take back its own bytes before the parent does.
 */
static inline pid_t gpu_alloc_in_child(size_t size, uintptr_t *child_va)
{
	int pipefd[2];
	pid_t pid;

	*child_va = 0;
	if (pipe(pipefd))
		return -errno;
	pid = fork();
	if (pid < 0) {
		pid = -errno;
		close(pipefd[0]);
		close(pipefd[1]);
		return pid;
	}
	if (pid == 0) {
		int fd = gpu_open();
		__u64 h;
		void *p = fd >= 0 ? gpu_alloc(fd, size, &h) : NULL;
		uintptr_t v = (uintptr_t)p;

		if (write(pipefd[1], &v, sizeof(v)) != sizeof(v))
			_exit(1);
		for (;;)
			pause();
	}
	close(pipefd[1]);
	if (read(pipefd[0], child_va, sizeof(*child_va)) != sizeof(*child_va))
		*child_va = 0;
	close(pipefd[0]);
	return pid;
}

/* Ends the child of gpu_alloc_in_child(): its GPU memory goes with it. */
static inline void gpu_child_end(pid_t pid)
{
	int status;

	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
}

/* A counter of the NVIDIA stand-in; LLONG_MIN when it cannot be read. */
static inline long long gpu_counter(const char *name)
{
	char path[256];

	snprintf(path, sizeof(path), GPU_DEBUGFS "/%s", name);
	return read_number(path);
}

/*
 * Are objects of the stand-in still alive? Returns 0 when every live counter is zero; otherwise
 * the number of non-zero counters, described in @why (if non-NULL) as "name=value ...".
 */
static inline int gpu_leaks(char *why, size_t why_len)
{
	size_t i, off = 0;
	int bad = 0;

	if (why && why_len)
		why[0] = '\0';
	for (i = 0; i < sizeof(gpu_live_counters) / sizeof(gpu_live_counters[0]); i++) {
		long long v = gpu_counter(gpu_live_counters[i]);

		if (v == 0)
			continue;
		bad++;
		if (why && off < why_len)
			off += snprintf(why + off, why_len - off, "%s%s=%lld", off ? " " : "",
					gpu_live_counters[i], v);
	}
	return bad;
}

#endif /* PEERMEM_SELFTESTS_GPUMEM_H */
