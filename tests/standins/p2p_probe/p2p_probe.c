// SPDX-License-Identifier: GPL-2.0
/*
 * p2p_probe: a test-only client of the nvidia_p2p_* API. Each ioctl makes one call from the
 * calling process's context with the caller's arguments (see uapi/p2p_probe.h), so userspace
 * tests can check the NVIDIA P2P stand-in's behaviour directly, without a peer-memory host.
 * It references every function of nv-p2p.h, so a stand-in missing an export fails modpost.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/delay.h>
#include <linux/dma-mapping.h>
#include <linux/ktime.h>
#include <linux/miscdevice.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/pci.h>
#include <linux/sched.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <linux/workqueue.h>

#include "nv-p2p.h"
#include "uapi/p2p_probe.h"

struct probe_pin {
	struct list_head node;
	u64 handle;
	struct nvidia_p2p_page_table *pt;
	u64 va;
	u32 flags;
	pid_t tgid;		/* the process that pinned it */
	bool persistent;
	bool armed;		/* non-persistent, callback not run, not put by its owner: holds a
				 * module reference (under st_lock) */
	spinlock_t st_lock;
	struct p2p_probe_pin_state st;	/* written by the free callback */
};

struct probe_map {
	struct list_head node;
	u64 handle;
	struct probe_pin *pin;	/* only compared once the pin may be gone */
	struct nvidia_p2p_page_table *pt;
	struct nvidia_p2p_dma_mapping *m;
	struct pci_dev *peer;
	bool dead;	/* freed by the driver with its table: pointers kept only for stale calls */
};

/*
 * Never held across a call into nvidia_p2p_*: the free callback takes it under the driver's API
 * lock, so the order is always API lock -> probe_lock.
 */
static DEFINE_MUTEX(probe_lock);
static LIST_HEAD(pins);
static LIST_HEAD(maps);
static u64 next_handle = 1;

/* What the probe puts in the out-pointer before get_pages, to see whether it was written. */
static u64 pt_sentinel;
#define PT_SENTINEL ((struct nvidia_p2p_page_table *)&pt_sentinel)

static struct probe_pin *find_pin(u64 handle)
{
	struct probe_pin *pin;

	list_for_each_entry(pin, &pins, node)
		if (pin->handle == handle)
			return pin;
	return NULL;
}

/* Under probe_lock: the driver has freed (or is about to free) every mapping of @pt. */
static void maps_died(struct nvidia_p2p_page_table *pt)
{
	struct probe_map *map;

	list_for_each_entry(map, &maps, node)
		if (map->pt == pt)
			map->dead = true;
}

static struct probe_map *find_map(u64 handle)
{
	struct probe_map *map;

	list_for_each_entry(map, &maps, node)
		if (map->handle == handle)
			return map;
	return NULL;
}

/* The driver can no longer call this pin's callback: give back its module reference. */
static void pin_disarm(struct probe_pin *pin)
{
	bool was;

	spin_lock(&pin->st_lock);
	was = pin->armed;
	pin->armed = false;
	spin_unlock(&pin->st_lock);
	if (was)
		module_put(THIS_MODULE);
}

