// SPDX-License-Identifier: GPL-2.0
/*
 * peermem-rs seen from ib_core's side: register GPU memory the way ibv_reg_mr does, move data through
 * the NIC, free it, and check what a user of ib_core can observe (return codes, SG lists, invalidation,
 * statistics, the module reference count), plus that nothing leaked in the NVIDIA stand-in, the host
 * or peermem-rs itself.
 *
 * client_matrix.sh loads the stand-ins and peermem_rs with one combination of parameters and runs
 * this program; each test reads the combination from sysfs and checks what that combination must do.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kselftest_harness.h"
#include "gpumem.h"
#include "pmh.h"

#define KiB (1024ul)
#define MiB (1024ul * 1024)
#define GPU_PAGE NVP2P_GPU_PAGE_SIZE
#define PEERMEM_STATS "/sys/kernel/debug/peermem_rs/stats"
#define PARAMS "/sys/module/peermem_rs/parameters/"
#define PEERMEM_TIME "/sys/kernel/debug/peermem_rs/time"

/* A counter of peermem-rs's debugfs stats file; -1 if missing. */
static long long peermem_stat(const char *key)
{
	long long v;

	return read_named(PEERMEM_STATS, key, &v, NULL) == 1 ? v : -1;
}

/* Polls a counter for up to 2 s: what our work item does after a callback is not synchronous. */
static int stat_becomes(const char *key, long long want)
{
	for (int i = 0; i < 200; i++) {
		if (peermem_stat(key) == want)
			return 1;
		usleep(10 * 1000);
	}
	return 0;
}

static int param(const char *name)
{
	char path[256];

	snprintf(path, sizeof(path), PARAMS "%s", name);
	return (int)read_number(path);
}

/* The client a registration should land in for this combination of parameters. */
static const char *expected_client(int no_invalidate)
{
	if (param("persistent_api_support") == 1)
		return "nv_mem";
	return no_invalidate ? "nv_mem_nc" : "nv_mem";
}

static int invalidating_mode(void)
{
	return param("persistent_api_support") == 0;
}

/* How many of our clients the host asks about memory nobody claims. */
static int clients_asked(unsigned int flags)
{
	return invalidating_mode() && !(flags & PMH_REG_NO_INVALIDATE) ? 2 : 1;
}

/* Are GPU and NIC under one switch in this VM? (The split variant puts them apart.) */
static int split_topology(void)
{
	const char *v = getenv("PEERMEM_VARIANT");

	return v && !strcmp(v, "split");
}

static void fill(uint8_t *p, size_t n, unsigned int seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(i * 31 + seed * 7 + (i >> 8));
}

/* The kernel log since a marker, to check an explanation was printed. */
static int dmesg_has_since(const char *mark, const char *needle)
{
	char cmd[512];

	snprintf(cmd, sizeof(cmd), "dmesg | sed -n '/%s/,$p' | grep -q -- '%s'", mark, needle);
	return system(cmd) == 0;
}

static void kmsg_mark(const char *mark)
{
	write_text("/dev/kmsg", mark);
}

FIXTURE(gpu) {
	int gpu;
	int pmh;
};

FIXTURE_SETUP(gpu)
{
	self->gpu = gpu_open();
	self->pmh = pmh_open();
	ASSERT_LE(0, self->gpu) TH_LOG("NVIDIA stand-in not loaded: %s", strerror(-self->gpu));
	ASSERT_LE(0, self->pmh) TH_LOG("peer-memory host not loaded: %s", strerror(-self->pmh));
	ASSERT_EQ(0, peermem_stat("live_registrations"));
}

FIXTURE_TEARDOWN(gpu)
{
	char why[256] = "";

	if (self->pmh >= 0)
		close(self->pmh);
	if (self->gpu >= 0)
		close(self->gpu);
	/* Everything must be back to zero: the host's MRs, peermem-rs's registrations and pins, and
	 * every object of the NVIDIA stand-in. */
	EXPECT_EQ(0, pmh_counter("live_mrs"));
	EXPECT_TRUE(stat_becomes("live_registrations", 0));
	EXPECT_TRUE(stat_becomes("pinned_bytes", 0));
	EXPECT_EQ(0, gpu_leaks(why, sizeof(why))) TH_LOG("stand-in leaks: %s", why);
}

/* Registration, SG list and a data round trip through the NIC, for several sizes and offsets.
 * Every case's range starts on the allocation's first GPU page: in the invalidating mode each
 * registration after the first adopts the one before it, which lingers after its deregistration
 * with its pin N (one registration, one N, whatever the number of cycles). */
