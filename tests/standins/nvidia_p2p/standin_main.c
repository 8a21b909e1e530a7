// SPDX-License-Identifier: GPL-2.0
/*
 * NVIDIA P2P stand-in: the device side. Binds to the ivshmem-plain "GPU", hands out "GPU memory"
 * from its BAR2 in 64 KiB granules through /dev/nvidia_p2p_standin (ALLOC, mmap, FREE, INFO,
 * UNREGISTER, REGISTER; see uapi/nvidia_p2p_standin.h) and owns the module's parameters and
 * lifetime. The RM layer is standin_rm.c, the nvidia_p2p_* API standin_p2p.c, race points
 * standin_race.c, debugfs standin_debugfs.c.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/bitmap.h>
#include <linux/dma-mapping.h>
#include <linux/fs.h>
#include <linux/miscdevice.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/sched/mm.h>
#include <linux/slab.h>
#include <linux/uaccess.h>

#include "standin.h"
#include "uapi/nvidia_p2p_standin.h"

static_assert(NVP2P_GPU_PAGE_SIZE == GPU_PAGE_SIZE);

struct standin_state standin = {
	.api_lock = __RWSEM_INITIALIZER(standin.api_lock),
	.gpus_lock = __MUTEX_INITIALIZER(standin.gpus_lock),
	.alloc_lock = __SPIN_LOCK_UNLOCKED(standin.alloc_lock),
	.allocs = LIST_HEAD_INIT(standin.allocs),
	.next_handle = 1,
};

/*
 * Which driver branch to behave like (README.md, "Driver generations"): 550 (the nv-p2p.h we are
 * built against), 570 (64 KiB length check, FORCE_BAR1 flag) or 580 (page table 2.0, topology
 * check in dma_map_pages).
 */
unsigned int generation = 550;

static int generation_set(const char *val, const struct kernel_param *kp)
{
	unsigned int v;
	int ret = kstrtouint(val, 0, &v);

	if (ret)
		return ret;
	if (v != 550 && v != 570 && v != 580)
		return -EINVAL;
	WRITE_ONCE(generation, v);
	return 0;
}

static const struct kernel_param_ops generation_ops = {
	.set = generation_set,
	.get = param_get_uint,
};
module_param_cb(generation, &generation_ops, &generation, 0644);
MODULE_PARM_DESC(generation, "driver branch to behave like: 550 (default), 570 or 580");

/*
 * The nvidia_p2p_page_table layout handed out: 0 follows the generation (1.2 up to 575, 2.0 from
 * 580); 0x00010002 or 0x00020000 overrides it. Reading shows the layout in effect.
 */
static unsigned int page_table_version;

u32 standin_page_table_version(void)
{
	u32 v = READ_ONCE(page_table_version);

	if (v)
		return v;
	return READ_ONCE(generation) >= 580 ? PAGE_TABLE_VERSION_2_0 : PAGE_TABLE_VERSION_1_2;
}

static int page_table_version_set(const char *val, const struct kernel_param *kp)
{
	unsigned int v;
	int ret = kstrtouint(val, 0, &v);

	if (ret)
		return ret;
	if (v && v != PAGE_TABLE_VERSION_1_2 && v != PAGE_TABLE_VERSION_2_0)
		return -EINVAL;
	WRITE_ONCE(page_table_version, v);
	return 0;
}

static int page_table_version_get(char *buf, const struct kernel_param *kp)
{
	return sysfs_emit(buf, "0x%08x\n", standin_page_table_version());
}

static const struct kernel_param_ops page_table_version_ops = {
	.set = page_table_version_set,
	.get = page_table_version_get,
};
module_param_cb(page_table_version, &page_table_version_ops, &page_table_version, 0644);
MODULE_PARM_DESC(page_table_version,
		 "page table version handed out: 0 (the generation's, default), 0x00010002 or 0x00020000");

