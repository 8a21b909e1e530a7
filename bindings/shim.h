/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The C side of peermem-rs: only what Rust cannot express, on every kernel it builds on (6.12 to
 * 7.3). Module parameters that appear read-only in /sys/module/<module>/parameters (the Rust
 * module! macro registers parameters without sysfs permissions), and one runtime-writable one whose
 * value lives in Rust (time_accounting), MODULE_VERSION, MODULE_AUTHOR and
 * MODULE_SOFTDEP; statically initialised mutexes; and one-line wrappers of kernel macros and static
 * inlines that neither release's kernel crate exposes in the same form (each says why). There is
 * no logic here. src/kapi.rs is the only Rust user of the wrappers.
 */
#ifndef PEERMEM_SHIM_H
#define PEERMEM_SHIM_H

#include <linux/types.h>

struct device;
struct mutex;
struct pci_dev;
struct seq_file;
struct workqueue_struct;

/*
 * A kernel function 6.12's kernel::bindings lacks (its bindings_helper.h does not include pci.h).
 * Declared again here, word for word, so that bindgen need not parse pci.h; shim.c includes it, so
 * the compiler checks this declaration against the kernel's.
 */
void pci_dev_put(struct pci_dev *dev);

/* Values of nvidia-peermem's module parameters, fixed once the module is loaded (permissions 0444). */
extern int peermem_param_persistent_api_support;
extern int peermem_param_peerdirect_support;

/*
 * time_accounting (0644): its value is src/timing.rs's, which the parameter's set and get
 * operations (shim.c) store and load through these two functions, defined in Rust.
 */
void peermem_time_accounting_store(bool on);
bool peermem_time_accounting_load(void);

/* The module's version, as in MODULE_VERSION and the peer-memory client's version field. */
extern const char peermem_param_version[];

/*
 * Module-wide mutexes (DEFINE_MUTEX: initialised at compile time, so usable before module init
 * runs and never torn down). Their rules are next to their Rust users: peermem_lingering_lock in
 * src/client.rs (LINGERING), peermem_log_lock in src/stats.rs (LOG_LIMIT).
 */
extern struct mutex peermem_lingering_lock;
extern struct mutex peermem_log_lock;

/* alloc_workqueue(): a variadic function on 6.12, a macro (alloc_hooks) on 7.3. */
struct workqueue_struct *peermem_alloc_workqueue(const char *name, unsigned int flags,
						 int max_active);

/* dev_is_pci() and to_pci_dev() are macros; a reference on the PCI device, or NULL. */
struct pci_dev *peermem_pci_dev_get(struct device *dev);

/* fsleep() is a static inline (7.3's kernel crate has a helper for it, 6.12's has none). */
void peermem_fsleep(unsigned long usecs);

/*
 * debugfs: a directory, then seq_files in it: read-only ones (DEFINE_SHOW_ATTRIBUTE's
 * file_operations, 0444) and writable ones (DEFINE_SHOW_STORE_ATTRIBUTE's, 0644), both with
 * .owner = THIS_MODULE. Reading a file calls peermem_seq_show(m, data), writing a writable one
 * peermem_seq_write(data) (its errno, or the whole write accepted), both defined in Rust
 * (src/kapi.rs), with the data given here. The directory is returned (an ERR_PTR on failure,
 * which debugfs_create_file() and debugfs_remove() accept) as an untyped handle: struct dentry
 * would bring half of the VFS into the generated bindings.
 */
void *peermem_debugfs_create_dir(const char *dir);
void peermem_debugfs_create_file(void *dir, const char *file, const void *data, bool writable);
int peermem_seq_show(struct seq_file *m, const void *data);
int peermem_seq_write(const void *data);
/* debugfs_remove() is a static inline without CONFIG_DEBUG_FS. */
void peermem_debugfs_remove(void *dir);

#endif /* PEERMEM_SHIM_H */
