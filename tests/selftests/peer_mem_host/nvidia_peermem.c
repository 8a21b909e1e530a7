// SPDX-License-Identifier: GPL-2.0
/*
 * NVIDIA's own nvidia-peermem.ko (driver 550, built by tests/reference/build-nvidia-peermem.sh
 * against our rdma/peer_mem.h and the stand-ins' symbols) loaded against the stand-ins: it must
 * register, serve GPU memory through the host and survive invalidation exactly as on a real
 * MLNX_OFED + nvidia.ko node. That it does proves the stand-ins ABI-faithful, and makes it the
 * reference implementation that differential tests compare peermem-rs with.
 */
#include "kselftest_harness.h"
#include "pmh_fixture.h"

#define MAX_SGES 16
#define R_OFF	(GPU_PAGE - 2000)
#define R_LEN	6000

/* The host with @host_params and nvidia-peermem with @params; skips without the modules. */
#define LOAD_NVIDIA(host_params, params) do {						\
	const char *_why;								\
	int _r;										\
	if (!module_available(NVPEERMEM_KO))						\
		SKIP(return, "no " NVPEERMEM_KO " in %s: the reference module is built by "	\
		     "tests/reference/build-nvidia-peermem.sh", modules_dir());		\
	LOAD(host_params, NULL);							\
	if (!module_available(STANDIN_KO))						\
		SKIP(return, "no " STANDIN_KO " in %s", modules_dir());			\
	if (!mod_loaded(STANDIN_MOD)) {							\
		_r = mod_load(STANDIN_KO, "");						\
		ASSERT_TRUE(_r == 0 || _r == -EEXIST) TH_LOG("%s", strerror(-_r));	\
	}										\
	_why = "loading " NVPEERMEM_KO;							\
	_r = mod_load(NVPEERMEM_KO, (params));						\
	ASSERT_EQ(0, _r) TH_LOG("%s: %s", _why, strerror(-_r));			\
	self->gpu = gpu_open();								\
	ASSERT_LE(0, self->gpu);							\
} while (0)

/* Does the host's line for client @name (PMH_DEBUGFS/clients) contain @what? */
static int host_line_has(const char *name, const char *what)
{
	char buf[4096], *line, *save = NULL;
	size_t n = strlen(name);

	if (read_text(PMH_DEBUGFS "/clients", buf, sizeof(buf)))
		return 0;
	for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
		if (!strncmp(line, name, n) && line[n] == ' ')
			return strstr(line, what) != NULL;
	return 0;
}

static void nv_round_trip(struct __test_metadata *_metadata, int pmh, __u64 mr,
			  unsigned char *base, size_t len, unsigned int seed)
{
	unsigned char *buf = malloc(len), *back = malloc(len);

	ASSERT_TRUE(buf && back);
	fill_pattern(buf, len, seed);
	ASSERT_EQ(0, pmh_dma(pmh, mr, 0, buf, len, PMH_DMA_TO_MR));
	ASSERT_EQ(0, memcmp(base, buf, len));
	fill_pattern(base, len, seed + 1);
	ASSERT_EQ(0, pmh_dma(pmh, mr, 0, back, len, PMH_DMA_FROM_MR));
	ASSERT_EQ(0, memcmp(base, back, len));
	free(buf);
	free(back);
}

TEST_F_TIMEOUT(pmh, registers_nv_mem_and_nv_mem_nc, 120)
{
	char version[64], peers_version[64];
	char clients[4096];

	LOAD_NVIDIA("", "");
	ASSERT_EQ(0, read_text("/sys/module/" NVPEERMEM_MOD "/version", version, sizeof(version)));
	ASSERT_EQ(0, read_text(MEMORY_PEERS "/nv_mem/version", peers_version,
			       sizeof(peers_version)));
	ASSERT_STREQ(version, peers_version);
	ASSERT_TRUE(path_exists(MEMORY_PEERS "/nv_mem_nc/version"));
	ASSERT_TRUE(host_line_has("nv_mem", "invalidating=1 unmap_on_invalidate=1"));
	ASSERT_TRUE(host_line_has("nv_mem_nc", "invalidating=0 unmap_on_invalidate=0"));
	ASSERT_EQ(0, read_text(PMH_DEBUGFS "/clients", clients, sizeof(clients)));
	ASSERT_TRUE(strstr(clients, "nv_mem ") < strstr(clients, "nv_mem_nc ")) TH_LOG("%s", clients);
	ASSERT_EQ(2, pmh_counter("registered_clients"));
}