/* RM keeps 36 MiB of BAR1 out of third-party P2P's reach (CLI_THIRD_PARTY_P2P_BAR1_RESERVE). */
unsigned int bar1_reserve_mib = 36;
module_param(bar1_reserve_mib, uint, 0644);
MODULE_PARM_DESC(bar1_reserve_mib, "BAR1 MiB that pins may not use (default 36)");

/*
 * The BAR1 size the accounting believes in (RM's bar1Info.bar1Size); 0: the real BAR's. It only
 * moves the -ENOMEM threshold: page tables always carry the allocation's own BAR addresses.
 */
unsigned int bar1_size_mib;
module_param(bar1_size_mib, uint, 0644);
MODULE_PARM_DESC(bar1_size_mib, "BAR1 size for the accounting in MiB (default 0: the BAR's size)");

/* 580+: NVreg_GrdmaPciTopoCheckOverride: 0 no override, 1 allow, 2 deny. */
unsigned int grdma_pci_topo_check_override;

static int topo_override_set(const char *val, const struct kernel_param *kp)
{
	unsigned int v;
	int ret = kstrtouint(val, 0, &v);

	if (ret)
		return ret;
	if (v > 2)
		return -EINVAL;
	WRITE_ONCE(grdma_pci_topo_check_override, v);
	return 0;
}

static const struct kernel_param_ops topo_override_ops = {
	.set = topo_override_set,
	.get = param_get_uint,
};
module_param_cb(grdma_pci_topo_check_override, &topo_override_ops,
		&grdma_pci_topo_check_override, 0644);
MODULE_PARM_DESC(grdma_pci_topo_check_override,
		 "580+ NVreg_GrdmaPciTopoCheckOverride: 0 none (default), 1 allow, 2 deny");

/* 580+: NV_FLAG_PASSTHRU: nvidia.ko allows RDMA in pass-through VMs whatever the topology. */
bool passthrough_vm;
module_param(passthrough_vm, bool, 0644);
MODULE_PARM_DESC(passthrough_vm, "580+: behave as in a pass-through VM (topology not checked)");

/*
 * The cost model (README.md, "Cost model"): off, every call costs what the stand-in's own code
 * costs; on, pinning and unpinning also cost what nvidia.ko's RM spends there on a real GPU. Tests
 * keep it off; make bench turns it on for half of its runs.
 */
bool cost_model;
module_param(cost_model, bool, 0644);
MODULE_PARM_DESC(cost_model, "make pins and unpins cost what nvidia.ko's do (default N: off)");

/*
 * The GPU is in MIG mode. 535 and 550 refuse persistent pins then (NV-PERSISTENT-REFUSED;
 * RmP2PGetGpuByAddress, the first section of get_pages_persistent: MIG, APM, vGPU and PPC64LE are
 * "unsupported configs", NV_ERR_NOT_SUPPORTED, -ENOTSUPP through nv-p2p.c's status map); 555 and
 * later pin in the MIG instance's internal object (595 p2p.c RmP2PGetPagesPersistent,
 * RmP2PGetMigInfo). Non-persistent pins work in both.
 */
bool mig_enabled;
module_param(mig_enabled, bool, 0644);
MODULE_PARM_DESC(mig_enabled,
		 "the GPU is in MIG mode: generation 550 refuses persistent pins (-ENOTSUPP), 570+ pins");

/*
 * The tgid of the process that created RM's internal P2P object (the GPU's first opener, when RM
 * initialised the GPU in its context): that object's pid list holds it, so its put_pages searches
 * the internal object, persistent pins included (NV-INTERNAL-OBJECT: thirdpartyp2pConstruct
 * records the creating process; the internal object is made at GPU state init, 550.163.01
 * src/nvidia/src/kernel/gpu/mem_mgr/mem_mgr.c:552; the lookup walks every object whose pid list
 * holds the caller, NV-PUT-PAGES-LOOKUP, src/nvidia/src/kernel/gpu/bus/third_party_p2p.c:300-342).
 * 0: nobody's (nvidia-persistenced, or a GPU initialised by a process that has gone).
 */
