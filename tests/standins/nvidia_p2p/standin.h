/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Internals of the NVIDIA P2P stand-in, shared by its source files. See README.md for what the
 * module is, which NVIDIA source each behaviour follows, and where it still differs.
 *
 * The module has the two layers nvidia.ko has:
 *   - "RM" (standin_rm.c): the RM API lock, the third-party P2P tracking records (one per pin,
 *     keyed by the page-table pointer), BAR1 extents, the lookup by calling process, and the
 *     teardown that calls free callbacks when memory goes away;
 *   - "nv-p2p" (standin_p2p.c): the exported nvidia_p2p_* functions, the pin allocation with its
 *     embedded page table and DMA-mapping list, and the DMA mappings.
 * standin_main.c is the device (ALLOC/FREE/... ioctls, mmap), standin_race.c the race points,
 * standin_debugfs.c the counters and fault injection.
 */
#ifndef NVP2P_STANDIN_H
#define NVP2P_STANDIN_H

#include <linux/atomic.h>
#include <linux/list.h>
#include <linux/pci.h>
#include <linux/rwsem.h>
#include <linux/semaphore.h>
#include <linux/spinlock.h>
#include <linux/types.h>

#include "nv-p2p.h"

#define GPU_PAGE_SIZE		(64 * 1024)	/* NVIDIA_P2P_PAGE_SIZE_64KB */
#define PAGE_TABLE_VERSION_1_2	0x00010002	/* nv-p2p.h up to driver 575 */
#define PAGE_TABLE_VERSION_2_0	0x00020000	/* driver 580+: a u32 flags appended */
/* nv-p2p.h 570+; the 550 header we build against does not have it. */
#define STANDIN_FLAGS_FORCE_BAR1_MAPPING	0x1

/* The 580+ layout: the 1.2 struct, then flags. Every pin embeds this; 1.2 tables ignore flags. */
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

/* Which third-party P2P object a pin lives in (RM: one per CUDA context, plus an internal one). */
enum rm_object {
	RM_OBJ_PROCESS,		/* the owning process's object: non-persistent pins */
	RM_OBJ_INTERNAL,	/* RM's internal object: every persistent pin */
	RM_OBJ_COUNT
};

/*
 * One registered piece of video memory in one object (RM's CLI_THIRD_PARTY_P2P_VIDMEM_INFO): the
 * pins' tracking records and the reference-counted BAR1 extents they share. Under the API lock.
 */
struct rm_vidmem {
	struct list_head records;	/* struct rm_record, oldest first */
	struct list_head extents;	/* struct rm_extent, sorted by offset, disjoint */
};

/*
 * A cudaMalloc. Reference counted (refs, under standin.alloc_lock): one for "not freed yet", one
 * per RM record (persistent records are RM's dup of the memory handle: they keep it alive after a
 * free), one per VMA mapping it. The BAR range goes back to the allocator with the last one.
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
	bool freed;
	bool unregistered;		/* NVP2P_IOC_UNREGISTER; under the API lock */
	struct rm_vidmem vidmem[RM_OBJ_COUNT];	/* under the API lock */
};

/* nv-p2p's side of one pin (nv_p2p_mem_info): one allocation, as nvidia.ko makes it. */
struct standin_pin {
	void (*free_callback)(void *data);	/* the client's */
	void *data;
	struct page_table_v2 page_table;	/* clients get &page_table.base */
	struct {
		struct list_head list;		/* struct standin_dma_map */
		struct semaphore lock;
	} dma_mappings;
	bool persistent;		/* (nvidia.ko: private != NULL) */
};

