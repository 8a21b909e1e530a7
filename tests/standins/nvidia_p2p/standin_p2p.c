// SPDX-License-Identifier: GPL-2.0
/*
 * NVIDIA P2P stand-in: every function nv-p2p.h declares, with nvidia.ko's observable behaviour
 * (argument checks, errnos, lookup by the calling process, free callbacks, teardown) on top of the
 * ivshmem "GPU". Written from the header and from reading NVIDIA's open nv-p2p.c; README.md lists
 * where it deliberately differs.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/delay.h>
#include <linux/dma-mapping.h>
#include <linux/iommu.h>
#include <linux/module.h>
#include <linux/sched.h>
#include <linux/slab.h>

#include "standin.h"

/*
 * nvidia.ko holds its own locks while a free callback runs; a client calling back into the API
 * from there would deadlock on them. We hold standin.lock there too, so instead of hanging (or a
 * lockdep report about our own lock) the call is refused, loudly and countably.
 */
static bool reentered(const char *fn)
{
	if (READ_ONCE(standin.in_callback) != current)
		return false;
	count_inc(callback_reentries);
	pr_warn_ratelimited("%s called from inside a free callback on the same task (%s[%d]): refused with EBUSY, the driver frees that table itself\n",
			    fn, current->comm, current->pid);
	return true;
}

/*
 * What every API entry point does first: refuse a call from inside a free callback, then count the
 * call for fault injection (which may fail it). Returns 0 or the errno to return.
 */
static int enter_api(const char *fn, enum standin_fn which)
{
	if (reentered(fn))
		return -EBUSY;
	return standin_inject(which);
}

/* Under standin.lock. Pins are found by the pointer value only: never dereference a client's. */
static struct standin_pin *find_pin_locked(const struct nvidia_p2p_page_table *pt)
{
	struct standin_pin *pin;

	list_for_each_entry(pin, &standin.pins, node)
		if (pin->pt == pt)
			return pin;
	return NULL;
}

static struct standin_map *find_map_locked(struct standin_pin *pin,
					   const struct nvidia_p2p_dma_mapping *m)
{
	struct standin_map *map;

	list_for_each_entry(map, &pin->maps, node)
		if (map->m == m)
			return map;
	return NULL;
}

static void map_free(struct standin_map *map)
{
	u32 i;

	for (i = 0; i < map->entries; i++)
		dma_unmap_resource(&map->peer->dev, map->dma[i], GPU_PAGE_SIZE, DMA_BIDIRECTIONAL, 0);
	kfree(map->dma);
	kfree(map->m);
	pci_dev_put(map->peer);
	kfree(map);
	count_dec(live_dma_mappings);
}

/* Under standin.lock, @pin already off standin.pins: free it and every DMA mapping of it. */
static unsigned int pin_free_locked(struct standin_pin *pin)
{
	struct standin_map *map, *tmp;
	unsigned int maps = 0;

	list_for_each_entry_safe(map, tmp, &pin->maps, node) {
		list_del(&map->node);
		map_free(map);
		maps++;
	}
	kfree(pin->pt);
	kfree(pin->page_ptrs);
	kfree(pin->pages);
	kfree(pin->uuid);
	count_dec(live_pins);
	count_dec(live_page_tables);
	count_sub(bar1_pinned_bytes, pin->len);
	pin->alloc->pins--;
	standin_alloc_put(pin->alloc);
	kfree(pin);
	return maps;
}