int internal_object_pid;
module_param(internal_object_pid, int, 0644);
MODULE_PARM_DESC(internal_object_pid,
		 "tgid whose put_pages also searches RM's internal object of persistent pins (default 0: none)");

/*
 * MPS: the tgid of a client process that has left the P2P object holding its pins. Under MPS the
 * server owns the memory and the P2P object; NV503C_CTRL_CMD_REGISTER_PID puts a client's pid and
 * RM client handle in that object's pid list, and freeing that client handle (its close of
 * /dev/nvidiactl, its exit; which CUDA calls free it is not in the open sources) takes them out
 * again (CliUnregisterFromThirdPartyP2P -> CliDelThirdPartyP2PClientPid) without touching the pins
 * (NV-PID-LIST). Then every lookup by the caller's pid (RmP2PGetInfoWithoutToken, 550.163.01
 * p2p.c:873-954, through CliNextThirdPartyP2PInfoWithPid, third_party_p2p.c:300-342) finds nothing
 * for it: its get_pages fail, its put_pages find no pin and answer 0 (NV_ERR_OBJECT_NOT_FOUND,
 * NV-PUT-PAGES-LOOKUP), and its pins stay armed until the server frees the memory. 0: nobody has
 * left.
 */
int mps_departed_tgid;
module_param(mps_departed_tgid, int, 0644);
MODULE_PARM_DESC(mps_departed_tgid,
		 "tgid of an MPS client taken out of the P2P object's pid list: its lookups find nothing, its pins stay (default 0: none)");

/*
 * RM's registry key RmRoApiLock with its FREE_RESOURCE bit set (NV-TEARDOWN-LOCK-MODE; not set by
 * default, where only controls take the API lock for read, and only for the modules of
 * apiLockModuleMask): an explicit free of video memory then takes the API lock for read
 * (serverFreeResourceLookupLockFlags, serverFreeResourceTree, serverTopLock_Prologue) and the GPUs
 * lock (RS_FLAGS_ACQUIRE_GPUS_LOCK_ON_FREE), and runs the P2P teardown and its free callbacks under
 * them. (The force-shared-lock property, on by default, concerns only resources flagged for it,
 * OsDescMemory: not video memory.) Every other path takes it for write as before: the rm_p2p_*
 * calls, UNREGISTER_VIDMEM (the P2P controls are not API_LOCK_READONLY, 595.45.04
 * g_third_party_p2p_nvoc.c:351-428), GPU removal, and a closing file's clients, which RM frees
 * under a write-held lock (NV-TEARDOWN-LOCK-MODE). What changes for a client: the callback of a
 * FREE runs under a read-held lock. A re-entry from it fails as under a write-held one: RM records
 * every holder, reader or writer, in a thread-local entry, which rmapiLockIsOwner reads
 * (NV-REENTRY).
 */
bool ro_api_lock_free;
module_param(ro_api_lock_free, bool, 0644);
MODULE_PARM_DESC(ro_api_lock_free,
		 "FREE holds the RM API lock for read (RmRoApiLock's free bit; default: write)");

/* 580+: NV_FLAG_PCI_P2P_UNSUPPORTED_CHIPSET (Grace, Ampere Altra, AmpereOne in nvidia.ko). */
bool p2p_unsupported_chipset;
module_param(p2p_unsupported_chipset, bool, 0644);
MODULE_PARM_DESC(p2p_unsupported_chipset,
		 "580+: the chipset is flagged unable to do P2P: peers need a common upstream bridge");

/*
 * Find a live, registered allocation of process @tgid covering [va, va + len) and take a reference
 * on it, or NULL. This is the "lookup by the calling process" of nvidia.ko: RM looks the VA up in
 * the P2P objects whose pid list holds the caller (RmP2PGetInfoWithoutToken, 550.163.01 p2p.c:
 * 873-954), so only the owner's own memory counts, and not after it left the object
 * (mps_departed_tgid). By tgid, not by mm: an exiting task has no mm any more, and RM's lookup does
 * not need one. Called under the API lock (a->unregistered).
 */
