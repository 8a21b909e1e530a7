// SPDX-License-Identifier: GPL-2.0
/*
 * The ib_core side of the peer-memory host stand-in: the client registry with its
 * /sys/kernel/mm/memory_peers/ statistics, memory registration (ordinary pinning first, then the
 * peer clients), the invalidate function clients call, and deregistration.
 *
 * The flow follows MLNX_OFED 5.x's drivers/infiniband/core/peer_mem.c (Ubuntu's SAUCE copy is the
 * same): written from a reading of that behaviour, not from its code. Where this host deviates
 * (it checks what a real host would trust), README.md says so.
 */
#include <linux/dma-mapping.h>
#include <linux/kernfs.h>
#include <linux/ktime.h>
#include <linux/log2.h>
#include <linux/mm.h>
#include <linux/sizes.h>
#include <linux/slab.h>
#include <linux/string.h>
#include <linux/sysfs.h>
#include <linux/wait_bit.h>
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
 * The MR goes from state cur to state to (the caller records the new state): call the client's
 * dma_unmap/put_pages when the mapping goes away for good here, and keep the statistics as MLNX
 * does.
 */
static void pmh_unmap_peer_client(struct pmh_mr *mr, enum pmh_mapped_state cur,
				  enum pmh_mapped_state to)
{
	struct pmh_client *c = mr->client;
	const struct peer_memory_client *pm = c->peer_mem;

	if (cur == PMH_STATE_MAPPED &&
	    (to == PMH_STATE_UNMAPPED || to == PMH_STATE_INVALIDATED)) {
		/* The SG list is the client's again (it may look at it in dma_unmap). */
		pmh_restore_peer_sgl(mr);
		if (to == PMH_STATE_UNMAPPED) {
			pm->dma_unmap(&mr->sgt, mr->client_ctx, mr->dma_dev);
			atomic_inc(&pmh_counters.dma_unmap_calls);
			pm->put_pages(&mr->sgt, mr->client_ctx);
			atomic_inc(&pmh_counters.put_pages_calls);
		}
		memset(&mr->sgt, 0, sizeof(mr->sgt));
		atomic64_inc(&c->stats.num_dealloc_mrs);
	}
	if ((cur == PMH_STATE_MAPPED && to == PMH_STATE_UNMAPPED) ||
	    (cur == PMH_STATE_INVALIDATED && to == PMH_STATE_UNMAPPED)) {
		atomic64_add(mr->nmap, &c->stats.num_dereg_pages);
		atomic64_add(mr->length, &c->stats.num_dereg_bytes);
	}
}

static int pmh_invalidate_peer_memory(void *reg_handle, u64 core_context)
{
	struct pmh_client *c = reg_handle;
	struct pmh_mr *mr = NULL;
	bool unmap_now = false;

	atomic_inc(&pmh_counters.invalidate_calls);
	/*
	 * The id, not a pointer, is what clients hold: the client need not fence against
	 * invalidation during put_pages, so the MR's lifetime is not tied to its core_context.
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

	/* Waits for DMA the NIC is doing on the MR. */
	mutex_lock(&mr->mapping_lock);
	mr->invalidations++;
	if (!mr->invalidated_ns)
		mr->invalidated_ns = ktime_get_ns();
	/* The NIC driver's part: revoke the memory key; from now on the NIC refuses the MR. */
	mr->revoked = true;
	if (mr->state == PMH_STATE_MAPPED) {
		if (pmh_unmap_on_invalidate(c)) {
			/* The client unmaps itself: no dma_unmap/put_pages from us, now or later. */
			pmh_unmap_peer_client(mr, PMH_STATE_MAPPED, PMH_STATE_INVALIDATED);
			mr->state = PMH_STATE_INVALIDATED;
		} else {
			/* Legacy: dma_unmap and put_pages now, on the client's task. */
			mr->state = PMH_STATE_UNMAPPED;
			mr->unmapped_by_invalidation = true;
			mr->inline_unmap_running = true;
			unmap_now = true;
			atomic_inc(&pmh_counters.inline_unmaps);
		}
	}
	/* Otherwise it is being registered (which then fails) or deregistered: nothing to undo. */
	mutex_unlock(&mr->mapping_lock);

	if (unmap_now) {
		/* Outside the mapping lock, like every call into a client (README.md). */
		pmh_unmap_peer_client(mr, PMH_STATE_MAPPED, PMH_STATE_UNMAPPED);
		/* A deregistration waiting for us may now release the client's context. */
		mutex_lock(&mr->mapping_lock);
		mr->inline_unmap_running = false;
		mutex_unlock(&mr->mapping_lock);
		wake_up_var(&mr->inline_unmap_running);
	}
	pmh_mr_put(mr);
	return 0;
}