/* The free callback: record how it was called; the table is alive until it returns. */
static void probe_free_callback(void *data)
{
	struct probe_pin *pin = data;
	struct probe_map *map, *unmap = NULL;
	u32 mapping_entries = 0;
	int unmap_ret = 0, put_ret = 0;

	mutex_lock(&probe_lock);
	list_for_each_entry(map, &maps, node) {
		if (map->pt == pin->pt && !map->dead) {
			mapping_entries = map->m->entries;
			break;
		}
	}
	if (pin->flags & P2P_PROBE_CB_UNMAP) {
		list_for_each_entry(map, &maps, node) {
			if (map->pt == pin->pt && !map->dead) {
				list_del(&map->node);
				unmap = map;
				break;
			}
		}
	}
	/* The driver frees the others as soon as this returns. */
	maps_died(pin->pt);
	mutex_unlock(&probe_lock);
	if (unmap) {
		/* Allowed: dma_unmap_pages takes no driver lock, and the table is alive. */
		unmap_ret = nvidia_p2p_dma_unmap_pages(unmap->peer, unmap->pt, unmap->m);
		pci_dev_put(unmap->peer);
		kfree(unmap);
	}
	if (pin->flags & P2P_PROBE_CB_REENTER)
		/* What a careless client does: the driver must refuse (and it WARNs). */
		put_ret = nvidia_p2p_put_pages(0, 0, pin->va, pin->pt);

	spin_lock(&pin->st_lock);
	pin->st.callbacks++;
	pin->st.in_task = in_task();
	pin->st.pid = current->pid;
	pin->st.tgid = current->tgid;
	pin->st.entries = pin->pt->entries;
	pin->st.mapping_entries = mapping_entries;
	pin->st.reenter_unmap_ret = unmap_ret;
	pin->st.reenter_put_ret = put_ret;
	pin->st.time_ns = ktime_get_ns();
	get_task_comm(pin->st.comm, current);
	spin_unlock(&pin->st_lock);

	/* May the client sleep here? It must be able to wait for its NIC. */
	msleep(1);
	spin_lock(&pin->st_lock);
	pin->st.slept = 1;
	spin_unlock(&pin->st_lock);
	pin_disarm(pin);
}

struct pin_work {
	struct work_struct work;
	struct p2p_probe_pin *req;
	struct probe_pin *pin;
	int ret;
};

static int do_get_pages(struct p2p_probe_pin *req, struct probe_pin *pin)
{
	if (req->flags & P2P_PROBE_PERSISTENT)
		return nvidia_p2p_get_pages_persistent(req->va, req->length, &pin->pt,
						       req->persistent_flags);
	return nvidia_p2p_get_pages(req->p2p_token, req->va_space, req->va, req->length, &pin->pt,
				    req->flags & P2P_PROBE_NULL_CALLBACK ? NULL : probe_free_callback,
				    pin);
}

static void pin_work_fn(struct work_struct *work)
{
	struct pin_work *pw = container_of(work, struct pin_work, work);

	pw->ret = do_get_pages(pw->req, pw->pin);
}

static long ioc_pin(void __user *arg)
{
	struct nvidia_p2p_page_table *pt;
	struct p2p_probe_pin req;
	struct probe_pin *pin;
	u32 i = 0, n = 0;

	if (copy_from_user(&req, arg, sizeof(req)))
		return -EFAULT;
	pin = kzalloc(sizeof(*pin), GFP_KERNEL);
	if (!pin)
		return -ENOMEM;
	spin_lock_init(&pin->st_lock);
	pin->va = req.va;
	pin->flags = req.flags;
	pin->persistent = req.flags & P2P_PROBE_PERSISTENT;
	pin->tgid = current->tgid;
	pin->st.pin_tgid = current->tgid;
	pin->pt = PT_SENTINEL;
	/*
	 * Armed before the call: the callback may run (a racing free) before get_pages returns.
	 * A failed get_pages never calls it.
	 */
	if (!pin->persistent) {
		__module_get(THIS_MODULE);
		pin->armed = true;
	}

	if (req.flags & P2P_PROBE_FROM_WORKQUEUE) {
		struct pin_work pw = { .req = &req, .pin = pin };

		INIT_WORK_ONSTACK(&pw.work, pin_work_fn);
		queue_work(system_unbound_wq, &pw.work);
		flush_work(&pw.work);
		destroy_work_on_stack(&pw.work);
		req.ret = pw.ret;
	} else {
		req.ret = do_get_pages(&req, pin);
	}
	/* Only compared: on a failure it may point at freed memory. */
	pt = pin->pt;
	req.pt_out = pt == PT_SENTINEL ? P2P_PROBE_PT_UNTOUCHED :
		     !pt ? P2P_PROBE_PT_NULL : P2P_PROBE_PT_SET;
	if (req.ret) {
		pin_disarm(pin);
		kfree(pin);
		req.handle = 0;
		return copy_to_user(arg, &req, sizeof(req)) ? -EFAULT : 0;
	}

	if (!(req.flags & P2P_PROBE_NO_READ)) {
		/* Read it now: a concurrent cudaFree in another thread could tear it down. */
		req.version = pt->version;
		req.page_size = pt->page_size;
		req.entries = pt->entries;
		req.pt_flags = 0;
		if ((pt->version >> 16) >= 2)
			req.pt_flags = *(u32 *)(pt + 1);	/* 580+: u32 flags after the 1.x fields */
		memcpy(req.gpu_uuid, pt->gpu_uuid, P2P_PROBE_UUID_LEN);
		n = min(req.entries, req.max_entries);
		for (i = 0; req.phys && i < n; i++) {
			u64 __user *dst = (u64 __user *)u64_to_user_ptr(req.phys) + i;

			if (put_user(pt->pages[i]->physical_address, dst))
				break;	/* reported below; the pin stays, to be put by handle */
		}
	}

	mutex_lock(&probe_lock);
	pin->handle = next_handle++;
	list_add_tail(&pin->node, &pins);
	mutex_unlock(&probe_lock);
	req.handle = pin->handle;
	if (copy_to_user(arg, &req, sizeof(req)) || (req.phys && i < n))
		return -EFAULT;
	return 0;
}

