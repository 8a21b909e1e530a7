// SPDX-License-Identifier: GPL-2.0
/*
 * The ib_core side of the peer-memory host stand-in: the client registry with its
 * /sys/kernel/mm/memory_peers/ statistics, memory registration (ordinary pinning first, then the
 * peer clients) with the NIC driver's part of it (mlx5's memory key), the invalidate function
 * clients call, and deregistration.
 *
 * The flow follows MLNX_OFED / DOCA-OFED 25.10's drivers/infiniband/core/peer_mem.c and umem.c
 * and the peer parts of drivers/infiniband/hw/mlx5/mr.c, written from a reading of their
 * behaviour, not from their code; the functions below name the MLNX function (and lines) each
 * one plays. Where this host deviates, README.md says so.
 */
#include <linux/capability.h>
#include <linux/dma-mapping.h>
#include <linux/kernfs.h>
#include <linux/ktime.h>
#include <linux/log2.h>
#include <linux/mm.h>
#include <linux/sched/mm.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>
#include <linux/string.h>
#include <linux/sysfs.h>
#include "uapi/peer_mem_host.h"

#include "pmh.h"

/* One mutex for the client list; acquire() is called under it, as MLNX does. */
static DEFINE_MUTEX(pmh_clients_mutex);
static LIST_HEAD(pmh_clients);
/* /sys/kernel/mm/memory_peers: exists while some client has its directory in it. */
static struct kobject *pmh_peers_kobj;
static unsigned int pmh_peers_kobj_users;

static int pmh_invalidate_peer_memory(void *reg_handle, u64 core_context);

/* ---- sysfs: /sys/kernel/mm/memory_peers/<name>/ ---- */

static struct pmh_client *to_pmh_client(struct kobject *kobj)
{
	return container_of(kobj, struct pmh_client, kobj);
}

static ssize_t version_show(struct kobject *kobj, struct kobj_attribute *attr, char *buf)
{
	const struct peer_memory_client *pm = to_pmh_client(kobj)->peer_mem;

	return sysfs_emit(buf, "%.*s\n", (int)strnlen(pm->version, IB_PEER_MEMORY_VER_MAX),
			  pm->version);
}

#define PMH_STAT_ATTR(field)							\
static ssize_t field##_show(struct kobject *kobj, struct kobj_attribute *attr,	\
			    char *buf)						\
{										\
	return sysfs_emit(buf, "%llu\n",					\
		(u64)atomic64_read(&to_pmh_client(kobj)->stats.field));		\
}										\
static struct kobj_attribute field##_attr = __ATTR_RO(field)

PMH_STAT_ATTR(num_alloc_mrs);
PMH_STAT_ATTR(num_dealloc_mrs);
PMH_STAT_ATTR(num_reg_pages);
PMH_STAT_ATTR(num_dereg_pages);
PMH_STAT_ATTR(num_reg_bytes);
PMH_STAT_ATTR(num_dereg_bytes);

static ssize_t num_free_callbacks_show(struct kobject *kobj, struct kobj_attribute *attr,
				       char *buf)
{
	struct pmh_client *c = to_pmh_client(kobj);
	unsigned long n;

	xa_lock(&c->mr_xa);
	n = c->stats.num_free_callbacks;
	xa_unlock(&c->mr_xa);
	return sysfs_emit(buf, "%lu\n", n);
}

static struct kobj_attribute version_attr = __ATTR_RO(version);
static struct kobj_attribute num_free_callbacks_attr = __ATTR_RO(num_free_callbacks);

static struct attribute *pmh_client_attrs[] = {
	&version_attr.attr,
	&num_alloc_mrs_attr.attr,
	&num_dealloc_mrs_attr.attr,
	&num_reg_pages_attr.attr,
	&num_dereg_pages_attr.attr,
	&num_reg_bytes_attr.attr,
	&num_dereg_bytes_attr.attr,
	&num_free_callbacks_attr.attr,
	NULL,
};
ATTRIBUTE_GROUPS(pmh_client);

static void pmh_client_kobj_release(struct kobject *kobj)
{
	struct pmh_client *c = to_pmh_client(kobj);

	xa_destroy(&c->mr_xa);
	kfree(c);
}

static const struct kobj_type pmh_client_ktype = {
	.sysfs_ops = &kobj_sysfs_ops,
	.release = pmh_client_kobj_release,
	.default_groups = pmh_client_groups,
};

/*
 * mm_kobj (/sys/kernel/mm), the parent MLNX uses, is not exported to modules: find it below the
 * exported kernel_kobj. A sysfs directory's kernfs node points back at its kobject.
 */
static struct kobject *pmh_get_mm_kobj(void)
{
	struct kernfs_node *kn = kernfs_find_and_get(kernel_kobj->sd, "mm");
	struct kobject *kobj;

	if (!kn)
		return NULL;
	kobj = kobject_get(kn->priv);
	kernfs_put(kn);
	return kobj;
}

