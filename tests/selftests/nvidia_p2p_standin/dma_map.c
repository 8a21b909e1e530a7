// SPDX-License-Identifier: GPL-2.0
/*
 * nvidia_p2p_dma_map_pages / dma_unmap_pages of the NVIDIA P2P stand-in: every 64 KiB page is
 * mapped for the peer through the DMA API (so the emulated IOMMU translates when it is on: DMA
 * addresses differ from the BAR's physical ones; without it they are equal), the NIC (QEMU edu)
 * really moves bytes through those addresses, and unmapping a mapping twice is 0 the second time.
 * The topology check is 580's (550 and 570 have none): refused with -ENOTSUPP only on a chipset
 * flagged unable to do P2P when GPU and peer share no upstream bridge, unless the override allows
 * or it is a pass-through VM; override 2 refuses everything. (Unmapping with another peer WARNs,
 * as in nvidia.ko: that is in stale_use.c, outside make check.)
 *
 * Expectations come from sysfs, not from the VM variant's name: the topology from the device
 * tree, the IOMMU from the NIC's iommu_group.
 */
#include "kselftest_harness.h"
#include "standin_test.h"

#define NPAGES 4
#define EDU_BUF 0x40000ull	/* edu's DMA buffer in its own address space */
#define EDU_XFER 2048		/* a 4096-byte transfer trips an off-by-one in older QEMUs */

FIXTURE(dma) {
	struct standin_env env;
	struct pci_loc gpu, nic;
	bool share_bridge;
	bool nic_iommu, gpu_iommu;
	uint8_t *va;
	__u64 handle, pin;
	__u64 phys[NPAGES];
};

/* Module parameters, and the topology rule they make (nv_grdma_pci_topology_supported). */
FIXTURE_VARIANT(dma) {
	const char *params;
	unsigned int generation;
	bool chipset;		/* p2p_unsupported_chipset */
	bool passthrough;	/* passthrough_vm */
	unsigned int override;	/* grdma_pci_topo_check_override */
};

FIXTURE_VARIANT_ADD(dma, gen550) { .params = "", .generation = 550 };
FIXTURE_VARIANT_ADD(dma, gen580) { .params = "generation=580", .generation = 580 };
FIXTURE_VARIANT_ADD(dma, gen580_chipset) {
	.params = "generation=580 p2p_unsupported_chipset=1", .generation = 580, .chipset = true,
};
FIXTURE_VARIANT_ADD(dma, gen580_chipset_passthrough) {
	.params = "generation=580 p2p_unsupported_chipset=1 passthrough_vm=1", .generation = 580,
	.chipset = true, .passthrough = true,
};
FIXTURE_VARIANT_ADD(dma, gen580_chipset_allow) {
	.params = "generation=580 p2p_unsupported_chipset=1 grdma_pci_topo_check_override=1",
	.generation = 580, .chipset = true, .override = 1,
};
FIXTURE_VARIANT_ADD(dma, gen580_deny) {
	.params = "generation=580 grdma_pci_topo_check_override=2", .generation = 580,
	.override = 2,
};
/* The parameters matter only to 580+. */
FIXTURE_VARIANT_ADD(dma, gen570_deny) {
	.params = "generation=570 grdma_pci_topo_check_override=2 p2p_unsupported_chipset=1",
	.generation = 570, .chipset = true, .override = 2,
};

/* Would the variant's driver refuse a peer that shares an upstream bridge with the GPU or not? */
static bool refused(const FIXTURE_VARIANT(dma) *v, bool share_bridge)
{
	if (v->generation < 580 || v->override == 1)
		return false;
	if (v->override == 2)
		return true;
	if (v->passthrough || !v->chipset)
		return false;
	return !share_bridge;
}

