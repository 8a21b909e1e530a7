// SPDX-License-Identifier: GPL-2.0
/*
 * BAR1 accounting of the NVIDIA P2P stand-in: pinned bytes may not exceed the BAR minus a reserve
 * (nvidia.ko keeps 36 MiB); beyond it get_pages and get_pages_persistent fail with -ENOMEM. The
 * reserve is the module parameter bar1_reserve_mib, set at load or at run time.
 */
#include "kselftest_harness.h"
#include "standin_test.h"

#define MiB (1024ull * 1024)

FIXTURE(bar1) {
	struct standin_env env;
	__u64 bar_len;
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
	__u64 start;

	STANDIN_SETUP(&self->env, variant->params);
	ASSERT_EQ(0, gpu_loc(&gpu));
	ASSERT_EQ(0, pci_bar(&gpu, 2, &start, &self->bar_len));
	ASSERT_LT(variant->reserve_mib * MiB + 2 * GPU_PAGE, self->bar_len)
		TH_LOG("the BAR (%llu MiB) is too small for this test", (unsigned long long)(self->bar_len / MiB));
}

FIXTURE_TEARDOWN(bar1)
{
	STANDIN_TEARDOWN(&self->env);
}

TEST_F(bar1, exhaustion)
{
	__u64 limit = self->bar_len - variant->reserve_mib * MiB;
	__u64 handle, h1, h2, h3;
	uintptr_t va;

	EXPECT_EQ(variant->reserve_mib, read_ll(STANDIN_PARAMS "bar1_reserve_mib"));
	va = (uintptr_t)gpu_alloc(self->env.gpu, limit + 2 * GPU_PAGE, &handle);
	ASSERT_NE(0, va) TH_LOG("alloc %llu bytes: %s", (unsigned long long)limit, strerror(errno));

	/* Up to the limit, in two pins of the two kinds. */
	h1 = probe_pin_ok(self->env.probe, va, limit - GPU_PAGE, 0);
	ASSERT_NE(0, h1);
	h2 = probe_pin_ok(self->env.probe, va + limit - GPU_PAGE, GPU_PAGE, P2P_PROBE_PERSISTENT);
	ASSERT_NE(0, h2);
	EXPECT_EQ(limit, gpu_counter("bar1_pinned_bytes"));

	/* One more 64 KiB page: no BAR1 left. */
	EXPECT_EQ(-ENOMEM, probe_pin(self->env.probe, va + limit, GPU_PAGE, 0, NULL, NULL, 0));
	EXPECT_EQ(-ENOMEM, probe_pin(self->env.probe, va + limit, GPU_PAGE, P2P_PROBE_PERSISTENT,
				     NULL, NULL, 0));
	/* Pinning the same memory twice costs BAR1 twice. */
	EXPECT_EQ(-ENOMEM, probe_pin(self->env.probe, va, GPU_PAGE, 0, NULL, NULL, 0));
	EXPECT_EQ(3, gpu_counter("bar1_refusals"));
	EXPECT_EQ(limit, gpu_counter("bar1_pinned_bytes"));

	/* Giving one page back makes room for exactly one page. */
	EXPECT_EQ(0, probe_put(self->env.probe, h2));
	h3 = probe_pin_ok(self->env.probe, va + limit, GPU_PAGE, 0);
	EXPECT_NE(0, h3);
	EXPECT_EQ(-ENOMEM, probe_pin(self->env.probe, va + limit + GPU_PAGE, GPU_PAGE, 0, NULL, NULL, 0));

	EXPECT_EQ(0, gpu_free(self->env.gpu, handle));
	EXPECT_EQ(0, gpu_counter("bar1_pinned_bytes"));
	EXPECT_EQ(0, probe_put(self->env.probe, h1));
	EXPECT_EQ(0, probe_put(self->env.probe, h3));
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

TEST_HARNESS_MAIN
