// SPDX-License-Identifier: GPL-2.0
/*
 * BAR1 accounting of the NVIDIA P2P stand-in, as RM keeps it: pins map BAR1 in reference-counted
 * extents that the pins of one third-party P2P object share (the owning process's object for
 * non-persistent pins, RM's internal one for persistent pins), so a pin of memory already mapped
 * in its object costs nothing and an overlapping one only its gaps. A new extent must leave the
 * reserve (bar1_reserve_mib, 36 MiB in nvidia.ko) free of the BAR1 size (bar1_size_mib, default
 * the BAR's), or the pin fails with -ENOMEM.
 */
#include "kselftest_harness.h"
#include "standin_test.h"

#define MiB (1024ull * 1024)

FIXTURE(bar1) {
	struct standin_env env;
	__u64 bar_start, bar_len;
};

FIXTURE_VARIANT(bar1) {
	const char *params;
	__u64 reserve_mib;
};

FIXTURE_VARIANT_ADD(bar1, default_reserve) {
	.params = "",
	.reserve_mib = 36,
};

FIXTURE_VARIANT_ADD(bar1, reserve_at_load) {
	.params = "bar1_reserve_mib=250",
	.reserve_mib = 250,
};

FIXTURE_SETUP(bar1)
{
	struct pci_loc gpu;

	STANDIN_SETUP(&self->env, variant->params);
	ASSERT_EQ(0, gpu_loc(&gpu));
	ASSERT_EQ(0, pci_bar(&gpu, 2, &self->bar_start, &self->bar_len));
	ASSERT_LT(variant->reserve_mib * MiB + 2 * GPU_PAGE, self->bar_len)
		TH_LOG("the BAR (%llu MiB) is too small for this test", (unsigned long long)(self->bar_len / MiB));
}

FIXTURE_TEARDOWN(bar1)
{
	STANDIN_TEARDOWN(&self->env);
}

static void expect_bar1(struct __test_metadata *_metadata, __u64 bytes, long long extents)
{
	EXPECT_EQ(bytes, gpu_counter("bar1_pinned_bytes"));
	EXPECT_EQ(extents, gpu_counter("live_bar1_extents"));
}

TEST_F(bar1, exhaustion)
{
	__u64 limit = self->bar_len - variant->reserve_mib * MiB;
	__u64 handle, h1, h2, h3, h4;
	int probe = self->env.probe;
	uintptr_t va;

	EXPECT_EQ(variant->reserve_mib, read_number(STANDIN_PARAMS "bar1_reserve_mib"));
	EXPECT_EQ(0, read_number(STANDIN_PARAMS "bar1_size_mib"));
	va = (uintptr_t)gpu_alloc(self->env.gpu, limit + 2 * GPU_PAGE, &handle);
	ASSERT_NE(0, va) TH_LOG("alloc %llu bytes: %s", (unsigned long long)limit, strerror(errno));

	/* Up to the limit, in two pins of the two kinds (two objects). */
	h1 = probe_pin_ok(probe, va, limit - GPU_PAGE, 0);
	ASSERT_NE(0, h1);
	h2 = probe_pin_ok(probe, va + limit - GPU_PAGE, GPU_PAGE, P2P_PROBE_PERSISTENT);
	ASSERT_NE(0, h2);
	expect_bar1(_metadata, limit, 2);

	/* One more 64 KiB page, of either kind: no BAR1 left. */
	EXPECT_EQ(-ENOMEM, probe_pin(probe, va + limit, GPU_PAGE, 0, NULL, NULL, 0));
	EXPECT_EQ(-ENOMEM, probe_pin(probe, va + limit, GPU_PAGE, P2P_PROBE_PERSISTENT, NULL, NULL, 0));
	/* Memory already mapped in the same object costs nothing; in the other object it does. */
	h3 = probe_pin_ok(probe, va, GPU_PAGE, 0);
	EXPECT_NE(0, h3);
	EXPECT_EQ(-ENOMEM, probe_pin(probe, va, GPU_PAGE, P2P_PROBE_PERSISTENT, NULL, NULL, 0));
	EXPECT_EQ(3, gpu_counter("bar1_refusals"));
	expect_bar1(_metadata, limit, 2);

	/* Giving one page back makes room for exactly one page. */
	EXPECT_EQ(0, probe_put(probe, h2));
	h4 = probe_pin_ok(probe, va + limit, GPU_PAGE, 0);
	EXPECT_NE(0, h4);
	EXPECT_EQ(-ENOMEM, probe_pin(probe, va + limit + GPU_PAGE, GPU_PAGE, 0, NULL, NULL, 0));
	/* A pin over mapped memory and one unmapped page costs that page: refused whole. */
	EXPECT_EQ(-ENOMEM, probe_pin(probe, va + limit - 2 * GPU_PAGE, 3 * GPU_PAGE, 0, NULL, NULL, 0));
	expect_bar1(_metadata, limit, 2);

	EXPECT_EQ(0, gpu_free(self->env.gpu, handle));
	expect_bar1(_metadata, 0, 0);
	EXPECT_EQ(0, probe_put(probe, h1));
	EXPECT_EQ(0, probe_put(probe, h3));
	EXPECT_EQ(0, probe_put(probe, h4));
}

