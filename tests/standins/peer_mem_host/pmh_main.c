// SPDX-License-Identifier: GPL-2.0
/*
 * peer_mem_host: a test-only stand-in for ib_core's peer-memory support plus an RDMA NIC.
 *
 * It exports ib_register_peer_memory_client / ib_unregister_peer_memory_client (the ABI of
 * rdma/peer_mem.h) and offers userspace /dev/peer_mem_host (uapi/peer_mem_host.h), whose ioctls
 * play ibv_reg_mr, ibv_dereg_mr and RDMA reads and writes executed by QEMU's edu device.
 * See README.md for the behaviour, the parameters and where it deviates from MLNX_OFED.
 */
#include <linux/debugfs.h>
#include <linux/fs.h>
#include <linux/miscdevice.h>
#include <linux/module.h>
#include <linux/rwsem.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <linux/workqueue.h>
#include "uapi/peer_mem_host.h"

#include "pmh.h"

int pmh_ex_support = 1;
module_param_named(ex_support, pmh_ex_support, int, 0444);
MODULE_PARM_DESC(ex_support,
		 "1 (default): an MLNX_OFED 5.x host that honours PEER_MEM_INVALIDATE_UNMAPS of ex clients; 0: a 4.9 host that ignores ex clients and always unmaps inside invalidation");

int pmh_sysfs;
module_param_named(sysfs, pmh_sysfs, int, 0444);
MODULE_PARM_DESC(sysfs,
		 "0 (default): the host of kernels that do not export mm_kobj (6.6 and later; also the ib_uverbs variant): no memory_peers, duplicate names accepted; 1: the host before 6.6: /sys/kernel/mm/memory_peers/<client>/ statistics and duplicate names refused");

int pmh_page_size_before_dma_map;
module_param_named(page_size_before_dma_map, pmh_page_size_before_dma_map, int, 0444);
MODULE_PARM_DESC(page_size_before_dma_map,
		 "1: call get_page_size before dma_map (Ubuntu SAUCE, early MLNX_OFED 5.x); 0 (default): after it");

int pmh_trim_sgl = 1;
module_param_named(trim_sgl, pmh_trim_sgl, int, 0444);
MODULE_PARM_DESC(trim_sgl,
		 "1 (default): trim the first and last SG entries to the registered range when the client's page size is not PAGE_SIZE (MLNX_OFED 5.5+); 0: leave them whole (Ubuntu SAUCE, early 5.x)");

/*
 * Read at each device removal. ib_uverbs disassociates the files of a device that goes away:
 * every later command on them but a destroy fails with -EIO until they are closed
 * (OFED-DESTROY-RWSEM); here deregistrations fail too (README.md says so). 0 keeps the
 * files usable, which the tests written before this knob rely on.
 */
static bool pmh_disassociate;
module_param_named(disassociate, pmh_disassociate, bool, 0644);
MODULE_PARM_DESC(disassociate,
		 "1: device removal disassociates the open files as ib_uverbs does (every later ioctl on them but PMH_IOC_REMOVE_DEVICE fails with -EIO until they are closed); 0 (default): they stay usable");

/*
 * Read at each registration: hand clients a dma_device that is not a PCI device (the misc
 * device's), as a software RDMA device (rxe, siw) or a NIC behind a non-PCI bus would.
 */
bool pmh_nonpci_dma_device;
module_param_named(nonpci_dma_device, pmh_nonpci_dma_device, bool, 0644);
MODULE_PARM_DESC(nonpci_dma_device,
		 "1: registrations pass clients a dma_device that is not a PCI device; 0 (default): the NIC's PCI device");

/*
 * Read at each deregistration and unwinding: the host of MLNX_OFED/DOCA-OFED up to 25.01, whose
 * ib_umem_stop_invalidation_notifier has the second test inverted (OFED-STOP-NOTIFIER; at
 * c89c74ee, 24.10-1.1.4.0, and e9390164, 25.01: `xa_id != PEER_NO_INVALIDATION_ID`; `==` from
 * cccf5314, 25.04).
 */
