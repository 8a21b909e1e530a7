// SPDX-License-Identifier: GPL-2.0
/*
 * NVIDIA P2P stand-in: the RM layer, modelled on what nvidia.ko's resource manager does for
 * third-party P2P (README.md cites the sources for each part):
 *
 *  - the RM API lock, taken for write by each rm_p2p_* call and across the teardown that calls free
 *    callbacks; its owner is known, so re-entering it fails (-EIO) instead of deadlocking;
 *  - one tracking record per pin (CLI_THIRD_PARTY_P2P_MAPPING_INFO), keyed by the page-table
 *    pointer, which is compared and never dereferenced here;
 *  - per allocation and third-party P2P object, reference-counted BAR1 extents shared by the pins
 *    of that object, and the BAR1 reserve;
 *  - the lookup by calling process, and the teardown (cudaFree, context destruction, unregister):
 *    for each record, the free callback, then the record goes.
 *
 * The nv-p2p layer (standin_p2p.c) calls in through the rm_p2p_* functions, as nv-p2p.c calls
 * osapi.c's wrappers.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/bitmap.h>
#include <linux/delay.h>
#include <linux/dma-mapping.h>
#include <linux/hashtable.h>
#include <linux/iommu.h>
#include <linux/sched.h>
#include <linux/slab.h>

#include "standin.h"

/* One pin as RM tracks it. Lives from API-lock section #1 of get_pages to put or teardown. */
struct rm_record {
	struct hlist_node hash;		/* records, by key */
	struct list_head node;		/* alloc->vidmem[obj].records */
	struct standin_alloc *alloc;	/* referenced */
	enum rm_object obj;
	pid_t tgid;			/* RM_OBJ_PROCESS: the pinning process */
	const void *key;		/* the page table: compared, never dereferenced */
	void (*free_callback)(void *data);	/* nv-p2p's wrapper; NULL until section #2 */
	void *data;
	u64 offset;			/* in the allocation */
	u64 length;			/* the BAR1 extent length: 64 KiB multiple */
	u64 serial;			/* order of creation: see rm_p2p_put_pages */
};

/* A BAR1 mapping of part of an allocation, shared by the records of one object that cover it. */
struct rm_extent {
	struct list_head node;		/* vidmem->extents, sorted by offset */
	u64 offset;
	u64 length;
	unsigned int refs;
};

/* Under the API lock. */
static DEFINE_HASHTABLE(records, 12);
/* The serial of the newest record: written under the API lock, read without it. */
static atomic64_t newest_serial;

/*
 * rmapiLockAcquire(API_LOCK_FLAGS_NONE): the write lock, taken by every rm_p2p_* entry
 * (dma_map_pages, get_pages_persistent, get_pages's two sections, put_pages_persistent, put_pages:
 * NV-API-LOCK, NV-GET-PAGES-TWO-SECTIONS) and held across the free path's callbacks
 * (serverTopLock_Prologue, alloc_free.c 550:252; CliDelThirdPartyP2PVidmemInfo, NV-TEARDOWN). It
 * is refused to the task that already holds it (rmapiLockIsOwner, NV-REENTRY), which in practice
 * is a free callback calling back into the driver. nvidia.ko logs an assertion and returns
 * NV_ERR_INVALID_LOCK_STATE (-EIO); the stand-in also WARNs, so that a client doing it fails every
 * test run.
 *
 * noinline changes no behaviour: a task blocked here shows rm_api_lock at the top of its kernel
 * stack, which is how the race tests (tests/selftests/races/races.c) prove that the task they race
 * waits for this lock.
 */
static bool rm_api_lock_reentered(const char *fn)
{
	if (READ_ONCE(standin.api_lock_owner) == current) {
		count_inc(callback_reentries);
		WARN(1, "%s: the RM API lock is already held by this task (%s[%d]), e.g. inside a free callback: -EIO\n",
		     fn, current->comm, current->pid);
		return true;
	}
	if (READ_ONCE(standin.api_lock_reader) == current) {
		count_inc(callback_reentries);
		WARN(1, "%s: the RM API lock is already held for read by this task's free (%s[%d]), e.g. inside a free callback: -EIO\n",
		     fn, current->comm, current->pid);
		return true;
	}
	return false;
}

