// SPDX-License-Identifier: GPL-2.0
/*
 * nvidia_p2p_get_pages / _persistent / put_pages argument checks of the NVIDIA P2P stand-in, as
 * nvidia.ko makes them: 64 KiB alignment of VA and length, length > 0, a free callback required
 * (535+), the range inside one live allocation of the caller, flags only 0, NULL tables put as no-ops.
 */
#include "kselftest_harness.h"
#include "standin_test.h"

FIXTURE(args) {
	struct standin_env env;
	char *va;
	__u64 handle;
};

FIXTURE_SETUP(args)
{
	STANDIN_SETUP(&self->env, "");
	self->va = gpu_alloc(self->env.gpu, 4 * GPU_PAGE, &self->handle);
	ASSERT_NE(NULL, self->va) TH_LOG("gpu_alloc: %s", strerror(errno));
	ASSERT_EQ(0, (uintptr_t)self->va % GPU_PAGE);
}

FIXTURE_TEARDOWN(args)
{
	STANDIN_TEARDOWN(&self->env);
}

/* A good pin works and is given back: the baseline the refusals below differ from. */
TEST_F(args, whole_allocation)
{
	__u64 h = probe_pin_ok(self->env.probe, (uintptr_t)self->va, 4 * GPU_PAGE, 0);

	ASSERT_NE(0, h);
	EXPECT_EQ(1, gpu_counter("live_pins"));
	EXPECT_EQ(4 * GPU_PAGE, gpu_counter("bar1_pinned_bytes"));
	EXPECT_EQ(0, probe_put(self->env.probe, h));
	EXPECT_EQ(0, gpu_counter("live_pins"));
	EXPECT_EQ(0, gpu_free(self->env.gpu, self->handle));
}

TEST_F(args, sub_range)
{
	__u64 h = probe_pin_ok(self->env.probe, (uintptr_t)self->va + GPU_PAGE, 2 * GPU_PAGE, 0);

	ASSERT_NE(0, h);
	EXPECT_EQ(0, probe_put(self->env.probe, h));
	EXPECT_EQ(0, gpu_free(self->env.gpu, self->handle));
}

TEST_F(args, unaligned_va)
{
	int fl;

	for (fl = 0; fl <= 1; fl++) {
		uint32_t flags = fl ? P2P_PROBE_PERSISTENT : 0;

		EXPECT_EQ(-EINVAL, probe_pin(self->env.probe, (uintptr_t)self->va + 4096, GPU_PAGE,
					     flags, NULL, NULL, 0));
		EXPECT_EQ(-EINVAL, probe_pin(self->env.probe, (uintptr_t)self->va + 1, GPU_PAGE,
					     flags, NULL, NULL, 0));
	}
	EXPECT_EQ(0, gpu_counter("total_pins"));
	EXPECT_EQ(0, gpu_free(self->env.gpu, self->handle));
}

TEST_F(args, unaligned_length)
{
	uintptr_t va = (uintptr_t)self->va;
	int fl;

	for (fl = 0; fl <= 1; fl++) {
		uint32_t flags = fl ? P2P_PROBE_PERSISTENT : 0;

		EXPECT_EQ(-EINVAL, probe_pin(self->env.probe, va, 4096, flags, NULL, NULL, 0));
		EXPECT_EQ(-EINVAL, probe_pin(self->env.probe, va, GPU_PAGE + 4096, flags, NULL, NULL, 0));
		EXPECT_EQ(-EINVAL, probe_pin(self->env.probe, va, 0, flags, NULL, NULL, 0));
	}
	EXPECT_EQ(0, gpu_counter("total_pins"));
	EXPECT_EQ(0, gpu_free(self->env.gpu, self->handle));
}

TEST_F(args, null_free_callback)
{
	EXPECT_EQ(-EINVAL, probe_pin(self->env.probe, (uintptr_t)self->va, GPU_PAGE,
				     P2P_PROBE_NULL_CALLBACK, NULL, NULL, 0));
	EXPECT_EQ(0, gpu_counter("total_pins"));
	EXPECT_EQ(0, gpu_free(self->env.gpu, self->handle));
}

/* Not inside one live allocation of this process: -EINVAL, counted as a failed lookup. */
TEST_F(args, outside_allocation)
{
	uintptr_t va = (uintptr_t)self->va;
	char *other;
	__u64 h2;

	/* Past the end, and straddling the end. */
	EXPECT_EQ(-EINVAL, probe_pin(self->env.probe, va + 4 * GPU_PAGE, GPU_PAGE, 0, NULL, NULL, 0));
	EXPECT_EQ(-EINVAL, probe_pin(self->env.probe, va + 3 * GPU_PAGE, 2 * GPU_PAGE, 0, NULL, NULL, 0));
	EXPECT_EQ(-EINVAL, probe_pin(self->env.probe, va, 5 * GPU_PAGE, P2P_PROBE_PERSISTENT,
				     NULL, NULL, 0));
	/* Ordinary memory is not GPU memory. */
	other = mmap(NULL, 2 * GPU_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, other);
	EXPECT_EQ(-EINVAL, probe_pin(self->env.probe, ((uintptr_t)other + GPU_PAGE - 1) & ~(uintptr_t)(GPU_PAGE - 1),
				     GPU_PAGE, 0, NULL, NULL, 0));
	munmap(other, 2 * GPU_PAGE);
	/* Two allocations are two ranges, even when adjacent in the BAR. */
	other = gpu_alloc(self->env.gpu, GPU_PAGE, &h2);
	ASSERT_NE(NULL, other);
	if ((uintptr_t)other == va + 4 * GPU_PAGE)
		EXPECT_EQ(-EINVAL, probe_pin(self->env.probe, va, 5 * GPU_PAGE, 0, NULL, NULL, 0));
	EXPECT_EQ(0, gpu_free(self->env.gpu, h2));
	EXPECT_LE(4, gpu_counter("lookup_failures"));
	EXPECT_EQ(0, gpu_counter("total_pins"));
	EXPECT_EQ(0, gpu_free(self->env.gpu, self->handle));
}