static struct standin_pin *pin_create(struct standin_gpu *gpu, struct standin_alloc *a,
				      u64 va, u64 len)
{
	u32 version = READ_ONCE(page_table_version);
	u32 n = len / GPU_PAGE_SIZE, i;
	struct standin_pin *pin;

	pin = kzalloc(sizeof(*pin), GFP_KERNEL);
	if (!pin)
		return NULL;
	INIT_LIST_HEAD(&pin->maps);
	pin->alloc = a;
	pin->va = va;
	pin->len = len;
	pin->entries = n;
	pin->phys = gpu->bar_phys + a->bar_offset + (va - a->va);
	/* Separate allocations, as nvidia.ko makes them, so KASAN sees each one die. */
	if (version == PAGE_TABLE_VERSION_2_0)
		pin->pt = kzalloc(sizeof(struct page_table_v2), GFP_KERNEL);
	else
		pin->pt = kzalloc(sizeof(struct nvidia_p2p_page_table), GFP_KERNEL);
	pin->page_ptrs = kcalloc(n, sizeof(*pin->page_ptrs), GFP_KERNEL);
	pin->pages = kcalloc(n, sizeof(*pin->pages), GFP_KERNEL);
	pin->uuid = kmemdup(gpu->uuid, NVIDIA_P2P_GPU_UUID_LEN, GFP_KERNEL);
	if (!pin->pt || !pin->page_ptrs || !pin->pages || !pin->uuid) {
		kfree(pin->pt);
		kfree(pin->page_ptrs);
		kfree(pin->pages);
		kfree(pin->uuid);
		kfree(pin);
		return NULL;
	}
	for (i = 0; i < n; i++) {
		pin->pages[i].physical_address = pin->phys + (u64)i * GPU_PAGE_SIZE;
		pin->page_ptrs[i] = &pin->pages[i];
	}
	pin->pt->version = version;
	pin->pt->page_size = NVIDIA_P2P_PAGE_SIZE_64KB;
	pin->pt->pages = pin->page_ptrs;
	pin->pt->entries = n;
	pin->pt->gpu_uuid = pin->uuid;
	/* 2.0's flags stay 0: no CPU-cacheable (coherent C2C/NVLink) memory here. */
	return pin;
}

static int get_pages_common(u64 va, u64 len, struct nvidia_p2p_page_table **page_table,
			    void (*free_callback)(void *data), void *data, bool persistent)
{
	struct standin_alloc *a;
	struct standin_gpu *gpu;
	struct standin_pin *pin;
	u64 reserve, limit;
	int ret;

	if (!page_table)
		return -EINVAL;
	*page_table = NULL;
	if (!len || !IS_ALIGNED(va, GPU_PAGE_SIZE) || !IS_ALIGNED(len, GPU_PAGE_SIZE))
		return -EINVAL;

	mutex_lock(&standin.lock);
	gpu = standin.gpu;
	if (!gpu) {
		ret = -ENODEV;
		goto out_unlock;
	}
	/* current->mm: a kthread or workqueue has none, another process has its own. */
	a = standin_get_alloc(current->mm, va, len);
	if (!a) {
		count_inc(lookup_failures);
		ret = -EINVAL;
		goto out_unlock;
	}
	reserve = (u64)READ_ONCE(bar1_reserve_mib) << 20;
	limit = gpu->bar_size > reserve ? gpu->bar_size - reserve : 0;
	if (atomic64_read(&standin.c.bar1_pinned_bytes) + len > limit) {
		count_inc(bar1_refusals);
		ret = -ENOMEM;
		goto out_put;
	}
	pin = pin_create(gpu, a, va, len);
	if (!pin) {
		ret = -ENOMEM;
		goto out_put;
	}
	pin->persistent = persistent;
	pin->free_callback = free_callback;
	pin->data = data;
	list_add_tail(&pin->node, &standin.pins);
	a->pins++;
	count_inc(live_pins);
	count_inc(live_page_tables);
	count_inc(total_pins);
	if (persistent)
		count_inc(total_persistent_pins);
	count_add(bar1_pinned_bytes, len);
	*page_table = pin->pt;
	mutex_unlock(&standin.lock);
	return 0;

out_put:
	standin_alloc_put(a);
out_unlock:
	mutex_unlock(&standin.lock);
	return ret;
}