TEST_F(gpu, register_and_round_trip)
{
	static const struct { size_t offset, len; } cases[] = {
		{ 0, 1 }, { 0, GPU_PAGE - 1 }, { 0, GPU_PAGE }, { 0, GPU_PAGE + 1 },
		{ 4096, 3 * GPU_PAGE }, { GPU_PAGE - 1, 2 }, { 0x1234, 5 * GPU_PAGE + 77 },
	};
	size_t alloc = 8 * GPU_PAGE, ncases = sizeof(cases) / sizeof(cases[0]);
	long long adoptions;
	__u64 handle;
	uint8_t *va;
	struct nvp2p_info info;

	if (split_topology())
		SKIP(return, "GPU and NIC are under different root ports in this VM variant");
	va = gpu_alloc(self->gpu, alloc, &handle);
	ASSERT_NE(NULL, va);
	ASSERT_EQ(0, gpu_info(self->gpu, handle, &info));
	adoptions = peermem_stat("adoptions");

	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		size_t off = cases[c].offset, len = cases[c].len;
		uint64_t first = (off / GPU_PAGE) * GPU_PAGE;
		uint64_t pages = (off + len + GPU_PAGE - 1) / GPU_PAGE - off / GPU_PAGE;
		struct pmh_sge sges[16];
		struct pmh_query_mr q;
		struct pmh_reg_mr mr;
		size_t n = len < 2048 ? len : 2048;
		uint8_t in[2048], out[2048];

		ASSERT_EQ(0, pmh_reg(self->pmh, va + off, len, PMH_REG_WRITE, &mr)) TH_LOG("case %zu", c);
		EXPECT_STREQ(expected_client(0), mr.client);
		EXPECT_EQ(GPU_PAGE, mr.page_size);
		EXPECT_EQ(pages, mr.nmap);
		EXPECT_EQ(invalidating_mode() ? mr.core_context : 0xffffffffull, mr.core_context);
		ASSERT_EQ(0, pmh_query(self->pmh, mr.handle, &q, sges, 16));
		EXPECT_EQ(PMH_MR_MAPPED, q.state);
		ASSERT_EQ(pages, q.nmap);
		/* The client gave one 64 KiB entry per GPU page; the host trimmed the first and last to
		 * the system pages holding the registered bytes, as MLNX_OFED does. Without an IOMMU the
		 * DMA addresses are the BAR's bus addresses. */
		for (uint64_t i = 0; i < pages; i++) {
			uint64_t page_bus = info.phys_addr + first + i * GPU_PAGE;
			uint64_t start = i == 0 ? (off % GPU_PAGE) & ~4095ull : 0;
			uint64_t end = i == pages - 1 ? (((off + len - 1) % GPU_PAGE) | 4095) + 1 : GPU_PAGE;

			EXPECT_EQ(end - start, sges[i].length) TH_LOG("case %zu entry %lu", c, (unsigned long)i);
			if (!pmh_counter("nic_iommu"))
				EXPECT_EQ(page_bus + start, sges[i].dma_addr);
		}
		/* RDMA write into GPU memory, read it through the BAR mapping, then change it there and
		 * RDMA read it back. The last bytes of the range are the edge that matters. */
		fill(in, n, c);
		ASSERT_EQ(0, pmh_dma(self->pmh, mr.handle, len - n, in, n, PMH_DMA_TO_MR));
		EXPECT_EQ(0, memcmp(va + off + len - n, in, n));
		fill(va + off, n, c + 100);
		ASSERT_EQ(0, pmh_dma(self->pmh, mr.handle, 0, out, n, PMH_DMA_FROM_MR));
		EXPECT_EQ(0, memcmp(out, va + off, n));
		EXPECT_EQ(1, peermem_stat("live_registrations"));
		EXPECT_EQ((long long)(pages * GPU_PAGE), peermem_stat("pinned_bytes"));
		ASSERT_EQ(0, pmh_dereg(self->pmh, mr.handle));
	}
	if (invalidating_mode()) {
		EXPECT_EQ(adoptions + (long long)ncases - 1, peermem_stat("adoptions"));
		EXPECT_EQ(1, peermem_stat("lingering"));
		EXPECT_EQ(1, peermem_stat("live_registrations"));
	} else {
		EXPECT_EQ(adoptions, peermem_stat("adoptions"));
		EXPECT_EQ(0, peermem_stat("lingering"));
	}
	ASSERT_EQ(0, gpu_free(self->gpu, handle));
	EXPECT_EQ(0, peermem_stat("lingering"));
	EXPECT_TRUE(stat_becomes("live_registrations", 0));
}

/* Pins with a free callback the stand-in has made (its total_pins counts persistent pins too). */
static long long callback_pins(void)
{
	return gpu_counter("total_pins") - gpu_counter("total_persistent_pins");
}

/* Many registrations lingering at once (invalidating mode): 512 pieces of one allocation, each
 * registered and deregistered, so that each lingers with its own N; twice the 256 buckets of the
 * module's table, so buckets hold two or three. Then each piece registered again, in another
 * order: each adopts the one whose N pins its own first page (found among the others of its
 * bucket; taken off a list at its head, its end or, for some, its middle, without losing the
 * others: 20 or more middles for each of 300 random placements and process ids, computed with the
 * module's hash), and pins no N. A range that holds a lingering N's page but starts on a page
 * before it pins an N of its own and adopts nothing. The free then calls every N back, and
 * nothing lingers. */
/* 1025 registrations and as many deregistrations: over the harness's default 30 s in a slow TCG
 * session with the debug kernel (a clean-clone run of 7632240 timed out here). */