/*
 * The extents of one object, pin by pin: [0,4) maps 4 pages; the same again and [1,3) reuse
 * them; [2,6) maps only [4,6); persistent pins map their own. An extent goes when the last pin
 * touching it goes.
 */
TEST_F(bar1, sharing)
{
	int probe = self->env.probe;
	__u64 handle, a, b, c, d, p, q;
	uintptr_t va;

	va = (uintptr_t)gpu_alloc(self->env.gpu, 8 * GPU_PAGE, &handle);
	ASSERT_NE(0, va);
	a = probe_pin_ok(probe, va, 4 * GPU_PAGE, 0);
	expect_bar1(_metadata, 4 * GPU_PAGE, 1);
	b = probe_pin_ok(probe, va, 4 * GPU_PAGE, 0);
	expect_bar1(_metadata, 4 * GPU_PAGE, 1);
	c = probe_pin_ok(probe, va + 2 * GPU_PAGE, 4 * GPU_PAGE, 0);
	expect_bar1(_metadata, 6 * GPU_PAGE, 2);
	d = probe_pin_ok(probe, va + GPU_PAGE, 2 * GPU_PAGE, 0);
	expect_bar1(_metadata, 6 * GPU_PAGE, 2);
	p = probe_pin_ok(probe, va, 4 * GPU_PAGE, P2P_PROBE_PERSISTENT);
	q = probe_pin_ok(probe, va, 4 * GPU_PAGE, P2P_PROBE_PERSISTENT);
	expect_bar1(_metadata, 10 * GPU_PAGE, 3);
	ASSERT_TRUE(a && b && c && d && p && q);
	EXPECT_EQ(3, gpu_counter("total_bar1_extents"));

	EXPECT_EQ(0, probe_put(probe, a));
	EXPECT_EQ(0, probe_put(probe, b));
	expect_bar1(_metadata, 10 * GPU_PAGE, 3);	/* c and d still touch [0,4) */
	EXPECT_EQ(0, probe_put(probe, c));
	expect_bar1(_metadata, 8 * GPU_PAGE, 2);	/* [4,6) went */
	EXPECT_EQ(0, probe_put(probe, d));
	expect_bar1(_metadata, 4 * GPU_PAGE, 1);	/* the persistent ones' */
	EXPECT_EQ(0, probe_put(probe, p));
	expect_bar1(_metadata, 4 * GPU_PAGE, 1);
	EXPECT_EQ(0, probe_put(probe, q));
	expect_bar1(_metadata, 0, 0);
	EXPECT_EQ(0, gpu_counter("bar1_refusals"));
	EXPECT_EQ(0, gpu_free(self->env.gpu, handle));
}