bool pmh_stop_notifier_before_25_04;
module_param_named(stop_notifier_before_25_04, pmh_stop_notifier_before_25_04, bool, 0644);
MODULE_PARM_DESC(stop_notifier_before_25_04,
		 "1: stop the invalidation notifier as MLNX_OFED up to 25.01 does (an invalidating MR never activated locks its own held mapping lock: a self-deadlock); 0 (default): as 25.04 and later");

/*
 * One-shot: the next peer registration's memory key fails, as mlx5's reg_create can (out of
 * mkeys, a firmware error): create_real_mr's error path stops the notifier and releases the umem
 * (mr.c:1537-1541 at c89c74ee) before it was ever activated.
 */
bool pmh_fail_mkey;
module_param_named(fail_mkey, pmh_fail_mkey, bool, 0644);
MODULE_PARM_DESC(fail_mkey, "1: the next peer registration's memory key fails (-ENOMEM), once");

struct pmh_counters pmh_counters;

/* Largest PMH_IOC_DMA transfer: it is staged in a kernel buffer. */
#define PMH_DMA_MAX (16u << 20)
#define PMH_QUERY_MAX_SGES 65536u

/* The MRs registered through one open file, like an ib_uverbs context. */
struct pmh_file {
	struct mutex lock;	/* lookups and use of MRs against their deregistration */
	struct xarray mrs;	/* handle -> struct pmh_mr */
	struct list_head node;	/* in pmh_files, for device removal */
	bool disassociated;	/* a device removal went by (with disassociate=1): -EIO */
	/*
	 * ib_uverbs' hw_destroy_rwsem (OFED-DESTROY-RWSEM): a device removal destroys this
	 * file's MRs under it held for write (uverbs_destroy_ufile_hw, called file by file from
	 * ib_uverbs_free_hw_resources, uverbs_main.c:1222-1252 at 25.10); a user's destroy takes
	 * it for read (uobj_destroy) and the last close for write (ib_uverbs_close,
	 * uverbs_main.c:1012-1016). So a deregistration or a last close that meets the removal of
	 * this file's MRs returns once they are gone, while those of files the removal has not
	 * reached yet go on in their own task. Taken before the file's lock; the kworker never takes
	 * it.
	 */
	struct rw_semaphore destroy_rwsem;
};

/* Every open file, for device removal; taken before a file's lock. */
static DEFINE_MUTEX(pmh_files_lock);
static LIST_HEAD(pmh_files);
/* Deregistrations that do not run in the calling task (device removal, PMH_DEREG_KWORKER). */
static struct workqueue_struct *pmh_wq;

static int pmh_open(struct inode *inode, struct file *file)
{
	struct pmh_file *f = kzalloc(sizeof(*f), GFP_KERNEL);

	if (!f)
		return -ENOMEM;
	mutex_init(&f->lock);
	init_rwsem(&f->destroy_rwsem);
	xa_init_flags(&f->mrs, XA_FLAGS_ALLOC1);
	file->private_data = f;
	mutex_lock(&pmh_files_lock);
	list_add_tail(&f->node, &pmh_files);
	mutex_unlock(&pmh_files_lock);
	return 0;
}

/*
 * Process exit or last close: deregister what is left, as ib_uverbs does, in the task that made
 * the last close (which need not be the one that registered).
 */
static int pmh_release(struct inode *inode, struct file *file)
{
	struct pmh_file *f = file->private_data;
	struct pmh_mr *mr;
	unsigned long handle;

	down_write(&f->destroy_rwsem);
	xa_for_each(&f->mrs, handle, mr) {
		xa_erase(&f->mrs, handle);
		pmh_mr_deregister(mr);
		atomic_inc(&pmh_counters.close_deregs);
	}
	up_write(&f->destroy_rwsem);
	/* A removal holds the list to the end: the file stays until it is done (its kref, there). */
	mutex_lock(&pmh_files_lock);
	list_del(&f->node);
	mutex_unlock(&pmh_files_lock);
	xa_destroy(&f->mrs);
	mutex_destroy(&f->lock);
	kfree(f);
	return 0;
}

