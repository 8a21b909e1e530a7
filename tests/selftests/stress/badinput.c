// SPDX-License-Identifier: GPL-2.0
/*
 * Bad input to peermem-rs, through the peer-memory host stand-in as a user's ibv_reg_mr would
 * bring it, and through insmod: unaligned, zero-length, wrapping and oversized ranges; another
 * process's GPU addresses; a dma_device that is not a PCI device; repeated deregistration;
 * out-of-range and malformed module parameters; loading twice and beside NVIDIA's nvidia-peermem
 * (another nv_mem client); SIGKILL of a task in the middle of a registration (held at a race
 * gate). Each answer must be success or a proper errno, and after each test every live counter
 * of the client, the host and the NVIDIA stand-in is back to zero (all_clear); the runner fails the
 * test on any kernel splat. Every input tried is logged ("# input ...").
 *
 * The fixture loads the stand-ins and peermem-rs itself, persistent and invalidating.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kselftest_harness.h"
#include "gpumem.h"
#include "pmh.h"
#include "race.h"
#include "stress.h"

/* A test loads and unloads three modules: seconds each under TCG with KASAN, more when the
 * machine runs two guests. */
#undef TEST_TIMEOUT_DEFAULT
#define TEST_TIMEOUT_DEFAULT 300

#define GPU_PAGE NVP2P_GPU_PAGE_SIZE

static int proper(int ret)
{
	static const int ok[] = { 0, -EFAULT, -ENOMEM, -EINVAL, -EIO, -524 /* ENOTSUPP */, -EBUSY,
				  -EACCES, -ENOENT, -EOVERFLOW, -ERANGE, -EPERM };

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
		if (ret == ok[i])
			return 1;
	return 0;
}

static int load(const char *client_params)
{
	int ret;

	mod_unload_wait("nvidia_peermem");
	mod_unload_wait("peermem_rs");
	mod_unload_wait("peer_mem_host");
	mod_unload_wait("nvidia_p2p_standin");
	ret = mod_load("nvidia_p2p_standin.ko", "");
	if (!ret)
		ret = mod_load("peer_mem_host.ko", "");
	if (!ret && client_params)
		ret = mod_load("peermem_rs.ko", client_params);
	return ret;
}

FIXTURE(bad) {
	int gpu, pmh;
	char *va;
	__u64 handle;
};

FIXTURE_VARIANT(bad) {
	const char *params;
};

FIXTURE_VARIANT_ADD(bad, persistent) {
	.params = "persistent_api_support=1",
};

FIXTURE_VARIANT_ADD(bad, invalidating) {
	.params = "persistent_api_support=0 peerdirect_support=0",
};

FIXTURE_SETUP(bad)
{
	ASSERT_EQ(0, load(variant->params));
	self->gpu = gpu_open();
	self->pmh = pmh_open();
	ASSERT_LE(0, self->gpu);
	ASSERT_LE(0, self->pmh);
	self->va = gpu_alloc(self->gpu, 2 * GPU_PAGE, &self->handle);
	ASSERT_NE(NULL, self->va);
}

FIXTURE_TEARDOWN(bad)
{
	char why[512] = "";

	close(self->pmh);
	if (self->va)
		gpu_free(self->gpu, self->handle);
	close(self->gpu);
	write_text("/sys/module/peer_mem_host/parameters/nonpci_dma_device", "0");
	race_clear("peer_mem_host");
	race_clear("nvidia_p2p_standin");
	EXPECT_TRUE(all_clear(0, why, sizeof(why))) TH_LOG("left behind: %s", why);
	EXPECT_EQ(0, mod_unload_wait("peermem_rs"));
}

/* Registers [addr, addr+len): success or a proper errno; a success is used and deregistered. */
static int try_range(struct __test_metadata *_metadata, int pmh, uintptr_t addr, uint64_t len,
		     const char *what)
{
	struct pmh_reg_mr reg;
	int ret = pmh_reg(pmh, (void *)addr, len, PMH_REG_WRITE, &reg);
	TH_LOG("input %s: %#lx+%#llx -> %s", what, (unsigned long)addr, (unsigned long long)len,
	       ret ? strerror(-ret) : "registered");
	EXPECT_TRUE(proper(ret)) TH_LOG("%s: improper errno %d", what, ret);
	if (!ret) {
		unsigned char b = 0x5a, r = 0;
		uintptr_t lo = addr & ~((uintptr_t)GPU_PAGE - 1);
		uintptr_t hi = (addr + len + GPU_PAGE - 1) & ~((uintptr_t)GPU_PAGE - 1);

		EXPECT_EQ((hi - lo) / GPU_PAGE, reg.nmap);
		/* The NIC writes the last byte and reads it back; the CPU sees it too. */
		EXPECT_EQ(0, pmh_dma(pmh, reg.handle, len - 1, &b, 1, PMH_DMA_TO_MR));
		EXPECT_EQ(0, pmh_dma(pmh, reg.handle, len - 1, &r, 1, PMH_DMA_FROM_MR));
		EXPECT_EQ(b, r);
		EXPECT_EQ(b, *(volatile unsigned char *)(addr + len - 1));
		EXPECT_EQ(0, pmh_dereg(pmh, reg.handle));
	}
	return ret;
}

