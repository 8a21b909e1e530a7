// SPDX-License-Identifier: GPL-2.0
/*
 * peer_test_client: a minimal peer-memory client in C, for testing the peer-memory host stand-in.
 *
 * It serves "GPU memory" of the NVIDIA P2P stand-in the way nvidia-peermem does (pin with
 * nvidia_p2p_get_pages, map with nvidia_p2p_dma_map_pages for to_pci_dev(dma_device), one SG
 * entry per 64 KiB GPU page, invalidate from the free callback), and lets a test choose every
 * property the host reacts to and inject failures. It registers up to TC_MAX_CLIENTS clients, in
 * the order of the names= parameter, so ordering and duplicate-name tests need one module.
 *
 * Load time (module parameters; per client, comma-separated, in names= order):
 *   names=a,b  invalidating=1,0  ex=1,1  ex_flags=1,0  ex_size=-1,0  version=1.0
 *   hold_module_ref=1 (a module reference per claimed range, as nvidia-peermem takes)
 *   tolerate_register_failure=0 (1: load even if a registration fails, e.g. a duplicate name)
 * Run time, /sys/kernel/debug/peer_test_client/:
 *   clients               "index name registered invalidating ex" per client
 *   log                   callback events "<client> <event> ctx=<n> ..."; write anything to clear
 *   c<i>/acquire_mode     0: claim what the NVIDIA stand-in pins (probe, like nvidia-peermem),
 *                         1: always claim, 2: never claim, 3: answer -EINVAL
 *   c<i>/fail_get_pages   errno to fail get_pages with (0: don't)
 *   c<i>/fail_dma_map     errno to fail dma_map with (0: don't)
 *   c<i>/sg_page_size     65536 (one SG entry per GPU page) or 4096 (per CPU page)
 *   c<i>/report_page_size what get_page_size answers (0: sg_page_size)
 *   c<i>/sg_shift         bytes added to every SG entry's DMA address (a misaligned list)
 *   c<i>/gate             write a callback name (get_pages, dma_map, dma_unmap, put_pages,
 *                         release): the next call of it blocks (killable, 20 s at most) until
 *                         "open" is written; read: idle | armed <cb> | held <cb> <pid>
 *   c<i>/invalidate       write a core_context: call the host's invalidate with it, as a free
 *                         callback would (nothing else); result in last_invalidate_ret
 *   c<i>/<counter>        calls of each callback and what they saw (see README.md)
 */
#include <linux/debugfs.h>
#include <linux/fs.h>
#include <linux/module.h>
#include <linux/pci.h>
#include <linux/jiffies.h>
#include <linux/sched.h>
#include <linux/scatterlist.h>
#include <linux/slab.h>
#include <linux/spinlock.h>
#include <linux/uaccess.h>
#include <linux/wait.h>
#include <rdma/peer_mem.h>

#include "nv-p2p.h"

#define TC_MAX_CLIENTS	4
#define GPU_PAGE	(64 * 1024ULL)
#define TC_LOG_SIZE	(32 * 1024)
#define TC_GATE_TIMEOUT_MS 20000

static char *names[TC_MAX_CLIENTS] = { "peer_test" };
static unsigned int n_names = 1;
module_param_array(names, charp, &n_names, 0444);
MODULE_PARM_DESC(names, "client names, registered in this order (default peer_test)");

static int invalidating[TC_MAX_CLIENTS] = { [0 ... TC_MAX_CLIENTS - 1] = 1 };
module_param_array(invalidating, int, NULL, 0444);
MODULE_PARM_DESC(invalidating, "per client: 1 (default) asks for the invalidate callback");

static int ex[TC_MAX_CLIENTS] = { [0 ... TC_MAX_CLIENTS - 1] = 1 };
module_param_array(ex, int, NULL, 0444);
MODULE_PARM_DESC(ex, "per client: 1 (default) marks version[IB_PEER_MEMORY_VER_MAX-1] (an ex client)");

static unsigned int ex_flags[TC_MAX_CLIENTS] = {
	[0 ... TC_MAX_CLIENTS - 1] = PEER_MEM_INVALIDATE_UNMAPS };
module_param_array(ex_flags, uint, NULL, 0444);
MODULE_PARM_DESC(ex_flags, "per client: peer_memory_client_ex.flags (default PEER_MEM_INVALIDATE_UNMAPS)");

static int ex_size[TC_MAX_CLIENTS] = { [0 ... TC_MAX_CLIENTS - 1] = -1 };
module_param_array(ex_size, int, NULL, 0444);
MODULE_PARM_DESC(ex_size, "per client: peer_memory_client_ex.ex_size (-1, default: the struct's size)");

