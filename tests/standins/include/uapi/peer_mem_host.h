/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Userspace interface of the peer-memory host stand-in (tests/standins/peer_mem_host), the test-only
 * module that plays ib_core's peer-memory support and an RDMA NIC (QEMU's edu device) in the VM.
 * Tests use it as they would use ibv_reg_mr / ibv_dereg_mr and RDMA reads and writes:
 *
 *   fd = open("/dev/peer_mem_host", O_RDWR);
 *   ioctl(fd, PMH_IOC_REG_MR, &reg);        // in this process's context, like ibv_reg_mr
 *   ioctl(fd, PMH_IOC_DMA, &dma);           // the NIC moves bytes between host memory and the MR
 *   ioctl(fd, PMH_IOC_QUERY_MR, &query);    // state, owning client, SG list
 *   ioctl(fd, PMH_IOC_DEREG_MR, &handle);
 *
 * Closing the file deregisters every MR still registered through it, as ib_uverbs does at process
 * exit; it is the last close that does, in whatever task makes it (a forked child that inherited
 * the file, say): nothing ties an MR to the task that registered it. Deregistration from another
 * task can also be asked for: PMH_IOC_DEREG_MR_EX with PMH_DEREG_KWORKER deregisters one MR from
 * the host's workqueue, and PMH_IOC_REMOVE_DEVICE deregisters every MR of every open file from it,
 * as ib_uverbs' disassociation does when the device goes away. Per-client statistics are in /sys/kernel/mm/memory_peers/<client>/ (unless the module runs
 * as the ib_uverbs variant without sysfs); host-wide counters in /sys/kernel/debug/peer_mem_host/.
 */
#ifndef _UAPI_PEER_MEM_HOST_H
#define _UAPI_PEER_MEM_HOST_H

#include <linux/ioctl.h>
#include <linux/types.h>

#define PMH_DEVICE "/dev/peer_mem_host"
#define PMH_NAME_MAX 64

/* reg.flags */
#define PMH_REG_WRITE		(1u << 0)	/* IB_ACCESS_LOCAL_WRITE-like: the NIC may write */
#define PMH_REG_NO_INVALIDATE	(1u << 1)	/* the caller cannot handle invalidation (a CQ/QP buffer):
						 * invalidating clients are skipped */

struct pmh_reg_mr {
	__u64 addr;			/* in */
	__u64 length;			/* in */
	__u32 flags;			/* in: PMH_REG_* */
	__u32 nmap;			/* out: SG entries of the memory key (the table's nents) */
	__u64 handle;			/* out */
	__u64 core_context;		/* out: the id handed to the client (U32_MAX: not invalidating) */
	__u64 page_size;		/* out: what get_page_size answered (0 for ordinary memory) */
	char client[PMH_NAME_MAX];	/* out: the client that took it; "" for ordinary pinned memory */
};

/* query.state */
#define PMH_MR_MAPPED		1	/* usable by the NIC */
#define PMH_MR_INVALIDATED	2	/* the client invalidated it: PMH_IOC_DMA fails with EACCES,
					 * as a revoked memory key does */

struct pmh_sge {
	__u64 dma_addr;
	__u64 length;
};

struct pmh_query_mr {
	__u64 handle;			/* in */
	__u64 sges;			/* in: user pointer to struct pmh_sge[max_sges] (0: none wanted) */
	__u32 max_sges;			/* in */
	__u32 nmap;			/* out: entries the MR has now (may exceed max_sges;
					 * 0 once invalidation or teardown cleared them) */
	__u32 state;			/* out: PMH_MR_* */
	__u32 invalidations;		/* out: times the client's invalidation reached this MR */
	__u64 addr;			/* out */
	__u64 length;			/* out */
	__u64 core_context;		/* out */
	__u64 invalidated_ns;		/* out: ktime_get_ns() when invalidation arrived (0: never) */
	__u32 unmapped_by_invalidation;	/* out: 1 if the host called dma_unmap/put_pages inside it */
	__u32 pad;
	char client[PMH_NAME_MAX];	/* out */
};

/* dma.direction */
#define PMH_DMA_TO_MR		1	/* RDMA write: host buffer -> NIC -> registered memory */
#define PMH_DMA_FROM_MR		2	/* RDMA read: registered memory -> NIC -> host buffer */

struct pmh_dma {
	__u64 handle;			/* in */
	__u64 offset;			/* in: byte offset into the MR (from its addr) */
	__u64 length;			/* in */
	__u64 buf;			/* in: user pointer to the host buffer */
	__u32 direction;		/* in: PMH_DMA_* */
	__u32 pad;
};

/* dereg.flags */
#define PMH_DEREG_KWORKER	(1u << 0)	/* deregister from the host's workqueue (the ioctl
						 * waits for it), not from the calling task */

struct pmh_dereg_mr {
	__u64 handle;			/* in */
	__u32 flags;			/* in: PMH_DEREG_* */
	__u32 pad;
};

#define PMH_IOC_MAGIC 'P'
#define PMH_IOC_REG_MR _IOWR(PMH_IOC_MAGIC, 1, struct pmh_reg_mr)
#define PMH_IOC_DEREG_MR _IOW(PMH_IOC_MAGIC, 2, __u64)
#define PMH_IOC_QUERY_MR _IOWR(PMH_IOC_MAGIC, 3, struct pmh_query_mr)
#define PMH_IOC_DMA _IOW(PMH_IOC_MAGIC, 4, struct pmh_dma)
#define PMH_IOC_DEREG_MR_EX _IOW(PMH_IOC_MAGIC, 5, struct pmh_dereg_mr)
/*
 * The NIC goes away (hot unplug, driver unbind or reload): every MR of every open file is
 * deregistered from a kworker, as ib_uverbs does when it disassociates its files. Returns the
 * number of MRs deregistered. The files stay usable (the NIC is back at once).
 */
#define PMH_IOC_REMOVE_DEVICE _IO(PMH_IOC_MAGIC, 6)

#endif /* _UAPI_PEER_MEM_HOST_H */
