// SPDX-License-Identifier: GPL-2.0
/*
 * NVIDIA P2P stand-in: every function nv-p2p.h declares, as nvidia.ko's nv-p2p.c implements them
 * on top of RM (standin_rm.c): the pin allocation with its embedded page table, DMA-mapping list
 * and semaphore; the two API-lock sections of get_pages; the table read before the lock and the
 * list insert after it in dma_map_pages; dma_unmap_pages under the pin's semaphore alone; the
 * free callback wrapper that frees everything as soon as the client's callback returns. Written
 * from reading NVIDIA's open sources, no code copied; README.md cites the lines each part follows.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/dma-mapping.h>
#include <linux/ktime.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/sched.h>
#include <linux/slab.h>
#include <linux/string.h>
#include <linux/xarray.h>

#include "standin.h"

/* nvidia.ko allocates each nvidia_p2p_page from a cache of its own (nvidia_p2p_page_t_cache). */
static struct kmem_cache *page_cache;

/*
 * The stand-in's own bookkeeping, not nvidia.ko's: how many live DMA mappings each GPU page has,
 * by physical address, and in peak_page_mappings the most one page has had at once. Counted so
 * that it is never less than what DMA-API debugging counts: up before dma_map_resource() (down
 * again if it fails), down after dma_unmap_resource(). DMA-API debugging warns once per boot when
 * one cacheline has more than seven overlapping live mappings (kernel/dma/debug.c,
 * ACTIVE_CACHELINE_MAX_OVERLAP) and is silent after that and on kernels without it; this count
 * holds on every kernel, for a test that bounds the sharing of a page (stress --max-per-page).
 * page_mappings_lock is a leaf: taken in process context (under the API lock when mapping, under
 * nothing when unmapping), nothing is called under it but the xarray's own, whose allocations
 * cannot fail (__GFP_NOFAIL, which failslab also leaves alone: stress injects failures into
 * allocations made under the client's calls, these included).
 */
static DEFINE_MUTEX(page_mappings_lock);
static DEFINE_XARRAY(page_mappings);

void standin_page_mapping(u64 phys, bool mapped)
{
	unsigned long idx = phys / GPU_PAGE_SIZE, n;

	mutex_lock(&page_mappings_lock);
	n = xa_to_value(xa_load(&page_mappings, idx));
	if (!mapped) {
		if (n > 1)
			xa_store(&page_mappings, idx, xa_mk_value(n - 1), GFP_KERNEL);
		else
			xa_erase(&page_mappings, idx);
	} else {
		xa_store(&page_mappings, idx, xa_mk_value(n + 1), GFP_KERNEL | __GFP_NOFAIL);
		if (n + 1 > atomic64_read(&standin.c.peak_page_mappings))
			atomic64_set(&standin.c.peak_page_mappings, n + 1);
	}
	mutex_unlock(&page_mappings_lock);
}

int standin_p2p_init(void)
{
	spin_lock_init(&standin.recycle_lock);
	page_cache = KMEM_CACHE(nvidia_p2p_page, 0);
	return page_cache ? 0 : -ENOMEM;
}

void standin_p2p_exit(void)
{
	kfree(standin.recycled);
	standin.recycled = NULL;
	kmem_cache_destroy(page_cache);
	xa_destroy(&page_mappings);
}

/*
 * A new pin: when recycle_freed_pins is set, the non-persistent pin freed last (the address a slab
 * allocator without KASAN's quarantine would give) goes to the next non-persistent pin, or with
 * recycle_into_persistent to the next persistent one; else a new allocation.
 */
static struct standin_pin *pin_alloc(bool persistent)
{
	struct standin_pin *pin = NULL;

	if (persistent == READ_ONCE(standin.recycle_into_persistent) &&
	    READ_ONCE(standin.recycle_freed_pins)) {
		spin_lock(&standin.recycle_lock);
		swap(pin, standin.recycled);
		spin_unlock(&standin.recycle_lock);
	}
	if (pin) {
		memset(pin, 0, sizeof(*pin));
		count_inc(recycled_pins);
		return pin;
	}
	return kzalloc(sizeof(*pin), GFP_KERNEL);
}