TEST_F_TIMEOUT(pmh, gpu_memory_round_trip, 180)
{
	struct pmh_sge sges[MAX_SGES];
	struct pmh_query_mr q;
	struct pmh_reg_mr reg;
	unsigned char *va;
	__u64 handle;

	LOAD_NVIDIA("", "");
	va = GPU_ALLOC(2 * GPU_PAGE, &handle);
	ASSERT_EQ(0, pmh_reg(self->pmh, va + R_OFF, R_LEN, PMH_REG_WRITE, &reg));
	ASSERT_STREQ("nv_mem", reg.client);
	ASSERT_EQ(0, reg.core_context);
	ASSERT_EQ(GPU_PAGE, reg.page_size);
	ASSERT_EQ(2, reg.nmap);
	ASSERT_EQ(0, pmh_query(self->pmh, reg.handle, &q, sges, MAX_SGES));
	ASSERT_EQ(GPU_PAGE - (R_OFF & ~4095), sges[0].length);
	nv_round_trip(_metadata, self->pmh, reg.handle, va + R_OFF, R_LEN, 51);
	ASSERT_EQ(1, peer_stat("nv_mem", "num_alloc_mrs"));
	ASSERT_EQ(2, peer_stat("nv_mem", "num_reg_pages"));
	ASSERT_EQ(R_LEN, peer_stat("nv_mem", "num_reg_bytes"));
	ASSERT_EQ(0, pmh_dereg(self->pmh, reg.handle));
	ASSERT_EQ(1, peer_stat("nv_mem", "num_dealloc_mrs"));
	ASSERT_EQ(R_LEN, peer_stat("nv_mem", "num_dereg_bytes"));
	ASSERT_EQ(0, gpu_free(self->gpu, handle));
	ASSERT_NO_LEAKS();
}

TEST_F_TIMEOUT(pmh, nc_client_serves_no_invalidate_callers, 180)
{
	struct pmh_reg_mr reg;
	long long persistent;
	unsigned char *va;
	__u64 handle;

	LOAD_NVIDIA("", "");
	va = GPU_ALLOC(2 * GPU_PAGE, &handle);
	persistent = gpu_counter("total_persistent_pins");
	ASSERT_EQ(0, pmh_reg(self->pmh, va + R_OFF, R_LEN, PMH_REG_WRITE | PMH_REG_NO_INVALIDATE,
			     &reg));
	ASSERT_STREQ("nv_mem_nc", reg.client);
	ASSERT_EQ(NO_INVALIDATION_ID, reg.core_context);
	nv_round_trip(_metadata, self->pmh, reg.handle, va + R_OFF, R_LEN, 61);
	ASSERT_EQ(persistent + 1, gpu_counter("total_persistent_pins"));
	ASSERT_EQ(0, pmh_dereg(self->pmh, reg.handle));
	ASSERT_EQ(0, gpu_free(self->gpu, handle));
	ASSERT_NO_LEAKS();
}

