/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The ib_core peer-memory client ABI, as provided by the peer-memory host stand-in.
 *
 * Written for peermem-rs from the ABI facts in docs/peer-memory-contract.md (section 1): the same
 * names, layout and signatures as the rdma/peer_mem.h that MLNX_OFED / DOCA-OFED ship, so that a client built
 * against this header loads unchanged against a real ib_core with peer-memory support and the other way
 * round. Only the test VM uses it; on GPU nodes the build uses the OFED header.
 */
#ifndef _RDMA_PEER_MEM_H
#define _RDMA_PEER_MEM_H

#include <linux/scatterlist.h>
#include <linux/types.h>

#define IB_PEER_MEMORY_NAME_MAX 64
#define IB_PEER_MEMORY_VER_MAX 16

/* core_context is a u64 (very old OFED passed a void *). */
#define PEER_MEM_U64_CORE_CONTEXT

struct device;

/*
 * A peer-memory client: its name and version (shown in /sys/kernel/mm/memory_peers/<name>/) and the
 * callbacks the host drives, in this order. Sizes: 64 + 16 + 7 pointers = 136 bytes on LP64.
 */
struct peer_memory_client {
	char name[IB_PEER_MEMORY_NAME_MAX];
	char version[IB_PEER_MEMORY_VER_MAX];
	/* 1: the range is the client's; 0 or a negative errno: it is not. */
	int (*acquire)(unsigned long addr, size_t size, void *peer_mem_private_data,
		       char *peer_mem_name, void **client_context);
	int (*get_pages)(unsigned long addr, size_t size, int write, int force,
			 struct sg_table *sg_head, void *client_context, u64 core_context);
	/* On failure sg_head must be left untouched. */
	int (*dma_map)(struct sg_table *sg_head, void *client_context, struct device *dma_device,
		       int dmasync, int *nmap);
	/* Must return 0. */
	int (*dma_unmap)(struct sg_table *sg_head, void *client_context, struct device *dma_device);
	void (*put_pages)(struct sg_table *sg_head, void *client_context);
	unsigned long (*get_page_size)(void *client_context);
	void (*release)(void *client_context);
};

/*
 * The extended client. The host treats a client as extended only when
 * client.version[IB_PEER_MEMORY_VER_MAX - 1] != 0 and ex_size covers flags.
 */
enum {
	/* The host must not call dma_unmap/put_pages when the client invalidates. */
	PEER_MEM_INVALIDATE_UNMAPS = 1 << 0,
};

struct peer_memory_client_ex {
	struct peer_memory_client client;
	size_t ex_size;
	u32 flags;
};

typedef int (*invalidate_peer_memory)(void *reg_handle, u64 core_context);

/*
 * Returns a registration handle, or NULL on failure (for example a duplicate name). A non-NULL
 * invalidate_callback marks the client as one that invalidates; the host stores its invalidate
 * function there. The client structure must outlive the registration.
 */
void *ib_register_peer_memory_client(const struct peer_memory_client *peer_client,
				     invalidate_peer_memory *invalidate_callback);

/* Waits until every registration that uses the client has been released. */
void ib_unregister_peer_memory_client(void *reg_handle);

#endif /* _RDMA_PEER_MEM_H */
