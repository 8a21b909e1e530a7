/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Internals of the NVIDIA P2P stand-in, shared by its source files. See README.md for what the
 * module is and how it differs from nvidia.ko.
 */
#ifndef NVP2P_STANDIN_H
#define NVP2P_STANDIN_H

#include <linux/atomic.h>
#include <linux/list.h>
#include <linux/mutex.h>
#include <linux/pci.h>
#include <linux/spinlock.h>
#include <linux/types.h>

#include "nv-p2p.h"

#define GPU_PAGE_SIZE		(64 * 1024)	/* NVIDIA_P2P_PAGE_SIZE_64KB */
#define PAGE_TABLE_VERSION_1_2	0x00010002	/* nv-p2p.h up to driver 575 */
#define PAGE_TABLE_VERSION_2_0	0x00020000	/* driver 580+: a u32 flags appended */

/* The 580+ layout: the 1.2 struct, then flags. Allocated as a whole when version 2.0 is chosen. */
struct page_table_v2 {
	struct nvidia_p2p_page_table base;
	u32 flags;
};

/* The "GPU": an ivshmem-plain device whose BAR2 stands for the GPU's BAR1. */
struct standin_gpu {
	struct pci_dev *pdev;
	phys_addr_t bar_phys;
	resource_size_t bar_size;
	unsigned long granules;		/* bar_size / GPU_PAGE_SIZE */
	unsigned long *used;		/* one bit per granule, under standin.alloc_lock */
	u8 uuid[NVIDIA_P2P_GPU_UUID_LEN];
};

/*
 * A cudaMalloc. Reference counted (refs, under standin.alloc_lock): one for "not freed yet", one
 * per pin, one per VMA mapping it. The BAR range goes back to the allocator with the last one, so
 * neither a persistent pin nor a live mapping can see the range reused.
 */
struct standin_alloc {
	struct list_head node;		/* standin.allocs */
	u64 handle;
	u64 bar_offset;
	u64 size;
	u64 va;				/* where the owner mapped it; 0: not mapped */
	struct mm_struct *mm;		/* the owning process (mmgrab'd, compared only) */
	struct file *file;		/* the file it was allocated through (compared only) */
	pid_t tgid;
	unsigned int refs;
	unsigned int pins;		/* under standin.lock */
	bool freed;
};

/* One nvidia_p2p_get_pages{,_persistent}: the page table handed out and its DMA mappings. */
struct standin_pin {
	struct list_head node;		/* standin.pins, under standin.lock */
	struct standin_alloc *alloc;
	u64 va;
	u64 len;
	u64 phys;			/* bus address of the first page */
	bool persistent;
	void (*free_callback)(void *data);
	void *data;
	struct nvidia_p2p_page_table *pt;	/* what the client sees; 1.2 or 2.0 layout */
	struct nvidia_p2p_page **page_ptrs;
	struct nvidia_p2p_page *pages;
	u8 *uuid;
	u32 entries;			/* our own copy: never trust what a client may have scribbled */
	struct list_head maps;		/* struct standin_map */
};

/* One nvidia_p2p_dma_map_pages. */
struct standin_map {
	struct list_head node;		/* pin->maps */
	struct nvidia_p2p_dma_mapping *m;
	u64 *dma;
	struct pci_dev *peer;		/* referenced */
	u32 entries;
};

/* Functions that fault injection can make fail. */
enum standin_fn {
	FN_ALLOC,
	FN_GET_PAGES,
	FN_GET_PAGES_PERSISTENT,
	FN_PUT_PAGES,
	FN_PUT_PAGES_PERSISTENT,
	FN_DMA_MAP_PAGES,
	FN_DMA_UNMAP_PAGES,
	FN_COUNT
};

/* Counters shown in debugfs; the live_* ones and bar1_pinned_bytes must return to zero. */
#define STANDIN_COUNTERS(X)		\
	X(live_allocations)		\
	X(live_pins)			\
	X(live_page_tables)		\
	X(live_dma_mappings)		\
	X(bar1_pinned_bytes)		\
	X(allocated_bytes)		\
	X(total_allocations)		\
	X(total_pins)			\
	X(total_persistent_pins)	\
	X(total_dma_mappings)		\
	X(free_callbacks)		\
	X(teardown_page_tables)		\
	X(teardown_dma_mappings)	\
	X(stale_put_pages)		\
	X(stale_dma_unmaps)		\
	X(bad_put_pages)		\
	X(peer_mismatch_warnings)	\
	X(topology_refusals)		\
	X(bar1_refusals)		\
	X(lookup_failures)		\
	X(dma_map_errors)		\
	X(callback_reentries)		\
	X(injected_failures)		\
	X(leaked_at_unload)

struct standin_counters {
#define X(name) atomic64_t name;
	STANDIN_COUNTERS(X)
#undef X
};

struct standin_state {
	/*
	 * "The driver's lock": serialises the P2P API and is held across free callbacks, as
	 * nvidia.ko holds its own locks there, so lockdep sees the nesting a client creates.
	 */
	struct mutex lock;
	struct list_head pins;
	/* The task running a free callback (under lock): its calls back into the API get -EBUSY. */
	struct task_struct *in_callback;

	spinlock_t alloc_lock;		/* allocs, alloc->refs/va/freed, gpu->used */
	struct list_head allocs;
	u64 next_handle;

	struct standin_gpu *gpu;	/* NULL until the PCI device is bound */
	struct standin_counters c;
	unsigned int free_callback_delay_ms;
};

extern struct standin_state standin;
extern unsigned int page_table_version;
extern unsigned int bar1_reserve_mib;
extern bool topology_check;

#define count_inc(name)		atomic64_inc(&standin.c.name)
#define count_dec(name)		atomic64_dec(&standin.c.name)
#define count_add(name, v)	atomic64_add((v), &standin.c.name)
#define count_sub(name, v)	atomic64_sub((v), &standin.c.name)

/* standin_main.c */
struct standin_alloc *standin_get_alloc(struct mm_struct *mm, u64 va, u64 len);
void standin_alloc_put(struct standin_alloc *a);

/* standin_p2p.c */
void standin_teardown_alloc_pins(struct standin_alloc *a);
void standin_free_leftover_pins(void);

/* standin_debugfs.c */
int standin_inject(enum standin_fn fn);
void standin_debugfs_init(void);
void standin_debugfs_exit(void);

#endif /* NVP2P_STANDIN_H */