/* Called with pmh_clients_mutex held. */
static int pmh_peers_kobj_get(void)
{
	struct kobject *mm;

	if (!pmh_peers_kobj) {
		mm = pmh_get_mm_kobj();
		if (!mm) {
			pr_err("peer_mem_host: /sys/kernel/mm not found\n");
			return -ENOENT;
		}
		pmh_peers_kobj = kobject_create_and_add("memory_peers", mm);
		kobject_put(mm);
		if (!pmh_peers_kobj)
			return -ENOMEM;
	}
	pmh_peers_kobj_users++;
	return 0;
}

/* Called with pmh_clients_mutex held. */
static void pmh_peers_kobj_put(void)
{
	if (--pmh_peers_kobj_users == 0) {
		kobject_put(pmh_peers_kobj);
		pmh_peers_kobj = NULL;
	}
}

/* ---- registration of clients ---- */

static int pmh_check_mandatory(const struct peer_memory_client *pm)
{
	static const struct {
		size_t offset;
		const char *name;
	} mandatory[] = {
		{ offsetof(struct peer_memory_client, acquire), "acquire" },
		{ offsetof(struct peer_memory_client, get_pages), "get_pages" },
		{ offsetof(struct peer_memory_client, put_pages), "put_pages" },
		{ offsetof(struct peer_memory_client, dma_map), "dma_map" },
		{ offsetof(struct peer_memory_client, dma_unmap), "dma_unmap" },
		/* MLNX calls it unconditionally without listing it; refuse rather than oops later. */
		{ offsetof(struct peer_memory_client, get_page_size), "get_page_size" },
	};
	size_t i;

	for (i = 0; i < ARRAY_SIZE(mandatory); i++) {
		if (!*(void **)((char *)pm + mandatory[i].offset)) {
			pr_err("peer_mem_host: peer memory client %.*s is missing mandatory function %s\n",
			       IB_PEER_MEMORY_NAME_MAX, pm->name, mandatory[i].name);
			return -EINVAL;
		}
	}
	return 0;
}

/* Does the host treat this client as "ex" with PEER_MEM_INVALIDATE_UNMAPS? */
static bool pmh_unmap_on_invalidate(const struct pmh_client *c)
{
	const struct peer_memory_client_ex *ex;

	/* A 4.9-style host knows nothing of ex clients. */
	if (!pmh_ex_support)
		return false;
	if (c->peer_mem->version[IB_PEER_MEMORY_VER_MAX - 1] == 0)
		return false;
	ex = container_of(c->peer_mem, const struct peer_memory_client_ex, client);
	if (ex->ex_size < offsetofend(struct peer_memory_client_ex, flags))
		return false;
	return ex->flags & PEER_MEM_INVALIDATE_UNMAPS;
}

void *ib_register_peer_memory_client(const struct peer_memory_client *peer_client,
				     invalidate_peer_memory *invalidate_callback)
{
	char name[IB_PEER_MEMORY_NAME_MAX + 1];
	struct pmh_client *c;
	struct kernfs_node *kn;
	int ret;

	if (!peer_client || pmh_check_mandatory(peer_client))
		return NULL;
	/* The ABI does not promise a terminating NUL within the 64 bytes. */
	memcpy(name, peer_client->name, IB_PEER_MEMORY_NAME_MAX);
	name[IB_PEER_MEMORY_NAME_MAX] = '\0';
	/* kobject_add would WARN on an empty name; refuse it quietly instead. */
	if (!name[0]) {
		pr_err("peer_mem_host: peer memory client with an empty name refused\n");
		return NULL;
	}

	c = kzalloc(sizeof(*c), GFP_KERNEL);
	if (!c)
		return NULL;
	kobject_init(&c->kobj, &pmh_client_ktype);
	refcount_set(&c->usecnt, 1);
	init_completion(&c->usecnt_zero);
	c->peer_mem = peer_client;
	xa_init_flags(&c->mr_xa, XA_FLAGS_ALLOC);

	/* Asking for the invalidate function is what makes a client an invalidating one. */
	if (invalidate_callback) {
		*invalidate_callback = pmh_invalidate_peer_memory;
		c->invalidation_required = true;
	}

	mutex_lock(&pmh_clients_mutex);
	if (pmh_sysfs) {
		ret = pmh_peers_kobj_get();
		if (ret)
			goto err_unlock;
		/*
		 * The sysfs directory is what refuses a second client of the same name in MLNX
		 * (kobject_add fails with -EEXIST). Look first: a failing kobject_add dumps a stack.
		 */
		kn = kernfs_find_and_get(pmh_peers_kobj->sd, name);
		if (kn) {
			kernfs_put(kn);
			pr_err("peer_mem_host: a peer memory client named %s is already registered\n",
			       name);
			goto err_peers;
		}
		ret = kobject_add(&c->kobj, pmh_peers_kobj, "%s", name);
		if (ret)
			goto err_peers;
		c->kobj_added = true;
	}
	list_add_tail(&c->list, &pmh_clients);
	atomic_inc(&pmh_counters.registered_clients);
	mutex_unlock(&pmh_clients_mutex);
	pr_info("peer_mem_host: registered peer memory client %s (%s%s)\n", name,
		c->invalidation_required ? "invalidating" : "not invalidating",
		pmh_unmap_on_invalidate(c) ? ", ex: invalidate unmaps" : "");
	return c;

err_peers:
	pmh_peers_kobj_put();
err_unlock:
	mutex_unlock(&pmh_clients_mutex);
	kobject_put(&c->kobj);
	/* The registering module's init is about to fail, its other clients still registered. */
	pmh_race(PMH_RACE_REGISTER_REFUSED);
	return NULL;
}
EXPORT_SYMBOL(ib_register_peer_memory_client);