static char *version = "1.0";
module_param(version, charp, 0444);
MODULE_PARM_DESC(version, "version string of every client (default 1.0)");

static bool hold_module_ref = true;
module_param(hold_module_ref, bool, 0444);
MODULE_PARM_DESC(hold_module_ref, "take a module reference per claimed range, like nvidia-peermem (default 1)");

static bool tolerate_register_failure;
module_param(tolerate_register_failure, bool, 0444);
MODULE_PARM_DESC(tolerate_register_failure, "load even when a client fails to register (default 0)");

struct tc_counters {
	atomic_t acquire_calls;
	atomic_t acquire_claimed;
	atomic_t get_pages_calls;
	atomic_t get_page_size_calls;
	atomic_t dma_map_calls;
	atomic_t dma_unmap_calls;
	atomic_t dma_unmap_in_callback;	/* on the free callback's task: nothing to do */
	atomic_t put_pages_calls;
	atomic_t put_pages_in_callback;
	atomic_t release_calls;
	atomic_t release_cleanups;	/* release found pages the host never gave back */
	atomic_t live_contexts;
	atomic_t free_callbacks;
	atomic_t invalidate_calls;	/* calls of the host's invalidate */
	atomic_t injected_failures;
	atomic_t nmap_in_table;		/* dma_map's nmap pointed at sg_head->nents */
	atomic_t callbacks_in_kthread;	/* dma_unmap, put_pages, release called by a kernel thread */
	atomic_t gate_timeouts;
};

/* The callbacks a test can hold a call of (c<i>/gate). */
enum tc_gate_cb { TC_GATE_NONE, TC_GATE_GET_PAGES, TC_GATE_DMA_MAP, TC_GATE_DMA_UNMAP,
		  TC_GATE_PUT_PAGES, TC_GATE_RELEASE, TC_GATE_NR };

static const char *const tc_gate_names[TC_GATE_NR] = {
	"none", "get_pages", "dma_map", "dma_unmap", "put_pages", "release",
};

enum tc_gate_state { TC_GATE_IDLE, TC_GATE_ARMED, TC_GATE_HELD };

struct tc_gate {
	spinlock_t lock;
	enum tc_gate_cb cb;
	enum tc_gate_state state;
	pid_t pid;
	u32 gen;		/* bumped on arm and open: a held call knows it may go */
	wait_queue_head_t wq;
};

struct tc_client {
	int index;
	struct peer_memory_client_ex pm;	/* must outlive the registration */
	void *reg_handle;
	invalidate_peer_memory invalidate;
	bool invalidating;

	/* knobs */
	u32 acquire_mode;
	u32 fail_get_pages;
	u32 fail_dma_map;
	u32 sg_page_size;
	u32 report_page_size;
	u32 sg_shift;
	s32 last_invalidate_ret;
	struct tc_gate gate;

	/* what the last calls saw */
	u64 last_core_context;
	u32 last_write, last_force;
	u32 last_dmasync;

	struct tc_counters c;
	struct dentry *dir;
};

struct tc_ctx {
	struct tc_client *client;
	unsigned int id;
	u64 addr, size;			/* the registered range */
	u64 va, len;			/* rounded out to GPU pages */
	u64 core_context;
	bool persistent;
	struct nvidia_p2p_page_table *pt;
	struct nvidia_p2p_dma_mapping *map;
	struct pci_dev *pdev;
	struct sg_table sgt;		/* our copy of what dma_map filled in */
	bool sg_allocated;
	bool dma_mapped_before_page_size;
	/* Set while our free callback runs: the host's calls on this task must not call back in. */
	struct task_struct *callback_task;
	bool dead;			/* the driver tore the pin down (free callback ran) */
};

static struct tc_client clients[TC_MAX_CLIENTS];
static int n_clients;
static atomic_t next_ctx_id;
static struct dentry *tc_debugfs;

static DEFINE_SPINLOCK(log_lock);
static char *log_buf;
static size_t log_len;
static bool log_overflow;

static __printf(1, 2) void tc_log(const char *fmt, ...)
{
	unsigned long flags;
	va_list args;
	int n;

	spin_lock_irqsave(&log_lock, flags);
	if (log_buf && !log_overflow) {
		va_start(args, fmt);
		n = vsnprintf(log_buf + log_len, TC_LOG_SIZE - log_len, fmt, args);
		va_end(args);
		if (log_len + n >= TC_LOG_SIZE - 1)
			log_overflow = true;
		else
			log_len += n;
	}
	spin_unlock_irqrestore(&log_lock, flags);
}