static void invalidation_flow(struct __test_metadata *_metadata, int pmh, int gpu, int inline_unmap)
{
	struct pmh_query_mr q;
	struct pmh_reg_mr reg;
	unsigned char buf[64];
	unsigned char *va;
	__u64 handle;

	va = gpu_alloc(gpu, 2 * GPU_PAGE, &handle);
	ASSERT_NE(NULL, va);
	ASSERT_EQ(0, pmh_reg(pmh, va, 2 * GPU_PAGE, PMH_REG_WRITE, &reg));
	ASSERT_STREQ("nv_mem", reg.client);
	nv_round_trip(_metadata, pmh, reg.handle, va, 100, 71);
	/* In use: nvidia-peermem holds a module reference per registration. */
	ASSERT_EQ(-EAGAIN, mod_unload(NVPEERMEM_MOD));
	ASSERT_EQ(0, gpu_free(gpu, handle));
	ASSERT_EQ(1, peer_stat("nv_mem", "num_free_callbacks"));
	ASSERT_EQ(0, pmh_query(pmh, reg.handle, &q, NULL, 0));
	ASSERT_EQ(PMH_MR_INVALIDATED, q.state);
	ASSERT_EQ(inline_unmap, q.unmapped_by_invalidation);
	ASSERT_EQ(inline_unmap, pmh_counter("inline_unmaps"));
	ASSERT_EQ(-EACCES, pmh_dma(pmh, reg.handle, 0, buf, sizeof(buf), PMH_DMA_FROM_MR));
	/* nvidia-peermem never calls back into the driver from its free callback. */
	ASSERT_EQ(0, gpu_counter("callback_reentries"));
	ASSERT_EQ(0, gpu_counter("live_pins"));
	ASSERT_EQ(0, pmh_dereg(pmh, reg.handle));
	ASSERT_EQ(0, gpu_counter("stale_put_pages"));
	ASSERT_EQ(0, gpu_counter("stale_dma_unmaps"));
	ASSERT_EQ(0, mod_unload(NVPEERMEM_MOD));
}

TEST_F_TIMEOUT(pmh, invalidation_ex_client, 180)
{
	LOAD_NVIDIA("", "");
	invalidation_flow(_metadata, self->pmh, self->gpu, 0);
	ASSERT_NO_LEAKS();
}

TEST_F_TIMEOUT(pmh, invalidation_peerdirect_legacy, 180)
{
	LOAD_NVIDIA("", "peerdirect_support=1");
	ASSERT_TRUE(host_line_has("nv_mem", "invalidating=1 unmap_on_invalidate=0"));
	invalidation_flow(_metadata, self->pmh, self->gpu, 1);
	ASSERT_NO_LEAKS();
}

TEST_F_TIMEOUT(pmh, invalidation_on_4_9_host, 180)
{
	LOAD_NVIDIA("ex_support=0", "");
	invalidation_flow(_metadata, self->pmh, self->gpu, 1);
	ASSERT_NO_LEAKS();
}

TEST_F_TIMEOUT(pmh, page_size_before_dma_map_host, 180)
{
	struct pmh_reg_mr reg;
	unsigned char *va;
	__u64 handle;

	LOAD_NVIDIA("page_size_before_dma_map=1 trim_sgl=0", "");
	va = GPU_ALLOC(2 * GPU_PAGE, &handle);
	ASSERT_EQ(0, pmh_reg(self->pmh, va + R_OFF, R_LEN, PMH_REG_WRITE, &reg));
	ASSERT_EQ(GPU_PAGE, reg.page_size);
	nv_round_trip(_metadata, self->pmh, reg.handle, va + R_OFF, R_LEN, 81);
	ASSERT_EQ(0, pmh_dereg(self->pmh, reg.handle));
	ASSERT_EQ(0, gpu_free(self->gpu, handle));
	ASSERT_NO_LEAKS();
}

TEST_F_TIMEOUT(pmh, refuses_bad_parameter_and_taken_name, 120)
{
	const char *why;

	LOAD_NVIDIA("", "");
	ASSERT_EQ(0, mod_unload(NVPEERMEM_MOD));
	ASSERT_EQ(-EINVAL, mod_load(NVPEERMEM_KO, "peerdirect_support=2"));
	ASSERT_FALSE(mod_loaded(NVPEERMEM_MOD));
	/* Another client already named nv_mem: registration fails, the load with it. */
	if (!module_available(CLIENT_KO))
		SKIP(return, "no " CLIENT_KO);
	close(self->pmh);
	self->pmh = -1;
	ASSERT_EQ(0, env_load("", "names=nv_mem", &why)) TH_LOG("%s", why);
	ASSERT_EQ(-EINVAL, mod_load(NVPEERMEM_KO, ""));
	ASSERT_FALSE(path_exists(MEMORY_PEERS "/nv_mem_nc"));
	ASSERT_EQ(1, pmh_counter("registered_clients"));
}

TEST_HARNESS_MAIN