TEST_F_TIMEOUT(gpu, many_lingering_registrations_each_adopted_by_its_own_range, 120)
{
	enum { PIECES = 512, STRIDE = 7 };
	long long adoptions, pins;
	__u64 handle, mrs[PIECES];
	struct pmh_reg_mr mr;
	uint8_t *va, *piece;

	if (!invalidating_mode())
		SKIP(return, "not applicable: the persistent client's registrations never linger");
	if (split_topology())
		SKIP(return, "GPU and NIC are under different root ports in this VM variant");
	/* Page 0 is left out of the pieces: piece i is page i + 1. */
	va = gpu_alloc(self->gpu, (PIECES + 1) * GPU_PAGE, &handle);
	ASSERT_NE(NULL, va);
	piece = va + GPU_PAGE;
	for (int i = 0; i < PIECES; i++) {
		ASSERT_EQ(0, pmh_reg(self->pmh, piece + i * GPU_PAGE, GPU_PAGE, PMH_REG_WRITE, &mr));
		ASSERT_EQ(0, pmh_dereg(self->pmh, mr.handle));
	}
	EXPECT_EQ(PIECES, peermem_stat("lingering"));
	adoptions = peermem_stat("adoptions");
	pins = callback_pins();
	/* STRIDE is prime to PIECES: every piece once, not in the order they were listed. */
	for (int k = 0; k < PIECES; k++) {
		int i = (k * STRIDE) % PIECES;

		ASSERT_EQ(0, pmh_reg(self->pmh, piece + i * GPU_PAGE, GPU_PAGE, PMH_REG_WRITE, &mr));
		mrs[i] = mr.handle;
	}
	EXPECT_EQ(adoptions + PIECES, peermem_stat("adoptions"));
	EXPECT_EQ(pins, callback_pins()) TH_LOG("a registration pinned an N instead of adopting");
	EXPECT_EQ(0, peermem_stat("lingering"));
	for (int i = 0; i < PIECES; i++)
		ASSERT_EQ(0, pmh_dereg(self->pmh, mrs[i]));
	EXPECT_EQ(PIECES, peermem_stat("lingering"));
	/* Pages 0 and 1: piece 0's N pins page 1, but the range starts on page 0. */
	adoptions = peermem_stat("adoptions");
	ASSERT_EQ(0, pmh_reg(self->pmh, va, 2 * GPU_PAGE, PMH_REG_WRITE, &mr));
	EXPECT_EQ(adoptions, peermem_stat("adoptions"));
	EXPECT_EQ(pins + 1, callback_pins()) TH_LOG("no N of its own");
	EXPECT_EQ(PIECES, peermem_stat("lingering"));
	ASSERT_EQ(0, pmh_dereg(self->pmh, mr.handle));
	EXPECT_EQ(PIECES + 1, peermem_stat("lingering"));
	ASSERT_EQ(0, gpu_free(self->gpu, handle));
	EXPECT_EQ(0, peermem_stat("lingering"));
	EXPECT_TRUE(stat_becomes("live_registrations", 0));
}

/* With the emulated IOMMU the NIC gets IOVAs, not the BAR's physical addresses, and DMA still works. */
TEST_F(gpu, dma_addresses_go_through_the_iommu)
{
	struct pmh_sge sges[4];
	struct pmh_query_mr q;
	struct pmh_reg_mr mr;
	struct nvp2p_info info;
	uint8_t in[512], out[512];
	__u64 handle;
	uint8_t *va;

	if (split_topology())
		SKIP(return, "GPU and NIC are under different root ports in this VM variant");
	if (!pmh_counter("nic_iommu"))
		SKIP(return, "no IOMMU translates the NIC's DMA in this VM variant");
	va = gpu_alloc(self->gpu, 2 * GPU_PAGE, &handle);
	ASSERT_NE(NULL, va);
	ASSERT_EQ(0, gpu_info(self->gpu, handle, &info));
	ASSERT_EQ(0, pmh_reg(self->pmh, va, 2 * GPU_PAGE, PMH_REG_WRITE, &mr));
	ASSERT_EQ(0, pmh_query(self->pmh, mr.handle, &q, sges, 4));
	ASSERT_EQ(2, q.nmap);
	EXPECT_NE(info.phys_addr, sges[0].dma_addr);
	fill(in, sizeof(in), 9);
	ASSERT_EQ(0, pmh_dma(self->pmh, mr.handle, GPU_PAGE + 100, in, sizeof(in), PMH_DMA_TO_MR));
	EXPECT_EQ(0, memcmp(va + GPU_PAGE + 100, in, sizeof(in)));
	ASSERT_EQ(0, pmh_dma(self->pmh, mr.handle, GPU_PAGE + 100, out, sizeof(out), PMH_DMA_FROM_MR));
	EXPECT_EQ(0, memcmp(out, in, sizeof(in)));
	ASSERT_EQ(0, pmh_dereg(self->pmh, mr.handle));
	ASSERT_EQ(0, gpu_free(self->gpu, handle));
}

/* Ordinary memory never reaches peermem-rs; memory that is neither ordinary nor GPU memory of this
 * process is refused with the pinning error (EFAULT), and peermem-rs says why. */
TEST_F(gpu, not_gpu_memory_is_refused_and_explained)
{
	long long before = peermem_stat("error_not_gpu_memory");
	char mark[64];
	struct pmh_reg_mr mr;
	__u64 handle;
	uint8_t *va, *host = malloc(3 * 4096);

	long long acquired = peermem_stat("acquired");

	ASSERT_NE(NULL, host);
	ASSERT_EQ(0, pmh_reg(self->pmh, host, 3 * 4096, PMH_REG_WRITE, &mr));
	EXPECT_STREQ("", mr.client);
	ASSERT_EQ(0, pmh_dereg(self->pmh, mr.handle));
	free(host);
	EXPECT_EQ(acquired, peermem_stat("acquired"));

	/* Freed GPU memory: its VA is unmapped, so pinning fails and the driver does not know it. */
	va = gpu_alloc(self->gpu, GPU_PAGE, &handle);
	ASSERT_NE(NULL, va);
	ASSERT_EQ(0, gpu_free(self->gpu, handle));
	snprintf(mark, sizeof(mark), "client_test mark %d", getpid());
	kmsg_mark(mark);
	EXPECT_EQ(-EFAULT, pmh_reg(self->pmh, va, GPU_PAGE, PMH_REG_WRITE, &mr));
	EXPECT_EQ(before + clients_asked(PMH_REG_WRITE), peermem_stat("error_not_gpu_memory"));
	EXPECT_TRUE(dmesg_has_since(mark, "not GPU memory of the registering process"));
}