/* The pin's memory, kept for the next pin_alloc when recycle_freed_pins is set and none is kept. */
static void pin_free(struct standin_pin *pin)
{
	if (!pin->persistent && READ_ONCE(standin.recycle_freed_pins)) {
		spin_lock(&standin.recycle_lock);
		if (!standin.recycled)
			swap(pin, standin.recycled);
		spin_unlock(&standin.recycle_lock);
	}
	kfree(pin);
}

static struct standin_pin *to_pin(struct nvidia_p2p_page_table *page_table)
{
	return container_of(page_table, struct standin_pin, page_table.base);
}

/* nv_p2p_free_dma_mapping: unmap for the peer the mapping was made for (not referenced). */
static void nv_p2p_free_dma_mapping(struct standin_dma_map *map)
{
	struct nvidia_p2p_dma_mapping *m = &map->m;
	u32 i;

	for (i = 0; i < m->entries; i++) {
		/*
		 * nvidia.ko unmaps every entry, also those a half-made mapping left unmapped (the
		 * failed page's DMA_MAPPING_ERROR, and the pages before it): with an IOMMU or DMA-API
		 * debugging that is a splat there. The stand-in counts them instead, whichever client:
		 * no client can keep the driver from it once the mapping exists.
		 */
		if (map->unmapped && test_bit(i, map->unmapped)) {
			count_inc(half_map_unmaps);
			continue;
		}
		dma_unmap_resource(&m->pci_dev->dev, m->dma_addresses[i], GPU_PAGE_SIZE,
				   DMA_BIDIRECTIONAL, 0);
		standin_page_mapping(map->phys[i], false);
	}
	kfree(map->phys);
	bitmap_free(map->unmapped);
	kfree(m->dma_addresses);
	kfree(map);
	count_dec(live_dma_mappings);
}

/* nv_p2p_remove_dma_mapping(mem_info, NULL): take the first mapping off, under the semaphore. */
static struct standin_dma_map *remove_first_dma_mapping(struct standin_pin *pin)
{
	struct standin_dma_map *map;

	down(&pin->dma_mappings.lock);
	map = list_first_entry_or_null(&pin->dma_mappings.list, struct standin_dma_map, node);
	if (map)
		list_del(&map->node);
	up(&pin->dma_mappings.lock);
	return map;
}

/*
 * nv_p2p_free_page_table: every remaining DMA mapping, the pages, the UUID, the pin. No RM lock of
 * its own. Returns how many DMA mappings it unmapped.
 */
unsigned int nv_p2p_free_page_table(struct nvidia_p2p_page_table *page_table)
{
	struct standin_pin *pin = to_pin(page_table);
	struct standin_dma_map *map;
	unsigned int maps = 0;
	u32 i;

	while ((map = remove_first_dma_mapping(pin))) {
		nv_p2p_free_dma_mapping(map);
		maps++;
	}
	for (i = 0; i < page_table->entries; i++)
		kmem_cache_free(page_cache, page_table->pages[i]);
	kfree(page_table->gpu_uuid);
	kfree(page_table->pages);
	pin_free(pin);
	count_dec(live_page_tables);
	return maps;
}

/*
 * What RM calls for a pin when its memory goes (nv_p2p_mem_info_free_callback), API lock held:
 * the client's callback, then at once the table, its DMA mappings and the pin are freed.
 */
void nv_p2p_mem_info_free_callback(void *data)
{
	struct standin_pin *pin = data;
	unsigned int maps;

	pin->free_callback(pin->data);
	count_inc(free_callbacks);
	race_point(RP_TEARDOWN_AFTER_CALLBACK);
	maps = nv_p2p_free_page_table(&pin->page_table.base);
	count_inc(teardown_page_tables);
	count_add(teardown_dma_mappings, maps);
}