static const char *cname(const struct tc_client *c)
{
	return c->pm.client.name;
}

static bool in_our_callback(const struct tc_ctx *ctx)
{
	return READ_ONCE(ctx->callback_task) == current;
}

static bool tc_gate_released(struct tc_client *c, u32 gen)
{
	bool released;

	spin_lock(&c->gate.lock);
	released = c->gate.gen != gen;
	spin_unlock(&c->gate.lock);
	return released;
}

/* Hold this call of @cb if a test armed the gate for it, with whatever the caller holds held. */
static void tc_gate_pass(struct tc_client *c, enum tc_gate_cb cb)
{
	bool gated = false, gave_up = false;
	u32 gen = 0;
	long left;

	spin_lock(&c->gate.lock);
	if (c->gate.state == TC_GATE_ARMED && c->gate.cb == cb) {
		c->gate.state = TC_GATE_HELD;
		c->gate.pid = task_pid_nr(current);
		gen = c->gate.gen;
		gated = true;
	}
	spin_unlock(&c->gate.lock);
	if (!gated)
		return;
	tc_log("%s gate %s held pid=%d\n", cname(c), tc_gate_names[cb], task_pid_nr(current));
	left = wait_event_killable_timeout(c->gate.wq, tc_gate_released(c, gen),
					   msecs_to_jiffies(TC_GATE_TIMEOUT_MS));
	if (left <= 0) {
		spin_lock(&c->gate.lock);
		if (c->gate.gen == gen) {
			c->gate.state = TC_GATE_IDLE;
			c->gate.gen++;
			gave_up = true;
		}
		spin_unlock(&c->gate.lock);
	}
	if (gave_up) {
		atomic_inc(&c->c.gate_timeouts);
		pr_warn("peer_test_client: %s: gate on %s %s; the call goes on\n", cname(c),
			tc_gate_names[cb], left ? "interrupted" : "timed out");
	}
	tc_log("%s gate %s passed\n", cname(c), tc_gate_names[cb]);
}

/* Who calls: for tests of deregistration from other tasks. */
static void tc_note_caller(struct tc_client *c)
{
	if (current->flags & PF_KTHREAD)
		atomic_inc(&c->c.callbacks_in_kthread);
}

/* nvidia-peermem's acquire probe pins with a callback that has nothing to do. */
static void tc_probe_free_callback(void *data)
{
}

static int tc_acquire(struct tc_client *c, unsigned long addr, size_t size,
		      void *peer_mem_private_data, char *peer_mem_name, void **client_context)
{
	struct nvidia_p2p_page_table *pt = NULL;
	struct tc_ctx *ctx;
	u64 va = addr & ~(GPU_PAGE - 1);
	u64 len = ALIGN((u64)addr + size, GPU_PAGE) - va;
	int ret;

	atomic_inc(&c->c.acquire_calls);
	tc_log("%s acquire addr=%#lx size=%#zx private=%d name=%d\n", cname(c), addr, size,
	       peer_mem_private_data != NULL, peer_mem_name != NULL);
	switch (c->acquire_mode) {
	case 1:
		break;
	case 2:
		return 0;
	case 3:
		return -EINVAL;
	default:
		/* Is it GPU memory of this process? Pin and unpin to find out. */
		ret = nvidia_p2p_get_pages(0, 0, va, len, &pt, tc_probe_free_callback, NULL);
		if (ret)
			return 0;
		ret = nvidia_p2p_put_pages(0, 0, va, pt);
		if (ret)
			return 0;
		break;
	}

	ctx = kzalloc(sizeof(*ctx), GFP_KERNEL);
	if (!ctx)
		return 0;
	ctx->client = c;
	ctx->id = atomic_inc_return(&next_ctx_id);
	ctx->addr = addr;
	ctx->size = size;
	ctx->va = va;
	ctx->len = len;
	ctx->persistent = !c->invalidating;
	*client_context = ctx;
	if (hold_module_ref)
		__module_get(THIS_MODULE);
	atomic_inc(&c->c.acquire_claimed);
	atomic_inc(&c->c.live_contexts);
	tc_log("%s claimed ctx=%u\n", cname(c), ctx->id);
	return 1;
}

