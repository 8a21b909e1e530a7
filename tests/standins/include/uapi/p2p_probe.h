/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Userspace interface of p2p_probe (tests/standins/p2p_probe), a test-only module that calls the
 * nvidia_p2p_* API from the calling process's context with the caller's arguments, good or bad,
 * and reports what came back. Tests of the NVIDIA P2P stand-in use it to play the client.
 *
 *   fd = open("/dev/p2p_probe", O_RDWR);
 *   ioctl(fd, P2P_PROBE_IOC_PIN, &pin);       // nvidia_p2p_get_pages{,_persistent}; pin.ret
 *   ioctl(fd, P2P_PROBE_IOC_MAP, &map);       // nvidia_p2p_dma_map_pages; map.ret
 *   ioctl(fd, P2P_PROBE_IOC_PIN_STATE, &st);  // how the free callback was called, if it was
 *   ioctl(fd, P2P_PROBE_IOC_UNMAP, &unmap);   // nvidia_p2p_dma_unmap_pages
 *   ioctl(fd, P2P_PROBE_IOC_PUT, &put);       // nvidia_p2p_put_pages{,_persistent}
 *
 * The ioctls themselves fail (-1/errno) only for probe problems (bad handle, EFAULT, ESTALE for
 * a pin or mapping the driver has torn down, which the probe refuses to hand back to it unless
 * told to); what the nvidia_p2p_* function returned is in the struct's `ret` (0 or a negative
 * errno; -524 is the kernel's ENOTSUPP). Pins and mappings are the module's, not the file's: they
 * outlive the process that made them (to test persistence after exit) until PUT/UNMAP or module
 * unload. A non-persistent pin whose free callback is still armed holds a reference on the probe
 * module, so the module cannot go while the driver could still call into it.
 */
#ifndef _UAPI_P2P_PROBE_H
#define _UAPI_P2P_PROBE_H

#include <linux/ioctl.h>
#include <linux/types.h>

#define P2P_PROBE_DEVICE "/dev/p2p_probe"
#define P2P_PROBE_UUID_LEN 16

/* pin.flags */
#define P2P_PROBE_PERSISTENT		(1u << 0)	/* get_pages_persistent instead of get_pages */
#define P2P_PROBE_NULL_CALLBACK		(1u << 1)	/* get_pages with free_callback == NULL */
#define P2P_PROBE_FROM_WORKQUEUE	(1u << 2)	/* make the call from a kworker (no mm) */
#define P2P_PROBE_CB_REENTER		(1u << 3)	/* the free callback calls put_pages on its own
							 * table (forbidden: the driver WARNs) and
							 * records what it returns */
#define P2P_PROBE_CB_UNMAP		(1u << 4)	/* the free callback unmaps the pin's first DMA
							 * mapping (allowed) and records the result */
#define P2P_PROBE_NO_READ		(1u << 5)	/* do not read the table after get_pages (a
							 * racing free may have torn it down) */

/* pin.pt_out: what get_pages left in its page_table out-pointer (never dereferenced) */
#define P2P_PROBE_PT_UNTOUCHED		1	/* still the probe's sentinel */
#define P2P_PROBE_PT_NULL		2
#define P2P_PROBE_PT_SET		3	/* another pointer: a table, or (on failure) a
						 * dangling one */

struct p2p_probe_pin {
	__u64 va;		/* in: virtual_address */
	__u64 length;		/* in */
	__u64 p2p_token;	/* in: passed to get_pages as is (0 normally) */
	__u32 va_space;		/* in: likewise */
	__u32 flags;		/* in: P2P_PROBE_* */
	__u32 persistent_flags;	/* in: the flags argument of get_pages_persistent */
	__s32 ret;		/* out: what get_pages{,_persistent} returned */
	__u64 handle;		/* out: names the pin in later calls (when ret == 0) */
	__u64 phys;		/* in: user pointer to __u64[max_entries] for the physical addresses
				 * (0: not wanted) */
	__u32 max_entries;	/* in */
	/* out, from the page table when ret == 0: */
	__u32 version;
	__u32 page_size;	/* enum nvidia_p2p_page_size_type */
	__u32 entries;
	__u32 pt_flags;		/* the 2.x layout's flags; 0 for 1.x */
	__u32 pt_out;		/* out, always: P2P_PROBE_PT_* */
	__u8 gpu_uuid[P2P_PROBE_UUID_LEN];
};

/* put.flags */
#define P2P_PROBE_PUT_VA	(1u << 0)	/* pass .va instead of the address it was pinned at */
#define P2P_PROBE_PUT_OTHER	(1u << 1)	/* call the other put (persistent <-> non-persistent) */
#define P2P_PROBE_PUT_FROM_WORKQUEUE (1u << 2)	/* make the call from a kworker */
#define P2P_PROBE_PUT_KEEP	(1u << 3)	/* remember the pin even after a successful put (so
						 * a second put can reach a freed table) */

struct p2p_probe_put {
	__u64 handle;		/* in */
	__u64 va;		/* in, with P2P_PROBE_PUT_VA */
	__u32 flags;		/* in: P2P_PROBE_PUT_* */
	__u32 persistent_flags;	/* in: the flags argument of put_pages_persistent */
	__s32 ret;		/* out; on 0 the probe forgets the pin, unless: */
	__u32 kept;		/* out: 1 when the probe keeps the pin although ret is 0, because a
				 * non-persistent put came from another process than the pinning one
				 * (nothing was unpinned: the callback stays armed) */
};