void ib_unregister_peer_memory_client(void *reg_handle)
{
	struct pmh_client *c = reg_handle;

	if (!c)
		return;
	mutex_lock(&pmh_clients_mutex);
	list_del(&c->list);
	mutex_unlock(&pmh_clients_mutex);

	/* Once this returns, no MR will call the client again. */
	if (refcount_dec_and_test(&c->usecnt))
		complete(&c->usecnt_zero);
	wait_for_completion(&c->usecnt_zero);

	mutex_lock(&pmh_clients_mutex);
	if (c->kobj_added) {
		kobject_del(&c->kobj);
		pmh_peers_kobj_put();
	}
	atomic_dec(&pmh_counters.registered_clients);
	mutex_unlock(&pmh_clients_mutex);
	pr_info("peer_mem_host: unregistered peer memory client %.*s\n",
		IB_PEER_MEMORY_NAME_MAX, c->peer_mem->name);
	kobject_put(&c->kobj);
}
EXPORT_SYMBOL(ib_unregister_peer_memory_client);

/* "name invalidating=N unmap_on_invalidate=N usecnt=N" per client, in registration order. */
void pmh_clients_show(struct seq_file *m)
{
	struct pmh_client *c;

	mutex_lock(&pmh_clients_mutex);
	list_for_each_entry(c, &pmh_clients, list)
		seq_printf(m, "%.*s invalidating=%d unmap_on_invalidate=%d usecnt=%u\n",
			   IB_PEER_MEMORY_NAME_MAX, c->peer_mem->name, c->invalidation_required,
			   pmh_unmap_on_invalidate(c), refcount_read(&c->usecnt));
	mutex_unlock(&pmh_clients_mutex);
}

/*
 * Ask the clients in registration order; the first acquire() > 0 wins. Callers that cannot handle
 * invalidation (CQ/QP buffers) skip the clients that invalidate.
 */
static struct pmh_client *pmh_get_peer_client(unsigned long addr, size_t size, u32 flags,
					      void **client_ctx)
{
	struct pmh_client *c;

	mutex_lock(&pmh_clients_mutex);
	list_for_each_entry(c, &pmh_clients, list) {
		if (c->invalidation_required && (flags & PMH_REG_NO_INVALIDATE))
			continue;
		if (c->peer_mem->acquire(addr, size, NULL, NULL, client_ctx) > 0) {
			refcount_inc(&c->usecnt);
			mutex_unlock(&pmh_clients_mutex);
			return c;
		}
	}
	mutex_unlock(&pmh_clients_mutex);
	return NULL;
}

static void pmh_put_peer_client(struct pmh_client *c, void *client_ctx)
{
	if (c->peer_mem->release) {
		c->peer_mem->release(client_ctx);
		atomic_inc(&pmh_counters.release_calls);
	}
	if (refcount_dec_and_test(&c->usecnt))
		complete(&c->usecnt_zero);
}

/* ---- memory regions ---- */

static void pmh_mr_free(struct kref *kref)
{
	struct pmh_mr *mr = container_of(kref, struct pmh_mr, kref);

	mutex_destroy(&mr->mapping_lock);
	kfree(mr);
}

void pmh_mr_put(struct pmh_mr *mr)
{
	kref_put(&mr->kref, pmh_mr_free);
}

/* What umem.c charges to and takes from the owning mm; any task may give it back. */
static void pmh_mr_drop_mm(struct pmh_mr *mr)
{
	atomic64_sub(mr->npages, &mr->owning_mm->pinned_vm);
	mmdrop(mr->owning_mm);
	mr->owning_mm = NULL;
}

static void pmh_restore_peer_sgl(struct pmh_mr *mr)
{
	/* Last first: when one entry is both, the first's saved values are the originals. */
	if (mr->last_sg) {
		mr->last_sg->length = mr->last_length;
		sg_dma_len(mr->last_sg) = mr->last_dma_length;
	}
	if (mr->first_sg) {
		mr->first_sg->dma_address = mr->first_dma_address;
		mr->first_sg->length = mr->first_length;
		sg_dma_len(mr->first_sg) = mr->first_dma_length;
	}
	mr->first_sg = NULL;
	mr->last_sg = NULL;
}

/*
 * ib_unmap_peer_client (peer_mem.c:155-203): the MR goes from state cur to state to. The client's
 * dma_unmap and put_pages are called only when a mapping goes away for good here; the statistics
 * are kept as MLNX keeps them. @c is the client the caller knows to be alive.
 */