/* GPU memory of another process is not this process's to register. */
TEST_F(gpu, memory_of_another_process_is_refused)
{
	long long before = peermem_stat("error_not_gpu_memory");
	uintptr_t child_va;
	pid_t pid;

	pid = gpu_alloc_in_child(GPU_PAGE, &child_va);
	ASSERT_LT(0, pid);
	if (!child_va)
		gpu_child_end(pid);
	ASSERT_NE(0, child_va);
	/* The child's VA means nothing here: not mapped, and not this process's GPU memory. */
	EXPECT_EQ(-EFAULT, pmh_reg(self->pmh, (void *)child_va, GPU_PAGE, PMH_REG_WRITE, NULL));
	EXPECT_EQ(before + clients_asked(PMH_REG_WRITE), peermem_stat("error_not_gpu_memory"));
	gpu_child_end(pid);
}

/* A range that wraps the address space is refused by somebody, never crashes anyone. */
TEST_F(gpu, absurd_ranges_are_refused)
{
	EXPECT_GT(0, pmh_reg(self->pmh, (void *)(uintptr_t)(UINT64_MAX - 4095), 8192, 0, NULL));
	EXPECT_GT(0, pmh_reg(self->pmh, (void *)(uintptr_t)0x10000, 0, 0, NULL));
}

/* Freeing registered memory: the invalidating client makes the host revoke it before the driver
 * frees it; the persistent one keeps it alive until deregistration. */
TEST_F(gpu, free_while_registered)
{
	long long inv_before = peermem_stat("invalidations");
	long long cb_before = peer_stat("nv_mem", "num_free_callbacks");
	struct pmh_query_mr q;
	struct pmh_reg_mr mr;
	struct nvp2p_info info;
	uint8_t buf[256];
	__u64 handle;
	uint8_t *va;

	if (split_topology())
		SKIP(return, "GPU and NIC are under different root ports in this VM variant");
	va = gpu_alloc(self->gpu, 2 * GPU_PAGE, &handle);
	ASSERT_NE(NULL, va);
	ASSERT_EQ(0, pmh_reg(self->pmh, va, 2 * GPU_PAGE, PMH_REG_WRITE, &mr));
	ASSERT_EQ(0, gpu_free(self->gpu, handle));
	ASSERT_EQ(0, pmh_query(self->pmh, mr.handle, &q, NULL, 0));
	if (invalidating_mode()) {
		/* Invalidated before the free returned, through the host, which now refuses DMA. */
		EXPECT_EQ(PMH_MR_INVALIDATED, q.state);
		EXPECT_EQ(1, q.invalidations);
		EXPECT_EQ(inv_before + 1, peermem_stat("invalidations"));
		if (path_exists(MEMORY_PEERS))	/* a host with memory_peers (kernels before 6.6) */
			EXPECT_EQ(cb_before + 1, peer_stat("nv_mem", "num_free_callbacks"));
		EXPECT_EQ(-EACCES, pmh_dma(self->pmh, mr.handle, 0, buf, sizeof(buf), PMH_DMA_TO_MR));
		/* A legacy client (peerdirect_support=1) is unmapped by the host inside the
		 * invalidation; an ex client asked the host not to. */
		EXPECT_EQ(param("peerdirect_support") == 1, q.unmapped_by_invalidation);
		/* The registration's persistent pin goes right after the callback, from our work
		 * item (the callback itself may not call into the driver). */
		EXPECT_TRUE(stat_becomes("pinned_bytes", 0));
	} else {
		/* Persistent: the memory stays pinned and usable after cudaFree. */
		EXPECT_EQ(PMH_MR_MAPPED, q.state);
		EXPECT_EQ(0, gpu_info(self->gpu, handle, &info));
		EXPECT_EQ(1, info.freed);
		fill(buf, sizeof(buf), 3);
		EXPECT_EQ(0, pmh_dma(self->pmh, mr.handle, 0, buf, sizeof(buf), PMH_DMA_TO_MR));
		EXPECT_EQ(inv_before, peermem_stat("invalidations"));
	}
	ASSERT_EQ(0, pmh_dereg(self->pmh, mr.handle));
}

/* A process that exits with memory registered and allocated: both files are released at exit,
 * in whatever order, and everything is cleaned up without a splat. */
TEST_F(gpu, process_exit_with_registrations)
{
	int status;
	pid_t pid;

	if (split_topology())
		SKIP(return, "GPU and NIC are under different root ports in this VM variant");
	for (int round = 0; round < 4; round++) {
		pid = fork();
		ASSERT_LE(0, pid);
		if (pid == 0) {
			int g = round & 1 ? pmh_open() : gpu_open();
			int h = round & 1 ? gpu_open() : pmh_open();
			int gfd = round & 1 ? h : g, pfd = round & 1 ? g : h;
			__u64 handle;
			uint8_t *va = gpu_alloc(gfd, 3 * GPU_PAGE, &handle);

			if (!va || pmh_reg(pfd, va, 3 * GPU_PAGE, PMH_REG_WRITE, NULL) ||
			    pmh_reg(pfd, va + GPU_PAGE, 100, PMH_REG_WRITE | PMH_REG_NO_INVALIDATE, NULL))
				_exit(1);
			if (round >= 2)
				gpu_free(gfd, handle);
			_exit(0);
		}
		ASSERT_EQ(pid, waitpid(pid, &status, 0));
		ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) TH_LOG("round %d", round);
	}
}

