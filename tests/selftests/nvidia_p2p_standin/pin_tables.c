// SPDX-License-Identifier: GPL-2.0
/*
 * What the NVIDIA P2P stand-in hands out: GPU memory that is the ivshmem BAR2 (mapped VM_IO |
 * VM_PFNMAP, so ordinary pinning fails on it, as on CUDA memory), and page tables in both layouts
 * (1.2 of drivers up to 575, 2.0 of 580+: the generation's, or page_table_version's when set)
 * whose 64 KiB pages carry the BAR's physical addresses.
 */
#include "kselftest_harness.h"
#include "standin_test.h"

#define NPAGES 8

FIXTURE(tables) {
	struct standin_env env;
	struct pci_loc gpu;
	__u64 bar_start, bar_len;
};

FIXTURE_VARIANT(tables) {
	const char *params;		/* module parameters at load */
	uint32_t version;		/* the page table version expected */
};

FIXTURE_VARIANT_ADD(tables, v1_2) {
	.params = "",
	.version = 0x00010002,
};

FIXTURE_VARIANT_ADD(tables, v2_0) {
	.params = "page_table_version=0x00020000",
	.version = 0x00020000,
};

FIXTURE_SETUP(tables)
{
	STANDIN_SETUP(&self->env, variant->params);
	ASSERT_EQ(0, gpu_loc(&self->gpu));
	ASSERT_EQ(0, pci_bar(&self->gpu, 2, &self->bar_start, &self->bar_len));
}

FIXTURE_TEARDOWN(tables)
{
	STANDIN_TEARDOWN(&self->env);
}

TEST_F(tables, contents)
{
	__u64 phys[NPAGES], handle, h;
	struct p2p_probe_pin p;
	struct nvp2p_info info;
	char param[32], uuid_hex[40];
	char *va;
	int i;

	ASSERT_EQ(0, read_text(STANDIN_PARAMS "page_table_version", param, sizeof(param)));
	EXPECT_EQ(variant->version, strtoul(param, NULL, 0));

	va = gpu_alloc(self->env.gpu, NPAGES * GPU_PAGE, &handle);
	ASSERT_NE(NULL, va);
	ASSERT_EQ(0, gpu_info(self->env.gpu, handle, &info));
	EXPECT_EQ((uintptr_t)va, info.va);
	EXPECT_EQ(NPAGES * GPU_PAGE, info.size);
	/* INFO's physical address is the BAR the kernel's PCI core assigned, plus the offset. */
	EXPECT_EQ(self->bar_start + info.bar_offset, info.phys_addr);
	EXPECT_LE(info.bar_offset + info.size, self->bar_len);

	memset(phys, 0, sizeof(phys));
	ASSERT_EQ(0, probe_pin(self->env.probe, (uintptr_t)va + GPU_PAGE, (NPAGES - 1) * GPU_PAGE, 0,
			       &p, phys, NPAGES));
	h = p.handle;
	EXPECT_EQ(variant->version, p.version);
	EXPECT_EQ(1, p.page_size);		/* NVIDIA_P2P_PAGE_SIZE_64KB */
	EXPECT_EQ(NPAGES - 1, p.entries);
	EXPECT_EQ(0, p.pt_flags);
	for (i = 0; i < NPAGES - 1; i++)
		EXPECT_EQ(info.phys_addr + (__u64)(i + 1) * GPU_PAGE, phys[i]) TH_LOG("page %d", i);
	for (i = 0; i < 16; i++)
		sprintf(uuid_hex + 2 * i, "%02x", p.gpu_uuid[i]);
	TH_LOG("gpu_uuid %s", uuid_hex);
	EXPECT_EQ(0, memcmp(p.gpu_uuid, "STANDIN", 7));
	ASSERT_EQ(0, gpu_info(self->env.gpu, handle, &info));
	EXPECT_EQ(1, info.live_pins);
	EXPECT_EQ(0, probe_put(self->env.probe, h));
	EXPECT_EQ(0, gpu_free(self->env.gpu, handle));
}