/* Pin ordinary user memory and map it for the NIC, as ib_umem_get does before any peer is asked. */
static int pmh_pin_ordinary(struct pmh_mr *mr)
{
	unsigned long start = mr->addr & PAGE_MASK;
	unsigned long end = PAGE_ALIGN(mr->addr + mr->length);
	unsigned int gup_flags = FOLL_LONGTERM | (mr->writable ? FOLL_WRITE : 0);
	unsigned long pinned = 0;
	int ret, n;

	mr->npages = (end - start) >> PAGE_SHIFT;
	mr->pages = kvmalloc_array(mr->npages, sizeof(*mr->pages), GFP_KERNEL);
	if (!mr->pages)
		return -ENOMEM;
	while (pinned < mr->npages) {
		n = pin_user_pages_fast(start + (pinned << PAGE_SHIFT),
					min_t(unsigned long, mr->npages - pinned, SZ_64K), gup_flags,
					mr->pages + pinned);
		if (n <= 0) {
			/* A VM_IO/VM_PFNMAP range (GPU memory) ends up here with -EFAULT. */
			ret = n ? n : -EFAULT;
			goto err_unpin;
		}
		pinned += n;
	}
	ret = sg_alloc_table_from_pages(&mr->sgt, mr->pages, mr->npages, 0,
					mr->npages << PAGE_SHIFT, GFP_KERNEL);
	if (ret)
		goto err_unpin;
	ret = dma_map_sgtable(mr->dma_dev, &mr->sgt, DMA_BIDIRECTIONAL, 0);
	if (ret)
		goto err_sgt;
	mr->nmap = mr->sgt.nents;
	mr->sg_head_offset = mr->addr & ~PAGE_MASK;
	return 0;

err_sgt:
	sg_free_table(&mr->sgt);
	memset(&mr->sgt, 0, sizeof(mr->sgt));
err_unpin:
	unpin_user_pages(mr->pages, pinned);
	kvfree(mr->pages);
	mr->pages = NULL;
	return ret;
}

static void pmh_unpin_ordinary(struct pmh_mr *mr)
{
	dma_unmap_sgtable(mr->dma_dev, &mr->sgt, DMA_BIDIRECTIONAL, 0);
	sg_free_table(&mr->sgt);
	unpin_user_pages_dirty_lock(mr->pages, mr->npages, mr->writable);
	kvfree(mr->pages);
	mr->pages = NULL;
}

static bool pmh_trim_peer_sgl_on(const struct pmh_mr *mr)
{
	return pmh_trim_sgl && mr->page_size != PAGE_SIZE;
}

/* Trim the client's page-granular SG list to the PAGE_SIZE pages the user's range touches. */
static void pmh_trim_peer_sgl(struct pmh_mr *mr)
{
	unsigned long end = mr->addr + mr->length;
	unsigned long head = ALIGN_DOWN(mr->addr, PAGE_SIZE) - ALIGN_DOWN(mr->addr, mr->page_size);
	unsigned long tail = ALIGN(end, mr->page_size) - ALIGN(end, PAGE_SIZE);
	struct scatterlist *first = mr->sgt.sgl, *last = first, *sg;
	unsigned int i;

	for_each_sg(mr->sgt.sgl, sg, mr->nmap, i)
		last = sg;
	mr->first_sg = first;
	mr->first_dma_address = sg_dma_address(first);
	mr->first_dma_length = sg_dma_len(first);
	mr->first_length = first->length;
	mr->last_sg = last;
	mr->last_dma_length = sg_dma_len(last);
	mr->last_length = last->length;

	sg_dma_address(first) += head;
	sg_dma_len(first) -= head;
	first->length -= head;
	sg_dma_len(last) -= tail;
	last->length -= tail;
}

/*
 * What a real host trusts blindly, checked here so that a broken client fails its registration
 * loudly instead of sending the NIC astray: the page size is a power of two of at least
 * PAGE_SIZE, the SG list has what dma_map claimed, and it covers the user's range.
 */
