/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Internals of the peer-memory host stand-in: the ib_core side (client registry, memory regions)
 * and the "NIC" (QEMU's edu device driven as an RDMA engine). See README.md.
 */
#ifndef PMH_H
#define PMH_H

#include <linux/atomic.h>
#include <linux/completion.h>
#include <linux/kobject.h>
#include <linux/kref.h>
#include <linux/list.h>
#include <linux/mutex.h>
#include <linux/refcount.h>
#include <linux/scatterlist.h>
#include <linux/seq_file.h>
#include <linux/xarray.h>
#include <rdma/peer_mem.h>

#define PMH_NO_INVALIDATION_ID U32_MAX

struct dentry;
struct mm_struct;

/* Module parameters (read-only after load). */
extern int pmh_ex_support;
extern int pmh_sysfs;
extern int pmh_page_size_before_dma_map;
extern int pmh_trim_sgl;

/* Host-wide counters, shown in /sys/kernel/debug/peer_mem_host/. */
struct pmh_counters {
	atomic_t live_mrs;		/* registered and not yet deregistered */
	atomic_t live_peer_mrs;
	atomic_t live_ordinary_mrs;
	atomic_t registered_clients;
	atomic_t reg_ok;		/* successful PMH_IOC_REG_MR */
	atomic_t reg_failed;
	atomic_t peer_reg_unwound;	/* peer registrations that failed after a client claimed */
	atomic_t alignment_refusals;	/* ... because an SG entry was not PAGE_SIZE aligned */
	atomic_t invalidate_calls;	/* the host's invalidate function called by a client */
	atomic_t invalidate_unknown;	/* ... with a core_context no MR has */
	atomic_t inline_unmaps;		/* invalidations that called dma_unmap/put_pages inline */
	atomic_t dma_unmap_calls;	/* the host called a client's dma_unmap */
	atomic_t put_pages_calls;
	atomic_t release_calls;
	atomic_t kworker_deregs;	/* MRs deregistered from the host's workqueue */
	atomic_t removed_by_device;	/* ... of which by a device removal */
	atomic_t close_deregs;		/* MRs deregistered by the last close of their file */
	atomic_t dma_ops;		/* edu DMA transfers started */
	atomic_t dma_refused;		/* PMH_IOC_DMA on a revoked/invalidated MR */
	atomic_t nic_iommu;		/* 1 if the NIC's DMA goes through an IOMMU */
	atomic_t race_gate_timeouts;	/* race-point gates that timed out (pmh_race.c) */
};
extern struct pmh_counters pmh_counters;
extern bool pmh_nonpci_dma_device;
extern bool pmh_stop_notifier_before_25_04;
extern bool pmh_fail_mkey;
struct device *pmh_nonpci_device(void);

/* One registration of a peer-memory client (the reg_handle clients get). */
struct pmh_client {
	struct kobject kobj;		/* /sys/kernel/mm/memory_peers/<name>; owns the memory */
	bool kobj_added;
	struct list_head list;		/* in the registration-ordered client list */
	refcount_t usecnt;		/* 1 for the registration + 1 per claimed range */
	struct completion usecnt_zero;
	const struct peer_memory_client *peer_mem;
	bool invalidation_required;
	struct xarray mr_xa;		/* core_context -> MR, for invalidation */
	u32 xa_cyclic_next;
	struct {
		atomic64_t num_alloc_mrs;
		atomic64_t num_dealloc_mrs;
		atomic64_t num_reg_pages;
		atomic64_t num_dereg_pages;
		atomic64_t num_reg_bytes;
		atomic64_t num_dereg_bytes;
		unsigned long num_free_callbacks;	/* under mr_xa's lock */
	} stats;
};

/* MLNX's enum ib_umem_mapped_state; 0 is UNMAPPED, so a zeroed MR starts in it. */
enum pmh_mapped_state {
	PMH_STATE_UNMAPPED,
	PMH_STATE_MAPPED,
	PMH_STATE_INVALIDATED,	/* invalidated, the client unmaps itself (PEER_MEM_INVALIDATE_UNMAPS) */
};

/*
 * A memory region: an ib_umem (the peer part: MLNX's struct ib_umem_peer) and what the NIC
 * driver keeps for it (an mlx5 memory key).
 */
struct pmh_mr {
	struct kref kref;
	/*
	 * MLNX's per-umem mapping_lock: mapped state, the notifier, and (here) the NIC's use of
	 * the SG list. See README.md for when it is held.
	 */
	struct mutex mapping_lock;
	struct list_head work_node;	/* on a kworker's list of MRs to deregister */
	unsigned long addr;
	size_t length;
	bool writable;
	bool is_peer;
	struct device *dma_dev;		/* the NIC's */
	struct mm_struct *owning_mm;	/* pinned_vm is charged to it (mmgrab'd) */
	unsigned long npages;		/* PAGE_SIZE pages of [addr, addr + length) */

	/* The NIC's side: its "memory key". */
	bool revoked;			/* the NIC refuses the MR (mlx5r_umr_revoke_mr) */
	unsigned long sg_head_offset;	/* where MR offset 0 lies within the first SG entry */
	unsigned int reg_nmap;		/* SG entries when the memory key was created */
	u32 invalidations;		/* invalidations that took the mapping lock */
	u64 invalidated_ns;
	bool unmapped_by_invalidation;

	/* The umem. For peer memory the client fills sgt_append.sgt in dma_map. */
	struct sg_append_table sgt_append;
	enum pmh_mapped_state state;
	/* MLNX: invalidation_func != NULL (set by activation, cleared by stop). */
	bool notifier_active;
	struct pmh_client *client;
	void *client_ctx;
	u32 xa_id;
	unsigned long page_size;
	bool trim_failed;		/* an end entry was shorter than what trimming removes */
	struct scatterlist *first_sg, *last_sg;
	dma_addr_t first_dma_address;
	unsigned int first_dma_length, first_length;
	unsigned int last_dma_length, last_length;
};

static inline struct sg_table *pmh_mr_sgt(struct pmh_mr *mr)
{
	return &mr->sgt_append.sgt;
}

struct device *pmh_nic_dma_device(void);

void pmh_clients_show(struct seq_file *m);

/* Register [addr, addr + length) like ib_umem_get_peer + mlx5's reg_user_mr. */
struct pmh_mr *pmh_mr_register(unsigned long addr, size_t length, u32 flags);
/* Like mlx5_ib_dereg_mr + ib_umem_release, from whatever task calls it. */
void pmh_mr_deregister(struct pmh_mr *mr);
void pmh_mr_put(struct pmh_mr *mr);

int pmh_nic_init(void);
void pmh_nic_exit(void);
/* RDMA write (to_mr) or read between a kernel buffer and the MR; mapping_lock held by the caller. */
int pmh_nic_transfer(struct pmh_mr *mr, u64 offset, void *buf, size_t len, bool to_mr);

/* Race points (pmh_race.c), in the order /sys/kernel/debug/peer_mem_host/race lists them. */
enum pmh_race_point {
	PMH_RACE_REG_ACQUIRED,
	PMH_RACE_REG_LOCKED,
	PMH_RACE_REG_AFTER_GET_PAGES,
	PMH_RACE_REG_AFTER_DMA_MAP,
	PMH_RACE_REG_BEFORE_ACTIVATE,
	PMH_RACE_INVALIDATE_ENTERED,
	PMH_RACE_INVALIDATE_LOCKED,
	PMH_RACE_DEREG_BEFORE_STOP,
	PMH_RACE_DEREG_STOPPED,
	PMH_RACE_DEREG_BEFORE_RELEASE,
	PMH_RACE_REGISTER_REFUSED,
	PMH_RACE_NR
};

void pmh_race(enum pmh_race_point point);
void pmh_race_init(struct dentry *dir);
void pmh_race_exit(void);

#endif /* PMH_H */