/*
 * nv_p2p_get_pages. The pin is allocated and *page_table pointed at it before RM is asked, so on
 * a failure *page_table is left pointing at freed memory, as nvidia.ko leaves it; only argument
 * errors found before that leave it untouched. Non-persistent: RM section #1 (pin, no callback),
 * the table filled without a lock, RM section #2 (callback armed). Persistent: RM's GPU lookup,
 * then the pin in RM's internal object.
 */
static int nv_p2p_get_pages(bool persistent, u64 p2p_token, u32 va_space, u64 va, u64 len,
			    u32 flags, struct nvidia_p2p_page_table **page_table,
			    void (*free_callback)(void *data), void *data)
{
	unsigned int gen = READ_ONCE(generation);
	struct nvidia_p2p_page_table *pt;
	struct nvidia_p2p_page *page;
	bool force_bar1 = false, got_pages = false, device_held = false;
	struct standin_pin *pin;
	u32 entries = 0, i;
	u8 *uuid = NULL;
	u64 phys = 0;
	int ret, put;

	if (!page_table)
		return -EINVAL;
	if (gen >= 570) {
		if (!IS_ALIGNED(va, GPU_PAGE_SIZE) || !IS_ALIGNED(len, GPU_PAGE_SIZE))
			return -EINVAL;
		/* The flags travel as a u8: only bit 0 of the low byte means anything. */
		force_bar1 = (u8)flags & STANDIN_FLAGS_FORCE_BAR1_MAPPING;
	}

	*page_table = NULL;
	pin = pin_alloc(persistent);
	if (!pin)
		return -ENOMEM;
	INIT_LIST_HEAD(&pin->dma_mappings.list);
	sema_init(&pin->dma_mappings.lock, 1);
	pin->persistent = persistent;
	count_inc(live_page_tables);
	pt = &pin->page_table.base;
	*page_table = pt;

	if (persistent) {
		ret = rm_p2p_get_gpu_info(va, len, &uuid);
		if (ret)
			goto failed;
		pt->gpu_uuid = uuid;
		/*
		 * nvidia_dev_get_uuid (NV-DEVICE-REF): opens the device and raises RM's external
		 * kernel client count until put_pages_persistent, so the GPU is in use while the
		 * pin lives (the reset debugfs file).
		 */
		count_inc(kernel_clients);
		device_held = true;
		ret = rm_p2p_get_pages_persistent(va, len, pt, force_bar1, &phys, &entries);
		if (ret)
			goto failed;
	} else {
		ret = rm_p2p_get_pages(p2p_token, va_space, va, len, pt, &phys, &entries, &uuid);
		if (ret)
			goto failed;
		pt->gpu_uuid = uuid;
		race_point(RP_GET_PAGES_PINNED);
	}
	got_pages = true;

	ret = -ENOMEM;
	pt->pages = kcalloc(entries, sizeof(*pt->pages), GFP_KERNEL);
	if (!pt->pages)
		goto failed;
	pt->version = standin_page_table_version();
	for (i = 0; i < entries; i++) {
		page = kmem_cache_zalloc(page_cache, GFP_KERNEL);
		if (!page)
			goto failed;
		page->physical_address = phys + (u64)i * GPU_PAGE_SIZE;
		pt->pages[i] = page;
		pt->entries++;
	}
	pt->page_size = NVIDIA_P2P_PAGE_SIZE_64KB;
	/* 2.0's flags stay 0: no CPU-cacheable (coherent C2C/NVLink) memory here. */
	pin->page_table.flags = 0;

	if (persistent) {
		race_point(RP_GET_PAGES_PERSISTENT_RETURN);
		return 0;
	}
	pin->free_callback = free_callback;
	pin->data = data;
	ret = rm_p2p_register_callback(va, len, pt, nv_p2p_mem_info_free_callback, pin);
	if (ret)
		goto failed;
	race_point(RP_GET_PAGES_RETURN);
	return 0;

failed:
	if (got_pages) {
		/* Unpin through RM as put_pages would, from this same task. */
		put = persistent ? rm_p2p_put_pages_persistent(pt) :
				     rm_p2p_put_pages(pt, rm_newest_pin_serial());
		if (!put || put == -ENOENT || put == -ESRCH)
			*page_table = NULL;
		if (put == -ENOENT || put == -ESRCH) {
			/*
			 * The memory went between the two sections and RM dropped the pin without a
			 * callback. nvidia.ko leaks the table here (550.163.01 nv-p2p.c:598-612: its
			 * put_pages clears the pointer on "not found", so the free is skipped); we count
			 * that and free it. A deviation when a stale put_pages of a client unpinned
			 * this table first (docs/stress.md, the benchmark-kernel run): that put freed
			 * it, nvidia.ko has written into it since (the fill between the sections,
			 * nv-p2p.c:520-554) and its put here finds nothing and skips the free
			 * (330-335, 609-612); the stand-in frees it a second time, harsher. That put
			 * WARNs first when it began before this pin was made (reused_put_pages).
			 */
			count_inc(leaked_by_driver);
			pr_info("get_pages: %#llx+%#llx was freed while being pinned: -EINVAL (nvidia.ko leaks its table here)\n",
				va, len);
		}
	}
	if (device_held)
		count_dec(kernel_clients);	/* nvidia_dev_put_uuid on the way out (bGetUuid) */
	nv_p2p_free_page_table(pt);
	return ret;
}

