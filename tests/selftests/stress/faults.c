// SPDX-License-Identifier: GPL-2.0
/*
 * The fault-injection sweep: every nvidia_p2p_* call peermem-rs makes, and every allocation in
 * peermem-rs's own code on the path of a host or driver call, made to fail in turn, once each, in
 * a fixed scenario (register a two-page range, move data through it, deregister it; register a
 * second range, cudaFree its memory while it is live, deregister it; cudaFree the first range's
 * memory, whose pin the invalidating client left lingering, and wait until every registration is
 * gone, so that the work item's calls after that free are made while the injection is armed). After each injection the
 * scenario's process exits and everything must be back to zero: the host's MRs, the client's
 * registrations, pinned bytes and module references, and the NVIDIA stand-in's pins, tables, DMA
 * mappings and BAR1 (except the one thing the driver keeps on purpose: a persistent pin whose
 * put_pages_persistent it refused, which only a reload of the driver frees; that is checked to
 * be exactly the refused pin). Every failed call must return a proper errno; the runner fails the
 * test on any kernel splat, and each injection is marked in the kernel log ("peermem-faults:").
 *
 * Driver call sites: the NVIDIA stand-in's `inject` ("<fn> <nth> <errno>"): for each function,
 * the 1st, 2nd, ... call from the start of the scenario until one the scenario does not reach.
 * Allocation sites: the kernel's failslab and fail_page_alloc through the scenario task's
 * /proc/thread-self/fail-nth, scoped to peermem-rs's text with the stack-trace filter (stress.h
 * fault_scope), so only allocations made by peermem-rs's code count: the 1st, 2nd, ... of each
 * scenario step until one the step does not reach. Each site is listed ("# site ...").
 *
 * The program loads the stand-ins and peermem-rs itself (a refused persistent unpin needs a fresh
 * driver), in each client configuration. KTAP: four tests per configuration.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gpumem.h"
#include "pmh.h"
#include "stress.h"

#define GPU_PAGE NVP2P_GPU_PAGE_SIZE
#define MAX_NTH 64

enum step { S_ALLOC, S_REG_A, S_DMA_A, S_DEREG_A, S_REG_B, S_FREE_B, S_DEREG_B, S_FREE_A, S_NR };
static const char *const step_names[S_NR] = {
	"GPU allocation", "register 2 pages", "DMA write+read", "deregister", "register 1 page",
	"cudaFree with it live", "deregister after the free", "cudaFree after the deregistration",
};

/* Until peermem-rs holds no registration (its work item lets go after a free's callback), at most
 * 5 s; the persistent client's are gone at their release already. */
static void registrations_gone(void)
{
	for (int i = 0; i < 500 && mod_loaded("peermem_rs") &&
			peermem_stat("live_registrations") > 0; i++)
		usleep(10 * 1000);
}

static const char *const driver_fns[] = {
	"get_pages", "get_pages_persistent", "put_pages", "put_pages_persistent", "dma_map_pages",
	"dma_unmap_pages",
};
#define NFNS (sizeof(driver_fns) / sizeof(driver_fns[0]))

struct outcome {
	int ret[S_NR];		/* 0 or -errno of each step; 1: not run */
	int fired_at;		/* the step in which the injection fired, or -1 */
	int mismatches;		/* bytes the NIC or the CPU saw wrong */
};

static struct outcome *out;	/* shared with the scenario's process */

static int proper_errno(int ret)
{
	static const int ok[] = { 0, -EFAULT, -ENOMEM, -EINVAL, -EIO, -524 /* ENOTSUPP */, -EBUSY,
				  -EACCES, -ENOSPC, -EAGAIN };

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
		if (ret == ok[i])
			return 1;
	return 0;
}