static void tc_free_callback(void *data)
{
	struct tc_ctx *ctx = data;
	struct tc_client *c = ctx->client;
	int ret;

	atomic_inc(&c->c.free_callbacks);
	tc_log("%s free_callback ctx=%u pid=%d\n", cname(c), ctx->id, task_pid_nr(current));
	WRITE_ONCE(ctx->callback_task, current);
	if (c->invalidate) {
		atomic_inc(&c->c.invalidate_calls);
		ret = c->invalidate(c->reg_handle, ctx->core_context);
		tc_log("%s invalidate ctx=%u core_context=%llu ret=%d\n", cname(c), ctx->id,
		       ctx->core_context, ret);
	}
	WRITE_ONCE(ctx->callback_task, NULL);
	/* The driver frees both right after we return; these only tell it we are done. */
	if (ctx->map)
		nvidia_p2p_free_dma_mapping(ctx->map);
	if (ctx->pt)
		nvidia_p2p_free_page_table(ctx->pt);
	WRITE_ONCE(ctx->dead, true);
}

static int tc_get_pages(struct tc_client *c, unsigned long addr, size_t size, int write,
			int force, struct sg_table *sg_head, void *client_context, u64 core_context)
{
	struct tc_ctx *ctx = client_context;
	int ret;

	atomic_inc(&c->c.get_pages_calls);
	c->last_core_context = core_context;
	c->last_write = write;
	c->last_force = force;
	tc_log("%s get_pages ctx=%u addr=%#lx size=%#zx write=%d force=%d sg_head=%d core_context=%llu\n",
	       cname(c), ctx->id, addr, size, write, force, sg_head != NULL, core_context);
	tc_gate_pass(c, TC_GATE_GET_PAGES);
	if (c->fail_get_pages) {
		atomic_inc(&c->c.injected_failures);
		return -(int)c->fail_get_pages;
	}
	ctx->core_context = core_context;
	if (ctx->persistent)
		ret = nvidia_p2p_get_pages_persistent(ctx->va, ctx->len, &ctx->pt, 0);
	else
		ret = nvidia_p2p_get_pages(0, 0, ctx->va, ctx->len, &ctx->pt, tc_free_callback, ctx);
	if (ret) {
		ctx->pt = NULL;
		tc_log("%s get_pages ctx=%u failed %d\n", cname(c), ctx->id, ret);
	}
	return ret;
}

static unsigned long tc_page_size(const struct tc_client *c)
{
	return c->sg_page_size == PAGE_SIZE ? PAGE_SIZE : GPU_PAGE;
}

static unsigned long tc_get_page_size(struct tc_client *c, void *client_context)
{
	struct tc_ctx *ctx = client_context;
	unsigned long size = c->report_page_size ? c->report_page_size : tc_page_size(c);

	atomic_inc(&c->c.get_page_size_calls);
	tc_log("%s get_page_size ctx=%u %s dma_map -> %lu\n", cname(c), ctx->id,
	       ctx->sg_allocated ? "after" : "before", size);
	return size;
}

static int tc_dma_map(struct tc_client *c, struct sg_table *sg_head, void *client_context,
		      struct device *dma_device, int dmasync, int *nmap)
{
	struct tc_ctx *ctx = client_context;
	struct nvidia_p2p_dma_mapping *map;
	struct pci_dev *pdev = to_pci_dev(dma_device);
	unsigned long step = tc_page_size(c);
	struct scatterlist *sg;
	u64 start, end, off;
	unsigned int n, i;
	int ret;

	atomic_inc(&c->c.dma_map_calls);
	c->last_dmasync = dmasync;
	tc_log("%s dma_map ctx=%u device=%s dmasync=%d nmap_in_table=%d\n", cname(c), ctx->id,
	       dev_name(dma_device), dmasync, nmap == (int *)&sg_head->nents);
	if (nmap == (int *)&sg_head->nents)
		atomic_inc(&c->c.nmap_in_table);
	tc_gate_pass(c, TC_GATE_DMA_MAP);
	if (c->fail_dma_map) {
		atomic_inc(&c->c.injected_failures);
		return -(int)c->fail_dma_map;
	}
	if (!ctx->pt || ctx->dead)
		return -EINVAL;
	if (ctx->pt->page_size != NVIDIA_P2P_PAGE_SIZE_64KB) {
		pr_err("peer_test_client: page table of page size type %u\n", ctx->pt->page_size);
		return -EINVAL;
	}
	ret = nvidia_p2p_dma_map_pages(pdev, ctx->pt, &map);
	if (ret) {
		tc_log("%s dma_map ctx=%u nvidia_p2p_dma_map_pages failed %d\n", cname(c), ctx->id, ret);
		return ret;
	}
	if (!NVIDIA_P2P_DMA_MAPPING_VERSION_COMPATIBLE(map) ||
	    map->page_size_type != NVIDIA_P2P_PAGE_SIZE_64KB) {
		pr_err("peer_test_client: DMA mapping version %#x page size type %u\n", map->version,
		       map->page_size_type);
		nvidia_p2p_dma_unmap_pages(pdev, ctx->pt, map);
		return -EINVAL;
	}

