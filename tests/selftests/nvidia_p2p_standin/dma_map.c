// SPDX-License-Identifier: GPL-2.0
/*
 * nvidia_p2p_dma_map_pages / dma_unmap_pages of the NVIDIA P2P stand-in: every 64 KiB page is
 * mapped for the peer through the DMA API (so the emulated IOMMU translates when it is on: DMA
 * addresses differ from the BAR's physical ones; without it they are equal), the NIC (QEMU edu)
 * really moves bytes through those addresses, peers that meet the GPU only at the root complex
 * are refused with -ENOTSUPP unless topology_check=0, and unmapping is idempotent and warns (but
 * does not WARN) when given another peer.
 *
 * Expectations come from sysfs, not from the variant's name: the topology from the device tree
 * and the PCIe port types, the IOMMU from the NIC's iommu_group.
 */
#include "kselftest_harness.h"
#include "standin_test.h"

#define NPAGES 4
#define EDU_BUF 0x40000ull	/* edu's DMA buffer in its own address space */
#define EDU_XFER 2048		/* a 4096-byte transfer trips an off-by-one in older QEMUs */

FIXTURE(dma) {
	struct standin_env env;
	struct pci_loc gpu, nic;
	bool share_switch;
	bool nic_iommu, gpu_iommu;
	uint8_t *va;
	__u64 handle, pin;
	__u64 phys[NPAGES];
};