/* A list of MRs (already out of their files) that a kworker deregisters. */
struct pmh_dereg_work {
	struct work_struct work;
	struct list_head mrs;
	bool device_removal;
	int count;
};

static void pmh_dereg_work_fn(struct work_struct *work)
{
	struct pmh_dereg_work *w = container_of(work, struct pmh_dereg_work, work);
	struct pmh_mr *mr, *tmp;

	list_for_each_entry_safe(mr, tmp, &w->mrs, work_node) {
		list_del_init(&mr->work_node);
		pmh_mr_deregister(mr);
		atomic_inc(&pmh_counters.kworker_deregs);
		if (w->device_removal)
			atomic_inc(&pmh_counters.removed_by_device);
		w->count++;
	}
}

/* Deregister @w's MRs from the host's workqueue and wait for it; the number deregistered. */
static int pmh_dereg_in_kworker(struct pmh_dereg_work *w)
{
	INIT_WORK_ONSTACK(&w->work, pmh_dereg_work_fn);
	queue_work(pmh_wq, &w->work);
	flush_work(&w->work);
	destroy_work_on_stack(&w->work);
	return w->count;
}

/*
 * Device removal: ib_uverbs disassociates every file of the device, then destroys their objects
 * (RDMA_REMOVE_DRIVER_REMOVE) file by file, from the remover's context, which for hot unplug, a
 * driver reload or mlx5's health recovery is a kworker (ib_uverbs_free_hw_resources,
 * uverbs_main.c:1222-1252 at 25.10). Here every MR of every open file goes from the host's
 * workqueue, one file at a time under its destroy_rwsem; the files stay usable unless
 * disassociate=1. pmh_files_lock is held to the end, as ib_uverbs holds a reference on the file it
 * destroys: a file closed meanwhile deregisters its own MRs, then waits here to leave the list.
 */
static long pmh_remove_device(void)
{
	struct pmh_file *f;
	struct pmh_mr *mr;
	unsigned long handle;
	int n = 0;

	mutex_lock(&pmh_files_lock);
	if (READ_ONCE(pmh_disassociate))
		list_for_each_entry(f, &pmh_files, node)
			WRITE_ONCE(f->disassociated, true);
	list_for_each_entry(f, &pmh_files, node) {
		struct pmh_dereg_work w = { .device_removal = true };

		INIT_LIST_HEAD(&w.mrs);
		down_write(&f->destroy_rwsem);
		mutex_lock(&f->lock);
		xa_for_each(&f->mrs, handle, mr) {
			xa_erase(&f->mrs, handle);
			list_add_tail(&mr->work_node, &w.mrs);
		}
		mutex_unlock(&f->lock);
		n += pmh_dereg_in_kworker(&w);
		up_write(&f->destroy_rwsem);
	}
	mutex_unlock(&pmh_files_lock);
	return n;
}

static long pmh_reg_mr(struct pmh_file *f, void __user *arg)
{
	struct pmh_reg_mr reg;
	struct pmh_mr *mr;
	u32 handle;
	int ret;

	if (copy_from_user(&reg, arg, sizeof(reg)))
		return -EFAULT;
	if (reg.flags & ~(PMH_REG_WRITE | PMH_REG_NO_INVALIDATE))
		return -EINVAL;
	if (reg.addr > ULONG_MAX || reg.length > SIZE_MAX)
		return -EINVAL;

	/* In this process's context: peer clients look the range up in current's mm. */
	mr = pmh_mr_register(reg.addr, reg.length, reg.flags);
	if (IS_ERR(mr)) {
		atomic_inc(&pmh_counters.reg_failed);
		return PTR_ERR(mr);
	}

	reg.nmap = mr->reg_nmap;
	reg.core_context = mr->xa_id;
	reg.page_size = mr->is_peer ? mr->page_size : 0;
	memset(reg.client, 0, sizeof(reg.client));
	if (mr->is_peer)
		memcpy(reg.client, mr->client->peer_mem->name,
		       min_t(size_t, sizeof(reg.client) - 1, IB_PEER_MEMORY_NAME_MAX));

	mutex_lock(&f->lock);
	if (f->disassociated) {
		/*
		 * The device went away while this registration was in flight: ib_uverbs' removal
		 * waits for the command and then destroys what it made, from the remover's task.
		 */
		struct pmh_dereg_work w = { .device_removal = true };

		mutex_unlock(&f->lock);
		INIT_LIST_HEAD(&w.mrs);
		list_add_tail(&mr->work_node, &w.mrs);
		pmh_dereg_in_kworker(&w);
		atomic_inc(&pmh_counters.reg_failed);
		return -EIO;
	}
	ret = xa_alloc(&f->mrs, &handle, mr, xa_limit_32b, GFP_KERNEL);
	mutex_unlock(&f->lock);
	if (ret)
		goto err_dereg;
	reg.handle = handle;
	if (copy_to_user(arg, &reg, sizeof(reg))) {
		mutex_lock(&f->lock);
		mr = xa_erase(&f->mrs, handle);
		mutex_unlock(&f->lock);
		ret = -EFAULT;
		if (!mr)
			return ret;	/* already deregistered through a guessed handle */
		goto err_dereg;
	}
	atomic_inc(&pmh_counters.reg_ok);
	return 0;

err_dereg:
	pmh_mr_deregister(mr);
	atomic_inc(&pmh_counters.reg_failed);
	return ret;
}