	/* GPU pages cover [va, va + len); CPU-page entries cover only the registered pages. */
	if (step == GPU_PAGE) {
		start = ctx->va;
		end = ctx->va + ctx->len;
	} else {
		start = ALIGN_DOWN(ctx->addr, PAGE_SIZE);
		end = ALIGN(ctx->addr + ctx->size, PAGE_SIZE);
	}
	n = (end - start) / step;
	if ((end - ctx->va) / GPU_PAGE > map->entries) {
		pr_err("peer_test_client: DMA mapping of %u entries for %llu bytes\n", map->entries,
		       ctx->len);
		nvidia_p2p_dma_unmap_pages(pdev, ctx->pt, map);
		return -EINVAL;
	}
	ret = sg_alloc_table(sg_head, n, GFP_KERNEL);
	if (ret) {
		nvidia_p2p_dma_unmap_pages(pdev, ctx->pt, map);
		return ret;
	}
	for_each_sg(sg_head->sgl, sg, n, i) {
		off = start + (u64)i * step - ctx->va;
		sg_set_page(sg, NULL, step, 0);
		sg_dma_address(sg) = map->dma_addresses[off / GPU_PAGE] + off % GPU_PAGE +
				     c->sg_shift;
		sg_dma_len(sg) = step;
	}
	ctx->map = map;
	ctx->pdev = pdev;
	ctx->sgt = *sg_head;
	ctx->sg_allocated = true;
	*nmap = n;
	tc_log("%s dma_map ctx=%u entries=%u first=%#llx\n", cname(c), ctx->id, n,
	       (u64)sg_dma_address(sg_head->sgl));
	return 0;
}

static void tc_do_dma_unmap(struct tc_ctx *ctx)
{
	if (ctx->map && !READ_ONCE(ctx->dead))
		nvidia_p2p_dma_unmap_pages(ctx->pdev, ctx->pt, ctx->map);
	ctx->map = NULL;
}

static void tc_do_put_pages(struct tc_ctx *ctx)
{
	if (ctx->pt && !READ_ONCE(ctx->dead)) {
		if (ctx->persistent)
			nvidia_p2p_put_pages_persistent(ctx->va, ctx->pt, 0);
		else
			nvidia_p2p_put_pages(0, 0, ctx->va, ctx->pt);
	}
	ctx->pt = NULL;
}

static int tc_dma_unmap(struct tc_client *c, struct sg_table *sg_head, void *client_context,
			struct device *dma_device)
{
	struct tc_ctx *ctx = client_context;
	bool inline_call = in_our_callback(ctx);

	atomic_inc(&c->c.dma_unmap_calls);
	tc_note_caller(c);
	tc_log("%s dma_unmap ctx=%u%s pid=%d comm=%s\n", cname(c), ctx->id,
	       inline_call ? " in_callback" : "", task_pid_nr(current), current->comm);
	tc_gate_pass(c, TC_GATE_DMA_UNMAP);
	if (ctx->sg_allocated && memcmp(sg_head, &ctx->sgt, sizeof(*sg_head)))
		pr_err("peer_test_client: dma_unmap got an SG table other than dma_map filled\n");
	if (ctx->pdev && dma_device != &ctx->pdev->dev)
		pr_err("peer_test_client: dma_unmap for another device than dma_map\n");
	if (inline_call) {
		/* The driver tears the mapping down itself once the callback returns. */
		atomic_inc(&c->c.dma_unmap_in_callback);
		return 0;
	}
	tc_do_dma_unmap(ctx);
	return 0;
}

static void tc_put_pages(struct tc_client *c, struct sg_table *sg_head, void *client_context)
{
	struct tc_ctx *ctx = client_context;
	bool inline_call = in_our_callback(ctx);

	atomic_inc(&c->c.put_pages_calls);
	tc_note_caller(c);
	tc_log("%s put_pages ctx=%u%s pid=%d comm=%s\n", cname(c), ctx->id,
	       inline_call ? " in_callback" : "", task_pid_nr(current), current->comm);
	tc_gate_pass(c, TC_GATE_PUT_PAGES);
	if (inline_call) {
		atomic_inc(&c->c.put_pages_in_callback);
		return;
	}
	tc_do_put_pages(ctx);
}