FIXTURE_SETUP(dma)
{
	struct p2p_probe_pin p;

	STANDIN_SETUP(&self->env, variant->params);
	ASSERT_EQ(0, gpu_loc(&self->gpu));
	ASSERT_EQ(0, nic_loc(&self->nic)) TH_LOG("no edu device (1234:11e8) in this VM");
	self->share_bridge = pci_share_bridge(&self->gpu, &self->nic);
	self->nic_iommu = pci_iommu_translates(&self->nic);
	self->gpu_iommu = pci_iommu_translates(&self->gpu);
	TH_LOG("gpu %s nic %s: %s, IOMMU translation for the NIC %s", self->gpu.name, self->nic.name,
	       self->share_bridge ? "a common upstream bridge" : "meet only at the host bridge",
	       self->nic_iommu ? "on" : "off");
	self->va = gpu_alloc(self->env.gpu, NPAGES * GPU_PAGE, &self->handle);
	ASSERT_NE(NULL, self->va);
	ASSERT_EQ(0, probe_pin(self->env.probe, (uintptr_t)self->va, NPAGES * GPU_PAGE, 0, &p,
			       self->phys, NPAGES));
	self->pin = p.handle;
}

FIXTURE_TEARDOWN(dma)
{
	STANDIN_TEARDOWN(&self->env);
}

/* Check a mapping's addresses against the physical ones: equal without IOMMU, else all new. */
static void check_addresses(struct __test_metadata *_metadata, const __u64 *phys,
			    const __u64 *dma, int n, bool iommu)
{
	int i, j;

	for (i = 0; i < n; i++) {
		TH_LOG("page %d: phys %#llx dma %#llx", i, (unsigned long long)phys[i],
		       (unsigned long long)dma[i]);
		if (iommu) {
			EXPECT_NE(phys[i], dma[i]);
			for (j = 0; j < i; j++)
				EXPECT_NE(dma[j], dma[i]);
		} else {
			EXPECT_EQ(phys[i], dma[i]);
		}
	}
}

struct edu {
	int cfg_fd;
	uint16_t saved_cmd;
	int bar_fd;
	volatile uint8_t *regs;
};

static int edu_open(const struct pci_loc *nic, struct edu *e)
{
	char p[PATH_MAX + 16];
	uint16_t cmd;

	snprintf(p, sizeof(p), "%s/config", nic->path);
	e->cfg_fd = open(p, O_RDWR);
	if (e->cfg_fd < 0 || pread(e->cfg_fd, &e->saved_cmd, 2, 4) != 2)
		return -1;
	cmd = e->saved_cmd | 0x6;	/* memory space + bus master */
	if (pwrite(e->cfg_fd, &cmd, 2, 4) != 2)
		return -1;
	snprintf(p, sizeof(p), "%s/resource0", nic->path);
	e->bar_fd = open(p, O_RDWR | O_SYNC);
	if (e->bar_fd < 0)
		return -1;
	e->regs = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, e->bar_fd, 0);
	if (e->regs == MAP_FAILED)
		return -1;
	/* edu's identification register: 0xRRrr00ed. */
	return (*(volatile uint32_t *)e->regs & 0xff) == 0xed ? 0 : -1;
}

static void edu_close(struct edu *e)
{
	munmap((void *)e->regs, 4096);
	close(e->bar_fd);
	pwrite(e->cfg_fd, &e->saved_cmd, 2, 4);
	close(e->cfg_fd);
}

/* One edu DMA: bus address <-> its buffer. 0 when done, -1 on timeout. */
static int edu_dma(struct edu *e, __u64 src, __u64 dst, uint32_t count, bool to_bus)
{
	__u64 deadline = now_ns() + 5000000000ull;

	*(volatile __u64 *)(e->regs + 0x80) = src;
	*(volatile __u64 *)(e->regs + 0x88) = dst;
	*(volatile __u64 *)(e->regs + 0x90) = count;
	*(volatile __u64 *)(e->regs + 0x98) = 1 | (to_bus ? 2 : 0);
	while (*(volatile uint32_t *)(e->regs + 0x98) & 1) {
		if (now_ns() > deadline)
			return -1;
		usleep(2000);
	}
	return 0;
}