struct standin_alloc *standin_get_alloc(pid_t tgid, u64 va, u64 len)
{
	pid_t departed = READ_ONCE(mps_departed_tgid);
	struct standin_alloc *a, *found = NULL;

	if (departed && tgid == departed) {
		count_inc(departed_lookups);
		return NULL;
	}
	spin_lock(&standin.alloc_lock);
	list_for_each_entry(a, &standin.allocs, node) {
		if (a->freed || a->unregistered || a->tgid != tgid || !a->va)
			continue;
		if (va >= a->va && va - a->va < a->size && len <= a->size - (va - a->va)) {
			a->refs++;
			found = a;
			break;
		}
	}
	spin_unlock(&standin.alloc_lock);
	return found;
}

void standin_alloc_get(struct standin_alloc *a)
{
	spin_lock(&standin.alloc_lock);
	a->refs++;
	spin_unlock(&standin.alloc_lock);
}

/* Drop a reference; the last one gives the BAR range back. Process context. */
void standin_alloc_put(struct standin_alloc *a)
{
	struct standin_gpu *gpu;

	spin_lock(&standin.alloc_lock);
	if (--a->refs) {
		spin_unlock(&standin.alloc_lock);
		return;
	}
	list_del(&a->node);
	gpu = standin.gpu;
	if (gpu)
		bitmap_clear(gpu->used, a->bar_offset / GPU_PAGE_SIZE, a->size / GPU_PAGE_SIZE);
	spin_unlock(&standin.alloc_lock);
	count_dec(live_allocations);
	count_sub(allocated_bytes, a->size);
	mmdrop(a->mm);
	kfree(a);
}

/* Under alloc_lock. */
static struct standin_alloc *find_handle_locked(u64 handle)
{
	struct standin_alloc *a;

	list_for_each_entry(a, &standin.allocs, node)
		if (a->handle == handle)
			return a;
	return NULL;
}

static long ioc_alloc(struct file *file, void __user *arg)
{
	struct nvp2p_alloc req;
	struct standin_alloc *a;
	struct standin_gpu *gpu;
	unsigned long first, n;
	int ret;

	if (copy_from_user(&req, arg, sizeof(req)))
		return -EFAULT;
	ret = standin_inject(FN_ALLOC);
	if (ret)
		return ret;
	if (!req.size || req.size > U64_MAX - GPU_PAGE_SIZE)
		return -EINVAL;
	a = kzalloc(sizeof(*a), GFP_KERNEL);
	if (!a)
		return -ENOMEM;
	a->size = round_up(req.size, GPU_PAGE_SIZE);
	a->file = file;
	a->tgid = current->tgid;
	a->refs = 1;
	a->mm = current->mm;
	rm_init_vidmem(a);
	n = a->size / GPU_PAGE_SIZE;

	spin_lock(&standin.alloc_lock);
	gpu = standin.gpu;
	if (!gpu) {
		ret = -ENODEV;
		goto err_unlock;
	}
	if (a->size > gpu->bar_size) {
		ret = -ENOMEM;
		goto err_unlock;
	}
	first = bitmap_find_next_zero_area(gpu->used, gpu->granules, 0, n, 0);
	if (first >= gpu->granules) {
		ret = -ENOMEM;
		goto err_unlock;
	}
	bitmap_set(gpu->used, first, n);
	a->bar_offset = (u64)first * GPU_PAGE_SIZE;
	a->handle = standin.next_handle++;
	list_add_tail(&a->node, &standin.allocs);
	mmgrab(a->mm);
	spin_unlock(&standin.alloc_lock);
	count_inc(live_allocations);
	count_inc(total_allocations);
	count_add(allocated_bytes, a->size);

	req.size = a->size;
	req.handle = a->handle;
	req.mmap_offset = a->bar_offset;
	req.bar_offset = a->bar_offset;
	/* On a fault the allocation stays with the file and goes at release, as a leaked one would. */
	return copy_to_user(arg, &req, sizeof(req)) ? -EFAULT : 0;

err_unlock:
	spin_unlock(&standin.alloc_lock);
	kfree(a);
	return ret;
}

