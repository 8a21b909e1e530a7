// SPDX-License-Identifier: GPL-2.0
/*
 * NVIDIA P2P stand-in: debugfs (/sys/kernel/debug/nvidia_p2p_standin/). One read-only file per
 * counter plus `counters` (all of them), `free_callback_delay_ms`, `recycle_freed_pins`, `recycle_into_persistent` (standin.h),
 * `race` (standin_race.c), and
 * `inject`:
 *
 *   echo "get_pages 3 -12" > inject     the 3rd call of nvidia_p2p_get_pages from now returns -ENOMEM
 *   echo "get_pages 0" > inject         disarm one
 *   echo clear > inject                 disarm all
 *   cat inject                          what is armed: "name nth errno calls-seen"
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/debugfs.h>
#include <linux/seq_file.h>
#include <linux/slab.h>
#include <linux/uaccess.h>

#include "standin.h"

static const char *const fn_names[FN_COUNT] = {
	[FN_ALLOC] = "alloc",
	[FN_GET_PAGES] = "get_pages",
	[FN_GET_PAGES_PERSISTENT] = "get_pages_persistent",
	[FN_PUT_PAGES] = "put_pages",
	[FN_PUT_PAGES_PERSISTENT] = "put_pages_persistent",
	[FN_DMA_MAP_PAGES] = "dma_map_pages",
	[FN_DMA_UNMAP_PAGES] = "dma_unmap_pages",
};

static DEFINE_SPINLOCK(inject_lock);
static struct {
	unsigned int nth;	/* 0: disarmed */
	unsigned int seen;	/* calls since armed */
	int err;
} injections[FN_COUNT];

static struct dentry *dir;

/* Called at the entry of each injectable function: 0, or the errno to fail this call with. */
int standin_inject(enum standin_fn fn)
{
	unsigned int nth = 0;
	int err = 0;

	spin_lock(&inject_lock);
	if (injections[fn].nth && ++injections[fn].seen == injections[fn].nth) {
		err = injections[fn].err;
		nth = injections[fn].nth;
		injections[fn].nth = 0;
		injections[fn].seen = 0;
	}
	spin_unlock(&inject_lock);
	if (err) {
		count_inc(injected_failures);
		pr_info("injected %d into call %u of %s\n", err, nth, fn_names[fn]);
	}
	return err;
}

static int inject_show(struct seq_file *s, void *unused)
{
	int i;

	spin_lock(&inject_lock);
	for (i = 0; i < FN_COUNT; i++)
		if (injections[i].nth)
			seq_printf(s, "%s %u %d %u\n", fn_names[i], injections[i].nth,
				   injections[i].err, injections[i].seen);
	spin_unlock(&inject_lock);
	return 0;
}

static int inject_open(struct inode *inode, struct file *file)
{
	return single_open(file, inject_show, NULL);
}

static ssize_t inject_write(struct file *file, const char __user *ubuf, size_t len, loff_t *ppos)
{
	char buf[64], name[32];
	unsigned int nth;
	int err = 0, n, i;

	if (len >= sizeof(buf))
		return -EINVAL;
	if (copy_from_user(buf, ubuf, len))
		return -EFAULT;
	buf[len] = '\0';
	if (sysfs_streq(buf, "clear")) {
		spin_lock(&inject_lock);
		memset(injections, 0, sizeof(injections));
		spin_unlock(&inject_lock);
		return len;
	}
	n = sscanf(buf, "%31s %u %d", name, &nth, &err);
	if (n < 2 || (nth && n != 3) || (nth && (err >= 0 || err < -MAX_ERRNO)))
		return -EINVAL;
	for (i = 0; i < FN_COUNT; i++)
		if (!strcmp(name, fn_names[i]))
			break;
	if (i == FN_COUNT)
		return -EINVAL;
	spin_lock(&inject_lock);
	injections[i].nth = nth;
	injections[i].err = err;
	injections[i].seen = 0;
	spin_unlock(&inject_lock);
	return len;
}

static const struct file_operations inject_fops = {
	.owner = THIS_MODULE,
	.open = inject_open,
	.read = seq_read,
	.llseek = seq_lseek,
	.release = single_release,
	.write = inject_write,
};

/*
 * reset: a GPU reset's first question. RM answers that the GPU is in use while a user client has a
 * device on it or an external kernel client holds it (gpuIsInUse, src/nvidia/src/kernel/gpu/
 * gpu_rmapi.c 550:100-108, reported as NV0000_CTRL_GPU_ID_INFO_IN_USE, gpu_mgr.c:2411), and
 * nvidia-smi (NVML, not in the open sources) does not reset a GPU in use. user_clients counts the
 * open GPU files (CUDA contexts), kernel_clients the nvidia_dev_get_uuid references persistent
 * pins hold (NV-DEVICE-REF). A write is refused with -EBUSY then (reset_refusals), and counted as
 * a reset otherwise; nothing else is modelled: a GPU nobody uses has nothing of ours to lose.
 * (Unbinding the driver from the GPU waits instead while nv_open_device's usage_count is raised,
 * nv-pci.c 550:986-1030, by the same holders.)
 */
static ssize_t reset_write(struct file *file, const char __user *ubuf, size_t len, loff_t *ppos)
{
	long long users = atomic64_read(&standin.c.user_clients);
	long long kernel = atomic64_read(&standin.c.kernel_clients);

	if (users > 0 || kernel > 0) {
		count_inc(reset_refusals);
		pr_info("reset: the GPU is in use: %lld user clients (CUDA contexts), %lld kernel clients (persistent pins)\n",
			users, kernel);
		return -EBUSY;
	}
	count_inc(resets);
	return len;
}

static const struct file_operations reset_fops = {
	.owner = THIS_MODULE,
	.write = reset_write,
	.llseek = noop_llseek,
};

static int counter_get(void *data, u64 *val)
{
	*val = atomic64_read(data);
	return 0;
}
DEFINE_DEBUGFS_ATTRIBUTE(counter_fops, counter_get, NULL, "%lld\n");

static int counters_show(struct seq_file *s, void *unused)
{
#define X(name) seq_printf(s, "%s %lld\n", #name, (long long)atomic64_read(&standin.c.name));
	STANDIN_COUNTERS(X)
#undef X
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(counters);

void standin_debugfs_init(void)
{
	dir = debugfs_create_dir(KBUILD_MODNAME, NULL);
#define X(name) debugfs_create_file_unsafe(#name, 0444, dir, &standin.c.name, &counter_fops);
	STANDIN_COUNTERS(X)
#undef X
	debugfs_create_file("counters", 0444, dir, NULL, &counters_fops);
	debugfs_create_file("inject", 0644, dir, NULL, &inject_fops);
	debugfs_create_file("reset", 0200, dir, NULL, &reset_fops);
	debugfs_create_u32("free_callback_delay_ms", 0644, dir, &standin.free_callback_delay_ms);
	debugfs_create_u32("dma_map_fail_page", 0644, dir, &standin.dma_map_fail_page);
	debugfs_create_bool("recycle_freed_pins", 0644, dir, &standin.recycle_freed_pins);
	debugfs_create_bool("recycle_into_persistent", 0644, dir, &standin.recycle_into_persistent);
	standin_race_init(dir);
}

void standin_debugfs_exit(void)
{
	debugfs_remove_recursive(dir);
	standin_race_exit();
}