int nvidia_p2p_get_pages(uint64_t p2p_token, uint32_t va_space, uint64_t virtual_address,
			 uint64_t length, struct nvidia_p2p_page_table **page_table,
			 void (*free_callback)(void *data), void *data)
{
	int ret;

	ret = enter_api(__func__, FN_GET_PAGES);
	if (ret)
		return ret;
	if (!free_callback)
		return -EINVAL;		/* 535+ */
	/* Tokens belong to the pre-UVA API that RM no longer resolves. */
	if (p2p_token || va_space)
		return -EINVAL;
	return get_pages_common(virtual_address, length, page_table, free_callback, data, false);
}
EXPORT_SYMBOL(nvidia_p2p_get_pages);

int nvidia_p2p_get_pages_persistent(uint64_t virtual_address, uint64_t length,
				    struct nvidia_p2p_page_table **page_table, uint32_t flags)
{
	int ret;

	ret = enter_api(__func__, FN_GET_PAGES_PERSISTENT);
	if (ret)
		return ret;
	if (flags)
		return -EINVAL;
	return get_pages_common(virtual_address, length, page_table, NULL, NULL, true);
}
EXPORT_SYMBOL(nvidia_p2p_get_pages_persistent);

int nvidia_p2p_put_pages(uint64_t p2p_token, uint32_t va_space, uint64_t virtual_address,
			 struct nvidia_p2p_page_table *page_table)
{
	struct standin_pin *pin;
	int ret;

	ret = enter_api(__func__, FN_PUT_PAGES);
	if (ret)
		return ret;
	if (!page_table)
		return 0;
	mutex_lock(&standin.lock);
	pin = find_pin_locked(page_table);
	if (!pin) {
		/* Torn down by a free callback already: nothing to do, as in nvidia.ko. */
		count_inc(stale_put_pages);
		ret = 0;
	} else if (pin->persistent || pin->va != virtual_address) {
		count_inc(bad_put_pages);
		pr_warn("put_pages: table %p is %s (va %#llx, given %#llx): refused\n",
			page_table, pin->persistent ? "persistent" : "pinned at another address",
			pin->va, virtual_address);
		ret = -EINVAL;
	} else {
		list_del(&pin->node);
		pin_free_locked(pin);
		ret = 0;
	}
	mutex_unlock(&standin.lock);
	return ret;
}
EXPORT_SYMBOL(nvidia_p2p_put_pages);

int nvidia_p2p_put_pages_persistent(uint64_t virtual_address,
				    struct nvidia_p2p_page_table *page_table, uint32_t flags)
{
	struct standin_pin *pin;
	int ret;

	ret = enter_api(__func__, FN_PUT_PAGES_PERSISTENT);
	if (ret)
		return ret;
	if (flags)
		return -EINVAL;
	if (!page_table)
		return 0;
	mutex_lock(&standin.lock);
	pin = find_pin_locked(page_table);
	if (!pin || !pin->persistent || pin->va != virtual_address) {
		/* nvidia.ko would dereference the table here: a persistent one never dies under you. */
		count_inc(bad_put_pages);
		pr_warn("put_pages_persistent: %p (va %#llx) is not a persistent table of ours\n",
			page_table, virtual_address);
		ret = -EINVAL;
	} else {
		list_del(&pin->node);
		pin_free_locked(pin);
		ret = 0;
	}
	mutex_unlock(&standin.lock);
	return ret;
}
EXPORT_SYMBOL(nvidia_p2p_put_pages_persistent);

/*
 * cudaFree or context teardown, under standin.lock: for every non-persistent pin of @a, call the
 * client's free callback in this (process) context, then free the page table and every DMA
 * mapping of it at once, so a client that touches them afterwards meets KASAN.
 */