TEST_F(bad, unaligned_ranges)
{
	uintptr_t va = (uintptr_t)self->va;
	static const struct { uint64_t off, len; } r[] = {
		{ 1, 100 }, { 4095, 4097 }, { GPU_PAGE - 1, 2 }, { 123, 2 * GPU_PAGE - 246 },
		{ 4096, GPU_PAGE }, { GPU_PAGE, GPU_PAGE - 1 }, { 0, 1 }, { 2 * GPU_PAGE - 1, 1 },
	};

	for (size_t i = 0; i < sizeof(r) / sizeof(r[0]); i++)
		try_range(_metadata, self->pmh, va + r[i].off, r[i].len, "unaligned");
}

TEST_F(bad, zero_length)
{
	EXPECT_NE(0, try_range(_metadata, self->pmh, (uintptr_t)self->va, 0, "zero-length"));
	EXPECT_NE(0, try_range(_metadata, self->pmh, (uintptr_t)self->va + 77, 0, "zero-length"));
}

TEST_F(bad, wrapping_ranges)
{
	uintptr_t va = (uintptr_t)self->va;

	EXPECT_NE(0, try_range(_metadata, self->pmh, UINTPTR_MAX - 4095, 8192, "wrapping"));
	EXPECT_NE(0, try_range(_metadata, self->pmh, va, UINT64_MAX - va + 2, "wrapping"));
	EXPECT_NE(0, try_range(_metadata, self->pmh, va + 1, UINT64_MAX, "wrapping"));
	EXPECT_NE(0, try_range(_metadata, self->pmh, UINTPTR_MAX - GPU_PAGE + 1, GPU_PAGE,
			       "top of the address space"));
}

TEST_F(bad, oversized_ranges)
{
	uintptr_t va = (uintptr_t)self->va;

	EXPECT_NE(0, try_range(_metadata, self->pmh, va, 3 * GPU_PAGE, "past the allocation"));
	EXPECT_NE(0, try_range(_metadata, self->pmh, va + GPU_PAGE, 2 * GPU_PAGE, "past the allocation"));
	EXPECT_NE(0, try_range(_metadata, self->pmh, va, 1ull << 40, "oversized"));
	EXPECT_NE(0, try_range(_metadata, self->pmh, va - GPU_PAGE, 2 * GPU_PAGE, "before the allocation"));
}

TEST_F(bad, another_process_addresses)
{
	uintptr_t child_va;
	pid_t pid;

	/* The child's mmap may pick the address of ours: give ours back first. */
	ASSERT_EQ(0, gpu_free(self->gpu, self->handle));
	self->va = NULL;
	pid = gpu_alloc_in_child(2 * GPU_PAGE, &child_va);
	ASSERT_LT(0, pid);
	ASSERT_NE(0, child_va);
	/* Not mapped here (or mapped to something else): the driver finds no memory of ours. */
	EXPECT_NE(0, try_range(_metadata, self->pmh, child_va, GPU_PAGE, "another process's GPU VA"));
	gpu_child_end(pid);
}

TEST_F(bad, nonpci_dma_device)
{
	struct pmh_reg_mr reg;
	int ret;

	ASSERT_EQ(0, write_text("/sys/module/peer_mem_host/parameters/nonpci_dma_device", "1"));
	ret = pmh_reg(self->pmh, self->va, GPU_PAGE, PMH_REG_WRITE, &reg);
	TH_LOG("input non-PCI dma_device: %s", ret ? strerror(-ret) : "registered");
	EXPECT_TRUE(proper(ret));
	if (!ret)
		EXPECT_EQ(0, pmh_dereg(self->pmh, reg.handle));
	write_text("/sys/module/peer_mem_host/parameters/nonpci_dma_device", "0");
}

TEST_F(bad, repeated_deregistration)
{
	struct pmh_reg_mr reg;

	ASSERT_EQ(0, pmh_reg(self->pmh, self->va, GPU_PAGE, PMH_REG_WRITE, &reg));
	EXPECT_EQ(0, pmh_dereg(self->pmh, reg.handle));
	for (int i = 0; i < 3; i++) {
		int ret = pmh_dereg(self->pmh, reg.handle);
		TH_LOG("input deregistration #%d of one MR: %s", i + 2, ret ? strerror(-ret) : "0");
		EXPECT_NE(0, ret);
		EXPECT_TRUE(proper(ret));
	}
	EXPECT_NE(0, pmh_dereg_ex(self->pmh, reg.handle, PMH_DEREG_KWORKER));
}

/*
 * SIGKILL of a process held in the middle of registering its own GPU memory (a race gate of the
 * host or the NVIDIA stand-in holds it there, killable); its exit must clean up.
 */
