/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Userspace interface of the NVIDIA P2P stand-in (tests/standins/nvidia_p2p), the test-only module
 * that plays nvidia.ko in the VM. Tests use it as they would use cudaMalloc/cudaFree:
 *
 *   fd = open("/dev/nvidia_p2p_standin", O_RDWR);
 *   ioctl(fd, NVP2P_IOC_ALLOC, &alloc);            // reserve GPU memory (64 KiB granules of BAR)
 *   va = mmap(aligned_hint, alloc.size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd,
 *             alloc.mmap_offset);                  // the "CUDA VA": 64 KiB aligned, VM_IO|VM_PFNMAP
 *   ... register va with the peer-memory host, read and write GPU memory through va ...
 *   ioctl(fd, NVP2P_IOC_FREE, &alloc.handle);      // cudaFree: free callbacks run, in this process
 *
 * NVP2P_IOC_UNREGISTER runs the free callbacks of an allocation's non-persistent pins without
 * freeing it (NVIDIA's NV503C_CTRL_CMD_UNREGISTER_VIDMEM); the memory cannot be pinned again until
 * NVP2P_IOC_REGISTER. Both are the owner's only, like FREE.
 *
 * An allocation belongs to the process that made it (its mm); nvidia_p2p_get_pages() only finds
 * allocations of the calling process, at the address where that process mapped them. Closing the
 * last reference of the file (process exit) frees every allocation made through it, as destroying a
 * CUDA context does.
 *
 * Knobs, counters and fault injection live in debugfs, /sys/kernel/debug/nvidia_p2p_standin/ (see the
 * module's README for the list).
 */
#ifndef _UAPI_NVIDIA_P2P_STANDIN_H
#define _UAPI_NVIDIA_P2P_STANDIN_H

#include <linux/ioctl.h>
#include <linux/types.h>

#define NVP2P_STANDIN_DEVICE "/dev/nvidia_p2p_standin"

/* The GPU page size: allocations, virtual addresses and pinned ranges come in these. */
#define NVP2P_GPU_PAGE_SIZE (64 * 1024)

struct nvp2p_alloc {
	__u64 size;		/* in: bytes, rounded up to NVP2P_GPU_PAGE_SIZE */
	__u64 handle;		/* out: names the allocation in FREE and INFO */
	__u64 mmap_offset;	/* out: pass to mmap() to map the allocation */
	__u64 bar_offset;	/* out: where the allocation lives in the GPU BAR */
};

struct nvp2p_info {
	__u64 handle;		/* in */
	__u64 va;		/* out: where the owner mapped it (0: not mapped yet) */
	__u64 size;		/* out */
	__u64 bar_offset;	/* out */
	__u64 phys_addr;	/* out: bus address of the first byte (BAR base + bar_offset) */
	__u32 live_pins;	/* out: pins (persistent or not) RM tracks on this allocation */
	__u32 freed;		/* out: 1 once freed while persistent pins keep the memory alive */
};

#define NVP2P_IOC_MAGIC 'N'
#define NVP2P_IOC_ALLOC _IOWR(NVP2P_IOC_MAGIC, 1, struct nvp2p_alloc)
#define NVP2P_IOC_FREE _IOW(NVP2P_IOC_MAGIC, 2, __u64)
#define NVP2P_IOC_INFO _IOWR(NVP2P_IOC_MAGIC, 3, struct nvp2p_info)
#define NVP2P_IOC_UNREGISTER _IOW(NVP2P_IOC_MAGIC, 4, __u64)
#define NVP2P_IOC_REGISTER _IOW(NVP2P_IOC_MAGIC, 5, __u64)

#endif /* _UAPI_NVIDIA_P2P_STANDIN_H */