static void kmsg(const char *fmt, ...)
{
	char buf[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	write_text("/dev/kmsg", buf);
}

/* fail-nth of the calling thread: arm with n > 0; read back 0 when the n-th call failed. */
static void fail_nth_set(unsigned int n)
{
	char v[16];

	snprintf(v, sizeof(v), "%u", n);
	write_text("/proc/thread-self/fail-nth", v);
}

static long long fail_nth_get(void)
{
	return read_number("/proc/thread-self/fail-nth");
}

/*
 * The scenario, in a process of its own. @slab_step/@slab_nth: arm fail-nth before that step;
 * otherwise a driver injection may have been armed by the caller (its firing is seen in the
 * stand-in's injected_failures).
 */
static void scenario(int slab_step, unsigned int slab_nth)
{
	long long injected = gpu_counter("injected_failures");
	unsigned char w[64], r[64];
	struct pmh_reg_mr reg_a, reg_b;
	__u64 ha = 0, hb = 0;
	char *va = NULL, *vb = NULL;
	int gpu = gpu_open(), pmh = pmh_open();

	for (int s = 0; s < S_NR; s++)
		out->ret[s] = 1;
	out->fired_at = -1;
	out->mismatches = 0;
	if (gpu < 0 || pmh < 0)
		_exit(3);
	for (int i = 0; i < 64; i++)
		w[i] = (unsigned char)(i * 37 + 11);

	for (int s = 0; s < S_NR; s++) {
		int ret = 0;

		if (s == slab_step)
			fail_nth_set(slab_nth);
		switch (s) {
		case S_ALLOC:
			va = gpu_alloc(gpu, 2 * GPU_PAGE, &ha);
			vb = gpu_alloc(gpu, GPU_PAGE, &hb);
			ret = va && vb ? 0 : -errno;
			break;
		case S_REG_A:
			ret = pmh_reg(pmh, va + 4096, 2 * GPU_PAGE - 8192, PMH_REG_WRITE, &reg_a);
			break;
		case S_DMA_A:
			if (out->ret[S_REG_A])
				continue;
			ret = pmh_dma(pmh, reg_a.handle, GPU_PAGE - 32, w, sizeof(w), PMH_DMA_TO_MR);
			if (!ret)
				ret = pmh_dma(pmh, reg_a.handle, GPU_PAGE - 32, r, sizeof(r),
					      PMH_DMA_FROM_MR);
			if (!ret)
				for (int i = 0; i < 64; i++)
					out->mismatches += (r[i] != w[i]) +
							   ((unsigned char)va[4096 + GPU_PAGE - 32 + i] != w[i]);
			break;
		case S_DEREG_A:
			if (out->ret[S_REG_A])
				continue;
			ret = pmh_dereg(pmh, reg_a.handle);
			break;
		case S_REG_B:
			ret = pmh_reg(pmh, vb, GPU_PAGE, PMH_REG_WRITE, &reg_b);
			break;
		case S_FREE_B:
			ret = gpu_free(gpu, hb);
			break;
		case S_DEREG_B:
			if (out->ret[S_REG_B])
				continue;
			ret = pmh_dereg(pmh, reg_b.handle);
			break;
		case S_FREE_A:
			ret = gpu_free(gpu, ha);
			registrations_gone();
			break;
		}
		out->ret[s] = ret;
		if (s == slab_step) {
			if (fail_nth_get() == 0)
				out->fired_at = s;
			fail_nth_set(0);
		} else if (slab_step < 0 && out->fired_at < 0 &&
			   gpu_counter("injected_failures") != injected) {
			out->fired_at = s;
		}
		if (s == S_ALLOC && ret)
			break;
	}
	if (va && out->ret[S_FREE_A])
		gpu_free(gpu, ha);
	_exit(0);
}

static int run_scenario(int slab_step, unsigned int nth)
{
	int status;
	pid_t pid = fork();

	if (pid == 0)
		scenario(slab_step, nth);
	if (pid < 0 || waitpid(pid, &status, 0) != pid)
		return -1;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* ---- modules and the check that nothing is left ------------------------------------------------ */

static const char *client_params;
static const char *host_params;

static int load_all(void)
{
	int ret;

	mod_unload_wait("peermem_rs");
	mod_unload_wait("peer_mem_host");
	mod_unload_wait("nvidia_p2p_standin");
	ret = mod_load("nvidia_p2p_standin.ko", "");
	if (!ret)
		ret = mod_load("peer_mem_host.ko", host_params);
	if (!ret)
		ret = mod_load("peermem_rs.ko", client_params);
	if (ret)
		printf("# cannot load the modules: %s\n", strerror(-ret));
	return ret;
}

/* One injection's verdict: 1 when good. Prints the site. */
static int judge(const char *kind, const char *site, int fired, int *leaks, long long kept)
{
	char why[512] = "", rets[256] = "";
	int good = 1, off = 0;

	for (int s = 0; s < S_NR; s++) {
		if (out->ret[s] == 1)
			continue;
		off += snprintf(rets + off, sizeof(rets) - off, " %s=%d", step_names[s], out->ret[s]);
		if (!proper_errno(out->ret[s]))
			good = 0;
		/* Without an injection every step succeeds. */
		if (!fired && out->ret[s])
			good = 0;
	}
	if (out->mismatches)
		good = 0;
	if (!all_clear(kept, why, sizeof(why))) {
		(*leaks)++;
		printf("# LEFT BEHIND after %s %s: %s\n", kind, site, why);
	}
	printf("# site %s %s: fired in \"%s\";%s%s%s\n", kind, site,
	       out->fired_at >= 0 ? step_names[out->fired_at] : "-", rets,
	       out->mismatches ? " BYTES WRONG" : "", good ? "" : " IMPROPER RESULT");
	return good;
}

static int test_no;
static int failed_tests;

static void result(int ok, const char *fmt, ...)
{
	va_list ap;

	printf("%sok %d ", ok ? "" : "not ", ++test_no);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	failed_tests += !ok;
}

int main(void)
{
	static const struct { const char *client, *host, *name; } configs[] = {
		{ "persistent_api_support=1", "ex_support=1", "persistent" },
		{ "persistent_api_support=0 peerdirect_support=0", "ex_support=1", "invalidating" },
		{ "persistent_api_support=0 peerdirect_support=1", "ex_support=1", "invalidating legacy" },
	};
	const int nconfigs = sizeof(configs) / sizeof(configs[0]);
	int total_sites = 0;

	out = mmap(NULL, sizeof(*out), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (out == MAP_FAILED)
		return 1;
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("TAP version 13\n1..%d\n", nconfigs * 4);
	if (!path_exists(FAILSLAB "/probability") || !path_exists("/proc/thread-self/fail-nth"))
		printf("# no failslab/fail-nth in this kernel (CONFIG_FAULT_INJECTION_DEBUG_FS, "
		       "CONFIG_FAILSLAB): the allocation sweep cannot run\n");

	for (int c = 0; c < nconfigs; c++) {
		int driver_sites = 0, driver_bad = 0, driver_leaks = 0, fns_hit = 0;
		int slab_sites = 0, slab_bad = 0, slab_leaks = 0, slab_ran = 0;
		uint64_t start, end;

		client_params = configs[c].client;
		host_params = configs[c].host;
		printf("# %s: %s, host %s\n", configs[c].name, client_params, host_params);
		if (load_all()) {
			for (int i = 0; i < 4; i++)
				result(0, "%s: cannot load the modules", configs[c].name);
			continue;
		}
		/* A scenario without injection first: it must pass as it is. */
		run_scenario(-1, 0);
		if (!judge("none", "(baseline)", 0, &driver_leaks, 0))
			driver_bad++;

		/* ---- every nvidia_p2p_* call ---- */
		for (size_t f = 0; f < NFNS; f++) {
			int hit = 0;

			for (unsigned int nth = 1; nth <= MAX_NTH; nth++) {
				char cmd[64], site[64];
				long long before = gpu_counter("injected_failures");
				int refused_persistent_unpin;

				snprintf(cmd, sizeof(cmd), "%s %u -5", driver_fns[f], nth);
				snprintf(site, sizeof(site), "%s#%u", driver_fns[f], nth);
				kmsg("peermem-faults: %s driver %s\n", configs[c].name, site);
				write_text(GPU_DEBUGFS "/inject", cmd);
				run_scenario(-1, 0);
				write_text(GPU_DEBUGFS "/inject", "clear");
				if (gpu_counter("injected_failures") == before)
					break;	/* the scenario makes no nth call of this function */
				hit = 1;
				driver_sites++;
				/* The driver keeps a persistent pin whose unpin it refused. */
				refused_persistent_unpin = !strcmp(driver_fns[f], "put_pages_persistent");
				if (!judge("driver", site, 1, &driver_leaks, refused_persistent_unpin))
					driver_bad++;
				if (refused_persistent_unpin) {
					/* Only reloading the driver frees it (the stand-in says so). */
					mod_unload_wait("peermem_rs");
					mod_unload_wait("peer_mem_host");
					mod_unload_wait("nvidia_p2p_standin");
					if (load_all())
						break;
				}
			}
			fns_hit += hit;
			if (!hit)
				printf("# driver function %s: no call in this configuration's scenario\n",
				       driver_fns[f]);
		}
		result(!driver_bad && driver_sites,
		       "%s: %d nvidia_p2p_* call sites failed in turn (%d of %zu functions), every failure a proper errno, no byte wrong",
		       configs[c].name, driver_sites, fns_hit, NFNS);
		result(!driver_leaks, "%s: nothing left behind after any driver failure (%d left)",
		       configs[c].name, driver_leaks);

		/* ---- every allocation of peermem-rs's code ---- */
		if (!path_exists(FAILSLAB "/probability") || !path_exists("/proc/thread-self/fail-nth")) {
			printf("ok %d %s: allocation sweep # SKIP no fault injection in this kernel\n",
			       ++test_no, configs[c].name);
			printf("ok %d %s: allocation sweep leaks # SKIP no fault injection in this kernel\n",
			       ++test_no, configs[c].name);
			continue;
		}
		if (module_text("peermem_rs", &start, &end)) {
			result(0, "%s: no text of peermem_rs in /proc/kallsyms", configs[c].name);
			result(0, "%s: allocation sweep not run", configs[c].name);
			continue;
		}
		fault_scope(start, end);
		fault_write(FAILSLAB, "verbose", "0");
		fault_write(FAIL_PAGE_ALLOC, "verbose", "0");
		printf("# allocations scoped to peermem_rs's text [%#" PRIx64 ", %#" PRIx64 ")\n", start,
		       end);
		for (int s = S_REG_A; s < S_NR; s++) {
			for (unsigned int nth = 1; nth <= MAX_NTH; nth++) {
				char site[96];

				snprintf(site, sizeof(site), "\"%s\" allocation #%u", step_names[s], nth);
				kmsg("peermem-faults: %s alloc step %d nth %u\n", configs[c].name, s, nth);
				run_scenario(s, nth);
				slab_ran++;
				if (out->fired_at != s)
					break;	/* the step makes no nth allocation in peermem-rs */
				slab_sites++;
				if (!judge("alloc", site, 1, &slab_leaks, 0))
					slab_bad++;
			}
		}
		fault_unscope();
		result(!slab_bad && slab_sites,
		       "%s: %d allocation sites of peermem-rs failed in turn, every failure a proper errno",
		       configs[c].name, slab_sites);
		result(!slab_leaks, "%s: nothing left behind after any allocation failure (%d left)",
		       configs[c].name, slab_leaks);
		total_sites += driver_sites + slab_sites;
	}
	mod_unload_wait("peermem_rs");
	mod_unload_wait("peer_mem_host");
	mod_unload_wait("nvidia_p2p_standin");
	printf("# faults totals: %d sites injected, %d tests failed\n", total_sites, failed_tests);
	return failed_tests ? 1 : 0;
}