/* One nvidia_p2p_dma_map_pages: the list node and the mapping the client gets. */
struct standin_dma_map {
	struct list_head node;		/* pin->dma_mappings.list */
	struct nvidia_p2p_dma_mapping m;
	/*
	 * Entries the mapping reports that are not mapped (a page that failed, and the pages before
	 * it, which rm_p2p_dma_map_pages unmapped and went on: see there); NULL when every entry is.
	 */
	unsigned long *unmapped;
	u64 *phys;			/* each entry's physical address (peak_page_mappings) */
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
	X(live_bar1_extents)		\
	X(bar1_pinned_bytes)		\
	X(allocated_bytes)		\
	X(total_allocations)		\
	X(total_pins)			\
	X(total_persistent_pins)	\
	X(total_dma_mappings)		\
	X(total_bar1_extents)		\
	X(free_callbacks)		\
	X(teardown_page_tables)		\
	X(teardown_dma_mappings)	\
	X(unregisters)			\
	X(stale_put_pages)		\
	X(reused_put_pages)		\
	X(internal_put_pages)		\
	X(recycled_pins)		\
	X(foreign_put_pages)		\
	X(stale_dma_unmaps)		\
	X(bad_put_pages)		\
	X(peer_mismatch_warnings)	\
	X(topology_refusals)		\
	X(bar1_refusals)		\
	X(persistent_refusals)		\
	X(lookup_failures)		\
	X(departed_lookups)		\
	X(dma_map_errors)		\
	X(half_mappings)		\
	X(half_map_unmaps)		\
	X(peak_page_mappings)		\
	X(user_clients)			\
	X(kernel_clients)		\
	X(resets)			\
	X(reset_refusals)		\
	X(callback_reentries)		\
	X(leaked_by_driver)		\
	X(injected_failures)		\
	X(race_gate_timeouts)		\
	X(leaked_at_unload)		\
	STANDIN_ENTRY_POINTS(X_CALLS)	\
	STANDIN_ENTRY_POINTS(X_NS)	\
	X(cost_model_ns)

/*
 * The entry points whose calls are counted (calls_<fn>) and timed (ns_<fn>: nanoseconds spent
 * inside, from entry to return, cost model included), so that a benchmark can tell a client's own
 * time from the provider's. cost_model_ns is the part of it the cost model added.
 */
#define STANDIN_ENTRY_POINTS(Y)	\
	Y(get_pages)		\
	Y(get_pages_persistent)	\
	Y(put_pages)		\
	Y(put_pages_persistent)	\
	Y(dma_map_pages)	\
	Y(dma_unmap_pages)
#define X_CALLS(fn) X(calls_##fn)
#define X_NS(fn) X(ns_##fn)

struct standin_counters {
#define X(name) atomic64_t name;
	STANDIN_COUNTERS(X)
#undef X
};

struct standin_state {
	/*
	 * RM's API lock (rmapiLockAcquire(API_LOCK_FLAGS_NONE): taken for write), held where nvidia.ko's
	 * rm_p2p_* wrappers hold it and across the teardown that runs free callbacks. The owner is
	 * recorded, as RM's lock records it per thread, so that re-entry fails instead of deadlocking.
	 */
	struct rw_semaphore api_lock;
	struct task_struct *api_lock_owner;
	/*
	 * With ro_api_lock_free: the task holding the API lock for read in a FREE (frees only,
	 * and one at a time: they also hold gpus_lock, which is what orders them in RM, below),
	 * so that a re-entry from its callbacks fails as well, as RM's per-thread record of every
	 * holder makes it fail (NV-REENTRY).
	 */
	struct task_struct *api_lock_reader;
	/*
	 * The GPUs lock a free of video memory takes in RM (RS_FLAGS_ACQUIRE_GPUS_LOCK_ON_FREE of
	 * VideoMemory, NV-TEARDOWN-LOCK-MODE): taken only by frees with the API lock held for read
	 * (ro_api_lock_free), which it keeps from running together. Writers of the API lock
	 * exclude them already.
	 */
	struct mutex gpus_lock;
	u64 bar1_mapped;		/* bytes of BAR1 extents, under api_lock */

	spinlock_t alloc_lock;		/* allocs, alloc->refs/va/freed, gpu->used */
	struct list_head allocs;
	u64 next_handle;