/* CQ/QP buffers (callers that cannot handle invalidation) go to the persistent client. */
TEST_F(gpu, callers_that_cannot_be_invalidated_get_the_persistent_client)
{
	struct pmh_reg_mr mr;
	__u64 handle;
	uint8_t *va;

	if (split_topology())
		SKIP(return, "GPU and NIC are under different root ports in this VM variant");
	va = gpu_alloc(self->gpu, GPU_PAGE, &handle);
	ASSERT_NE(NULL, va);
	ASSERT_EQ(0, pmh_reg(self->pmh, va, GPU_PAGE, PMH_REG_WRITE | PMH_REG_NO_INVALIDATE, &mr));
	EXPECT_STREQ(expected_client(1), mr.client);
	EXPECT_EQ(0xffffffffull, mr.core_context);
	ASSERT_EQ(0, pmh_dereg(self->pmh, mr.handle));
	ASSERT_EQ(0, gpu_free(self->gpu, handle));
}

/* The persistent client pins once per registration (acquire's pin is handed to get_pages), where
 * nvidia-peermem pins, unpins and pins again. */
TEST_F(gpu, persistent_registration_pins_once)
{
	long long pins, ppins;
	struct pmh_reg_mr mr;
	__u64 handle;
	uint8_t *va;

	if (split_topology())
		SKIP(return, "GPU and NIC are under different root ports in this VM variant");
	va = gpu_alloc(self->gpu, 4 * GPU_PAGE, &handle);
	ASSERT_NE(NULL, va);
	pins = gpu_counter("total_pins");
	ppins = gpu_counter("total_persistent_pins");
	ASSERT_EQ(0, pmh_reg(self->pmh, va + 10, 3 * GPU_PAGE, PMH_REG_WRITE | PMH_REG_NO_INVALIDATE, &mr));
	EXPECT_EQ(1, gpu_counter("total_pins") - pins);
	EXPECT_EQ(1, gpu_counter("total_persistent_pins") - ppins);
	EXPECT_EQ(4 * GPU_PAGE, peermem_stat("pinned_bytes"));
	ASSERT_EQ(0, pmh_dereg(self->pmh, mr.handle));
	ASSERT_EQ(0, gpu_free(self->gpu, handle));
}

/*
 * A GPU reset is refused while the GPU is in use (the stand-in's model of nvidia-smi's refusal of a
 * GPU RM reports in use): while a CUDA context (an open GPU file) or a persistent pin
 * (nvidia_dev_get_uuid's kernel client) holds it. The owner of registered memory
 * holds it anyway; what the registration adds shows once the owner is gone. The invalidating
 * flavour's persistent pin goes after the free's callback, so the GPU can be reset then, as with
 * nvidia-peermem 550's invalidating client (no persistent pin); the persistent flavour keeps the
 * memory and the GPU until the MR goes, as nvidia-peermem's persistent clients (nv_mem_nc, and
 * 560+'s default) do.
 */
TEST_F(gpu, a_gpu_reset_is_refused_while_a_context_or_a_persistent_pin_holds_it)
{
	long long refused = gpu_counter("reset_refusals"), resets = gpu_counter("resets");
	struct pmh_reg_mr mr;
	__u64 handle;
	uint8_t *va;

	if (split_topology())
		SKIP(return, "GPU and NIC are under different root ports in this VM variant");
	va = gpu_alloc(self->gpu, GPU_PAGE, &handle);
	ASSERT_NE(NULL, va);
	ASSERT_EQ(0, pmh_reg(self->pmh, va, GPU_PAGE, PMH_REG_WRITE, &mr));
	/* The owner's context holds the GPU; so does the registration's persistent pin. */
	EXPECT_EQ(-EBUSY, write_text(GPU_DEBUGFS "/reset", "1"));
	EXPECT_EQ(1, gpu_counter("kernel_clients"));
	/* The owner goes, as at its exit: its mapping and its file, the context, and with it the
	 * memory (the mapping alone keeps the file open). */
	ASSERT_EQ(0, munmap(va, GPU_PAGE));
	ASSERT_EQ(0, close(self->gpu));
	self->gpu = -1;
	EXPECT_EQ(0, gpu_counter("user_clients"));
	if (invalidating_mode()) {
		EXPECT_TRUE(stat_becomes("pinned_bytes", 0));
		EXPECT_EQ(0, gpu_counter("kernel_clients"));
		EXPECT_EQ(0, write_text(GPU_DEBUGFS "/reset", "1"));
		EXPECT_EQ(resets + 1, gpu_counter("resets"));
	} else {
		EXPECT_EQ(1, gpu_counter("kernel_clients"));
		EXPECT_EQ(-EBUSY, write_text(GPU_DEBUGFS "/reset", "1"));
		EXPECT_EQ(refused + 2, gpu_counter("reset_refusals"));
	}
	ASSERT_EQ(0, pmh_dereg(self->pmh, mr.handle));
	EXPECT_EQ(0, gpu_counter("kernel_clients"));
	EXPECT_EQ(0, write_text(GPU_DEBUGFS "/reset", "1"));
}