/*
 * Find the allocation @handle of @file for its owner (under alloc_lock): NULL with *err set when
 * there is none (-EINVAL) or it is another process's (-EACCES: a forked child shares the file,
 * not the allocation).
 */
static struct standin_alloc *find_owned_locked(struct file *file, u64 handle, int *err)
{
	struct standin_alloc *a = find_handle_locked(handle);

	if (!a || a->file != file || a->freed) {
		*err = -EINVAL;
		return NULL;
	}
	if (a->mm != current->mm) {
		*err = -EACCES;
		return NULL;
	}
	return a;
}

/*
 * cudaFree: every non-persistent pin's free callback runs now, in this process, under the API
 * lock, as RM frees video memory (vidmemDestruct -> CliUnregisterMemoryFromThirdPartyP2P).
 */
static long ioc_free(struct file *file, u64 __user *arg)
{
	struct standin_alloc *a;
	u64 handle;
	int ret;

	if (get_user(handle, arg))
		return -EFAULT;
	ret = rm_api_lock_free(__func__);
	if (ret)
		return ret;
	spin_lock(&standin.alloc_lock);
	a = find_owned_locked(file, handle, &ret);
	if (a)
		a->freed = true;
	spin_unlock(&standin.alloc_lock);
	if (a)
		rm_del_vidmem_locked(a);
	rm_api_unlock_free();
	if (!a)
		return ret;
	standin_alloc_put(a);
	return 0;
}

/*
 * NV503C_CTRL_CMD_UNREGISTER_VIDMEM: the memory leaves the process's third-party P2P object, so its
 * non-persistent pins are torn down (free callbacks) while the memory itself stays allocated and
 * mapped. Until NVP2P_IOC_REGISTER it cannot be pinned. Persistent pins are RM's own: untouched.
 */
static long ioc_unregister(struct file *file, u64 __user *arg, bool unregister)
{
	struct standin_alloc *a;
	u64 handle;
	int ret;

	if (get_user(handle, arg))
		return -EFAULT;
	ret = rm_api_lock(__func__);
	if (ret)
		return ret;
	spin_lock(&standin.alloc_lock);
	a = find_owned_locked(file, handle, &ret);
	spin_unlock(&standin.alloc_lock);
	if (a) {
		/* Freeing takes the API lock too, so the allocation cannot go meanwhile. */
		if (unregister && !a->unregistered) {
			a->unregistered = true;
			count_inc(unregisters);
			rm_del_vidmem_locked(a);
		} else if (!unregister) {
			a->unregistered = false;
		}
	}
	rm_api_unlock();
	return a ? 0 : ret;
}

static long ioc_info(void __user *arg)
{
	struct nvp2p_info info;
	struct standin_alloc *a;
	struct standin_gpu *gpu;
	int ret;

	if (copy_from_user(&info, arg, sizeof(info)))
		return -EFAULT;
	ret = rm_api_lock(__func__);	/* for the records */
	if (ret)
		return ret;
	spin_lock(&standin.alloc_lock);
	a = find_handle_locked(info.handle);
	gpu = standin.gpu;
	if (!a || !gpu) {
		ret = -EINVAL;
	} else {
		struct list_head *pos;
		int i;

		info.va = a->va;
		info.size = a->size;
		info.bar_offset = a->bar_offset;
		info.phys_addr = gpu->bar_phys + a->bar_offset;
		info.live_pins = 0;
		for (i = 0; i < RM_OBJ_COUNT; i++)
			list_for_each(pos, &a->vidmem[i].records)
				info.live_pins++;
		info.freed = a->freed;
	}
	spin_unlock(&standin.alloc_lock);
	rm_api_unlock();
	if (ret)
		return ret;
	return copy_to_user(arg, &info, sizeof(info)) ? -EFAULT : 0;
}