static long pmh_dereg_handle(struct pmh_file *f, u64 handle, u32 flags)
{
	struct pmh_dereg_work w = { };
	struct pmh_mr *mr;

	if (flags & ~PMH_DEREG_KWORKER)
		return -EINVAL;
	if (handle > U32_MAX)
		return -ENOENT;
	down_read(&f->destroy_rwsem);
	mutex_lock(&f->lock);
	mr = xa_erase(&f->mrs, handle);
	mutex_unlock(&f->lock);
	if (mr && (flags & PMH_DEREG_KWORKER)) {
		INIT_LIST_HEAD(&w.mrs);
		list_add_tail(&mr->work_node, &w.mrs);
		pmh_dereg_in_kworker(&w);
	} else if (mr) {
		pmh_mr_deregister(mr);
	}
	up_read(&f->destroy_rwsem);
	return mr ? 0 : -ENOENT;
}

static long pmh_dereg_mr(struct pmh_file *f, void __user *arg)
{
	u64 handle;

	if (copy_from_user(&handle, arg, sizeof(handle)))
		return -EFAULT;
	return pmh_dereg_handle(f, handle, 0);
}

static long pmh_dereg_mr_ex(struct pmh_file *f, void __user *arg)
{
	struct pmh_dereg_mr d;

	if (copy_from_user(&d, arg, sizeof(d)))
		return -EFAULT;
	if (d.pad)
		return -EINVAL;
	return pmh_dereg_handle(f, d.handle, d.flags);
}

static long pmh_query_mr(struct pmh_file *f, void __user *arg)
{
	struct pmh_sge *sges = NULL;
	struct pmh_query_mr q;
	struct scatterlist *sg;
	struct pmh_mr *mr;
	unsigned int i, n = 0;
	int ret = 0;

	if (copy_from_user(&q, arg, sizeof(q)))
		return -EFAULT;
	if (q.handle > U32_MAX)
		return -ENOENT;
	if (q.sges && q.max_sges) {
		sges = kvcalloc(min(q.max_sges, PMH_QUERY_MAX_SGES), sizeof(*sges), GFP_KERNEL);
		if (!sges)
			return -ENOMEM;
	}

	mutex_lock(&f->lock);
	mr = xa_load(&f->mrs, q.handle);
	if (!mr) {
		mutex_unlock(&f->lock);
		kvfree(sges);
		return -ENOENT;
	}
	mutex_lock(&mr->mapping_lock);
	q.nmap = pmh_mr_sgt(mr)->nents;
	q.state = mr->revoked ? PMH_MR_INVALIDATED : PMH_MR_MAPPED;
	q.invalidations = mr->invalidations;
	q.addr = mr->addr;
	q.length = mr->length;
	q.core_context = mr->xa_id;
	q.invalidated_ns = mr->invalidated_ns;
	q.unmapped_by_invalidation = mr->unmapped_by_invalidation;
	memset(q.client, 0, sizeof(q.client));
	if (mr->is_peer)
		memcpy(q.client, mr->client->peer_mem->name,
		       min_t(size_t, sizeof(q.client) - 1, IB_PEER_MEMORY_NAME_MAX));
	/* After an invalidation the SG list is no longer the host's to read. */
	if (sges && mr->state == PMH_STATE_MAPPED) {
		for_each_sgtable_dma_sg(pmh_mr_sgt(mr), sg, i) {
			if (n == min(q.max_sges, PMH_QUERY_MAX_SGES))
				break;
			sges[n].dma_addr = sg_dma_address(sg);
			sges[n].length = sg_dma_len(sg);
			n++;
		}
	}
	mutex_unlock(&mr->mapping_lock);
	mutex_unlock(&f->lock);

	if (n && copy_to_user(u64_to_user_ptr(q.sges), sges, n * sizeof(*sges)))
		ret = -EFAULT;
	else if (copy_to_user(arg, &q, sizeof(q)))
		ret = -EFAULT;
	kvfree(sges);
	return ret;
}