/* The module cannot go while a registration uses it, and can once it is gone. */
TEST_F(gpu, rmmod_refused_while_registered)
{
	struct pmh_reg_mr mr;
	__u64 handle;
	uint8_t *va;

	if (split_topology())
		SKIP(return, "GPU and NIC are under different root ports in this VM variant");
	va = gpu_alloc(self->gpu, GPU_PAGE, &handle);
	ASSERT_NE(NULL, va);
	ASSERT_EQ(0, pmh_reg(self->pmh, va, GPU_PAGE, PMH_REG_WRITE, &mr));
	EXPECT_EQ(-EAGAIN, mod_unload("peermem_rs"));
	EXPECT_TRUE(mod_loaded("peermem_rs"));
	ASSERT_EQ(0, pmh_dereg(self->pmh, mr.handle));
	ASSERT_EQ(0, gpu_free(self->gpu, handle));
}

/* Errors of the NVIDIA driver reach the caller, each counted under its cause and explained. Both
 * flavours probe with a persistent pin in acquire (kept as the registration's pin): its failure
 * means "not mine" (the caller then sees the pinning error, EFAULT, unless the next client takes
 * the range). The invalidating flavour pins once more, in get_pages, with nvidia_p2p_get_pages
 * (its callback's pin); a failure of that, or of dma_map, is returned as is. */
TEST_F_TIMEOUT(gpu, driver_errors_propagate_with_their_cause, 120)
{
	static const struct {
		const char *fn;		/* stand-in function to fail (its first call from now) */
		int probe;		/* 1: fails acquire's pin; 0: the registration's own call */
		int invalidating_only;
		int err;
		const char *cause, *says;
	} cases[] = {
		{ "get_pages", 0, 1, EIO, "error_driver_error", "the NVIDIA driver failed" },
		{ "get_pages", 0, 1, ENOMEM, "error_bar1_exhausted", "BAR1 aperture is full" },
		{ "get_pages_persistent", 1, 0, ENOMEM, "error_bar1_exhausted", "BAR1 aperture is full" },
		{ "get_pages_persistent", 1, 0, 524, "error_persistent_pins_unsupported", "refuses persistent pins" },
		{ "dma_map_pages", 0, 0, 524, "error_topology_unsupported", "refuses peer-to-peer DMA" },
		{ "dma_map_pages", 0, 0, ENOMEM, "error_out_of_memory", "out of kernel memory" },
	};
	__u64 handle;
	uint8_t *va;

	if (split_topology())
		SKIP(return, "GPU and NIC are under different root ports in this VM variant");
	va = gpu_alloc(self->gpu, GPU_PAGE, &handle);
	ASSERT_NE(NULL, va);
	/* peermem-rs prints at most 10 refusals per 5 s (stats.rs): the tests before this one may
	 * have used the window up, so start a new one; the 6 cases below fit in it. */
	usleep(5200 * 1000);
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		long long before = peermem_stat(cases[c].cause);
		char inject[64], mark[64];
		struct pmh_reg_mr mr;
		int want;

		if (cases[c].invalidating_only && !invalidating_mode())
			continue;
		want = cases[c].probe ? -EFAULT : -cases[c].err;
		snprintf(inject, sizeof(inject), "%s 1 -%d", cases[c].fn, cases[c].err);
		snprintf(mark, sizeof(mark), "client_test inject %zu %d", c, getpid());
		kmsg_mark(mark);
		ASSERT_EQ(0, write_text(GPU_DEBUGFS "/inject", inject));
		if (cases[c].probe && invalidating_mode()) {
			/* nv_mem's probe failed: "not mine"; the host asks nv_mem_nc, whose own
			 * persistent pin succeeds. */
			EXPECT_EQ(0, pmh_reg(self->pmh, va, GPU_PAGE, PMH_REG_WRITE, &mr)) TH_LOG("%s", inject);
			EXPECT_STREQ("nv_mem_nc", mr.client);
			EXPECT_EQ(0, pmh_dereg(self->pmh, mr.handle));
		} else {
			EXPECT_EQ(want, pmh_reg(self->pmh, va, GPU_PAGE, PMH_REG_WRITE, NULL)) TH_LOG("%s", inject);
		}
		write_text(GPU_DEBUGFS "/inject", "clear");
		EXPECT_EQ(before + 1, peermem_stat(cases[c].cause)) TH_LOG("%s: %s", inject, cases[c].cause);
		EXPECT_TRUE(dmesg_has_since(mark, cases[c].says)) TH_LOG("%s: %s", inject, cases[c].says);
	}
	ASSERT_EQ(0, gpu_free(self->gpu, handle));
}

/* Drivers up to 580 go on after a page of a DMA mapping fails: they unmap the pages before it and
 * return the last page's status, so the mapping comes back as made, with DMA_MAPPING_ERROR in the
 * failed page's entry and addresses that are no longer mapped before it. peermem-rs refuses it
 * (EIO, cause partial_dma_mapping) rather than hand those addresses to the NIC; nvidia-peermem
 * registers it (conformance scenario driver_error.map_half). */
TEST_F_TIMEOUT(gpu, a_dma_mapping_the_driver_half_made_is_refused, 60)
{
	long long before = peermem_stat("error_partial_dma_mapping");
	long long half = gpu_counter("half_mappings");
	char mark[64];
	__u64 handle;
	uint8_t *va;

	if (split_topology())
		SKIP(return, "not applicable: GPU and NIC are under different root ports in this VM variant (the driver refuses every mapping)");
	va = gpu_alloc(self->gpu, 4 * GPU_PAGE, &handle);
	ASSERT_NE(NULL, va);
	/* A new window of the log's rate limit (see driver_errors_propagate_with_their_cause). */
	usleep(5200 * 1000);
	snprintf(mark, sizeof(mark), "client_test half mapping %d", getpid());
	kmsg_mark(mark);
	ASSERT_EQ(0, write_text(GPU_DEBUGFS "/dma_map_fail_page", "2"));
	EXPECT_EQ(-EIO, pmh_reg(self->pmh, va, 4 * GPU_PAGE, PMH_REG_WRITE, NULL));
	write_text(GPU_DEBUGFS "/dma_map_fail_page", "0");
	/* The driver did report the mapping as made. */
	EXPECT_EQ(half + 1, gpu_counter("half_mappings"));
	EXPECT_EQ(before + 1, peermem_stat("error_partial_dma_mapping"));
	EXPECT_TRUE(dmesg_has_since(mark, "a page of it failed to map"));
	ASSERT_EQ(0, gpu_free(self->gpu, handle));
}

