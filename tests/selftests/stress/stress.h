/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Helpers shared by the stress collection's programs: the client under test (peermem-rs, or
 * NVIDIA's nvidia-peermem for the side-by-side runs), its statistics, and the kernel's failslab /
 * fail_page_alloc scoped to the client's code. Header-only, libc only.
 */
#ifndef PEERMEM_SELFTESTS_STRESS_H
#define PEERMEM_SELFTESTS_STRESS_H

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpumem.h"
#include "pmh.h"

#define NV_MODULE "nvidia_p2p_standin"
#define HOST_MODULE "peer_mem_host"
#define FAILSLAB "/sys/kernel/debug/failslab"
#define FAIL_PAGE_ALLOC "/sys/kernel/debug/fail_page_alloc"

/* The client's module name in /sys/module: "peermem_rs" or "nvidia_peermem". */
static inline const char *client_module(const char *client)
{
	return !strcmp(client, "peermem_rs") ? "peermem_rs" : "nvidia_peermem";
}

/* Does @client keep peermem-rs's statistics? (NVIDIA's module has none.) */
static inline int client_has_stats(const char *client)
{
	return !strcmp(client, "peermem_rs");
}

/* A line "key value" of peermem-rs's statistics; -1 if missing. */
static inline long long peermem_stat(const char *key)
{
	char buf[8192], *line, *save = NULL;
	size_t klen = strlen(key);

	if (read_text("/sys/kernel/debug/peermem_rs/stats", buf, sizeof(buf)))
		return -1;
	for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
		if (!strncmp(line, key, klen) && line[klen] == ' ')
			return strtoll(line + klen + 1, NULL, 10);
	return -1;
}

/*
 * The text of module @mod: [*start, *end) from /proc/kallsyms, its lowest function to a page past
 * its highest (a module's text lives in pages of its own, so that page holds nothing else).
 * With @init, the .init.text functions count too (they exist only while the module loads).
 */
static inline int module_text(const char *mod, uint64_t *start, uint64_t *end)
{
	char line[512], want[80];
	FILE *f = fopen("/proc/kallsyms", "r");

	*start = UINT64_MAX;
	*end = 0;
	if (!f)
		return -1;
	snprintf(want, sizeof(want), "[%s]", mod);
	while (fgets(line, sizeof(line), f)) {
		unsigned long long a;
		char type, name[400], m[80] = "";

		if (sscanf(line, "%llx %c %399s %79s", &a, &type, name, m) < 4 || strcmp(m, want))
			continue;
		if (type != 't' && type != 'T')
			continue;
		if (a < *start)
			*start = a;
		if (a > *end)
			*end = a;
	}
	fclose(f);
	if (*start == UINT64_MAX)
		return -1;
	*end = (*end + 2 * 4096) & ~4095ull;
	return 0;
}

static inline void fault_write(const char *attr, const char *file, const char *value)
{
	char path[256];

	snprintf(path, sizeof(path), "%s/%s", attr, file);
	if (write_text(path, value))
		fprintf(stderr, "# cannot write %s to %s\n", value, path);
}

static inline void fault_write_u64(const char *attr, const char *file, uint64_t v, int hex)
{
	char buf[32];

	snprintf(buf, sizeof(buf), hex ? "%#" PRIx64 : "%" PRIu64, v);
	fault_write(attr, file, buf);
}

/*
 * Points failslab and fail_page_alloc at [start, end): only allocations with a return address in
 * that range on their stack can fail, each attribute failing GFP_KERNEL allocations too and
 * order-0 pages. Probability and times are the caller's (fail-nth needs neither).
 */
static inline void fault_scope(uint64_t start, uint64_t end)
{
	const char *attrs[] = { FAILSLAB, FAIL_PAGE_ALLOC };

	for (int i = 0; i < 2; i++) {
		fault_write(attrs[i], "probability", "0");
		fault_write_u64(attrs[i], "require-start", start, 1);
		fault_write_u64(attrs[i], "require-end", end, 1);
		fault_write(attrs[i], "stacktrace-depth", "32");
		fault_write(attrs[i], "ignore-gfp-wait", "N");
		fault_write(attrs[i], "task-filter", "N");
		fault_write(attrs[i], "interval", "1");
		fault_write(attrs[i], "space", "0");
	}
	fault_write(FAIL_PAGE_ALLOC, "min-order", "0");
	fault_write(FAIL_PAGE_ALLOC, "ignore-gfp-highmem", "N");
}

/* Back to the kernel's defaults: nothing fails. */
static inline void fault_unscope(void)
{
	const char *attrs[] = { FAILSLAB, FAIL_PAGE_ALLOC };

	for (int i = 0; i < 2; i++) {
		fault_write(attrs[i], "probability", "0");
		fault_write(attrs[i], "times", "1");
		fault_write(attrs[i], "require-start", "0");
		fault_write(attrs[i], "require-end", "0xffffffffffffffff");
		fault_write(attrs[i], "ignore-gfp-wait", "Y");
		fault_write(attrs[i], "verbose", "2");
	}
	fault_write(FAIL_PAGE_ALLOC, "min-order", "1");
	fault_write(FAIL_PAGE_ALLOC, "ignore-gfp-highmem", "Y");
}

/*
 * Everything of peermem-rs, the host and the NVIDIA stand-in back to zero within 5 s (the client's
 * work item may still be letting go): module references, MRs, registrations, pinned bytes, pins,
 * tables, DMA mappings, allocations and BAR1. @kept_pins pins (and their BAR1) may stay with the
 * driver (one whose unpin it refused). Returns 1, or 0 with what is left in @why.
 */
static inline int all_clear(long long kept_pins, char *why, size_t len)
{
	for (int i = 0; i < 50; i++) {
		int loaded = mod_loaded("peermem_rs");
		long long refcnt = loaded ? read_number("/sys/module/peermem_rs/refcnt") : 0;
		long long live_mrs = pmh_counter("live_mrs");
		long long regs = loaded ? peermem_stat("live_registrations") : 0;
		long long pinned = loaded ? peermem_stat("pinned_bytes") : 0;
		long long pins = gpu_counter("live_pins"), tables = gpu_counter("live_page_tables");
		long long maps = gpu_counter("live_dma_mappings");
		long long allocs = gpu_counter("live_allocations");

		/* A kept pin stays pinned: the driver keeps its memory and BAR1 alive, and the
		 * client keeps counting its bytes as pinned (they are). */
		if (!refcnt && !live_mrs && !regs && (kept_pins || !pinned) && pins == kept_pins &&
		    tables == kept_pins && !maps && allocs <= kept_pins &&
		    (kept_pins || !gpu_counter("bar1_pinned_bytes")))
			return 1;
		snprintf(why, len, "refcnt %lld live_mrs %lld live_registrations %lld pinned_bytes %lld "
			 "live_pins %lld live_page_tables %lld live_dma_mappings %lld live_allocations %lld"
			 " (%lld pins kept by the driver expected)", refcnt, live_mrs, regs, pinned, pins,
			 tables, maps, allocs, kept_pins);
		usleep(100 * 1000);
	}
	return 0;
}

#endif /* PEERMEM_SELFTESTS_STRESS_H */