static int pmh_check_peer_sgl(struct pmh_mr *mr, int nmap)
{
	unsigned long head, tail, span, total = 0;
	struct scatterlist *sg, *last = NULL;
	const char *name = mr->client->peer_mem->name;
	unsigned int i;

	if (!is_power_of_2(mr->page_size) || mr->page_size < PAGE_SIZE) {
		pr_err("peer_mem_host: client %.*s: bad page size %lu\n",
		       IB_PEER_MEMORY_NAME_MAX, name, mr->page_size);
		return -EINVAL;
	}
	if (nmap <= 0 || !mr->sgt.sgl || (unsigned int)nmap > mr->sgt.orig_nents) {
		pr_err("peer_mem_host: client %.*s: dma_map returned %d entries for a table of %u\n",
		       IB_PEER_MEMORY_NAME_MAX, name, nmap, mr->sgt.sgl ? mr->sgt.orig_nents : 0);
		return -EINVAL;
	}
	for_each_sg(mr->sgt.sgl, sg, nmap, i) {
		total += sg_dma_len(sg);
		last = sg;
	}
	/* The client maps whole pages of its own size around the range. */
	span = ALIGN(mr->addr + mr->length, mr->page_size) - ALIGN_DOWN(mr->addr, mr->page_size);
	head = ALIGN_DOWN(mr->addr, PAGE_SIZE) - ALIGN_DOWN(mr->addr, mr->page_size);
	tail = ALIGN(mr->addr + mr->length, mr->page_size) - ALIGN(mr->addr + mr->length, PAGE_SIZE);
	if (total < span || (pmh_trim_peer_sgl_on(mr) &&
			     (sg_dma_len(mr->sgt.sgl) <= head || sg_dma_len(last) <= tail))) {
		pr_err("peer_mem_host: client %.*s: SG list of %d entries, %lu bytes, does not cover [%#lx, +%#zx) in %lu-byte pages (%lu bytes)\n",
		       IB_PEER_MEMORY_NAME_MAX, name, nmap, total, mr->addr, mr->length,
		       mr->page_size, span);
		return -EINVAL;
	}
	return 0;
}

/*
 * The peer path of ib_umem_get: the first client that claims the range maps it for the NIC. The
 * client is called without the MR's mapping lock (MLNX 5.x holds it from before get_pages until
 * the MR is ready; README.md says why this host does not); an invalidation that arrives before
 * the MR is ready makes the registration fail, as MLNX_OFED 4.9 did.
 */
static int pmh_peer_get(struct pmh_mr *mr, u32 flags, int pin_err)
{
	const struct peer_memory_client *pm;
	struct pmh_client *c;
	void *ctx = NULL;
	int nmap = 0;
	int ret;

	c = pmh_get_peer_client(mr->addr, mr->length, flags, &ctx);
	if (!c)
		return pin_err;
	pm = c->peer_mem;
	mr->is_peer = true;
	mr->client = c;
	mr->client_ctx = ctx;
	mr->xa_id = PMH_NO_INVALIDATION_ID;

	if (c->invalidation_required) {
		ret = xa_alloc_cyclic(&c->mr_xa, &mr->xa_id, mr,
				      XA_LIMIT(0, PMH_NO_INVALIDATION_ID - 1), &c->xa_cyclic_next,
				      GFP_KERNEL);
		if (ret < 0)
			goto err_client;
	}

	/* Always "write"; "force" asks for write access the registration requires. */
	ret = pm->get_pages(mr->addr, mr->length, 1, !mr->writable, NULL, ctx, mr->xa_id);
	if (ret)
		goto err_xa;

	if (pmh_page_size_before_dma_map)
		mr->page_size = pm->get_page_size(ctx);
	ret = pm->dma_map(&mr->sgt, ctx, mr->dma_dev, 0, &nmap);
	if (ret)
		goto err_pages;
	if (!pmh_page_size_before_dma_map)
		mr->page_size = pm->get_page_size(ctx);

	ret = pmh_check_peer_sgl(mr, nmap);
	if (ret)
		goto err_unmap;
	mr->nmap = nmap;

	mutex_lock(&mr->mapping_lock);
	if (mr->invalidations) {
		mutex_unlock(&mr->mapping_lock);
		pr_warn("peer_mem_host: client %.*s invalidated [%#lx, +%#zx) during its registration\n",
			IB_PEER_MEMORY_NAME_MAX, pm->name, mr->addr, mr->length);
		ret = -EINVAL;
		/* An ex client that invalidated has let go of its pages itself. */
		if (pmh_unmap_on_invalidate(c))
			goto err_xa;
		goto err_unmap;
	}
	if (pmh_trim_peer_sgl_on(mr)) {
		pmh_trim_peer_sgl(mr);
		mr->sg_head_offset = mr->addr & ~PAGE_MASK;
	} else {
		/* Without trimming the NIC starts inside the client's first page, as mlx5 does. */
		mr->sg_head_offset = mr->addr & (mr->page_size - 1);
	}
	mr->state = PMH_STATE_MAPPED;
	atomic64_add(mr->nmap, &c->stats.num_reg_pages);
	atomic64_add(mr->length, &c->stats.num_reg_bytes);
	atomic64_inc(&c->stats.num_alloc_mrs);
	/* The memory key exists: invalidations revoke it from now on. */
	mutex_unlock(&mr->mapping_lock);
	return 0;

err_unmap:
	pm->dma_unmap(&mr->sgt, ctx, mr->dma_dev);
	atomic_inc(&pmh_counters.dma_unmap_calls);
err_pages:
	pm->put_pages(&mr->sgt, ctx);
	atomic_inc(&pmh_counters.put_pages_calls);
err_xa:
	if (mr->xa_id != PMH_NO_INVALIDATION_ID)
		xa_erase(&c->mr_xa, mr->xa_id);
err_client:
	pmh_put_peer_client(c, ctx);
	mr->client = NULL;
	atomic_inc(&pmh_counters.peer_reg_unwound);
	return ret;
}