/* How the free callback of a pin was called (all zero until it is). */
struct p2p_probe_pin_state {
	__u64 handle;		/* in */
	__u32 callbacks;	/* out: times it ran */
	__u32 in_task;		/* out: in_task() inside it */
	__u32 slept;		/* out: 1 once msleep(1) inside it returned */
	__s32 pid;		/* out: current->pid inside it */
	__s32 tgid;		/* out: current->tgid */
	__u32 entries;		/* out: page_table->entries read inside (the table is alive there) */
	__u32 mapping_entries;	/* out: entries of its first DMA mapping read inside (0: none) */
	__s32 reenter_unmap_ret;/* out: with P2P_PROBE_CB_UNMAP, what dma_unmap_pages returned */
	__s32 reenter_put_ret;	/* out: with P2P_PROBE_CB_REENTER, what put_pages returned */
	__s32 pin_tgid;		/* out: the process that pinned it */
	__u64 time_ns;		/* out: ktime_get_ns() when it ran */
	char comm[16];		/* out: current->comm */
};

/* map.peer / unmap.peer */
#define P2P_PROBE_PEER_NIC	0	/* QEMU edu, 1234:11e8 (its DMA mask is set to 64 bits if no
					 * driver owns it, as a NIC driver would) */
#define P2P_PROBE_PEER_GPU	1	/* the GPU stand-in itself, 1af4:1110 */
#define P2P_PROBE_PEER_PCI	2	/* the device at .pci_addr */
#define P2P_PROBE_PEER_NULL	3	/* a NULL peer */

#define P2P_PROBE_PCI_ADDR(domain, bus, devfn) (((domain) << 16) | ((bus) << 8) | (devfn))

/* map.flags / unmap.flags: hand the driver a table or mapping it has torn down (use after free) */
#define P2P_PROBE_STALE		(1u << 0)
/* unmap.flags: remember the mapping even after a successful unmap (to unmap it twice) */
#define P2P_PROBE_UNMAP_KEEP	(1u << 1)

struct p2p_probe_map {
	__u64 pin;		/* in: pin handle */
	__u32 peer;		/* in: P2P_PROBE_PEER_* */
	__u32 pci_addr;		/* in: P2P_PROBE_PCI_ADDR(), with P2P_PROBE_PEER_PCI */
	__s32 ret;		/* out: what dma_map_pages returned */
	__u32 max_entries;	/* in */
	__u64 dma;		/* in: user pointer to __u64[max_entries] for the DMA addresses */
	__u64 handle;		/* out: names the mapping (when ret == 0) */
	__u32 version;		/* out, from the mapping */
	__u32 page_size_type;
	__u32 entries;
	__u32 flags;		/* in: P2P_PROBE_STALE */
};

struct p2p_probe_unmap {
	__u64 handle;		/* in: mapping handle */
	__u32 peer;		/* in: the peer to pass (may differ from the one mapped for) */
	__u32 pci_addr;		/* in */
	__s32 ret;		/* out; on 0 the probe forgets the mapping */
	__u32 flags;		/* in: P2P_PROBE_STALE */
};

/* pin_user_pages_fast(FOLL_WRITE | FOLL_LONGTERM) on a user range, unpinned again at once. */
struct p2p_probe_pin_user {
	__u64 va;		/* in */
	__u64 length;		/* in */
	__s64 ret;		/* out: pages pinned or a negative errno */
};

/* The rest of nv-p2p.h, called with harmless arguments. */
struct p2p_probe_misc {
	__s32 init_mapping;		/* nvidia_p2p_init_mapping(0, NULL, NULL, NULL) */
	__s32 destroy_mapping;		/* nvidia_p2p_destroy_mapping(0) */
	__s32 free_page_table;		/* nvidia_p2p_free_page_table(NULL) */
	__s32 free_dma_mapping;		/* nvidia_p2p_free_dma_mapping(NULL) */
	__s32 register_rsync_null;	/* nvidia_p2p_register_rsync_driver(NULL, NULL) */
	__s32 register_rsync;		/* with a valid driver */
	__s32 register_rsync_again;	/* the same again, while registered */
	__s32 get_rsync_registers;	/* nvidia_p2p_get_rsync_registers(&info) */
};

#define P2P_PROBE_IOC_MAGIC 'p'
#define P2P_PROBE_IOC_PIN _IOWR(P2P_PROBE_IOC_MAGIC, 1, struct p2p_probe_pin)
#define P2P_PROBE_IOC_PUT _IOWR(P2P_PROBE_IOC_MAGIC, 2, struct p2p_probe_put)
#define P2P_PROBE_IOC_PIN_STATE _IOWR(P2P_PROBE_IOC_MAGIC, 3, struct p2p_probe_pin_state)
#define P2P_PROBE_IOC_MAP _IOWR(P2P_PROBE_IOC_MAGIC, 4, struct p2p_probe_map)
#define P2P_PROBE_IOC_UNMAP _IOWR(P2P_PROBE_IOC_MAGIC, 5, struct p2p_probe_unmap)
#define P2P_PROBE_IOC_PIN_USER _IOWR(P2P_PROBE_IOC_MAGIC, 6, struct p2p_probe_pin_user)
#define P2P_PROBE_IOC_MISC _IOR(P2P_PROBE_IOC_MAGIC, 7, struct p2p_probe_misc)

#endif /* _UAPI_P2P_PROBE_H */