noinline int rm_api_lock(const char *fn)
{
	if (rm_api_lock_reentered(fn))
		return -EIO;
	down_write(&standin.api_lock);
	WRITE_ONCE(standin.api_lock_owner, current);
	return 0;
}

void rm_api_unlock(void)
{
	WRITE_ONCE(standin.api_lock_owner, NULL);
	up_write(&standin.api_lock);
}

/*
 * The locks of an explicit free of video memory (ioc_free): the API lock for write, or with
 * ro_api_lock_free for read and the GPUs lock (see ro_api_lock_free in standin_main.c). The unlock tells the two apart by the write owner, so a
 * change of the parameter between the two cannot unbalance them.
 */
noinline int rm_api_lock_free(const char *fn)
{
	if (!READ_ONCE(ro_api_lock_free))
		return rm_api_lock(fn);
	if (rm_api_lock_reentered(fn))
		return -EIO;
	down_read(&standin.api_lock);
	mutex_lock(&standin.gpus_lock);
	WRITE_ONCE(standin.api_lock_reader, current);
	return 0;
}

void rm_api_unlock_free(void)
{
	if (READ_ONCE(standin.api_lock_owner) == current) {
		rm_api_unlock();
		return;
	}
	WRITE_ONCE(standin.api_lock_reader, NULL);
	mutex_unlock(&standin.gpus_lock);
	up_read(&standin.api_lock);
}

/* The stand-in's RM state: under the API lock for write, or for read with the GPUs lock. */
static void rm_assert_locked(void)
{
	lockdep_assert_held(&standin.api_lock);
	if (READ_ONCE(standin.api_lock_owner) != current)
		lockdep_assert_held(&standin.gpus_lock);
}

void rm_init_vidmem(struct standin_alloc *a)
{
	int i;

	for (i = 0; i < RM_OBJ_COUNT; i++) {
		INIT_LIST_HEAD(&a->vidmem[i].records);
		INIT_LIST_HEAD(&a->vidmem[i].extents);
	}
}

/* ---- BAR1 ---- */

/* _isSpaceAvailableForBar1P2PMapping: BAR1 size - mapped >= reserve + the new extent. */
static bool bar1_space_for(u64 len)
{
	u64 size = (u64)READ_ONCE(bar1_size_mib) << 20;
	u64 reserve = (u64)READ_ONCE(bar1_reserve_mib) << 20;

	if (!size)
		size = standin.gpu ? standin.gpu->bar_size : 0;
	if (size < standin.bar1_mapped)
		return false;
	return size - standin.bar1_mapped >= reserve + len;
}

static void extent_unref(struct rm_extent *e)
{
	if (--e->refs)
		return;
	list_del(&e->node);
	standin.bar1_mapped -= e->length;
	count_sub(bar1_pinned_bytes, e->length);
	count_dec(live_bar1_extents);
	kfree(e);
}

/* Drop one reference on every extent of @vm that [off, off + len) touches. */
static void extents_unmap(struct rm_vidmem *vm, u64 off, u64 len)
{
	struct rm_extent *e, *tmp;

	list_for_each_entry_safe(e, tmp, &vm->extents, node) {
		if (e->offset >= off + len)
			break;
		if (e->offset + e->length > off)
			extent_unref(e);
	}
}

/*
 * RmThirdPartyP2PBAR1GetPages: cover [off, off + len) with extents of @vm, reusing (refs++) those
 * already there and mapping new ones only for the gaps, each gap checked against the reserve.
 * The extents of one object never overlap, and a record keeps every extent it touches alive, so
 * the extents a record holds are exactly those its range touches (extents_unmap relies on it).
 */