/* The layout can be switched at run time; each table keeps the layout it was made with. */
TEST_F(tables, switch_version_at_runtime)
{
	uint32_t other = variant->version == 0x00010002 ? 0x00020000 : 0x00010002;
	struct p2p_probe_pin a, b;
	__u64 handle;
	char v[16];
	char *va;

	va = gpu_alloc(self->env.gpu, 2 * GPU_PAGE, &handle);
	ASSERT_NE(NULL, va);
	ASSERT_EQ(0, probe_pin(self->env.probe, (uintptr_t)va, GPU_PAGE, 0, &a, NULL, 0));
	snprintf(v, sizeof(v), "0x%08x", other);
	ASSERT_EQ(0, set_param("page_table_version", v));
	EXPECT_NE(0, set_param("page_table_version", "0x00010001"));	/* not a layout we know */
	ASSERT_EQ(0, probe_pin(self->env.probe, (uintptr_t)va + GPU_PAGE, GPU_PAGE, 0, &b, NULL, 0));
	EXPECT_EQ(variant->version, a.version);
	EXPECT_EQ(other, b.version);
	/* 0 goes back to the generation's layout. */
	ASSERT_EQ(0, set_param("page_table_version", "0"));
	ASSERT_EQ(0, read_text(STANDIN_PARAMS "page_table_version", v, sizeof(v)));
	EXPECT_EQ(read_number(STANDIN_PARAMS "generation") >= 580 ? 0x00020000 : 0x00010002,
		  strtoul(v, NULL, 0));
	/* Teardown frees both with their own sizes (KASAN would see a mismatch). */
	EXPECT_EQ(0, gpu_free(self->env.gpu, handle));
	EXPECT_EQ(2, gpu_counter("free_callbacks"));
	EXPECT_EQ(0, probe_put(self->env.probe, a.handle));
	EXPECT_EQ(0, probe_put(self->env.probe, b.handle));
}

/*
 * The layout follows the generation (2.0 from 580) unless page_table_version says otherwise, at
 * load or at run time.
 */
TEST_F_TIMEOUT(tables, generation_layouts, 300)
{
	static const struct { const char *params; uint32_t version; } loads[] = {
		{ "generation=570", 0x00010002 },
		{ "generation=580", 0x00020000 },
		{ "generation=580 page_table_version=0x00010002", 0x00010002 },
		{ "generation=570 page_table_version=0x00020000", 0x00020000 },
	};
	struct p2p_probe_pin p;
	__u64 handle;
	size_t i;
	char *va;

	for (i = 0; i < sizeof(loads) / sizeof(loads[0]); i++) {
		close(self->env.probe);
		close(self->env.gpu);
		ASSERT_EQ(0, mod_unload("p2p_probe"));
		ASSERT_EQ(0, mod_load(STANDIN, loads[i].params));
		ASSERT_EQ(0, mod_load("p2p_probe", ""));
		self->env.gpu = gpu_open();
		self->env.probe = open(P2P_PROBE_DEVICE, O_RDWR | O_CLOEXEC);
		ASSERT_LE(0, self->env.gpu);
		ASSERT_LE(0, self->env.probe);
		va = gpu_alloc(self->env.gpu, GPU_PAGE, &handle);
		ASSERT_NE(NULL, va);
		ASSERT_EQ(0, probe_pin(self->env.probe, (uintptr_t)va, GPU_PAGE, 0, &p, NULL, 0));
		EXPECT_EQ(loads[i].version, p.version) TH_LOG("%s", loads[i].params);
		EXPECT_EQ(0, p.pt_flags);
		EXPECT_EQ(0, probe_put(self->env.probe, p.handle));
		EXPECT_EQ(0, gpu_free(self->env.gpu, handle));
	}
}

/* Reads and writes through the CUDA VA reach the BAR and come back. */
TEST_F(tables, data_through_mapping)
{
	__u64 h1, h2;
	uint8_t *a, *b;
	size_t i, n = 2 * GPU_PAGE;

	a = gpu_alloc(self->env.gpu, n, &h1);
	b = gpu_alloc(self->env.gpu, n, &h2);
	ASSERT_NE(NULL, a);
	ASSERT_NE(NULL, b);
	for (i = 0; i < n; i++) {
		a[i] = (uint8_t)(i * 7 + 3);
		b[i] = (uint8_t)(i * 13 + 1);
	}
	for (i = 0; i < n; i++) {
		if (a[i] != (uint8_t)(i * 7 + 3) || b[i] != (uint8_t)(i * 13 + 1))
			break;
	}
	EXPECT_EQ(n, i) TH_LOG("mismatch at byte %zu", i);
	EXPECT_EQ(0, gpu_free(self->env.gpu, h1));
	EXPECT_EQ(0, gpu_free(self->env.gpu, h2));
}

/* pin_user_pages() refuses GPU memory (VM_IO | VM_PFNMAP) but takes ordinary memory. */
TEST_F(tables, ordinary_pinning_fails)
{
	struct p2p_probe_pin_user pu;
	__u64 handle;
	char *va, *ram;

	va = gpu_alloc(self->env.gpu, GPU_PAGE, &handle);
	ASSERT_NE(NULL, va);
	va[0] = 1;
	pu = (struct p2p_probe_pin_user){ .va = (uintptr_t)va, .length = GPU_PAGE };
	ASSERT_EQ(0, ioctl(self->env.probe, P2P_PROBE_IOC_PIN_USER, &pu));
	EXPECT_EQ(-EFAULT, pu.ret);

	ram = mmap(NULL, GPU_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, ram);
	memset(ram, 1, GPU_PAGE);
	pu = (struct p2p_probe_pin_user){ .va = (uintptr_t)ram, .length = GPU_PAGE };
	ASSERT_EQ(0, ioctl(self->env.probe, P2P_PROBE_IOC_PIN_USER, &pu));
	EXPECT_EQ(GPU_PAGE / getpagesize(), pu.ret);
	munmap(ram, GPU_PAGE);
	EXPECT_EQ(0, gpu_free(self->env.gpu, handle));
}