/* The reserve changes at run time too; a reserve as large as the BAR leaves nothing. */
TEST_F(bar1, reserve_at_runtime)
{
	char v[32];
	__u64 handle, h;
	uintptr_t va;

	va = (uintptr_t)gpu_alloc(self->env.gpu, 4 * GPU_PAGE, &handle);
	ASSERT_NE(0, va);
	snprintf(v, sizeof(v), "%llu", (unsigned long long)(self->bar_len / MiB));
	ASSERT_EQ(0, set_param("bar1_reserve_mib", v));
	EXPECT_EQ(-ENOMEM, probe_pin(self->env.probe, va, GPU_PAGE, 0, NULL, NULL, 0));
	/* Leave 1 MiB. */
	snprintf(v, sizeof(v), "%llu", (unsigned long long)(self->bar_len / MiB - 1));
	ASSERT_EQ(0, set_param("bar1_reserve_mib", v));
	h = probe_pin_ok(self->env.probe, va, 4 * GPU_PAGE, 0);
	EXPECT_NE(0, h);
	EXPECT_EQ(0, probe_put(self->env.probe, h));
	EXPECT_EQ(0, gpu_free(self->env.gpu, handle));
	EXPECT_EQ(1, gpu_counter("bar1_refusals"));
}

/*
 * bar1_size_mib is the BAR1 size the accounting believes in: smaller than the BAR (a GPU whose
 * BAR1 is smaller than its memory) refuses earlier; larger lets the whole BAR be pinned in both
 * objects. The page tables keep the allocation's own BAR addresses either way.
 */
TEST_F(bar1, size_param)
{
	__u64 reserve = variant->reserve_mib * MiB;
	struct p2p_probe_pin p;
	__u64 handle, h, hp, phys[1];
	char v[32];
	uintptr_t va;

	va = (uintptr_t)gpu_alloc(self->env.gpu, self->bar_len, &handle);
	ASSERT_NE(0, va) TH_LOG("alloc the whole BAR: %s", strerror(errno));
	/* Default: BAR minus the reserve. */
	EXPECT_EQ(-ENOMEM, probe_pin(self->env.probe, va, self->bar_len, 0, NULL, NULL, 0));
	/* Smaller: only 1 MiB above the reserve. */
	snprintf(v, sizeof(v), "%llu", (unsigned long long)(variant->reserve_mib + 1));
	ASSERT_EQ(0, set_param("bar1_size_mib", v));
	EXPECT_EQ(-ENOMEM, probe_pin(self->env.probe, va, 2 * MiB, 0, NULL, NULL, 0));
	h = probe_pin_ok(self->env.probe, va, MiB, 0);
	EXPECT_NE(0, h);
	EXPECT_EQ(0, probe_put(self->env.probe, h));
	/* Larger: the whole BAR, once per object. */
	snprintf(v, sizeof(v), "%llu", (unsigned long long)((2 * self->bar_len + reserve) / MiB));
	ASSERT_EQ(0, set_param("bar1_size_mib", v));
	h = probe_pin_ok(self->env.probe, va, self->bar_len, 0);
	EXPECT_NE(0, h);
	ASSERT_EQ(0, probe_pin(self->env.probe, va + self->bar_len - GPU_PAGE, GPU_PAGE,
			       P2P_PROBE_PERSISTENT, &p, phys, 1));
	hp = p.handle;
	EXPECT_EQ(self->bar_len + GPU_PAGE, gpu_counter("bar1_pinned_bytes"));
	/* The last page's address is still the real BAR's last page. */
	EXPECT_EQ(self->bar_start + self->bar_len - GPU_PAGE, phys[0]);
	EXPECT_EQ(0, probe_put(self->env.probe, hp));
	EXPECT_EQ(0, probe_put(self->env.probe, h));
	EXPECT_EQ(0, set_param("bar1_size_mib", "0"));
	EXPECT_EQ(0, gpu_free(self->env.gpu, handle));
}

TEST_HARNESS_MAIN