static long standin_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	void __user *uarg = (void __user *)arg;

	switch (cmd) {
	case NVP2P_IOC_ALLOC:
		return ioc_alloc(file, uarg);
	case NVP2P_IOC_FREE:
		return ioc_free(file, uarg);
	case NVP2P_IOC_INFO:
		return ioc_info(uarg);
	case NVP2P_IOC_UNREGISTER:
		return ioc_unregister(file, uarg, true);
	case NVP2P_IOC_REGISTER:
		return ioc_unregister(file, uarg, false);
	}
	return -ENOTTY;
}

static void standin_vma_open(struct vm_area_struct *vma)
{
	struct standin_alloc *a = vma->vm_private_data;

	spin_lock(&standin.alloc_lock);
	a->refs++;
	spin_unlock(&standin.alloc_lock);
}

static void standin_vma_close(struct vm_area_struct *vma)
{
	struct standin_alloc *a = vma->vm_private_data;

	/*
	 * munmap: the VA no longer names the allocation (the pins stay). At exit the CPU mapping goes
	 * before the files close (exit_mm, then exit_files), but a CUDA VA names its memory until the
	 * context dies with the file (standin_release): RM's lookup still finds it meanwhile.
	 */
	spin_lock(&standin.alloc_lock);
	if (a->va == vma->vm_start && !(current->flags & PF_EXITING))
		a->va = 0;
	spin_unlock(&standin.alloc_lock);
	standin_alloc_put(a);
}

/* The mapping is the allocation's CUDA VA: it must not be split, moved or grown. */
static int standin_vma_may_split(struct vm_area_struct *vma, unsigned long addr)
{
	return -EINVAL;
}

static int standin_vma_mremap(struct vm_area_struct *vma)
{
	return -EINVAL;
}

static const struct vm_operations_struct standin_vm_ops = {
	.open = standin_vma_open,
	.close = standin_vma_close,
	.may_split = standin_vma_may_split,
	.mremap = standin_vma_mremap,
};

static int standin_mmap(struct file *file, struct vm_area_struct *vma)
{
	u64 offset = (u64)vma->vm_pgoff << PAGE_SHIFT;
	u64 size = vma->vm_end - vma->vm_start;
	struct standin_alloc *a;
	phys_addr_t phys = 0;
	int ret = 0;

	if (!(vma->vm_flags & VM_SHARED))
		return -EINVAL;
	spin_lock(&standin.alloc_lock);
	a = NULL;
	list_for_each_entry(a, &standin.allocs, node)
		if (a->file == file && !a->freed && a->bar_offset == offset)
			break;
	if (list_entry_is_head(a, &standin.allocs, node))
		ret = -EINVAL;
	else if (a->mm != vma->vm_mm)
		ret = -EACCES;		/* GPU memory of another process */
	else if (a->va)
		ret = -EBUSY;		/* one CUDA VA per allocation */
	else if (size != a->size || !IS_ALIGNED(vma->vm_start, GPU_PAGE_SIZE))
		ret = -EINVAL;
	else if (!standin.gpu)
		ret = -ENODEV;
	if (!ret) {
		a->va = vma->vm_start;
		a->refs++;
		phys = standin.gpu->bar_phys + a->bar_offset;
	}
	spin_unlock(&standin.alloc_lock);
	if (ret)
		return ret;

	/*
	 * VM_IO | VM_PFNMAP: no struct pages, so pin_user_pages() and friends fail here exactly as
	 * on CUDA memory. VM_DONTCOPY: a forked child does not inherit GPU memory.
	 */
	vm_flags_set(vma, VM_IO | VM_PFNMAP | VM_DONTEXPAND | VM_DONTDUMP | VM_DONTCOPY);
	vma->vm_page_prot = pgprot_writecombine(vma->vm_page_prot);
	ret = io_remap_pfn_range(vma, vma->vm_start, phys >> PAGE_SHIFT, size, vma->vm_page_prot);
	if (ret) {
		spin_lock(&standin.alloc_lock);
		a->va = 0;
		spin_unlock(&standin.alloc_lock);
		standin_alloc_put(a);
		return ret;
	}
	vma->vm_private_data = a;
	vma->vm_ops = &standin_vm_ops;
	return 0;
}