/* GPU and NIC under different root ports: the driver refuses, and peermem-rs explains. */
TEST_F(gpu, topology_refusal_is_explained)
{
	long long before = peermem_stat("error_topology_unsupported");
	char mark[64];
	__u64 handle;
	uint8_t *va;

	if (!split_topology())
		SKIP(return, "GPU and NIC share a PCIe switch in this VM variant");
	va = gpu_alloc(self->gpu, GPU_PAGE, &handle);
	ASSERT_NE(NULL, va);
	snprintf(mark, sizeof(mark), "client_test topology %d", getpid());
	kmsg_mark(mark);
	EXPECT_EQ(-524, pmh_reg(self->pmh, va, GPU_PAGE, PMH_REG_WRITE, NULL));
	EXPECT_EQ(before + 1, peermem_stat("error_topology_unsupported"));
	EXPECT_TRUE(dmesg_has_since(mark, "NVreg_GrdmaPciTopoCheckOverride"));
	ASSERT_EQ(0, gpu_free(self->gpu, handle));
}

/* Free and deregistration racing, with the driver's free callback slowed down to widen the window.
 * Every interleaving must end clean, with no splat (the runner checks the kernel log). */
struct race {
	int gpu, pmh;
	__u64 handle, mr;
};

static void *race_free(void *arg)
{
	struct race *r = arg;

	gpu_free(r->gpu, r->handle);
	return NULL;
}

TEST_F(gpu, free_races_deregistration)
{
	if (split_topology())
		SKIP(return, "GPU and NIC are under different root ports in this VM variant");
	for (int i = 0; i < 12; i++) {
		struct race r = { .gpu = self->gpu, .pmh = self->pmh };
		struct pmh_reg_mr mr;
		pthread_t t;
		uint8_t *va = gpu_alloc(self->gpu, 2 * GPU_PAGE, &r.handle);
		char delay[16];

		ASSERT_NE(NULL, va);
		ASSERT_EQ(0, pmh_reg(self->pmh, va, 2 * GPU_PAGE, PMH_REG_WRITE, &mr));
		r.mr = mr.handle;
		snprintf(delay, sizeof(delay), "%d", (i % 4) * 5);
		ASSERT_EQ(0, write_text(GPU_DEBUGFS "/free_callback_delay_ms", delay));
		ASSERT_EQ(0, pthread_create(&t, NULL, race_free, &r));
		usleep((i % 3) * 2000);
		EXPECT_EQ(0, pmh_dereg(self->pmh, r.mr));
		pthread_join(t, NULL);
	}
	write_text(GPU_DEBUGFS "/free_callback_delay_ms", "0");
}

/* The statistics count what happened. */
TEST_F(gpu, statistics_follow_registrations)
{
	long long acquired = peermem_stat("acquired"), regs = peermem_stat("registrations");
	long long rel = peermem_stat("releases");
	struct pmh_reg_mr mr[3];
	__u64 handle;
	uint8_t *va;

	if (split_topology())
		SKIP(return, "GPU and NIC are under different root ports in this VM variant");
	va = gpu_alloc(self->gpu, 3 * GPU_PAGE, &handle);
	ASSERT_NE(NULL, va);
	for (int i = 0; i < 3; i++)
		ASSERT_EQ(0, pmh_reg(self->pmh, va + i * GPU_PAGE, GPU_PAGE, PMH_REG_WRITE, &mr[i]));
	EXPECT_EQ(3, peermem_stat("live_registrations"));
	EXPECT_EQ(3 * GPU_PAGE, peermem_stat("pinned_bytes"));
	EXPECT_EQ(acquired + 3, peermem_stat("acquired"));
	EXPECT_EQ(regs + 3, peermem_stat("registrations"));
	if (path_exists(MEMORY_PEERS))	/* a host with memory_peers (kernels before 6.6) */
		EXPECT_EQ(3, peer_stat(mr[0].client, "num_alloc_mrs") -
			     peer_stat(mr[0].client, "num_dealloc_mrs"));
	for (int i = 0; i < 3; i++)
		ASSERT_EQ(0, pmh_dereg(self->pmh, mr[i].handle));
	EXPECT_EQ(rel + 3, peermem_stat("releases"));
	ASSERT_EQ(0, gpu_free(self->gpu, handle));
}

/*
 * A line "NAME CALLS NS" of peermem-rs's time file: its calls (and ns), 0 when it has no line, -1
 * when the file cannot be read.
 */
static long long time_calls(const char *name, long long *ns)
{
	long long calls = 0;
	int found;

	*ns = 0;
	found = read_named(PEERMEM_TIME, name, &calls, ns);
	return found < 0 ? -1 : found ? calls : 0;
}