static int extents_map(struct rm_vidmem *vm, u64 off, u64 len)
{
	u64 pos = off, end = off + len, gap_end;
	struct rm_extent *e, *next, *n;

	while (pos < end) {
		next = NULL;
		list_for_each_entry(e, &vm->extents, node) {
			if (e->offset + e->length > pos) {
				next = e;
				break;
			}
		}
		if (next && next->offset <= pos) {
			next->refs++;
			pos = min(end, next->offset + next->length);
			continue;
		}
		gap_end = next ? min(end, next->offset) : end;
		if (!bar1_space_for(gap_end - pos)) {
			count_inc(bar1_refusals);
			goto undo;
		}
		n = kzalloc(sizeof(*n), GFP_KERNEL);
		if (!n)
			goto undo;
		n->offset = pos;
		n->length = gap_end - pos;
		n->refs = 1;
		if (next)
			list_add_tail(&n->node, &next->node);	/* just before it */
		else
			list_add_tail(&n->node, &vm->extents);
		standin.bar1_mapped += n->length;
		count_add(bar1_pinned_bytes, n->length);
		count_inc(live_bar1_extents);
		count_inc(total_bar1_extents);
		pos = gap_end;
	}
	return 0;

undo:
	extents_unmap(vm, off, pos - off);
	return -ENOMEM;		/* NV_ERR_INSUFFICIENT_RESOURCES */
}

/* ---- records ---- */

static struct rm_record *record_add(struct standin_alloc *a, enum rm_object obj, const void *key,
				    u64 off, u64 len)
{
	struct rm_record *r = kzalloc(sizeof(*r), GFP_KERNEL);

	if (!r)
		return NULL;
	if (extents_map(&a->vidmem[obj], off, len)) {
		kfree(r);
		return NULL;
	}
	r->alloc = a;		/* the caller's lookup reference becomes the record's */
	r->obj = obj;
	r->tgid = obj == RM_OBJ_PROCESS ? current->tgid : 0;
	r->key = key;
	r->offset = off;
	r->length = len;
	r->serial = atomic64_inc_return(&newest_serial);
	hash_add(records, &r->hash, (unsigned long)key);
	list_add_tail(&r->node, &a->vidmem[obj].records);
	count_inc(live_pins);
	count_inc(total_pins);
	if (obj == RM_OBJ_INTERNAL)
		count_inc(total_persistent_pins);
	return r;
}

/* thirdpartyp2pDelMappingInfoByKey: drop the BAR1 extents, unlink, free. */
static void record_del(struct rm_record *r)
{
	struct standin_alloc *a = r->alloc;

	extents_unmap(&a->vidmem[r->obj], r->offset, r->length);
	hash_del(&r->hash);
	list_del(&r->node);
	kfree(r);
	count_dec(live_pins);
	standin_alloc_put(a);
}

/* A pin of @obj by @key; in a process's object, only if @tgid is still in its pid list. */
static struct rm_record *record_find(const void *key, enum rm_object obj, pid_t tgid)
{
	pid_t departed = READ_ONCE(mps_departed_tgid);
	struct rm_record *r;

	if (obj == RM_OBJ_PROCESS && departed && tgid == departed) {
		count_inc(departed_lookups);
		return NULL;
	}

	hash_for_each_possible(records, r, hash, (unsigned long)key)
		if (r->key == key && r->obj == obj && (obj != RM_OBJ_PROCESS || r->tgid == tgid))
			return r;
	return NULL;
}

static bool record_exists(const void *key)
{
	struct rm_record *r;

	hash_for_each_possible(records, r, hash, (unsigned long)key)
		if (r->key == key)
			return true;
	return false;
}

/*
 * The number of 64 KiB page-table entries RmThirdPartyP2PBAR1GetPages emits for @len bytes: it
 * steps 64 KiB at a time while below the range's last byte. For 64 KiB multiples (all 570+ allows)
 * that is len / 64 KiB; for other lengths (550) one entry per 64 KiB begun, except that a last
 * 64 KiB holding only one byte gets none.
 */
static u32 rm_page_count(u64 len)
{
	return len ? DIV_ROUND_UP(len - 1, GPU_PAGE_SIZE) : 0;
}

/* The process lookup (RmP2PGetInfoWithoutToken) with the argument checks RM makes before it. */
static struct standin_alloc *rm_lookup(u64 va, u64 len)
{
	struct standin_alloc *a;

	/* Length 0 is RM's "look up by page table" mode: a new table is never found. */
	a = len ? standin_get_alloc(current->tgid, va, len) : NULL;
	if (!a)
		count_inc(lookup_failures);
	return a;
}