struct put_work {
	struct work_struct work;
	u64 va;
	struct nvidia_p2p_page_table *pt;
	bool persistent;
	u32 persistent_flags;
	pid_t tgid;
	int ret;
};

static int do_put_pages(bool persistent, u64 va, struct nvidia_p2p_page_table *pt, u32 flags)
{
	if (persistent)
		return nvidia_p2p_put_pages_persistent(va, pt, flags);
	return nvidia_p2p_put_pages(0, 0, va, pt);
}

static void put_work_fn(struct work_struct *work)
{
	struct put_work *pw = container_of(work, struct put_work, work);

	pw->tgid = current->tgid;
	pw->ret = do_put_pages(pw->persistent, pw->va, pw->pt, pw->persistent_flags);
}

static long ioc_put(void __user *arg)
{
	struct nvidia_p2p_page_table *pt;
	struct p2p_probe_put req;
	struct probe_pin *pin;
	bool persistent, foreign;
	pid_t tgid = current->tgid;
	u64 va;

	if (copy_from_user(&req, arg, sizeof(req)))
		return -EFAULT;
	mutex_lock(&probe_lock);
	pin = find_pin(req.handle);
	if (!pin) {
		mutex_unlock(&probe_lock);
		return -ENOENT;
	}
	pt = pin->pt;
	va = req.flags & P2P_PROBE_PUT_VA ? req.va : pin->va;
	persistent = pin->persistent ^ !!(req.flags & P2P_PROBE_PUT_OTHER);
	mutex_unlock(&probe_lock);

	if (req.flags & P2P_PROBE_PUT_FROM_WORKQUEUE) {
		struct put_work pw = { .va = va, .pt = pt, .persistent = persistent,
				       .persistent_flags = req.persistent_flags };

		INIT_WORK_ONSTACK(&pw.work, put_work_fn);
		queue_work(system_unbound_wq, &pw.work);
		flush_work(&pw.work);
		destroy_work_on_stack(&pw.work);
		req.ret = pw.ret;
		tgid = pw.tgid;
	} else {
		req.ret = do_put_pages(persistent, va, pt, req.persistent_flags);
	}

	/*
	 * A non-persistent put finds only the pinning process's pins: from anywhere else it returns 0
	 * with the pin (and its callback) left in place, so the probe keeps it too.
	 */
	foreign = !pin->persistent && !persistent && tgid != pin->tgid;
	req.kept = 0;
	if (!req.ret && (foreign || (req.flags & P2P_PROBE_PUT_KEEP))) {
		req.kept = 1;
	} else if (!req.ret) {
		mutex_lock(&probe_lock);
		pin = find_pin(req.handle);
		if (pin) {
			list_del(&pin->node);
			maps_died(pin->pt);
		}
		mutex_unlock(&probe_lock);
		if (pin) {
			pin_disarm(pin);
			kfree(pin);
		}
	}
	return copy_to_user(arg, &req, sizeof(req)) ? -EFAULT : 0;
}