/* The NIC copies GPU page 0 into page 2 through its DMA addresses; the CPU checks the result. */
static void edu_roundtrip(struct __test_metadata *_metadata, const struct pci_loc *nic,
			  uint8_t *va, const __u64 *dma)
{
	const size_t off = 0x1230;
	struct edu e;
	size_t i;

	for (i = 0; i < EDU_XFER; i++) {
		va[off + i] = (uint8_t)(i * 7 + 3);
		va[2 * GPU_PAGE + off + i] = 0;
	}
	ASSERT_EQ(0, edu_open(nic, &e));
	EXPECT_EQ(0, edu_dma(&e, dma[0] + off, EDU_BUF, EDU_XFER, false));
	EXPECT_EQ(0, edu_dma(&e, EDU_BUF, dma[2] + off, EDU_XFER, true));
	edu_close(&e);
	for (i = 0; i < EDU_XFER; i++)
		if (va[2 * GPU_PAGE + off + i] != (uint8_t)(i * 7 + 3))
			break;
	EXPECT_EQ(EDU_XFER, i) TH_LOG("first mismatch at byte %zu", i);
}

/* 120 s each: the fixture loads the stand-ins, which under TCG with KASAN on a busy host took
 * longer than the harness's default 30 s once. */
TEST_F_TIMEOUT(dma, map_for_nic, 120)
{
	__u64 dma[NPAGES];
	struct p2p_probe_map m;
	int ret;

	ret = probe_map(self->env.probe, self->pin, P2P_PROBE_PEER_NIC, 0, &m, dma, NPAGES);
	if (refused(variant, self->share_bridge)) {
		EXPECT_EQ(-KERN_ENOTSUPP, ret);
		EXPECT_EQ(1, gpu_counter("topology_refusals"));
		EXPECT_EQ(0, gpu_counter("live_dma_mappings"));
		EXPECT_EQ(0, probe_put(self->env.probe, self->pin));
		EXPECT_EQ(0, gpu_free(self->env.gpu, self->handle));
		return;
	}
	ASSERT_EQ(0, ret);
	EXPECT_EQ(0, gpu_counter("topology_refusals"));
	EXPECT_EQ(0x00020003, m.version);
	EXPECT_EQ(1, m.page_size_type);		/* NVIDIA_P2P_PAGE_SIZE_64KB */
	EXPECT_EQ(NPAGES, m.entries);
	check_addresses(_metadata, self->phys, dma, NPAGES, self->nic_iommu);
	EXPECT_EQ(1, gpu_counter("live_dma_mappings"));

	edu_roundtrip(_metadata, &self->nic, self->va, dma);

	EXPECT_EQ(0, probe_unmap(self->env.probe, m.handle, P2P_PROBE_PEER_NIC, 0));
	EXPECT_EQ(0, gpu_counter("live_dma_mappings"));
	EXPECT_EQ(0, gpu_counter("peer_mismatch_warnings"));
	EXPECT_EQ(0, probe_put(self->env.probe, self->pin));
	EXPECT_EQ(0, gpu_free(self->env.gpu, self->handle));
}

/* The rule's parameters change at run time too: deny, then allow. */
TEST_F_TIMEOUT(dma, override_at_runtime, 120)
{
	struct p2p_probe_map m;
	int ret;

	ASSERT_EQ(0, set_param("grdma_pci_topo_check_override", "2"));
	ret = probe_map(self->env.probe, self->pin, P2P_PROBE_PEER_NIC, 0, &m, NULL, 0);
	EXPECT_EQ(variant->generation >= 580 ? -KERN_ENOTSUPP : 0, ret);
	if (!ret)
		EXPECT_EQ(0, probe_unmap(self->env.probe, m.handle, P2P_PROBE_PEER_NIC, 0));
	ASSERT_EQ(0, set_param("grdma_pci_topo_check_override", "1"));
	EXPECT_EQ(0, probe_map(self->env.probe, self->pin, P2P_PROBE_PEER_NIC, 0, &m, NULL, 0));
	EXPECT_NE(0, set_param("grdma_pci_topo_check_override", "3"));
	/* Freeing with the mapping in place: the driver unmaps it in the teardown. */
	EXPECT_EQ(0, gpu_free(self->env.gpu, self->handle));
	EXPECT_EQ(1, gpu_counter("teardown_dma_mappings"));
	EXPECT_EQ(0, gpu_counter("live_dma_mappings"));
}