static void pmh_unmap_peer_client(struct pmh_client *c, struct pmh_mr *mr,
				  enum pmh_mapped_state cur, enum pmh_mapped_state to)
{
	const struct peer_memory_client *pm = c->peer_mem;
	struct sg_table *sgt = pmh_mr_sgt(mr);

	if (cur == PMH_STATE_MAPPED &&
	    (to == PMH_STATE_UNMAPPED || to == PMH_STATE_INVALIDATED)) {
		/* The SG list is the client's again (it may look at it in dma_unmap). */
		pmh_restore_peer_sgl(mr);
		if (to == PMH_STATE_UNMAPPED) {
			pm->dma_unmap(sgt, mr->client_ctx, mr->dma_dev);
			atomic_inc(&pmh_counters.dma_unmap_calls);
			pm->put_pages(sgt, mr->client_ctx);
			atomic_inc(&pmh_counters.put_pages_calls);
		}
		memset(&mr->sgt_append, 0, sizeof(mr->sgt_append));
		atomic64_inc(&c->stats.num_dealloc_mrs);
	}
	if ((cur == PMH_STATE_MAPPED && to == PMH_STATE_UNMAPPED) ||
	    (cur == PMH_STATE_INVALIDATED && to == PMH_STATE_UNMAPPED)) {
		/*
		 * As in MLNX, nents is read after the table was cleared above (or at the
		 * invalidation), so num_dereg_pages never grows (peer_mem.c:190, 197).
		 */
		atomic64_add(sgt->nents, &c->stats.num_dereg_pages);
		atomic64_add(mr->length, &c->stats.num_dereg_bytes);
	}
	mr->state = to;
}

/* The NIC refuses the MR from now on: mlx5r_umr_revoke_mr. */
static void pmh_nic_revoke(struct pmh_mr *mr)
{
	WRITE_ONCE(mr->revoked, true);
}

/* ib_invalidate_peer_memory (peer_mem.c:255-299), the function invalidating clients get. */
static int pmh_invalidate_peer_memory(void *reg_handle, u64 core_context)
{
	struct pmh_client *c = reg_handle;
	struct pmh_mr *mr = NULL;

	atomic_inc(&pmh_counters.invalidate_calls);
	/*
	 * The id, not a pointer, is what clients hold: the client need not fence against
	 * invalidation during put_pages, so the MR's lifetime is not tied to its core_context.
	 * Every call is counted, found or not, before the lookup (peer_mem.c:268).
	 */
	xa_lock(&c->mr_xa);
	c->stats.num_free_callbacks++;
	if (core_context < PMH_NO_INVALIDATION_ID)
		mr = xa_load(&c->mr_xa, core_context);
	if (!mr) {
		xa_unlock(&c->mr_xa);
		/* MLNX answers 0 for an id it does not know (already deregistered). */
		atomic_inc(&pmh_counters.invalidate_unknown);
		return 0;
	}
	kref_get(&mr->kref);
	xa_unlock(&c->mr_xa);

	pmh_race(PMH_RACE_INVALIDATE_ENTERED);
	/*
	 * Waits for a registration until its memory key exists and the notifier is activated, for
	 * a legacy deregistration's unmapping, and for DMA the NIC is doing on the MR.
	 *
	 * Lockdep: subclass 1 here, 0 everywhere else. MLNX has one lock class for every umem's
	 * mapping_lock (one mutex_init, peer_mem.c:429). Registration holds it while the client's
	 * get_pages/dma_map take the GPU driver's API lock; the driver calls the client's free
	 * callback holding that API lock, and the client's invalidation takes this lock. With one
	 * class, every invalidating client (nvidia-peermem as much as ours) gives a
	 * circular-locking report at its first invalidation, and the first report switches lockdep
	 * off for the rest of the boot, blinding every later test. The real deadlock needs one and
	 * the same MR (a free racing its own registration or legacy deregistration); race tests
	 * force that interleaving and the hung-task detector reports it. The price: lockdep no
	 * longer sees a client lock held around invalidate and taken in get_pages/dma_map either
	 * (the rule of peer_mem.h); only race tests find those. README.md has the details.
	 */
	mutex_lock_nested(&mr->mapping_lock, SINGLE_DEPTH_NESTING);
	mr->invalidations++;
	if (!mr->invalidated_ns)
		mr->invalidated_ns = ktime_get_ns();
	/* Only an activated MR has an invalidation function (mlx5_invalidate_umem). */
	if (mr->state == PMH_STATE_MAPPED && mr->notifier_active)
		pmh_nic_revoke(mr);
	pmh_race(PMH_RACE_INVALIDATE_LOCKED);
	/*
	 * The client's handle is used rather than the MR's pointer to it, which a concurrent
	 * release clears (see README.md, "Noticed in MLNX").
	 */
	if (pmh_unmap_on_invalidate(c)) {
		/* The client unmaps itself: no dma_unmap/put_pages from us, now or later. */
		pmh_unmap_peer_client(c, mr, mr->state, PMH_STATE_INVALIDATED);
	} else {
		/* Legacy: dma_unmap and put_pages now, under the lock, on the client's task. */
		if (mr->state == PMH_STATE_MAPPED) {
			mr->unmapped_by_invalidation = true;
			atomic_inc(&pmh_counters.inline_unmaps);
		}
		pmh_unmap_peer_client(c, mr, mr->state, PMH_STATE_UNMAPPED);
	}
	mutex_unlock(&mr->mapping_lock);
	pmh_mr_put(mr);
	return 0;
}