static int p2p_get_pages(uint64_t p2p_token, uint32_t va_space, uint64_t virtual_address,
			 uint64_t length, struct nvidia_p2p_page_table **page_table,
			 void (*free_callback)(void *data), void *data)
{
	int ret = standin_inject(FN_GET_PAGES);

	if (ret)
		return ret;
	if (!free_callback)
		return -EINVAL;		/* 535+ */
	return nv_p2p_get_pages(false, p2p_token, va_space, virtual_address, length, 0,
				page_table, free_callback, data);
}

static int p2p_get_pages_persistent(uint64_t virtual_address, uint64_t length,
				    struct nvidia_p2p_page_table **page_table, uint32_t flags)
{
	int ret = standin_inject(FN_GET_PAGES_PERSISTENT);

	if (ret)
		return ret;
	/* 550 wants 0; 570+ reads FORCE_BAR1 and ignores the rest. */
	if (flags && READ_ONCE(generation) < 570)
		return -EINVAL;
	return nv_p2p_get_pages(true, 0, 0, virtual_address, length, flags, page_table,
				NULL, NULL);
}

/*
 * The table is only a key here: RM searches the calling process's pins for it. Not found (another
 * process, a kworker, a forked child, or torn down already) is success with nothing unpinned, and
 * a pin that was not found keeps its callback armed.
 */
static int p2p_put_pages(uint64_t p2p_token, uint32_t va_space, uint64_t virtual_address,
			 struct nvidia_p2p_page_table *page_table)
{
	u64 newest_at_call = rm_newest_pin_serial();
	int ret = standin_inject(FN_PUT_PAGES);

	if (ret)
		return ret;
	if (!page_table)
		return 0;
	race_point(RP_PUT_PAGES_BEFORE_LOCK);
	ret = rm_p2p_put_pages(page_table, newest_at_call);
	if (ret == -ESRCH || ret == -ENOENT) {
		if (ret == -ESRCH)
			count_inc(foreign_put_pages);
		else
			count_inc(stale_put_pages);
		return 0;
	}
	if (ret)
		return ret;	/* -EIO: the API lock re-entered (rm_api_lock WARNed) */
	race_point(RP_PUT_PAGES_UNLINKED);
	nv_p2p_free_page_table(page_table);
	return 0;
}

/*
 * Persistent tables are found through themselves (container_of), from any task: nvidia.ko reads
 * the table before anything else, so a freed one is a use after free here too.
 */
static int p2p_put_pages_persistent(uint64_t virtual_address,
				    struct nvidia_p2p_page_table *page_table, uint32_t flags)
{
	u8 uuid[NVIDIA_P2P_GPU_UUID_LEN];
	struct standin_pin *pin;
	int ret = standin_inject(FN_PUT_PAGES_PERSISTENT);