void standin_teardown_alloc_pins(struct standin_alloc *a)
{
	struct standin_pin *pin;
	unsigned int delay_ms, maps;

	lockdep_assert_held(&standin.lock);
	for (;;) {
		bool found = false;

		list_for_each_entry(pin, &standin.pins, node) {
			if (pin->alloc == a && !pin->persistent) {
				found = true;
				break;
			}
		}
		if (!found)
			break;
		/* Unlinked first: a racing put_pages waits for the lock, then finds nothing. */
		list_del(&pin->node);
		delay_ms = READ_ONCE(standin.free_callback_delay_ms);
		if (delay_ms)
			msleep(delay_ms);
		WRITE_ONCE(standin.in_callback, current);
		pin->free_callback(pin->data);
		WRITE_ONCE(standin.in_callback, NULL);
		count_inc(free_callbacks);
		maps = pin_free_locked(pin);
		count_inc(teardown_page_tables);
		count_add(teardown_dma_mappings, maps);
	}
}

/* Module unload with pins left (a client module leaked persistent pins and went away). */
void standin_free_leftover_pins(void)
{
	struct standin_pin *pin, *tmp;

	lockdep_assert_held(&standin.lock);
	list_for_each_entry_safe(pin, tmp, &standin.pins, node) {
		pr_err("unload: %s pin of %#llx+%#llx leaked by its client; freeing it\n",
		       pin->persistent ? "persistent" : "non-persistent", pin->va, pin->len);
		count_inc(leaked_at_unload);
		list_del(&pin->node);
		pin_free_locked(pin);
	}
}

/*
 * GPUDirect RDMA wants GPU and peer below one PCIe switch. Meeting only at a root port or the
 * root complex is what nvidia.ko refuses unless NVreg_GrdmaPciTopoCheckOverride says otherwise.
 */
static bool topology_supported(struct pci_dev *gpu, struct pci_dev *peer)
{
	struct pci_dev *x, *y;
	int type;

	if (gpu == peer)
		return true;
	for (x = pci_upstream_bridge(gpu); x; x = pci_upstream_bridge(x)) {
		for (y = pci_upstream_bridge(peer); y; y = pci_upstream_bridge(y)) {
			if (x != y)
				continue;
			if (!pci_is_pcie(x))
				return false;
			type = pci_pcie_type(x);
			return type == PCI_EXP_TYPE_UPSTREAM || type == PCI_EXP_TYPE_DOWNSTREAM;
		}
	}
	return false;
}

/*
 * Without IOMMU translation dma_map_resource() hands back the bus address and warns when the
 * peer's mask cannot reach it; nvidia.ko fails such a mapping quietly, so check first.
 */
static bool peer_can_reach(struct pci_dev *peer, u64 phys, u64 len)
{
	struct iommu_domain *dom = iommu_get_domain_for_dev(&peer->dev);
	u64 limit;

	if (dom && (dom->type & __IOMMU_DOMAIN_PAGING))
		return true;
	limit = min_not_zero(dma_get_mask(&peer->dev), peer->dev.bus_dma_limit);
	return phys + len - 1 <= limit;
}

int nvidia_p2p_dma_map_pages(struct pci_dev *peer, struct nvidia_p2p_page_table *page_table,
			     struct nvidia_p2p_dma_mapping **dma_mapping)
{
	struct standin_pin *pin;
	struct standin_map *map;
	u32 i;
	int ret;

	ret = enter_api(__func__, FN_DMA_MAP_PAGES);
	if (ret)
		return ret;
	if (!peer || !page_table || !dma_mapping)
		return -EINVAL;
	*dma_mapping = NULL;