/*
 * __ib_umem_release (umem.c:50-65): unpin the pages in the table, after unmapping them for the
 * NIC when @dirty (a registered MR; not the attempt that failed before the peers are asked).
 */
static void pmh_release_ordinary(struct pmh_mr *mr, bool dirty)
{
	bool make_dirty = mr->writable && dirty;
	struct sg_table *sgt = pmh_mr_sgt(mr);
	struct scatterlist *sg;
	unsigned int i;

	if (dirty)
		dma_unmap_sgtable(mr->dma_dev, sgt, DMA_BIDIRECTIONAL, 0);
	for_each_sgtable_sg(sgt, sg, i)
		unpin_user_page_range_dirty_lock(sg_page(sg), DIV_ROUND_UP(sg->length, PAGE_SIZE),
						 make_dirty);
	sg_free_append_table(&mr->sgt_append);
	/* A peer client gets a zeroed table to fill. */
	memset(&mr->sgt_append, 0, sizeof(mr->sgt_append));
}

/*
 * Pin ordinary user memory and map it for the NIC, as __ib_umem_get does before any peer is
 * asked (umem.c:209-272): one page of page pointers, pinned and appended to the SG table a chunk
 * at a time, so that no allocation grows with the length.
 */
static int pmh_pin_ordinary(struct pmh_mr *mr)
{
	unsigned int gup_flags = FOLL_LONGTERM | (mr->writable ? FOLL_WRITE : 0);
	unsigned long cur_base = mr->addr & PAGE_MASK;
	unsigned long npages = mr->npages;
	struct page **page_list;
	int pinned, ret = 0;

	page_list = (struct page **)__get_free_page(GFP_KERNEL);
	if (!page_list)
		return -ENOMEM;
	while (npages) {
		cond_resched();
		pinned = pin_user_pages_fast(cur_base,
					     min_t(unsigned long, npages,
						   PAGE_SIZE / sizeof(struct page *)),
					     gup_flags, page_list);
		if (pinned <= 0) {
			/* A VM_IO/VM_PFNMAP range (GPU memory) ends up here with -EFAULT. */
			ret = pinned ? pinned : -EFAULT;
			goto release;
		}
		cur_base += (unsigned long)pinned << PAGE_SHIFT;
		npages -= pinned;
		ret = sg_alloc_append_table_from_pages(&mr->sgt_append, page_list, pinned, 0,
						       (unsigned long)pinned << PAGE_SHIFT,
						       dma_get_max_seg_size(mr->dma_dev), npages,
						       GFP_KERNEL);
		if (ret) {
			unpin_user_pages_dirty_lock(page_list, pinned, false);
			goto release;
		}
	}
	ret = dma_map_sgtable(mr->dma_dev, pmh_mr_sgt(mr), DMA_BIDIRECTIONAL, 0);
	if (!ret)
		goto out;
release:
	pmh_release_ordinary(mr, false);
out:
	free_page((unsigned long)page_list);
	return ret;
}

/*
 * fix_peer_sgls (peer_mem.c:363-400): trim the client's page-granular SG list to the PAGE_SIZE
 * pages the user's range touches. MLNX trims blindly; here a page size that is no power of two
 * (ALIGN() of it means nothing) leaves the list alone, and an end entry too short to trim is left
 * as it is and marked, and the memory key's creation refuses both (pmh_check_peer_sgl).
 */
static void pmh_fix_peer_sgls(struct pmh_mr *mr)
{
	unsigned long ps = mr->page_size, end = mr->addr + mr->length, cut;
	struct sg_table *sgt = pmh_mr_sgt(mr);
	struct scatterlist *sg;
	unsigned int i;

	if (!is_power_of_2(ps) || ps < PAGE_SIZE)
		return;
	for_each_sgtable_sg(sgt, sg, i) {
		if (i == 0) {
			cut = ALIGN_DOWN(mr->addr, PAGE_SIZE) - ALIGN_DOWN(mr->addr, ps);
			if (sg_dma_len(sg) <= cut || sg->length <= cut) {
				mr->trim_failed = true;
			} else {
				mr->first_sg = sg;
				mr->first_dma_address = sg_dma_address(sg);
				mr->first_dma_length = sg_dma_len(sg);
				mr->first_length = sg->length;
				sg_dma_address(sg) += cut;
				sg_dma_len(sg) -= cut;
				sg->length -= cut;
			}
		}
		if (i == sgt->nents - 1) {
			cut = ALIGN(end, ps) - ALIGN(end, PAGE_SIZE);
			if (sg_dma_len(sg) <= cut || sg->length <= cut) {
				mr->trim_failed = true;
			} else {
				mr->last_sg = sg;
				mr->last_dma_length = sg_dma_len(sg);
				mr->last_length = sg->length;
				sg_dma_len(sg) -= cut;
				sg->length -= cut;
			}
		}
	}
}