struct pmh_mr *pmh_mr_register(unsigned long addr, size_t length, u32 flags)
{
	struct device *dev = pmh_nic_dma_device();
	struct pmh_mr *mr;
	int ret;

	if (!dev)
		return ERR_PTR(-ENODEV);
	if (!length || addr + length < addr)
		return ERR_PTR(-EINVAL);
	mr = kzalloc(sizeof(*mr), GFP_KERNEL);
	if (!mr)
		return ERR_PTR(-ENOMEM);
	kref_init(&mr->kref);
	mutex_init(&mr->mapping_lock);
	mr->addr = addr;
	mr->length = length;
	mr->writable = flags & PMH_REG_WRITE;
	mr->dma_dev = dev;
	mr->xa_id = PMH_NO_INVALIDATION_ID;

	ret = pmh_pin_ordinary(mr);
	if (!ret) {
		mr->state = PMH_STATE_MAPPED;
		atomic_inc(&pmh_counters.live_ordinary_mrs);
	} else {
		/* Only when ordinary pinning fails are the peer clients asked. */
		ret = pmh_peer_get(mr, flags, ret);
		if (ret) {
			pmh_mr_put(mr);
			return ERR_PTR(ret);
		}
		atomic_inc(&pmh_counters.live_peer_mrs);
	}
	atomic_inc(&pmh_counters.live_mrs);
	return mr;
}

void pmh_mr_deregister(struct pmh_mr *mr)
{
	enum pmh_mapped_state cur;

	if (!mr->is_peer) {
		mutex_lock(&mr->mapping_lock);
		mr->state = PMH_STATE_UNMAPPED;
		mutex_unlock(&mr->mapping_lock);
		pmh_unpin_ordinary(mr);
		atomic_dec(&pmh_counters.live_ordinary_mrs);
		goto out;
	}

	/*
	 * Marking it unmapped makes a later invalidation a no-op; one that is still unmapping the
	 * client inline (legacy) is waited for, since release must come after it. The client's
	 * dma_unmap and put_pages then run without the mapping lock (MLNX 5.x does so for ex
	 * clients and holds the lock for legacy ones: see README.md).
	 */
	mutex_lock(&mr->mapping_lock);
	while (mr->inline_unmap_running) {
		mutex_unlock(&mr->mapping_lock);
		wait_var_event(&mr->inline_unmap_running, !READ_ONCE(mr->inline_unmap_running));
		mutex_lock(&mr->mapping_lock);
	}
	cur = mr->state;
	mr->state = PMH_STATE_UNMAPPED;
	mutex_unlock(&mr->mapping_lock);
	pmh_unmap_peer_client(mr, cur, PMH_STATE_UNMAPPED);

	if (mr->xa_id != PMH_NO_INVALIDATION_ID)
		xa_erase(&mr->client->mr_xa, mr->xa_id);
	pmh_put_peer_client(mr->client, mr->client_ctx);
	mr->client = NULL;
	atomic_dec(&pmh_counters.live_peer_mrs);
out:
	atomic_dec(&pmh_counters.live_mrs);
	pmh_mr_put(mr);
}