static u8 *rm_copy_uuid(void)
{
	return kmemdup(standin.gpu->uuid, NVIDIA_P2P_GPU_UUID_LEN, GFP_KERNEL);
}

static u64 rm_phys(struct standin_alloc *a, u64 off)
{
	return standin.gpu->bar_phys + a->bar_offset + off;
}

/* ---- the rm_p2p_* entry points ---- */

/*
 * rm_p2p_get_pages (API-lock section #1 of get_pages): find the memory in the calling process,
 * map BAR1, track the pin under @key with no callback yet, return the addresses and a UUID copy.
 */
int rm_p2p_get_pages(u64 p2p_token, u32 va_space, u64 va, u64 len, const void *key,
		     u64 *phys, u32 *entries, u8 **uuid)
{
	struct standin_alloc *a = NULL;
	u8 *id = NULL;
	u64 off;
	int ret;

	ret = rm_api_lock(__func__);
	if (ret)
		return ret;
	ret = -EINVAL;
	/* _rmP2PGetPages checks the VA (all generations); 570+ also the length, as nv-p2p did. */
	if (!IS_ALIGNED(va, GPU_PAGE_SIZE))
		goto out;
	/* No P2P or VA-space tokens exist here: a token names nothing. */
	if (p2p_token) {
		count_inc(lookup_failures);
		goto out;
	}
	a = rm_lookup(va, len);
	if (!a)
		goto out;
	if (va_space) {
		count_inc(lookup_failures);
		goto out;
	}
	ret = -ENOMEM;
	id = rm_copy_uuid();
	if (!id)
		goto out;
	off = va - a->va;
	if (!record_add(a, RM_OBJ_PROCESS, key, off, round_up(len, GPU_PAGE_SIZE)))
		goto out;
	*phys = rm_phys(a, off);
	*entries = rm_page_count(len);
	standin_cost(COST_PIN, *entries);
	*uuid = id;
	id = NULL;
	a = NULL;	/* the record holds the lookup's reference now */
	ret = 0;
out:
	kfree(id);
	if (a)
		standin_alloc_put(a);
	rm_api_unlock();
	return ret;
}

/*
 * rm_p2p_register_callback (API-lock section #2 of get_pages): find the memory again by VA and the
 * record by key, and arm its callback. Memory freed or unregistered since section #1 took the
 * record with it: not found.
 */
int rm_p2p_register_callback(u64 va, u64 len, const void *key,
			     void (*cb)(void *data), void *data)
{
	struct standin_alloc *a;
	struct rm_record *r = NULL;
	int ret;

	ret = rm_api_lock(__func__);
	if (ret)
		return ret;
	a = rm_lookup(va, len);
	if (a) {
		r = record_find(key, RM_OBJ_PROCESS, current->tgid);
		if (r && r->alloc != a)
			r = NULL;
		standin_alloc_put(a);	/* the record, if any, holds its own */
	}
	if (r) {
		WARN_ON(r->free_callback);	/* CliRegisterThirdPartyP2PMappingCallback asserts */
		r->free_callback = cb;
		r->data = data;
	}
	rm_api_unlock();
	return r ? 0 : -EINVAL;		/* NV_ERR_OBJECT_NOT_FOUND */
}

/* rm_p2p_get_gpu_info (section #1 of get_pages_persistent): is it GPU memory of this process? */
int rm_p2p_get_gpu_info(u64 va, u64 len, u8 **uuid)
{
	struct standin_alloc *a;
	int ret;

	ret = rm_api_lock(__func__);
	if (ret)
		return ret;
	a = rm_lookup(va, len);
	if (a && READ_ONCE(mig_enabled) && READ_ONCE(generation) < 570) {
		/* 535/550: MIG is an "unsupported config" for persistent pins (mig_enabled). */
		count_inc(persistent_refusals);
		standin_alloc_put(a);
		ret = -ENOTSUPP;
	} else if (a) {
		*uuid = rm_copy_uuid();
		ret = *uuid ? 0 : -ENOMEM;
		standin_alloc_put(a);
	} else {
		ret = -EINVAL;
	}
	rm_api_unlock();
	return ret;
}

/*
 * rm_p2p_get_pages_persistent (section #2): look the memory up again, and pin it in RM's internal
 * object, whose records keep the memory alive after it is freed (RM dups the handle).
 */