static long pmh_dma(struct pmh_file *f, void __user *arg)
{
	struct pmh_dma d;
	struct pmh_mr *mr;
	bool to_mr;
	void *buf;
	int ret;

	if (copy_from_user(&d, arg, sizeof(d)))
		return -EFAULT;
	if (d.direction != PMH_DMA_TO_MR && d.direction != PMH_DMA_FROM_MR)
		return -EINVAL;
	if (!d.length || d.length > PMH_DMA_MAX || d.handle > U32_MAX)
		return -EINVAL;
	to_mr = d.direction == PMH_DMA_TO_MR;

	/* User memory is touched outside the MR's lock: faults must not nest in it. */
	buf = kvmalloc(d.length, GFP_KERNEL);
	if (!buf)
		return -ENOMEM;
	if (to_mr && copy_from_user(buf, u64_to_user_ptr(d.buf), d.length)) {
		ret = -EFAULT;
		goto out;
	}

	mutex_lock(&f->lock);
	mr = xa_load(&f->mrs, d.handle);
	if (!mr) {
		mutex_unlock(&f->lock);
		ret = -ENOENT;
		goto out;
	}
	/* Held over the transfer: an invalidation waits until the NIC is done with the MR. */
	mutex_lock(&mr->mapping_lock);
	if (mr->revoked || mr->state != PMH_STATE_MAPPED) {
		atomic_inc(&pmh_counters.dma_refused);
		ret = -EACCES;
	} else if (to_mr && !mr->writable) {
		ret = -EACCES;
	} else if (d.offset > mr->length || d.length > mr->length - d.offset) {
		ret = -EINVAL;
	} else {
		ret = pmh_nic_transfer(mr, d.offset, buf, d.length, to_mr);
	}
	mutex_unlock(&mr->mapping_lock);
	mutex_unlock(&f->lock);

	if (!ret && !to_mr && copy_to_user(u64_to_user_ptr(d.buf), buf, d.length))
		ret = -EFAULT;
out:
	kvfree(buf);
	return ret;
}

static long pmh_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	struct pmh_file *f = file->private_data;
	void __user *uarg = (void __user *)arg;

	/* A disassociated file answers nothing but -EIO until it is closed (the registration checks
	 * again under the file's lock, for one in flight during the removal). */
	if (cmd != PMH_IOC_REMOVE_DEVICE && READ_ONCE(f->disassociated))
		return -EIO;
	switch (cmd) {
	case PMH_IOC_REG_MR:
		return pmh_reg_mr(f, uarg);
	case PMH_IOC_DEREG_MR:
		return pmh_dereg_mr(f, uarg);
	case PMH_IOC_QUERY_MR:
		return pmh_query_mr(f, uarg);
	case PMH_IOC_DMA:
		return pmh_dma(f, uarg);
	case PMH_IOC_DEREG_MR_EX:
		return pmh_dereg_mr_ex(f, uarg);
	case PMH_IOC_REMOVE_DEVICE:
		return pmh_remove_device();
	default:
		return -ENOTTY;
	}
}

