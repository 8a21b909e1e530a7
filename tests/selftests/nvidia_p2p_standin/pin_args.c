// SPDX-License-Identifier: GPL-2.0
/*
 * nvidia_p2p_get_pages / _persistent / put_pages argument checks of the NVIDIA P2P stand-in, per
 * driver generation, as nvidia.ko makes them: 550 checks only the VA (and only on the
 * non-persistent path) and rounds the length up, 570+ wants VA and length 64 KiB aligned on both
 * paths; a free callback is required; the range must lie inside one live allocation of the
 * caller; the persistent flags differ per generation. And what a failed get_pages leaves in its
 * out-pointer: untouched for errors found before the pin is allocated, a pointer to freed memory
 * after (the probe only compares it). Puts find pins by the table, not the VA.
 */
#include "kselftest_harness.h"
#include "standin_test.h"

/* What every generation does alike (the default, 550). */
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

/* What differs per generation. */
FIXTURE(gen) {
	struct standin_env env;
	char *va;
	__u64 handle;
};

FIXTURE_VARIANT(gen) {
	const char *params;
	unsigned int generation;
};

FIXTURE_VARIANT_ADD(gen, gen550) {
	.params = "",
	.generation = 550,
};

FIXTURE_VARIANT_ADD(gen, gen570) {
	.params = "generation=570",
	.generation = 570,
};

FIXTURE_VARIANT_ADD(gen, gen580) {
	.params = "generation=580",
	.generation = 580,
};

FIXTURE_SETUP(gen)
{
	STANDIN_SETUP(&self->env, variant->params);
	EXPECT_EQ(variant->generation, read_number(STANDIN_PARAMS "generation"));
	self->va = gpu_alloc(self->env.gpu, 4 * GPU_PAGE, &self->handle);
	ASSERT_NE(NULL, self->va) TH_LOG("gpu_alloc: %s", strerror(errno));
}

FIXTURE_TEARDOWN(gen)
{
	STANDIN_TEARDOWN(&self->env);
}