	if (ret)
		return ret;
	if (flags)
		return -EINVAL;
	if (!page_table)
		return 0;
	/* For nvidia_dev_put_uuid, which the stand-in has no use for: the read is what matters. */
	memcpy(uuid, page_table->gpu_uuid, sizeof(uuid));
	pin = to_pin(page_table);
	if (!pin->persistent) {
		/* nvidia.ko passes RM a NULL object here and crashes. */
		count_inc(bad_put_pages);
		WARN(1, "put_pages_persistent: %p is a non-persistent page table\n", page_table);
		return -EINVAL;
	}
	race_point(RP_PUT_PAGES_PERSISTENT_BEFORE_LOCK);
	ret = rm_p2p_put_pages_persistent(page_table);
	if (!ret)
		nv_p2p_free_page_table(page_table);
	count_dec(kernel_clients);	/* nvidia_dev_put_uuid, whatever RM said (NV-DEVICE-REF) */
	return ret;
}

/*
 * The table is read (really dereferenced) before the API lock, the pages mapped under it, and the
 * mapping linked into the pin's list under its semaphore after it. Nothing checks that the table
 * is still alive: a teardown in between is a use after free, as in nvidia.ko.
 */
static int p2p_dma_map_pages(struct pci_dev *peer, struct nvidia_p2p_page_table *page_table,
			     struct nvidia_p2p_dma_mapping **dma_mapping)
{
	struct standin_dma_map *map;
	struct standin_pin *pin;
	u32 page_count, i;
	u64 *dma = NULL;
	int ret = standin_inject(FN_DMA_MAP_PAGES);

	if (ret)
		return ret;
	if (!peer || !page_table || !dma_mapping || !page_table->gpu_uuid)
		return -EINVAL;
	pin = to_pin(page_table);
	*dma_mapping = NULL;
	map = kzalloc(sizeof(*map), GFP_KERNEL);
	if (!map)
		return -ENOMEM;
	ret = -ENOMEM;
	page_count = page_table->entries;
	dma = kcalloc(page_count, sizeof(*dma), GFP_KERNEL);
	if (!dma)
		goto failed;
	/* nvidia.ko BUG()s on these; a WARN is splat enough and keeps the VM alive. */
	ret = -EINVAL;
	if (WARN_ON(page_table->page_size != NVIDIA_P2P_PAGE_SIZE_64KB &&
		    page_table->page_size != NVIDIA_P2P_PAGE_SIZE_128KB))
		goto failed;
	for (i = 0; i < page_count; i++)
		dma[i] = page_table->pages[i]->physical_address;
	race_point(RP_DMA_MAP_READ);
	ret = -ENOMEM;
	map->phys = kmalloc_array(page_count, sizeof(*dma), GFP_KERNEL);
	if (!map->phys)
		goto failed;
	memcpy(map->phys, dma, page_count * sizeof(*dma));

	ret = rm_p2p_dma_map_pages(peer, page_table->gpu_uuid, page_count, map->phys, dma,
				   &map->unmapped);
	if (ret)
		goto failed;

	map->m.version = NVIDIA_P2P_DMA_MAPPING_VERSION;
	map->m.page_size_type = page_table->page_size;
	map->m.entries = page_count;
	map->m.dma_addresses = dma;
	map->m.private = NULL;
	map->m.pci_dev = peer;		/* no reference, as in nvidia.ko */
	race_point(RP_DMA_MAP_BEFORE_INSERT);
	down(&pin->dma_mappings.lock);
	list_add_tail(&map->node, &pin->dma_mappings.list);
	up(&pin->dma_mappings.lock);
	count_inc(live_dma_mappings);
	count_inc(total_dma_mappings);
	*dma_mapping = &map->m;
	race_point(RP_DMA_MAP_RETURN);
	return 0;

failed:
	kfree(map->phys);
	kfree(dma);
	kfree(map);
	return ret;
}

/*
 * No RM lock: container_of on the table and its semaphore only. So it works inside a free callback
 * (the table is alive until the callback returns), and on a torn-down table it uses freed memory.
 * A mapping not in the list (unmapped already) is 0 without touching it.
 */