FIXTURE_SETUP(dma)
{
	struct p2p_probe_pin p;

	STANDIN_SETUP(&self->env, "");
	ASSERT_EQ(0, gpu_loc(&self->gpu));
	ASSERT_EQ(0, nic_loc(&self->nic)) TH_LOG("no edu device (1234:11e8) in this VM");
	self->share_switch = pci_share_switch(&self->gpu, &self->nic);
	self->nic_iommu = pci_iommu_translates(&self->nic);
	self->gpu_iommu = pci_iommu_translates(&self->gpu);
	TH_LOG("gpu %s nic %s: %s, IOMMU translation for the NIC %s", self->gpu.name, self->nic.name,
	       self->share_switch ? "one PCIe switch" : "meet at the root complex",
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

TEST_F(dma, map_for_nic)
{
	__u64 dma[NPAGES];
	struct p2p_probe_map m;
	char mark[64];
	int ret;

	snprintf(mark, sizeof(mark), "nvp2p-selftest topology %d", getpid());
	kmsg_mark(mark);
	ret = probe_map(self->env.probe, self->pin, P2P_PROBE_PEER_NIC, 0, &m, dma, NPAGES);
	if (!self->share_switch) {
		EXPECT_EQ(-KERN_ENOTSUPP, ret);
		EXPECT_EQ(1, gpu_counter("topology_refusals"));
		EXPECT_TRUE(kmsg_has_since(mark, "do not share a PCIe switch"));
		EXPECT_EQ(0, gpu_counter("live_dma_mappings"));
		/* NVreg_GrdmaPciTopoCheckOverride's counterpart. */
		ASSERT_EQ(0, set_param("topology_check", "0"));
		ret = probe_map(self->env.probe, self->pin, P2P_PROBE_PEER_NIC, 0, &m, dma, NPAGES);
	}
	ASSERT_EQ(0, ret);
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

/* The override is a module parameter at load time too; with it every topology maps. */
TEST_F(dma, topology_override_at_load)
{
	struct p2p_probe_pin p;
	__u64 dma[NPAGES];
	char v[8];

	/* Reload with the check off (the fixture's pin and memory go with the old module). */
	ASSERT_EQ(0, gpu_free(self->env.gpu, self->handle));
	close(self->env.probe);
	close(self->env.gpu);
	ASSERT_EQ(0, mod_unload("p2p_probe"));
	ASSERT_EQ(0, mod_load(STANDIN, "topology_check=0"));
	ASSERT_EQ(0, mod_load("p2p_probe", ""));
	ASSERT_EQ(0, read_text(STANDIN_PARAMS "topology_check", v, sizeof(v)));
	EXPECT_STREQ("N", v);
	self->env.gpu = gpu_open();
	self->env.probe = open(P2P_PROBE_DEVICE, O_RDWR);
	ASSERT_LE(0, self->env.gpu);
	ASSERT_LE(0, self->env.probe);
	self->va = gpu_alloc(self->env.gpu, NPAGES * GPU_PAGE, &self->handle);
	ASSERT_NE(NULL, self->va);
	ASSERT_EQ(0, probe_pin(self->env.probe, (uintptr_t)self->va, NPAGES * GPU_PAGE, 0, &p,
			       self->phys, NPAGES));
	ASSERT_EQ(0, probe_map(self->env.probe, p.handle, P2P_PROBE_PEER_NIC, 0, NULL, dma, NPAGES));
	EXPECT_EQ(0, gpu_counter("topology_refusals"));
	check_addresses(_metadata, self->phys, dma, NPAGES, self->nic_iommu);
	edu_roundtrip(_metadata, &self->nic, self->va, dma);
	/* Freeing with the mapping in place: the driver unmaps it in the teardown. */
	EXPECT_EQ(0, gpu_free(self->env.gpu, self->handle));
	EXPECT_EQ(1, gpu_counter("teardown_dma_mappings"));
	EXPECT_EQ(0, gpu_counter("live_dma_mappings"));
}

/* The GPU as its own peer (same device): allowed in every topology. */
TEST_F(dma, map_for_gpu_itself)
{
	__u64 dma[NPAGES];
	struct p2p_probe_map m;

	ASSERT_EQ(0, probe_map(self->env.probe, self->pin, P2P_PROBE_PEER_GPU, 0, &m, dma, NPAGES));
	EXPECT_EQ(NPAGES, m.entries);
	check_addresses(_metadata, self->phys, dma, NPAGES, self->gpu_iommu);
	EXPECT_EQ(0, probe_unmap(self->env.probe, m.handle, P2P_PROBE_PEER_GPU, 0));
	EXPECT_EQ(0, probe_put(self->env.probe, self->pin));
	EXPECT_EQ(0, gpu_free(self->env.gpu, self->handle));
}

/* Unmapping with another peer than the one mapped for: done, counted, said (no WARN splat). */
TEST_F(dma, peer_mismatch)
{
	struct p2p_probe_map m;
	char mark[64];

	ASSERT_EQ(0, probe_map(self->env.probe, self->pin, P2P_PROBE_PEER_GPU, 0, &m, NULL, 0));
	snprintf(mark, sizeof(mark), "nvp2p-selftest mismatch %d", getpid());
	kmsg_mark(mark);
	EXPECT_EQ(0, probe_unmap(self->env.probe, m.handle, P2P_PROBE_PEER_NIC, 0));
	EXPECT_EQ(1, gpu_counter("peer_mismatch_warnings"));
	EXPECT_EQ(0, gpu_counter("live_dma_mappings"));
	EXPECT_TRUE(kmsg_has_since(mark, "the peer the mapping was made for"));
	EXPECT_EQ(0, probe_put(self->env.probe, self->pin));
	EXPECT_EQ(0, gpu_free(self->env.gpu, self->handle));
}

TEST_F(dma, unmap_idempotent_and_null_args)
{
	struct p2p_probe_map m, m2;

	EXPECT_EQ(-EINVAL, probe_map(self->env.probe, self->pin, P2P_PROBE_PEER_NULL, 0, NULL, NULL, 0));
	ASSERT_EQ(0, probe_map(self->env.probe, self->pin, P2P_PROBE_PEER_GPU, 0, &m, NULL, 0));
	ASSERT_EQ(0, probe_map(self->env.probe, self->pin, P2P_PROBE_PEER_GPU, 0, &m2, NULL, 0));
	EXPECT_EQ(2, gpu_counter("live_dma_mappings"));
	EXPECT_EQ(-EINVAL, probe_unmap(self->env.probe, m.handle, P2P_PROBE_PEER_NULL, 0));
	EXPECT_EQ(0, probe_unmap(self->env.probe, m.handle, P2P_PROBE_PEER_GPU, 0));
	EXPECT_EQ(1, gpu_counter("live_dma_mappings"));
	/* put_pages frees the table with its remaining mapping; a late unmap is a no-op. */
	EXPECT_EQ(0, probe_put(self->env.probe, self->pin));
	EXPECT_EQ(0, gpu_counter("live_dma_mappings"));
	EXPECT_EQ(0, probe_unmap(self->env.probe, m2.handle, P2P_PROBE_PEER_GPU, 0));
	EXPECT_EQ(1, gpu_counter("stale_dma_unmaps"));
	EXPECT_EQ(0, gpu_free(self->env.gpu, self->handle));
}

/* A torn-down table is unknown: mapping it fails instead of touching freed memory. */
TEST_F(dma, map_after_teardown)
{
	EXPECT_EQ(0, gpu_free(self->env.gpu, self->handle));	/* tears the pin down */
	EXPECT_EQ(-EINVAL, probe_map(self->env.probe, self->pin, P2P_PROBE_PEER_GPU, 0, NULL, NULL, 0));
	EXPECT_EQ(0, gpu_counter("live_dma_mappings"));
	EXPECT_EQ(0, gpu_counter("total_dma_mappings"));
	EXPECT_EQ(0, probe_put(self->env.probe, self->pin));
}

TEST_HARNESS_MAIN