/* Pin, expect @ret and what the out-pointer was left as; on success, put it back. */
static void pin_expect(struct __test_metadata *_metadata, int probe, __u64 va, __u64 len,
		       uint32_t flags, uint32_t pflags, int ret, uint32_t pt_out, uint32_t entries)
{
	struct p2p_probe_pin p = { .va = va, .length = len, .flags = flags,
				   .persistent_flags = pflags };

	ASSERT_EQ(0, ioctl(probe, P2P_PROBE_IOC_PIN, &p));
	EXPECT_EQ(ret, p.ret) TH_LOG("va +%#llx len %#llx flags %#x/%#x", va % (16 * GPU_PAGE),
				     len, flags, pflags);
	EXPECT_EQ(pt_out, p.pt_out) TH_LOG("va +%#llx len %#llx flags %#x/%#x: out-pointer",
					   va % (16 * GPU_PAGE), len, flags, pflags);
	if (p.ret)
		return;
	EXPECT_EQ(entries, p.entries) TH_LOG("len %#llx", len);
	EXPECT_EQ(0, probe_put(probe, p.handle));
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

/*
 * An unaligned VA: 550 refuses it in RM (after the pin was allocated: the out-pointer dangles),
 * but only on the non-persistent path; its persistent path pins it. 570+ refuses both up front.
 */
TEST_F(gen, unaligned_va)
{
	uintptr_t va = (uintptr_t)self->va;
	int probe = self->env.probe;

	if (variant->generation == 550) {
		pin_expect(_metadata, probe, va + 4096, GPU_PAGE, 0, 0, -EINVAL, P2P_PROBE_PT_SET, 0);
		pin_expect(_metadata, probe, va + 1, GPU_PAGE, 0, 0, -EINVAL, P2P_PROBE_PT_SET, 0);
		pin_expect(_metadata, probe, va + 4096, GPU_PAGE, P2P_PROBE_PERSISTENT, 0, 0,
			   P2P_PROBE_PT_SET, 1);
		EXPECT_EQ(1, gpu_counter("total_pins"));
	} else {
		for (int fl = 0; fl <= 1; fl++) {
			uint32_t flags = fl ? P2P_PROBE_PERSISTENT : 0;

			pin_expect(_metadata, probe, va + 4096, GPU_PAGE, flags, 0, -EINVAL,
				   P2P_PROBE_PT_UNTOUCHED, 0);
			pin_expect(_metadata, probe, va + 1, GPU_PAGE, flags, 0, -EINVAL,
				   P2P_PROBE_PT_UNTOUCHED, 0);
		}
		EXPECT_EQ(0, gpu_counter("total_pins"));
	}
	EXPECT_EQ(0, gpu_free(self->env.gpu, self->handle));
}

/*
 * An unaligned length: 550 pins one 64 KiB entry per 64 KiB begun (BAR1 rounded up too), except
 * that a last 64 KiB holding a single byte gets no entry (RM's fill loop stops below the last
 * byte); 570+ refuses it up front. Length 0 is nobody's memory: refused by RM, pointer dangling.
 */
TEST_F(gen, unaligned_length)
{
	uintptr_t va = (uintptr_t)self->va;
	int probe = self->env.probe;

	for (int fl = 0; fl <= 1; fl++) {
		uint32_t flags = fl ? P2P_PROBE_PERSISTENT : 0;

		if (variant->generation == 550) {
			pin_expect(_metadata, probe, va, 4096, flags, 0, 0, P2P_PROBE_PT_SET, 1);
			pin_expect(_metadata, probe, va, GPU_PAGE + 4096, flags, 0, 0,
				   P2P_PROBE_PT_SET, 2);
			pin_expect(_metadata, probe, va, 2 * GPU_PAGE + 1, flags, 0, 0,
				   P2P_PROBE_PT_SET, 2);
		} else {
			pin_expect(_metadata, probe, va, 4096, flags, 0, -EINVAL,
				   P2P_PROBE_PT_UNTOUCHED, 0);
			pin_expect(_metadata, probe, va, GPU_PAGE + 4096, flags, 0, -EINVAL,
				   P2P_PROBE_PT_UNTOUCHED, 0);
		}
		pin_expect(_metadata, probe, va, 0, flags, 0, -EINVAL, P2P_PROBE_PT_SET, 0);
	}
	if (variant->generation == 550) {
		/* BAR1 is charged for whole 64 KiB pages. */
		struct p2p_probe_pin p;

		ASSERT_EQ(0, probe_pin(probe, va, GPU_PAGE + 4096, 0, &p, NULL, 0));
		EXPECT_EQ(2 * GPU_PAGE, gpu_counter("bar1_pinned_bytes"));
		EXPECT_EQ(0, probe_put(probe, p.handle));
	}
	EXPECT_EQ(0, gpu_counter("live_pins"));
	EXPECT_EQ(0, gpu_counter("live_page_tables"));
	EXPECT_EQ(0, gpu_free(self->env.gpu, self->handle));
}

/* 535+: a NULL free callback is refused before anything is allocated. */
TEST_F(args, null_free_callback)
{
	pin_expect(_metadata, self->env.probe, (uintptr_t)self->va, GPU_PAGE,
		   P2P_PROBE_NULL_CALLBACK, 0, -EINVAL, P2P_PROBE_PT_UNTOUCHED, 0);
	EXPECT_EQ(0, gpu_counter("total_pins"));
	EXPECT_EQ(0, gpu_free(self->env.gpu, self->handle));
}

/* Not inside one live allocation of this process: -EINVAL from RM, the out-pointer dangling. */
TEST_F(args, outside_allocation)
{
	uintptr_t va = (uintptr_t)self->va;
	int probe = self->env.probe;
	char *other;
	__u64 h2;

	/* Past the end, and straddling the end. */
	pin_expect(_metadata, probe, va + 4 * GPU_PAGE, GPU_PAGE, 0, 0, -EINVAL, P2P_PROBE_PT_SET, 0);
	pin_expect(_metadata, probe, va + 3 * GPU_PAGE, 2 * GPU_PAGE, 0, 0, -EINVAL,
		   P2P_PROBE_PT_SET, 0);
	pin_expect(_metadata, probe, va, 5 * GPU_PAGE, P2P_PROBE_PERSISTENT, 0, -EINVAL,
		   P2P_PROBE_PT_SET, 0);
	/* Ordinary memory is not GPU memory. */
	other = mmap(NULL, 2 * GPU_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, other);
	EXPECT_EQ(-EINVAL, probe_pin(probe, ((uintptr_t)other + GPU_PAGE - 1) & ~(uintptr_t)(GPU_PAGE - 1),
				     GPU_PAGE, 0, NULL, NULL, 0));
	munmap(other, 2 * GPU_PAGE);
	/* Two allocations are two ranges, even when adjacent in the BAR. */
	other = gpu_alloc(self->env.gpu, GPU_PAGE, &h2);
	ASSERT_NE(NULL, other);
	if ((uintptr_t)other == va + 4 * GPU_PAGE)
		EXPECT_EQ(-EINVAL, probe_pin(probe, va, 5 * GPU_PAGE, 0, NULL, NULL, 0));
	EXPECT_EQ(0, gpu_free(self->env.gpu, h2));
	EXPECT_LE(4, gpu_counter("lookup_failures"));
	EXPECT_EQ(0, gpu_counter("total_pins"));
	EXPECT_EQ(0, gpu_counter("live_page_tables"));
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

/* p2p_token / va_space name objects of the pre-UVA API that do not exist here: RM finds nothing. */
TEST_F(args, token_and_va_space)
{
	struct p2p_probe_pin p = { .va = (uintptr_t)self->va, .length = GPU_PAGE, .p2p_token = 1 };

	ASSERT_EQ(0, ioctl(self->env.probe, P2P_PROBE_IOC_PIN, &p));
	EXPECT_EQ(-EINVAL, p.ret);
	EXPECT_EQ(P2P_PROBE_PT_SET, p.pt_out);
	memset(&p, 0, sizeof(p));
	p.va = (uintptr_t)self->va;
	p.length = GPU_PAGE;
	p.va_space = 1;
	ASSERT_EQ(0, ioctl(self->env.probe, P2P_PROBE_IOC_PIN, &p));
	EXPECT_EQ(-EINVAL, p.ret);
	EXPECT_EQ(P2P_PROBE_PT_SET, p.pt_out);
	EXPECT_EQ(0, gpu_counter("live_page_tables"));
	EXPECT_EQ(0, gpu_free(self->env.gpu, self->handle));
}

/*
 * get_pages_persistent's flags: 550 wants 0. 570+ passes them on as a u8 and reads only bit 0,
 * FORCE_BAR1_MAPPING, which needs a coherent GPU (none here): -ENOTSUPP from RM, pointer dangling;
 * the other bits are ignored. put_pages_persistent wants flags 0 in every generation.
 */
TEST_F(gen, persistent_flags)
{
	uintptr_t va = (uintptr_t)self->va;
	int probe = self->env.probe;
	__u64 h;

	if (variant->generation == 550) {
		pin_expect(_metadata, probe, va, GPU_PAGE, P2P_PROBE_PERSISTENT, 1, -EINVAL,
			   P2P_PROBE_PT_UNTOUCHED, 0);
		pin_expect(_metadata, probe, va, GPU_PAGE, P2P_PROBE_PERSISTENT, 2, -EINVAL,
			   P2P_PROBE_PT_UNTOUCHED, 0);
	} else {
		pin_expect(_metadata, probe, va, GPU_PAGE, P2P_PROBE_PERSISTENT, 1,
			   -KERN_ENOTSUPP, P2P_PROBE_PT_SET, 0);
		pin_expect(_metadata, probe, va, GPU_PAGE, P2P_PROBE_PERSISTENT, 0x101,
			   -KERN_ENOTSUPP, P2P_PROBE_PT_SET, 0);
		pin_expect(_metadata, probe, va, GPU_PAGE, P2P_PROBE_PERSISTENT, 2, 0,
			   P2P_PROBE_PT_SET, 1);
		pin_expect(_metadata, probe, va, GPU_PAGE, P2P_PROBE_PERSISTENT, 0x100, 0,
			   P2P_PROBE_PT_SET, 1);
	}
	h = probe_pin_ok(probe, va, GPU_PAGE, P2P_PROBE_PERSISTENT);
	ASSERT_NE(0, h);
	/* put_pages_persistent: flags refused, the pin survives it. */
	EXPECT_EQ(-EINVAL, probe_put_ex(probe, h, 0, 0, 2));
	EXPECT_EQ(1, gpu_counter("live_pins"));
	EXPECT_EQ(0, probe_put(probe, h));
	EXPECT_EQ(0, gpu_free(self->env.gpu, self->handle));
}

/*
 * Puts find the pin by its table, never by the VA (which RM ignores); a non-persistent put of a
 * persistent table searches the calling process's pins, finds nothing there and unpins nothing
 * (counted as a put of a pin that lives elsewhere).
 */
TEST_F(args, puts_by_table)
{
	uintptr_t va = (uintptr_t)self->va;
	int probe = self->env.probe;
	__u64 h = probe_pin_ok(probe, va, GPU_PAGE, 0);
	__u64 hp = probe_pin_ok(probe, va + GPU_PAGE, GPU_PAGE, P2P_PROBE_PERSISTENT);
	int kept;

	ASSERT_NE(0, h);
	ASSERT_NE(0, hp);
	EXPECT_EQ(0, probe_put_kept(probe, hp, P2P_PROBE_PUT_OTHER | P2P_PROBE_PUT_KEEP, &kept));
	EXPECT_EQ(1, gpu_counter("foreign_put_pages"));
	EXPECT_EQ(2, gpu_counter("live_pins"));
	/* Another VA than pinned: both puts unpin all the same. */
	EXPECT_EQ(0, probe_put_ex(probe, h, P2P_PROBE_PUT_VA, va + 3 * GPU_PAGE, 0));
	EXPECT_EQ(1, gpu_counter("live_pins"));
	EXPECT_EQ(0, probe_put_ex(probe, hp, P2P_PROBE_PUT_VA, va + 3 * GPU_PAGE, 0));
	EXPECT_EQ(0, gpu_counter("live_pins"));
	EXPECT_EQ(0, gpu_counter("live_page_tables"));
	EXPECT_EQ(0, gpu_counter("stale_put_pages"));
	EXPECT_EQ(0, gpu_counter("bad_put_pages"));
	EXPECT_EQ(0, gpu_free(self->env.gpu, self->handle));
}

TEST_HARNESS_MAIN