int rm_p2p_get_pages_persistent(u64 va, u64 len, const void *key, bool force_bar1,
				u64 *phys, u32 *entries)
{
	struct standin_alloc *a;
	u64 off;
	int ret;

	ret = rm_api_lock(__func__);
	if (ret)
		return ret;
	/* FORCE_BAR1 (570+) needs a coherent (C2C) GPU with BAR1 on and MIG off: none here. */
	if (force_bar1) {
		ret = -ENOTSUPP;
		goto out;
	}
	a = rm_lookup(va, len);
	if (!a) {
		ret = -EINVAL;
		goto out;
	}
	/* 550 checks no alignment here: an unaligned VA gives pages at unaligned addresses. */
	off = va - a->va;
	if (!record_add(a, RM_OBJ_INTERNAL, key, off, round_up(len, GPU_PAGE_SIZE))) {
		standin_alloc_put(a);
		ret = -ENOMEM;
		goto out;
	}
	*phys = rm_phys(a, off);
	*entries = rm_page_count(len);
	standin_cost(COST_PIN, *entries);
	ret = 0;
out:
	rm_api_unlock();
	return ret;
}

/*
 * rm_p2p_put_pages with token 0: only the calling process's pins are searched, by key. 0: found,
 * unpinned and unlinked (the caller frees the table after the lock). -ESRCH: a pin with that key
 * exists in another object (another process's, or RM's internal one of persistent pins); -ENOENT:
 * none at all. Both are NV_ERR_OBJECT_NOT_FOUND, which nv-p2p turns into success.
 *
 * @newest_at_call is rm_newest_pin_serial() when the caller's put_pages began. A record made after
 * that cannot be the caller's pin: the caller's table had been torn down (freed), and a new pin of
 * the same process made since the call began got its address. RM cannot tell (the key is only
 * compared, NV-PUT-PAGES-LOOKUP) and unpins that other pin without its callback, and nv-p2p frees
 * its table under its owner (550.163.01 nv-p2p.c:321-328); so does the stand-in, after a WARN
 * (reused_put_pages) that names the calling client's race. NVIDIA's nvidia-peermem has it too:
 * its put_pages after the host dropped the mapping lock (PEER_MEM_INVALIDATE_UNMAPS), and the
 * put_pages right after the get_pages of its acquire, are unfenced against a teardown
 * (nvidia-peermem.c 550:153, 209-216, 321-349). A stale put that began after the new pin was made
 * looks like a good one and goes unseen.
 */
u64 rm_newest_pin_serial(void)
{
	return atomic64_read(&newest_serial);
}

int rm_p2p_put_pages(const void *key, u64 newest_at_call)
{
	pid_t creator = READ_ONCE(internal_object_pid);
	struct rm_record *r;
	int ret;

	ret = rm_api_lock(__func__);
	if (ret)
		return ret;
	r = record_find(key, RM_OBJ_PROCESS, current->tgid);
	if (!r && creator && creator == current->tgid) {
		/*
		 * The creator of RM's internal object is in its pid list, so its put_pages finds a
		 * persistent pin by key too (internal_object_pid), and RM deletes it as it would a
		 * pin of the process; nv-p2p then frees the table under its owner. nvidia.ko also
		 * leaks the memory handle RM dup'ed for the pin; the stand-in drops its reference.
		 */
		r = record_find(key, RM_OBJ_INTERNAL, 0);
		if (r)
			count_inc(internal_put_pages);
	}
	if (r) {
		if (r->serial > newest_at_call) {
			count_inc(reused_put_pages);
			WARN(1, "put_pages: %p is the table of a pin made after this put_pages began: the caller's pin was torn down and its table's address reused; unpinning the other pin without its callback, as nvidia.ko does\n",
			     key);
		}
		standin_cost(COST_UNPIN, r->length / GPU_PAGE_SIZE);
		record_del(r);
	} else {
		ret = record_exists(key) ? -ESRCH : -ENOENT;
	}
	rm_api_unlock();
	return ret;
}