/* A freed or unmapped allocation is no longer found at its VA. */
TEST_F(args, after_free_and_munmap)
{
	uintptr_t va = (uintptr_t)self->va;
	struct nvp2p_info info;
	char *b;
	__u64 hb;

	EXPECT_EQ(0, gpu_free(self->env.gpu, self->handle));
	EXPECT_EQ(-EINVAL, probe_pin(self->env.probe, va, GPU_PAGE, 0, NULL, NULL, 0));

	b = gpu_alloc(self->env.gpu, GPU_PAGE, &hb);
	ASSERT_NE(NULL, b);
	ASSERT_EQ(0, munmap(b, GPU_PAGE));
	ASSERT_EQ(0, gpu_info(self->env.gpu, hb, &info));
	EXPECT_EQ(0, info.va);
	EXPECT_EQ(-EINVAL, probe_pin(self->env.probe, (uintptr_t)b, GPU_PAGE, 0, NULL, NULL, 0));
	EXPECT_EQ(0, gpu_free(self->env.gpu, hb));
}

/* p2p_token / va_space belong to the pre-UVA API: refused. */
TEST_F(args, token_and_va_space)
{
	struct p2p_probe_pin p = { .va = (uintptr_t)self->va, .length = GPU_PAGE, .p2p_token = 1 };

	ASSERT_EQ(0, ioctl(self->env.probe, P2P_PROBE_IOC_PIN, &p));
	EXPECT_EQ(-EINVAL, p.ret);
	memset(&p, 0, sizeof(p));
	p.va = (uintptr_t)self->va;
	p.length = GPU_PAGE;
	p.va_space = 1;
	ASSERT_EQ(0, ioctl(self->env.probe, P2P_PROBE_IOC_PIN, &p));
	EXPECT_EQ(-EINVAL, p.ret);
	EXPECT_EQ(0, gpu_free(self->env.gpu, self->handle));
}

TEST_F(args, persistent_flags)
{
	struct p2p_probe_pin p = { .va = (uintptr_t)self->va, .length = GPU_PAGE,
				   .flags = P2P_PROBE_PERSISTENT, .persistent_flags = 1 };
	__u64 h;

	ASSERT_EQ(0, ioctl(self->env.probe, P2P_PROBE_IOC_PIN, &p));
	EXPECT_EQ(-EINVAL, p.ret);
	h = probe_pin_ok(self->env.probe, (uintptr_t)self->va, GPU_PAGE, P2P_PROBE_PERSISTENT);
	ASSERT_NE(0, h);
	/* put_pages_persistent: unknown flags refused, the pin survives it. */
	EXPECT_EQ(-EINVAL, probe_put_ex(self->env.probe, h, 0, 0, 2));
	EXPECT_EQ(1, gpu_counter("live_pins"));
	EXPECT_EQ(0, probe_put(self->env.probe, h));
	EXPECT_EQ(0, gpu_free(self->env.gpu, self->handle));
}

/* Puts that do not match the pin: the wrong kind or the wrong address. */
TEST_F(args, mismatched_puts)
{
	uintptr_t va = (uintptr_t)self->va;
	__u64 h = probe_pin_ok(self->env.probe, va, GPU_PAGE, 0);
	__u64 hp = probe_pin_ok(self->env.probe, va + GPU_PAGE, GPU_PAGE, P2P_PROBE_PERSISTENT);

	ASSERT_NE(0, h);
	ASSERT_NE(0, hp);
	EXPECT_EQ(-EINVAL, probe_put_ex(self->env.probe, h, P2P_PROBE_PUT_OTHER, 0, 0));
	EXPECT_EQ(-EINVAL, probe_put_ex(self->env.probe, hp, P2P_PROBE_PUT_OTHER, 0, 0));
	EXPECT_EQ(-EINVAL, probe_put_ex(self->env.probe, h, P2P_PROBE_PUT_VA, va + GPU_PAGE, 0));
	EXPECT_EQ(-EINVAL, probe_put_ex(self->env.probe, hp, P2P_PROBE_PUT_VA, va, 0));
	EXPECT_EQ(4, gpu_counter("bad_put_pages"));
	EXPECT_EQ(2, gpu_counter("live_pins"));
	EXPECT_EQ(0, probe_put(self->env.probe, h));
	EXPECT_EQ(0, probe_put(self->env.probe, hp));
	EXPECT_EQ(0, gpu_free(self->env.gpu, self->handle));
}

TEST_HARNESS_MAIN