/* Whether the time file has any line but the clock's calibration (timing.*): something counted. */
static int time_counted_anything(void)
{
	char buf[16384], *line;

	if (read_text(PEERMEM_TIME, buf, sizeof(buf)))
		return -1;
	for (line = strtok(buf, "\n"); line; line = strtok(NULL, "\n"))
		if (strncmp(line, "timing.", 7))
			return 1;
	return 0;
}

/*
 * From one reading of the time file: @entry's total, own and outside time (its nvidia_p2p_* steps,
 * host_invalidate and barrier_retry_sleep), in ns; the calls of its total. -1 if unreadable.
 */
static long long time_entry(const char *entry, long long *total, long long *own, long long *outside)
{
	char buf[16384], *line;
	size_t elen = strlen(entry);
	long long calls = 0;

	*total = *own = *outside = 0;
	if (read_text(PEERMEM_TIME, buf, sizeof(buf)))
		return -1;
	for (line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
		char name[96];
		long long c, ns;

		if (sscanf(line, "%95s %lld %lld", name, &c, &ns) != 3 || strncmp(name, entry, elen) ||
		    name[elen] != '.')
			continue;
		if (!strcmp(name + elen + 1, "total")) {
			*total = ns;
			calls = c;
		} else if (!strcmp(name + elen + 1, "own")) {
			*own = ns;
		} else if (!strncmp(name + elen + 1, "nvidia_p2p_", 11) ||
			   !strcmp(name + elen + 1, "host_invalidate") ||
			   !strcmp(name + elen + 1, "barrier_retry_sleep")) {
			*outside += ns;
		}
	}
	return calls;
}

static void reg_dereg(struct __test_metadata *_metadata, int pmh, void *va, size_t len)
{
	struct pmh_reg_mr mr;

	ASSERT_EQ(0, pmh_reg(pmh, va, len, PMH_REG_WRITE, &mr));
	ASSERT_EQ(0, pmh_dereg(pmh, mr.handle));
}

/*
 * The time accounting (time_accounting, docs/time-accounting.md): off by default, and then nothing
 * is counted; on, each entry point of a registration and its deregistration counts once, with its
 * own time no more than its total and the driver calls under it; a write to the file resets it.
 */
TEST_F(gpu, time_accounting_counts_only_when_on)
{
	static const char *const entries[] = {
		"get_pages", "dma_map", "dma_unmap", "put_pages", "release",
	};
	long long ns, own_ns, calls;
	char name[64], on[8] = "";
	__u64 handle;
	uint8_t *va;

	if (split_topology())
		SKIP(return, "GPU and NIC are under different root ports in this VM variant");
	ASSERT_EQ(0, read_text(PARAMS "time_accounting", on, sizeof(on)));
	ASSERT_STREQ("N", on) TH_LOG("time_accounting is not off by default");
	ASSERT_EQ(0, write_text(PEERMEM_TIME, "0"));
	va = gpu_alloc(self->gpu, 2 * GPU_PAGE, &handle);
	ASSERT_NE(NULL, va);

	reg_dereg(_metadata, self->pmh, va, 2 * GPU_PAGE);
	EXPECT_EQ(0, time_counted_anything()) TH_LOG("counted while off");

	ASSERT_EQ(0, write_text(PARAMS "time_accounting", "1"));
	reg_dereg(_metadata, self->pmh, va, 2 * GPU_PAGE);
	ASSERT_EQ(0, write_text(PARAMS "time_accounting", "0"));
	/* acquire: once per client the host asked before ours claimed the memory. */
	calls = time_calls("acquire.total", &ns);
	EXPECT_LE(1, calls);
	EXPECT_GE(2, calls);
	for (size_t i = 0; i < sizeof(entries) / sizeof(entries[0]); i++) {
		long long total, own, outside;

		snprintf(name, sizeof(name), "%s.total", entries[i]);
		EXPECT_EQ(1, time_calls(name, &ns)) TH_LOG("%s", name);
		EXPECT_LT(0, ns) TH_LOG("%s: no time", name);
		snprintf(name, sizeof(name), "%s.own", entries[i]);
		EXPECT_EQ(1, time_calls(name, &own_ns)) TH_LOG("%s", name);
		/* own is the total less the time outside the module, in one reading */
		EXPECT_EQ(1, time_entry(entries[i], &total, &own, &outside)) TH_LOG("%s", entries[i]);
		EXPECT_EQ(total - outside, own) TH_LOG("%s: own %lld, total %lld, outside %lld",
						       entries[i], own, total, outside);
	}
	/* acquire pins P persistently each time it is called (the stand-in has the persistent API) */
	EXPECT_EQ(calls, time_calls("acquire.nvidia_p2p_get_pages_persistent", &ns));
	EXPECT_EQ(1, time_calls("dma_map.nvidia_p2p_dma_map_pages", &ns));
	EXPECT_EQ(1, time_calls("dma_unmap.nvidia_p2p_dma_unmap_pages", &ns));
	EXPECT_EQ(1, time_calls("dma_map.sg_fill", &ns));

	/* Off again: nothing more is counted; a write resets. */
	reg_dereg(_metadata, self->pmh, va, 2 * GPU_PAGE);
	EXPECT_EQ(1, time_calls("dma_map.total", &ns)) TH_LOG("counted after it was turned off");
	EXPECT_EQ(1, time_calls("release.total", &ns)) TH_LOG("counted after it was turned off");
	ASSERT_EQ(0, write_text(PEERMEM_TIME, "0"));
	EXPECT_EQ(0, time_counted_anything()) TH_LOG("not reset by a write");
	ASSERT_EQ(0, gpu_free(self->gpu, handle));
}

TEST_HARNESS_MAIN