/* rm_p2p_put_pages_persistent: the record in RM's internal object, whoever calls. */
int rm_p2p_put_pages_persistent(const void *key)
{
	struct rm_record *r;
	int ret;

	ret = rm_api_lock(__func__);
	if (ret)
		return ret;
	r = record_find(key, RM_OBJ_INTERNAL, 0);
	if (r) {
		standin_cost(COST_UNPIN, r->length / GPU_PAGE_SIZE);
		record_del(r);
	} else {
		ret = -EINVAL;
	}
	rm_api_unlock();
	/* nvidia.ko finds no record only for a table it already freed: it crashes there. */
	WARN(ret, "put_pages_persistent: no persistent pin %p in RM\n", key);
	return ret;
}

/*
 * CliDelThirdPartyP2PVidmemInfo for the process object's part of @a, API lock held: cudaFree,
 * context teardown (last close) or unregistration. For each pin: its free callback (when section
 * #2 armed one), which frees the nv-p2p side as soon as the client's callback returns, then the
 * record and its BAR1 extents go. A pin still between the two sections of get_pages has no
 * callback yet: its record goes silently and get_pages fails.
 */
void rm_del_vidmem_locked(struct standin_alloc *a)
{
	struct rm_vidmem *vm = &a->vidmem[RM_OBJ_PROCESS];
	struct rm_record *r;
	unsigned int delay_ms;

	rm_assert_locked();
	while ((r = list_first_entry_or_null(&vm->records, struct rm_record, node))) {
		if (r->free_callback) {
			delay_ms = READ_ONCE(standin.free_callback_delay_ms);
			if (delay_ms)
				msleep(delay_ms);
			race_point(RP_TEARDOWN_BEFORE_CALLBACK);
			r->free_callback(r->data);
		}
		record_del(r);
	}
}

/* Module unload with pins left (a client leaked persistent pins and went away), API lock held. */
void rm_free_leftover_records(void)
{
	struct rm_record *r;
	struct hlist_node *tmp;
	int bkt;

	rm_assert_locked();
	hash_for_each_safe(records, bkt, tmp, r, hash) {
		pr_err("unload: %s pin %p of %#llx+%#llx leaked by its client; freeing it\n",
		       r->obj == RM_OBJ_INTERNAL ? "persistent" : "non-persistent", r->key,
		       r->offset, r->length);
		count_inc(leaked_at_unload);
		nv_p2p_free_page_table((struct nvidia_p2p_page_table *)r->key);
		record_del(r);
	}
}

/* ---- dma_map_pages's middle ---- */

/* nv_pci_has_common_pci_switch: any upstream bridge of the GPU that is one of the peer's too. */
static bool has_common_upstream_bridge(struct pci_dev *gpu, struct pci_dev *peer)
{
	struct pci_dev *x, *y;

	for (x = pci_upstream_bridge(gpu); x; x = pci_upstream_bridge(x))
		for (y = pci_upstream_bridge(peer); y; y = pci_upstream_bridge(y))
			if (x == y)
				return true;
	return false;
}

/* nv_grdma_pci_topology_supported (580+), on a GPU that is never coherent here. */
static bool topology_supported(struct pci_dev *gpu, struct pci_dev *peer)
{
	switch (READ_ONCE(grdma_pci_topo_check_override)) {
	case 1:
		return true;
	case 2:
		return false;
	}
	if (READ_ONCE(passthrough_vm))
		return true;
	if (READ_ONCE(p2p_unsupported_chipset))
		return has_common_upstream_bridge(gpu, peer);
	return true;
}

/*
 * Without IOMMU translation dma_map_resource() hands back the bus address and warns when the
 * peer's mask cannot reach it; nvidia.ko fails such a mapping quietly, so check first.
 */
static bool peer_can_reach(struct pci_dev *peer, u64 phys)
{
	struct iommu_domain *dom = iommu_get_domain_for_dev(&peer->dev);
	u64 limit;

	if (dom && (dom->type & __IOMMU_DOMAIN_PAGING))
		return true;
	limit = min_not_zero(dma_get_mask(&peer->dev), peer->dev.bus_dma_limit);
	return phys + GPU_PAGE_SIZE - 1 <= limit;
}