static long ioc_pin_state(void __user *arg)
{
	struct p2p_probe_pin_state st;
	struct probe_pin *pin;

	if (copy_from_user(&st, arg, sizeof(st)))
		return -EFAULT;
	mutex_lock(&probe_lock);
	pin = find_pin(st.handle);
	if (pin) {
		spin_lock(&pin->st_lock);
		st = pin->st;
		spin_unlock(&pin->st_lock);
		st.handle = pin->handle;
	}
	mutex_unlock(&probe_lock);
	if (!pin)
		return -ENOENT;
	return copy_to_user(arg, &st, sizeof(st)) ? -EFAULT : 0;
}

/* A referenced pci_dev for a P2P_PROBE_PEER_* choice; NULL with *err = 0 for PEER_NULL. */
static struct pci_dev *get_peer(u32 peer, u32 pci_addr, int *err)
{
	struct pci_dev *pdev = NULL;

	*err = 0;
	switch (peer) {
	case P2P_PROBE_PEER_NIC:
		pdev = pci_get_device(0x1234, 0x11e8, NULL);
		if (pdev) {
			/* Stand in for the NIC's driver if it has none: edu can reach 64 bits. */
			device_lock(&pdev->dev);
			if (!pdev->dev.driver && dma_set_mask_and_coherent(&pdev->dev, DMA_BIT_MASK(64)))
				pci_info(pdev, "cannot set a 64-bit DMA mask\n");
			device_unlock(&pdev->dev);
		}
		break;
	case P2P_PROBE_PEER_GPU:
		pdev = pci_get_device(0x1af4, 0x1110, NULL);
		break;
	case P2P_PROBE_PEER_PCI:
		pdev = pci_get_domain_bus_and_slot(pci_addr >> 16, (pci_addr >> 8) & 0xff,
						   pci_addr & 0xff);
		break;
	case P2P_PROBE_PEER_NULL:
		return NULL;
	default:
		*err = -EINVAL;
		return NULL;
	}
	if (!pdev)
		*err = -ENODEV;
	return pdev;
}

static long ioc_map(void __user *arg)
{
	struct nvidia_p2p_dma_mapping *m = NULL;
	struct nvidia_p2p_page_table *pt;
	struct p2p_probe_map req;
	struct probe_map *map;
	struct probe_pin *pin;
	struct pci_dev *peer;
	u32 i, n;
	int err;

	if (copy_from_user(&req, arg, sizeof(req)))
		return -EFAULT;
	peer = get_peer(req.peer, req.pci_addr, &err);
	if (err)
		return err;
	map = kzalloc(sizeof(*map), GFP_KERNEL);
	if (!map) {
		pci_dev_put(peer);
		return -ENOMEM;
	}
	mutex_lock(&probe_lock);
	pin = find_pin(req.pin);
	pt = pin ? pin->pt : NULL;
	if (pin && !pin->persistent && !(req.flags & P2P_PROBE_STALE)) {
		spin_lock(&pin->st_lock);
		if (pin->st.callbacks)
			pin = ERR_PTR(-ESTALE);	/* torn down: the driver would use freed memory */
		spin_unlock(&pin->st_lock);
	}
	mutex_unlock(&probe_lock);
	if (IS_ERR_OR_NULL(pin)) {
		kfree(map);
		pci_dev_put(peer);
		return pin ? PTR_ERR(pin) : -ENOENT;
	}

	req.ret = nvidia_p2p_dma_map_pages(peer, pt, &m);
	req.handle = 0;
	if (req.ret) {
		kfree(map);
		pci_dev_put(peer);
		return copy_to_user(arg, &req, sizeof(req)) ? -EFAULT : 0;
	}
	req.version = m->version;
	req.page_size_type = m->page_size_type;
	req.entries = m->entries;
	n = min(req.entries, req.max_entries);
	for (i = 0; req.dma && i < n; i++)
		if (put_user(m->dma_addresses[i], (u64 __user *)u64_to_user_ptr(req.dma) + i))
			break;
	map->pin = pin;
	map->pt = pt;
	map->m = m;
	map->peer = peer;
	mutex_lock(&probe_lock);
	map->handle = next_handle++;
	list_add_tail(&map->node, &maps);
	mutex_unlock(&probe_lock);
	req.handle = map->handle;
	if (copy_to_user(arg, &req, sizeof(req)) || (req.dma && i < n))
		return -EFAULT;
	return 0;
}