static void tc_release(struct tc_client *c, void *client_context)
{
	struct tc_ctx *ctx = client_context;

	atomic_inc(&c->c.release_calls);
	tc_note_caller(c);
	tc_log("%s release ctx=%u pid=%d comm=%s\n", cname(c), ctx->id, task_pid_nr(current),
	       current->comm);
	tc_gate_pass(c, TC_GATE_RELEASE);
	/*
	 * Pages still pinned here were never given back by the host: fine after an invalidation
	 * the host let us handle (an ex client invalidated through debugfs), a leak otherwise.
	 * Counted so tests can tell.
	 */
	if ((ctx->map || ctx->pt) && !READ_ONCE(ctx->dead)) {
		atomic_inc(&c->c.release_cleanups);
		tc_do_dma_unmap(ctx);
		tc_do_put_pages(ctx);
	}
	if (ctx->sg_allocated)
		sg_free_table(&ctx->sgt);
	kfree(ctx);
	atomic_dec(&c->c.live_contexts);
	if (hold_module_ref)
		module_put(THIS_MODULE);
}

/* The host calls plain function pointers: one set of trampolines per client slot. */
#define TC_CALLBACKS(i)								\
static int tc_acquire_##i(unsigned long addr, size_t size, void *priv, char *name, void **cc) \
{ return tc_acquire(&clients[i], addr, size, priv, name, cc); }			\
static int tc_get_pages_##i(unsigned long addr, size_t size, int write, int force,	\
			    struct sg_table *sg, void *cc, u64 core)			\
{ return tc_get_pages(&clients[i], addr, size, write, force, sg, cc, core); }	\
static int tc_dma_map_##i(struct sg_table *sg, void *cc, struct device *dev, int dmasync, \
			  int *nmap)							\
{ return tc_dma_map(&clients[i], sg, cc, dev, dmasync, nmap); }			\
static int tc_dma_unmap_##i(struct sg_table *sg, void *cc, struct device *dev)	\
{ return tc_dma_unmap(&clients[i], sg, cc, dev); }				\
static void tc_put_pages_##i(struct sg_table *sg, void *cc)			\
{ tc_put_pages(&clients[i], sg, cc); }						\
static unsigned long tc_get_page_size_##i(void *cc)				\
{ return tc_get_page_size(&clients[i], cc); }					\
static void tc_release_##i(void *cc)						\
{ tc_release(&clients[i], cc); }

TC_CALLBACKS(0)
TC_CALLBACKS(1)
TC_CALLBACKS(2)
TC_CALLBACKS(3)

#define TC_OPS(i) {								\
	.acquire = tc_acquire_##i, .get_pages = tc_get_pages_##i,		\
	.dma_map = tc_dma_map_##i, .dma_unmap = tc_dma_unmap_##i,		\
	.put_pages = tc_put_pages_##i, .get_page_size = tc_get_page_size_##i,	\
	.release = tc_release_##i }

static const struct peer_memory_client tc_ops[TC_MAX_CLIENTS] = {
	TC_OPS(0), TC_OPS(1), TC_OPS(2), TC_OPS(3),
};

/* ---- debugfs ---- */

static ssize_t log_read(struct file *file, char __user *buf, size_t count, loff_t *ppos)
{
	unsigned long flags;
	ssize_t ret;
	size_t len;
	char *copy;

	copy = kvmalloc(TC_LOG_SIZE + 32, GFP_KERNEL);
	if (!copy)
		return -ENOMEM;
	spin_lock_irqsave(&log_lock, flags);
	memcpy(copy, log_buf, log_len);
	len = log_len;
	if (log_overflow)
		len += scnprintf(copy + len, 32, "overflow\n");
	spin_unlock_irqrestore(&log_lock, flags);
	ret = simple_read_from_buffer(buf, count, ppos, copy, len);
	kvfree(copy);
	return ret;
}

static ssize_t log_write(struct file *file, const char __user *buf, size_t count, loff_t *ppos)
{
	unsigned long flags;

	spin_lock_irqsave(&log_lock, flags);
	log_len = 0;
	log_overflow = false;
	spin_unlock_irqrestore(&log_lock, flags);
	return count;
}

static const struct file_operations log_fops = {
	.owner = THIS_MODULE,
	.read = log_read,
	.write = log_write,
	.llseek = default_llseek,
};