/*
 * An open file is a CUDA context: an RM client with a device on the GPU, which RM counts as a user
 * of it (_gpuGetUserClientCount, src/nvidia/src/kernel/gpu/gpu_rmapi.c 550:60-98) until the
 * context goes (the reset debugfs file). Every open file counts, with a device or not: harsher
 * than RM, so at worst a reset is refused too often.
 */
static int standin_open(struct inode *inode, struct file *file)
{
	count_inc(user_clients);
	return 0;
}

/*
 * Process exit (or the last close): destroying the CUDA context frees what is left, under one hold
 * of the API lock as RM frees a client (rm_cleanup_file_private).
 */
static int standin_release(struct inode *inode, struct file *file)
{
	struct standin_alloc *a, *victim;

	count_dec(user_clients);

	/*
	 * Only the task holding the lock could be refused, and it cannot be closing our file. For
	 * write in every mode: RM frees a closing file's clients under the lock taken for write
	 * (rm_cleanup_file_private, NV-TEARDOWN-LOCK-MODE), unless clients are freed deferred
	 * (RmClientListDeferredFree, off by default), which ro_api_lock_free does not model.
	 */
	if (WARN_ON(rm_api_lock(__func__)))
		return 0;
	for (;;) {
		victim = NULL;
		spin_lock(&standin.alloc_lock);
		list_for_each_entry(a, &standin.allocs, node) {
			if (a->file == file && !a->freed) {
				a->freed = true;
				a->va = 0;	/* the context is gone: its VA names nothing */
				victim = a;
				break;
			}
		}
		spin_unlock(&standin.alloc_lock);
		if (!victim)
			break;
		rm_del_vidmem_locked(victim);
		standin_alloc_put(victim);
	}
	rm_api_unlock();
	return 0;
}

static const struct file_operations standin_fops = {
	.owner = THIS_MODULE,
	.unlocked_ioctl = standin_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
	.mmap = standin_mmap,
	.open = standin_open,
	.release = standin_release,
};

static struct miscdevice standin_misc = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = "nvidia_p2p_standin",
	.fops = &standin_fops,
	.mode = 0666,
};