static long ioc_unmap(void __user *arg)
{
	struct nvidia_p2p_dma_mapping *m;
	struct nvidia_p2p_page_table *pt;
	struct p2p_probe_unmap req;
	struct probe_map *map;
	struct pci_dev *peer;
	int err;

	if (copy_from_user(&req, arg, sizeof(req)))
		return -EFAULT;
	peer = get_peer(req.peer, req.pci_addr, &err);
	if (err)
		return err;
	mutex_lock(&probe_lock);
	map = find_map(req.handle);
	pt = map ? map->pt : NULL;
	m = map ? map->m : NULL;
	if (map && map->dead && !(req.flags & P2P_PROBE_STALE))
		map = ERR_PTR(-ESTALE);	/* freed with its table: the driver would use freed memory */
	mutex_unlock(&probe_lock);
	if (IS_ERR_OR_NULL(map)) {
		pci_dev_put(peer);
		return map ? PTR_ERR(map) : -ENOENT;
	}
	req.ret = nvidia_p2p_dma_unmap_pages(peer, pt, m);
	pci_dev_put(peer);
	if (!req.ret && !(req.flags & P2P_PROBE_UNMAP_KEEP)) {
		mutex_lock(&probe_lock);
		map = find_map(req.handle);
		if (map)
			list_del(&map->node);
		mutex_unlock(&probe_lock);
		if (map) {
			pci_dev_put(map->peer);
			kfree(map);
		}
	}
	return copy_to_user(arg, &req, sizeof(req)) ? -EFAULT : 0;
}

static long ioc_pin_user(void __user *arg)
{
	struct p2p_probe_pin_user req;
	struct page **pages;
	unsigned long npages;

	if (copy_from_user(&req, arg, sizeof(req)))
		return -EFAULT;
	if (!req.length)
		return -EINVAL;
	npages = (offset_in_page(req.va) + req.length + PAGE_SIZE - 1) >> PAGE_SHIFT;
	if (npages > 4096)
		return -E2BIG;
	pages = kvcalloc(npages, sizeof(*pages), GFP_KERNEL);
	if (!pages)
		return -ENOMEM;
	req.ret = pin_user_pages_fast(req.va & PAGE_MASK, npages, FOLL_WRITE | FOLL_LONGTERM, pages);
	if (req.ret > 0)
		unpin_user_pages(pages, req.ret);
	kvfree(pages);
	return copy_to_user(arg, &req, sizeof(req)) ? -EFAULT : 0;
}

static int rsync_get_mode(int *mode, void *data)
{
	*mode = 0;
	return 0;
}

static void rsync_put_mode(int mode, void *data)
{
}

static void rsync_wait(struct pci_dev *gpu, void *data)
{
}