	struct standin_gpu *gpu;	/* NULL until the PCI device is bound */
	struct standin_counters c;
	unsigned int free_callback_delay_ms;
	/*
	 * dma_map_fail_page (debugfs): the next rm_p2p_dma_map_pages fails the mapping of its page N
	 * (1-based) as dma_map_resource() would (an IOMMU out of IOVA space); 0: off. One-shot.
	 */
	u32 dma_map_fail_page;
	/*
	 * recycle_freed_pins (debugfs, for the stale-unpin window): a freed non-persistent pin is
	 * kept in `recycled` and given to the next non-persistent pin, so that the new pin's table has
	 * the freed one's address, as a slab allocator hands out the object freed last. KASAN's
	 * quarantine keeps the test kernel from reusing it by itself.
	 */
	bool recycle_freed_pins;
	/*
	 * recycle_into_persistent (debugfs, with recycle_freed_pins): the kept pin goes to the next
	 * persistent pin instead (nvidia.ko allocates both kinds as one nv_p2p_mem_info, 550
	 * nv-p2p.c:44-53, so either can land on a freed one's address).
	 */
	bool recycle_into_persistent;
	struct standin_pin *recycled;	/* under recycle_lock */
	spinlock_t recycle_lock;
};

extern struct standin_state standin;

/* Module parameters (standin_main.c). */
extern unsigned int generation;
extern unsigned int bar1_reserve_mib;
extern unsigned int bar1_size_mib;
extern unsigned int grdma_pci_topo_check_override;
extern bool passthrough_vm;
extern bool p2p_unsupported_chipset;
extern bool cost_model;
extern bool mig_enabled;
extern int internal_object_pid;
extern int mps_departed_tgid;
extern bool ro_api_lock_free;
u32 standin_page_table_version(void);

#define count_inc(name)		atomic64_inc(&standin.c.name)
#define count_dec(name)		atomic64_dec(&standin.c.name)
#define count_add(name, v)	atomic64_add((v), &standin.c.name)
#define count_sub(name, v)	atomic64_sub((v), &standin.c.name)

/* standin_main.c */
struct standin_alloc *standin_get_alloc(pid_t tgid, u64 va, u64 len);
void standin_alloc_get(struct standin_alloc *a);
void standin_alloc_put(struct standin_alloc *a);

/* standin_rm.c: the RM layer. Functions named after the rm_p2p_* wrappers take the API lock. */
int rm_api_lock(const char *fn);
void rm_api_unlock(void);
int rm_api_lock_free(const char *fn);
void rm_api_unlock_free(void);
void rm_init_vidmem(struct standin_alloc *a);
int rm_p2p_get_pages(u64 p2p_token, u32 va_space, u64 va, u64 len, const void *key,
		     u64 *phys, u32 *entries, u8 **uuid);
int rm_p2p_register_callback(u64 va, u64 len, const void *key,
			     void (*cb)(void *data), void *data);
int rm_p2p_get_gpu_info(u64 va, u64 len, u8 **uuid);
int rm_p2p_get_pages_persistent(u64 va, u64 len, const void *key, bool force_bar1,
				u64 *phys, u32 *entries);
u64 rm_newest_pin_serial(void);
int rm_p2p_put_pages(const void *key, u64 newest_at_call);
int rm_p2p_put_pages_persistent(const void *key);
void rm_del_vidmem_locked(struct standin_alloc *a);
void rm_free_leftover_records(void);

int rm_p2p_dma_map_pages(struct pci_dev *peer, const u8 *uuid, u32 page_count, const u64 *phys,
			 u64 *dma, unsigned long **unmapped);
void standin_page_mapping(u64 phys, bool mapped);

/* standin_p2p.c: the nv-p2p layer */
int standin_p2p_init(void);
void standin_p2p_exit(void);
void nv_p2p_mem_info_free_callback(void *data);
unsigned int nv_p2p_free_page_table(struct nvidia_p2p_page_table *page_table);

/* standin_race.c */
enum race_point {
	RP_GET_PAGES_PINNED,
	RP_GET_PAGES_RETURN,
	RP_GET_PAGES_PERSISTENT_RETURN,
	RP_PUT_PAGES_BEFORE_LOCK,
	RP_PUT_PAGES_UNLINKED,
	RP_PUT_PAGES_PERSISTENT_BEFORE_LOCK,
	RP_DMA_MAP_READ,
	RP_DMA_MAP_LOCKED,
	RP_DMA_MAP_BEFORE_INSERT,
	RP_DMA_MAP_RETURN,
	RP_DMA_UNMAP_BEFORE_SEM,
	RP_DMA_UNMAP_REMOVED,
	RP_TEARDOWN_BEFORE_CALLBACK,
	RP_TEARDOWN_AFTER_CALLBACK,
	RP_COUNT
};
void race_point(enum race_point p);
/* The cost model (standin_cost.c): what nvidia.ko's RM spends pinning or unpinning @pages. */
enum standin_cost { COST_PIN, COST_UNPIN };
u64 standin_cost_ns(enum standin_cost what, u32 pages);
void standin_cost(enum standin_cost what, u32 pages);
void standin_race_init(struct dentry *dir);
void standin_race_exit(void);

/* standin_debugfs.c */
int standin_inject(enum standin_fn fn);
void standin_debugfs_init(void);
void standin_debugfs_exit(void);

#endif /* NVP2P_STANDIN_H */
