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
	atomic_t clients_in_use;	/* client registrations with live MRs or acquires */
	atomic_t reg_ok;		/* successful PMH_IOC_REG_MR */
	atomic_t reg_failed;
	atomic_t peer_reg_unwound;	/* peer registrations that failed after a client claimed */
	atomic_t invalidate_calls;	/* the host's invalidate function called by a client */
	atomic_t invalidate_unknown;	/* ... with a core_context no MR has */
	atomic_t inline_unmaps;		/* invalidations that called dma_unmap/put_pages inline */
	atomic_t dma_unmap_calls;	/* the host called a client's dma_unmap */
	atomic_t put_pages_calls;
	atomic_t release_calls;
	atomic_t dma_ops;		/* edu DMA transfers started */
	atomic_t dma_refused;		/* PMH_IOC_DMA on a revoked/invalidated MR */
	atomic_t nic_iommu;		/* 1 if the NIC's DMA goes through an IOMMU */
};
extern struct pmh_counters pmh_counters;

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

enum pmh_mapped_state {
	PMH_STATE_UNMAPPED,
	PMH_STATE_MAPPED,
	PMH_STATE_INVALIDATED,	/* invalidated, the client unmaps itself (PEER_MEM_INVALIDATE_UNMAPS) */
};

/* A memory region: what ib_umem + an mlx5 memory key are for a real NIC. */
struct pmh_mr {
	struct kref kref;
	struct mutex mapping_lock;	/* state, revocation, and the NIC's use of the SG list */
	unsigned long addr;
	size_t length;
	bool writable;
	bool is_peer;
	struct device *dma_dev;		/* the NIC's */
	/* Set once the client invalidated it: the NIC refuses it, as a revoked memory key. */
	bool revoked;
	enum pmh_mapped_state state;
	u32 invalidations;
	u64 invalidated_ns;
	bool unmapped_by_invalidation;
	bool inline_unmap_running;	/* a legacy invalidation is unmapping the client */

	/* Where MR offset 0 lies within the first SG entry (the NIC adds it, as mlx5 does). */
	unsigned long sg_head_offset;
	unsigned int nmap;		/* mapped SG entries the NIC may use */
	struct sg_table sgt;		/* peer: filled by the client's dma_map; ordinary: ours */

	/* ordinary memory */
	struct page **pages;
	unsigned long npages;

	/* peer memory */
	struct pmh_client *client;
	void *client_ctx;
	u32 xa_id;
	unsigned long page_size;
	struct scatterlist *first_sg, *last_sg;
	dma_addr_t first_dma_address;
	unsigned int first_dma_length, first_length;
	unsigned int last_dma_length, last_length;
};

struct device *pmh_nic_dma_device(void);

void pmh_clients_show(struct seq_file *m);

/* Register [addr, addr + length) like ib_umem_get with peer memory allowed. */
struct pmh_mr *pmh_mr_register(unsigned long addr, size_t length, u32 flags);
void pmh_mr_deregister(struct pmh_mr *mr);
void pmh_mr_put(struct pmh_mr *mr);

int pmh_nic_init(void);
void pmh_nic_exit(void);
/* RDMA write (to_mr) or read between a kernel buffer and the MR; mapping_lock held by the caller. */
int pmh_nic_transfer(struct pmh_mr *mr, u64 offset, void *buf, size_t len, bool to_mr);

#endif /* PMH_H */