/* The GPU as its own peer: it shares its own upstream bridges. */
TEST_F_TIMEOUT(dma, map_for_gpu_itself, 120)
{
	__u64 dma[NPAGES];
	struct p2p_probe_map m;
	int ret;

	ret = probe_map(self->env.probe, self->pin, P2P_PROBE_PEER_GPU, 0, &m, dma, NPAGES);
	if (refused(variant, true)) {
		EXPECT_EQ(-KERN_ENOTSUPP, ret);
	} else {
		ASSERT_EQ(0, ret);
		EXPECT_EQ(NPAGES, m.entries);
		check_addresses(_metadata, self->phys, dma, NPAGES, self->gpu_iommu);
		EXPECT_EQ(0, probe_unmap(self->env.probe, m.handle, P2P_PROBE_PEER_GPU, 0));
	}
	EXPECT_EQ(0, probe_put(self->env.probe, self->pin));
	EXPECT_EQ(0, gpu_free(self->env.gpu, self->handle));
}

/* Unmapping, whatever the generation or topology (the GPU as peer is allowed in all of them). */
FIXTURE(unmap) {
	struct standin_env env;
	char *va;
	__u64 handle, pin;
};

FIXTURE_SETUP(unmap)
{
	STANDIN_SETUP(&self->env, "");
	self->va = gpu_alloc(self->env.gpu, NPAGES * GPU_PAGE, &self->handle);
	ASSERT_NE(NULL, self->va);
	self->pin = probe_pin_ok(self->env.probe, (uintptr_t)self->va, NPAGES * GPU_PAGE, 0);
	ASSERT_NE(0, self->pin);
}

FIXTURE_TEARDOWN(unmap)
{
	STANDIN_TEARDOWN(&self->env);
}

/*
 * NULL arguments are refused; a mapping unmapped already is no longer in its table's list, so a
 * second unmap returns 0 without touching it; put_pages unmaps what is left.
 */
TEST_F_TIMEOUT(unmap, twice_and_null_args, 120)
{
	struct p2p_probe_map m, m2;

	EXPECT_EQ(-EINVAL, probe_map(self->env.probe, self->pin, P2P_PROBE_PEER_NULL, 0, NULL, NULL, 0));
	ASSERT_EQ(0, probe_map(self->env.probe, self->pin, P2P_PROBE_PEER_GPU, 0, &m, NULL, 0));
	ASSERT_EQ(0, probe_map(self->env.probe, self->pin, P2P_PROBE_PEER_GPU, 0, &m2, NULL, 0));
	EXPECT_EQ(2, gpu_counter("live_dma_mappings"));
	EXPECT_EQ(-EINVAL, probe_unmap(self->env.probe, m.handle, P2P_PROBE_PEER_NULL, 0));
	EXPECT_EQ(0, probe_unmap_ex(self->env.probe, m.handle, P2P_PROBE_PEER_GPU, 0,
				    P2P_PROBE_UNMAP_KEEP));
	EXPECT_EQ(1, gpu_counter("live_dma_mappings"));
	EXPECT_EQ(0, probe_unmap(self->env.probe, m.handle, P2P_PROBE_PEER_GPU, 0));
	EXPECT_EQ(1, gpu_counter("stale_dma_unmaps"));
	EXPECT_EQ(1, gpu_counter("live_dma_mappings"));
	EXPECT_EQ(0, probe_put(self->env.probe, self->pin));
	EXPECT_EQ(0, gpu_counter("live_dma_mappings"));
	EXPECT_EQ(0, gpu_counter("teardown_dma_mappings"));	/* put_pages is no teardown */
	EXPECT_EQ(0, gpu_free(self->env.gpu, self->handle));
}

TEST_HARNESS_MAIN