/*
 * rm_p2p_dma_map_pages: under the API lock, find the GPU by the table's UUID, check the topology
 * (580+), and map every page for the peer; @dma holds the physical addresses on entry and the DMA
 * addresses after, @phys the physical addresses throughout (for standin_page_mapping).
 *
 * A page that fails is what nvidia.ko makes of it up to 580: nv_dma_map_mmio leaves
 * DMA_MAPPING_ERROR in its entry (550.163.01 kernel-open/nvidia/nv-dma.c:878-899), and the
 * loop unmaps the pages before it and goes on with the next page, so that the status returned is
 * the last page's (NV-PARTIAL-DMA-MAP; 590 stops at the failure). A failure before the last
 * page is reported as a mapping made, with the pages up to the failed one not mapped: recorded in
 * *@unmapped (allocated here, NULL when every page is mapped), counted in half_mappings.
 */
int rm_p2p_dma_map_pages(struct pci_dev *peer, const u8 *uuid, u32 page_count, const u64 *phys,
			 u64 *dma, unsigned long **unmapped)
{
	struct standin_gpu *gpu;
	unsigned long *gone = NULL;
	dma_addr_t addr;
	u32 i, j, fail;
	int ret;

	*unmapped = NULL;
	ret = rm_api_lock(__func__);
	if (ret)
		return ret;
	race_point(RP_DMA_MAP_LOCKED);
	gpu = standin.gpu;
	ret = -EINVAL;
	if (!gpu || memcmp(uuid, gpu->uuid, NVIDIA_P2P_GPU_UUID_LEN))
		goto out;
	if (READ_ONCE(generation) >= 580 && !topology_supported(gpu->pdev, peer)) {
		count_inc(topology_refusals);
		pr_info("dma_map_pages: GPU %s and peer %s: topology not supported (580: override %u, pass-through %d, P2P-unsupported chipset %d)\n",
			pci_name(gpu->pdev), pci_name(peer), grdma_pci_topo_check_override,
			passthrough_vm, p2p_unsupported_chipset);
		ret = -ENOTSUPP;
		goto out;
	}
	fail = xchg(&standin.dma_map_fail_page, 0);
	for (i = 0; i < page_count; i++) {
		addr = DMA_MAPPING_ERROR;
		if (i + 1 == fail)
			pr_err("dma_map_pages: mapping %#llx for %s failed (dma_map_fail_page)\n",
			       dma[i], pci_name(peer));
		else if (!peer_can_reach(peer, dma[i]))
			pr_err("dma_map_pages: %s cannot address %#llx (DMA mask %#llx)\n",
			       pci_name(peer), dma[i], dma_get_mask(&peer->dev));
		else {
			/* Counted before the mapping exists and uncounted if it fails: never less than
			 * what DMA-API debugging counts. */
			standin_page_mapping(phys[i], true);
			addr = dma_map_resource(&peer->dev, dma[i], GPU_PAGE_SIZE, DMA_BIDIRECTIONAL, 0);
			if (dma_mapping_error(&peer->dev, addr))
				standin_page_mapping(phys[i], false);
		}
		if (!dma_mapping_error(&peer->dev, addr)) {
			dma[i] = addr;
			ret = 0;
			continue;
		}
		count_inc(dma_map_errors);
		dma[i] = DMA_MAPPING_ERROR;
		ret = -EIO;
		if (!gone) {
			gone = bitmap_zalloc(page_count, GFP_KERNEL);
			if (WARN_ON(!gone))	/* the stand-in's own bookkeeping */
				break;
		}
		set_bit(i, gone);
		/* nvidia.ko unmaps every page before the failed one, already unmapped or not. */
		for (j = 0; j < i; j++) {
			if (test_and_set_bit(j, gone))
				count_inc(half_map_unmaps);
			else {
				dma_unmap_resource(&peer->dev, dma[j], GPU_PAGE_SIZE, DMA_BIDIRECTIONAL, 0);
				standin_page_mapping(phys[j], false);
			}
		}
	}
	if (ret) {
		/* The last page failed: nvidia.ko reports the failure, and nv-p2p frees the array. */
		bitmap_free(gone);
		goto out;
	}
	if (gone) {
		count_inc(half_mappings);
		*unmapped = gone;
	}
out:
	rm_api_unlock();
	return ret;
}