static int clients_show(struct seq_file *m, void *unused)
{
	int i;

	for (i = 0; i < n_clients; i++)
		seq_printf(m, "%d %s registered=%d invalidating=%d ex=%d\n", i, cname(&clients[i]),
			   clients[i].reg_handle != NULL, clients[i].invalidating,
			   clients[i].pm.client.version[IB_PEER_MEMORY_VER_MAX - 1] != 0);
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(clients);

static ssize_t invalidate_write(struct file *file, const char __user *buf, size_t count,
				loff_t *ppos)
{
	struct tc_client *c = file->private_data;
	u64 core_context;
	int ret;

	ret = kstrtou64_from_user(buf, count, 0, &core_context);
	if (ret)
		return ret;
	if (!c->invalidate)
		return -EOPNOTSUPP;
	atomic_inc(&c->c.invalidate_calls);
	ret = c->invalidate(c->reg_handle, core_context);
	WRITE_ONCE(c->last_invalidate_ret, ret);
	tc_log("%s invalidate core_context=%llu ret=%d (debugfs)\n", cname(c), core_context, ret);
	return count;
}

static const struct file_operations invalidate_fops = {
	.owner = THIS_MODULE,
	.open = simple_open,
	.write = invalidate_write,
};

static ssize_t gate_read(struct file *file, char __user *buf, size_t count, loff_t *ppos)
{
	struct tc_client *c = file->private_data;
	enum tc_gate_state state;
	enum tc_gate_cb cb;
	char text[64];
	pid_t pid;
	int n;

	spin_lock(&c->gate.lock);
	state = c->gate.state;
	cb = c->gate.cb;
	pid = c->gate.pid;
	spin_unlock(&c->gate.lock);
	if (state == TC_GATE_HELD)
		n = scnprintf(text, sizeof(text), "held %s %d\n", tc_gate_names[cb], pid);
	else if (state == TC_GATE_ARMED)
		n = scnprintf(text, sizeof(text), "armed %s\n", tc_gate_names[cb]);
	else
		n = scnprintf(text, sizeof(text), "idle\n");
	return simple_read_from_buffer(buf, count, ppos, text, n);
}

/* "<callback>" arms the gate for it; "open" (or "none") releases a held call or disarms. */
static ssize_t gate_write(struct file *file, const char __user *buf, size_t count, loff_t *ppos)
{
	struct tc_client *c = file->private_data;
	char text[32];
	int cb, ret = count;

	if (count >= sizeof(text))
		return -EINVAL;
	if (copy_from_user(text, buf, count))
		return -EFAULT;
	text[count] = '\0';
	strim(text);
	if (!strcmp(text, "open"))
		cb = TC_GATE_NONE;
	else
		cb = match_string(tc_gate_names, TC_GATE_NR, text);
	if (cb < 0)
		return -EINVAL;
	spin_lock(&c->gate.lock);
	if (cb == TC_GATE_NONE) {
		c->gate.state = TC_GATE_IDLE;
		c->gate.pid = 0;
		c->gate.gen++;
	} else if (c->gate.state == TC_GATE_HELD) {
		ret = -EBUSY;
	} else {
		c->gate.state = TC_GATE_ARMED;
		c->gate.cb = cb;
		c->gate.gen++;
	}
	spin_unlock(&c->gate.lock);
	wake_up_all(&c->gate.wq);
	return ret;
}

static const struct file_operations gate_fops = {
	.owner = THIS_MODULE,
	.open = simple_open,
	.read = gate_read,
	.write = gate_write,
	.llseek = default_llseek,
};

static void tc_debugfs_client(struct tc_client *c)
{
	static const struct {
		const char *name;
		size_t offset;
	} counters[] = {
#define C(x) { #x, offsetof(struct tc_counters, x) }
		C(acquire_calls), C(acquire_claimed), C(get_pages_calls), C(get_page_size_calls),
		C(dma_map_calls), C(dma_unmap_calls), C(dma_unmap_in_callback), C(put_pages_calls),
		C(put_pages_in_callback), C(release_calls), C(release_cleanups), C(live_contexts),
		C(free_callbacks), C(invalidate_calls), C(injected_failures), C(nmap_in_table),
		C(callbacks_in_kthread), C(gate_timeouts),
#undef C
	};
	char dirname[8];
	size_t i;

	snprintf(dirname, sizeof(dirname), "c%d", c->index);
	c->dir = debugfs_create_dir(dirname, tc_debugfs);
	debugfs_create_u32("acquire_mode", 0644, c->dir, &c->acquire_mode);
	debugfs_create_u32("fail_get_pages", 0644, c->dir, &c->fail_get_pages);
	debugfs_create_u32("fail_dma_map", 0644, c->dir, &c->fail_dma_map);
	debugfs_create_u32("sg_page_size", 0644, c->dir, &c->sg_page_size);
	debugfs_create_u32("report_page_size", 0644, c->dir, &c->report_page_size);
	debugfs_create_u32("sg_shift", 0644, c->dir, &c->sg_shift);
	debugfs_create_file("gate", 0644, c->dir, c, &gate_fops);
	debugfs_create_u32("last_invalidate_ret", 0444, c->dir, (u32 *)&c->last_invalidate_ret);
	debugfs_create_u64("last_core_context", 0444, c->dir, &c->last_core_context);
	debugfs_create_u32("last_write", 0444, c->dir, &c->last_write);
	debugfs_create_u32("last_force", 0444, c->dir, &c->last_force);
	debugfs_create_u32("last_dmasync", 0444, c->dir, &c->last_dmasync);
	debugfs_create_file("invalidate", 0200, c->dir, c, &invalidate_fops);
	for (i = 0; i < ARRAY_SIZE(counters); i++)
		debugfs_create_atomic_t(counters[i].name, 0444, c->dir,
					(atomic_t *)((char *)&c->c + counters[i].offset));
}

/* ---- module ---- */

static void tc_unregister_all(void)
{
	int i;

	for (i = n_clients - 1; i >= 0; i--) {
		if (clients[i].reg_handle) {
			ib_unregister_peer_memory_client(clients[i].reg_handle);
			clients[i].reg_handle = NULL;
		}
	}
}

static int tc_setup_client(struct tc_client *c, int i)
{
	struct peer_memory_client *pm = &c->pm.client;

	c->index = i;
	c->invalidating = invalidating[i];
	spin_lock_init(&c->gate.lock);
	init_waitqueue_head(&c->gate.wq);
	c->sg_page_size = GPU_PAGE;
	*pm = tc_ops[i];
	strscpy(pm->name, names[i], sizeof(pm->name));
	/* An ex client keeps the last byte of version for the flag. */
	if (strscpy(pm->version, version, IB_PEER_MEMORY_VER_MAX - 1) < 0) {
		pr_err("peer_test_client: version %s too long\n", version);
		return -EINVAL;
	}
	if (ex[i]) {
		pm->version[IB_PEER_MEMORY_VER_MAX - 1] = 1;
		c->pm.ex_size = ex_size[i] < 0 ? sizeof(c->pm) : ex_size[i];
		c->pm.flags = ex_flags[i];
	}
	return 0;
}

static int __init tc_init(void)
{
	int i, ret;

	if (n_names < 1 || n_names > TC_MAX_CLIENTS)
		return -EINVAL;
	log_buf = kvzalloc(TC_LOG_SIZE, GFP_KERNEL);
	if (!log_buf)
		return -ENOMEM;
	n_clients = n_names;
	for (i = 0; i < n_clients; i++) {
		ret = tc_setup_client(&clients[i], i);
		if (ret)
			goto err_free;
	}
	tc_debugfs = debugfs_create_dir("peer_test_client", NULL);
	debugfs_create_file("log", 0644, tc_debugfs, NULL, &log_fops);
	debugfs_create_file("clients", 0444, tc_debugfs, NULL, &clients_fops);
	for (i = 0; i < n_clients; i++)
		tc_debugfs_client(&clients[i]);

	for (i = 0; i < n_clients; i++) {
		struct tc_client *c = &clients[i];

		c->reg_handle = ib_register_peer_memory_client(&c->pm.client,
							       c->invalidating ? &c->invalidate : NULL);
		tc_log("%s register %s\n", cname(c), c->reg_handle ? "ok" : "failed");
		if (!c->reg_handle && !tolerate_register_failure) {
			pr_err("peer_test_client: registering client %s failed\n", cname(c));
			ret = -EINVAL;
			goto err_unregister;
		}
	}
	return 0;

err_unregister:
	tc_unregister_all();
	debugfs_remove_recursive(tc_debugfs);
err_free:
	kvfree(log_buf);
	return ret;
}

static void __exit tc_exit(void)
{
	tc_unregister_all();
	debugfs_remove_recursive(tc_debugfs);
	kvfree(log_buf);
	log_buf = NULL;
}

module_init(tc_init);
module_exit(tc_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("Minimal peer-memory client for testing the peer-memory host stand-in");
MODULE_VERSION("1.0");
