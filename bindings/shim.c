// SPDX-License-Identifier: GPL-2.0
/*
 * C shim of peermem-rs; see shim.h for why it exists. Parameter names and meanings follow
 * nvidia-peermem, so that existing modprobe.d options keep working.
 */
#include <linux/module.h>
#include <linux/moduleparam.h>
#include <linux/kstrtox.h>
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

/*
 * Runtime-writable (0644), unlike the others, and not nvidia-peermem's: the value lives in Rust
 * (src/timing.rs), read once per callback with a relaxed atomic load, so the setter and getter call
 * into Rust instead of giving the kernel a variable to write under the callbacks' feet. Parsed as a
 * bool parameter is (param_set_bool: kstrtobool, no value means on), shown as one (Y or N).
 */
static int peermem_time_accounting_set(const char *val, const struct kernel_param *kp)
{
	bool on;
	int rc = kstrtobool(val ? val : "1", &on);

	if (rc)
		return rc;
	peermem_time_accounting_store(on);
	return 0;
}

static int peermem_time_accounting_get(char *buffer, const struct kernel_param *kp)
{
	return sprintf(buffer, "%c\n", peermem_time_accounting_load() ? 'Y' : 'N');
}

static const struct kernel_param_ops peermem_time_accounting_ops = {
	/* A bare time_accounting at load means on, as for bool parameters (param_ops_bool). */
	.flags = KERNEL_PARAM_OPS_FL_NOARG,
	.set = peermem_time_accounting_set,
	.get = peermem_time_accounting_get,
};
module_param_cb(time_accounting, &peermem_time_accounting_ops, NULL, 0644);
__MODULE_PARM_TYPE(time_accounting, "bool");
MODULE_PARM_DESC(time_accounting,
		 "N [default]: off; Y (or 1): time each step of every callback into "
		 "/sys/kernel/debug/<module>/time (writable at runtime)");

const char peermem_param_version[] = PEERMEM_VERSION;
MODULE_VERSION(PEERMEM_VERSION);

/* Here, not in module!: its key is `author` on 6.12 and `authors` on 7.2 and 7.3. */
MODULE_AUTHOR("peermem-rs developers");

/* Load the providers first when modprobe is used: the NVIDIA driver and the peer-memory host. */
MODULE_SOFTDEP("pre: nvidia ib_core ib_uverbs");

DEFINE_MUTEX(peermem_lingering_lock);
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