static const struct file_operations pmh_fops = {
	.owner = THIS_MODULE,
	.open = pmh_open,
	.release = pmh_release,
	.unlocked_ioctl = pmh_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
};

static struct miscdevice pmh_misc = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = "peer_mem_host",
	.fops = &pmh_fops,
	.mode = 0666,
};

static int clients_show(struct seq_file *m, void *unused)
{
	pmh_clients_show(m);
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(clients);

static struct dentry *pmh_debugfs;

static void pmh_debugfs_init(void)
{
	static const struct {
		const char *name;
		atomic_t *v;
	} files[] = {
		{ "live_mrs", &pmh_counters.live_mrs },
		{ "live_peer_mrs", &pmh_counters.live_peer_mrs },
		{ "live_ordinary_mrs", &pmh_counters.live_ordinary_mrs },
		{ "registered_clients", &pmh_counters.registered_clients },
		{ "reg_ok", &pmh_counters.reg_ok },
		{ "reg_failed", &pmh_counters.reg_failed },
		{ "peer_reg_unwound", &pmh_counters.peer_reg_unwound },
		{ "alignment_refusals", &pmh_counters.alignment_refusals },
		{ "invalidate_calls", &pmh_counters.invalidate_calls },
		{ "invalidate_unknown", &pmh_counters.invalidate_unknown },
		{ "inline_unmaps", &pmh_counters.inline_unmaps },
		{ "dma_unmap_calls", &pmh_counters.dma_unmap_calls },
		{ "put_pages_calls", &pmh_counters.put_pages_calls },
		{ "release_calls", &pmh_counters.release_calls },
		{ "kworker_deregs", &pmh_counters.kworker_deregs },
		{ "removed_by_device", &pmh_counters.removed_by_device },
		{ "close_deregs", &pmh_counters.close_deregs },
		{ "dma_ops", &pmh_counters.dma_ops },
		{ "dma_refused", &pmh_counters.dma_refused },
		{ "nic_iommu", &pmh_counters.nic_iommu },
		{ "race_gate_timeouts", &pmh_counters.race_gate_timeouts },
	};
	size_t i;

	pmh_debugfs = debugfs_create_dir("peer_mem_host", NULL);
	for (i = 0; i < ARRAY_SIZE(files); i++)
		debugfs_create_atomic_t(files[i].name, 0444, pmh_debugfs, files[i].v);
	debugfs_create_file("clients", 0444, pmh_debugfs, NULL, &clients_fops);
	pmh_race_init(pmh_debugfs);
}

static int __init pmh_init(void)
{
	int ret;

	pmh_wq = alloc_workqueue("peer_mem_host", WQ_UNBOUND, 0);
	if (!pmh_wq)
		return -ENOMEM;
	pmh_debugfs_init();
	ret = pmh_nic_init();
	if (ret)
		goto err_debugfs;
	ret = misc_register(&pmh_misc);
	if (ret)
		goto err_nic;
	pr_info("peer_mem_host: loaded (ex_support=%d sysfs=%d page_size_before_dma_map=%d trim_sgl=%d)\n",
		pmh_ex_support, pmh_sysfs, pmh_page_size_before_dma_map, pmh_trim_sgl);
	return 0;

err_nic:
	pmh_nic_exit();
err_debugfs:
	debugfs_remove_recursive(pmh_debugfs);
	pmh_race_exit();
	destroy_workqueue(pmh_wq);
	return ret;
}

static void __exit pmh_exit(void)
{
	misc_deregister(&pmh_misc);
	pmh_nic_exit();
	debugfs_remove_recursive(pmh_debugfs);
	pmh_race_exit();
	destroy_workqueue(pmh_wq);
}

module_init(pmh_init);
module_exit(pmh_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("Test stand-in for the ib_core peer-memory host and an RDMA NIC (QEMU edu)");
MODULE_VERSION("1.0");

/* The device nonpci_dma_device hands out: the misc device's, which is no PCI device. */
struct device *pmh_nonpci_device(void)
{
	return pmh_misc.this_device;
}