static long ioc_misc(void __user *arg)
{
	nvidia_p2p_rsync_driver_t driver = {
		.version = NVIDIA_P2P_RSYNC_DRIVER_VERSION,
		.get_relaxed_ordering_mode = rsync_get_mode,
		.put_relaxed_ordering_mode = rsync_put_mode,
		.wait_for_rsync = rsync_wait,
	};
	nvidia_p2p_rsync_reg_info_t *info = NULL;
	struct p2p_probe_misc res;

	res.init_mapping = nvidia_p2p_init_mapping(0, NULL, NULL, NULL);
	res.destroy_mapping = nvidia_p2p_destroy_mapping(0);
	res.free_page_table = nvidia_p2p_free_page_table(NULL);
	res.free_dma_mapping = nvidia_p2p_free_dma_mapping(NULL);
	res.register_rsync_null = nvidia_p2p_register_rsync_driver(NULL, NULL);
	res.register_rsync = nvidia_p2p_register_rsync_driver(&driver, &res);
	res.register_rsync_again = nvidia_p2p_register_rsync_driver(&driver, &res);
	if (!res.register_rsync)
		nvidia_p2p_unregister_rsync_driver(&driver, &res);
	res.get_rsync_registers = nvidia_p2p_get_rsync_registers(&info);
	if (!res.get_rsync_registers)
		nvidia_p2p_put_rsync_registers(info);
	return copy_to_user(arg, &res, sizeof(res)) ? -EFAULT : 0;
}

static long probe_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	void __user *uarg = (void __user *)arg;

	switch (cmd) {
	case P2P_PROBE_IOC_PIN:
		return ioc_pin(uarg);
	case P2P_PROBE_IOC_PUT:
		return ioc_put(uarg);
	case P2P_PROBE_IOC_PIN_STATE:
		return ioc_pin_state(uarg);
	case P2P_PROBE_IOC_MAP:
		return ioc_map(uarg);
	case P2P_PROBE_IOC_UNMAP:
		return ioc_unmap(uarg);
	case P2P_PROBE_IOC_PIN_USER:
		return ioc_pin_user(uarg);
	case P2P_PROBE_IOC_MISC:
		return ioc_misc(uarg);
	}
	return -ENOTTY;
}

static const struct file_operations probe_fops = {
	.owner = THIS_MODULE,
	.unlocked_ioctl = probe_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
};

static struct miscdevice probe_misc = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = "p2p_probe",
	.fops = &probe_fops,
	.mode = 0666,
};

static int __init probe_init(void)
{
	return misc_register(&probe_misc);
}

/*
 * Give back what tests left: live mappings, then persistent pins. Non-persistent pins whose
 * callback is still armed hold module references, so none can be left here; those left in the
 * list are torn down, or were put from another process (and then torn down: the reference is gone).
 */
static void __exit probe_exit(void)
{
	struct probe_map *map;
	struct probe_pin *pin;
	int ret;

	misc_deregister(&probe_misc);
	for (;;) {
		mutex_lock(&probe_lock);
		map = list_first_entry_or_null(&maps, struct probe_map, node);
		if (map)
			list_del(&map->node);
		mutex_unlock(&probe_lock);
		if (!map)
			break;
		if (!map->dead) {
			ret = nvidia_p2p_dma_unmap_pages(map->peer, map->pt, map->m);
			if (ret)
				pr_err("unload: dma_unmap_pages: %d\n", ret);
		}
		pci_dev_put(map->peer);
		kfree(map);
	}
	for (;;) {
		mutex_lock(&probe_lock);
		pin = list_first_entry_or_null(&pins, struct probe_pin, node);
		if (pin)
			list_del(&pin->node);
		mutex_unlock(&probe_lock);
		if (!pin)
			break;
		if (pin->persistent) {
			ret = nvidia_p2p_put_pages_persistent(pin->va, pin->pt, 0);
			if (ret)
				pr_err("unload: put_pages_persistent: %d\n", ret);
		}
		kfree(pin);
	}
}

module_init(probe_init);
module_exit(probe_exit);

MODULE_DESCRIPTION("Test-only caller of the nvidia_p2p_* API from userspace's context");
MODULE_LICENSE("GPL");