/*
 * Creating the memory key: what mlx5's reg_create needs of a peer umem, checked so that a broken
 * client fails its registration loudly instead of sending the NIC astray. MLNX core checks none
 * of it. The page size and the entry count are this host's own checks (mlx5 would compute a
 * bogus page size, or read past the list); the alignment is what ib_umem_find_best_pgsz needs
 * and mlx5 refuses without (reg_create: -EINVAL for a page size of 0, mr.c:1359-1360).
 */
static int pmh_check_peer_sgl(struct pmh_mr *mr)
{
	const char *name = mr->client->peer_mem->name;
	struct sg_table *sgt = pmh_mr_sgt(mr);
	struct scatterlist *sg;
	unsigned long total = 0;
	unsigned int i;

	if (!is_power_of_2(mr->page_size) || mr->page_size < PAGE_SIZE) {
		pr_err("peer_mem_host: client %.*s: bad page size %lu\n",
		       IB_PEER_MEMORY_NAME_MAX, name, mr->page_size);
		return -EINVAL;
	}
	if (!sgt->sgl || !sgt->nents || sgt->nents > sgt->orig_nents) {
		pr_err("peer_mem_host: client %.*s: dma_map gave %u entries for a table of %u\n",
		       IB_PEER_MEMORY_NAME_MAX, name, sgt->nents, sgt->sgl ? sgt->orig_nents : 0);
		return -EINVAL;
	}
	for_each_sgtable_dma_sg(sgt, sg, i) {
		if (!PAGE_ALIGNED(sg_dma_address(sg)) || !PAGE_ALIGNED(sg_dma_len(sg))) {
			atomic_inc(&pmh_counters.alignment_refusals);
			pr_err("peer_mem_host: client %.*s: SG entry %u of %u (DMA %pad, %u bytes) is not PAGE_SIZE aligned: mlx5 would refuse this in reg_create\n",
			       IB_PEER_MEMORY_NAME_MAX, name, i, sgt->nents, &sg_dma_address(sg),
			       sg_dma_len(sg));
			return -EINVAL;
		}
		total += sg_dma_len(sg);
	}
	if (mr->trim_failed || total < mr->sg_head_offset + mr->length) {
		pr_err("peer_mem_host: client %.*s: SG list of %u entries, %lu bytes, does not cover [%#lx, +%#zx) in %lu-byte pages\n",
		       IB_PEER_MEMORY_NAME_MAX, name, sgt->nents, total, mr->addr, mr->length,
		       mr->page_size);
		return -EINVAL;
	}
	return 0;
}

/*
 * ib_peer_umem_get (peer_mem.c:402-502): the first client that claims the range pins and maps it
 * for the NIC, all under the MR's mapping lock (OFED-MAPPING-LOCK). For a client that does not
 * invalidate the lock is dropped before returning; for one that does it stays held until the
 * memory key exists and the invalidation notifier is activated
 * (pmh_activate_invalidation_notifier), or until the deregistration path stops it.
 */
static int pmh_peer_umem_get(struct pmh_mr *mr, u32 flags, int pin_err)
{
	struct sg_table *sgt = pmh_mr_sgt(mr);
	const struct peer_memory_client *pm;
	struct pmh_client *c;
	void *ctx = NULL;
	int ret;

	c = pmh_get_peer_client(mr->addr, mr->length, flags, &ctx);
	if (!c)
		return pin_err;
	pmh_race(PMH_RACE_REG_ACQUIRED);
	pm = c->peer_mem;
	mr->is_peer = true;
	mr->client = c;
	mr->client_ctx = ctx;
	mr->xa_id = PMH_NO_INVALIDATION_ID;

	/* Before the id exists: an invalidation that finds the MR waits for what follows. */
	mutex_lock(&mr->mapping_lock);
	if (c->invalidation_required) {
		ret = xa_alloc_cyclic(&c->mr_xa, &mr->xa_id, mr,
				      XA_LIMIT(0, PMH_NO_INVALIDATION_ID - 1), &c->xa_cyclic_next,
				      GFP_KERNEL);
		if (ret < 0)
			goto err_umem;
	}
	pmh_race(PMH_RACE_REG_LOCKED);

	/* Always "write"; "force" asks for write access the registration requires. */
	ret = pm->get_pages(mr->addr, mr->length, 1, !mr->writable, NULL, ctx, mr->xa_id);
	if (ret)
		goto err_xa;
	pmh_race(PMH_RACE_REG_AFTER_GET_PAGES);

	if (pmh_page_size_before_dma_map)
		mr->page_size = pm->get_page_size(ctx);
	/* nmap is the table's own nents: no separate count (peer_mem.c:457-460). */
	ret = pm->dma_map(sgt, ctx, mr->dma_dev, 0, &sgt->nents);
	if (ret)
		goto err_pages;
	if (!pmh_page_size_before_dma_map)
		mr->page_size = pm->get_page_size(ctx);
	if (pmh_trim_sgl && mr->page_size != PAGE_SIZE)
		pmh_fix_peer_sgls(mr);

	mr->state = PMH_STATE_MAPPED;
	atomic64_add(sgt->nents, &c->stats.num_reg_pages);
	atomic64_add(mr->length, &c->stats.num_reg_bytes);
	atomic64_inc(&c->stats.num_alloc_mrs);
	pmh_race(PMH_RACE_REG_AFTER_DMA_MAP);

	if (mr->xa_id == PMH_NO_INVALIDATION_ID)
		mutex_unlock(&mr->mapping_lock);
	return 0;

err_pages:
	/* dma_map failed and left nothing to unmap. */
	pm->put_pages(sgt, ctx);
	atomic_inc(&pmh_counters.put_pages_calls);
err_xa:
	if (mr->xa_id != PMH_NO_INVALIDATION_ID)
		xa_erase(&c->mr_xa, mr->xa_id);
err_umem:
	/* An invalidation waiting here now finds the MR unmapped and does nothing. */
	mutex_unlock(&mr->mapping_lock);
	pmh_put_peer_client(c, ctx);
	mr->client = NULL;
	atomic_inc(&pmh_counters.peer_reg_unwound);
	return ret;
}