static int standin_probe(struct pci_dev *pdev, const struct pci_device_id *id)
{
	struct standin_gpu *gpu;
	int ret;

	if (standin.gpu) {
		dev_info(&pdev->dev, "only one GPU stand-in is supported; ignoring this one\n");
		return -EBUSY;
	}
	if (!(pci_resource_flags(pdev, 2) & IORESOURCE_MEM) || pci_resource_len(pdev, 2) < GPU_PAGE_SIZE)
		return -ENODEV;
	ret = pci_enable_device_mem(pdev);
	if (ret)
		return ret;
	ret = pci_request_region(pdev, 2, KBUILD_MODNAME);
	if (ret)
		goto err_disable;
	/* A GPU addresses far more than 32 bits; it matters when it is its own peer. */
	ret = dma_set_mask_and_coherent(&pdev->dev, DMA_BIT_MASK(64));
	if (ret)
		goto err_release;
	gpu = kzalloc(sizeof(*gpu), GFP_KERNEL);
	if (!gpu) {
		ret = -ENOMEM;
		goto err_release;
	}
	gpu->pdev = pdev;
	gpu->bar_phys = pci_resource_start(pdev, 2);
	gpu->bar_size = pci_resource_len(pdev, 2);
	gpu->granules = gpu->bar_size / GPU_PAGE_SIZE;
	gpu->used = bitmap_zalloc(gpu->granules, GFP_KERNEL);
	if (!gpu->used) {
		ret = -ENOMEM;
		goto err_free;
	}
	/* A fixed, recognisable UUID: "STANDIN", then the PCI address. */
	memcpy(gpu->uuid, "STANDIN", 7);
	gpu->uuid[8] = pci_domain_nr(pdev->bus) >> 8;
	gpu->uuid[9] = pci_domain_nr(pdev->bus);
	gpu->uuid[10] = pdev->bus->number;
	gpu->uuid[11] = pdev->devfn;
	pci_set_drvdata(pdev, gpu);

	spin_lock(&standin.alloc_lock);
	standin.gpu = gpu;
	spin_unlock(&standin.alloc_lock);
	dev_info(&pdev->dev, "GPU stand-in: BAR2 %pa, %llu MiB, BAR1 reserve %u MiB\n",
		 &gpu->bar_phys, (u64)gpu->bar_size >> 20, bar1_reserve_mib);
	return 0;

err_free:
	kfree(gpu);
err_release:
	pci_release_region(pdev, 2);
err_disable:
	pci_disable_device(pdev);
	return ret;
}

static void standin_remove(struct pci_dev *pdev)
{
	struct standin_gpu *gpu = pci_get_drvdata(pdev);

	/* Only at unload (bind/unbind via sysfs is off): open files pin the module. */
	WARN_ON(rm_api_lock(__func__));
	rm_free_leftover_records();
	spin_lock(&standin.alloc_lock);
	if (!list_empty(&standin.allocs))
		pr_err("allocations left at unload; their BAR ranges are forgotten\n");
	standin.gpu = NULL;
	spin_unlock(&standin.alloc_lock);
	rm_api_unlock();
	bitmap_free(gpu->used);
	kfree(gpu);
	pci_release_region(pdev, 2);
	pci_disable_device(pdev);
}

static const struct pci_device_id standin_ids[] = {
	{ PCI_DEVICE(0x1af4, 0x1110) },	/* QEMU ivshmem (plain) */
	{ }
};
MODULE_DEVICE_TABLE(pci, standin_ids);

static struct pci_driver standin_pci_driver = {
	.name = KBUILD_MODNAME,
	.id_table = standin_ids,
	.probe = standin_probe,
	.remove = standin_remove,
	.driver.suppress_bind_attrs = true,
};

static int __init standin_init(void)
{
	int ret;

	ret = standin_p2p_init();
	if (ret)
		return ret;
	standin_debugfs_init();
	ret = pci_register_driver(&standin_pci_driver);
	if (ret)
		goto err_debugfs;
	ret = misc_register(&standin_misc);
	if (ret)
		goto err_pci;
	if (!standin.gpu)
		pr_warn("no ivshmem-plain device (1af4:1110): ALLOC will fail with ENODEV\n");
	pr_info("behaving like the %u driver branch (page table 0x%08x)\n", generation,
		standin_page_table_version());
	return 0;

err_pci:
	pci_unregister_driver(&standin_pci_driver);
err_debugfs:
	standin_debugfs_exit();
	standin_p2p_exit();
	return ret;
}

static void __exit standin_exit(void)
{
	misc_deregister(&standin_misc);
	pci_unregister_driver(&standin_pci_driver);
	standin_debugfs_exit();
	standin_p2p_exit();
}

module_init(standin_init);
module_exit(standin_exit);

MODULE_DESCRIPTION("Test-only stand-in for nvidia.ko's P2P API (nv-p2p.h) on an ivshmem BAR");
/* The license NVIDIA's open kernel modules carry, so clients see the same symbol rules. */
MODULE_LICENSE("Dual MIT/GPL");