static int p2p_dma_unmap_pages(struct pci_dev *peer, struct nvidia_p2p_page_table *page_table,
			       struct nvidia_p2p_dma_mapping *dma_mapping)
{
	struct standin_dma_map *map, *found = NULL;
	struct standin_pin *pin;
	int ret = standin_inject(FN_DMA_UNMAP_PAGES);

	if (ret)
		return ret;
	if (!peer || !page_table || !dma_mapping)
		return -EINVAL;
	pin = to_pin(page_table);
	race_point(RP_DMA_UNMAP_BEFORE_SEM);
	down(&pin->dma_mappings.lock);
	list_for_each_entry(map, &pin->dma_mappings.list, node) {
		if (&map->m == dma_mapping) {
			list_del(&map->node);
			found = map;
			break;
		}
	}
	up(&pin->dma_mappings.lock);
	if (!found) {
		count_inc(stale_dma_unmaps);
		return 0;
	}
	race_point(RP_DMA_UNMAP_REMOVED);
	if (peer != dma_mapping->pci_dev) {
		count_inc(peer_mismatch_warnings);
		WARN(1, "dma_unmap_pages: peer %s is not %s, the peer the mapping was made for\n",
		     pci_name(peer), pci_name(dma_mapping->pci_dev));
	}
	nv_p2p_free_dma_mapping(found);
	return 0;
}

/*
 * The exported entry points: each call counted (calls_<fn>) and timed (ns_<fn>) around the
 * function above that does it, so that a benchmark can tell the provider's time from a client's.
 */
#define TIMED(fn, call) ({					\
	u64 t0_ = ktime_get_ns();				\
	int ret_ = (call);					\
								\
	count_inc(calls_##fn);					\
	count_add(ns_##fn, ktime_get_ns() - t0_);		\
	ret_;							\
})

int nvidia_p2p_get_pages(uint64_t p2p_token, uint32_t va_space, uint64_t virtual_address,
			 uint64_t length, struct nvidia_p2p_page_table **page_table,
			 void (*free_callback)(void *data), void *data)
{
	return TIMED(get_pages, p2p_get_pages(p2p_token, va_space, virtual_address, length,
						page_table, free_callback, data));
}
EXPORT_SYMBOL(nvidia_p2p_get_pages);

int nvidia_p2p_get_pages_persistent(uint64_t virtual_address, uint64_t length,
				    struct nvidia_p2p_page_table **page_table, uint32_t flags)
{
	return TIMED(get_pages_persistent,
		     p2p_get_pages_persistent(virtual_address, length, page_table, flags));
}
EXPORT_SYMBOL(nvidia_p2p_get_pages_persistent);

int nvidia_p2p_put_pages(uint64_t p2p_token, uint32_t va_space, uint64_t virtual_address,
			 struct nvidia_p2p_page_table *page_table)
{
	return TIMED(put_pages, p2p_put_pages(p2p_token, va_space, virtual_address, page_table));
}
EXPORT_SYMBOL(nvidia_p2p_put_pages);

int nvidia_p2p_put_pages_persistent(uint64_t virtual_address,
				    struct nvidia_p2p_page_table *page_table, uint32_t flags)
{
	return TIMED(put_pages_persistent,
		     p2p_put_pages_persistent(virtual_address, page_table, flags));
}
EXPORT_SYMBOL(nvidia_p2p_put_pages_persistent);

int nvidia_p2p_dma_map_pages(struct pci_dev *peer, struct nvidia_p2p_page_table *page_table,
			     struct nvidia_p2p_dma_mapping **dma_mapping)
{
	return TIMED(dma_map_pages, p2p_dma_map_pages(peer, page_table, dma_mapping));
}
EXPORT_SYMBOL(nvidia_p2p_dma_map_pages);

int nvidia_p2p_dma_unmap_pages(struct pci_dev *peer, struct nvidia_p2p_page_table *page_table,
			       struct nvidia_p2p_dma_mapping *dma_mapping)
{
	return TIMED(dma_unmap_pages, p2p_dma_unmap_pages(peer, page_table, dma_mapping));
}
EXPORT_SYMBOL(nvidia_p2p_dma_unmap_pages);