/*
 * ib_umem_activate_invalidation_notifier (peer_mem.c:301-319): the memory key exists, so
 * invalidations may revoke it from now on. Unlocks what pmh_peer_umem_get left locked.
 */
static void pmh_activate_invalidation_notifier(struct pmh_mr *mr)
{
	if (mr->xa_id == PMH_NO_INVALIDATION_ID)
		return;
	mr->notifier_active = true;
	mutex_unlock(&mr->mapping_lock);
}

/*
 * ib_umem_stop_invalidation_notifier as of MLNX_OFED 25.04 (OFED-DEREG; in 24.10 and 25.01 the
 * second test was inverted, OFED-STOP-NOTIFIER, see README.md). After it no invalidation reaches the client for
 * this MR. A legacy client is unmapped under the lock; an ex one with PEER_MEM_INVALIDATE_UNMAPS
 * is marked unmapped under it (which blocks invalidations) and unmapped after it is dropped.
 */
static void pmh_stop_invalidation_notifier(struct pmh_mr *mr)
{
	struct pmh_client *c = mr->client;
	bool unmap_on_invalidate = pmh_unmap_on_invalidate(c);
	enum pmh_mapped_state cur = PMH_STATE_UNMAPPED;

	if (mr->notifier_active) {
		mutex_lock(&mr->mapping_lock);
		mr->notifier_active = false;
	} else if (READ_ONCE(pmh_stop_notifier_before_25_04) ?
		   mr->xa_id != PMH_NO_INVALIDATION_ID : mr->xa_id == PMH_NO_INVALIDATION_ID) {
		/*
		 * Up to 25.01 (stop_notifier_before_25_04) this is where an invalidating MR that was
		 * never activated, whose registration still holds the lock, takes it again: the task
		 * deadlocks on itself, and every later invalidation of the MR (looked up by its id,
		 * which stays) waits for the lock with it.
		 */
		mutex_lock(&mr->mapping_lock);
	} else if (!READ_ONCE(pmh_stop_notifier_before_25_04)) {
		/* Never activated: the registration still holds the lock. */
		lockdep_assert_held(&mr->mapping_lock);
	}
	/* (Up to 25.01 a non-invalidating MR gets here without the lock, and it is unlocked anyway.) */

	if (!unmap_on_invalidate) {
		pmh_unmap_peer_client(c, mr, mr->state, PMH_STATE_UNMAPPED);
	} else {
		cur = mr->state;
		mr->state = PMH_STATE_UNMAPPED;
	}
	mutex_unlock(&mr->mapping_lock);

	if (unmap_on_invalidate)
		pmh_unmap_peer_client(c, mr, cur, PMH_STATE_UNMAPPED);
}

/*
 * ib_peer_umem_release, without the mapping lock (OFED-DEREG): unmap if still mapped
 * (the path of MRs that never invalidate), forget the id, release the client's context.
 */
static void pmh_peer_umem_release(struct pmh_mr *mr)
{
	struct pmh_client *c = mr->client;

	WARN_ON(mr->notifier_active);
	pmh_unmap_peer_client(c, mr, mr->state, PMH_STATE_UNMAPPED);
	if (mr->xa_id != PMH_NO_INVALIDATION_ID)
		xa_erase(&c->mr_xa, mr->xa_id);
	pmh_race(PMH_RACE_DEREG_BEFORE_RELEASE);
	pmh_put_peer_client(c, mr->client_ctx);
	mr->client = NULL;
	pmh_mr_drop_mm(mr);
}

/* Stop, then release: mlx5's deregistration, and its create_real_mr error path. */
static void pmh_peer_teardown(struct pmh_mr *mr)
{
	pmh_race(PMH_RACE_DEREG_BEFORE_STOP);
	pmh_stop_invalidation_notifier(mr);
	pmh_race(PMH_RACE_DEREG_STOPPED);
	pmh_peer_umem_release(mr);
}