	mutex_lock(&standin.lock);
	pin = find_pin_locked(page_table);
	if (!pin || !standin.gpu) {
		ret = -EINVAL;
		goto out_unlock;
	}
	if (READ_ONCE(topology_check) && !topology_supported(standin.gpu->pdev, peer)) {
		count_inc(topology_refusals);
		pr_info("dma_map_pages: %s and GPU %s do not share a PCIe switch: refused (topology_check=0 overrides)\n",
			pci_name(peer), pci_name(standin.gpu->pdev));
		ret = -ENOTSUPP;
		goto out_unlock;
	}
	if (!peer_can_reach(peer, pin->phys, pin->len)) {
		count_inc(dma_map_errors);
		pr_err("dma_map_pages: %s cannot address %#llx+%#llx (DMA mask %#llx)\n",
		       pci_name(peer), pin->phys, pin->len, dma_get_mask(&peer->dev));
		ret = -EIO;
		goto out_unlock;
	}
	ret = -ENOMEM;
	map = kzalloc(sizeof(*map), GFP_KERNEL);
	if (!map)
		goto out_unlock;
	map->m = kzalloc(sizeof(*map->m), GFP_KERNEL);
	map->dma = kcalloc(pin->entries, sizeof(*map->dma), GFP_KERNEL);
	if (!map->m || !map->dma)
		goto out_free;
	for (i = 0; i < pin->entries; i++) {
		u64 phys = pin->phys + (u64)i * GPU_PAGE_SIZE;
		dma_addr_t addr = dma_map_resource(&peer->dev, phys, GPU_PAGE_SIZE,
						   DMA_BIDIRECTIONAL, 0);

		if (dma_mapping_error(&peer->dev, addr)) {
			count_inc(dma_map_errors);
			pr_err("dma_map_pages: mapping %#llx for %s failed\n", phys, pci_name(peer));
			while (i--)
				dma_unmap_resource(&peer->dev, map->dma[i], GPU_PAGE_SIZE,
						   DMA_BIDIRECTIONAL, 0);
			ret = -EIO;
			goto out_free;
		}
		map->dma[i] = addr;
	}
	map->entries = pin->entries;
	map->peer = pci_dev_get(peer);
	map->m->version = NVIDIA_P2P_DMA_MAPPING_VERSION;
	map->m->page_size_type = NVIDIA_P2P_PAGE_SIZE_64KB;
	map->m->entries = pin->entries;
	map->m->dma_addresses = map->dma;
	map->m->private = map;
	map->m->pci_dev = peer;
	list_add_tail(&map->node, &pin->maps);
	count_inc(live_dma_mappings);
	count_inc(total_dma_mappings);
	*dma_mapping = map->m;
	mutex_unlock(&standin.lock);
	return 0;

out_free:
	kfree(map->dma);
	kfree(map->m);
	kfree(map);
out_unlock:
	mutex_unlock(&standin.lock);
	return ret;
}
EXPORT_SYMBOL(nvidia_p2p_dma_map_pages);

int nvidia_p2p_dma_unmap_pages(struct pci_dev *peer, struct nvidia_p2p_page_table *page_table,
			       struct nvidia_p2p_dma_mapping *dma_mapping)
{
	struct standin_pin *pin;
	struct standin_map *map = NULL;
	int ret;

	ret = enter_api(__func__, FN_DMA_UNMAP_PAGES);
	if (ret)
		return ret;
	if (!peer || !page_table || !dma_mapping)
		return -EINVAL;
	mutex_lock(&standin.lock);
	pin = find_pin_locked(page_table);
	if (pin)
		map = find_map_locked(pin, dma_mapping);
	if (!map) {
		/* Already gone with its table: idempotent, as in nvidia.ko. */
		count_inc(stale_dma_unmaps);
	} else {
		if (peer != map->peer) {
			/* nvidia.ko WARNs; tests provoke this on purpose, so only say it. */
			count_inc(peer_mismatch_warnings);
			pr_warn("dma_unmap_pages: peer %s is not %s, the peer the mapping was made for; unmapping it for %s\n",
				pci_name(peer), pci_name(map->peer), pci_name(map->peer));
		}
		list_del(&map->node);
		map_free(map);
	}
	mutex_unlock(&standin.lock);
	return 0;
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