/* nvidia.ko frees both structures itself; these remain for old callers and do nothing. */
int nvidia_p2p_free_page_table(struct nvidia_p2p_page_table *page_table)
{
	return 0;
}
EXPORT_SYMBOL(nvidia_p2p_free_page_table);

int nvidia_p2p_free_dma_mapping(struct nvidia_p2p_dma_mapping *dma_mapping)
{
	return 0;
}
EXPORT_SYMBOL(nvidia_p2p_free_dma_mapping);

/* The pre-UVA mailbox API: gone from every driver this project supports. */
int nvidia_p2p_init_mapping(uint64_t p2p_token, struct nvidia_p2p_params *params,
			    void (*destroy_callback)(void *data), void *data)
{
	return -ENOTSUPP;
}
EXPORT_SYMBOL(nvidia_p2p_init_mapping);

int nvidia_p2p_destroy_mapping(uint64_t p2p_token)
{
	return -ENOTSUPP;
}
EXPORT_SYMBOL(nvidia_p2p_destroy_mapping);

/*
 * The rsync (IBM NPU relaxed-ordering) hooks: registration is only bookkeeping in nvidia.ko, and
 * without an NPU there are no registers to hand out.
 */
static DEFINE_MUTEX(rsync_lock);
static nvidia_p2p_rsync_driver_t rsync_driver;
static void *rsync_data;

static bool rsync_driver_valid(const nvidia_p2p_rsync_driver_t *driver)
{
	return driver && NVIDIA_P2P_RSYNC_DRIVER_VERSION_COMPATIBLE(driver) &&
	       driver->get_relaxed_ordering_mode && driver->put_relaxed_ordering_mode &&
	       driver->wait_for_rsync;
}

int nvidia_p2p_register_rsync_driver(nvidia_p2p_rsync_driver_t *driver, void *data)
{
	int ret = 0;

	if (!rsync_driver_valid(driver))
		return -EINVAL;
	mutex_lock(&rsync_lock);
	if (rsync_driver.get_relaxed_ordering_mode) {
		ret = -EBUSY;
	} else {
		rsync_driver = *driver;
		rsync_data = data;
	}
	mutex_unlock(&rsync_lock);
	return ret;
}
EXPORT_SYMBOL(nvidia_p2p_register_rsync_driver);

void nvidia_p2p_unregister_rsync_driver(nvidia_p2p_rsync_driver_t *driver, void *data)
{
	if (!rsync_driver_valid(driver)) {
		pr_warn("unregister_rsync_driver: invalid driver\n");
		return;
	}
	mutex_lock(&rsync_lock);
	if (rsync_driver.get_relaxed_ordering_mode != driver->get_relaxed_ordering_mode ||
	    rsync_driver.put_relaxed_ordering_mode != driver->put_relaxed_ordering_mode ||
	    rsync_driver.wait_for_rsync != driver->wait_for_rsync || rsync_data != data)
		pr_warn("unregister_rsync_driver: not the registered driver\n");
	memset(&rsync_driver, 0, sizeof(rsync_driver));
	rsync_data = NULL;
	mutex_unlock(&rsync_lock);
}
EXPORT_SYMBOL(nvidia_p2p_unregister_rsync_driver);

int nvidia_p2p_get_rsync_registers(nvidia_p2p_rsync_reg_info_t **reg_info)
{
	if (!reg_info)
		return -EINVAL;
	return -ENODEV;
}
EXPORT_SYMBOL(nvidia_p2p_get_rsync_registers);

void nvidia_p2p_put_rsync_registers(nvidia_p2p_rsync_reg_info_t *reg_info)
{
	/* get_rsync_registers never hands any out. */
	if (reg_info)
		pr_warn("put_rsync_registers: %p was not handed out by this driver\n", reg_info);
}
EXPORT_SYMBOL(nvidia_p2p_put_rsync_registers);