/* The mapping is the allocation's CUDA VA: one, whole, 64 KiB aligned, not split. */
TEST_F(tables, mapping_rules)
{
	struct nvp2p_alloc req = { .size = 2 * GPU_PAGE };
	uintptr_t aligned;
	char *res, *m;

	ASSERT_EQ(0, ioctl(self->env.gpu, NVP2P_IOC_ALLOC, &req));
	res = mmap(NULL, 4 * GPU_PAGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, res);
	aligned = ((uintptr_t)res + GPU_PAGE - 1) & ~(uintptr_t)(GPU_PAGE - 1);
	/* Not 64 KiB aligned. */
	m = mmap((void *)(aligned + 4096), req.size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
		 self->env.gpu, req.mmap_offset);
	EXPECT_EQ(MAP_FAILED, m);
	/* Part of it only. */
	m = mmap((void *)aligned, GPU_PAGE, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
		 self->env.gpu, req.mmap_offset);
	EXPECT_EQ(MAP_FAILED, m);
	/* Private. */
	m = mmap((void *)aligned, req.size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED,
		 self->env.gpu, req.mmap_offset);
	EXPECT_EQ(MAP_FAILED, m);
	m = mmap((void *)aligned, req.size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
		 self->env.gpu, req.mmap_offset);
	ASSERT_EQ((void *)aligned, m);
	/* A second mapping of the same allocation. */
	EXPECT_EQ(MAP_FAILED, mmap(NULL, req.size, PROT_READ | PROT_WRITE, MAP_SHARED,
				   self->env.gpu, req.mmap_offset));
	EXPECT_EQ(EBUSY, errno);
	/* Splitting it (a partial munmap) is refused. */
	EXPECT_NE(0, munmap(m + GPU_PAGE, GPU_PAGE));
	EXPECT_EQ(0, munmap(res, 4 * GPU_PAGE));	/* the whole reservation, mapping included */
	EXPECT_EQ(0, ioctl(self->env.gpu, NVP2P_IOC_FREE, &req.handle));
	/* Freed: its offset maps nothing any more, and FREE again is refused. */
	EXPECT_EQ(MAP_FAILED, mmap(NULL, req.size, PROT_READ | PROT_WRITE, MAP_SHARED,
				   self->env.gpu, req.mmap_offset));
	EXPECT_NE(0, ioctl(self->env.gpu, NVP2P_IOC_FREE, &req.handle));
}

/* Allocations come in 64 KiB granules and do not overlap. */
TEST_F(tables, allocator)
{
	struct nvp2p_alloc a = { .size = 1 }, b = { .size = GPU_PAGE + 1 }, z = { .size = 0 };

	ASSERT_EQ(0, ioctl(self->env.gpu, NVP2P_IOC_ALLOC, &a));
	ASSERT_EQ(0, ioctl(self->env.gpu, NVP2P_IOC_ALLOC, &b));
	EXPECT_EQ(GPU_PAGE, a.size);
	EXPECT_EQ(2 * GPU_PAGE, b.size);
	EXPECT_EQ(0, a.bar_offset % GPU_PAGE);
	EXPECT_EQ(0, b.bar_offset % GPU_PAGE);
	EXPECT_TRUE(a.bar_offset + a.size <= b.bar_offset || b.bar_offset + b.size <= a.bar_offset);
	EXPECT_NE(a.handle, b.handle);
	EXPECT_NE(0, ioctl(self->env.gpu, NVP2P_IOC_ALLOC, &z));
	EXPECT_EQ(EINVAL, errno);
	z.size = self->bar_len + GPU_PAGE;
	EXPECT_NE(0, ioctl(self->env.gpu, NVP2P_IOC_ALLOC, &z));
	EXPECT_EQ(ENOMEM, errno);
	EXPECT_EQ(2, gpu_counter("live_allocations"));
	EXPECT_EQ(3 * GPU_PAGE, gpu_counter("allocated_bytes"));
	EXPECT_EQ(0, ioctl(self->env.gpu, NVP2P_IOC_FREE, &a.handle));
	EXPECT_EQ(0, ioctl(self->env.gpu, NVP2P_IOC_FREE, &b.handle));
	EXPECT_EQ(0, gpu_counter("live_allocations"));
}

TEST_HARNESS_MAIN