TEST_F(bad, kill_in_the_middle_of_registration)
{
	static const struct { const char *module, *point; } points[] = {
		{ "peer_mem_host", "reg.after_get_pages" },
		{ "peer_mem_host", "reg.after_dma_map" },
		{ "nvidia_p2p_standin", "get_pages_persistent.return" },
	};

	for (size_t i = 0; i < sizeof(points) / sizeof(points[0]); i++) {
		const char *module = points[i].module, *point = points[i].point;
		int status, held;
		pid_t pid;

		ASSERT_EQ(0, race_gate(module, point, 20000));
		pid = fork();
		ASSERT_LE(0, pid);
		if (pid == 0) {
			int gpu = gpu_open(), pmh = pmh_open();
			__u64 h;
			char *va = gpu >= 0 ? gpu_alloc(gpu, GPU_PAGE, &h) : NULL;

			if (!va || pmh < 0)
				_exit(2);
			pmh_reg(pmh, va, GPU_PAGE, PMH_REG_WRITE, NULL);
			_exit(0);
		}
		held = race_wait_held(module, point, 15000);
		TH_LOG("input SIGKILL while held at %s %s (pid %d held: %d)", module, point, pid, held);
		EXPECT_EQ(pid, held);
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
		EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
		race_open(module, point);
	}
	(void)self;
}

TEST(malformed_module_parameters)
{
	static const char *const bad_params[] = {
		"persistent_api_support=2", "persistent_api_support=-1", "persistent_api_support=abc",
		"persistent_api_support=", "peerdirect_support=2", "peerdirect_support=0x100000000",
		"peerdirect_support=yes!",
	};
	char why[512];

	ASSERT_EQ(0, load(NULL));
	for (size_t i = 0; i < sizeof(bad_params) / sizeof(bad_params[0]); i++) {
		int ret = mod_load("peermem_rs.ko", bad_params[i]);
		TH_LOG("input insmod peermem_rs.ko %s: %s", bad_params[i], ret ? strerror(-ret) : "loaded");
		EXPECT_NE(0, ret);
		EXPECT_FALSE(mod_loaded("peermem_rs"));
		mod_unload_wait("peermem_rs");
	}
	EXPECT_EQ(0, pmh_counter("registered_clients"));
	/* An unknown parameter is the kernel's to judge: it logs it and ignores it, for any module. */
	TH_LOG("input insmod peermem_rs.ko no_such_parameter=1: %s",
	       mod_load("peermem_rs.ko", "no_such_parameter=1") ? "refused" : "loaded, ignored");
	EXPECT_EQ(0, mod_unload_wait("peermem_rs"));
	/* A good value still loads. */
	EXPECT_EQ(0, mod_load("peermem_rs.ko", "persistent_api_support=0 peerdirect_support=1"));
	EXPECT_EQ(0, mod_unload_wait("peermem_rs"));
	EXPECT_TRUE(all_clear(0, why, sizeof(why))) TH_LOG("left behind: %s", why);
}

TEST(load_twice_and_beside_another_client)
{
	char why[512];
	int ret;

	ASSERT_EQ(0, load("persistent_api_support=1"));
	ret = mod_load("peermem_rs.ko", "persistent_api_support=0");
	TH_LOG("input insmod peermem_rs.ko a second time: %s", strerror(-ret));
	EXPECT_EQ(-EEXIST, ret);
	EXPECT_EQ(1, pmh_counter("registered_clients"));
	/* The drop-in build (module nvidia_peermem) beside peermem_rs: the name nv_mem is taken. */
	ret = mod_load("dropin/nvidia-peermem.ko", "");
	TH_LOG("input insmod the drop-in nvidia-peermem.ko beside peermem_rs: %s",
	       ret ? strerror(-ret) : "loaded");
	EXPECT_EQ(-EBUSY, ret);
	mod_unload_wait("nvidia_peermem");
	EXPECT_EQ(0, mod_unload_wait("peermem_rs"));
	/* NVIDIA's nvidia-peermem first, then peermem-rs: refused with EBUSY. */
	if (mod_load("nvidia-peermem.ko", "") == 0) {
		ret = mod_load("peermem_rs.ko", "");
		TH_LOG("input insmod peermem_rs.ko beside NVIDIA's nvidia-peermem: %s",
		       ret ? strerror(-ret) : "loaded");
		EXPECT_EQ(-EBUSY, ret);
		EXPECT_FALSE(mod_loaded("peermem_rs"));
		EXPECT_EQ(0, mod_unload_wait("nvidia_peermem"));
	} else {
		TH_LOG("NVIDIA's nvidia-peermem.ko is not in the payload: that half not run");
	}
	mod_unload_wait("peermem_rs");
	EXPECT_EQ(0, pmh_counter("registered_clients"));
	EXPECT_TRUE(all_clear(0, why, sizeof(why))) TH_LOG("left behind: %s", why);
}

/* The harness exits through exit(): unload what the tests loaded. */
static void unload_all(void)
{
	mod_unload_wait("nvidia_peermem");
	mod_unload_wait("peermem_rs");
	mod_unload_wait("peer_mem_host");
	mod_unload_wait("nvidia_p2p_standin");
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	atexit(unload_all);
	return test_harness_run(argc, argv);
}