static unsigned long pmh_num_pages(unsigned long addr, size_t length)
{
	return (ALIGN(addr + length, PAGE_SIZE) - ALIGN_DOWN(addr, PAGE_SIZE)) >> PAGE_SHIFT;
}

struct pmh_mr *pmh_mr_register(unsigned long addr, size_t length, u32 flags)
{
	struct device *dev = pmh_nic_dma_device();
	unsigned long lock_limit;
	struct mm_struct *mm = current->mm;
	struct pmh_mr *mr;
	int ret;

	if (!dev)
		return ERR_PTR(-ENODEV);
	/* umem.c:180-192: refused before anything, peers included. */
	if (addr + length < addr || PAGE_ALIGN(addr + length) < addr + length)
		return ERR_PTR(-EINVAL);
	if (!mm)
		return ERR_PTR(-EINVAL);
	if (!can_do_mlock())
		return ERR_PTR(-EPERM);

	mr = kzalloc_obj(*mr);
	if (!mr)
		return ERR_PTR(-ENOMEM);
	kref_init(&mr->kref);
	mutex_init(&mr->mapping_lock);
	INIT_LIST_HEAD(&mr->work_node);
	mr->addr = addr;
	mr->length = length;
	mr->writable = flags & PMH_REG_WRITE;
	mr->dma_dev = dev;
	mr->xa_id = PMH_NO_INVALIDATION_ID;
	mr->owning_mm = mm;
	mmgrab(mm);

	/* umem.c:215-228: no pages, too many, or over RLIMIT_MEMLOCK: no peer is asked. */
	mr->npages = pmh_num_pages(addr, length);
	if (mr->npages == 0 || mr->npages > UINT_MAX) {
		ret = -EINVAL;
		goto err_mm;
	}
	lock_limit = rlimit(RLIMIT_MEMLOCK) >> PAGE_SHIFT;
	if (atomic64_add_return(mr->npages, &mm->pinned_vm) > lock_limit &&
	    !capable(CAP_IPC_LOCK)) {
		atomic64_sub(mr->npages, &mm->pinned_vm);
		ret = -ENOMEM;
		goto err_mm;
	}

	ret = pmh_pin_ordinary(mr);
	if (!ret) {
		mr->state = PMH_STATE_MAPPED;
		mr->reg_nmap = pmh_mr_sgt(mr)->nents;
		mr->sg_head_offset = addr & ~PAGE_MASK;
		atomic_inc(&pmh_counters.live_ordinary_mrs);
		goto out;
	}

	/* Only when ordinary pinning fails are the peer clients asked. */
	if (READ_ONCE(pmh_nonpci_dma_device))
		mr->dma_dev = pmh_nonpci_device();
	ret = pmh_peer_umem_get(mr, flags, ret);
	if (ret)
		goto err_pinned;
	/* mlx5's reg_user_mr: create the memory key (the lock is still held if it invalidates). */
	mr->sg_head_offset = pmh_trim_sgl ? addr & ~PAGE_MASK : addr & (mr->page_size - 1);
	ret = xchg(&pmh_fail_mkey, false) ? -ENOMEM : pmh_check_peer_sgl(mr);
	if (ret) {
		/* create_real_mr's error path (mr.c:1559-1563): stop, then release. */
		pmh_peer_teardown(mr);
		atomic_inc(&pmh_counters.peer_reg_unwound);
		pmh_mr_put(mr);
		return ERR_PTR(ret);
	}
	mr->reg_nmap = pmh_mr_sgt(mr)->nents;
	pmh_race(PMH_RACE_REG_BEFORE_ACTIVATE);
	pmh_activate_invalidation_notifier(mr);
	atomic_inc(&pmh_counters.live_peer_mrs);
out:
	atomic_inc(&pmh_counters.live_mrs);
	return mr;

err_pinned:
	atomic64_sub(mr->npages, &mm->pinned_vm);
err_mm:
	mmdrop(mm);
	pmh_mr_put(mr);
	return ERR_PTR(ret);
}

/*
 * Deregistration, in whatever task calls it (the owner's dereg, the last close of a file a
 * forked child inherited, a kworker removing the device): nothing here depends on current.
 */
void pmh_mr_deregister(struct pmh_mr *mr)
{
	if (!mr->is_peer) {
		mutex_lock(&mr->mapping_lock);
		mr->state = PMH_STATE_UNMAPPED;
		mutex_unlock(&mr->mapping_lock);
		pmh_release_ordinary(mr, true);
		pmh_mr_drop_mm(mr);
		atomic_dec(&pmh_counters.live_ordinary_mrs);
	} else {
		/* mlx5r_handle_mkey_cleanup (mr.c:2234-2239): revoke first, then stop. */
		pmh_nic_revoke(mr);
		pmh_peer_teardown(mr);
		atomic_dec(&pmh_counters.live_peer_mrs);
	}
	atomic_dec(&pmh_counters.live_mrs);
	pmh_mr_put(mr);
}
