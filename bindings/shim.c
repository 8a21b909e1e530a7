// SPDX-License-Identifier: GPL-2.0
/*
 * C shim of peermem-rs; see shim.h for why it exists. Parameter names and meanings follow
 * nvidia-peermem, so that existing modprobe.d options keep working.
 */
#include <linux/module.h>
#include <linux/moduleparam.h>
#include <linux/workqueue.h>
#include <linux/pci.h>
#include <linux/delay.h>
#include <linux/debugfs.h>
#include <linux/seq_file.h>
#include "shim.h"

#ifndef PEERMEM_VERSION
#error "PEERMEM_VERSION must be defined by the build"
#endif

int peermem_param_persistent_api_support = 1;
module_param_named(persistent_api_support, peermem_param_persistent_api_support, int, 0444);
MODULE_PARM_DESC(persistent_api_support,
		 "1 [default]: one persistent client 'nv_mem' (no invalidation); "
		 "0: an invalidating client 'nv_mem' plus a persistent client 'nv_mem_nc'");

int peermem_param_peerdirect_support;
module_param_named(peerdirect_support, peermem_param_peerdirect_support, int, 0444);
MODULE_PARM_DESC(peerdirect_support,
		 "0 [default]: the invalidating client asks the host not to unmap on invalidation; "
		 "1: legacy client, for MLNX_OFED 4.9 LTS hosts");

const char peermem_param_version[] = PEERMEM_VERSION;
MODULE_VERSION(PEERMEM_VERSION);

/* Here, not in module!: its key is `author` on 6.12 and `authors` on 7.2 and 7.3. */
MODULE_AUTHOR("peermem-rs developers");

/* Load the providers first when modprobe is used: the NVIDIA driver and the peer-memory host. */
MODULE_SOFTDEP("pre: nvidia ib_core ib_uverbs");

DEFINE_MUTEX(peermem_n_pins_lock);
DEFINE_MUTEX(peermem_log_lock);

struct workqueue_struct *peermem_alloc_workqueue(const char *name, unsigned int flags,
						 int max_active)
{
	return alloc_workqueue("%s", flags, max_active, name);
}

struct pci_dev *peermem_pci_dev_get(struct device *dev)
{
	return dev_is_pci(dev) ? pci_dev_get(to_pci_dev(dev)) : NULL;
}

void peermem_fsleep(unsigned long usecs)
{
	fsleep(usecs);
}

static int peermem_show(struct seq_file *m, void *v)
{
	return peermem_seq_show(m, m->private);
}
DEFINE_SHOW_ATTRIBUTE(peermem);

static int peermem_rw_show(struct seq_file *m, void *v)
{
	return peermem_seq_show(m, m->private);
}

/* Whatever is written: the text is not read, the write is the request. */
static ssize_t peermem_rw_write(struct file *file, const char __user *buf, size_t count,
				loff_t *ppos)
{
	struct seq_file *m = file->private_data;
	int rc = peermem_seq_write(m->private);

	return rc ? rc : count;
}
DEFINE_SHOW_STORE_ATTRIBUTE(peermem_rw);

void *peermem_debugfs_create_dir(const char *dir)
{
	return debugfs_create_dir(dir, NULL);
}

void peermem_debugfs_create_file(void *dir, const char *file, const void *data, bool writable)
{
	/*
	 * i_private is not const, but both kinds of file only ever read through it (a writable one
	 * hands it to Rust, which reads through it too). An ERR_PTR dir makes no file.
	 */
	debugfs_create_file(file, writable ? 0644 : 0444, dir, (void *)data,
			    writable ? &peermem_rw_fops : &peermem_fops);
}

void peermem_debugfs_remove(void *dir)
{
	debugfs_remove(dir);
}
